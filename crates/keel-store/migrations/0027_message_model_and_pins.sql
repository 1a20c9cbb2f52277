-- keel store, schema version 27: what a message's metadata says of its model and its pin, as
-- columns (issue 31).
--
-- An assistant message a model wrote records that model and the output tokens the provider
-- counted for the answer (`meta.model`, `meta.output_tokens`; see keel_core::MessageMeta), as
-- seed 003 saves them with the final answer. `model` and `output_tokens` read them back as
-- columns, so a query can ask which model wrote what without parsing JSON.
--
-- A pinned message (`meta.pinned`) survives compaction verbatim: a new run loads the pinned
-- messages the latest summary replaced together with the messages after it. `pinned` reads the
-- mark back, and a partial index finds a session's pinned messages without a scan. Only
-- metadata that mentions "pinned" is parsed, so the index costs the hot insert path a substring
-- search; metadata that is not JSON counts as no pin, as in 0018.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

ALTER TABLE messages ADD COLUMN model TEXT GENERATED ALWAYS AS (
    CASE WHEN meta IS NOT NULL AND json_valid(meta) AND json_type(meta, '$.model') = 'text'
        THEN json_extract(meta, '$.model') END
) VIRTUAL;

ALTER TABLE messages ADD COLUMN output_tokens BIGINT GENERATED ALWAYS AS (
    CASE WHEN meta IS NOT NULL AND json_valid(meta)
        AND json_type(meta, '$.output_tokens') = 'integer'
        THEN json_extract(meta, '$.output_tokens') END
) VIRTUAL;

ALTER TABLE messages ADD COLUMN pinned INTEGER GENERATED ALWAYS AS (
    CASE WHEN instr(meta, '"pinned"') > 0 AND json_valid(meta)
        AND json_type(meta, '$.pinned') = 'true' THEN 1 END
) VIRTUAL;

CREATE INDEX messages_pinned ON messages (session_id, seq) WHERE pinned = 1;
