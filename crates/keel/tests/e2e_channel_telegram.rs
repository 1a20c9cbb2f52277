//! End to end: the real `keel serve` with `keel mock-provider` as its model, polling a fake
//! Telegram Bot API (tests/telegram/fake.rs). A message in, the model's answer out in its chat
//! and forum topic; updates keel cannot read and forged presses skipped with a clear line; an
//! approval decided by the owner's button press (a guest's refused); a long answer split
//! without breaking its code block; a 429 then 503s survived in order; an update delivered
//! again after a SIGKILL mid-run answered once.

mod common;
#[path = "telegram/fake.rs"]
mod fake;

use std::path::Path;
use std::time::Duration;

use common::daemon::{Daemon, daemon_config};
use common::{Mock, keel, run, stderr, temp};
use fake::{BOT_NAME, Fail, FakeTelegram, TOKEN};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(60);

/// `keel.toml` lines for the fake, with fast couriers.
fn channel_config(fake: &FakeTelegram, more: &str) -> String {
    format!(
        "[channels]\npoll_ms = 20\nretry_first_ms = 50\nretry_max_secs = 1\n\n\
         [channels.telegram]\napi_url = \"{}\"\npoll_timeout_secs = 1\nallow = \"everyone\"\n{more}\n",
        fake.url
    )
}

/// Starts `keel serve` with the bot's token and waits until it polls the fake.
async fn start(fake: &FakeTelegram, home: &Path, env: &[(&str, &str)]) -> Daemon {
    let mut env = env.to_vec();
    env.push(("TELEGRAM_BOT_TOKEN", TOKEN));
    let polls = fake.calls_of("getUpdates").len();
    let daemon = Daemon::start_with(home, &env);
    fake.until("a poll", WITHIN, |f| f.calls_of("getUpdates").len() > polls)
        .await;
    daemon
}

fn private(id: i64) -> Value {
    json!({"id": id, "type": "private", "first_name": "P"})
}

