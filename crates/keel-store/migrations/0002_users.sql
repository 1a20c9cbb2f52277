-- keel store, schema version 2: users and their monthly token usage.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE users (
    id                   TEXT NOT NULL PRIMARY KEY,
    -- Tokens (input + output) the user may spend per calendar month in UTC; NULL: unlimited.
    monthly_token_budget BIGINT,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL
);

-- What each user spent per month. Not a foreign key to users: usage is counted for every user,
-- also those without a record (and so without a budget).
CREATE TABLE usage_log (
    user_id            TEXT NOT NULL,
    -- "YYYY-MM" in UTC; a new month is a new row, so budgets reset by themselves.
    month              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, month)
);
