//! Hostile platform messages at the inbox (issue 31, items 1 and 4): a message can only ever
//! reach a conversation of its own place. A conversation is found by its key — platform, server,
//! channel, thread and, for an email trigger, the sender — never by the id its place spells, so
//! another platform's id, a `:` inside a channel id, another server's channel, a CLI session's
//! name, an event's or a sub-agent's id lead nowhere but to a conversation of the message's own;
//! redelivered messages find theirs again; each email sender has a conversation (and session
//! approvals) of their own. Run on `MemoryStore` and SQLite (in memory and on a file), with the
//! store's key contract beside them.

use std::sync::Arc;

use chrono::Utc;
use keel_core::Message;
use keel_platform::DaemonStore;
use keel_platform::{Inbox, InboxError, InboxSettings, IncomingMessage, Prepared, Source};

mod common;
use common::{memory, postgres, sqlite_file, sqlite_in_memory};

macro_rules! identity_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn another_platforms_conversation_id_is_never_reached() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                cross_platform_on(Arc::new(store)).await;
            }

            #[tokio::test]
            async fn a_colon_in_a_channel_id_is_not_a_thread() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                colons_on(Arc::new(store)).await;
            }

            #[tokio::test]
            async fn another_servers_channel_of_the_same_id_is_another_conversation() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                servers_on(Arc::new(store)).await;
            }

            #[tokio::test]
            async fn sessions_made_otherwise_are_never_named() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                other_sessions_on(Arc::new(store)).await;
            }

            #[tokio::test]
            async fn redelivered_messages_find_their_conversation_and_forged_fields_do_not() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                redelivered_on(Arc::new(store)).await;
            }

            #[tokio::test]
            async fn every_email_sender_has_a_conversation_and_approvals_of_their_own() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                senders_on(Arc::new(store)).await;
            }
        }
    };
}

identity_tests!(memory_store, memory());
identity_tests!(sqlite_memory, sqlite_in_memory());
identity_tests!(sqlite_on_file, sqlite_file());
identity_tests!(postgres_store, postgres());

fn message(platform: &str, user: &str, channel: &str, thread: Option<&str>) -> IncomingMessage {
    IncomingMessage {
        platform: platform.into(),
        platform_user_id: user.into(),
        platform_username: None,
        platform_server_id: None,
        platform_channel_id: channel.into(),
        platform_thread_id: thread.map(str::to_string),
        text: "hello".into(),
        source: Source::Chat,
        attachments: Vec::new(),
        chat_kind: Default::default(),
    }
}

fn on_server(mut incoming: IncomingMessage, server: &str) -> IncomingMessage {
    incoming.platform_server_id = Some(server.into());
    incoming
}

fn email(platform: &str, sender: &str, channel: &str) -> IncomingMessage {
    IncomingMessage {
        source: Source::EmailTrigger,
        ..message(platform, sender, channel, None)
    }
}

async fn prepare(inbox: &Inbox, incoming: &IncomingMessage) -> Prepared {
    inbox
        .prepare(incoming)
        .await
        .unwrap_or_else(|e| panic!("{incoming:?}: {e}"))
}

/// Says `secret` in session `id` (creating it the CLI's way when it does not exist).
async fn say(store: &dyn DaemonStore, id: &str, secret: &str) {
    store
        .append_messages(id, None, &[Message::user(secret)])
        .await
        .unwrap();
}

/// Whether anything of session `id` reads `secret`.
async fn holds(store: &dyn DaemonStore, id: &str, secret: &str) -> bool {
    store
        .messages(id)
        .await
        .unwrap()
        .iter()
        .any(|stored| stored.message.content.contains(secret))
}

