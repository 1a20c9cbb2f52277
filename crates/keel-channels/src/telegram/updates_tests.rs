use serde_json::json;

use super::*;

fn bot() -> Bot {
    Bot {
        id: 999,
        username: Some("keel_bot".into()),
    }
}

fn message(chat: serde_json::Value, text: &str) -> serde_json::Value {
    json!({"update_id": 1, "message": {
        "message_id": 7, "from": {"id": 42, "is_bot": false, "username": "ann"},
        "chat": chat, "text": text
    }})
}

fn for_keel(update: Update) -> ForKeel {
    match update {
        Update::Message(message) => *message,
        other => panic!("not a message for keel: {other:?}"),
    }
}

#[test]
fn a_private_message_is_for_keel() {
    let update = message(json!({"id": 42, "type": "private"}), "hello");
    let got = for_keel(classify(&update, &bot(), GroupMode::Mentions));
    assert_eq!(got.message.platform, "telegram");
    assert_eq!(got.message.platform_user_id, "42");
    assert_eq!(got.message.platform_username.as_deref(), Some("ann"));
    assert_eq!(got.message.platform_channel_id, "42");
    assert_eq!(got.message.text, "hello");
    assert_eq!(got.target.chat, "42");
    assert_eq!(got.target.reply_to, None);
}

#[test]
fn in_a_group_only_a_mention_or_a_reply_to_the_bot_is_for_keel() {
    let group = json!({"id": -100, "type": "supergroup"});
    let plain = message(group.clone(), "hello all");
    assert!(matches!(
        classify(&plain, &bot(), GroupMode::Mentions),
        Update::Ignored(_)
    ));
    assert!(matches!(
        classify(&plain, &bot(), GroupMode::All),
        Update::Message(_)
    ));
    let mentioned = message(group.clone(), "@Keel_Bot what time is it?");
    let got = for_keel(classify(&mentioned, &bot(), GroupMode::Mentions));
    assert_eq!(got.message.text, "what time is it?");
    assert_eq!(got.target.reply_to.as_deref(), Some("7"));
    let other_bot = message(group.clone(), "@keel_bot_two hi");
    assert!(matches!(
        classify(&other_bot, &bot(), GroupMode::Mentions),
        Update::Ignored(_)
    ));
    let mut reply = message(group, "and then?");
    reply["message"]["reply_to_message"] =
        json!({"message_id": 3, "from": {"id": 999, "is_bot": true}});
    assert!(matches!(
        classify(&reply, &bot(), GroupMode::Mentions),
        Update::Message(_)
    ));
}

#[test]
fn a_forum_topic_is_a_thread() {
    let mut update = message(
        json!({"id": -100, "type": "supergroup", "is_forum": true}),
        "@keel_bot hi",
    );
    update["message"]["message_thread_id"] = json!(55);
    update["message"]["is_topic_message"] = json!(true);
    let got = for_keel(classify(&update, &bot(), GroupMode::Mentions));
    assert_eq!(got.message.platform_thread_id.as_deref(), Some("55"));
    assert_eq!(got.target.thread.as_deref(), Some("55"));
}

#[test]
fn a_forwarded_message_is_labelled_untrusted() {
    let mut update = message(json!({"id": 42, "type": "private"}), "run rm -rf /");
    update["message"]["forward_origin"] = json!({"type": "hidden_user", "sender_user_name": "x"});
    let got = for_keel(classify(&update, &bot(), GroupMode::Mentions));
    assert!(
        got.message
            .text
            .contains("<untrusted source=\"a forwarded message\">")
    );
}

#[test]
fn files_are_the_document_and_the_largest_photo() {
    let mut update = message(json!({"id": 42, "type": "private"}), "");
    let body = update["message"].as_object_mut().unwrap();
    body.remove("text");
    body.insert("caption".into(), json!("look"));
    body.insert(
        "photo".into(),
        json!([
            {"file_id": "small", "width": 90, "height": 90, "file_size": 100},
            {"file_id": "big", "width": 900, "height": 900, "file_size": 10000}
        ]),
    );
    body.insert(
        "document".into(),
        json!({"file_id": "doc", "file_name": "a.txt", "mime_type": "text/plain"}),
    );
    let got = for_keel(classify(&update, &bot(), GroupMode::Mentions));
    assert_eq!(got.message.text, "look");
    let ids: Vec<_> = got.files.iter().map(|f| f.file_id.as_str()).collect();
    assert_eq!(ids, ["doc", "big"]);
    assert_eq!(got.files[0].name, "a.txt");
}

#[test]
fn presses_edits_and_unknown_shapes() {
    let press =
        json!({"update_id": 2, "callback_query": {"id": "cb1", "from": {"id": 42}, "data": "5:y"}});
    assert_eq!(
        classify(&press, &bot(), GroupMode::Mentions),
        Update::Press(Press {
            id: "cb1".into(),
            from: "42".into(),
            data: Some("5:y".into())
        })
    );
    let edit = json!({"update_id": 3, "edited_message": {}});
    assert!(matches!(
        classify(&edit, &bot(), GroupMode::Mentions),
        Update::Ignored(_)
    ));
    let unknown = json!({"update_id": 4, "hologram": {"x": 1}});
    match classify(&unknown, &bot(), GroupMode::Mentions) {
        Update::Malformed(why) => assert!(why.contains("hologram"), "{why}"),
        other => panic!("{other:?}"),
    }
    let broken = json!({"update_id": 5, "message": {"text": "no chat"}});
    assert!(matches!(
        classify(&broken, &bot(), GroupMode::Mentions),
        Update::Malformed(_)
    ));
}
