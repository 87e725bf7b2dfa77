-- Single-use decisions. An approval allows one execution, claimed by the agent before it runs
-- the tool (the primary key makes a second claim impossible, under any number of replicas), and
-- only within valid_for seconds of the decision (the rule's, kept with the approval as its role
-- is: a policy reload does not move a deadline already shown). The outcome the agent reports
-- afterwards is stored on the claim; none within report_within seconds shows on the card.
ALTER TABLE approvals
    ADD COLUMN valid_for integer NOT NULL DEFAULT 900 CHECK (valid_for > 0),
    ADD COLUMN report_within integer NOT NULL DEFAULT 3600 CHECK (report_within > 0);

CREATE TABLE executions (
    approval_id     text PRIMARY KEY REFERENCES approvals (approval_id),
    claim_id        text NOT NULL UNIQUE,
    -- the caller's key: the same caller retrying a lost answer gets its own claim back
    idempotency_key text NOT NULL,
    claimed_at      timestamptz NOT NULL,
    outcome         text CHECK (outcome IN ('ok', 'error')),
    detail          text,
    reported_at     timestamptz,
    CHECK ((outcome IS NULL) = (reported_at IS NULL))
);

-- the audit reads claims and reports by time
CREATE INDEX executions_claimed_at ON executions (claimed_at);
CREATE INDEX executions_reported_at ON executions (reported_at) WHERE reported_at IS NOT NULL;
