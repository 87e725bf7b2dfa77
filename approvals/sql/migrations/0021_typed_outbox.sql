-- The outbox's work is typed (approvals.models.Work, one model per kind, read from the kind
-- column and the payload). A new kind, the core's own: once a card is posted, check whether
-- anyone but the requester could decide (escalate at once if not).
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('post_card', 'update_card', 'callback', 'remind', 'escalate', 'page',
                    'check_deciders'));

-- A callback names the agent whose secret signs it (the sender no longer reads it from the
-- body). Rows written before carry only url and body: the agent is their approval's (the body
-- is that approval rendered). Done rows are never sent again; pending and dead ones may be.
UPDATE outbox o SET payload = o.payload || jsonb_build_object('agent', a.agent)
FROM approvals a
WHERE a.approval_id = o.approval_id AND o.kind = 'callback' AND o.done_at IS NULL
  AND NOT o.payload ? 'agent';
