//! A run waiting on a person answers what is pending and how to answer it; the next user
//! message in that conversation is the answer, and the reply is the rest of the run.

mod common;

use common::{Daemon, body};
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
