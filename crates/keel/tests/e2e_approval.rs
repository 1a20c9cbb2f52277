//! End to end: the model asks for `rm -rf ~`, which needs approval. `keel run` without a
//! terminal halts `waiting_on_human` (exit 3) with the pending call in its report; `keel approve`
//! decides: `once` runs it, `deny` tells the model and runs nothing, `session` lets the same
//! command run without asking in later runs of the session. HOME is a directory in the
//! workspace, so an approved `rm -rf ~` can only delete a canary (and keel's sandbox lets a
//! command delete nothing outside the workspace). On the daemon, the run waits durably: it is
//! approved through `POST /v1/runs/{id}/approval` after a restart.

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, report, run, stderr, temp};
use serde_json::{Value, json};

const RM_HOME: &str = "rm -rf ~";

fn rm_home() -> Value {
    json!({"tool_calls": [{"name": "shell", "arguments": {"command": RM_HOME}}]})
}

/// A fake home holding a canary file.
/// HOME for the command: a directory in the workspace, the one place keel's sandbox lets a
/// command delete, approved or not.
fn fake_home(workspace: &Path) -> PathBuf {
    let home = workspace.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("canary"), "still here").unwrap();
    home
}

fn keel_run(home: &Path, fake_home: &Path, mock: &Mock, workspace: &Path) -> std::process::Command {
    let mut command = keel(home);
    command
        .env("HOME", fake_home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(workspace);
    command
}

/// `keel approve RUN DECISION --call-id CALL --json`.
fn approve(
    home: &Path,
    fake_home: &Path,
    run_id: &str,
    call_id: &str,
    decision: &str,
) -> std::process::Output {
    run(keel(home).env("HOME", fake_home).args([
        "approve",
        run_id,
        decision,
        "--call-id",
        call_id,
        "--json",
    ]))
}

/// The id of the call a waiting run's report says it waits to have approved.
fn call_id(report: &Value) -> String {
    report["approval"]["call_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no pending call in {report}"))
        .to_string()
}