/// `prepared` is a conversation of `incoming`'s own place, with nothing of `secret` in it.
async fn own_and_clean(store: &dyn DaemonStore, incoming: &IncomingMessage, prepared: &Prepared) {
    let conversation = &prepared.conversation;
    assert_eq!(
        conversation.place.as_ref(),
        Some(&incoming.place()),
        "{conversation:?}"
    );
    assert_eq!(prepared.options.place.as_ref(), Some(&incoming.place()));
    assert_eq!(conversation.message_count, 0, "{conversation:?}");
    for secret in ["the slack secret", "the cli secret", "the event secret"] {
        assert!(!holds(store, &conversation.id, secret).await, "{secret}");
    }
}

async fn cross_platform_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    let from_slack = message("slack", "U1", "C1", None);
    let slack = prepare(&inbox, &from_slack).await;
    assert_eq!(slack.conversation.id, "slack:C1");
    say(store.as_ref(), "slack:C1", "the slack secret").await;

    // A Telegram message naming the Slack conversation as its chat id, with or without thread,
    // and every other spelling of it.
    for (channel, thread) in [
        ("slack:C1", None),
        ("slack", Some("C1")),
        ("slack%3AC1", None),
        ("slack:C1~x", None),
    ] {
        let forged = message("telegram", "666", channel, thread);
        let landed = prepare(&inbox, &forged).await;
        assert_ne!(landed.conversation.id, "slack:C1", "{channel} {thread:?}");
        own_and_clean(store.as_ref(), &forged, &landed).await;
    }
    assert_eq!(
        prepare(&inbox, &message("telegram", "666", "slack:C1", None))
            .await
            .conversation
            .id,
        "telegram:slack%3AC1"
    );
    // The Slack conversation is as it was: its place, its one message.
    let kept = store.session("slack:C1").await.unwrap().unwrap();
    assert_eq!(kept.place.as_ref(), Some(&from_slack.place()));
    assert_eq!(kept.message_count, 1);
    // And a Slack message still finds it.
    assert_eq!(
        prepare(&inbox, &from_slack).await.conversation.id,
        "slack:C1"
    );
}

async fn colons_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    // Channel C1, thread T first: the channel `C1:T` is another conversation.
    let thread = prepare(&inbox, &message("slack", "U1", "C1", Some("T"))).await;
    assert_eq!(thread.conversation.id, "slack:C1:T");
    say(store.as_ref(), "slack:C1:T", "the slack secret").await;
    let channel = message("slack", "U1", "C1:T", None);
    let other = prepare(&inbox, &channel).await;
    assert_eq!(other.conversation.id, "slack:C1%3AT");
    own_and_clean(store.as_ref(), &channel, &other).await;
    // The other way round: channel `C2:T` first, then channel C2 in thread T.
    let first = prepare(&inbox, &message("slack", "U1", "C2:T", None)).await;
    say(store.as_ref(), &first.conversation.id, "the slack secret").await;
    let in_thread = message("slack", "U1", "C2", Some("T"));
    let second = prepare(&inbox, &in_thread).await;
    assert_ne!(first.conversation.id, second.conversation.id);
    own_and_clean(store.as_ref(), &in_thread, &second).await;
    // Colons in both: channel `C3:A` thread `B` is not channel `C3` thread `A:B`.
    let one = prepare(&inbox, &message("slack", "U1", "C3:A", Some("B"))).await;
    let two = prepare(&inbox, &message("slack", "U1", "C3", Some("A:B"))).await;
    assert_ne!(one.conversation.id, two.conversation.id);
    assert_ne!(one.conversation.place, two.conversation.place);
}

async fn servers_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    let first = on_server(message("discord", "D1", "42", None), "G1");
    let made = prepare(&inbox, &first).await;
    assert_eq!(made.conversation.id, "discord:42");
    say(store.as_ref(), "discord:42", "the slack secret").await;
    // The same channel id in another guild (or in none): never guild G1's conversation, whose
    // readable id it shares, so it gets a fresh one.
    for forged in [
        on_server(message("discord", "D2", "42", None), "G2"),
        message("discord", "D2", "42", None),
    ] {
        let landed = prepare(&inbox, &forged).await;
        assert_ne!(landed.conversation.id, "discord:42");
        assert!(
            landed.conversation.id.starts_with("discord:42~"),
            "{:?}",
            landed.conversation
        );
        own_and_clean(store.as_ref(), &forged, &landed).await;
        // ... and found again under that id.
        assert_eq!(
            prepare(&inbox, &forged).await.conversation.id,
            landed.conversation.id
        );
    }
    assert_eq!(prepare(&inbox, &first).await.conversation.id, "discord:42");
}

