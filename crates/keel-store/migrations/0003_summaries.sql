-- keel store, schema version 3: compaction summaries found without reading what they replace.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).
--
-- A compaction summary is a message whose meta holds "summary_of": {"first", "last"}, the seqs
-- of the messages it stands in for. A new run of a session needs only the messages after the
-- latest summary's "last"; keeping that number in a column of its own lets the store find it
-- through a small index instead of reading and decoding every message's meta.

-- summary_of.last of a compaction summary; NULL for every other message.
ALTER TABLE messages ADD COLUMN summary_last BIGINT;

-- Partial: it holds only the summaries, a handful per session, so appends of ordinary messages
-- never touch it. summary_last is included so that finding a session's latest summary reads the
-- index alone (the query must repeat "summary_last IS NOT NULL" for the index to apply).
CREATE INDEX messages_summaries ON messages (session_id, seq, summary_last)
    WHERE summary_last IS NOT NULL;

-- Sessions compacted before this version: take the range from the metadata JSON. Rows whose
-- meta is not valid JSON, or whose "last" is not an integer, are left NULL rather than failing
-- the upgrade (reading such a message reports it as corrupt anyway). CASE evaluates json_type
-- only where json_valid holds. PostgreSQL would say (meta::jsonb #>> '{summary_of,last}')::bigint.
UPDATE messages
SET summary_last = json_extract(meta, '$.summary_of.last')
WHERE meta IS NOT NULL
  AND CASE WHEN json_valid(meta) THEN json_type(meta, '$.summary_of.last') = 'integer' END;
