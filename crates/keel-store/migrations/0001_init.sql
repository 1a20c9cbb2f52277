-- keel store, schema version 1: sessions, messages, runs.
--
-- Never edit this file once released: the migrator checks its checksum. Change the schema by
-- adding 0002_*.sql (checkpoints, tool_call_envelopes, journal, usage_log, users are expected to
-- arrive that way, keyed by sessions.id / runs.id).
--
-- Conventions, kept portable to PostgreSQL where it costs nothing:
--   * ids are TEXT chosen by the caller;
--   * counters are BIGINT (SQLite: 64-bit INTEGER affinity);
--   * timestamps are RFC 3339 UTC text with exactly nine fractional digits
--     ("2025-01-02T03:04:05.123456789Z"): fixed width, so text order is time order, and lossless;
--   * JSON columns hold serde_json text; NULL means "none" or "default".

CREATE TABLE sessions (
    id            TEXT NOT NULL PRIMARY KEY,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    -- First non-internal user message, shortened; set once.
    title         TEXT,
    -- Messages are append-only and numbered 1, 2, ...: this is also the highest seq.
    message_count BIGINT NOT NULL DEFAULT 0
);

-- No index on updated_at: it would be rewritten by every append, the hot path, while listing
-- sessions (a scan of this small table) is rare. Per-user listings will get their own index.

CREATE TABLE messages (
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- 1-based position within the session.
    seq          BIGINT NOT NULL,
    -- The run that wrote it; not a foreign key, a run may be saved after its first messages.
    run_id       TEXT,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    -- JSON array of {"id","name","arguments"}; arguments is the model's raw text. NULL: no calls.
    tool_calls   TEXT,
    tool_call_id TEXT,
    -- JSON {"text", "replay"?}. NULL: no reasoning.
    reasoning    TEXT,
    -- JSON {"internal"?, "pinned"?, "importance"?}. NULL: default metadata.
    meta         TEXT,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE runs (
    id                 TEXT NOT NULL PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- AgentState in snake_case ("running", "completed", ...).
    state              TEXT NOT NULL,
    -- ErrorReason in snake_case, when the run ended in error.
    reason             TEXT,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    model_used         TEXT,
    iterations         BIGINT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    final_text         TEXT,
    error              TEXT,
    started_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    finished_at        TEXT
);

CREATE INDEX runs_by_session_started ON runs (session_id, started_at, id);
CREATE INDEX runs_by_started ON runs (started_at, id);
