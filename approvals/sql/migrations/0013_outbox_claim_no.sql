-- The number of the latest claim of the row, never reused (claims counts down when a row goes
-- back untried; this never does). Every outcome a relay records names the claim it holds, and
-- applies only while that claim is still the latest: a relay whose lease lapsed under a slow
-- call cannot reschedule, free or dead-letter a row that another relay has claimed since.
ALTER TABLE outbox ADD COLUMN claim_no bigint NOT NULL DEFAULT 0;
