-- Lead-facing turns: who must never decide an approval, and the audit of guard verdicts.

ALTER TABLE approvals ADD COLUMN outsiders jsonb NOT NULL DEFAULT '[]';

-- Every verdict of POST /v1/turns. Append-only.
CREATE TABLE turn_verdicts (
    id             bigserial PRIMARY KEY,
    agent          text NOT NULL,
    session_id     text NOT NULL,
    request_id     text NOT NULL,
    channel        text NOT NULL,
    lead_id        text NOT NULL,
    tool_name      text NOT NULL,
    call_id        text NOT NULL,
    inputs_sha256  text NOT NULL CHECK (inputs_sha256 ~ '^[0-9a-f]{64}$'),
    policy_version text NOT NULL,
    verdict        text NOT NULL CHECK (verdict IN ('allow', 'refuse', 'escalate')),
    rule           text NOT NULL,
    reason_code    text NOT NULL,
    message        text NOT NULL,
    evaluated      jsonb NOT NULL,
    approval_id    text REFERENCES approvals (approval_id),
    at             timestamptz NOT NULL,
    CHECK ((verdict = 'escalate') = (approval_id IS NOT NULL))
);
CREATE INDEX turn_verdicts_by_session ON turn_verdicts (agent, session_id, id);
-- per-lead limits count the allowed calls of one tool for one lead in a recent window
CREATE INDEX turn_verdicts_by_lead ON turn_verdicts (agent, lead_id, tool_name, at)
    WHERE verdict = 'allow';
