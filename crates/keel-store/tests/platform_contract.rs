//! The platform's records, the behaviour every `Store` must have: personas (one per place, one
//! default), conversations that keep their platform place and trust, files kept once per
//! content, and a refused message's attachments forgotten (issue 31, item 10). Run against SQLite (in
//! memory and on a file) and `MemoryStore`.

use keel_core::PlatformPlace;
use keel_core::files::{FileOrigin, FileRecord};
use keel_core::{LanePolicy, StoreError};
use keel_platform::DaemonStore;
use keel_platform::NewConversation;
use keel_platform::Persona;

mod common;
use common::{at, memory, postgres, sqlite_file, sqlite_in_memory};

macro_rules! platform_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn personas_are_one_per_place_with_one_default() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                personas_on(&store).await;
            }

            #[tokio::test]
            async fn conversations_keep_their_place_and_trust() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                places_on(&store).await;
            }

            #[tokio::test]
            async fn files_keep_their_content_once_per_hash() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                files_on(&store).await;
            }

            #[tokio::test]
            async fn a_refused_messages_attachments_are_forgotten_and_no_one_elses() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                forget_on(&store).await;
            }
        }
    };
}

platform_tests!(memory_store, memory());
platform_tests!(sqlite_memory, sqlite_in_memory());
platform_tests!(sqlite_on_file, sqlite_file());
platform_tests!(postgres_store, postgres());

fn persona(name: &str, platform: Option<&str>, server: Option<&str>, default: bool) -> Persona {
    Persona {
        name: name.into(),
        system_prompt: format!("You are {name}."),
        platform: platform.map(str::to_string),
        platform_server_id: server.map(str::to_string),
        model: Some("gpt-4.1-mini".into()),
        max_tokens: Some(300),
        allowed_modules: Some(vec!["files".into()]),
        temperature: Some(0.25),
        is_default: default,
        created_at: at(0),
        updated_at: at(0),
    }
}

async fn personas_on(store: &dyn DaemonStore) {
    store
        .save_persona(&persona("first", None, None, true))
        .await
        .unwrap();
    store
        .save_persona(&persona("slacker", Some("slack"), None, false))
        .await
        .unwrap();
    store
        .save_persona(&persona("acme", Some("slack"), Some("T1"), false))
        .await
        .unwrap();
    // Another persona for a place that has one is refused, and changes nothing.
    let taken = store
        .save_persona(&persona("rival", Some("slack"), Some("T1"), false))
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, StoreError::Conflict(m) if m.contains("`acme` already serves slack server T1")),
        "{taken}"
    );
    // A new default takes the flag.
    store
        .save_persona(&persona("second", None, None, true))
        .await
        .unwrap();
    let personas = store.personas().await.unwrap();
    let names: Vec<(&str, bool)> = personas
        .iter()
        .map(|p| (p.name.as_str(), p.is_default))
        .collect();
    assert_eq!(
        names,
        [
            ("acme", false),
            ("first", false),
            ("second", true),
            ("slacker", false)
        ]
    );
    assert_eq!(
        personas[0],
        persona("acme", Some("slack"), Some("T1"), false)
    );
    // Replacing one by name keeps one record, its place free to keep.
    let mut changed = persona("acme", Some("slack"), Some("T1"), false);
    changed.system_prompt = "You are ACME's.".into();
    changed.allowed_modules = None;
    store.save_persona(&changed).await.unwrap();
    let personas = store.personas().await.unwrap();
    assert_eq!(personas.len(), 4);
    assert_eq!(personas[0].system_prompt, "You are ACME's.");
    assert_eq!(personas[0].allowed_modules, None);
}

