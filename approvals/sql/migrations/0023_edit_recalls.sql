-- A call approved with edits, called again (docs/edits.md): where the agent's framework can only
-- run the call it recorded, the original is refused and the model calls again with exactly the
-- edited arguments; that call is approved at once on the editor's decision, as a new approval
-- naming the original here. One per original (the unique index), and from then on the
-- original can no longer be claimed (claim_execution reads this).
ALTER TABLE approvals ADD COLUMN edit_of text REFERENCES approvals (approval_id);
CREATE UNIQUE INDEX approvals_edit_of ON approvals (edit_of) WHERE edit_of IS NOT NULL;

-- The re-call is found by the edited arguments' hash (recall_candidate).
CREATE INDEX edits_arguments ON edits (arguments_sha256);
