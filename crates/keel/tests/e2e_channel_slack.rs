//! End to end: the Slack channel of the real `keel serve`, with `keel mock-provider` as its
//! model and a fake Slack Web API in the test process (`slack/fake.rs`); the test posts signed
//! Events API and interaction requests as Slack would. A message in, the model's answer out in
//! its channel and thread; a retry and the `app_mention` twin of a message taken once; an
//! approval decided by the owner's button press (a guest's refused); a long answer split in
//! order through a 429 and a 503; forged, stale, malformed and unknown requests refused or
//! ignored with nothing stored.

mod common;
#[path = "slack/fake.rs"]
mod fake;

use std::path::PathBuf;
use std::time::Duration;

use common::daemon::{Daemon, daemon_config};
use common::platform::slack_user;
use common::{Mock, temp};
use fake::{BOT, FakeSlack, SECRET, TOKEN, event, message, now, post_signed, press};
use serde_json::{Value, json};

const EVENTS: &str = "/channels/slack/events";
const INTERACTIONS: &str = "/channels/slack/interactions";
const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";

struct Setup {
    daemon: Daemon,
    mock: Mock,
    fake: FakeSlack,
    fake_home: PathBuf,
    _guards: Vec<tempfile::TempDir>,
}

impl Setup {
    /// A daemon whose model answers `script`, Slack configured on the fake (`extra` added to
    /// its section), `users` (name, Slack id, permission) linked first.
    async fn start(script: Value, extra: &str, users: &[(&str, &str, &str)]) -> Setup {
        let fake = FakeSlack::start().await;
        let mock = Mock::start(&script.to_string());
        let (home_guard, home) = temp();
        let (workspace_guard, workspace) = temp();
        let fake_home = workspace.join("home");
        std::fs::create_dir(&fake_home).unwrap();
        std::fs::write(fake_home.join("canary"), "still here").unwrap();
        let section = format!(
            "[channels]\npoll_ms = 20\nretry_first_ms = 20\nretry_max_secs = 1\n\n\
             [channels.slack]\napi_url = \"{}\"\nallow = \"everyone\"\n{extra}\n",
            fake.url
        );
        daemon_config(&home, &mock, &workspace, &section);
        for (user, id, permission) in users {
            slack_user(&home, user, id);
            let set = ["users", "set", user, "--permission", permission];
            let output = common::run(common::keel(&home).args(set));
            assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
        }
        let env_home = fake_home.clone();
        let daemon = tokio::task::spawn_blocking(move || {
            Daemon::start_with(
                &home,
                &[
                    ("SLACK_BOT_TOKEN", TOKEN),
                    ("SLACK_SIGNING_SECRET", SECRET),
                    ("HOME", env_home.to_str().unwrap()),
                ],
            )
        })
        .await
        .unwrap();
        Setup {
            daemon,
            mock,
            fake,
            fake_home,
            _guards: vec![home_guard, workspace_guard],
        }
    }

    /// Posts an Events API body signed now; the status.
    async fn event(&self, body: &str, extra: &[(&str, &str)]) -> u16 {
        post_signed(&self.daemon.url, EVENTS, body, JSON, SECRET, now(), extra)
            .await
            .0
    }

    /// Posts a button press signed now; the status.
    async fn press(&self, user: &str, channel: &str, value: &str, action_ts: &str) -> u16 {
        let body = press(user, channel, value, action_ts);
        post_signed(
            &self.daemon.url,
            INTERACTIONS,
            &body,
            FORM,
            SECRET,
            now(),
            &[],
        )
        .await
        .0
    }
}