async fn places_on(store: &dyn DaemonStore) {
    let place = PlatformPlace {
        platform: "slack".into(),
        channel_id: "C1".into(),
        thread_id: Some("1700.5".into()),
        server_id: Some("T1".into()),
    };
    let made = store
        .create_conversation(&NewConversation {
            id: "email_trigger:slack:C1:1700.5".into(),
            owner: Some("slack:U1".into()),
            lane_policy: LanePolicy::Queue,
            at: at(1),
            place: Some(place.clone()),
            trusted: false,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(made.place.as_ref(), Some(&place));
    assert!(!made.trusted);
    let read = store
        .session("email_trigger:slack:C1:1700.5")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, made);
    // A session made the CLI's way is trusted and has no place.
    store.ensure_session("12345").await.unwrap();
    let plain = store.session("12345").await.unwrap().unwrap();
    assert!(plain.trusted && plain.place.is_none());
}

async fn files_on(store: &dyn DaemonStore) {
    store.ensure_session("s1").await.unwrap();
    let content = b"the same bytes".to_vec();
    let mut first = FileRecord::new(
        "a.txt",
        "text/plain",
        &content,
        "s1",
        FileOrigin::Attachment,
        at(1),
    );
    first.user_id = Some("ann".into());
    let mut second = FileRecord::new(
        "b.txt",
        "text/plain",
        &content,
        "s1",
        FileOrigin::Produced,
        at(2),
    );
    second.run_id = Some("r1".into());
    store.save_file(&first, &content).await.unwrap();
    store.save_file(&second, &content).await.unwrap();
    assert_eq!(store.file(&first.id).await.unwrap(), Some(first.clone()));
    assert_eq!(store.file("file_nope").await.unwrap(), None);
    assert_eq!(first.sha256, second.sha256);
    assert_eq!(
        store.file_content(&first.sha256).await.unwrap(),
        Some(content.clone())
    );
    assert_eq!(store.run_files("r1").await.unwrap(), vec![second.clone()]);
    assert!(store.run_files("r2").await.unwrap().is_empty());
    assert_eq!(
        store.session_files("s1").await.unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert!(store.session_files("s2").await.unwrap().is_empty());

    // Refused whole: content that does not match its hash, an unknown session, a reused id.
    let lie = FileRecord::new(
        "c.txt",
        "text/plain",
        b"one thing",
        "s1",
        FileOrigin::Attachment,
        at(3),
    );
    assert!(store.save_file(&lie, b"another").await.is_err());
    assert_eq!(store.file(&lie.id).await.unwrap(), None);
    assert_eq!(store.file_content(&lie.sha256).await.unwrap(), None);
    let homeless = FileRecord::new(
        "d.txt",
        "text/plain",
        b"x",
        "nowhere",
        FileOrigin::Attachment,
        at(4),
    );
    assert!(matches!(
        store.save_file(&homeless, b"x").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.file_content(&homeless.sha256).await.unwrap(), None);
    assert!(matches!(
        store.save_file(&first, &content).await,
        Err(StoreError::Conflict(_))
    ));
}

fn attachment(name: &str, content: &[u8], session: &str) -> FileRecord {
    FileRecord::new(
        name,
        "text/plain",
        content,
        session,
        FileOrigin::Attachment,
        at(1),
    )
}

async fn forget_on(store: &dyn DaemonStore) {
    store.ensure_session("s1").await.unwrap();
    // An accepted message's attachment, and the refused message's: one of the same bytes, one
    // of its own.
    let accepted = attachment("a.txt", b"shared bytes", "s1");
    let same = attachment("b.txt", b"shared bytes", "s1");
    let own = attachment("c.txt", b"only the refused message's", "s1");
    let mut produced = FileRecord::new(
        "d.txt",
        "text/plain",
        b"a run's",
        "s1",
        FileOrigin::Produced,
        at(1),
    );
    produced.run_id = Some("r1".into());
    let mut taken = attachment("e.txt", b"taken by a run", "s1");
    taken.run_id = Some("r1".into());
    for (record, content) in [
        (&accepted, &b"shared bytes"[..]),
        (&same, b"shared bytes"),
        (&own, b"only the refused message's"),
        (&produced, b"a run's"),
        (&taken, b"taken by a run"),
    ] {
        store.save_file(record, content).await.unwrap();
    }
    store.forget_attachments(&[]).await.unwrap();
    store
        .forget_attachments(&[same.clone(), own.clone(), produced.clone(), taken.clone()])
        .await
        .unwrap();
    // The refused message's records and its own content are gone...
    assert_eq!(store.file(&same.id).await.unwrap(), None);
    assert_eq!(store.file(&own.id).await.unwrap(), None);
    assert_eq!(store.file_content(&own.sha256).await.unwrap(), None);
    // ... the accepted one's record and the content it shares stay, as do a run's files.
    assert_eq!(
        store.file(&accepted.id).await.unwrap(),
        Some(accepted.clone())
    );
    assert_eq!(
        store.file_content(&accepted.sha256).await.unwrap(),
        Some(b"shared bytes".to_vec())
    );
    assert_eq!(
        store.file(&produced.id).await.unwrap(),
        Some(produced.clone())
    );
    assert_eq!(store.file(&taken.id).await.unwrap(), Some(taken.clone()));
    assert!(store.file_content(&taken.sha256).await.unwrap().is_some());
    assert_eq!(
        store.session_files("s1").await.unwrap(),
        vec![accepted.clone(), produced, taken]
    );
    // The same bytes kept again after are kept whole; forgetting twice changes nothing.
    let later = attachment("f.txt", b"only the refused message's", "s1");
    store
        .save_file(&later, b"only the refused message's")
        .await
        .unwrap();
    store.forget_attachments(&[own]).await.unwrap();
    assert_eq!(
        store.file_content(&later.sha256).await.unwrap(),
        Some(b"only the refused message's".to_vec())
    );
    // The last record of a content forgotten: the content goes with it.
    store
        .forget_attachments(std::slice::from_ref(&accepted))
        .await
        .unwrap();
    assert_eq!(store.file_content(&accepted.sha256).await.unwrap(), None);
}
