-- Durable timers: reminders and escalations of pending approvals. Rows, not asyncio sleeps:
-- they survive restarts, and FOR UPDATE SKIP LOCKED + fired_at make each fire once across
-- replicas. (Expiry needs no row: approvals.expires_at, swept with a compare-and-set.)
CREATE TABLE timers (
    id          bigserial PRIMARY KEY,
    approval_id text NOT NULL REFERENCES approvals (approval_id),
    kind        text NOT NULL CHECK (kind IN ('remind', 'escalate')),
    step        integer NOT NULL,
    due_at      timestamptz NOT NULL,
    fired_at    timestamptz,
    CONSTRAINT timers_once UNIQUE (approval_id, kind, step)
);
CREATE INDEX timers_due ON timers (due_at) WHERE fired_at IS NULL;

ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('post_card', 'update_card', 'callback', 'remind', 'escalate'));
