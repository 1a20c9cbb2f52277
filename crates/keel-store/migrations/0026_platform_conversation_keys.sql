-- keel store, schema version 26: a platform conversation is found by its key, the tuple of its
-- place, never by its id (issue 31).
--
-- Why: a message's conversation was the session whose id its place spelled, unescaped, so a
-- Telegram message whose channel id was `slack:C1` reached the Slack conversation `slack:C1`,
-- channel `C1:T` was channel `C1` in thread `T`, and any session's id (a CLI one, an event's)
-- could be named. Now each conversation an incoming message made has a row here: its kind
-- (`chat`, or `email_trigger`, one per sender), platform, server, channel, thread and sender,
-- unique together; a message finds its conversation by that tuple, and a session id only names
-- it. '' stands for a part that is absent (a platform's ids are never empty: they are checked).
--
-- Conversations made before this version: a chat gets the key of the place stored with it, so
-- its messages keep going there. An email trigger's does not: it was shared by every sender of
-- its channel, and each sender now gets one of their own. Events and sub-agents are their own
-- conversations, found by nobody.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

CREATE TABLE platform_conversations (
    -- 'chat' or 'email_trigger'.
    kind       TEXT NOT NULL,
    platform   TEXT NOT NULL,
    server_id  TEXT NOT NULL,
    channel_id TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    -- The sender's platform user id, for an email trigger; '' for a chat.
    sender     TEXT NOT NULL,
    session_id TEXT NOT NULL UNIQUE REFERENCES sessions (id) ON DELETE CASCADE,
    PRIMARY KEY (kind, platform, server_id, channel_id, thread_id, sender)
);

-- The chats made before, by the place stored with them. Ids that read as another kind of
-- session (SessionKind in keel-core) are left out.
INSERT OR IGNORE INTO platform_conversations
    (kind, platform, server_id, channel_id, thread_id, sender, session_id)
SELECT 'chat', json_extract(place, '$.platform'), IFNULL(json_extract(place, '$.server_id'), ''),
       json_extract(place, '$.channel_id'), IFNULL(json_extract(place, '$.thread_id'), ''), '',
       id
FROM sessions
WHERE place IS NOT NULL AND json_valid(place)
  AND json_type(place, '$.platform') = 'text' AND json_type(place, '$.channel_id') = 'text'
  AND IFNULL(json_type(place, '$.server_id'), 'text') IN ('text', 'null')
  AND IFNULL(json_type(place, '$.thread_id'), 'text') IN ('text', 'null')
  AND id NOT GLOB 'email_trigger*' AND id NOT GLOB 'event_?*' AND id NOT GLOB 'sub-[0-9]*-?*';

-- A refused message's attachments are forgotten with their content when no other record keeps
-- it (keel_core::Store::forget_attachments): this finds the other records.
CREATE INDEX files_by_sha256 ON files (sha256);
