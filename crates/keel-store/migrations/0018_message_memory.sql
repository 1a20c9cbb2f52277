-- keel store, schema version 18: messages as memories (DESIGN.md section 11, issue 17).
--
-- Every message a person or the model wrote is scored for importance as it is stored; the
-- score lives in its metadata (`meta.importance`, see keel_core::importance), which a model
-- scorer may replace later. `importance` reads it back as a column, for the partial index that
-- finds a user's most important messages (0.9 or more: the ones recalled on every turn)
-- without a scan. Metadata that is not JSON counts as
-- no score, and so does a score that is not a number: reading it must never make a query or this upgrade fail.
--
-- Embeddings of the messages that matter (computed after a run, once per message) are kept
-- beside them, keyed by the message's rowid, which keel never changes (see 0016).
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

ALTER TABLE messages ADD COLUMN importance REAL GENERATED ALWAYS AS (
    CASE WHEN meta IS NOT NULL AND json_valid(meta)
        AND json_type(meta, '$.importance') IN ('real', 'integer')
        THEN CAST(json_extract(meta, '$.importance') AS REAL) END
) VIRTUAL;

CREATE INDEX messages_important ON messages (importance) WHERE importance >= 0.9;

CREATE TABLE message_embeddings (
    message INTEGER PRIMARY KEY,
    model   TEXT NOT NULL,
    vector  BLOB NOT NULL
);

CREATE TRIGGER message_embeddings_delete AFTER DELETE ON messages
BEGIN
    DELETE FROM message_embeddings WHERE message = old.rowid;
END;
