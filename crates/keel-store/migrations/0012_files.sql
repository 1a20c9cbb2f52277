-- keel store, schema version 12: files (seed 003, steps 6 and 9). Attachments sent with a
-- message and files a tool produced are records over content kept once per SHA-256.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE file_blobs (
    sha256  TEXT NOT NULL PRIMARY KEY,
    content BLOB NOT NULL
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
    -- 'attachment' or 'produced'.
    origin     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX files_by_run ON files (run_id, created_at) WHERE run_id IS NOT NULL;
CREATE INDEX files_by_session ON files (session_id, created_at);
