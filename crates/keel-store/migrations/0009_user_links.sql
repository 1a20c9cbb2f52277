-- keel store, schema version 9: what a user may do, and who they are on each platform.
--
-- Never edit this file once released (see 0001_init.sql for the conventions).

-- "guest" < "user" < "admin" < "owner"; users stored before are plain users.
ALTER TABLE users ADD COLUMN permission TEXT NOT NULL DEFAULT 'user';

-- A platform identity (a Telegram id, a Slack member) names at most one user; a user may have
-- links on several platforms, and shares one budget across them.
CREATE TABLE platform_links (
    platform         TEXT NOT NULL,
    platform_user_id TEXT NOT NULL,
    user_id          TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    username         TEXT,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (platform, platform_user_id)
);
CREATE INDEX platform_links_by_user ON platform_links (user_id, platform);
