-- Every query the stores run (approvals/repository.py; approvals/audit_store.py, the audit
-- chain's), one per named header, loaded by approvals/sql_loader.py and run by approvals/pg_db.py.

-- name: create_approval
-- A submission in one statement, one round trip (and so one transaction): the approval, its
-- outbox rows, its timers, and the notifications that wake the relay and the timer loop, all
-- only if the approval row was inserted (a repeat of the request ids writes nothing). The
-- outbox and timer rows come as parallel arrays (payloads and pages as JSON text), each with
-- the approval id it names: a row for another approval is refused by the foreign key, and the
-- whole statement with it.
WITH a AS (
    INSERT INTO approvals (
        approval_id, agent, session_id, request_id, status, tool_name, call_id, arguments,
        arguments_sha256, requester, summary, context, callback_url, framework, required_role,
        required_approvals, rule, created_at, expires_at, policy_version, fingerprint, outsiders,
        rule_why, deny_reason_required, required_any_of, arguments_jcs, argument_schemas,
        valid_for, report_within, review_channel, editable, grant_limits, decided_by_policy, verify
    ) VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
              $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $43, $44,
              $45)
    ON CONFLICT ON CONSTRAINT approvals_request_key DO NOTHING
    RETURNING approval_id
), o AS (
    INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at)
    SELECT e.approval_id, e.kind, e.payload::jsonb, e.due, e.due
    FROM a, unnest($31::text[], $32::text[], $33::text[], $34::timestamptz[])
            AS e (approval_id, kind, payload, due)
    RETURNING 1
), t AS (
    INSERT INTO timers (approval_id, kind, step, due_at, page)
    SELECT x.approval_id, x.kind, x.step, x.due, x.page::jsonb
    FROM a, unnest($35::text[], $36::text[], $37::integer[], $38::timestamptz[], $39::text[])
            AS x (approval_id, kind, step, due, page)
    ON CONFLICT ON CONSTRAINT timers_once DO NOTHING
    RETURNING 1
)
SELECT a.approval_id, pg_notify($40, ''),
       -- $42: the earliest moment this approval needs the timer loop (its expiry or a timer)
       pg_notify($41, $42)
FROM a;

-- name: approval_id_by_request
SELECT approval_id FROM approvals WHERE agent = $1 AND session_id = $2 AND request_id = $3;

-- name: get_approvals
-- Approvals with their latest edit, settlement, execution claim, latest callback delivery,
-- latest card post and escalation, by ids.
SELECT a.*, s.status AS settled_status, s.decided_by, s.reason, s.decided_at,
       to_jsonb(ed) AS latest_edit,
       e.claim_id AS execution_claim_id, e.idempotency_key AS execution_key,
       e.claimed_at AS execution_claimed_at, e.outcome AS execution_outcome,
       e.detail AS execution_detail, e.reported_at AS execution_reported_at,
       cb.attempts AS delivery_attempts, cb.last_error AS delivery_last_error,
       cb.done_at AS delivery_done_at, cb.dead_at AS delivery_dead_at,
       cb.id IS NOT NULL AS has_callback,
       (SELECT r.approval_id FROM approvals r WHERE r.edit_of = a.approval_id) AS called_again_as,
       pc.last_error AS card_last_error, pc.dead_at AS card_dead_at,
       (SELECT min(t.fired_at) FROM timers t
        WHERE t.approval_id = a.approval_id AND t.kind = 'escalate') AS escalated_at,
       -- the services its ladder may page, and those a trigger was queued for (settlement
       -- resolves the first; the resolve is sent only for the second)
       ARRAY(SELECT DISTINCT p.service FROM timers t,
                    jsonb_array_elements_text(t.page->'services') AS p (service)
             WHERE t.approval_id = a.approval_id ORDER BY p.service) AS pages,
       ARRAY(SELECT DISTINCT o.payload->>'service' FROM outbox o
             WHERE o.approval_id = a.approval_id AND o.kind = 'page'
               AND o.payload->>'event' = 'trigger'
             ORDER BY 1) AS paged
FROM approvals a
LEFT JOIN settlements s USING (approval_id)
LEFT JOIN executions e USING (approval_id)
LEFT JOIN edits ed ON ed.approval_id = a.approval_id AND ed.edit_no = a.edit_no
LEFT JOIN LATERAL (
    SELECT o.attempts, o.last_error, o.done_at, o.dead_at, o.id FROM outbox o
    WHERE o.approval_id = a.approval_id AND o.kind = 'callback'
    ORDER BY o.id DESC LIMIT 1
) cb ON true
LEFT JOIN LATERAL (
    SELECT o.last_error, o.dead_at FROM outbox o
    WHERE o.approval_id = a.approval_id AND o.kind = 'post_card'
    ORDER BY o.id DESC LIMIT 1
) pc ON true
WHERE a.approval_id = ANY($1::text[]);

-- name: settle_if_pending
-- Compare-and-set: only a pending approval with exactly the votes the caller saw (the same
-- voters in the same order, not merely as many) and the version of the arguments it saw ($5,
-- edit_no) moves, to a settled status or to its new votes; the loser of a race updates nothing.
UPDATE approvals SET status = $2, votes = $3
WHERE approval_id = $1 AND status = 'pending' AND edit_no = $5
  AND ARRAY(SELECT v->>'slack_user_id' FROM jsonb_array_elements(votes) WITH ORDINALITY AS e (v, i)
            ORDER BY i) = $4::text[]
RETURNING approval_id;

