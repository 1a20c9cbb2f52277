-- keel store, schema version 11: the platform of seed 003. Conversations know their place on a
-- platform and whether they are trusted; a queued run keeps what the incoming-message pipeline
-- chose for it; an API key names the platforms it may speak for; personas.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

-- JSON {platform, channel_id, thread_id?, server_id?}; NULL for conversations made otherwise.
ALTER TABLE sessions ADD COLUMN place TEXT;
-- 0 for a conversation from an untrusted source (an email, an event) or a sub-agent of one.
ALTER TABLE sessions ADD COLUMN trusted BOOLEAN NOT NULL DEFAULT 1;

-- JSON run options (persona settings, allowed modules, trust, place); NULL: none.
ALTER TABLE run_queue ADD COLUMN options TEXT;

-- JSON array of platform names; NULL: none.
ALTER TABLE api_keys ADD COLUMN platforms TEXT;

CREATE TABLE personas (
    name               TEXT NOT NULL PRIMARY KEY,
    system_prompt      TEXT NOT NULL,
    platform           TEXT,
    platform_server_id TEXT,
    model              TEXT,
    max_tokens         BIGINT,
    -- JSON array of module names; NULL: every module.
    allowed_modules    TEXT,
    temperature        REAL,
    is_default         BOOLEAN NOT NULL DEFAULT 0,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);
-- One persona per place (seed 003's cascade must pick one), and one default.
CREATE UNIQUE INDEX personas_by_place ON personas (platform, IFNULL(platform_server_id, ''))
    WHERE platform IS NOT NULL;
CREATE UNIQUE INDEX personas_one_default ON personas (is_default) WHERE is_default;
