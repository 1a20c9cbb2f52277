-- keel store, schema version 6: session lanes. At most one active run per session: a run claims
-- its session's row here before it reads the history, and its terminal commit deletes the row in
-- the same transaction (see src/lanes.rs and keel-core's lane module for when a claim lapses).
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE session_lanes (
    session_id TEXT NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    -- The run holding the lane; not a foreign key: the claim comes before the run is stored.
    run_id     TEXT NOT NULL,
    -- Who runs it (e.g. "host:pid"), for people reading a busy lane.
    worker     TEXT NOT NULL,
    claimed_at TEXT NOT NULL
);

-- The fence: a run may add messages to a session only while no other run holds its lane. A
-- worker that went silent and lost its lane to another run fails here, whole, at its next
-- write, instead of interleaving its messages with the new holder's. Messages of no run, and
-- sessions nobody claimed (embedders that never claim a lane), are not concerned.
CREATE TRIGGER session_lanes_fence BEFORE INSERT ON messages
WHEN NEW.run_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM session_lanes l WHERE l.session_id = NEW.session_id AND l.run_id <> NEW.run_id)
BEGIN
    SELECT RAISE(ABORT, 'the session''s lane is held by another run');
END;
