-- Room on each page for a row's next version. An approval is written again soon after it is
-- inserted (its card's channel and ts, then its settlement), an outbox row too (claimed, then
-- done). With full pages every such UPDATE moves the row to another page and adds an entry to
-- every index; with room left where the row is, an UPDATE that changes no indexed column stays
-- on its page (a HOT update) and touches no index. Only pages written from now on are affected.
ALTER TABLE approvals SET (fillfactor = 75);
ALTER TABLE outbox SET (fillfactor = 80);
