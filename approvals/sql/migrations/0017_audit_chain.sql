-- A tamper-evident audit: every audit event is sealed into a hash chain (approvals/audit_chain.py
-- says how each hash is computed; the sealer runs in the background, see Repository.seal).
--
-- Which events a seal covers is decided by transaction ids, not by ids or timestamps: a row with
-- a lower id or an earlier time may commit after a seal has read later ones, and would then be
-- left out for good. Every event row records the id of the transaction that wrote it (xid8, the
-- 64-bit id that never wraps), and a seal covers from_xid <= xid < to_xid where to_xid is the
-- xmin of the sealing transaction's snapshot: every transaction below it has finished, so no
-- event can ever commit into a range already sealed.
--
-- Inserted events take the column default (intake pays nothing more than that); events that
-- are UPDATEs (a timer fired, an outcome reported, a delivery done) set theirs in the UPDATE
-- (queries claim_due_timers, report_outcome, outbox_done).
--
-- The columns are added without a default first and the default set afterwards, so existing
-- rows are not rewritten (a volatile default would rewrite each table under an exclusive lock):
-- rows from before this migration keep NULL and are sealed by the first seal. The NOT VALID
-- checks leave those rows alone but hold for every row written from now on, so a code path that
-- forgets the xid fails at once instead of writing an event no later seal would cover.
ALTER TABLE approvals ADD COLUMN created_xid xid8;
ALTER TABLE approvals ALTER COLUMN created_xid SET DEFAULT pg_current_xact_id();
ALTER TABLE approvals ADD CONSTRAINT approvals_created_xid_check
    CHECK (created_xid IS NOT NULL) NOT VALID;

ALTER TABLE attempts ADD COLUMN xid xid8;
ALTER TABLE attempts ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
ALTER TABLE attempts ADD CONSTRAINT attempts_xid_check CHECK (xid IS NOT NULL) NOT VALID;

ALTER TABLE settlements ADD COLUMN xid xid8;
ALTER TABLE settlements ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
ALTER TABLE settlements ADD CONSTRAINT settlements_xid_check CHECK (xid IS NOT NULL) NOT VALID;

ALTER TABLE turn_verdicts ADD COLUMN xid xid8;
ALTER TABLE turn_verdicts ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
ALTER TABLE turn_verdicts ADD CONSTRAINT turn_verdicts_xid_check
    CHECK (xid IS NOT NULL) NOT VALID;

ALTER TABLE executions
    ADD COLUMN claimed_xid xid8,
    ADD COLUMN reported_xid xid8;
ALTER TABLE executions ALTER COLUMN claimed_xid SET DEFAULT pg_current_xact_id();
ALTER TABLE executions ADD CONSTRAINT executions_claimed_xid_check
    CHECK (claimed_xid IS NOT NULL) NOT VALID;
ALTER TABLE executions ADD CONSTRAINT executions_reported_xid_check
    CHECK (reported_at IS NULL OR reported_xid IS NOT NULL) NOT VALID;

ALTER TABLE timers ADD COLUMN fired_xid xid8;
ALTER TABLE timers ADD CONSTRAINT timers_fired_xid_check
    CHECK (fired_at IS NULL OR fired_xid IS NOT NULL) NOT VALID;

-- Deliveries: a callback delivered (the decision reached the agent) and a card posted (the
-- request reached its reviewers) are audit events; the other kinds (card updates, reminders,
-- escalation posts, pages) repeat what settlements and fired timers record already. No check
-- here: the outbox is the table tooling marks done in bulk (the bench, seeded histories), and a
-- delivery recorded without its xid is caught anyway: verify finds it in seal 1's range (where
-- rows without an xid belong) but not listed there.
ALTER TABLE outbox ADD COLUMN done_xid xid8;

-- The sealer reads each table from the last seal's to_xid on, every few seconds: an index per
-- event column keeps that to the new rows (insert-only tables' indexes grow at their right
-- edge; the partial ones hold only rows that are events).
CREATE INDEX approvals_created_xid ON approvals (created_xid);
CREATE INDEX attempts_xid ON attempts (xid);
CREATE INDEX settlements_xid ON settlements (xid);
CREATE INDEX turn_verdicts_xid ON turn_verdicts (xid);
CREATE INDEX executions_claimed_xid ON executions (claimed_xid);
CREATE INDEX executions_reported_xid ON executions (reported_xid) WHERE reported_xid IS NOT NULL;
CREATE INDEX timers_fired_xid ON timers (fired_xid) WHERE fired_xid IS NOT NULL;
CREATE INDEX outbox_done_xid ON outbox (done_xid)
    WHERE done_xid IS NOT NULL AND kind IN ('callback', 'post_card');

-- One row per seal. The primary key makes a seal number taken once across replicas: two
-- sealers can never both write seal n (the loser inserts nothing), so no range is sealed twice.
-- events: per event, in order, {"kind", "key", "at", "sha256"}: what lets verify name the event
-- that was edited, deleted or inserted. hash chains the seal to prev_hash (the previous seal's
-- hash; 64 zeros for the first).
CREATE TABLE audit_seals (
    seq           bigint PRIMARY KEY CHECK (seq >= 1),
    from_xid      xid8 NOT NULL,
    to_xid        xid8 NOT NULL,
    sealed_at     timestamptz NOT NULL,
    count         integer NOT NULL CHECK (count >= 1),
    events_sha256 text NOT NULL CHECK (events_sha256 ~ '^[0-9a-f]{64}$'),
    prev_hash     text NOT NULL CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    hash          text NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    events        jsonb NOT NULL,
    CHECK (to_xid > from_xid)
);
