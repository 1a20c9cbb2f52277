-- keel store on PostgreSQL, schema version 1: the tables of the SQLite store's schema (version
-- 30, `migrations/`), with the same names, columns and meanings, so one contract holds for both.
--
-- Conventions (as on SQLite): ids are text; timestamps are RFC 3339 UTC text with nine
-- fractional digits (fixed width, so text order is time order, and nanoseconds survive, which a
-- TIMESTAMPTZ would round to microseconds); JSON is text that keel-core's serde types write;
-- counters are BIGINT. What SQLite numbered by rowid is a BIGINT identity here.
--
-- What PostgreSQL adds: many workers share these tables. A session's lane (`session_lanes`, one
-- row per session) is held by one run at a time, and `runs_one_executing_per_session` makes
-- two executing runs of one conversation impossible whatever the code above does.
--
-- Never edit this file once released: a schema change is a new file with the next version.

CREATE TABLE sessions (
    id            TEXT NOT NULL PRIMARY KEY,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    title         TEXT,
    message_count BIGINT NOT NULL DEFAULT 0,
    owner         TEXT,
    lane_policy   TEXT NOT NULL DEFAULT 'queue',
    place         TEXT,
    trusted       BOOLEAN NOT NULL DEFAULT TRUE
);
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_owner ON sessions (owner, created_at, id);
CREATE INDEX sessions_by_updated ON sessions (updated_at, id);

