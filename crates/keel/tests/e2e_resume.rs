//! End to end: a run remembers how it was started. `keel resume` and `keel answer` with no
//! flags, from another directory, go on with the run's provider, base URL, model and workspace;
//! flags override and say so. A killed worker does not block a resume; SIGTERM stops a run at a
//! safe point and leaves it resumable; cancelling a finished run says it is finished.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Mock, keel, only_run_id, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// How long a test waits for something it expects before it fails (never reached when all is
/// well).
const PATIENCE: Duration = Duration::from_secs(30);

/// A step that appends `line` to log.txt.
fn append(line: &str) -> Value {
    json!({"tool_calls": [{"name": "append_file", "arguments": {"path": "log.txt", "content": line}}]})
}

/// Appends "one", then hangs in its second model call (the test stops the worker there), then
/// appends "two" and is done.
fn hanging_script() -> String {
    json!({"steps": [
        append("one\n"),
        {"text": "never seen", "delay_ms": 600_000},
        append("two\n"),
        {"text": "done", "forever": true}
    ]})
    .to_string()
}

/// `keel run` with the provider, base URL and workspace given as flags, started from `cwd`.
fn start_run(
    home: &std::path::Path,
    mock: &Mock,
    workspace: &std::path::Path,
    cwd: &std::path::Path,
) -> Child {
    keel(home)
        .current_dir(cwd)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(workspace)
        .arg("append two lines")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the mock has received `n` requests.
fn wait_for_requests(mock: &Mock, n: usize) {
    let patience = Instant::now() + PATIENCE;
    while mock.requests().len() < n {
        assert!(Instant::now() < patience, "the run never made call {n}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn resume_from(home: &std::path::Path, cwd: &std::path::Path, run_id: &str) -> Command {
    let mut command = keel(home);
    command.current_dir(cwd).args(["resume", run_id, "--json"]);
    command
}

#[test]
fn a_killed_run_resumes_at_once_with_no_flags_from_another_directory() {
    let mock = Mock::start(&hanging_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_a, started_in) = temp();
    let (_b, resumed_in) = temp();
    let mut child = start_run(&home, &mock, &workspace, &started_in);
    wait_for_requests(&mock, 2);
    // kill -9 in the middle of the model call, and reap it.
    child.kill().unwrap();
    child.wait().unwrap();
    let run_id = only_run_id(&home);

    // A resume that cannot be set up stores nothing: the run stays resumable.
    let refused = run(resume_from(&home, &resumed_in, &run_id).args(["--provider", "openai"]));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("keel: resuming with --provider openai instead of the run's mock"),
        "{said}"
    );
    assert!(
        said.contains("OPENAI_API_KEY is not set") && said.contains("is unchanged"),
        "{said}"
    );

    // No --force, no waiting for the heartbeat to go stale (60 s by default): its worker is
    // gone. No flags: the provider, base URL and workspace are the run's own.
    let resumed = run(&mut resume_from(&home, &resumed_in, &run_id));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let report: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    assert_eq!(report["state"], "completed");
    assert!(
        !stderr(&resumed).contains("resuming with"),
        "{}",
        stderr(&resumed)
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("log.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!resumed_in.join("log.txt").exists());
    assert!(!started_in.join("log.txt").exists());
    let shown = stdout(&run(keel(&home).args(["runs", "show", &run_id])));
    assert!(shown.contains("launched: mock (openai-chat)"), "{shown}");
    assert!(
        shown.contains(&format!(
            "workspace {}",
            workspace.canonicalize().unwrap().display()
        )),
        "{shown}"
    );
}

/// What `keel answer` did for a run started in another directory.
struct Answered {
    /// Its stderr.
    said: String,
    /// The model of the last call the mock received.
    model: Value,
    /// greeting.txt in the run's workspace, and whether one appeared where keel answer ran.
    greeting: String,
    stray: bool,
}

/// Starts a run that asks a question (with the provider, base URL and workspace as flags),
/// then answers it from another directory with `flags`.
fn answer_elsewhere(flags: &[&str]) -> Answered {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Whose name?"}}]},
            {"tool_calls": [{"name": "append_file", "arguments": {"path": "greeting.txt", "content": "hello Ada\n"}}]},
            {"text": "Done.", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_a, started_in) = temp();
    let (_b, answered_in) = temp();
    let asked = run(keel(&home)
        .current_dir(&started_in)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("greet"));
    assert_eq!(asked.status.code(), Some(3), "{}", stderr(&asked));
    let run_id = only_run_id(&home);
    let answered = run(keel(&home)
        .current_dir(&answered_in)
        .args(["answer", &run_id, "--json"])
        .args(flags)
        .arg("Ada"));
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    Answered {
        said: stderr(&answered),
        model: mock.requests().last().unwrap()["model"].clone(),
        greeting: std::fs::read_to_string(workspace.join("greeting.txt")).unwrap_or_default(),
        stray: answered_in.join("greeting.txt").exists(),
    }
}

#[test]
fn keel_answer_with_no_flags_writes_in_the_runs_workspace() {
    let answered = answer_elsewhere(&[]);
    assert!(
        !answered.said.contains("resuming with"),
        "{}",
        answered.said
    );
    assert_eq!(answered.greeting, "hello Ada\n");
    assert!(!answered.stray);
    assert_eq!(answered.model, "mock-model");
}

#[test]
fn keel_answer_with_a_flag_says_it_overrides_the_run() {
    let answered = answer_elsewhere(&["--model", "mock-2"]);
    assert!(
        answered
            .said
            .contains("keel: resuming with --model mock-2 instead of the run's mock-model"),
        "{}",
        answered.said
    );
    assert_eq!(answered.greeting, "hello Ada\n");
    assert!(!answered.stray);
    assert_eq!(answered.model, "mock-2");
}

#[test]
fn sigterm_stops_a_run_at_a_safe_point_and_it_resumes() {
    let mock = Mock::start(&hanging_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let child = start_run(&home, &mock, &workspace, &workspace);
    wait_for_requests(&mock, 2);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(143), "{}", stderr(&output));
    let run_id = only_run_id(&home);
    assert!(
        stderr(&output).contains(&format!(
            "stopped by SIGTERM at a safe point; go on with: keel resume {run_id}"
        )),
        "{}",
        stderr(&output)
    );

    let resumed = run(&mut resume_from(&home, &home, &run_id));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let report: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(
        std::fs::read_to_string(workspace.join("log.txt")).unwrap(),
        "one\ntwo\n"
    );
}

/// Accepts one connection on `listener`, waiting at most [`PATIENCE`].
fn accept(listener: &std::net::TcpListener) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let patience = Instant::now() + PATIENCE;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return stream;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < patience, "nothing connected");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn sigterm_during_a_tool_waits_for_its_result_then_stops() {
    // The page hangs until the test answers: the tool is in flight when SIGTERM comes.
    let page = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/page", page.local_addr().unwrap());
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"id": "g1", "name": "http_get", "arguments": {"url": url}}]},
            {"text": "done", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "{}\nhttp_allowed_hosts = [\"127.0.0.1\"]\nhttp_allow_private = true\n",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
    let mut child = start_run(&home, &mock, &workspace, &workspace);
    let mut connection = accept(&page);
    let lines = {
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        rx
    };
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut said = Vec::new();
    while !said
        .iter()
        .any(|l: &String| l.contains("stopping after the next checkpoint"))
    {
        said.push(
            lines
                .recv_timeout(PATIENCE)
                .expect("keel said nothing about SIGTERM"),
        );
    }
    connection
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        .unwrap();
    drop(connection);
    let status = child.wait().unwrap();
    said.extend(lines.iter());
    let said = said.join("\n");
    assert_eq!(status.code(), Some(143), "{said}");
    assert!(
        said.contains("stopped by SIGTERM at a safe point"),
        "{said}"
    );
    // It stopped before its next model call, with the page stored.
    assert_eq!(mock.requests().len(), 1);
    let run_id = only_run_id(&home);
    let shown = stdout(&run(keel(&home).args(["runs", "show", &run_id])));
    assert!(
        shown.contains("g1  http_get") && shown.contains("ok]"),
        "{shown}"
    );

    let resumed = run(&mut resume_from(&home, &home, &run_id));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let report: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    assert_eq!(report["state"], "completed");
    // The page was not fetched again.
    page.set_nonblocking(true).unwrap();
    assert!(page.accept().is_err());
    let sent = mock.requests()[1]["messages"].to_string();
    assert!(sent.contains("hello"), "{sent}");
}

#[test]
fn cancelling_a_finished_run_says_it_is_finished() {
    let mock = Mock::start(&json!({"steps": [{"text": "hi"}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let done = run(keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("hello"));
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let run_id = only_run_id(&home);
    let cancel = run(keel(&home).args(["runs", "cancel", &run_id]));
    assert_eq!(cancel.status.code(), Some(3));
    assert!(
        stderr(&cancel).contains("already ended as completed"),
        "{}",
        stderr(&cancel)
    );
}

#[test]
fn a_resumed_run_holds_its_sessions_lane() {
    // Appends "one", hangs (killed there), and hangs again once resumed.
    let script = json!({"steps": [
        append("one\n"),
        {"text": "never seen", "delay_ms": 600_000},
        {"text": "never seen either", "delay_ms": 600_000}
    ]})
    .to_string();
    let mock = Mock::start(&script);
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let mut child = start_run(&home, &mock, &workspace, &workspace);
    wait_for_requests(&mock, 2);
    child.kill().unwrap();
    child.wait().unwrap();
    let run_id = only_run_id(&home);
    let session = run(keel(&home).args(["runs", "show", &run_id]));
    let shown = stdout(&session);
    let session_id = shown
        .split_whitespace()
        .skip_while(|word| *word != "session")
        .nth(1)
        .unwrap_or_else(|| panic!("no session in {shown}"))
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
        .to_string();

    let mut resumed = resume_from(&home, &workspace, &run_id)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_requests(&mock, 3);
    let busy = run(keel(&home).args([
        "run",
        "--no-wait",
        "--provider",
        "mock",
        "--base-url",
        &mock.url,
        "--session",
        &session_id,
        "hello?",
    ]));
    resumed.kill().unwrap();
    resumed.wait().unwrap();
    assert_eq!(busy.status.code(), Some(3), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains(&format!("busy with run {run_id}")),
        "{}",
        stderr(&busy)
    );
}
