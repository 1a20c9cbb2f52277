-- keel store on PostgreSQL, schema version 4: full-text search over known facts and over the
-- messages people and the model wrote (the SQLite store's FTS5 indexes `facts_fts` and
-- `messages_fts`), with PostgreSQL's own text search: a tsvector column per table, computed by
-- PostgreSQL itself whoever writes the row, and a GIN index over it.
--
-- Words are what keel's query side (keel_platform::session_search::terms_without) and FTS5's
-- `unicode61` tokenizer take them to be: runs of letters and digits, lower case. The text is
-- lowered and every other character made a space before the `simple` configuration (no
-- stemming, no stopwords) reads it, so `eu-west-3` is the words `eu`, `west`, `3`, and an URL
-- or a file name is its words, as on SQLite. Only the first 100,000 characters of a text are
-- indexed: a tsvector holds at most 1 MB, and a longer message must never fail to be stored.
--
-- `*_words` counts the words indexed: BM25 normalises by a text's length and the average
-- length (FTS5 keeps both in its index; here they are a column and a sum over it).
--
-- What is searched of the messages (the SQLite view `messages_searchable`): user and assistant
-- messages with text that the loop did not inject (`internal`, from the metadata).
--
-- Never edit this file once released (see 0001_schema.sql).

-- The words of a text as one string of lower-case words separated by single spaces.
CREATE FUNCTION keel_search_text(content text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT btrim(regexp_replace(lower(left(content, 100000)), '[^[:alnum:]]+', ' ', 'g')) $$;

-- How many words `keel_search_text` finds in a text (self-contained: a function called from a
-- generated column must not depend on the search path of whoever writes the row).
CREATE FUNCTION keel_search_words(content text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT coalesce(array_length(regexp_split_to_array(
        regexp_replace(lower(left(content, 100000)), '^[^[:alnum:]]+|[^[:alnum:]]+$', '', 'g'),
        '[^[:alnum:]]+'), 1), 0) - CASE WHEN lower(left(content, 100000)) ~ '[[:alnum:]]'
        THEN 0 ELSE 1 END $$;

ALTER TABLE facts
    ADD COLUMN fts tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', keel_search_text(text))) STORED,
    ADD COLUMN fts_words integer GENERATED ALWAYS AS (keel_search_words(text)) STORED;
CREATE INDEX facts_fts ON facts USING gin (fts);

ALTER TABLE messages
    ADD COLUMN fts tsvector GENERATED ALWAYS AS (
        CASE WHEN role IN ('user', 'assistant') AND content <> '' AND NOT internal
        THEN to_tsvector('simple', keel_search_text(content)) END) STORED,
    ADD COLUMN fts_words integer GENERATED ALWAYS AS (
        CASE WHEN role IN ('user', 'assistant') AND content <> '' AND NOT internal
        THEN keel_search_words(content) END) STORED;
CREATE INDEX messages_fts ON messages USING gin (fts);
-- The searchable messages' count and total length, read by every search, from the index alone.
CREATE INDEX messages_fts_words ON messages (fts_words) WHERE fts_words IS NOT NULL;
