-- Issue 36: many workers deliver one outbox. A worker takes a pending item before it sends it
-- (`taken_by`, its store's name, until `taken_until`, renewed each time it reads the outbox):
-- no other worker reads it while the taker lives, so no item is sent by two workers, and a
-- target's items all go out from one worker, in order. A worker that dies leaves its items to
-- the others once `taken_until` has passed.
ALTER TABLE outbox ADD COLUMN taken_by TEXT;
ALTER TABLE outbox ADD COLUMN taken_until TIMESTAMPTZ;

CREATE INDEX outbox_pending_targets ON outbox (channel, target)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
