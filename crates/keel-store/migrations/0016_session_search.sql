-- keel store, schema version 16: full-text search over past sessions (`session_search`).
--
-- An FTS5 index over the text of the messages a person and the model wrote: user and assistant
-- messages with text, not the loop's internal ones (meta.internal set) and not tool results.
-- It is an external-content table: the text stays only in `messages`; the index keeps the
-- tokens, and snippet() reads the text back by rowid. Triggers keep it in step in the same
-- transaction as the message insert, whoever writes (the batched writer or anything else).
-- Messages are append-only; the delete trigger covers a session deleted with its messages.
-- Metadata that is not JSON (written by hand, or damaged) counts as not internal: indexing it
-- must never make an insert, or this upgrade, fail. The index is keyed by the messages' rowid,
-- which keel never changes (it never runs VACUUM, which may renumber a table's rowids).
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content = 'messages',
    content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 0'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.role IN ('user', 'assistant') AND new.content <> ''
    AND CASE WHEN new.meta IS NULL OR NOT json_valid(new.meta) THEN 1
        ELSE json_extract(new.meta, '$.internal') IS NULL END
BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.rowid, new.content);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.role IN ('user', 'assistant') AND old.content <> ''
    AND CASE WHEN old.meta IS NULL OR NOT json_valid(old.meta) THEN 1
        ELSE json_extract(old.meta, '$.internal') IS NULL END
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;

-- The messages stored before this version.
INSERT INTO messages_fts (rowid, content)
SELECT rowid, content FROM messages
WHERE role IN ('user', 'assistant') AND content <> ''
    AND CASE WHEN meta IS NULL OR NOT json_valid(meta) THEN 1
        ELSE json_extract(meta, '$.internal') IS NULL END;
