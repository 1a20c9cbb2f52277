-- keel store, schema version 13: approvals for the rest of a session (seed 004). A person's
-- `approve_session` answer keeps the tool name and pattern of the call it approved; calls of
-- the same session with the same key run without asking.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE session_approvals (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    -- The tool name, a space, and the pattern (see keel_core::approval::session_key).
    approval   TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, approval)
);
