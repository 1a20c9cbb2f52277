-- A run's frame (its settings and tool specs, as JSON) is written with its first checkpoint
-- and again only when it changes, instead of inside every checkpoint's state: a boundary then
-- stores only what is new. NULL on the checkpoints that carry no frame, and on those written
-- before this migration (their state holds the frame's fields, which a restore reads there).
ALTER TABLE checkpoints ADD COLUMN frame TEXT;
