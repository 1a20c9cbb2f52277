//! Users on several platforms, the behaviour every `Store` must have: a platform identity names
//! at most one user, a user may have links on several platforms, and a user's permission is
//! stored with them. Run against SQLite (in memory and on a file) and `MemoryStore`.

use keel_core::{Permission, UserRecord};
use keel_platform::DaemonStore;
use keel_platform::PlatformLink;

mod common;
use common::{at, memory, postgres, sqlite_file, sqlite_in_memory};

macro_rules! link_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn an_identity_names_one_user_and_a_user_has_many() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                links_on(&store).await;
            }
        }
    };
}

link_tests!(memory_store, memory());
link_tests!(sqlite_memory, sqlite_in_memory());
link_tests!(sqlite_on_file, sqlite_file());
link_tests!(postgres_store, postgres());

fn user(id: &str, permission: Permission) -> UserRecord {
    UserRecord {
        id: id.into(),
        monthly_token_budget: None,
        created_at: at(0),
        updated_at: at(0),
        permission,
    }
}

fn link(platform: &str, platform_user_id: &str, user_id: &str) -> PlatformLink {
    PlatformLink {
        platform: platform.into(),
        platform_user_id: platform_user_id.into(),
        user_id: user_id.into(),
        username: Some(format!("{user_id}@{platform}")),
        created_at: at(1),
    }
}

async fn links_on(store: &dyn DaemonStore) {
    store
        .save_user(&user("ada", Permission::Guest))
        .await
        .unwrap();
    store
        .save_user(&user("bob", Permission::Owner))
        .await
        .unwrap();
    assert_eq!(
        store.user("bob").await.unwrap().unwrap().permission,
        Permission::Owner
    );
    store
        .link_user(&link("telegram", "42", "ada"))
        .await
        .unwrap();
    store.link_user(&link("slack", "U1", "ada")).await.unwrap();
    store
        .link_user(&link("telegram", "42", "ada"))
        .await
        .expect("linking again to the same user is nothing");
    assert!(
        store
            .link_user(&link("telegram", "42", "bob"))
            .await
            .is_err(),
        "an identity names one user"
    );
    assert!(
        store
            .link_user(&link("discord", "7", "nobody"))
            .await
            .is_err(),
        "a link needs a stored user"
    );
    let found = store.user_by_link("telegram", "42").await.unwrap().unwrap();
    assert_eq!(found.id, "ada");
    assert_eq!(found.permission, Permission::Guest);
    assert_eq!(
        store.user_by_link("slack", "U1").await.unwrap().unwrap().id,
        "ada"
    );
    assert!(
        store
            .user_by_link("telegram", "U1")
            .await
            .unwrap()
            .is_none()
    );
    let links = store.user_links("ada").await.unwrap();
    assert_eq!(
        links
            .iter()
            .map(|l| l.platform.as_str())
            .collect::<Vec<_>>(),
        ["slack", "telegram"]
    );
    assert_eq!(links[1], link("telegram", "42", "ada"));
    assert!(store.user_links("bob").await.unwrap().is_empty());
    assert!(store.user_by_link("discord", "7").await.unwrap().is_none());
}