-- name: settle_one
-- settle_if_pending and what goes with it in one statement, one round trip (and so one
-- transaction, holding a connection that long only): the compare-and-set ($1-$5 as
-- settle_if_pending's), then only if it moved: the settlements row when it settles ($6, with
-- $7-$9 its reason, decided_at, policy_version), the attempts (parallel arrays $10-$16, in
-- the order given: the votes dropped, then the click's), the outbox rows (parallel arrays as
-- create_approval's for this approval: $17-$18, $19 their due times, $22 the lease of a row
-- written already claimed by the relay of the settling process, else NULL), the relay's
-- wake-up ($20) and, when it settles, the long-polls' ($21); returns the ids of the rows
-- written claimed. Nothing is written when it did not move.
WITH moved AS (
    UPDATE approvals SET status = $2, votes = $3
    WHERE approval_id = $1 AND status = 'pending' AND edit_no = $5
      AND ARRAY(SELECT v->>'slack_user_id'
                FROM jsonb_array_elements(votes) WITH ORDINALITY AS e (v, i) ORDER BY i)
          = $4::text[]
    RETURNING approval_id
), s AS (
    INSERT INTO settlements (approval_id, status, decided_by, reason, decided_at, policy_version)
    SELECT m.approval_id, $2::text, $3::jsonb, $7::text, $8::timestamptz, $9::text
    FROM moved m WHERE $6::boolean
    RETURNING 1
), t AS (
    INSERT INTO attempts (approval_id, slack_user_id, email, name, action, outcome, detail, at)
    SELECT m.approval_id, x.slack_user_id, x.email, x.name, x.action, x.outcome, x.detail, x.at
    FROM moved m,
         unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                $16::timestamptz[]) WITH ORDINALITY
            AS x (slack_user_id, email, name, action, outcome, detail, at, n)
    ORDER BY x.n
    RETURNING 1
), o AS (
    INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at,
                        locked_until, claims, claim_no)
    SELECT m.approval_id, e.kind, e.payload::jsonb, e.due, e.due,
           e.lease, (e.lease IS NOT NULL)::int, (e.lease IS NOT NULL)::int
    FROM moved m,
         unnest($17::text[], $18::text[], $19::timestamptz[], $22::timestamptz[])
            WITH ORDINALITY AS e (kind, payload, due, lease, n)
    ORDER BY e.n
    RETURNING id, locked_until
)
SELECT m.approval_id, pg_notify($20, ''),
       CASE WHEN $6::boolean THEN pg_notify($21, m.approval_id) END,
       ARRAY(SELECT id FROM o WHERE locked_until IS NOT NULL ORDER BY id) AS claimed
FROM moved m;

-- name: settle_batch
-- settle_one for many approvals at once, each at most once: the clicks settling at the same
-- time (group commit: a burst settles in one round trip and one commit, not one each) and the
-- expiry sweep's batch (no attempt, no vote added). Per approval, parallel arrays
-- $1-$9: its id, new status, new votes (JSON), the voters the caller saw (a JSON array of Slack
-- ids, in order), the edit_no it saw, whether it settles, and the settlements row's reason,
-- decided_at and policy_version. Then the attempts ($10-$17, each with its approval's id) and
-- the outbox rows ($18-$22, each with its approval's id; $22 the lease of a row written
-- already claimed, else NULL), inserted in the order given; $23 and $24 the channels as
-- settle_one's. Each approval moves as settle_one moves it (compare-and-set on status, voters
-- and edit_no) and only one that moved gets its rows and notifications. The rows are locked in
-- approval_id order first and a row another transaction holds is skipped, not waited for (so
-- two batches never wait for each other nor deadlock): a click that did not move here is tried
-- alone, where settle_one's compare-and-set decides; an expiry, by the next sweep. (NO KEY
-- UPDATE, what the UPDATE takes: rows being inserted for an approval hold a KEY SHARE lock on
-- it, which does not make it skipped.) Returns, for each approval that moved, the ids of its
-- rows written claimed.
WITH b AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[],
                         $6::boolean[], $7::text[], $8::timestamptz[], $9::text[])
        AS b (approval_id, status, votes, voters, edit_no, settles, reason, decided_at,
              policy_version)
), locked AS MATERIALIZED (
    SELECT approval_id FROM approvals
    WHERE approval_id = ANY($1::text[]) AND status = 'pending'
    ORDER BY approval_id
    FOR NO KEY UPDATE SKIP LOCKED
), moved AS (
    UPDATE approvals a SET status = b.status, votes = b.votes::jsonb
    FROM b JOIN locked USING (approval_id)
    WHERE a.approval_id = b.approval_id AND a.status = 'pending' AND a.edit_no = b.edit_no
      AND jsonb_path_query_array(a.votes, '$[*].slack_user_id') = b.voters::jsonb
    RETURNING a.approval_id
), s AS (
    INSERT INTO settlements (approval_id, status, decided_by, reason, decided_at, policy_version)
    SELECT b.approval_id, b.status, b.votes::jsonb, b.reason, b.decided_at, b.policy_version
    FROM b JOIN moved USING (approval_id)
    WHERE b.settles
    RETURNING 1
), t AS (
    INSERT INTO attempts (approval_id, slack_user_id, email, name, action, outcome, detail, at)
    SELECT x.approval_id, x.slack_user_id, x.email, x.name, x.action, x.outcome, x.detail, x.at
    FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                $16::text[], $17::timestamptz[]) WITH ORDINALITY
            AS x (approval_id, slack_user_id, email, name, action, outcome, detail, at, n)
    WHERE x.approval_id IN (SELECT approval_id FROM moved)
    ORDER BY x.n
    RETURNING 1
), o AS (
    INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at,
                        locked_until, claims, claim_no)
    SELECT e.approval_id, e.kind, e.payload::jsonb, e.due, e.due,
           e.lease, (e.lease IS NOT NULL)::int, (e.lease IS NOT NULL)::int
    FROM unnest($18::text[], $19::text[], $20::text[], $21::timestamptz[], $22::timestamptz[])
            WITH ORDINALITY AS e (approval_id, kind, payload, due, lease, n)
    WHERE e.approval_id IN (SELECT approval_id FROM moved)
    ORDER BY e.n
    RETURNING id, approval_id, locked_until
)
SELECT m.approval_id, pg_notify($23, ''),
       CASE WHEN b.settles THEN pg_notify($24, m.approval_id) END,
       ARRAY(SELECT o.id FROM o WHERE o.approval_id = m.approval_id AND o.locked_until IS NOT NULL
             ORDER BY o.id) AS claimed
