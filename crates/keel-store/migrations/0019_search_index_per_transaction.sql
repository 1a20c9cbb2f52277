-- keel store, schema version 19: the session-search index (0016) takes new messages once per
-- write transaction, as its last statement, instead of one by one from an insert trigger.
--
-- Why: once a transaction has written to an FTS5 index, every later statement that opens a
-- statement journal (a multi-row insert, an upsert, a trigger) makes FTS5 flush what it holds
-- as a new segment of the index. With the trigger, a commit of the writer wrote one segment per
-- statement after its messages, and merged them: about a sixth of the writer's work (issue 18).
-- Now the writer ends each transaction that stored messages with
--
--     INSERT INTO messages_fts (rowid, content)
--         SELECT id, content FROM messages_searchable
--         WHERE id > (SELECT last FROM messages_fts_indexed);
--     UPDATE messages_fts_indexed SET last = <highest rowid of messages>;
--
-- (keel-store's `search_index`), and the store runs the same when it opens. `last` is the
-- highest rowid of `messages` the index has been brought up to: every message at or below it is
-- in the index if it is searchable. A watermark rather than a list of what to index: whatever
-- stored a message (the writer, a keel that was running while this upgrade ran, a hand-written
-- insert), the next catch-up finds it. It is in the same transaction as the messages, so a
-- rollback takes both back. Messages get rowid max + 1 (the table has no AUTOINCREMENT), so a
-- rowid reused after the newest messages are deleted must be caught up again: the delete
-- trigger lowers the watermark to the highest rowid left.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

DROP TRIGGER messages_fts_insert;

-- The messages the index holds: the same choice as 0016's triggers.
CREATE VIEW messages_searchable AS
SELECT rowid AS id, content FROM messages
WHERE role IN ('user', 'assistant') AND content <> ''
    AND CASE WHEN meta IS NULL OR NOT json_valid(meta) THEN 1
        ELSE json_extract(meta, '$.internal') IS NULL END;

-- One row: `last`, the highest rowid of `messages` the index has been brought up to.
CREATE TABLE messages_fts_indexed (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);

-- Up to this version the insert trigger indexed every message as it was stored.
INSERT INTO messages_fts_indexed (id, last) SELECT 1, coalesce(max(rowid), 0) FROM messages;

-- A message above the watermark is not in the index yet: deleting it from the index would
-- corrupt it. The index's delete goes first: lowering the watermark first could leave the
-- deleted row out of the index's delete.
DROP TRIGGER messages_fts_delete;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
    SELECT 'delete', old.rowid, old.content
    WHERE old.rowid <= (SELECT last FROM messages_fts_indexed)
        AND old.role IN ('user', 'assistant') AND old.content <> ''
        AND CASE WHEN old.meta IS NULL OR NOT json_valid(old.meta) THEN 1
            ELSE json_extract(old.meta, '$.internal') IS NULL END;
    UPDATE messages_fts_indexed SET last = (SELECT coalesce(max(rowid), 0) FROM messages)
    WHERE last > (SELECT coalesce(max(rowid), 0) FROM messages);
END;
