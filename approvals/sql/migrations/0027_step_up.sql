-- Step-up (docs/step-up.md): a rule with verify: passkey; the approval keeps the requirement.
ALTER TABLE approvals ADD COLUMN verify text CHECK (verify IN ('passkey'));

-- An approval click on such a rule asks for a passkey; a confirmation that fails is recorded.
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate', 'vote_dropped', 'edited', 'invalid_edit',
                       'invalid_grant', 'outside_organisation', 'guest', 'passkey_asked',
                       'passkey_refused', 'edited_asking_passkey'));

-- One confirmation link: single use, bound to the approval, the clicker, the decision and the
-- arguments' hash; its nonce goes into the passkey challenge with them.
CREATE TABLE step_ups (
    token            text PRIMARY KEY,
    approval_id      text NOT NULL REFERENCES approvals (approval_id),
    slack_user_id    text NOT NULL,
    decision         text NOT NULL CHECK (decision IN ('approve')),
    arguments_sha256 text NOT NULL,
    nonce            text NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    tries            integer NOT NULL DEFAULT 0,
    used_at          timestamptz
);
CREATE INDEX step_ups_approval ON step_ups (approval_id);

-- A person's passkeys (WebAuthn credentials), by Slack user: the public key and the counter.
CREATE TABLE passkeys (
    credential_id  text PRIMARY KEY,
    slack_user_id  text NOT NULL,
    user_handle    text NOT NULL,
    public_key     bytea NOT NULL,
    sign_count     bigint NOT NULL,
    created_at     timestamptz NOT NULL,
    last_used_at   timestamptz
);
CREATE INDEX passkeys_user ON passkeys (slack_user_id);

-- A signed-in browser session of the confirmation page (10 minutes; the id is random).
CREATE TABLE web_sessions (
    session_id     text PRIMARY KEY,
    slack_user_id  text NOT NULL,
    csrf_token     text NOT NULL,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    passkey_at     timestamptz,
    reg_challenge  text
);

-- An edit may route the call to another rule: the edit keeps that rule's requirement too.
ALTER TABLE edits ADD COLUMN verify text CHECK (verify IN ('passkey'));

-- A person's passkeys registered and reset, in the audit chain (no approval: a person's).
CREATE TABLE passkey_events (
    id             bigserial PRIMARY KEY,
    slack_user_id  text NOT NULL,
    event          text NOT NULL CHECK (event IN ('registered', 'reset')),
    data           jsonb NOT NULL,
    at             timestamptz NOT NULL,
    xid            xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX passkey_events_chain ON passkey_events ((coalesce(xid, '0'::xid8)), id);
CREATE INDEX passkey_events_at ON passkey_events (at);