async fn other_sessions_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    // A CLI session, one named like a platform conversation, an event, a sub-agent, an email
    // trigger conversation of before (shared by a whole channel), all holding secrets.
    for id in [
        "work",
        "12345",
        "slack:C7",
        "sub-1-abc",
        "email_trigger:slack:C9",
    ] {
        say(store.as_ref(), id, "the cli secret").await;
    }
    let event = IncomingMessage {
        source: Source::Event,
        ..message("slack", "hook", "C8", None)
    };
    let event = prepare(&inbox, &event).await.conversation.id;
    assert!(event.starts_with("event_"), "{event}");
    say(store.as_ref(), &event, "the event secret").await;

    for forged in [
        message("telegram", "666", "work", None),
        message("telegram", "666", "12345", None),
        message("telegram", "666", &event, None),
        message("telegram", "666", "sub-1-abc", None),
        message("telegram", "666", "email_trigger:slack:C9", None),
        message("slack", "666", "C7", None),
        email("slack", "666", "C9"),
    ] {
        let landed = prepare(&inbox, &forged).await;
        own_and_clean(store.as_ref(), &forged, &landed).await;
        // Found again, the same.
        assert_eq!(
            prepare(&inbox, &forged).await.conversation.id,
            landed.conversation.id
        );
    }
    // The sessions are as they were: no place given to them, one message each.
    for id in [
        "work",
        "12345",
        "slack:C7",
        "sub-1-abc",
        "email_trigger:slack:C9",
    ] {
        let kept = store.session(id).await.unwrap().unwrap();
        assert_eq!((kept.place, kept.message_count), (None, 1), "{id}");
    }
    // A platform whose chats' ids would read as triggers, events or sub-agents is refused.
    for platform in ["email_trigger", "event_x", "sub-1-x"] {
        match inbox.prepare(&message(platform, "U1", "C1", None)).await {
            Err(InboxError::Invalid(why)) => assert!(why.contains("another kind"), "{why}"),
            other => panic!("{platform}: {other:?}"),
        }
    }
}

async fn redelivered_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    let chat = on_server(message("slack", "U1", "C1", Some("17.5")), "W1");
    // Delivered twice at the same moment, then again: one conversation.
    let (one, two) = tokio::join!(inbox.prepare(&chat), inbox.prepare(&chat));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.conversation.id, two.conversation.id);
    assert_eq!(one.conversation.id, "slack:C1:17.5");
    say(store.as_ref(), "slack:C1:17.5", "the slack secret").await;
    let again = prepare(&inbox, &chat).await;
    assert_eq!(again.conversation.id, "slack:C1:17.5");
    assert_eq!(again.conversation.message_count, 1);
    // Another member of the channel shares the chat.
    let member = on_server(message("slack", "U2", "C1", Some("17.5")), "W1");
    assert_eq!(
        prepare(&inbox, &member).await.conversation.id,
        "slack:C1:17.5"
    );

    // Each field forged in turn leads to a conversation of that forged place, never this one.
    let mut forged = Vec::new();
    let mut other_server = chat.clone();
    other_server.platform_server_id = Some("W2".into());
    forged.push(other_server);
    let mut no_server = chat.clone();
    no_server.platform_server_id = None;
    forged.push(no_server);
    let mut no_thread = chat.clone();
    no_thread.platform_thread_id = None;
    forged.push(no_thread);
    let mut other_platform = chat.clone();
    other_platform.platform = "discord".into();
    forged.push(other_platform);
    let mut as_email = chat.clone();
    as_email.source = Source::EmailTrigger;
    forged.push(as_email);
    let mut joined = chat.clone();
    joined.platform_channel_id = "C1:17.5".into();
    joined.platform_thread_id = None;
    forged.push(joined);
    for forged in forged {
        let landed = prepare(&inbox, &forged).await;
        assert_ne!(landed.conversation.id, "slack:C1:17.5", "{forged:?}");
        own_and_clean(store.as_ref(), &forged, &landed).await;
    }
    // A sub-agent's conversation is its own, new every time, of its own place.
    let sub = IncomingMessage {
        source: Source::SubAgent {
            parent: "slack:C1:17.5".into(),
        },
        ..chat.clone()
    };
    let (first, second) = (prepare(&inbox, &sub).await, prepare(&inbox, &sub).await);
    assert!(first.conversation.id.starts_with("sub-1-"));
    assert_ne!(first.conversation.id, second.conversation.id);
    own_and_clean(store.as_ref(), &sub, &first).await;
}

