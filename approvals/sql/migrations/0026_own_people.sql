-- Only your own people decide (docs/security.md): a click from a user of another organisation
-- (a Slack Connect channel) or from a guest account, for a role that does not admit guests, is
-- recorded as such.
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate', 'vote_dropped', 'edited', 'invalid_edit',
                       'invalid_grant', 'outside_organisation', 'guest'));
