-- The channel an approval's card goes to: its rule's channel, or the policy's reviewer channel,
-- fixed when the approval is created (a policy reload does not move a card not yet posted).
-- NULL on approvals from before: their card goes to the reviewer channel in force.
ALTER TABLE approvals ADD COLUMN review_channel text;
