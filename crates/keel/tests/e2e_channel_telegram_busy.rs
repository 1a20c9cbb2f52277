//! End to end: `keel serve` with `keel mock-provider`, polling a fake Telegram Bot API, with
//! `[channels.telegram] lane_policy = { dm = "reject" }`: a second message while the first is
//! being answered gets one short busy reply, and the first its answer; nothing else is sent.

mod common;
#[path = "telegram/fake.rs"]
mod fake;

use std::time::Duration;

use common::daemon::{Daemon, daemon_config};
use common::{Mock, temp};
use fake::{FakeTelegram, TOKEN};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_direct_chat_under_reject_is_told_once_that_keel_is_busy() {
    let fake = FakeTelegram::start().await;
    let mock = Mock::start(
        &json!({"per_turn": true, "steps": [{"text": "Done.", "delay_ms": 1_500}]}).to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let channels = format!(
        "[channels]\npoll_ms = 20\nretry_first_ms = 50\nretry_max_secs = 1\n\n\
         [channels.telegram]\napi_url = \"{}\"\npoll_timeout_secs = 1\nallow = \"everyone\"\n\
         lane_policy = {{ dm = \"reject\" }}\n",
        fake.url
    );
    daemon_config(&home, &mock, &workspace, &channels);
    let polls = fake.calls_of("getUpdates").len();
    let _daemon = Daemon::start_with(&home, &[("TELEGRAM_BOT_TOKEN", TOKEN)]);
    fake.until("a poll", WITHIN, |f| f.calls_of("getUpdates").len() > polls)
        .await;

    let private = json!({"id": 42, "type": "private", "first_name": "P"});
    fake.message(private.clone(), 42, "one");
    let started = std::time::Instant::now();
    while mock.requests().is_empty() {
        assert!(started.elapsed() < WITHIN, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.message(private, 42, "two");
    fake.until("the busy reply and the answer", WITHIN, |f| {
        f.sent_to(42).len() >= 2
    })
    .await;
    // Give a second busy reply, if one were coming, the time to come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let texts: Vec<String> = fake
        .sent_to(42)
        .iter()
        .map(|b| b["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts[0].contains("still working on your last message"),
        "{texts:?}"
    );
    assert_eq!(texts[1], "Done.", "{texts:?}");
    assert_eq!(
        mock.requests().len(),
        1,
        "the refused message never reached the model"
    );
}