fn texts(sent: &[Value]) -> Vec<String> {
    sent.iter()
        .map(|b| b["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_is_answered_in_its_chat_and_topic_and_hostile_updates_are_skipped() {
    let fake = FakeTelegram::start().await;
    let mock =
        Mock::start(&json!({"steps": [{"text": "Hello from keel.", "forever": true}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    let daemon = start(&fake, &home, &[]).await;

    // Hostile or irrelevant first: none of them may stop the poller.
    fake.push(json!({"hologram": {"depth": 3}}));
    fake.push(json!({"message": {"message_id": 1, "text": "no chat, no sender"}}));
    fake.press(42, "999999:y");
    fake.press(42, "not keel's at all");
    fake.push(json!({"edited_message": {"message_id": 2, "text": "edited"}}));
    let group = json!({"id": -1002, "type": "supergroup", "title": "g"});
    fake.message(group, 43, "just chatting among ourselves");

    fake.message(private(42), 42, "hi");
    let forum = json!({"id": -1001, "type": "supergroup", "title": "f", "is_forum": true});
    let last = fake.push(json!({"message": {
        "message_id": 500, "date": 0, "chat": forum, "message_thread_id": 55,
        "is_topic_message": true, "text": format!("@{BOT_NAME} hello there"),
        "from": {"id": 43, "is_bot": false, "first_name": "Q"},
    }}));

    fake.until("both answers", WITHIN, |f| {
        f.sent_to(42).len() == 1 && f.sent_to(-1001).len() == 1
    })
    .await;
    let dm = &fake.sent_to(42)[0];
    assert_eq!(dm["text"], "Hello from keel.", "{dm}");
    assert_eq!(dm["parse_mode"], "HTML");
    assert!(
        dm.get("reply_parameters").is_none(),
        "a DM quotes nothing: {dm}"
    );
    let topic = &fake.sent_to(-1001)[0];
    assert_eq!(topic["message_thread_id"], 55, "{topic}");
    assert_eq!(topic["reply_parameters"]["message_id"], 500, "{topic}");
    assert!(
        fake.sent_to(-1002).is_empty(),
        "a group message not addressed to the bot"
    );
    // The model saw the topic's message without the mention.
    let seen = mock.requests().iter().any(|r| {
        r.to_string().contains("hello there") && !r.to_string().contains(&format!("@{BOT_NAME}"))
    });
    assert!(seen, "the mention was not stripped");

    let answers = fake.calls_of("answerCallbackQuery");
    assert_eq!(answers.len(), 2, "{answers:?}");
    for answer in &answers {
        let text = answer["text"].as_str().unwrap();
        assert!(
            text.contains("not one of keel's") || text.contains("no longer valid"),
            "{text}"
        );
    }
    assert!(
        fake.calls_of("sendChatAction")
            .iter()
            .any(|b| b["chat_id"] == 42 && b["action"] == "typing"),
        "no typing shown"
    );
    fake.until("the last update confirmed", WITHIN, |f| {
        f.offsets().contains(&(last + 1))
    })
    .await;
    // Two runs, for the two messages addressed to keel; nothing else reached the model.
    assert_eq!(mock.requests().len(), 2);
    let log = daemon.log();
    assert!(
        log.contains("skipped an update of an unknown shape (fields: hologram)"),
        "{log}"
    );
    assert!(log.contains("skipped a message keel cannot read"), "{log}");
    assert!(log.contains("a button press was refused"), "{log}");
}

/// Makes `user` (an admin: the shell is theirs) the Telegram user `id`.
fn telegram_user(home: &Path, user: &str, id: &str) {
    for args in [
        vec!["users", "set", user, "--permission", "admin"],
        vec![
            "users",
            "link",
            user,
            "--platform",
            "telegram",
            "--platform-user-id",
            id,
        ],
    ] {
        let output = run(keel(home).args(&args));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_decided_by_the_owners_press_and_a_guests_is_refused() {
    let fake = FakeTelegram::start().await;
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Cleaned.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    telegram_user(&home, "ann", "42");
    let _daemon = start(&fake, &home, &[("HOME", fake_home.to_str().unwrap())]).await;

    fake.message(private(42), 42, "clean my home");
    fake.until("the approval request", WITHIN, |f| {
        f.sent_to(42)
            .iter()
            .any(|b| b.get("reply_markup").is_some())
    })
    .await;
    let request = fake
        .sent_to(42)
        .into_iter()
        .find(|b| b.get("reply_markup").is_some())
        .unwrap();
    let rows = request["reply_markup"]["inline_keyboard"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 3, "one button per row: {request}");
    let approve = rows[0][0]["callback_data"].as_str().unwrap().to_string();
    assert!(approve.ends_with(":y"), "{approve}");
    assert!(fake_home.join("canary").exists(), "ran before approval");

    // A guest's press is refused, and changes nothing.
    fake.press(77, &approve);
    fake.until("the guest's refusal", WITHIN, |f| {
        !f.calls_of("answerCallbackQuery").is_empty()
    })
    .await;
    let refusal = &fake.calls_of("answerCallbackQuery")[0];
    assert!(
        refusal["text"]
            .as_str()
            .unwrap()
            .contains("owner or an admin"),
        "{refusal}"
    );
    assert!(fake_home.join("canary").exists(), "a guest's press ran it");

    fake.press(42, &approve);
    fake.until("the answer after approval", WITHIN, |f| {
        texts(&f.sent_to(42)).contains(&"Cleaned.".to_string())
    })
    .await;
    assert_eq!(fake.calls_of("answerCallbackQuery")[1]["text"], "Approved.");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_is_split_without_breaking_its_code_block() {
    let fake = FakeTelegram::start().await;
    let mut long = String::from("Here is the program:\n```rust\n");
    for n in 0..400 {
        long.push_str(&format!("let value_{n} = compute({n}) < limit && ok;\n"));
    }
    long.push_str("```\nThat is all.");
    let mock = Mock::start(&json!({"steps": [{"text": long, "forever": true}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    let _daemon = start(&fake, &home, &[]).await;

    fake.message(private(42), 42, "write me a long program");
    // Under load the answer may stream: a draft is sent, then edited into the first part.
    fake.until("the last part", WITHIN, |f| {
        f.shown_to(42)
            .last()
            .is_some_and(|t| t.ends_with("That is all."))
    })
    .await;
    let parts = fake.shown_to(42);
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for part in &parts {
        assert!(
            part.chars().count() <= 4096,
            "a part of {} characters",
            part.chars().count()
        );
        assert_eq!(
            part.matches("<pre>").count(),
            part.matches("</pre>").count(),
            "{part}"
        );
    }
    let whole = parts.join("\n");
    for n in 0..400 {
        let line = format!("let value_{n} = compute({n}) &lt; limit &amp;&amp; ok;");
        assert_eq!(whole.matches(&line).count(), 1, "line {n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replies_survive_a_429_and_an_outage_in_order() {
    let fake = FakeTelegram::start().await;
    let script = json!({"steps": [{"text": "one"}, {"text": "two"}, {"text": "three"}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    fake.fail_sends(vec![Fail::TooMany(1), Fail::Down(Duration::from_secs(3))]);
    let _daemon = start(&fake, &home, &[]).await;

    for (n, text) in ["first", "second", "third"].iter().enumerate() {
        fake.message(private(42), 42, text);
        let until = Duration::from_secs(60);
        let deadline = std::time::Instant::now() + until;
        while mock.requests().len() <= n {
            assert!(
                std::time::Instant::now() < deadline,
                "the model never saw {text}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    fake.until("three replies", WITHIN, |f| f.sent_to(42).len() == 3)
        .await;
    assert_eq!(texts(&fake.sent_to(42)), ["one", "two", "three"]);
    let refused = fake
        .calls_of("sendMessage")
        .iter()
        .filter(|b| b["_ok"] != true)
        .count();
    assert!(refused >= 2, "a 429 and at least one 503: {refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_delivered_again_after_a_sigkill_mid_run_is_answered_once() {
    let fake = FakeTelegram::start().await;
    let script = json!({"steps": [{"text": "Once.", "delay_ms": 1500, "forever": true}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    let mut daemon = start(&fake, &home, &[]).await;

    let update = json!({"message": {
        "message_id": 7, "date": 0, "chat": private(42), "text": "answer me once",
        "from": {"id": 42, "is_bot": false, "first_name": "P"},
    }});
    let id = fake.push(update.clone());
    let deadline = std::time::Instant::now() + WITHIN;
    while mock.requests().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    daemon.kill();
    assert!(fake.sent_to(42).is_empty(), "answered before the kill");

    // Telegram delivers the update again (as when keel died before confirming it).
    let mut again = update;
    again["update_id"] = json!(id);
    let daemon = start(&fake, &home, &[]).await;
    fake.redeliver(again);
    fake.until("the answer", WITHIN, |f| !f.sent_to(42).is_empty())
        .await;
    fake.until("the redelivery confirmed", WITHIN, |f| {
        f.offsets().contains(&(id + 1))
    })
    .await;
    assert_eq!(texts(&fake.sent_to(42)), ["Once."]);
    daemon.until_logged("a redelivered event was dropped");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_and_a_photo_reach_the_model_as_attachments() {
    let fake = FakeTelegram::start().await;
    let mock = Mock::start(&json!({"steps": [{"text": "Got them.", "forever": true}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    let _daemon = start(&fake, &home, &[]).await;

    fake.file("doc1", b"the notes say hello");
    fake.file("big-photo", b"\xff\xd8\xff\xe0 a jpeg, roughly");
    fake.push(json!({"message": {
        "message_id": 9, "date": 0, "chat": private(42), "caption": "what do these say?",
        "from": {"id": 42, "is_bot": false, "first_name": "P"},
        "document": {"file_id": "doc1", "file_unique_id": "u1", "file_name": "notes.txt",
                     "mime_type": "text/plain", "file_size": 19},
        "photo": [
            {"file_id": "small-photo", "file_unique_id": "u2", "width": 90, "height": 90, "file_size": 10},
            {"file_id": "big-photo", "file_unique_id": "u3", "width": 900, "height": 900, "file_size": 24}
        ],
    }}));
    fake.until("the answer", WITHIN, |f| f.sent_to(42).len() == 1)
        .await;
    let asked: Vec<Value> = fake.calls_of("getFile");
    let ids: Vec<&str> = asked.iter().filter_map(|b| b["file_id"].as_str()).collect();
    assert_eq!(
        ids,
        ["doc1", "big-photo"],
        "the document and the largest photo only"
    );
    let request = mock.requests()[0].to_string();
    assert!(request.contains("what do these say?"), "{request}");
    assert!(request.contains("notes.txt"), "{request}");
    assert!(request.contains("photo-9.jpg"), "{request}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_is_one_draft_edited_at_most_once_a_second_then_the_answer() {
    let fake = FakeTelegram::start().await;
    let words: Vec<String> = (1..=30).map(|n| format!("word{n}")).collect();
    let answer = format!("{}.", words.join(" "));
    // About three seconds of streaming: a draft, edits, then the answer.
    let script = json!({"steps": [{"text": answer, "chunk_delay_ms": 100, "forever": true}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, &channel_config(&fake, ""));
    let _daemon = start(&fake, &home, &[]).await;

    fake.message(private(42), 42, "count for me");
    fake.until("the draft edited into the answer", WITHIN, |f| {
        f.calls_of("editMessageText")
            .iter()
            .any(|b| b["text"] == json!(answer.clone()) && b["parse_mode"] == "HTML")
    })
    .await;
    let sent = fake.sent_to(42);
    assert_eq!(sent.len(), 1, "one message for a one-part answer: {sent:?}");
    let draft = &sent[0];
    let id = draft["_message_id"].clone();
    let first = draft["text"].as_str().unwrap();
    assert!(
        answer.starts_with(first) && first != answer,
        "the draft is the answer so far: {first}"
    );
    assert!(draft.get("parse_mode").is_none(), "a draft is plain text");
    let edits = fake.calls_of("editMessageText");
    assert!(edits.iter().all(|e| e["message_id"] == id), "{edits:?}");
    let last = edits.last().unwrap();
    assert_eq!(last["text"], json!(answer), "the answer ends in the draft");
    assert_eq!(last["parse_mode"], "HTML");
    // The draft and its stream edits (plain text), at most one a second.
    let mut shows = vec![draft["_ms"].as_u64().unwrap()];
    shows.extend(
        edits
            .iter()
            .filter(|e| e.get("parse_mode").is_none())
            .map(|e| e["_ms"].as_u64().unwrap()),
    );
    assert!(
        shows.len() >= 2,
        "the draft was edited while written: {shows:?}"
    );
    for pair in shows.windows(2) {
        assert!(
            pair[1] - pair[0] >= 990,
            "shown faster than once a second: {shows:?}"
        );
    }
    let finals = edits.iter().filter(|e| e["parse_mode"] == "HTML").count();
    assert_eq!(finals, 1, "{edits:?}");
}
