-- On-call paging (PagerDuty Events API v2, Opsgenie Alerts API). An escalation timer keeps what
-- its rule's step said to page when the approval was created, as the approval keeps its rule (a
-- policy reload does not change a ladder already running): {"services": ["pagerduty", ...],
-- "severity": "warning"}. NULL: it pages nobody (a reminder, a Slack-only escalation).
ALTER TABLE timers ADD COLUMN page jsonb;
ALTER TABLE timers ADD CONSTRAINT timers_page_check CHECK (page IS NULL OR kind = 'escalate');

-- An outbox row of kind page is one event for one service: a trigger when an escalation pages,
-- a resolve (close) when the approval settles; each retried, dead-lettered and redriven alone.
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('post_card', 'update_card', 'callback', 'remind', 'escalate', 'page'));
