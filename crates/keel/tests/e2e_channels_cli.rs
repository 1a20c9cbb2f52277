//! `keel users pair CODE` and `keel channels status`, run as a person runs them: the code a
//! channel gave an unknown sender pairs them once; the status names each configured channel
//! and its outbox.

mod common;

use chrono::Utc;
use common::{keel, run, stderr, stdout, temp, write_config};
use keel_platform::{ChannelStore, Notice, Pairing, PlatformStore};
use keel_store::SqliteStore;

fn pairing(code: &str, user: &str) -> Pairing {
    Pairing {
        code: code.into(),
        platform: "telegram".into(),
        platform_user_id: user.into(),
        username: Some("eve".into()),
        created_at: Utc::now(),
    }
}

#[tokio::test]
async fn a_pairing_code_makes_its_sender_a_user_once() {
    let (_guard, home) = temp();
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    store
        .save_pairing(&pairing("ABCD-2345", "777"))
        .await
        .unwrap();
    store.close().await;

    let output = run(keel(&home).args(["users", "pair", "abcd-2345"]));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("telegram:777 (eve) is paired as telegram:777, user"));

    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    let user = store
        .user_by_link("telegram", "777")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.id, "telegram:777");
    assert_eq!(user.permission, keel_core::Permission::User);
    store.close().await;

    // A code works once.
    let again = run(keel(&home).args(["users", "pair", "ABCD-2345"]));
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("no pending pairing has the code `ABCD-2345`"));
}

#[tokio::test]
async fn a_pairing_may_link_the_sender_to_an_existing_user() {
    let (_guard, home) = temp();
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    store
        .save_pairing(&pairing("WXYZ-6789", "888"))
        .await
        .unwrap();
    store.close().await;
    let missing = run(keel(&home).args(["users", "pair", "WXYZ-6789", "--user", "ann"]));
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no user `ann`"));
    // The refused attempt left the code as it was.
    let made = run(keel(&home).args(["users", "set", "ann", "--permission", "admin"]));
    assert!(made.status.success());
    let output = run(keel(&home).args(["users", "pair", "WXYZ-6789", "--user", "ann"]));
    assert!(output.status.success(), "{}", stderr(&output));
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    let user = store
        .user_by_link("telegram", "888")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.id, "ann");
    assert_eq!(user.permission, keel_core::Permission::Admin);
}

#[tokio::test]
async fn channels_status_names_each_channel_and_its_outbox() {
    let (_guard, home) = temp();
    let none = run(keel(&home).args(["channels", "status"]));
    assert!(none.status.success());
    assert!(stdout(&none).contains("no channels are configured"));

    write_config(
        &home,
        "provider = \"mock\"",
        "[channels.telegram]\ntoken_env = \"NOPE\"\n",
    );
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    store
        .add_notice(&Notice {
            channel: "telegram".into(),
            target: "{\"chat\":\"1\"}".into(),
            session_id: String::new(),
            body: "hello".into(),
            at: Utc::now(),
        })
        .await
        .unwrap();
    store
        .set_channel_state("telegram", "offset", "42", Utc::now())
        .await
        .unwrap();
    store.close().await;
    let output = run(keel(&home).args(["channels", "status"]));
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("telegram: last event never, 1 reply waiting"),
        "{text}"
    );
    assert!(text.contains("offset: 42"), "{text}");
    let json = run(keel(&home).args(["channels", "status", "--json"]));
    let line: serde_json::Value = serde_json::from_str(stdout(&json).trim()).unwrap();
    assert_eq!(line["channel"], "telegram");
    assert_eq!(line["outbox"]["pending"], 1);

    write_config(&home, "provider = \"mock\"", "[channels.irc]\nx = 1\n");
    let bad = run(keel(&home).args(["channels", "status"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("[channels.irc] is not a channel keel knows"));
}