async fn senders_on(store: Arc<dyn DaemonStore>) {
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    let ann = prepare(&inbox, &email("email", "ann@example.com", "inbox")).await;
    let bob = prepare(&inbox, &email("email", "bob@example.com", "inbox")).await;
    assert_eq!(
        ann.conversation.id,
        "email_trigger:email:inbox:ann@example.com"
    );
    assert_ne!(ann.conversation.id, bob.conversation.id);
    assert!(ann.options.untrusted && bob.options.untrusted);
    assert!(!ann.conversation.trusted && !bob.conversation.trusted);
    // Ann's email said something, and her session was approved to write.
    say(store.as_ref(), &ann.conversation.id, "the slack secret").await;
    store
        .approve_for_session(&ann.conversation.id, "write_file", Utc::now())
        .await
        .unwrap();
    // Bob's next email sees none of it, and is asked again.
    let bob_again = prepare(&inbox, &email("email", "bob@example.com", "inbox")).await;
    assert_eq!(bob_again.conversation.id, bob.conversation.id);
    assert!(!holds(store.as_ref(), &bob.conversation.id, "the slack secret").await);
    assert!(
        store
            .session_approvals(&bob.conversation.id)
            .await
            .unwrap()
            .is_empty()
    );
    // Ann's next email is hers again.
    let ann_again = prepare(&inbox, &email("email", "ann@example.com", "inbox")).await;
    assert_eq!(ann_again.conversation.id, ann.conversation.id);
    assert_eq!(
        store.session_approvals(&ann.conversation.id).await.unwrap(),
        vec!["write_file".to_string()]
    );
    // A sender whose id would spell another's conversation id does not reach it.
    let forged = email("email", "ann@example.com:x", "inbox");
    let landed = prepare(&inbox, &forged).await;
    assert_ne!(landed.conversation.id, ann.conversation.id);
    own_and_clean(store.as_ref(), &forged, &landed).await;
}

/// Creates the database at `path` as keel at schema version 25 left it: the migrations in
/// `migrations/` up to it, byte for byte the store's (it checks their checksums).
async fn database_at_version_25(path: &std::path::Path) -> sqlx::sqlite::SqliteConnection {
    use sqlx::Connection;
    use sqlx::migrate::Migrator;
    let all = Migrator::new(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/migrations"
    )))
    .await
    .unwrap();
    let up_to =
        Migrator::with_migrations(all.iter().filter(|m| m.version <= 25).cloned().collect());
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let mut conn = sqlx::sqlite::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    up_to.run(&mut conn).await.unwrap();
    conn
}

