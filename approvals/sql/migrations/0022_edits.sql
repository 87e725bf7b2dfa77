-- Approve with edits (docs/edits.md). A rule may list argument paths reviewers may change; the
-- approval keeps that list as the policy said at creation, as it keeps its channel.
ALTER TABLE approvals ADD COLUMN editable text[] NOT NULL DEFAULT '{}';

-- Which version of the arguments the approval stands at: 0 as requested, n after its n-th
-- edit. Every vote, settlement and edit compares it as well as the votes (settle_if_pending,
-- edit_if_pending): a vote given to one version never lands on another.
ALTER TABLE approvals ADD COLUMN edit_no integer NOT NULL DEFAULT 0 CHECK (edit_no >= 0);

-- Every edit, append-only: the edited arguments as the RFC 8785 text that was hashed, their
-- hash, the change as an RFC 6902 JSON Patch against the requested arguments, who edited and
-- when, and how the policy routed the edited call (the rule and what it requires, which the
-- approval needs from then on). The approval reads its latest edit (edit_no). An audit event.
CREATE TABLE edits (
    id                   bigserial PRIMARY KEY,
    approval_id          text NOT NULL REFERENCES approvals (approval_id),
    edit_no              integer NOT NULL CHECK (edit_no >= 1),
    requested_sha256     text NOT NULL,  -- the requested arguments' (the approval's own)
    arguments_jcs        text NOT NULL,
    arguments_sha256     text NOT NULL,
    patch                jsonb NOT NULL,
    edited_by            jsonb NOT NULL,
    at                   timestamptz NOT NULL,
    note                 text,
    rule                 text NOT NULL,
    rule_why             text NOT NULL,
    required_role        text NOT NULL,
    required_approvals   integer NOT NULL,
    required_any_of      text[] NOT NULL,
    deny_reason_required boolean NOT NULL,
    valid_for            integer NOT NULL,
    report_within        integer NOT NULL,
    editable             text[] NOT NULL,
    policy_version       text NOT NULL,
    xid                  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (approval_id, edit_no)
);
-- the sealer's and the export's reads (as attempts_xid and 0019's indexes serve attempts)
CREATE INDEX edits_chain ON edits ((coalesce(xid, '0'::xid8)), id);
CREATE INDEX edits_at ON edits (at);

-- An edit is recorded as an attempt of its own (action edit), as a click is; and a click on a
-- version of the arguments that an edit has replaced is refused as such (outcome edited).
ALTER TABLE attempts DROP CONSTRAINT attempts_action_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_action_check
    CHECK (action IN ('approve', 'deny', 'edit'));
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate', 'vote_dropped', 'edited', 'invalid_edit'));
