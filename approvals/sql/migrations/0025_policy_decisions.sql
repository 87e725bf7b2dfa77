-- Rules that approve by themselves (docs/policy.md): a call such a rule matches is created
-- approved, decided by the policy; this names the rule (the approval's policy_version is the
-- policy's). No card, no person: decided_by is empty.
ALTER TABLE approvals ADD COLUMN decided_by_policy text;

-- Such a rule may name a log channel: one line there says the policy approved the call (there
-- is no card). A new kind of outbox work.
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('post_card', 'update_card', 'callback', 'remind', 'escalate', 'page',
                    'check_deciders', 'log_line'));
