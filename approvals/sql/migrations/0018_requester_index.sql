-- The App Home's "your requests" (query requested_by): a requester's approvals, newest first, by
-- Slack id or by e-mail. Without these it read every approval ever made; with them each branch
-- of its OR is an index scan (a BitmapOr), flat as the history grows.
CREATE INDEX approvals_by_requester_id ON approvals ((requester->>'slack_user_id'), created_at);
CREATE INDEX approvals_by_requester_email ON approvals ((requester->>'email'), created_at)
    WHERE requester->>'email' IS NOT NULL;
