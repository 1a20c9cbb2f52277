use super::*;
use serde_json::json;

fn callback(event: Value) -> Vec<u8> {
    json!({"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": event})
        .to_string()
        .into_bytes()
}

fn message(extra: Value) -> Value {
    let mut event = json!({"type": "message", "user": "U1", "channel": "C1", "ts": "10.1",
        "text": "hi <@UBOT> &lt;b&gt; &amp; more", "channel_type": "channel"});
    for (k, v) in extra.as_object().unwrap() {
        event[k] = v.clone();
    }
    event
}

#[test]
fn a_challenge_is_answered() {
    let body = br#"{"type":"url_verification","token":"t","challenge":"abc123"}"#;
    assert_eq!(parse(body, None), Ok(Request::Challenge("abc123".into())));
}

#[test]
fn a_person_s_message_is_read() {
    let Ok(Request::Message(m)) = parse(&callback(message(json!({}))), Some("UBOT")) else {
        panic!("not a message");
    };
    assert_eq!(
        (m.event_id.as_str(), m.team.as_str(), m.user.as_str()),
        ("Ev1", "T1", "U1")
    );
    assert!(!m.direct && m.mentions(Some("UBOT")) && !m.mentions(Some("UOTHER")));
    assert_eq!(m.reply_thread().as_deref(), Some("10.1"));
    assert_eq!(m.clean_text(Some("UBOT")), "hi  <b> & more");
}

#[test]
fn threads_and_dms_choose_where_to_answer() {
    let in_thread = message(json!({"thread_ts": "9.0"}));
    let Ok(Request::Message(m)) = parse(&callback(in_thread), None) else {
        panic!()
    };
    assert_eq!(m.reply_thread().as_deref(), Some("9.0"));
    let dm = message(json!({"channel": "D1", "channel_type": "im"}));
    let Ok(Request::Message(m)) = parse(&callback(dm), None) else {
        panic!()
    };
    assert!(m.direct);
    assert_eq!(m.reply_thread(), None);
}

#[test]
fn a_named_mention_is_taken_out() {
    let event = message(json!({"text": "<@UBOT|keel> do it"}));
    let Ok(Request::Message(m)) = parse(&callback(event), Some("UBOT")) else {
        panic!()
    };
    assert!(m.mentions(Some("UBOT")));
    assert_eq!(m.clean_text(Some("UBOT")), "do it");
}

#[test]
fn bots_edits_and_other_events_are_ignored() {
    for (event, why) in [
        (message(json!({"bot_id": "B1"})), "bot"),
        (
            message(json!({"subtype": "message_changed"})),
            "message_changed",
        ),
        (message(json!({"user": "UBOT"})), "own"),
        (
            json!({"type": "reaction_added", "user": "U1"}),
            "reaction_added",
        ),
    ] {
        match parse(&callback(event), Some("UBOT")) {
            Ok(Request::Ignored(reason)) => assert!(reason.contains(why), "{reason}"),
            other => panic!("{why}: {other:?}"),
        }
    }
    let shared = message(json!({"subtype": "file_share"}));
    assert!(matches!(
        parse(&callback(shared), None),
        Ok(Request::Message(_))
    ));
    let other = br#"{"type":"app_rate_limited"}"#;
    assert!(matches!(parse(other, None), Ok(Request::Ignored(_))));
}

#[test]
fn malformed_bodies_are_errors() {
    assert!(parse(b"not json", None).is_err());
    assert!(parse(b"{}", None).is_err());
    assert!(parse(br#"{"type":"event_callback","event_id":"E"}"#, None).is_err());
    let no_user = callback(json!({"type": "message", "channel": "C1", "ts": "1"}));
    assert!(parse(&no_user, None).is_err());
}