FROM moved m JOIN b USING (approval_id);

-- name: edit_if_pending
-- An edit, compare-and-set as settle_if_pending: only a pending approval at the version ($5)
-- and with the voters ($4) the editor's submission was judged on moves to the next version,
-- with its new votes (the editor's) and status (approved when the editor's vote completes the
-- quorum the edited call needs).
UPDATE approvals SET status = $2, votes = $3, edit_no = edit_no + 1
WHERE approval_id = $1 AND status = 'pending' AND edit_no = $5
  AND ARRAY(SELECT v->>'slack_user_id' FROM jsonb_array_elements(votes) WITH ORDINALITY AS e (v, i)
            ORDER BY i) = $4::text[]
RETURNING edit_no;

-- name: insert_edit
INSERT INTO edits (approval_id, edit_no, arguments_jcs, arguments_sha256, patch, edited_by, at,
                   note, rule, rule_why, required_role, required_approvals, required_any_of,
                   deny_reason_required, valid_for, report_within, editable, policy_version,
                   requested_sha256, verify)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
        $20);

-- name: claim_execution
-- Compare-and-set on the primary key: the one execution an approved call allows, claimed only
-- within valid_for seconds of its decision; a second claim (another key, another replica, at
-- the same instant) inserts nothing. Why nothing was claimed the caller reads back.
-- Nor once a call again with its edited arguments took its place (edit_of: claim_lock first).
-- After an edit the window is the edited call's rule's (its edit row's valid_for).
INSERT INTO executions (approval_id, claim_id, idempotency_key, claimed_at)
SELECT a.approval_id, $2, $3, $4
FROM approvals a JOIN settlements s USING (approval_id)
LEFT JOIN edits ed ON ed.approval_id = a.approval_id AND ed.edit_no = a.edit_no
WHERE a.approval_id = $1 AND s.status = 'approved'
  AND $4 <= s.decided_at + make_interval(secs => coalesce(ed.valid_for, a.valid_for))
  AND NOT EXISTS (SELECT 1 FROM approvals r WHERE r.edit_of = a.approval_id)
ON CONFLICT (approval_id) DO NOTHING
RETURNING claim_id;

-- name: claim_lock
-- A claim and a call again of the same approval (recall_open) each lock its row first,
-- in a statement of its own: the one that waits then reads, in its next statement, what the
-- other committed (READ COMMITTED takes a snapshot per statement), so never both take it.
SELECT approval_id FROM approvals WHERE approval_id = $1 FOR UPDATE;

-- name: recall_candidate
-- The approval a new call would be the call again of: approved with its latest edit's
-- arguments hashing to $4, of the same agent, session and tool, never claimed nor called again
-- already (the newest if several). Read by the edits' hash (0023), then by primary key.
SELECT a.approval_id
FROM edits ed JOIN approvals a ON a.approval_id = ed.approval_id AND a.edit_no = ed.edit_no
WHERE ed.arguments_sha256 = $4
  AND a.agent = $1 AND a.session_id = $2 AND a.tool_name = $3 AND a.status = 'approved'
  AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.approval_id = a.approval_id)
  AND NOT EXISTS (SELECT 1 FROM approvals r WHERE r.edit_of = a.approval_id)
ORDER BY ed.at DESC
LIMIT 1;

-- name: recall_open
-- Under claim_lock: whether $1, approved with its latest edit's arguments hashing to $2, may
-- still be called again at $3: within its valid_for, never claimed nor called again.
SELECT a.approval_id
FROM approvals a JOIN settlements s USING (approval_id)
JOIN edits ed ON ed.approval_id = a.approval_id AND ed.edit_no = a.edit_no
WHERE a.approval_id = $1 AND s.status = 'approved' AND ed.arguments_sha256 = $2
  AND $3 <= s.decided_at + make_interval(secs => ed.valid_for)
  AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.approval_id = $1)
  AND NOT EXISTS (SELECT 1 FROM approvals r WHERE r.edit_of = $1);

-- name: set_edit_of
UPDATE approvals SET edit_of = $2 WHERE approval_id = $1;

-- name: report_outcome
-- Once, by the claim's own key; a second report changes nothing.
UPDATE executions SET outcome = $3, detail = $4, reported_at = $5,
                      reported_xid = pg_current_xact_id()  -- the audit chain's (0017)
WHERE approval_id = $1 AND idempotency_key = $2 AND outcome IS NULL
RETURNING claim_id;

-- name: insert_settlement
INSERT INTO settlements (approval_id, status, decided_by, reason, decided_at, policy_version)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: insert_attempt
INSERT INTO attempts (approval_id, slack_user_id, email, name, action, outcome, detail, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: list_attempts
SELECT * FROM attempts WHERE approval_id = $1 ORDER BY id;

-- name: set_cards
-- The cards the relay posted at about the same time (approval $1[i] shown at channel $2[i],
-- ts $3[i]), in one statement. Rows are locked in approval-id order, as every statement that
-- writes several approvals does, so two replicas' batches never wait on each other in a cycle.
WITH card AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS c (approval_id, channel, ts)
), locked AS (
    SELECT approval_id FROM approvals WHERE approval_id = ANY($1::text[])
    ORDER BY approval_id FOR UPDATE
)
UPDATE approvals a SET card_channel = card.channel, card_ts = card.ts
FROM card JOIN locked USING (approval_id)
WHERE a.approval_id = card.approval_id;