/// The mrkdwn text of a posted message's first section.
fn section(post: &Value) -> &str {
    post["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default()
}

/// Waits a little (polling, not a fixed wait for an outcome) so that anything wrongly queued
/// would have been delivered.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_is_answered_in_its_thread_once_whatever_slack_resends() {
    let script = json!({"steps": [
        {"text": "Hello from **keel** & co."},
        {"text": "In the DM."},
        {"text": "In the thread."},
    ]});
    let s = Setup::start(script, "", &[]).await;
    // The bot's id came from auth.test, with the bot token.
    s.fake.until("auth.test", 1).await;

    let challenge = r#"{"token":"t","type":"url_verification","challenge":"ch4ll3nge"}"#;
    let (status, body) =
        post_signed(&s.daemon.url, EVENTS, challenge, JSON, SECRET, now(), &[]).await;
    assert_eq!((status, body.contains("ch4ll3nge")), (200, true), "{body}");

    // A channel message that does not mention keel is not for it.
    let chatter = event(
        "Ev0",
        message("UANY", "C1", "1700000000.000100", "just chatting"),
    );
    assert_eq!(s.event(&chatter, &[]).await, 200);

    let ts = "1700000000.000200";
    let mention = event("Ev1", message("UANY", "C1", ts, "<@UBOT> hello"));
    assert_eq!(s.event(&mention, &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 1).await;
    assert_eq!(posts[0]["channel"], "C1", "{}", posts[0]);
    assert_eq!(posts[0]["thread_ts"], ts, "{}", posts[0]);
    assert_eq!(section(&posts[0]), "Hello from *keel* &amp; co.");
    assert_eq!(posts[0]["text"], "Hello from *keel* &amp; co.");
    assert_eq!(s.mock.requests().len(), 1);
    let asked = s.mock.requests()[0].to_string();
    assert!(
        asked.contains("hello") && !asked.contains("<@UBOT>"),
        "{asked}"
    );

    // Slack retries the event, and sends its app_mention twin (another event_id): both taken
    // as the message they are.
    let retry = [
        ("x-slack-retry-num", "1"),
        ("x-slack-retry-reason", "http_timeout"),
    ];
    assert_eq!(s.event(&mention, &retry).await, 200);
    let twin = json!({"type": "app_mention", "user": "UANY", "channel": "C1", "ts": ts,
        "text": "<@UBOT> hello"});
    assert_eq!(s.event(&event("Ev1b", twin), &[]).await, 200);

    // A DM is answered top-level.
    let dm = event(
        "Ev2",
        message("UANY", "D1", "1700000000.000300", "hi there"),
    );
    assert_eq!(s.event(&dm, &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 2).await;
    assert_eq!(posts[1]["channel"], "D1", "{}", posts[1]);
    assert!(posts[1].get("thread_ts").is_none(), "{}", posts[1]);
    assert_eq!(section(&posts[1]), "In the DM.");

    // In a thread keel is in, no mention is needed.
    let mut reply = message("UANY", "C1", "1700000000.000400", "and then?");
    reply["thread_ts"] = json!(ts);
    assert_eq!(s.event(&event("Ev3", reply), &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 3).await;
    assert_eq!(
        (&posts[2]["channel"], &posts[2]["thread_ts"]),
        (&json!("C1"), &json!(ts))
    );
    assert_eq!(section(&posts[2]), "In the thread.");

    settle().await;
    assert_eq!(
        s.fake.bodies("chat.postMessage").len(),
        3,
        "{:#?}",
        s.fake.calls()
    );
    assert_eq!(s.mock.requests().len(), 3);
    let token = format!("Bearer {TOKEN}");
    assert!(s.fake.calls().iter().all(|call| call.auth == token));
}

/// The model's call that needs approval: `rm -rf ~` (HOME is a directory in the workspace).
fn rm_home() -> Value {
    json!({"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]})
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_decided_by_the_owner_s_button_never_a_guest_s() {
    let script = json!({"steps": [rm_home(), {"text": "Cleaned."}]});
    // The shell is an admin's tool: Ana, who asks, is one (and so owns the conversation).
    let s = Setup::start(script, "", &[("ana", "UANA", "admin")]).await;
    let ts = "1700000001.000100";
    let asked = event("Ev1", message("UANA", "C1", ts, "<@UBOT> clean my home"));
    assert_eq!(s.event(&asked, &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 1).await;
    let approval = posts.last().unwrap();
    assert_eq!(approval["thread_ts"], ts, "{approval}");
    let blocks = approval["blocks"].as_array().unwrap();
    let actions = blocks.last().unwrap();
    assert_eq!(actions["type"], "actions", "{approval}");
    let buttons = actions["elements"].as_array().unwrap();
    assert_eq!(buttons.len(), 3, "{approval}");
    assert_eq!(buttons[2]["style"], "danger", "{approval}");
    let approve = buttons[0]["value"].as_str().unwrap();
    assert!(approve.ends_with(":y"), "{approve}");

    // A guest's press decides nothing: they are told, the run still waits.
    assert_eq!(
        s.press("UGUEST", "C1", approve, "1700000002.000001").await,
        200
    );
    let told = s.fake.until("chat.postEphemeral", 1).await;
    assert_eq!(told[0]["user"], "UGUEST", "{}", told[0]);
    assert!(
        told[0]["text"].as_str().unwrap().contains("owner"),
        "{}",
        told[0]
    );
    settle().await;
    assert!(
        s.fake_home.join("canary").exists(),
        "ran on a guest's press"
    );
    assert!(
        s.fake.bodies("chat.update").is_empty(),
        "a guest's press changed the message"
    );
    assert_eq!(s.mock.requests().len(), 1);
    assert_eq!(s.fake.bodies("chat.postMessage").len(), 1);

    // The owner's press approves; the run goes on and its answer comes in the thread.
    assert_eq!(
        s.press("UANA", "C1", approve, "1700000002.000002").await,
        200
    );
    let told = s.fake.until("chat.postEphemeral", 2).await;
    assert_eq!(
        (&told[1]["user"], &told[1]["text"]),
        (&json!("UANA"), &json!("Approved."))
    );
    let posts = s.fake.until("chat.postMessage", 2).await;
    assert_eq!(section(&posts[1]), "Cleaned.");
    assert_eq!(posts[1]["thread_ts"], ts);
    assert!(!s.fake_home.exists(), "the approved command did not run");
    // The approval request loses its buttons and says who decided.
    let updated = s.fake.until("chat.update", 1).await;
    let blocks = updated[0]["blocks"].as_array().unwrap();
    assert!(
        blocks.iter().all(|b| b["type"] != "actions"),
        "{}",
        updated[0]
    );
    assert!(
        updated[0].to_string().contains("Approved. (<@UANA>)"),
        "{}",
        updated[0]
    );

    // The same press sent again does nothing more.
    assert_eq!(
        s.press("UANA", "C1", approve, "1700000002.000002").await,
        200
    );
    let told = s.fake.until("chat.postEphemeral", 3).await;
    assert_eq!(told[2]["text"], "Already done.");
    settle().await;
    assert_eq!(s.mock.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_s_choices_are_buttons_the_owner_answers_with() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "clarify", "arguments": {
            "question": "Which format should the export use?",
            "choices": ["CSV", "JSON", "YAML"]
        }}]},
        {"text": "Exported."}
    ]});
    let s = Setup::start(script, "", &[("bob", "UBOB", "user")]).await;
    let dm = event(
        "Ev1",
        message("UBOB", "D7", "1700000005.000100", "export it"),
    );
    assert_eq!(s.event(&dm, &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 1).await;
    assert!(section(&posts[0]).contains("Which format"), "{}", posts[0]);
    let buttons = posts[0]["blocks"][1]["elements"]
        .as_array()
        .unwrap()
        .clone();
    let labels: Vec<&str> = buttons
        .iter()
        .map(|b| b["text"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["CSV", "JSON", "YAML"]);
    let json_button = buttons[1]["value"].as_str().unwrap();

    assert_eq!(
        s.press("UBOB", "D7", json_button, "1700000005.000200")
            .await,
        200
    );
    let told = s.fake.until("chat.postEphemeral", 1).await;
    assert_eq!(told[0]["text"], "Answered: JSON");
    let posts = s.fake.until("chat.postMessage", 2).await;
    assert_eq!(section(&posts[1]), "Exported.");
    let requests = s.mock.requests();
    let result = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(result.contains("JSON"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_is_split_in_order_through_a_429_and_a_503_without_a_double() {
    let prose: String = (0..400).map(|i| format!("word{i} ")).collect();
    let code: String = (0..200).map(|i| format!("let v{i} = a < {i};\n")).collect();
    let long = format!("{prose}\n\n```rust\n{code}```\n\nThe end.");
    let s = Setup::start(
        json!({"steps": [{"text": long}]}),
        "bot_user_id = \"UBOT\"",
        &[],
    )
    .await;
    // bot_user_id given: Slack is not asked.
    assert!(s.fake.bodies("auth.test").is_empty());
    // The first message is rate limited, the second meets an outage: the courier tries the
    // reply again, and only the messages not posted yet are posted.
    let limited = json!({"ok": false, "error": "ratelimited"});
    s.fake.fail_after(0, 429, &[("retry-after", "0")], limited);
    s.fake.fail_after(1, 503, &[], json!({"ok": false}));
    let dm = event(
        "Ev1",
        message("UANY", "D1", "1700000003.000100", "write a lot"),
    );
    assert_eq!(s.event(&dm, &[]).await, 200);
    let mut posts = Vec::new();
    for _ in 0..3000 {
        posts = s.fake.bodies("chat.postMessage");
        if posts
            .last()
            .is_some_and(|p| section(p).ends_with("The end."))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(posts.len() >= 4, "{posts:#?}");
    let failed = s
        .fake
        .calls()
        .iter()
        .filter(|c| c.method.contains("failed"))
        .count();
    assert_eq!(failed, 2);
    let mut lines = Vec::new();
    for post in &posts {
        let text = section(post);
        assert!(
            text.chars().count() <= 3000,
            "{} chars",
            text.chars().count()
        );
        assert_eq!(post["channel"], "D1");
        let fences = text.lines().filter(|l| l.starts_with("```")).count();
        assert_eq!(fences % 2, 0, "a code block left open: {text}");
        lines.extend(
            text.lines()
                .filter(|l| l.starts_with("let v"))
                .map(String::from),
        );
    }
    let want: Vec<String> = (0..200)
        .map(|i| format!("let v{i} = a &lt; {i};"))
        .collect();
    assert_eq!(lines, want, "code lines lost, changed or out of order");
    let words: Vec<&str> = posts
        .iter()
        .flat_map(|p| section(p).split_whitespace())
        .filter(|w| w.starts_with("word"))
        .collect();
    assert_eq!(words.len(), 400);
    assert!(words.windows(2).all(|w| w[0] != w[1]));
    settle().await;
    assert_eq!(s.fake.bodies("chat.postMessage").len(), posts.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_requests_are_refused_and_store_nothing() {
    let s = Setup::start(json!({"steps": [{"text": "Still here."}]}), "", &[]).await;
    let url = s.daemon.url.clone();
    let good = event("Ev1", message("UANY", "D1", "1700000004.000100", "hello"));
    let post = |path: &'static str, body: String, kind: &'static str, secret, at| {
        let url = url.clone();
        async move { post_signed(&url, path, &body, kind, secret, at, &[]).await }
    };
    let refused = |(status, why): (u16, String), want: u16, says: &str| {
        assert_eq!(status, want, "{why}");
        assert!(why.contains(says), "{why:?} does not say {says:?}");
    };
    // Forged, stale, from the future, unsigned: refused, and the answer says why.
    let forged = post(EVENTS, good.clone(), JSON, "not-the-secret", now()).await;
    refused(forged, 401, "signature does not match");
    let stale = post(EVENTS, good.clone(), JSON, SECRET, now() - 600).await;
    refused(stale, 401, "timestamp is");
    let ahead = post(EVENTS, good.clone(), JSON, SECRET, now() + 600).await;
    refused(ahead, 401, "timestamp is");
    keel_providers::install_crypto_provider();
    let unsigned = reqwest::Client::new()
        .post(format!("{url}{EVENTS}"))
        .body(good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    assert!(
        unsigned
            .text()
            .await
            .unwrap()
            .contains("X-Slack-Request-Timestamp")
    );
    // Signed but malformed, or not an event keel takes.
    refused(
        post(EVENTS, "{not json".into(), JSON, SECRET, now()).await,
        400,
        "not JSON",
    );
    let no_user = event(
        "Ev2",
        json!({"type": "message", "channel": "D1", "ts": "1.2"}),
    );
    refused(
        post(EVENTS, no_user, JSON, SECRET, now()).await,
        400,
        "without user",
    );
    let ignored = |body: String| post(EVENTS, body, JSON, SECRET, now());
    let reaction = event("Ev3", json!({"type": "reaction_added", "user": "UANY"}));
    assert_eq!(ignored(reaction).await.0, 200);
    let other = json!({"type": "app_rate_limited", "team_id": "T1"}).to_string();
    assert_eq!(ignored(other).await.0, 200);
    let edit = json!({"type": "message", "subtype": "message_changed", "channel": "D1",
        "channel_type": "im", "ts": "1.3"});
    assert_eq!(ignored(event("Ev4", edit)).await.0, 200);
    let bot = json!({"type": "message", "bot_id": "B1", "user": BOT, "channel": "D1",
        "channel_type": "im", "ts": "1.4", "text": "echo"});
    assert_eq!(ignored(event("Ev5", bot)).await.0, 200);
    let huge = format!(
        "{{\"type\":\"event_callback\",\"x\":\"{}\"}}",
        "a".repeat(2 << 20)
    );
    assert_eq!(ignored(huge).await.0, 413);
    // Interactions: forged, malformed, of a kind keel does not take, a button not keel's.
    let pressed = press("UANY", "D1", "1:y", "1.5");
    refused(
        post(INTERACTIONS, pressed, FORM, "forged", now()).await,
        401,
        "signature",
    );
    let malformed = post(INTERACTIONS, "payload=%7Bnope".into(), FORM, SECRET, now()).await;
    refused(malformed, 400, "no JSON payload");
    // Nothing of them was stored: no event noted, no reply queued.
    let status = common::run(common::keel(&s.daemon.home).args(["channels", "status", "--json"]));
    assert_eq!(status.status.code(), Some(0), "{}", common::stderr(&status));
    let status: Value = serde_json::from_str(common::stdout(&status).trim()).unwrap();
    assert_eq!(status["channel"], "slack", "{status}");
    assert!(!status.to_string().contains("last_event_at"), "{status}");
    assert_eq!(status["outbox"]["pending"], 0, "{status}");
    assert_eq!(status["outbox"]["delivered"], 0, "{status}");
    let view = format!("payload={}", "%7B%22type%22%3A%22view_submission%22%7D");
    assert_eq!(post(INTERACTIONS, view, FORM, SECRET, now()).await.0, 200);
    assert_eq!(s.press("UANY", "D1", "999:y", "1.6").await, 200);
    let told = s.fake.until("chat.postEphemeral", 1).await;
    assert!(
        told[0]["text"]
            .as_str()
            .unwrap()
            .contains("no longer valid"),
        "{}",
        told[0]
    );

    assert!(
        s.mock.requests().is_empty(),
        "a refused request reached the model"
    );
    assert!(s.fake.bodies("chat.postMessage").is_empty());

    // Each refusal is a line in the daemon's log.
    s.daemon
        .until_logged("a Slack Events API request was refused");
    assert!(
        s.daemon.log().contains("signature does not match"),
        "{}",
        s.daemon.log()
    );

    // The daemon is unharmed: a good message is answered.
    assert_eq!(s.event(&good, &[]).await, 200);
    let posts = s.fake.until("chat.postMessage", 1).await;
    assert_eq!(section(&posts[0]), "Still here.");
}
