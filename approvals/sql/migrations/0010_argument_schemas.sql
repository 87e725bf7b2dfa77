-- The tools: globs whose JSON Schema a call's arguments were checked against at submit (the card
-- says so).
ALTER TABLE approvals ADD COLUMN argument_schemas jsonb NOT NULL DEFAULT '[]';
