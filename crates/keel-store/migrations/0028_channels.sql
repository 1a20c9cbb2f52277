-- keel store, schema version 28: channels (issue 33, DESIGN.md section 14).
--
-- Inbound, exactly once: every platform event a channel turns into a run is recorded here by
-- its source's own id, in the transaction that queues the run (run_queue), so a redelivery (a
-- Slack retry, a Telegram offset replayed after a crash, a webhook sent twice) finds its row
-- and queues nothing.
--
-- Outbound, never lost: a conversation a channel serves has a delivery route; the commit that
-- moves one of its runs into an ending state or into waiting_on_human writes an outbox row in
-- the same transaction (keel-store's batch.rs), and a channel's sender marks it delivered only
-- with the platform's receipt.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE inbound_events (
    source      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (source, event_id)
) WITHOUT ROWID;

CREATE TABLE deliveries (
    session_id TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    -- Where, as the channel describes it (JSON only it reads).
    target     TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT NOT NULL,
    target          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    -- The run whose state change it tells, and that state; NULL for a notice.
    run_id          TEXT,
    run_state       TEXT,
    -- The run's updated_at at that change: one row per change, however often it is committed.
    marker          TEXT,
    -- A notice's text.
    body            TEXT,
    created_at      TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
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
) WITHOUT ROWID;

CREATE TABLE pairings (
    code             TEXT PRIMARY KEY,
    platform         TEXT NOT NULL,
    platform_user_id TEXT NOT NULL,
    username         TEXT,
    created_at       TEXT NOT NULL,
    UNIQUE (platform, platform_user_id)
) WITHOUT ROWID;
