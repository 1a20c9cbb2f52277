//! End to end: `keel runs watch --once` prints one frame of the runs table — this machine's
//! runs, or with `--server` a daemon's runs as its key sees them (another user's key sees none
//! of them; no key is refused).

mod common;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, keel_run, only_run_id, run, stderr, stdout, temp};
use serde_json::json;

#[test]
fn once_prints_this_machines_runs() {
    let mock = Mock::start(&json!({"steps": [{"text": "Hello."}]}).to_string());
    let (_h, home) = temp();
    let output = run(keel_run(&home, &mock, &home.join("events.jsonl")).arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run_id = only_run_id(&home);

    let output = run(keel(&home).args(["runs", "watch", "--once"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let frame = stdout(&output);
    let lines: Vec<&str> = frame.lines().collect();
    assert!(lines[0].starts_with("keel runs — "), "{frame}");
    assert!(
        lines[0].contains("0 running, 0 queued, 0 waiting"),
        "{frame}"
    );
    assert!(lines[1].starts_with("RUN"), "{frame}");
    let row = lines
        .iter()
        .find(|line| line.starts_with(&run_id))
        .unwrap_or_else(|| panic!("no row for {run_id}:\n{frame}"));
    assert!(row.contains("completed"), "{frame}");
    assert!(
        !frame.contains('\x1b'),
        "no screen codes in a pipe: {frame:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_server_it_shows_the_runs_the_key_sees() {
    let mock = Mock::start(&json!({"per_turn": true, "steps": [{"text": "ok"}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    daemon_config(&home, &mock, &workspace, "");
    let ann_key = make_key(&home, &["--user", "ann"]);
    let bob_key = make_key(&home, &["--user", "bob"]);
    let daemon = Daemon::start(&home);
    let ann = daemon.client(&ann_key);
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "hello").await;
    ann.until_state(&run_id, &["completed"]).await;

    let (_o, elsewhere) = temp();
    let watch = |key: Option<&str>| {
        let mut command = keel(&elsewhere);
        command.args(["runs", "watch", "--once", "--server", &daemon.url]);
        if let Some(key) = key {
            command.args(["--api-key", key]);
        }
        run(&mut command)
    };
    let output = watch(Some(&ann_key));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let frame = stdout(&output);
    assert!(
        frame.lines().next().unwrap().contains(&daemon.url),
        "{frame}"
    );
    let row = frame
        .lines()
        .find(|line| line.starts_with(&run_id))
        .unwrap_or_else(|| panic!("no row for {run_id}:\n{frame}"));
    assert!(row.contains("completed"), "{frame}");

    let output = watch(Some(&bob_key));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let frame = stdout(&output);
    assert!(!frame.contains(&run_id), "bob sees ann's run: {frame}");
    assert!(frame.contains("(no runs yet)"), "{frame}");

    let output = watch(None);
    assert_ne!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stderr(&output).contains("401"), "{}", stderr(&output));
}
