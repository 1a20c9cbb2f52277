//! End to end: platform messages through `keel serve` (seed 003's pipeline) against `keel
//! mock-provider`. Users resolved through platform links (an unknown one becomes a guest), the
//! persona cascade, conversations per channel and thread, tools per caller, untrusted sessions
//! that never write, the token log, and bad input refused whole.

mod common;

use common::daemon::{Daemon, make_key};
use common::platform::{
    message, platform_daemon, platform_daemon_with, prompt_and_tools, slack_user,
};
use common::{keel, run, stdout};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn platform_messages_resolve_users_personas_and_conversations() {
    let (daemon, mock, _workspace, _guards) = platform_daemon(
        r#"{"per_turn": true, "steps": [{"text": "hi", "usage": {"input_tokens": 10, "output_tokens": 5}}]}"#,
    );
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));
    let slack = daemon.client(&make_key(&daemon.home, &["--platform", "slack"]));

    for persona in [
        json!({"name": "plain", "system_prompt": "You are plain.", "default": true}),
        json!({"name": "slacker", "system_prompt": "You are slacker.", "platform": "slack"}),
        json!({"name": "acme", "system_prompt": "You are acme.", "platform": "slack",
               "platform_server_id": "T1", "model": "acme-model", "temperature": 0.3}),
    ] {
        let (status, body) = admin.post("/v1/personas", persona).await;
        assert_eq!(status, 201, "{body}");
    }
    // The cascade: server, then platform, then default.
    let (status, first) = slack
        .post(
            "/v1/messages?wait=true",
            message("slack", "U1", Some("T1"), "C1", None),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["state"], "completed");
    assert_eq!(first["session_id"], "slack:C1");
    let (status, second) = slack
        .post(
            "/v1/messages?wait=true",
            message("slack", "U1", Some("T2"), "C1", Some("17.5")),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["session_id"], "slack:C1:17.5",
        "a thread is its own conversation"
    );
    // A slack key cannot post as telegram; an admin key can.
    let (status, refused) = slack
        .post(
            "/v1/messages",
            message("telegram", "U1", None, "-100", None),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    let (status, third) = admin
        .post(
            "/v1/messages?wait=true",
            message("telegram", "99", None, "-100", None),
        )
        .await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(third["session_id"], "-100");

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let seen: Vec<(String, Vec<String>)> = requests.iter().map(prompt_and_tools).collect();
    assert!(seen[0].0.contains("You are acme."), "{:?}", seen[0]);
    assert!(seen[1].0.contains("You are slacker."), "{:?}", seen[1]);
    assert!(seen[2].0.contains("You are plain."), "{:?}", seen[2]);
    assert_eq!(requests[0]["model"], "acme-model");
    assert_eq!(requests[0]["temperature"], 0.3);
    // Guests get no tool that needs `user`: the file tools need it.
    for (_, tools) in &seen {
        assert!(
            !tools.iter().any(|t| t == "write_file" || t == "read_file"),
            "{tools:?}"
        );
    }

    // The same thread again is the same conversation (its place is the whole tuple, the
    // server included).
    let (status, again) = slack
        .post(
            "/v1/messages",
            message("slack", "U1", Some("T2"), "C1", Some("17.5")),
        )
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["conversation_id"], "slack:C1:17.5");
    admin
        .until_state(again["run_id"].as_str().unwrap(), &["completed"])
        .await;

    // New senders became guests with their links and the guest budget.
    let users = stdout(&run(keel(&daemon.home).arg("users")));
    assert!(
        users.contains("slack:U1  ") && users.contains("of 5000 tokens"),
        "{users}"
    );
    assert!(
        users.contains("guest") && users.contains("telegram:99"),
        "{users}"
    );
    // The same person on a second platform, linked, shares the user and its budget.
    let linked = run(keel(&daemon.home).args([
        "users",
        "link",
        "slack:U1",
        "--platform",
        "discord",
        "--platform-user-id",
        "D1",
    ]));
    assert_eq!(linked.status.code(), Some(0), "{}", common::stderr(&linked));
    let (status, from_discord) = admin
        .post(
            "/v1/messages?wait=true",
            message("discord", "D1", None, "G1", None),
        )
        .await;
    assert_eq!(status, 200, "{from_discord}");
    let (status, usage) = admin.get("/v1/usage?user=slack:U1").await;
    assert_eq!(status, 200, "{usage}");
    let calls: u64 = usage["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(
        calls, 4,
        "two slack messages, one more in the thread, one from discord: {usage}"
    );
    assert_eq!(usage["total_tokens"], 60);
    // A user key sees only its own usage.
    let (status, _) = slack.get("/v1/usage?user=telegram:99").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_trigger_never_writes_and_personas_limit_modules() {
    let script = json!({"per_turn": true, "steps": [
        {"text": "Writing.", "tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]},
        {"text": "Done."}
    ]})
    .to_string();
    let (daemon, mock, workspace, _guards) = platform_daemon(&script);
    slack_user(&daemon.home, "ann", "U2");
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));

    let mut email = message("slack", "U2", None, "C9", None);
    email["source"] = json!("email_trigger");
    let (status, report) = admin.post("/v1/messages?wait=true", email).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["session_id"], "email_trigger:slack:C9:U2",
        "an email trigger's conversation is its sender's"
    );
    // A side effect in an untrusted session waits for a person's approval; denied, it never runs.
    assert_eq!(report["state"], "waiting_on_human", "{report}");
    assert!(
        report["approval"]["reason"]
            .as_str()
            .unwrap()
            .contains("untrusted source"),
        "{report}"
    );
    let run_id = report["run_id"].as_str().unwrap();
    let (status, body) = admin
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            json!({"decision": "deny", "call_id": report["approval"]["call_id"]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    admin.until_state(run_id, &["completed"]).await;
    assert!(
        !workspace.join("out.txt").exists(),
        "an untrusted session wrote a file"
    );
    let refusal = mock.requests()[1]["messages"].to_string();
    assert!(refusal.contains("was denied and not run"), "{refusal}");
    assert!(refusal.contains("untrusted source"), "{refusal}");
    // Sent straight to the untrusted conversation, a message is no more trusted.
    let (status, report) = admin
        .post(
            "/v1/conversations/email_trigger:slack:C9:U2/messages?wait=true",
            json!({"text": "write it now"}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "waiting_on_human", "{report}");
    assert_eq!(report["approval"]["tool"], "write_file", "{report}");
    assert!(
        !workspace.join("out.txt").exists(),
        "an untrusted conversation wrote a file"
    );
    let run_id = report["run_id"].as_str().unwrap();
    let (status, body) = admin
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            json!({"decision": "deny", "call_id": report["approval"]["call_id"]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    admin.until_state(run_id, &["completed"]).await;
    assert!(!workspace.join("out.txt").exists());

    // The same user in a chat may write.
    let (status, report) = admin
        .post(
            "/v1/messages?wait=true",
            message("slack", "U2", None, "C9", None),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["tool_calls"][0]["ok"], true, "{report}");
    assert!(workspace.join("out.txt").exists());

    // A persona without the files module offers no file tools, and a crafted call is refused.
    let (status, body) = admin
        .post(
            "/v1/personas",
            json!({"name": "web", "system_prompt": "Web only.",
                                      "platform": "slack", "allowed_modules": ["http"]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    std::fs::remove_file(workspace.join("out.txt")).unwrap();
    let (status, report) = admin
        .post(
            "/v1/messages?wait=true",
            message("slack", "U2", None, "C10", None),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["tool_calls"][0]["ok"], false, "{report}");
    assert!(!workspace.join("out.txt").exists());
    let requests = mock.requests();
    let (prompt, tools) = prompt_and_tools(&requests[requests.len() - 2]);
    assert!(prompt.contains("Web only."), "{prompt}");
    assert!(!tools.iter().any(|t| t.contains("file")), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_over_its_monthly_budget_is_refused_with_the_reset_date_and_the_log_sums() {
    let (daemon, mock, _workspace, _guards) = platform_daemon_with(
        r#"{"steps": [{"text": "hi", "usage": {"input_tokens": 10, "output_tokens": 5}, "forever": true}]}"#,
        "[serve]\nguest_monthly_tokens = 20",
    );
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));
    let mut spent = 0;
    for _ in 0..2 {
        let (status, report) = admin
            .post(
                "/v1/messages?wait=true",
                message("telegram", "7", None, "-5", None),
            )
            .await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["state"], "completed", "{report}");
        spent += report["usage"]["input_tokens"].as_u64().unwrap()
            + report["usage"]["output_tokens"].as_u64().unwrap();
    }
    // 30 of 20 used: the next message is refused before the model is called.
    let mut refused = message("telegram", "7", None, "-5", None);
    refused["text"] = json!("one more please");
    let (status, report) = admin.post("/v1/messages?wait=true", refused).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "budget_exceeded", "{report}");
    let resets = common::budget_resets();
    assert!(
        report["error"].as_str().unwrap().contains(&resets),
        "{report}"
    );
    assert_eq!(mock.requests().len(), 2, "the model is not called");
    // The refused message is stored in its conversation.
    let (_, transcript) = admin.get("/v1/conversations/-5/messages").await;
    assert!(
        transcript.to_string().contains("one more please"),
        "{transcript}"
    );
    // The token log sums to the runs' usage.
    let (_, usage) = admin.get("/v1/usage?user=telegram:7").await;
    assert_eq!(usage["total_tokens"], spent, "{usage}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_platform_input_is_refused_and_stores_nothing() {
    let (daemon, mock, _workspace, _guards) =
        platform_daemon(r#"{"steps": [{"text": "hi", "forever": true}]}"#);
    let admin_key = make_key(&daemon.home, &["--admin"]);
    let admin = daemon.client(&admin_key);
    let mut no_user = message("slack", "U1", None, "C1", None);
    no_user.as_object_mut().unwrap().remove("platform_user_id");
    let mut path_name = message("slack", "U1", None, "C1", None);
    path_name["attachments"] = json!([{"name": "../../x", "content": "boom"}]);
    let mut bad_source = message("slack", "U1", None, "C1", None);
    bad_source["source"] = json!("root");
    let mut bad_base64 = message("slack", "U1", None, "C1", None);
    bad_base64["attachments"] = json!([{"name": "x.bin", "content_base64": "%%%"}]);
    let mut both = message("slack", "U1", None, "C1", None);
    both["attachments"] = json!([{"name": "x.bin", "content": "a", "content_base64": "YQ=="}]);
    let mut orphan = message("slack", "U1", None, "C1", None);
    orphan["source"] = json!("sub_agent");
    orphan["parent_conversation_id"] = json!("no-such-conversation");
    for (body, status) in [
        (no_user, 400),
        (path_name, 400),
        (bad_base64, 400),
        (both, 400),
        (bad_source, 400),
        (message("sl:ack", "U1", None, "C1", None), 400),
        (orphan, 404),
    ] {
        let (got, answer) = admin.post("/v1/messages", body.clone()).await;
        assert_eq!(got, status, "{body} -> {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    // A 100 MB attachment is refused once the body passes the limit, not read whole.
    assert_eq!(huge_post(&daemon, &admin_key).await, 413);
    let (status, answer) = admin
        .post(
            "/v1/personas",
            json!({"name": "p", "system_prompt": "x", "allowed_modules": ["teleport"]}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown module `teleport`")
    );
    // Nothing was stored: no user, no conversation, no persona, no model call.
    let users = stdout(&run(keel(&daemon.home).arg("users")));
    assert!(users.contains("no users yet"), "{users}");
    let (_, conversations) = admin.get("/v1/conversations").await;
    assert_eq!(conversations["items"], json!([]));
    let (_, personas) = admin.get("/v1/personas").await;
    assert_eq!(personas["items"], json!([]));
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn every_email_sender_has_a_conversation_and_approvals_of_their_own() {
    let script = json!({"per_turn": true, "steps": [
        {"text": "Writing.", "tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]},
        {"text": "Done."}
    ]})
    .to_string();
    let (daemon, mock, workspace, _guards) = platform_daemon(&script);
    // Both are users who may write (a guest may not), linked to their addresses.
    for (user, address) in [("ann", "ann@example.com"), ("bob", "bob@example.com")] {
        for args in [
            vec!["users", "set", user, "--permission", "user"],
            vec![
                "users",
                "link",
                user,
                "--platform",
                "email",
                "--platform-user-id",
                address,
            ],
        ] {
            let output = run(keel(&daemon.home).args(&args));
            assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
        }
    }
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));
    let email = |sender: &str, text: &str| {
        let mut email = message("email", sender, None, "inbox", None);
        email["source"] = json!("email_trigger");
        email["text"] = json!(text);
        email
    };

    // Ann's email asks to write; her session is approved for it.
    let (status, report) = admin
        .post(
            "/v1/messages?wait=true",
            email("ann@example.com", "Ann's private note: the code is 4512"),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "waiting_on_human", "{report}");
    let ann = report["session_id"].as_str().unwrap().to_string();
    assert_eq!(ann, "email_trigger:email:inbox:ann@example.com");
    let run_id = report["run_id"].as_str().unwrap();
    let (status, body) = admin
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            json!({"decision": "approve_session", "call_id": report["approval"]["call_id"]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    admin.until_state(run_id, &["completed"]).await;
    assert!(workspace.join("out.txt").exists());
    std::fs::remove_file(workspace.join("out.txt")).unwrap();

    // Bob's email on the same channel: a conversation of his own, which saw nothing of Ann's,
    // and Ann's approval does not let him write.
    let seen_before = mock.requests().len();
    let (status, report) = admin
        .post(
            "/v1/messages?wait=true",
            email("bob@example.com", "what did Ann write?"),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_ne!(report["session_id"], ann.as_str());
    assert_eq!(
        report["state"], "waiting_on_human",
        "another sender's approval was used: {report}"
    );
    assert!(!workspace.join("out.txt").exists());
    for request in &mock.requests()[seen_before..] {
        assert!(!request.to_string().contains("4512"), "{request}");
    }
    let run_id = report["run_id"].as_str().unwrap();
    let (status, body) = admin
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            json!({"decision": "deny", "call_id": report["approval"]["call_id"]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    admin.until_state(run_id, &["completed"]).await;
    assert!(!workspace.join("out.txt").exists());

    // Ann's next email is hers again: her approval holds there.
    let (status, report) = admin
        .post("/v1/messages?wait=true", email("ann@example.com", "again"))
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["session_id"], ann.as_str());
    assert_eq!(report["state"], "completed", "{report}");
    assert!(workspace.join("out.txt").exists());
}

/// Starts a 100 MB `POST /v1/messages` over a raw connection, sending its body while reading,
/// and returns the status the daemon answers once it has read past its limit.
async fn huge_post(daemon: &Daemon, key: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = daemon
        .client(key)
        .base
        .trim_start_matches("http://")
        .to_string();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        100 << 20
    );
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..(100 << 4) {
            writer.write_all(&chunk).await?;
        }
        std::io::Result::Ok(())
    });
    let mut answer = vec![0u8; 512];
    let read = reader.read(&mut answer).await.unwrap();
    sending.abort();
    let text = String::from_utf8_lossy(&answer[..read]).to_string();
    text.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}
