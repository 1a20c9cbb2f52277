//! End to end: Discord. The real `keel serve` with `keel mock-provider` as its model and a fake
//! Discord in the test process (`discord_fake`: a Gateway on a real WebSocket and the REST API).
//! A message comes in through the Gateway and the model's answer goes out to its channel (a
//! DM, a thread), quoting it; a long answer is split into messages of at most 2,000
//! characters; an approval is decided by a button press (a signed interaction) of the owner and
//! refused to a guest. Hostile: frames that are not JSON, unknown dispatches, unreadable
//! messages, a dropped connection, a reconnect request, a redelivered message, 429s in the middle
//! of a long reply (no part posted twice); forged, unsigned, stale and replayed interactions.
//! Each refused or ignored, nothing stored of it, the daemon unharmed (the runs are counted).

mod common;
mod discord_fake;

use std::path::Path;

use common::daemon::{Daemon, daemon_config};
use common::{Mock, keel, run, stderr, stdout, temp};
use discord_fake::{BOT_ID, FakeDiscord, TOKEN};
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

/// The owner's Discord id (linked to the keel user `ann`).
const ANN: &str = "111";
/// A stranger's.
const GUEST: &str = "222";
/// The guild.
const GUILD: &str = "42";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The application's key pair, made for the test.
fn app_key() -> SigningKey {
    SigningKey::from_bytes(&[9; 32])
}

