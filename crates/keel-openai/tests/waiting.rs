//! A run waiting on a person answers what is pending and how to answer it; the next user
//! message in that conversation is the answer, and the reply is the rest of the run.

mod common;

use common::{Daemon, body};
use keel_core::Store;
use keel_mock::{Script, Step};
use serde_json::json;

fn shell(command: &str) -> Step {
    Step::tool_call("shell", json!({ "command": command }))
}

#[tokio::test]
async fn an_approval_is_asked_as_an_answer_and_given_by_the_next_turn() {
    let daemon = Daemon::start(Script::new(vec![
        shell("ls"),
        Step::text("Listed."),
        Step::text("You are welcome."),
        shell("rm -rf /"),
        Step::text("Refused, so I stopped."),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let first = daemon
        .chat(&key, body("keel", &[("user", "list files")]), &[])
        .await;
    let asked = first.content();
    assert!(asked.contains("`shell`") && asked.contains("ls"), "{asked}");
    assert!(
        asked.contains("`approve`") && asked.contains("`deny`"),
        "{asked}"
    );
    assert!(daemon.shell.ran.lock().unwrap().is_empty());
    // Something that decides nothing is answered with the question again.
    let history = |reply: &str| {
        body(
            "keel",
            &[
                ("user", "list files"),
                ("assistant", &asked),
                ("user", reply),
            ],
        )
    };
    let unclear = daemon.chat(&key, history("hmm?"), &[]).await;
    assert!(
        unclear.content().contains("`approve`"),
        "{}",
        unclear.content()
    );
    assert_eq!(unclear.run_id(), first.run_id());
    assert!(daemon.shell.ran.lock().unwrap().is_empty());
    // Approved (streamed): the rest of the run.
    let mut approve = history("approve");
    approve["stream"] = json!(true);
    let rest = daemon
        .chat(&key, approve.clone(), &[("x-keel-progress", "true")])
        .await;
    assert_eq!(rest.run_id(), first.run_id());
    let text = rest.streamed();
    assert!(text.contains("_running `shell`…_"), "{text}");
    assert!(text.ends_with("Listed."), "{text}");
    assert_eq!(*daemon.shell.ran.lock().unwrap(), ["ls"]);
    // The same approval again (a retry) approves nothing twice.
    let retried = daemon.chat(&key, approve, &[]).await;
    assert_eq!(retried.run_id(), first.run_id());
    assert_eq!(*daemon.shell.ran.lock().unwrap(), ["ls"]);

    // The turn after the approval goes on in the same conversation.
    let conversation = |run: String| {
        let store = daemon.store.clone();
        async move { store.run(&run).await.unwrap().unwrap().session_id }
    };
    let after = daemon
        .chat(
            &key,
            body(
                "keel",
                &[
                    ("user", "list files"),
                    ("assistant", &asked),
                    ("user", "approve"),
                    ("assistant", &text),
                    ("user", "thanks"),
                ],
            ),
            &[],
        )
        .await;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(
        conversation(after.run_id()).await,
        conversation(first.run_id()).await
    );
    // Denied: the run goes on without the call.
    let second = daemon
        .chat(&key, body("keel", &[("user", "clean up")]), &[])
        .await;
    let asked = second.content();
    assert!(asked.contains("rm -rf /"), "{asked}");
    let denied = daemon
        .chat(
            &key,
            body(
                "keel",
                &[
                    ("user", "clean up"),
                    ("assistant", &asked),
                    ("user", "deny"),
                ],
            ),
            &[],
        )
        .await;
    assert_eq!(denied.content(), "Refused, so I stopped.");
    assert_eq!(*daemon.shell.ran.lock().unwrap(), ["ls"]);
}

#[tokio::test]
async fn a_question_is_asked_as_an_answer_and_answered_by_the_next_turn() {
    let daemon = Daemon::start(Script::new(vec![
        Step::tool_call(
            "ask_human",
            json!({"question": "Which colour should it be?"}),
        ),
        Step::text("Blue it is."),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let first = daemon
        .chat(&key, body("keel", &[("user", "paint it")]), &[])
        .await;
    let asked = first.content();
    assert!(asked.starts_with("Which colour should it be?"), "{asked}");
    assert!(asked.contains("Reply with your answer."), "{asked}");
    let answered = daemon
        .chat(
            &key,
            body(
                "keel",
                &[
                    ("user", "paint it"),
                    ("assistant", &asked),
                    ("user", "blue"),
                ],
            ),
            &[],
        )
        .await;
    assert_eq!(answered.run_id(), first.run_id());
    assert_eq!(answered.content(), "Blue it is.");
    let sent = serde_json::to_string(&daemon.provider.requests()[1].messages).unwrap();
    assert!(
        sent.contains("blue"),
        "the answer reached the model: {sent}"
    );
}

#[tokio::test]
async fn a_full_lane_is_429_with_retry_after() {
    let daemon = Daemon::with_queue_limit(
        Script::new(vec![Step::text("slow").with_delay_ms(60_000)]),
        1,
    )
    .await;
    let key = daemon.key("ann").await;
    let named = [("x-keel-conversation", "busy")];
    let (base, first_key) = (daemon.base.clone(), key.clone());
    let first = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(first_key)
            .header("x-keel-conversation", "busy")
            .json(&body("keel", &[("user", "one")]))
            .send()
            .await
    });
    // Until the first run has started (it left the queue), then one more fills the queue.
    let running = async {
        loop {
            let runs = keel_platform::ConversationStore::find_runs(
                daemon.store.as_ref(),
                &keel_platform::RunFilter {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            if runs
                .iter()
                .any(|r| r.state == keel_core::AgentState::Running)
            {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), running)
        .await
        .expect("the first run started");
    let mut second = body("keel", &[("user", "two")]);
    second["stream"] = json!(true);
    let (base, second_key) = (daemon.base.clone(), key.clone());
    let queued = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(second_key)
            .header("x-keel-conversation", "busy")
            .json(&second)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert_eq!(
        queued.await.unwrap().unwrap(),
        200,
        "the second waits, streamed"
    );
    let full = daemon
        .chat(&key, body("keel", &[("user", "three")]), &named)
        .await;
    assert_eq!(full.status, 429, "{}", full.body);
    assert_eq!(full.retry_after.as_deref(), Some("1"));
    assert_eq!(full.body["error"]["code"], "lane_full");
    assert_eq!(full.body["error"]["type"], "rate_limit_error");
    first.abort();
}
