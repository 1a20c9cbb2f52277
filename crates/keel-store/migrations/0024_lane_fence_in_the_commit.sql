-- keel store, schema version 24: the lane fence (0006) is a statement of each commit that stores
-- a run's messages, no longer a trigger on `messages`.
--
-- Why: a trigger made every message insert a statement that writes more than one thing and may
-- abort, so SQLite opened a statement journal for it and copied each page the insert touched
-- before changing it, in case that one statement had to be undone alone. keel never needs that:
-- a failed commit is rolled back whole. The copies were ~4% of the store writer's time at 100
-- conversations (issue 18). The fence itself is unchanged: a write of a run's messages into a
-- session whose lane another run holds fails, whole. keel-store's planner now asks
-- `SELECT 1 FROM session_lanes WHERE session_id = … AND run_id <> …` before it inserts a run's
-- messages, in the same transaction, once per batch instead of once per row, and refuses the
-- write when a row comes back (see src/batch.rs). A keel process started before this version
-- (and still running while a newer one upgrades the file) writes without the fence until it
-- restarts.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

DROP TRIGGER session_lanes_fence;
