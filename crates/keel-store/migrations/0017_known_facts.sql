-- keel store, schema version 17: known facts (DESIGN.md section 11, the keel-memory crate).
-- Durable facts per user, with their source, confidence and importance; a newer fact with the
-- same key supersedes the older one (kept, `superseded_by` set, until forgotten). Facts are
-- searched by an FTS5 index over their text (BM25) and by their embedding, stored as a BLOB of
-- little-endian f32 values and compared in Rust.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE facts (
    -- The FTS5 index's rowid: an alias of the rowid, so VACUUM never renumbers it.
    n              INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    user_id        TEXT NOT NULL,
    text           TEXT NOT NULL,
    key            TEXT,
    source_session TEXT,
    source_seq     BIGINT,
    confidence     REAL NOT NULL,
    importance     REAL NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    superseded_by  TEXT,
    embedding      BLOB
);
CREATE INDEX facts_current ON facts (user_id, key) WHERE superseded_by IS NULL;
CREATE INDEX facts_by_user ON facts (user_id, n);

CREATE VIRTUAL TABLE facts_fts USING fts5 (
    text,
    content = 'facts',
    content_rowid = 'n',
    tokenize = 'unicode61'
);

CREATE TRIGGER facts_fts_insert AFTER INSERT ON facts BEGIN
    INSERT INTO facts_fts (rowid, text) VALUES (new.n, new.text);
END;
CREATE TRIGGER facts_fts_delete AFTER DELETE ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, text) VALUES ('delete', old.n, old.text);
END;
CREATE TRIGGER facts_fts_update AFTER UPDATE OF text ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, text) VALUES ('delete', old.n, old.text);
    INSERT INTO facts_fts (rowid, text) VALUES (new.n, new.text);
END;