#[test]
fn without_a_terminal_the_run_waits_and_keel_approve_once_completes_it() {
    let script = json!({"steps": [rm_home(), {"text": "Cleaned."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);

    let output = run(keel_run(&home, &fake_home, &mock, &workspace).arg("clean my home"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let waiting = report(&output);
    assert_eq!(waiting["state"], "waiting_on_human", "{waiting}");
    assert_eq!(waiting["approval"]["tool"], "shell", "{waiting}");
    assert_eq!(waiting["approval"]["pattern"], RM_HOME, "{waiting}");
    assert!(
        waiting["approval"]["reason"]
            .as_str()
            .unwrap()
            .contains("the home directory"),
        "{waiting}"
    );
    assert!(fake_home.join("canary").exists(), "ran before approval");
    // The arguments are the object the model gave, not a string holding it.
    assert_eq!(
        waiting["approval"]["arguments"],
        json!({"command": RM_HOME}),
        "{waiting}"
    );
    let run_id = waiting["run_id"].as_str().unwrap();
    let call = call_id(&waiting);
    // Without --call-id nothing is decided, and the refusal names the call that waits.
    let unbound = run(keel(&home)
        .env("HOME", &fake_home)
        .args(["approve", run_id, "once"]));
    assert_eq!(unbound.status.code(), Some(2), "{}", stderr(&unbound));
    assert!(
        stderr(&unbound).contains("needs --call-id"),
        "{}",
        stderr(&unbound)
    );
    assert!(stderr(&unbound).contains(&call), "{}", stderr(&unbound));
    assert!(stderr(&unbound).contains("rm -rf"), "{}", stderr(&unbound));
    // Another call's id decides nothing either.
    let wrong = approve(&home, &fake_home, run_id, "call_elsewhere", "once");
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(fake_home.join("canary").exists());

    // A garbage decision is a usage error and changes nothing.
    let garbage = approve(&home, &fake_home, run_id, &call, "maybe");
    assert_eq!(garbage.status.code(), Some(2), "{}", stderr(&garbage));
    assert!(fake_home.join("canary").exists());
    // `keel answer` is for questions, not approvals.
    let answered = run(keel(&home).args(["answer", run_id, "yes"]));
    assert_ne!(answered.status.code(), Some(0));

    let output = approve(&home, &fake_home, run_id, &call, "once");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let done = report(&output);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["tool_calls"][0]["ok"], true, "{done}");
    assert!(!fake_home.exists(), "the approved command did not run");

    // Approving twice: nothing waits any more.
    let again = approve(&home, &fake_home, run_id, &call, "once");
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
}

#[test]
fn keel_approve_repeated_never_approves_the_next_call() {
    // Denied, the model asks again with another call: the first call's decision sent again (a
    // repeated command, an old terminal line) must not decide it.
    let script = json!({"steps": [rm_home(), rm_home(), {"text": "Done."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    let output = run(keel_run(&home, &fake_home, &mock, &workspace).arg("clean my home"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let first = report(&output);
    let run_id = first["run_id"].as_str().unwrap();
    let first_call = call_id(&first);

    let output = approve(&home, &fake_home, run_id, &first_call, "deny");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let second = report(&output);
    assert_eq!(second["state"], "waiting_on_human", "{second}");
    assert_eq!(second["approval"]["arguments"]["command"], RM_HOME);
    assert_ne!(call_id(&second), first_call);
    let again = approve(&home, &fake_home, run_id, &first_call, "once");
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("stale"), "{}", stderr(&again));
    assert!(
        fake_home.join("canary").exists(),
        "the stale decision ran the next call"
    );
    let output = approve(&home, &fake_home, run_id, &call_id(&second), "deny");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(fake_home.join("canary").exists());
}

#[test]
fn deny_tells_the_model_and_runs_nothing() {
    let script = json!({"steps": [rm_home(), {"text": "I will not."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    let output = run(keel_run(&home, &fake_home, &mock, &workspace).arg("clean my home"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let waiting = report(&output);
    let run_id = waiting["run_id"].as_str().unwrap().to_string();

    let output = approve(&home, &fake_home, &run_id, &call_id(&waiting), "deny");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let done = report(&output);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["tool_calls"][0]["ok"], false, "{done}");
    assert!(fake_home.join("canary").exists(), "a denied command ran");
    let told = mock.requests()[1].to_string();
    assert!(told.contains("was denied and not run"), "{told}");
}

#[test]
fn approve_session_lets_the_same_command_run_without_asking_later_in_the_session() {
    let script = json!({"steps": [rm_home(), {"text": "one"}, rm_home(), {"text": "two"}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    let output = run(keel_run(&home, &fake_home, &mock, &workspace).arg("clean my home"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let first = report(&output);
    let run_id = first["run_id"].as_str().unwrap();
    let session = first["session_id"].as_str().unwrap();
    let output = approve(&home, &fake_home, run_id, &call_id(&first), "session");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!fake_home.exists());

    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "again").unwrap();
    let output = run(keel_run(&home, &fake_home, &mock, &workspace)
        .args(["--session", session])
        .arg("and again"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let second = report(&output);
    assert_eq!(second["state"], "completed", "asked again: {second}");
    assert!(!fake_home.exists(), "the session's approval did not apply");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_approves_a_waiting_run_through_the_api_after_a_restart() {
    let script = json!({"steps": [rm_home(), {"text": "Cleaned.", "forever": true}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    daemon_config(&home, &mock, &workspace, "");
    for args in [
        vec!["users", "set", "ann", "--permission", "admin"],
        vec!["users", "set", "bob", "--permission", "admin"],
    ] {
        let output = run(keel(&home).args(&args));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    let ann_key = make_key(&home, &["--user", "ann"]);
    let bob_key = make_key(&home, &["--user", "bob"]);
    let env = [("HOME", fake_home.to_str().unwrap())];
    let mut daemon = Daemon::start_with(&home, &env);
    let ann = daemon.client(&ann_key);
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "clean my home").await;
    ann.until_state(&run_id, &["waiting_on_human"]).await;
    let (status, waiting) = ann.get(&format!("/v1/runs/{run_id}/report")).await;
    assert_eq!(status, 200, "{waiting}");
    assert_eq!(waiting["approval"]["pattern"], RM_HOME, "{waiting}");
    assert!(fake_home.join("canary").exists(), "ran before approval");

    // Stop the daemon while the run waits; the pause survives.
    daemon.terminate();
    let daemon = Daemon::start_with(&home, &env);
    let ann = daemon.client(&ann_key);
    let bob = daemon.client(&bob_key);
    let path = format!("/v1/runs/{run_id}/approval");
    let call = call_id(&waiting);
    // Another user's run is not found; a garbage decision is refused; so is one without the
    // call it decides.
    let (status, _) = bob
        .post(&path, json!({"decision": "approve_once", "call_id": call}))
        .await;
    assert_eq!(status, 404);
    let (status, body) = ann
        .post(&path, json!({"decision": "yes please", "call_id": call}))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = ann.post(&path, json!({"verdict": "deny"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = ann.post(&path, json!({"decision": "approve_once"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call_id is required"),
        "{body}"
    );
    let (status, body) = ann
        .post(
            &path,
            json!({"decision": "approve_once", "call_id": "call_9"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(fake_home.join("canary").exists());

    let (status, body) = ann
        .post(&path, json!({"decision": "approve_once", "call_id": call}))
        .await;
    assert_eq!(status, 202, "{body}");
    let done = ann.until_state(&run_id, &["completed"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert!(!fake_home.exists(), "the approved command did not run");
    // Nothing waits any more.
    let (status, body) = ann
        .post(&path, json!({"decision": "deny", "call_id": call}))
        .await;
    assert_eq!(status, 409, "{body}");
}

/// `keel run --json … PROMPT` on a pseudo-terminal (`script`), typing `typed`: its exit code and
/// everything the terminal showed.
fn run_on_a_terminal(
    home: &Path,
    fake_home: &Path,
    mock: &Mock,
    workspace: &Path,
    extra: &str,
    typed: &str,
) -> (Option<i32>, String) {
    use std::io::Write;
    let line = format!(
        "'{}' run --json --provider mock --base-url '{}' --workspace '{}' {extra} 'clean my home'",
        common::keel_bin(),
        mock.url,
        workspace.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("KEEL_HOME", home)
        .env("HOME", fake_home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("KEEL_PROVIDER")
        .env_remove("KEEL_MODEL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs");
    // Typed ahead: the terminal keeps the line until keel reads it. Stdin stays open until
    // keel is done, as a person's keyboard would.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(typed.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// The `--json` report among what the terminal showed.
fn report_on(shown: &str) -> Value {
    let at = shown
        .find("{\"run_id\"")
        .unwrap_or_else(|| panic!("no report on the terminal:\n{shown}"));
    let line = shown[at..].lines().next().unwrap_or_default();
    serde_json::from_str(line.trim()).unwrap()
}

#[test]
fn on_a_terminal_keel_run_asks_and_deny_runs_nothing() {
    let script = json!({"steps": [rm_home(), {"text": "I will not."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    keel(&home); // writes the test configuration
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    let (code, shown) = run_on_a_terminal(&home, &fake_home, &mock, &workspace, "", "d\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("needs your approval"), "{shown}");
    assert!(shown.contains("[o]nce, [s]ession"), "{shown}");
    let done = report_on(&shown);
    assert_eq!(done["state"], "completed", "{done}");
    assert!(fake_home.join("canary").exists(), "a denied command ran");
    assert!(
        mock.requests()[1]
            .to_string()
            .contains("was denied and not run")
    );
}

#[test]
fn on_a_terminal_approve_session_runs_a_second_matching_call_without_asking() {
    let script = json!({"steps": [rm_home(), rm_home(), {"text": "Cleaned twice."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    keel(&home);
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    // A garbage answer first: the menu asks again.
    let (code, shown) = run_on_a_terminal(&home, &fake_home, &mock, &workspace, "", "maybe\ns\n");
    assert_eq!(code, Some(0), "{shown}");
    assert_eq!(
        shown.matches("needs your approval").count(),
        1,
        "asked twice:\n{shown}"
    );
    assert!(shown.contains("type o, s or d"), "{shown}");
    let done = report_on(&shown);
    assert_eq!(done["state"], "completed", "{done}");
    let calls = done["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{done}");
    assert!(calls.iter().all(|c| c["ok"] == true), "{done}");
    assert!(!fake_home.exists(), "the approved command did not run");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_denies_a_call_nobody_decides_within_the_approval_timeout() {
    let script = json!({"steps": [rm_home(), {"text": "Not cleaned.", "forever": true}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake_home = fake_home(&workspace);
    // The test configuration ends in `[tools]`: this key lands there.
    daemon_config(&home, &mock, &workspace, "approval_timeout_secs = 0.3");
    let output = run(keel(&home).args(["users", "set", "ann", "--permission", "admin"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let key = make_key(&home, &["--user", "ann"]);
    let daemon = Daemon::start_with(&home, &[("HOME", fake_home.to_str().unwrap())]);
    let ann = daemon.client(&key);
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "clean my home").await;
    ann.until_state(&run_id, &["completed"]).await;
    assert!(
        fake_home.join("canary").exists(),
        "an unapproved command ran"
    );
    let told = mock.requests()[1].to_string();
    assert!(told.contains("was denied and not run"), "{told}");
}
