//! The crash test of issue 33: 100 Telegram chats each send one message to the real
//! `keel serve` (on `keel mock-provider`, polling the fake Bot API), and the daemon is killed
//! (SIGKILL) at seeded random instants, then started again on the same KEEL_HOME, until every
//! chat is answered. No message may go unanswered; replies sent twice (the documented window: a
//! reply Telegram accepted whose receipt was not stored yet) are counted and printed.

mod common;
#[path = "telegram/fake.rs"]
mod fake;

use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{Daemon, daemon_config};
use common::{Mock, temp};
use fake::{FakeTelegram, TOKEN};
use serde_json::json;

const CHATS: i64 = 100;
const KILLS: usize = 5;

/// A small seeded generator (xorshift), so a failing run can be replayed.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn start(fake: &FakeTelegram, home: &Path) -> Daemon {
    let polls = fake.calls_of("getUpdates").len();
    let daemon = Daemon::start_with(home, &[("TELEGRAM_BOT_TOKEN", TOKEN)]);
    fake.until("a poll", Duration::from_secs(60), |f| {
        f.calls_of("getUpdates").len() > polls
    })
    .await;
    daemon
}

fn answered(fake: &FakeTelegram) -> usize {
    (1..=CHATS)
        .filter(|chat| !fake.sent_to(*chat).is_empty())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_message_is_answered_across_sigkills_and_duplicates_are_counted() {
    let seed = std::env::var("KEEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_cafe_u64);
    let mut random = Seeded(seed);
    let fake = FakeTelegram::start().await;
    let mock = Mock::start(
        &json!({"steps": [{"text": "Answered.", "delay_ms": 150, "forever": true}]}).to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let config = format!(
        "[channels]\npoll_ms = 20\nretry_first_ms = 50\nretry_max_secs = 1\n\n\
         [channels.telegram]\napi_url = \"{}\"\npoll_timeout_secs = 1\nallow = \"everyone\"\n",
        fake.url
    );
    daemon_config(&home, &mock, &workspace, &config);
    let started = Instant::now();
    let mut kills = Vec::new();
    let batch = CHATS / KILLS as i64;
    for round in 0..KILLS as i64 {
        // A batch of new chats each round, so that every kill finds work under way.
        for chat in round * batch + 1..=(round + 1) * batch {
            fake.message(
                json!({"id": chat, "type": "private", "first_name": "P"}),
                chat,
                &format!("message of chat {chat}"),
            );
        }
        let mut daemon = start(&fake, &home).await;
        // A random instant: the kill is the event under test, not a wait for an outcome.
        let after = Duration::from_millis(10 + random.below(300));
        tokio::time::sleep(after).await;
        daemon.kill();
        kills.push((after.as_millis(), answered(&fake)));
    }
    let _daemon = start(&fake, &home).await;
    fake.until("every chat answered", Duration::from_secs(90), |f| {
        answered(f) == CHATS as usize
    })
    .await;
    // Every outbox row is delivered once the last chat is answered; a duplicate of an earlier
    // crash is in the record already.
    let mut duplicates = Vec::new();
    for chat in 1..=CHATS {
        let sent = fake.sent_to(chat);
        assert!(
            sent.iter().all(|b| b["text"] == "Answered."),
            "chat {chat}: {sent:?}"
        );
        if sent.len() > 1 {
            duplicates.push((chat, sent.len() - 1));
        }
    }
    let total: usize = duplicates.iter().map(|(_, n)| n).sum();
    eprintln!(
        "crash test (seed {seed:#x}): {CHATS} chats, {KILLS} SIGKILLs at (ms after start, chats \
         answered by then) {kills:?}; all answered after {:.1} s; duplicated replies: {total} \
         in chats {duplicates:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(answered(&fake), CHATS as usize, "a message went unanswered");
}
