-- keel store, schema version 23: a commit's events are kept in its checkpoint's row.
--
-- Why: every safe boundary writes a checkpoint and its events, each a row keyed by run, so at
-- 10,000 live runs each boundary dirtied a leaf page of both tables, somewhere among the runs,
-- and its commit wrote and checksummed both pages. With the events in the checkpoint's row a
-- boundary writes one row and one leaf fewer: in bare SQLite (keel-store's `writer_floor`
-- bench), 41-45 µs a boundary instead of 57-63 at 10,000 runs (issue 18).
--
-- A checkpoint row holds `events` events (0: none), numbered `first_event`, `first_event + 1`,
-- … as `run_events` rows do (0020): `event_payload` is their JSON, one event per line, and
-- `event_names` their dotted names separated by single spaces. The events of a commit without a
-- checkpoint, and all those written before this version, stay in `run_events`; a run's events
-- are the rows of both, by number, which `runs.event_count` still counts across both. A keel
-- process started before this version (and still running while a newer one upgrades the file)
-- reads `run_events` only, so it misses the newer process's events until it restarts.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

ALTER TABLE checkpoints ADD COLUMN first_event BIGINT;
ALTER TABLE checkpoints ADD COLUMN events BIGINT NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN event_names TEXT;
ALTER TABLE checkpoints ADD COLUMN event_payload TEXT;
