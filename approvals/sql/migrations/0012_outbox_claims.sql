-- How many times a relay took the row to deliver it without handing it back untried. A card
-- post claimed a second time may have reached Slack the first time (the relay died, or shut down
-- mid-post, before recording it), so it looks for its card before posting another: the count
-- says so exactly, where the row's age only guessed (and sent look-ups for every backlogged row).
ALTER TABLE outbox ADD COLUMN claims integer NOT NULL DEFAULT 0;
