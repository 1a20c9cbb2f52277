//! The store's side of platform identity: a conversation key names one conversation at its
//! own place (on `MemoryStore` and SQLite, in memory and on a file). Moved from
//! `platform_identity.rs`.

use keel_core::PlatformPlace;
use keel_core::{LanePolicy, SessionInfo, StoreError};
use keel_platform::DaemonStore;
use keel_platform::NewConversation;
use keel_platform::{ConversationKey, Source};

mod common;
use common::{at, memory, postgres, sqlite_file, sqlite_in_memory};

macro_rules! key_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn a_key_names_one_conversation_at_its_own_place() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                key_contract_on(&store).await;
            }
        }
    };
}

key_tests!(memory_store, memory());
key_tests!(sqlite_memory, sqlite_in_memory());
key_tests!(sqlite_on_file, sqlite_file());
key_tests!(postgres_store, postgres());

fn place(platform: &str, channel: &str) -> PlatformPlace {
    PlatformPlace {
        platform: platform.into(),
        channel_id: channel.into(),
        thread_id: None,
        server_id: None,
    }
}

fn new_conversation(id: &str, place: Option<PlatformPlace>) -> NewConversation {
    NewConversation {
        id: id.into(),
        owner: None,
        lane_policy: LanePolicy::Queue,
        at: at(1),
        place,
        trusted: true,
    }
}

async fn key_contract_on(store: &dyn DaemonStore) {
    let slack = place("slack", "C1");
    let key = ConversationKey::of(&Source::Chat, &slack, "U1").unwrap();
    assert_eq!(store.platform_conversation(&key).await.unwrap(), None);
    let made: SessionInfo = store
        .create_platform_conversation(&new_conversation("slack:C1", Some(slack.clone())), &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(made.place.as_ref(), Some(&slack));
    assert_eq!(store.platform_conversation(&key).await.unwrap(), Some(made));
    // The key is taken: under another id, nothing is made.
    assert_eq!(
        store
            .create_platform_conversation(
                &new_conversation("slack:C1~2", Some(slack.clone())),
                &key
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.session("slack:C1~2").await.unwrap(), None);
    // The id is taken by a session without a key: nothing is made, and that session never
    // gets the key.
    store.ensure_session("slack:C2").await.unwrap();
    let c2 = ConversationKey::of(&Source::Chat, &place("slack", "C2"), "U1").unwrap();
    assert_eq!(
        store
            .create_platform_conversation(
                &new_conversation("slack:C2", Some(place("slack", "C2"))),
                &c2
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.platform_conversation(&c2).await.unwrap(), None);
    assert_eq!(
        store.session("slack:C2").await.unwrap().unwrap().place,
        None
    );
    // A key whose place is not the conversation's is refused.
    match store
        .create_platform_conversation(&new_conversation("x", Some(place("telegram", "C2"))), &c2)
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(store.session("x").await.unwrap(), None);
    // Every part of the key counts.
    let email = |sender: &str| ConversationKey::of(&Source::EmailTrigger, &slack, sender).unwrap();
    let ann = store
        .create_platform_conversation(
            &new_conversation("email_trigger:slack:C1:ann", Some(slack.clone())),
            &email("ann"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.platform_conversation(&email("ann")).await.unwrap(),
        Some(ann)
    );
    assert_eq!(
        store.platform_conversation(&email("bob")).await.unwrap(),
        None
    );
    let mut on_server = key.clone();
    on_server.server_id = Some("W1".into());
    assert_eq!(store.platform_conversation(&on_server).await.unwrap(), None);
    let mut in_thread = key.clone();
    in_thread.thread_id = Some("T".into());
    assert_eq!(store.platform_conversation(&in_thread).await.unwrap(), None);
}
