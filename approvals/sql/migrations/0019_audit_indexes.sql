-- The audit chain read by index, however much history there is (approvals/audit_chain.py,
-- Repository.seal_audit, verify_audit and audit_export).
--
-- The chain's order. The sealer and verify read each kind of event a range at a time in the
-- chain's order, (transaction id, key), rows from before 0017 (no xid) first as transaction 0:
-- each query (audit_events_*) is one range of one of these indexes, so a seal every few seconds
-- reads the new rows only and a backlog is read a bounded page at a time. They replace the
-- one-column xid indexes of 0017, which those queries no longer use. Text keys are ordered
-- COLLATE "C" (by code point), the order the repository compares them in, whatever the
-- database's collation.
DROP INDEX approvals_created_xid;
DROP INDEX attempts_xid;
DROP INDEX settlements_xid;
DROP INDEX turn_verdicts_xid;
DROP INDEX executions_claimed_xid;
DROP INDEX executions_reported_xid;
DROP INDEX timers_fired_xid;
DROP INDEX outbox_done_xid;
CREATE INDEX approvals_chain ON approvals
    ((coalesce(created_xid, '0'::xid8)), approval_id COLLATE "C");
CREATE INDEX attempts_chain ON attempts ((coalesce(xid, '0'::xid8)), id);
CREATE INDEX settlements_chain ON settlements ((coalesce(xid, '0'::xid8)), approval_id COLLATE "C");
CREATE INDEX turn_verdicts_chain ON turn_verdicts ((coalesce(xid, '0'::xid8)), id);
CREATE INDEX executions_claimed_chain ON executions
    ((coalesce(claimed_xid, '0'::xid8)), approval_id COLLATE "C");
CREATE INDEX executions_reported_chain ON executions
    ((coalesce(reported_xid, '0'::xid8)), approval_id COLLATE "C") WHERE reported_at IS NOT NULL;
CREATE INDEX timers_fired_chain ON timers ((coalesce(fired_xid, '0'::xid8)), id)
    WHERE fired_at IS NOT NULL;
CREATE INDEX outbox_done_chain ON outbox ((coalesce(done_xid, '0'::xid8)), id)
    WHERE done_at IS NOT NULL AND kind IN ('callback', 'post_card');

-- The export (countersign audit export --since) reads each kind's events at or after a time: by
-- that time's index, not a read of the whole history. executions has its two since 0014.
CREATE INDEX approvals_created_at ON approvals (created_at);
CREATE INDEX attempts_at ON attempts (at);
CREATE INDEX settlements_decided_at ON settlements (decided_at);
CREATE INDEX turn_verdicts_at ON turn_verdicts (at);
CREATE INDEX timers_fired_at ON timers (fired_at) WHERE fired_at IS NOT NULL;
CREATE INDEX outbox_done_at ON outbox (done_at)
    WHERE done_at IS NOT NULL AND kind IN ('callback', 'post_card');

-- ... and the seals holding those events (to_xid) or sealed since (sealed_at), each branch by its
-- own index (query audit_seals_for_export).
CREATE INDEX audit_seals_to_xid ON audit_seals (to_xid);
CREATE INDEX audit_seals_sealed_at ON audit_seals (sealed_at);

-- A backlog is sealed in seals of at most audit_chain.SEAL_EVENTS events, so one transaction's
-- events (all the rows from before 0017 are "transaction 0") may be split between two seals: a
-- seal that ends inside them names the first event it does not hold ("kind key"), to_event, and
-- the next seal starts there, from_event. NULL (every seal before this migration): the range
-- starts or ends between two transactions, as before. Such a seal may start and end inside one
-- transaction's events, so its to_xid may equal its from_xid, then with a to_event.
ALTER TABLE audit_seals ADD COLUMN from_event text, ADD COLUMN to_event text;
ALTER TABLE audit_seals DROP CONSTRAINT audit_seals_check;
ALTER TABLE audit_seals ADD CONSTRAINT audit_seals_check
    CHECK (to_xid > from_xid OR to_xid = from_xid AND to_event IS NOT NULL);