/// keel.toml for a daemon on `mock` talking to `fake`.
fn configure(home: &Path, mock: &Mock, workspace: &Path, fake: &FakeDiscord, gateway_url: bool) {
    let gateway = if gateway_url {
        format!("gateway_url = \"{}\"\n", fake.gateway_url)
    } else {
        String::new()
    };
    daemon_config(
        home,
        mock,
        workspace,
        &format!(
            "[channels]\npoll_ms = 20\nretry_first_ms = 20\nretry_max_secs = 1\n\n\
             [channels.discord]\ntoken_env = \"KEEL_TEST_DISCORD_TOKEN\"\npublic_key = \"{}\"\n\
             rest_url = \"{}\"\n{gateway}",
            hex(app_key().verifying_key().as_bytes()),
            fake.rest_url
        ),
    );
    for args in [
        vec!["users", "set", "ann", "--permission", "owner"],
        vec![
            "users",
            "link",
            "ann",
            "--platform",
            "discord",
            "--platform-user-id",
            ANN,
        ],
    ] {
        let output = run(keel(home).args(&args));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}

/// A MESSAGE_CREATE's data.
fn message(id: &str, channel: &str, guild: Option<&str>, author: &str, content: &str) -> Value {
    let mut message = json!({
        "id": id, "channel_id": channel, "content": content,
        "author": {"id": author, "username": format!("user{author}")},
        "mentions": if content.contains(&format!("<@{BOT_ID}>")) {
            json!([{"id": BOT_ID, "username": "keel", "bot": true}])
        } else {
            json!([])
        },
    });
    if let Some(guild) = guild {
        message["guild_id"] = json!(guild);
    }
    message
}

#[test]
fn messages_in_through_the_gateway_answers_out_to_their_channels() {
    let long: String = (0..150)
        .map(|n| format!("Line {n:03} of a long answer, long enough to need splitting.\n"))
        .collect();
    let script = json!({"steps": [
        {"text": "Hello from keel."},
        {"text": "In the thread."},
        {"text": long},
        {"text": "Still here.", "forever": true},
    ]});
    let mock = Mock::start(&script.to_string());
    let fake = FakeDiscord::start();
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    configure(&home, &mock, &workspace, &fake, false);
    let daemon = Daemon::start_with(&home, &[("KEEL_TEST_DISCORD_TOKEN", TOKEN)]);
    fake.until_connected(1);
    let identify = &fake.identifies()[0];
    assert_eq!(identify["d"]["intents"], 512 + 4096 + 32768, "{identify}");

    // A DM: answered in its channel, quoting the message; typing shown there.
    fake.dispatch("MESSAGE_CREATE", message("1001", "500", None, ANN, "hello"));
    let dm = fake.until_posted("500", 1);
    assert_eq!(dm[0]["content"], "Hello from keel.", "{dm:?}");
    assert_eq!(dm[0]["message_reference"]["message_id"], "1001");
    assert_eq!(dm[0]["allowed_mentions"]["parse"], json!([]));
    assert!(
        fake.typing().contains(&"500".to_string()),
        "{:?}",
        fake.typing()
    );

    // In a guild: a message not for keel, keel's own and another bot's are passed over; one
    // that mentions keel in a thread is answered in the thread (its own channel).
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1002", "600", Some(GUILD), ANN, "chatter"),
    );
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1003", "600", Some(GUILD), BOT_ID, "mine"),
    );
    let mut bot = message(
        "1004",
        "600",
        Some(GUILD),
        "999",
        &format!("<@{BOT_ID}> hi"),
    );
    bot["author"]["bot"] = json!(true);
    fake.dispatch("MESSAGE_CREATE", bot);
    let mention = format!("<@{BOT_ID}> what about this thread?");
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1005", "700", Some(GUILD), ANN, &mention),
    );
    let thread = fake.until_posted("700", 1);
    assert_eq!(thread[0]["content"], "In the thread.", "{thread:?}");
    assert_eq!(thread[0]["message_reference"]["message_id"], "1005");
    assert!(
        fake.posted_to("600").is_empty(),
        "{:?}",
        fake.posted_to("600")
    );

    // A long answer, split into messages of at most 2,000 characters; a 429 on its first part
    // and another on its second are waited out, and no part is posted twice.
    fake.refuse_next(
        429,
        json!({"message": "You are being rate limited.", "retry_after": 0.05, "global": false}),
    );
    let limited =
        json!({"message": "You are being rate limited.", "retry_after": 0.05, "global": false});
    fake.refuse_later(1, 429, limited);
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1006", "500", None, ANN, "tell me a lot"),
    );
    let words = |parts: &[Value]| -> Vec<String> {
        let text: Vec<&str> = parts
            .iter()
            .map(|p| p["content"].as_str().unwrap())
            .collect();
        text.join("\n")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let expected: Vec<String> = long.split_whitespace().map(str::to_string).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let parts = loop {
        let parts = fake.posted_to("500");
        if parts.len() > 1 && words(&parts[1..]) == expected {
            break parts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the long answer never arrived: {parts:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // The hello's answer, then at least as many parts as 2,000-character pieces.
    let long_parts = parts.len() - 1;
    assert!(long_parts >= long.len().div_ceil(2_000), "{long_parts}");
    for part in &parts[1..] {
        assert!(part["content"].as_str().unwrap().chars().count() <= 2_000);
    }
    assert_eq!(parts[1]["message_reference"]["message_id"], "1006");
    assert!(parts[2].get("message_reference").is_none());

    // Hostile frames: not JSON, an unknown dispatch, a MESSAGE_CREATE keel cannot read, an
    // unknown op. Then a redelivered message, a reconnect request and a dropped connection:
    // keel resumes, and the next message is answered once.
    fake.raw("{this is not json");
    fake.dispatch("SOMETHING_NEW", json!({"whatever": true}));
    fake.dispatch("MESSAGE_CREATE", json!({"id": "1007"}));
    fake.raw(r#"{"op": 99, "d": null}"#);
    fake.dispatch("MESSAGE_CREATE", message("1001", "500", None, ANN, "hello"));
    fake.raw(r#"{"op": 7, "d": null}"#);
    fake.until_connected(2);
    fake.drop_connection();
    fake.until_connected(3);
    assert_eq!(fake.resumes().len(), 2, "{:?}", fake.resumes());
    assert_eq!(fake.resumes()[1]["d"]["session_id"], "session-1");
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1008", "500", None, ANN, "still there?"),
    );
    let all = fake.until_posted("500", parts.len() + 1);
    assert_eq!(all.last().unwrap()["content"], "Still here.");
    assert_eq!(
        all.len(),
        parts.len() + 1,
        "the redelivered message was answered again"
    );
    assert!(fake.heartbeats() > 0);
    assert_eq!(fake.unauthorized(), 0);

    // A stranger under pairing gets a code, and no run.
    fake.dispatch(
        "MESSAGE_CREATE",
        message("1009", "501", None, GUEST, "let me in"),
    );
    let notice = fake.until_posted("501", 1);
    assert!(
        notice[0]["content"]
            .as_str()
            .unwrap()
            .contains("pairing code"),
        "{notice:?}"
    );
    // Each hostile frame was passed over with a line saying so.
    let log = daemon.log();
    assert!(log.contains("not JSON was ignored"), "{log}");
    assert!(log.contains("MESSAGE_CREATE keel cannot read"), "{log}");
    assert!(log.contains("unknown op"), "{log}");
    let runs = stdout(&run(keel(&home).arg("runs")));
    assert_eq!(
        runs.lines().filter(|l| l.contains("completed")).count(),
        4,
        "{runs}"
    );
}

/// A signed interaction: status and JSON answer.
fn interact(
    fake: &FakeDiscord,
    daemon: &Daemon,
    body: &Value,
    key: &SigningKey,
    age_secs: i64,
) -> (u16, Value) {
    interact_raw(fake, daemon, body.to_string(), Some(key), age_secs)
}

fn interact_raw(
    fake: &FakeDiscord,
    daemon: &Daemon,
    body: String,
    key: Option<&SigningKey>,
    age_secs: i64,
) -> (u16, Value) {
    keel_providers::install_crypto_provider();
    let url = format!("{}/channels/discord/interactions", daemon.url);
    fake.rt.block_on(async move {
        let timestamp = (chrono_now() - age_secs).to_string();
        let mut request = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json");
        if let Some(key) = key {
            let mut signed = timestamp.as_bytes().to_vec();
            signed.extend_from_slice(body.as_bytes());
            request = request
                .header("x-signature-ed25519", hex(&key.sign(&signed).to_bytes()))
                .header("x-signature-timestamp", &timestamp);
        }
        let response = request.body(body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    })
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A button press by `user`, interaction `id`.
fn press(id: &str, user: &str, custom_id: &str) -> Value {
    json!({"id": id, "type": 3, "token": "t", "application_id": "1", "channel_id": "800",
        "guild_id": GUILD, "member": {"user": {"id": user, "username": format!("user{user}")}},
        "data": {"custom_id": custom_id, "component_type": 2}})
}

#[test]
fn an_approval_is_decided_by_the_owners_button_press_and_refused_to_a_guest() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Cleaned."},
        {"text": "Resting now.", "forever": true},
    ]});
    let mock = Mock::start(&script.to_string());
    let fake = FakeDiscord::start();
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    configure(&home, &mock, &workspace, &fake, true);
    let env = [
        ("KEEL_TEST_DISCORD_TOKEN", TOKEN),
        ("HOME", fake_home.to_str().unwrap()),
    ];
    let daemon = Daemon::start_with(&home, &env);
    fake.until_connected(1);
    let key = app_key();

    // Discord's PING, signed, is answered; unsigned, forged, stale and unreadable are not.
    let (status, pong) = interact(&fake, &daemon, &json!({"type": 1}), &key, 0);
    assert_eq!((status, &pong), (200, &json!({"type": 1})));
    let (status, _) = interact_raw(&fake, &daemon, json!({"type": 1}).to_string(), None, 0);
    assert_eq!(status, 401);
    let forger = SigningKey::from_bytes(&[3; 32]);
    let (status, _) = interact(&fake, &daemon, &json!({"type": 1}), &forger, 0);
    assert_eq!(status, 401);
    let (status, _) = interact(&fake, &daemon, &json!({"type": 1}), &key, 600);
    assert_eq!(status, 401);
    let (status, _) = interact_raw(&fake, &daemon, "{oops".into(), Some(&key), 0);
    assert_eq!(status, 400);
    let (status, _) = interact(&fake, &daemon, &json!({"type": 42, "id": "1"}), &key, 0);
    assert_eq!(status, 400);

    // Ann asks, in a guild channel; the run waits for an approval, shown with buttons.
    let ask = format!("<@{BOT_ID}> clean my home");
    fake.dispatch(
        "MESSAGE_CREATE",
        message("2001", "800", Some(GUILD), ANN, &ask),
    );
    let request = fake.until_posted("800", 1);
    assert!(
        request[0]["content"]
            .as_str()
            .unwrap()
            .contains("Approval needed"),
        "{request:?}"
    );
    let buttons = request[0]["components"][0]["components"]
        .as_array()
        .unwrap()
        .clone();
    let approve = buttons.iter().find(|b| b["label"] == "Approve").unwrap();
    assert_eq!(approve["style"], 1);
    assert_eq!(
        buttons.iter().find(|b| b["label"] == "Deny").unwrap()["style"],
        4
    );
    let custom_id = approve["custom_id"].as_str().unwrap();

    // A guest's press is refused, privately, and decides nothing.
    let (status, answer) = interact(&fake, &daemon, &press("3001", GUEST, custom_id), &key, 0);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["flags"], 64);
    assert!(
        answer["data"]["content"]
            .as_str()
            .unwrap()
            .contains("owner or an admin"),
        "{answer}"
    );
    assert!(fake_home.join("canary").exists());

    // A press signed with another key, or too old, is refused before anything.
    let (status, _) = interact(&fake, &daemon, &press("3002", ANN, custom_id), &forger, 0);
    assert_eq!(status, 401);
    let (status, _) = interact(&fake, &daemon, &press("3002", ANN, custom_id), &key, 400);
    assert_eq!(status, 401);
    assert!(fake_home.join("canary").exists());

    // The owner's press approves; the run goes on and answers.
    let (status, answer) = interact(&fake, &daemon, &press("3003", ANN, custom_id), &key, 0);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["content"], "Approved.", "{answer}");
    let answered = fake.until_posted("800", 2);
    assert_eq!(answered[1]["content"], "Cleaned.", "{answered:?}");
    assert!(!fake_home.exists(), "the approved command did not run");

    // The same interaction replayed does nothing again.
    let (status, answer) = interact(&fake, &daemon, &press("3003", ANN, custom_id), &key, 0);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["content"], "Already done.", "{answer}");

    // A slash command: acknowledged at once, answered in its channel by the courier; the same
    // interaction again is not a second run.
    let command = json!({"id": "4001", "type": 2, "token": "t", "application_id": "1",
        "channel_id": "800", "guild_id": GUILD,
        "member": {"user": {"id": ANN, "username": "ann"}},
        "data": {"name": "ask", "options": [{"name": "text", "type": 3, "value": "and now?"}]}});
    let (status, answer) = interact(&fake, &daemon, &command, &key, 0);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["type"], 4, "{answer}");
    assert!(
        answer["data"]["content"]
            .as_str()
            .unwrap()
            .contains("and now?")
    );
    let answered = fake.until_posted("800", 3);
    assert_eq!(answered[2]["content"], "Resting now.", "{answered:?}");
    let (status, answer) = interact(&fake, &daemon, &command, &key, 0);
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["content"], "Already received.", "{answer}");

    let log = daemon.log();
    assert!(log.contains("a Discord interaction was refused"), "{log}");
    assert!(log.contains("may not decide"), "{log}");
    let runs = stdout(&run(keel(&home).arg("runs")));
    assert_eq!(
        runs.lines().filter(|l| l.contains("completed")).count(),
        2,
        "{runs}"
    );
    assert_eq!(fake.posted().len(), 3, "{:?}", fake.posted());
}