/// A session as version 25 stored one an incoming message made: its place as JSON.
async fn insert_v25(
    conn: &mut sqlx::sqlite::SqliteConnection,
    id: &str,
    place: Option<&str>,
    trusted: bool,
    messages: i64,
) {
    let now = "2025-03-01T12:00:00.000000000Z";
    sqlx::query(
        "INSERT INTO sessions (id, created_at, updated_at, title, message_count, owner, \
         lane_policy, place, trusted) VALUES ($1, $2, $2, NULL, $3, NULL, 'queue', $4, $5)",
    )
    .bind(id)
    .bind(now)
    .bind(messages)
    .bind(place)
    .bind(trusted)
    .execute(&mut *conn)
    .await
    .unwrap();
    for seq in 1..=messages {
        sqlx::query(
            "INSERT INTO messages (session_id, seq, role, content, created_at) \
             VALUES ($1, $2, 'user', 'the slack secret', $3)",
        )
        .bind(id)
        .bind(seq)
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn conversations_made_before_version_26_keep_their_place_and_nothing_else() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let mut conn = database_at_version_25(&path).await;
    let slack = r#"{"platform":"slack","channel_id":"C1","server_id":"W1"}"#;
    insert_v25(&mut conn, "slack:C1", Some(slack), true, 1).await;
    let thread = r#"{"platform":"slack","channel_id":"C1","thread_id":"17.5"}"#;
    insert_v25(&mut conn, "slack:C1:17.5", Some(thread), true, 1).await;
    let telegram = r#"{"platform":"telegram","channel_id":"-100"}"#;
    insert_v25(&mut conn, "-100", Some(telegram), true, 1).await;
    // Made by a Telegram message that named a Slack id before version 26: Telegram's.
    let injected = r#"{"platform":"telegram","channel_id":"slack:C5"}"#;
    insert_v25(&mut conn, "slack:C5", Some(injected), true, 1).await;
    // An email trigger conversation shared by a whole channel, an event's, a CLI session.
    let shared = r#"{"platform":"slack","channel_id":"C9"}"#;
    insert_v25(&mut conn, "email_trigger:slack:C9", Some(shared), false, 1).await;
    let event = r#"{"platform":"slack","channel_id":"C8"}"#;
    insert_v25(&mut conn, "event_0193", Some(event), false, 1).await;
    insert_v25(&mut conn, "work", None, true, 1).await;
    conn.close().await.unwrap();

    let store: Arc<dyn DaemonStore> = Arc::new(keel_store::SqliteStore::open(&path).await.unwrap());
    let inbox = Inbox::new(store.clone(), InboxSettings::default());
    // Chats find the conversations they made before, with their history.
    for (incoming, id) in [
        (
            on_server(message("slack", "U1", "C1", None), "W1"),
            "slack:C1",
        ),
        (message("slack", "U1", "C1", Some("17.5")), "slack:C1:17.5"),
        (message("telegram", "7", "-100", None), "-100"),
        (message("telegram", "7", "slack:C5", None), "slack:C5"),
    ] {
        let found = prepare(&inbox, &incoming).await.conversation;
        assert_eq!(
            (found.id.as_str(), found.message_count),
            (id, 1),
            "{incoming:?}"
        );
    }
    // Nothing else is reached: not the Telegram conversation by Slack's channel C5, not the
    // shared email conversation, not the event, not the CLI session, not channel C1 of
    // another server.
    for incoming in [
        message("slack", "U1", "C5", None),
        email("slack", "U2", "C9"),
        message("telegram", "7", "event_0193", None),
        message("telegram", "7", "work", None),
        on_server(message("slack", "U1", "C1", None), "W2"),
    ] {
        let landed = prepare(&inbox, &incoming).await;
        own_and_clean(store.as_ref(), &incoming, &landed).await;
    }
    assert_eq!(
        prepare(&inbox, &email("slack", "U2", "C9"))
            .await
            .conversation
            .id,
        "email_trigger:slack:C9:U2"
    );
    store.close().await;
    // Reopening applies nothing twice.
    keel_store::SqliteStore::open(&path)
        .await
        .unwrap()
        .close()
        .await;
}
