-- A quorum vote whose voter no longer holds the authority at settlement is dropped, and that is
-- recorded as an attempt of its own.
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('accepted', 'self', 'no_authority', 'lookup_failed', 'stale', 'expired',
                       'over_limit', 'duplicate', 'vote_dropped'));
