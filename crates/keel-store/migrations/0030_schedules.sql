-- keel store, schema version 30: schedules (issue 34).
--
-- A schedule fires a message into a conversation at its slots (once, every interval, or on a
-- cron expression in a time zone). Each slot's fate is one row of schedule_slots, keyed by
-- (schedule_id, slot): a fire writes its row ('fired', with its run) in the transaction that
-- queues the run (run_queue), and a slot that has a row already (fired, missed or refused)
-- queues nothing, so no slot fires twice whatever the number of daemons or restarts.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    -- The user its runs are for; NULL for a conversation without one.
    owner         TEXT,
    -- 'model' | 'operator'
    created_by    TEXT NOT NULL,
    -- 'once' | 'every' | 'cron', and its spec (an instant, an interval, a cron expression).
    kind          TEXT NOT NULL,
    spec          TEXT NOT NULL,
    tz            TEXT,
    text          TEXT NOT NULL,
    -- 'skip' | 'once' | 'all'
    catch_up      TEXT NOT NULL,
    catch_up_cap  BIGINT NOT NULL,
    -- 'active' | 'paused' | 'done'
    state         TEXT NOT NULL,
    paused_reason TEXT,
    next_slot     TEXT,
    -- Fires in a row whose runs ended badly, and how many pause it.
    failures      BIGINT NOT NULL DEFAULT 0,
    max_failures  BIGINT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX schedules_due ON schedules (next_slot) WHERE state = 'active';
CREATE INDEX schedules_of_session ON schedules (session_id);

CREATE TABLE schedule_slots (
    schedule_id TEXT NOT NULL,
    slot        TEXT NOT NULL,
    -- 'fired' | 'missed' | 'refused' | 'failed' (a fire whose run ended badly).
    outcome     TEXT NOT NULL,
    run_id      TEXT,
    reason      TEXT,
    at          TEXT NOT NULL,
    -- For a fire: when its run's end was counted (success or failure); NULL until then.
    settled_at  TEXT,
    PRIMARY KEY (schedule_id, slot)
) WITHOUT ROWID;

CREATE INDEX schedule_slots_unsettled ON schedule_slots (run_id)
    WHERE outcome = 'fired' AND settled_at IS NULL;
