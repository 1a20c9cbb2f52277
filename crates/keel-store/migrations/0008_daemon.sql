-- keel store, schema version 8: what the daemon (`keel serve`) keeps. Conversations get an
-- owner (the user whose API key made them) and a lane policy; messages accepted for a busy
-- conversation wait in `run_queue` until their run starts; API keys are stored as hashes.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

ALTER TABLE sessions ADD COLUMN owner TEXT;
-- "queue" (wait for the running run) or "interrupt" (cancel it at its next safe point).
ALTER TABLE sessions ADD COLUMN lane_policy TEXT NOT NULL DEFAULT 'queue';
CREATE INDEX sessions_by_owner ON sessions (owner, created_at, id);
CREATE INDEX sessions_by_created ON sessions (created_at, id);

-- A message accepted for a conversation, waiting for its run to start. The run's first commit
-- (the one that stores this message in the transcript) deletes the row in the same
-- transaction, so a message is always here or in the transcript, never in both or neither.
CREATE TABLE run_queue (
    -- Arrival order, also among rows written in the same instant.
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL UNIQUE,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id     TEXT,
    message     TEXT NOT NULL,
    enqueued_at TEXT NOT NULL,
    provider    TEXT NOT NULL,
    model       TEXT NOT NULL
);
CREATE INDEX run_queue_by_session ON run_queue (session_id, seq);

-- API keys of the daemon: only the hex SHA-256 of each key.
CREATE TABLE api_keys (
    id         TEXT NOT NULL PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    user_id    TEXT,
    admin      BOOLEAN NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
