//! Attachments from outside are checked, kept as file records and described in the message
//! (moved from the unit tests of `platform::attachments`, which cannot reach an in-memory store).

use chrono::Utc;
use keel_core::Store;
use keel_core::files::MAX_ATTACHMENTS;
use keel_platform::attachments::{IncomingAttachment, check_attachments, register_attachments};
use keel_store::MemoryStore;

fn attachment(name: &str, content: &[u8]) -> IncomingAttachment {
    IncomingAttachment {
        name: name.into(),
        media_type: None,
        content: content.to_vec(),
    }
}

#[test]
fn attachments_from_outside_are_checked() {
    assert!(check_attachments(&[attachment("a.txt", b"hi")], 10).is_ok());
    let too_big = check_attachments(&[attachment("a.txt", &[0; 11])], 10).unwrap_err();
    assert!(too_big.contains("11 bytes; at most 10"), "{too_big}");
    assert!(check_attachments(&[attachment("../../x", b"")], 10).is_err());
    let many = vec![attachment("a", b""); MAX_ATTACHMENTS + 1];
    assert!(check_attachments(&many, 10).is_err());
    let mut typed = attachment("a", b"");
    typed.media_type = Some("nonsense".into());
    assert!(check_attachments(&[typed], 10).is_err());
}

#[tokio::test]
async fn attachments_are_kept_and_described() {
    let store = MemoryStore::new();
    store.ensure_session("s").await.unwrap();
    let (text, records) = register_attachments(
        &store,
        "look".into(),
        &[attachment("notes.md", b"# hi"), attachment("blob", &[0xff])],
        "s",
        Some("ann"),
        Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].media_type, "text/markdown");
    assert_eq!(records[1].media_type, "application/octet-stream");
    assert_eq!(records[0].user_id.as_deref(), Some("ann"));
    assert!(text.starts_with("look\n\n[Attached files:]\n"), "{text}");
    assert!(text.contains(&records[0].describe()), "{text}");
    assert!(text.ends_with("Use read_attachment with a file_id to read one."));
    let (same, none) = register_attachments(&store, "plain".into(), &[], "s", None, Utc::now())
        .await
        .unwrap();
    assert_eq!((same.as_str(), none.len()), ("plain", 0));
}
