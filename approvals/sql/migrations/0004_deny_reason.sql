-- Governance: a rule may require a reason to deny; the approval keeps that requirement.
ALTER TABLE approvals ADD COLUMN deny_reason_required boolean NOT NULL DEFAULT false;