CREATE TABLE messages (
    -- Insertion order across sessions (SQLite's rowid): what search and embeddings point at.
    id            BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    run_id        TEXT,
    role          TEXT NOT NULL,
    content       TEXT NOT NULL,
    tool_calls    TEXT,
    tool_call_id  TEXT,
    reasoning     TEXT,
    meta          TEXT,
    created_at    TEXT NOT NULL,
    summary_last  BIGINT,
    -- Read out of `meta` by the store as it writes the row (SQLite computes them).
    importance    DOUBLE PRECISION,
    model         TEXT,
    output_tokens BIGINT,
    pinned        BOOLEAN NOT NULL DEFAULT FALSE,
    internal      BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX messages_important ON messages (importance) WHERE importance >= 0.9;
CREATE INDEX messages_pinned ON messages (session_id, seq) WHERE pinned;
CREATE INDEX messages_summaries ON messages (session_id, seq, summary_last)
    WHERE summary_last IS NOT NULL;

CREATE TABLE runs (
    id                  TEXT NOT NULL PRIMARY KEY,
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    state               TEXT NOT NULL,
    reason              TEXT,
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    model_used          TEXT,
    iterations          BIGINT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cache_read_tokens   BIGINT NOT NULL,
    cache_write_tokens  BIGINT NOT NULL,
    final_text          TEXT,
    error               TEXT,
    started_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    finished_at         TEXT,
    cost                DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    heartbeat_at        TEXT,
    cancel_requested_at TEXT,
    resume_available    BOOLEAN NOT NULL DEFAULT FALSE,
    event_count         BIGINT NOT NULL DEFAULT 0,
    launch              TEXT,
    worker              TEXT,
    rolled_back_by      TEXT
);
CREATE INDEX runs_active ON runs (started_at, id)
    WHERE state NOT IN ('completed', 'cancelled', 'timed_out', 'max_steps', 'budget_exceeded',
        'error');
CREATE INDEX runs_by_session_started ON runs (session_id, started_at, id);
CREATE INDEX runs_by_started ON runs (started_at, id);
CREATE INDEX runs_rolled_back ON runs (session_id) WHERE rolled_back_by IS NOT NULL;
-- The lane rule in the database: at most one run of a conversation executes at any moment.
CREATE UNIQUE INDEX runs_one_executing_per_session ON runs (session_id)
    WHERE state IN ('running', 'waiting_for_tool');

CREATE TABLE checkpoints (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    boundary        TEXT NOT NULL,
    iteration       BIGINT NOT NULL,
    message_cursor  BIGINT NOT NULL,
    persisted       BIGINT NOT NULL,
    prompt_hash     TEXT NOT NULL,
    completed_calls TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    frame           TEXT,
    first_event     BIGINT,
    events          BIGINT NOT NULL DEFAULT 0,
    event_names     TEXT,
    event_payload   TEXT,
    tool_calls      TEXT,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE tool_calls (
    run_id       TEXT NOT NULL,
    call_id      TEXT NOT NULL,
    name         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    idempotent   BOOLEAN NOT NULL,
    started_at   TEXT NOT NULL,
    completed_at TEXT,
    ok           BOOLEAN,
    output       TEXT,
    PRIMARY KEY (run_id, call_id)
);

CREATE TABLE run_events (
    run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    ts      TEXT NOT NULL,
    name    TEXT NOT NULL,
    payload TEXT NOT NULL,
    events  BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE journals (
    session_id TEXT NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    journal    TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE session_approvals (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    approval   TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, approval)
);

CREATE TABLE session_lanes (
    session_id TEXT NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL,
    worker     TEXT NOT NULL,
    claimed_at TEXT NOT NULL
);

CREATE TABLE run_queue (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      TEXT NOT NULL UNIQUE,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id     TEXT,
    message     TEXT NOT NULL,
    enqueued_at TEXT NOT NULL,
    provider    TEXT NOT NULL,
    model       TEXT NOT NULL,
    options     TEXT
);
CREATE INDEX run_queue_by_session ON run_queue (session_id, seq);

CREATE TABLE users (
    id                   TEXT NOT NULL PRIMARY KEY,
    monthly_token_budget BIGINT,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    permission           TEXT NOT NULL DEFAULT 'user'
);

CREATE TABLE usage_log (
    user_id            TEXT NOT NULL,
    month              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, month)
);

CREATE TABLE token_log (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id            TEXT,
    session_id         TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    month              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost               DOUBLE PRECISION NOT NULL,
    created_at         TEXT NOT NULL
);
CREATE INDEX token_log_by_month ON token_log (month, user_id, model);

CREATE TABLE file_blobs (
    sha256  TEXT NOT NULL PRIMARY KEY,
    content BYTEA NOT NULL
);
CREATE TABLE files (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size       BIGINT NOT NULL,
    sha256     TEXT NOT NULL REFERENCES file_blobs (sha256),
    session_id TEXT NOT NULL REFERENCES sessions (id),
    user_id    TEXT,
    run_id     TEXT,
    origin     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX files_by_run ON files (run_id, created_at) WHERE run_id IS NOT NULL;
CREATE INDEX files_by_session ON files (session_id, created_at);
CREATE INDEX files_by_sha256 ON files (sha256);

CREATE TABLE api_keys (
    id         TEXT NOT NULL PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    user_id    TEXT,
    admin      BOOLEAN NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    platforms  TEXT
);

CREATE TABLE personas (
    name               TEXT NOT NULL PRIMARY KEY,
    system_prompt      TEXT NOT NULL,
    platform           TEXT,
    platform_server_id TEXT,
    model              TEXT,
    max_tokens         BIGINT,
    allowed_modules    TEXT,
    temperature        DOUBLE PRECISION,
    is_default         BOOLEAN NOT NULL DEFAULT FALSE,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);
CREATE UNIQUE INDEX personas_by_place ON personas (platform, COALESCE(platform_server_id, ''))
    WHERE platform IS NOT NULL;
CREATE UNIQUE INDEX personas_one_default ON personas (is_default) WHERE is_default;

CREATE TABLE platform_conversations (
    kind       TEXT NOT NULL,
    platform   TEXT NOT NULL,
    server_id  TEXT NOT NULL,
    channel_id TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    sender     TEXT NOT NULL,
    session_id TEXT NOT NULL UNIQUE REFERENCES sessions (id) ON DELETE CASCADE,
    PRIMARY KEY (kind, platform, server_id, channel_id, thread_id, sender)
);

CREATE TABLE platform_links (
    platform         TEXT NOT NULL,
    platform_user_id TEXT NOT NULL,
    user_id          TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    username         TEXT,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (platform, platform_user_id)
);
CREATE INDEX platform_links_by_user ON platform_links (user_id, platform);

CREATE TABLE facts (
    n              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    user_id        TEXT NOT NULL,
    text           TEXT NOT NULL,
    key            TEXT,
    source_session TEXT,
    source_seq     BIGINT,
    confidence     DOUBLE PRECISION NOT NULL,
    importance     DOUBLE PRECISION NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    superseded_by  TEXT,
    embedding      BYTEA
);
CREATE INDEX facts_by_user ON facts (user_id, n);
CREATE INDEX facts_current ON facts (user_id, key) WHERE superseded_by IS NULL;

CREATE TABLE message_embeddings (
    message BIGINT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    model   TEXT NOT NULL,
    vector  BYTEA NOT NULL
);

CREATE TABLE inbound_events (
    source      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (source, event_id)
);

CREATE TABLE deliveries (
    session_id TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    target     TEXT NOT NULL
);

CREATE TABLE outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel         TEXT NOT NULL,
    target          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    run_id          TEXT,
    run_state       TEXT,
    marker          TEXT,
    body            TEXT,
    created_at      TEXT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    delivered_at    TEXT,
    receipt         TEXT,
    failed_at       TEXT,
    last_error      TEXT,
    UNIQUE (run_id, marker)
);
CREATE INDEX outbox_pending ON outbox (channel, id)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

CREATE TABLE channel_state (
    channel    TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (channel, key)
);

CREATE TABLE pairings (
    code             TEXT PRIMARY KEY,
    platform         TEXT NOT NULL,
    platform_user_id TEXT NOT NULL,
    username         TEXT,
    created_at       TEXT NOT NULL,
    UNIQUE (platform, platform_user_id)
);

CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    owner         TEXT,
    created_by    TEXT NOT NULL,
    kind          TEXT NOT NULL,
    spec          TEXT NOT NULL,
    tz            TEXT,
    text          TEXT NOT NULL,
    catch_up      TEXT NOT NULL,
    catch_up_cap  BIGINT NOT NULL,
    state         TEXT NOT NULL,
    paused_reason TEXT,
    next_slot     TEXT,
    failures      BIGINT NOT NULL DEFAULT 0,
    max_failures  BIGINT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_slot) WHERE state = 'active';
CREATE INDEX schedules_of_session ON schedules (session_id);

CREATE TABLE schedule_slots (
    schedule_id TEXT NOT NULL,
    slot        TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    run_id      TEXT,
    reason      TEXT,
    at          TEXT NOT NULL,
    settled_at  TEXT,
    PRIMARY KEY (schedule_id, slot)
);
CREATE INDEX schedule_slots_unsettled ON schedule_slots (run_id)
    WHERE outcome = 'fired' AND settled_at IS NULL;
