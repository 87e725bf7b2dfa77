-- Governance: why a rule matched, quorum votes on a pending approval, more attempt outcomes.

ALTER TABLE approvals ADD COLUMN rule_why text NOT NULL DEFAULT '';
-- approvals counted so far while pending (the settlement row holds the final list)
ALTER TABLE approvals ADD COLUMN votes jsonb NOT NULL DEFAULT '[]';

ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate'));
