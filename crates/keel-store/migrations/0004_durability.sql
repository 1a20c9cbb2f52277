-- keel store, schema version 4: durability. Checkpoints after every safe boundary, the tool-call
-- idempotency envelope, the events of each run, the run journal of each session, and what the
-- reconciler and cooperative cancellation need on a run (DESIGN.md section 7).
--
-- Never edit this file once released (see 0001_init.sql for the conventions). Everything here
-- but the boundary's own rows is written by one transaction per safe boundary; see
-- src/durability.rs for the write path.

-- Dollars spent, at the price table's prices.
ALTER TABLE runs ADD COLUMN cost DOUBLE PRECISION NOT NULL DEFAULT 0.0;
-- When the run's worker last showed it was alive; NULL: never (runs from before this version).
ALTER TABLE runs ADD COLUMN heartbeat_at TEXT;
-- When someone asked the run to stop; set once, by request_cancel only. Saving a run never
-- changes it.
ALTER TABLE runs ADD COLUMN cancel_requested_at TEXT;
-- Set by the reconciler on a run whose worker died after a resumable checkpoint.
ALTER TABLE runs ADD COLUMN resume_available BOOLEAN NOT NULL DEFAULT FALSE;
-- How many rows of run_events the run has: the next event is numbered event_count + 1, so a
-- commit numbers its events without reading them (the way sessions.message_count numbers
-- messages).
ALTER TABLE runs ADD COLUMN event_count BIGINT NOT NULL DEFAULT 0;

-- The runs the reconciler looks at: partial, so a finished run leaves it for good, and ordered
-- as listed (oldest first). The query must repeat the WHERE clause word for word for SQLite to
-- use it. The write path sets `state` only when it changes, so that saving a run whose state
-- stayed the same does not touch this index.
CREATE INDEX runs_active ON runs (started_at, id)
    WHERE state NOT IN ('completed', 'cancelled', 'timed_out', 'max_steps', 'budget_exceeded',
                        'error');

-- The state of a run at each safe boundary, in order.
CREATE TABLE checkpoints (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- 1-based position among the run's checkpoints.
    seq             BIGINT NOT NULL,
    -- Boundary in snake_case ("input", "llm_response", ...).
    boundary        TEXT NOT NULL,
    iteration       BIGINT NOT NULL,
    -- Seq of the first message the run holds, and of the last it stored.
    message_cursor  BIGINT NOT NULL,
    persisted       BIGINT NOT NULL,
    prompt_hash     TEXT NOT NULL,
    -- JSON array of the ids of the tool calls completed so far.
    completed_calls TEXT NOT NULL,
    -- JSON of the run's own state, without its messages.
    state           TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- The idempotency envelope: one row per tool call, written before it starts and again when it
-- completes. Not a foreign key to runs: rows are also recorded outside a boundary, and a store
-- accepts them for any run id.
CREATE TABLE tool_calls (
    run_id       TEXT NOT NULL,
    call_id      TEXT NOT NULL,
    name         TEXT NOT NULL,
    -- The model's raw JSON arguments.
    arguments    TEXT NOT NULL,
    idempotent   BOOLEAN NOT NULL,
    started_at   TEXT NOT NULL,
    -- NULL while running, or when the worker died mid-call.
    completed_at TEXT,
    ok           BOOLEAN,
    -- What the model saw, once finished.
    output       TEXT,
    PRIMARY KEY (run_id, call_id)
);

-- The events of each run, in the order emitted.
CREATE TABLE run_events (
    run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- 1-based position among the run's events (see runs.event_count).
    seq     BIGINT NOT NULL,
    ts      TEXT NOT NULL,
    -- The stable dotted name ("agent_run.started", ...), for queries by kind.
    name    TEXT NOT NULL,
    -- JSON of the whole event, as serde writes keel_core::Event.
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- The run journal of each session, replaced whole when it changes.
CREATE TABLE journals (
    session_id TEXT NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    -- JSON of keel_core::Journal.
    journal    TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
