-- Governance: a rule may accept any of several roles; the first is required_role.
ALTER TABLE approvals ADD COLUMN required_any_of jsonb NOT NULL DEFAULT '[]';
