-- Approvals, their settlement, every click attempt, and the outbox.
-- Postgres enforces the invariants: idempotency keys, one settlement per approval, CHECKs.

CREATE TABLE approvals (
    approval_id        text PRIMARY KEY,
    agent              text NOT NULL,
    session_id         text NOT NULL,
    request_id         text NOT NULL,
    status             text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    tool_name          text NOT NULL,
    call_id            text NOT NULL,
    arguments          jsonb NOT NULL,
    arguments_sha256   text NOT NULL CHECK (arguments_sha256 ~ '^[0-9a-f]{64}$'),
    requester          jsonb NOT NULL,
    summary            text NOT NULL,
    context            jsonb NOT NULL,
    callback_url       text,
    framework          text NOT NULL,
    required_role      text NOT NULL,
    required_approvals integer NOT NULL CHECK (required_approvals >= 1),
    rule               text NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL CHECK (expires_at > created_at),
    policy_version     text NOT NULL,
    fingerprint        text NOT NULL,
    card_channel       text,
    card_ts            text,
    -- idempotency: one approval per request of one agent session
    CONSTRAINT approvals_request_key UNIQUE (agent, session_id, request_id),
    CHECK ((card_channel IS NULL) = (card_ts IS NULL))
);

-- the expiry sweep reads only pending rows
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';

-- The settlement is stored apart from attempts; its primary key makes a second one impossible.
CREATE TABLE settlements (
    approval_id    text PRIMARY KEY REFERENCES approvals (approval_id),
    status         text NOT NULL CHECK (status IN ('approved', 'denied', 'expired', 'cancelled')),
    decided_by     jsonb NOT NULL,
    reason         text,
    decided_at     timestamptz NOT NULL,
    policy_version text NOT NULL
);

-- Every click, whatever its outcome. Append-only.
CREATE TABLE attempts (
    id            bigserial PRIMARY KEY,
    approval_id   text NOT NULL REFERENCES approvals (approval_id),
    slack_user_id text NOT NULL,
    email         text,
    name          text,
    action        text NOT NULL CHECK (action IN ('approve', 'deny')),
    outcome       text NOT NULL
                  CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed',
                                     'stale', 'expired')),
    detail        text NOT NULL,
    at            timestamptz NOT NULL
);
CREATE INDEX attempts_by_approval ON attempts (approval_id, id);

-- Work committed together with a state change, done by the relay after the commit.
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    approval_id     text NOT NULL REFERENCES approvals (approval_id),
    kind            text NOT NULL CHECK (kind IN ('post_card', 'update_card', 'callback')),
    payload         jsonb NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    locked_until    timestamptz,
    done_at         timestamptz,
    dead_at         timestamptz,
    last_error      text,
    CHECK (done_at IS NULL OR dead_at IS NULL)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE done_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_by_approval ON outbox (approval_id, kind);