-- name: pending_expired
SELECT approval_id FROM approvals
WHERE status = 'pending' AND expires_at <= $1
ORDER BY expires_at
LIMIT $2;

-- name: insert_outbox
INSERT INTO outbox (approval_id, kind, payload, created_at, next_attempt_at)
VALUES ($1, $2, $3, $4, $4);

-- name: claim_outbox
-- A lease, not a held lock: the claim commits at once so no network call runs inside a
-- transaction; a relay that dies mid-delivery loses its lease and another one retries.
UPDATE outbox SET locked_until = $2, claims = claims + 1, claim_no = claim_no + 1
WHERE id IN (
    SELECT id FROM outbox
    WHERE done_at IS NULL AND dead_at IS NULL AND next_attempt_at <= $1
      AND (locked_until IS NULL OR locked_until <= $1)
      AND id <> ALL($4::bigint[])
    ORDER BY next_attempt_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, approval_id, payload, attempts, claims, claim_no, created_at;

-- name: claim_callbacks
-- The callbacks of approvals that just settled ($3), leased as claim_outbox leases (so a row is
-- never shared: whichever relay claims first delivers), found by their approval (the
-- outbox_by_approval index), not by scanning what is due.
UPDATE outbox SET locked_until = $2, claims = claims + 1, claim_no = claim_no + 1
WHERE id IN (
    SELECT id FROM outbox
    WHERE approval_id = ANY($3::text[]) AND kind = 'callback'
      AND done_at IS NULL AND dead_at IS NULL AND next_attempt_at <= $1
      AND (locked_until IS NULL OR locked_until <= $1)
      AND id <> ALL($4::bigint[])
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, approval_id, payload, attempts, claims, claim_no, created_at;

-- name: outbox_done
-- Whoever delivered it: a delivery that happened is recorded even when a later claim holds the
-- row now (its lease lapsed under a slow call), and a row once done is never done again.
-- With when its approval was submitted and settled (primary-key look-ups), for the latency
-- histograms of a card posted and a decision delivered. Many rows at once (the deliveries
-- that finished together, ids $1 done at $2, in the order they finished), each once, locked
-- in id order first (see outbox_renew).
WITH d AS MATERIALIZED (
    SELECT o.id, d.at
    FROM outbox o JOIN unnest($1::bigint[], $2::timestamptz[]) AS d (id, at) ON o.id = d.id
    WHERE o.done_at IS NULL
    ORDER BY o.id
    FOR NO KEY UPDATE OF o
)
UPDATE outbox o SET done_at = d.at, attempts = attempts + 1, locked_until = NULL,
                    last_error = NULL, dead_at = NULL,
                    done_xid = pg_current_xact_id()  -- the audit chain's (0017)
FROM d
WHERE o.id = d.id AND o.done_at IS NULL
RETURNING o.id, o.kind,
          (SELECT a.created_at FROM approvals a WHERE a.approval_id = o.approval_id)
              AS submitted_at,
          (SELECT s.decided_at FROM settlements s WHERE s.approval_id = o.approval_id)
              AS settled_at;

-- name: outbox_retry
-- Fenced by the claim: every other outcome applies only while the row is still the caller's
-- claim ($2, the claim_no its claim returned). A relay whose lease lapsed under a slow call
-- finds another claim (claims moved on) or the row done, and changes nothing, so it never
-- reschedules, frees or dead-letters a row that another relay is delivering or has delivered.
UPDATE outbox SET attempts = attempts + 1, next_attempt_at = $3, last_error = $4,
                  locked_until = NULL
WHERE id = $1 AND claim_no = $2 AND done_at IS NULL AND dead_at IS NULL;

-- name: outbox_later
-- Not a failure: the row waited its channel's turn (pacing) past its lease, so it goes back to
-- be claimed when its turn comes, its attempts and last error untouched, and its claim undone
-- (nothing was sent: the next claim is not one that may follow a delivery).
UPDATE outbox SET next_attempt_at = $3, locked_until = NULL, claims = claims - 1
WHERE id = $1 AND claim_no = $2 AND done_at IS NULL AND dead_at IS NULL;

-- name: outbox_renew
-- A live relay extends the leases of the rows it still holds, so that a short lease (what a
-- relay that dies leaves behind) never lapses under a delivery still running. A row handed
-- back, done, rescheduled (locked_until NULL) or claimed since by another relay is not leased
-- again.
-- Every statement that locks several outbox rows and may wait for them (this one, outbox_done,
-- outbox_redrive) locks them in id order, in a SELECT … ORDER BY id FOR NO KEY UPDATE before it
-- updates them. An UPDATE … FROM unnest(…) alone locks rows in whatever order its plan visits
-- them (the arrays' order in a nested loop, the table's physical order in a hash join), so two
-- such statements over the same rows (this renewal and the deliveries recorded meanwhile) could
-- each hold a row the other waits for: a deadlock, and PostgreSQL aborts one of them. In one
-- order, whoever takes the lowest row shared goes first and the other waits for it, holding
-- nothing it needs. (claim_outbox never waits: SKIP LOCKED; the others lock one row.) The lock
-- waited for is taken on the row as it is then: the conditions are checked again on it.
WITH held AS MATERIALIZED (
    SELECT o.id
    FROM outbox o
    JOIN unnest($1::bigint[], $2::bigint[]) AS h (id, claim_no)
      ON o.id = h.id AND o.claim_no = h.claim_no
    WHERE o.done_at IS NULL AND o.locked_until IS NOT NULL
    ORDER BY o.id
    FOR NO KEY UPDATE OF o
)
UPDATE outbox o SET locked_until = $3
FROM held
WHERE o.id = held.id;

-- name: outbox_release
-- A relay shutting down mid-delivery hands the row back at once instead of at lease expiry;
-- the claim still counts (the call may have gone out).
UPDATE outbox SET locked_until = NULL
WHERE id = $1 AND claim_no = $2 AND done_at IS NULL;

-- name: outbox_unclaim
-- A row claimed and handed back before its delivery started (the relay stopped first): free at
-- once, and its claim undone, so the next claim is not taken for one that may follow a delivery.
UPDATE outbox SET locked_until = NULL, claims = claims - 1
WHERE id = $1 AND claim_no = $2 AND done_at IS NULL;

-- name: outbox_dead
-- Returns the row when it was dead-lettered, so that its follow-up is queued only then.
UPDATE outbox SET attempts = attempts + 1, dead_at = $3, last_error = $4, locked_until = NULL
WHERE id = $1 AND claim_no = $2 AND done_at IS NULL AND dead_at IS NULL
RETURNING id;

-- name: outbox_redrive
-- The rows locked in id order first (see outbox_renew): a late delivery may be recorded on
-- them (outbox_done) at the same time.
WITH dead AS MATERIALIZED (
    SELECT id FROM outbox
    WHERE approval_id = $1 AND dead_at IS NOT NULL
    ORDER BY id
    FOR NO KEY UPDATE
)
UPDATE outbox o SET dead_at = NULL, next_attempt_at = $2, locked_until = NULL, created_at = $2
FROM dead
WHERE o.id = dead.id AND o.dead_at IS NOT NULL
RETURNING o.id;

-- name: outbox_next_due
-- A row leased by another relay is not due before its lease lapses: counting it as due now
-- would make every idle relay spin while one delivery is in flight.
SELECT min(GREATEST(next_attempt_at, coalesce(locked_until, next_attempt_at)))
FROM outbox WHERE done_at IS NULL AND dead_at IS NULL;

-- The gauges' queries run at every scrape of /metrics, so each reads a partial index only
-- (outbox_due, outbox_dead, approvals_pending_expiry), never the delivered or settled history.

-- name: outbox_backlog
-- A row scheduled for later (created_at still ahead: a card update due at a deadline) is not
-- work waiting yet; a row due again after a failure is.
SELECT kind, count(*) AS count, min(created_at) AS oldest FROM outbox
WHERE done_at IS NULL AND dead_at IS NULL AND created_at <= $1
GROUP BY kind;

-- name: outbox_dead_by_kind
SELECT kind, count(*) AS count FROM outbox WHERE dead_at IS NOT NULL GROUP BY kind;

-- name: pending_by_rule
SELECT rule, count(*) AS count FROM approvals WHERE status = 'pending' GROUP BY rule;

-- name: database_time
-- The database's own clock (not the transaction's start, as now() is): replicas set theirs by it.
SELECT clock_timestamp() AS now;

-- name: schema_version
-- The latest migration applied (readiness: the schema is the one this code expects).
SELECT max(version) AS version FROM schema_migrations;

-- name: insert_turn
-- idempotent on the request ids: a second writer of the same ids gets no row back and reads
-- the stored one instead
INSERT INTO turn_verdicts (agent, session_id, request_id, channel, lead_id, tool_name, call_id,
                           inputs_sha256, policy_version, verdict, rule, reason_code, message,
                           evaluated, approval_id, at, lead_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT (agent, session_id, request_id) WHERE duplicate_of IS NULL DO NOTHING
RETURNING id;

-- name: turn_by_request
-- (copies recorded before migration 0008 point at this row and are not the answer)
SELECT * FROM turn_verdicts
WHERE agent = $1 AND session_id = $2 AND request_id = $3 AND duplicate_of IS NULL;

-- name: turns_for_session
SELECT * FROM turn_verdicts WHERE agent = $1 AND session_id = $2 ORDER BY id;

-- name: lock_lead
-- serialises count-decide-record for one lead's calls of one tool until the transaction ends
SELECT pg_advisory_xact_lock(hashtextextended($1, 0));

-- name: count_allowed_turns
SELECT count(*) FROM turn_verdicts
WHERE agent = $1 AND lead_key = $2 AND tool_name = $3 AND verdict = 'allow' AND at > $4;

-- The audit chain (migrations 0017 and 0019, approvals/audit_chain.py). Events are in the
-- chain's order: the transaction that wrote them (0 for the rows from before 0017, which have
-- none), then kind, then key. Each audit_events_* query reads one kind's events at
-- ($1, $2) <= (xid, key) < ($3, $4), in that order, at most $5 of them: the audit store turns a
-- range of the chain into these bounds per kind, so each is one range of the kind's index on
-- exactly these expressions (0019), however the range starts and ends. Text keys compare
-- as COLLATE "C" (by code point, as Python does). Each row has its key (its kind's primary key,
-- what verify names) and its xid. Their audit_export_* twins read the events at or after a
-- time ($1), by the time's index (0014, 0019), for the export.

-- name: audit_events_attempts
SELECT id::text AS key, approval_id, at, xid,
       slack_user_id, email, name, action, outcome, detail
FROM attempts
WHERE (coalesce(xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(xid, '0'), id
LIMIT $5;

-- name: audit_export_attempts
SELECT id::text AS key, approval_id, at, xid,
       slack_user_id, email, name, action, outcome, detail
FROM attempts
WHERE at >= $1;

-- name: audit_events_created
SELECT approval_id AS key, approval_id, created_at AS at, created_xid AS xid,
       agent, session_id, request_id, tool_name, call_id, arguments_sha256, requester, rule,
       required_role, policy_version, expires_at, edit_of, decided_by_policy
FROM approvals
WHERE (coalesce(created_xid, '0'), approval_id COLLATE "C") >= ($1::xid8, $2::text)
  AND (coalesce(created_xid, '0'), approval_id COLLATE "C") < ($3::xid8, $4::text)
ORDER BY coalesce(created_xid, '0'), approval_id COLLATE "C"
LIMIT $5;

-- name: audit_export_created
SELECT approval_id AS key, approval_id, created_at AS at, created_xid AS xid,
       agent, session_id, request_id, tool_name, call_id, arguments_sha256, requester, rule,
       required_role, policy_version, expires_at, edit_of, decided_by_policy
FROM approvals
WHERE created_at >= $1;

-- name: audit_events_deliveries
SELECT id::text AS key, approval_id, done_at AS at, done_xid AS xid,
       kind AS delivered, attempts
FROM outbox
WHERE done_at IS NOT NULL AND kind IN ('callback', 'post_card')
  AND (coalesce(done_xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(done_xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(done_xid, '0'), id
LIMIT $5;

-- name: audit_export_deliveries
SELECT id::text AS key, approval_id, done_at AS at, done_xid AS xid,
       kind AS delivered, attempts
FROM outbox
WHERE kind IN ('callback', 'post_card') AND done_at >= $1;

-- name: audit_events_claims
SELECT approval_id AS key, approval_id, claimed_at AS at, claimed_xid AS xid, claim_id
FROM executions
WHERE (coalesce(claimed_xid, '0'), approval_id COLLATE "C") >= ($1::xid8, $2::text)
  AND (coalesce(claimed_xid, '0'), approval_id COLLATE "C") < ($3::xid8, $4::text)
ORDER BY coalesce(claimed_xid, '0'), approval_id COLLATE "C"
LIMIT $5;

-- name: audit_export_claims
SELECT approval_id AS key, approval_id, claimed_at AS at, claimed_xid AS xid, claim_id
FROM executions
WHERE claimed_at >= $1;

-- name: audit_events_outcomes
SELECT approval_id AS key, approval_id, reported_at AS at, reported_xid AS xid,
       claim_id, outcome, detail
FROM executions
WHERE reported_at IS NOT NULL
  AND (coalesce(reported_xid, '0'), approval_id COLLATE "C") >= ($1::xid8, $2::text)
  AND (coalesce(reported_xid, '0'), approval_id COLLATE "C") < ($3::xid8, $4::text)
ORDER BY coalesce(reported_xid, '0'), approval_id COLLATE "C"
LIMIT $5;

-- name: audit_export_outcomes
SELECT approval_id AS key, approval_id, reported_at AS at, reported_xid AS xid,
       claim_id, outcome, detail
FROM executions
WHERE reported_at >= $1;

-- name: audit_events_edits
SELECT id::text AS key, approval_id, at, xid,
       edit_no, arguments_sha256, patch, edited_by, note, rule, required_role,
       required_approvals, policy_version, requested_sha256
FROM edits
WHERE (coalesce(xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(xid, '0'), id
LIMIT $5;

-- name: audit_export_edits
SELECT id::text AS key, approval_id, at, xid,
       edit_no, arguments_sha256, patch, edited_by, note, rule, required_role,
       required_approvals, policy_version, requested_sha256
FROM edits
WHERE at >= $1;

-- name: audit_events_settlements
SELECT approval_id AS key, approval_id, decided_at AS at, xid,
       status, decided_by, reason, policy_version
FROM settlements
WHERE (coalesce(xid, '0'), approval_id COLLATE "C") >= ($1::xid8, $2::text)
  AND (coalesce(xid, '0'), approval_id COLLATE "C") < ($3::xid8, $4::text)
ORDER BY coalesce(xid, '0'), approval_id COLLATE "C"
LIMIT $5;

-- name: audit_export_settlements
SELECT approval_id AS key, approval_id, decided_at AS at, xid,
       status, decided_by, reason, policy_version
FROM settlements
WHERE decided_at >= $1;

-- name: audit_events_timers
SELECT id::text AS key, approval_id, fired_at AS at, fired_xid AS xid,
       kind AS timer_kind, step, due_at
FROM timers
WHERE fired_at IS NOT NULL
  AND (coalesce(fired_xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(fired_xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(fired_xid, '0'), id
LIMIT $5;

-- name: audit_export_timers
SELECT id::text AS key, approval_id, fired_at AS at, fired_xid AS xid,
       kind AS timer_kind, step, due_at
FROM timers
WHERE fired_at >= $1;

-- name: audit_events_turns
SELECT id::text AS key, approval_id, at, xid,
       agent, session_id, request_id, tool_name, call_id, verdict, rule, reason_code,
       inputs_sha256, policy_version
FROM turn_verdicts
WHERE (coalesce(xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(xid, '0'), id
LIMIT $5;

-- name: audit_export_turns
SELECT id::text AS key, approval_id, at, xid,
       agent, session_id, request_id, tool_name, call_id, verdict, rule, reason_code,
       inputs_sha256, policy_version
FROM turn_verdicts
WHERE at >= $1;

-- name: audit_seal_lock
-- One sealer at a time across replicas, without waiting: a replica that finds another one
-- sealing skips its turn (held until the sealing transaction ends; intake never takes it).
SELECT pg_try_advisory_xact_lock(hashtextextended('countersign_audit_seal', 0)) AS locked;

-- name: audit_seal_lock_wait
-- The same lock, waited for (``countersign audit seal``: seal now, after a sealer under way).
SELECT true AS locked FROM pg_advisory_xact_lock(hashtextextended('countersign_audit_seal', 0));

-- name: audit_last_seal
SELECT seq, to_xid, to_event, hash, sealed_at FROM audit_seals ORDER BY seq DESC LIMIT 1;

-- name: audit_seal_horizon
-- Every transaction below this id has finished (committed or rolled back): no event can commit
-- into a range that ends here. Read before this transaction writes (it has no xid yet).
SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon;

-- name: insert_audit_seal
-- The primary key takes seal seq once: a second sealer of the same seq inserts nothing.
INSERT INTO audit_seals (seq, from_xid, to_xid, sealed_at, count, events_sha256, prev_hash, hash,
                         events, from_event, to_event)
VALUES ($1, $2::xid8, $3::xid8, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (seq) DO NOTHING
RETURNING seq;

-- name: audit_seal_sizes
-- How many events each seal after $1 lists, $2 seals at most: verify reads as many seals at a
-- time as list about a page of events.
SELECT seq, count FROM audit_seals WHERE seq > $1 ORDER BY seq LIMIT $2;

-- name: audit_seals_after
-- A page of the chain, in order, after seal $1.
SELECT seq, from_xid, to_xid, sealed_at, count, events_sha256, prev_hash, hash, events,
       from_event, to_event
FROM audit_seals WHERE seq > $1 ORDER BY seq LIMIT $2;

-- name: audit_seals_for_export
-- The seals an export from $2 on needs: the chain from the first seal that holds its events
-- (to_xid at or above the lowest xid $1 among them) or was sealed since, each found by its index
-- (0019), not an OR of both, which reads the whole table.
SELECT seq, from_xid, to_xid, sealed_at, count, events_sha256, prev_hash, hash, events,
       from_event, to_event
FROM audit_seals
WHERE seq >= least((SELECT min(seq) FROM audit_seals WHERE to_xid >= $1::xid8),
                   (SELECT min(seq) FROM audit_seals WHERE sealed_at >= $2))
ORDER BY seq;

-- name: insert_timer
INSERT INTO timers (approval_id, kind, step, due_at) VALUES ($1, $2, $3, $4)
ON CONFLICT ON CONSTRAINT timers_once DO NOTHING;

-- name: insert_paging_timer
-- An escalation that pages, with what it pages (see migration 0016).
INSERT INTO timers (approval_id, kind, step, due_at, page) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT timers_once DO NOTHING;

-- name: claim_due_timers
-- Each due timer is taken by exactly one replica (SKIP LOCKED) and marked fired in the same
-- transaction as the outbox rows it causes: it fires once, and its I/O happens after commit.
UPDATE timers SET fired_at = $1, fired_xid = pg_current_xact_id()  -- the audit chain's (0017)
WHERE id IN (
    SELECT id FROM timers WHERE fired_at IS NULL AND due_at <= $1
    ORDER BY due_at, id LIMIT $2
    FOR UPDATE SKIP LOCKED
)
RETURNING id, approval_id, kind, step, due_at, page;

-- name: timers_next_due
-- When the timer loop has work next (each from its partial index: timers_due,
-- approvals_pending_expiry); NULL when nothing waits.
SELECT least((SELECT min(due_at) FROM timers WHERE fired_at IS NULL),
             (SELECT min(expires_at) FROM approvals WHERE status = 'pending')) AS due;

-- name: approvals_among
-- Which of these ids exist (a group of submissions: which of them inserted).
SELECT approval_id FROM approvals WHERE approval_id = ANY($1::text[]);

-- name: pending_among
-- Those still open at $2: one past its expiry that the expiry sweep has not reached yet is not
-- (the timer and expiry loops race; a rung due with the expiry must not page for it).
SELECT approval_id FROM approvals
WHERE approval_id = ANY($1::text[]) AND status = 'pending' AND expires_at > $2;

-- name: pending_ids
SELECT approval_id FROM approvals WHERE status = 'pending' ORDER BY created_at DESC LIMIT $1;

-- name: count_pending_upto
-- How many approvals are pending, counted no further than $1: a queue shows "more than N" past
-- that, and so costs the same with ten thousand pending as with a thousand (a full count walks
-- every pending row on each App Home open).
SELECT count(*) AS count FROM (SELECT 1 FROM approvals WHERE status = 'pending' LIMIT $1) AS p;

-- name: requested_by
-- The requester's own approvals, newest first (by Slack id or e-mail). Each branch reads its own
-- index (0018) backwards and stops after $3 rows, so a requester with a long history costs what
-- one with a short one does; one OR over both would fetch every match, then sort them all.
SELECT approval_id FROM (
    (SELECT approval_id, created_at FROM approvals
     WHERE requester->>'slack_user_id' = $1
     ORDER BY created_at DESC LIMIT $3)
    UNION
    (SELECT approval_id, created_at FROM approvals
     WHERE $2::text IS NOT NULL AND requester->>'email' = $2
     ORDER BY created_at DESC LIMIT $3)
) AS mine
ORDER BY created_at DESC LIMIT $3;

-- name: fired_timers
SELECT kind, step, due_at, fired_at FROM timers
WHERE approval_id = $1 AND fired_at IS NOT NULL ORDER BY fired_at, id;

-- name: insert_grant
INSERT INTO grants (grant_id, approval_id, agent, scope, session_id, tool_name, rule,
                    requirement_sha256, required, constraints, max_uses, granted_by, created_at,
                    expires_at, policy_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15);

-- name: insert_grant_event
INSERT INTO grant_events (grant_id, approval_id, event, data, at) VALUES ($1, $2, $3, $4, $5);

-- name: live_grants
-- The grants a call of this agent and tool could use at $4 (in its session $3, or agent-wide),
-- newest first; by the partial index grants_live. The use itself is use_grant's to count.
SELECT * FROM grants
WHERE agent = $1 AND tool_name = $2 AND expires_at > $4
  AND revoked_at IS NULL AND uses < max_uses
  AND (scope = 'agent' OR session_id = $3)
ORDER BY created_at DESC, grant_id
LIMIT 20;

-- name: use_grant
-- One use, compare-and-set: the row lock serialises concurrent uses, and under READ COMMITTED a
-- use that waited re-reads the row and takes it only if a use is still left.
UPDATE grants SET uses = uses + 1
WHERE grant_id = $1 AND revoked_at IS NULL AND uses < max_uses AND expires_at > $2
RETURNING uses;

-- name: set_grant_use
UPDATE approvals SET grant_id = $2, grant_use = $3, grant_of = $4 WHERE approval_id = $1;

-- name: get_grants
SELECT * FROM grants WHERE grant_id = ANY($1::text[]);

-- name: grants_of_approval
SELECT * FROM grants WHERE approval_id = $1 ORDER BY created_at, grant_id;

-- name: list_grants
-- Grants newest first: of one agent ($1; NULL: every agent), only those live at $3 when $2.
SELECT * FROM grants
WHERE ($1::text IS NULL OR agent = $1)
  AND (NOT $2::boolean OR (revoked_at IS NULL AND uses < max_uses AND expires_at > $3))
ORDER BY created_at DESC, grant_id
LIMIT $4;

-- name: revoke_grant
UPDATE grants SET revoked_at = $2, revoked_by = $3
WHERE grant_id = $1 AND revoked_at IS NULL
RETURNING approval_id;

-- name: audit_events_grants
SELECT id::text AS key, approval_id, at, xid, grant_id, event, data
FROM grant_events
WHERE (coalesce(xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(xid, '0'), id
LIMIT $5;

-- name: audit_export_grants
SELECT id::text AS key, approval_id, at, xid, grant_id, event, data
FROM grant_events
WHERE at >= $1;

-- Step-up (approvals/passkey_store.py, migration 0027) ------------------------------------

-- name: insert_step_up
INSERT INTO step_ups (token, approval_id, slack_user_id, decision, arguments_sha256, nonce,
                      created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: get_step_up
SELECT token, approval_id, slack_user_id, decision, arguments_sha256, nonce, created_at,
       expires_at, tries, used_at
FROM step_ups WHERE token = $1;

-- name: count_step_up_try
UPDATE step_ups SET tries = tries + 1 WHERE token = $1 AND used_at IS NULL RETURNING tries;

-- name: use_step_up
-- Single use: only the first confirmation takes the link, and only while it is valid.
UPDATE step_ups SET used_at = $2
WHERE token = $1 AND used_at IS NULL AND expires_at > $2 AND tries < $3
RETURNING token;

-- name: passkeys_of
SELECT credential_id, slack_user_id, user_handle, public_key, sign_count, created_at,
       last_used_at
FROM passkeys WHERE slack_user_id = $1 ORDER BY created_at;

-- name: get_passkey
SELECT credential_id, slack_user_id, user_handle, public_key, sign_count, created_at,
       last_used_at
FROM passkeys WHERE credential_id = $1;

-- name: lock_passkeys_of
-- A person's passkeys change one registration or reset at a time (transaction-scoped).
SELECT pg_advisory_xact_lock(hashtextextended('passkeys:' || $1, 0));

-- name: has_passkey
SELECT EXISTS (SELECT 1 FROM passkeys WHERE slack_user_id = $1);

-- name: insert_passkey
WITH k AS (
    INSERT INTO passkeys (credential_id, slack_user_id, user_handle, public_key, sign_count,
                          created_at)
    VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (credential_id) DO NOTHING
    RETURNING credential_id
)
INSERT INTO passkey_events (slack_user_id, event, data, at)
SELECT $2, 'registered', jsonb_build_object('credential_id', k.credential_id), $6 FROM k
RETURNING id;

-- name: use_passkey
-- The sign counter moves forward once per assertion: a compare-and-set on the count read.
UPDATE passkeys SET sign_count = $3, last_used_at = $4
WHERE credential_id = $1 AND sign_count = $2
RETURNING credential_id;

-- name: reset_passkeys
WITH gone AS (
    DELETE FROM passkeys WHERE slack_user_id = $1 RETURNING credential_id
)
INSERT INTO passkey_events (slack_user_id, event, data, at)
SELECT $1, 'reset',
       jsonb_build_object('by', $2::text,
                          'credential_ids', coalesce((SELECT jsonb_agg(credential_id
                                                               ORDER BY credential_id)
                                                      FROM gone), '[]'::jsonb)),
       $3
RETURNING (data->'credential_ids');

-- name: insert_web_session
INSERT INTO web_sessions (session_id, slack_user_id, csrf_token, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5);

-- name: get_web_session
SELECT session_id, slack_user_id, csrf_token, created_at, expires_at, passkey_at, reg_challenge
FROM web_sessions WHERE session_id = $1 AND expires_at > $2;

-- name: web_session_challenge
-- A registration's challenge, kept for its answer: taken once (set to NULL as it is read).
UPDATE web_sessions w SET reg_challenge = $2
FROM (SELECT session_id, reg_challenge FROM web_sessions WHERE session_id = $1 FOR UPDATE) old
WHERE w.session_id = old.session_id
RETURNING old.reg_challenge;

-- name: web_session_used_passkey
UPDATE web_sessions SET passkey_at = $2 WHERE session_id = $1;

-- name: audit_events_passkeys
SELECT id::text AS key, NULL::text AS approval_id, at, xid, slack_user_id, event, data
FROM passkey_events
WHERE (coalesce(xid, '0'), id) >= ($1::xid8, $2::bigint)
  AND (coalesce(xid, '0'), id) < ($3::xid8, $4::bigint)
ORDER BY coalesce(xid, '0'), id
LIMIT $5;

-- name: audit_export_passkeys
SELECT id::text AS key, NULL::text AS approval_id, at, xid, slack_user_id, event, data
FROM passkey_events
WHERE at >= $1;
