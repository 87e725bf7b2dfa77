-- Dead letters by kind are read at every /metrics scrape: a partial index keeps that to the few
-- dead rows instead of a scan of every delivered one.
CREATE INDEX outbox_dead ON outbox (kind) WHERE dead_at IS NOT NULL;
