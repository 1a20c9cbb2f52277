-- keel store, schema version 10: the token log (seed 003, step 8b). One row per model call,
-- written by the run's boundary commit together with the user's running total in usage_log.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE token_log (
    id                 INTEGER PRIMARY KEY,
    -- NULL for runs for no user: counted, never budgeted.
    user_id            TEXT,
    session_id         TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    -- "YYYY-MM" in UTC, the month the call is counted in.
    month              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost               REAL NOT NULL,
    created_at         TEXT NOT NULL
);
CREATE INDEX token_log_by_month ON token_log (month, user_id, model);
CREATE INDEX token_log_by_run ON token_log (run_id);
