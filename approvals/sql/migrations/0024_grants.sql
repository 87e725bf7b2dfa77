-- Standing grants (docs/grants.md). A rule may let a reviewer, approving one of its calls, also
-- allow more like it; the approval keeps the rule's limits as the policy said at creation (as it
-- keeps its editable paths), for its card's Approve & allow more button.
ALTER TABLE approvals ADD COLUMN grant_limits jsonb;

-- A grant: made on approving approval_id, bounded in time (expires_at) and uses (max_uses), bound
-- to the rule and requirement it was granted under, revocable. uses is counted by one
-- compare-and-set per use (use_grant), so that concurrent calls never take more than max_uses.
CREATE TABLE grants (
    grant_id           text PRIMARY KEY,
    approval_id        text NOT NULL REFERENCES approvals (approval_id),
    agent              text NOT NULL,
    scope              text NOT NULL CHECK (scope IN ('session', 'agent')),
    session_id         text NOT NULL,
    tool_name          text NOT NULL,
    rule               text NOT NULL,
    requirement_sha256 text NOT NULL,
    required           jsonb NOT NULL,
    constraints        jsonb NOT NULL,
    max_uses           integer NOT NULL CHECK (max_uses >= 1),
    uses               integer NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    granted_by         jsonb NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL CHECK (expires_at > created_at),
    revoked_at         timestamptz,
    revoked_by         text,
    policy_version     text NOT NULL
);
-- a submission looks for the live grants of its agent and tool (live_grants)
CREATE INDEX grants_live ON grants (agent, tool_name, expires_at)
    WHERE revoked_at IS NULL AND uses < max_uses;
CREATE INDEX grants_of_approval ON grants (approval_id);

-- An approval approved at once by a grant: which grant, which use of it, of how many.
ALTER TABLE approvals ADD COLUMN grant_id text REFERENCES grants (grant_id);
ALTER TABLE approvals ADD COLUMN grant_use integer;
ALTER TABLE approvals ADD COLUMN grant_of integer;
ALTER TABLE approvals ADD CONSTRAINT approvals_grant_use
    CHECK ((grant_id IS NULL) = (grant_use IS NULL) AND (grant_id IS NULL) = (grant_of IS NULL));

-- What happened to each grant, append-only: granted, used (by approval_id), revoked. An audit
-- event (kind grant), sealed in the chain and exported.
CREATE TABLE grant_events (
    id          bigserial PRIMARY KEY,
    grant_id    text NOT NULL REFERENCES grants (grant_id),
    approval_id text NOT NULL REFERENCES approvals (approval_id),
    event       text NOT NULL CHECK (event IN ('granted', 'used', 'revoked')),
    data        jsonb NOT NULL,
    at          timestamptz NOT NULL,
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX grant_events_chain ON grant_events ((coalesce(xid, '0'::xid8)), id);
CREATE INDEX grant_events_at ON grant_events (at);

-- A grant form's submission that no form of ours sends is recorded as such.
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate', 'vote_dropped', 'edited', 'invalid_edit',
                       'invalid_grant'));
