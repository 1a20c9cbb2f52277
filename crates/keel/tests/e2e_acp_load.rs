//! End to end: `session/load` in `keel acp`, driven by the ACP SDK's client side spawning the
//! real binary. A `keel acp` frozen right after a checkpoint of a prompt's run is SIGKILLed (the
//! SDK kills the agent's process group when its connection is dropped); a new `keel acp` on the
//! same home loads the session: the history replays before the response, the run resumes and
//! completes, and its side effect happened once; a call cut off inside is said, not redone; a
//! load from another directory does not resume. Also: a conversation begun with `keel run`
//! continues in the editor; a run `keel run` left waiting for approval is said on load and the
//! next prompt (`deny`) decides it; unknown, malformed, huge and another user's session ids are
//! all the same "resource not found".

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::InitializeRequest;
use agent_client_protocol::v1::{ActiveSession, SessionMessage, SessionSetup};
use agent_client_protocol::{
    AcpAgent, AcpAgentConfig, Agent, Client, Dispatch, Error, LineDirection,
};
use common::{Mock, keel, keel_bin, report, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// The hook that freezes `keel` right after its Nth checkpoint, and what it prints.
const PAUSE: &str = "KEEL_TEST_PAUSE_AT_CHECKPOINT";
const PAUSED: &str = "keel: test hook: paused after checkpoint ";
/// The hook that freezes a call of the tool it names after it is recorded as started and
/// before it acts, and what it prints.
const PAUSE_IN_TOOL: &str = "KEEL_TEST_PAUSE_IN_TOOL";
const PAUSED_IN_TOOL: &str = "keel: test hook: paused in tool append_file";
/// How long a test waits for something it expects (never reached when all is well).
const PATIENCE: Duration = Duration::from_secs(60);

const PROMPT: &str = "append alpha to log.txt";
const ANSWER: &str = "Done: alpha is in the log.";
const FOLLOW_UP: &str = "What did you append?";
const SECOND_ANSWER: &str = "I appended alpha.";

/// A fresh home and workspace with a mock that appends once, answers, then answers the
/// follow-up.
struct Scenario {
    mock: Mock,
    home: PathBuf,
    workspace: PathBuf,
    _guards: (tempfile::TempDir, tempfile::TempDir),
}

impl Scenario {
    fn new() -> Scenario {
        Scenario::with(json!({"steps": [
            {"text": "Appending.", "tool_calls": [{"id": "a1", "name": "append_file",
                "arguments": {"path": "log.txt", "content": "alpha\n"}}]},
            {"text": ANSWER},
            {"text": SECOND_ANSWER, "forever": true}
        ]}))
    }

    /// A fresh home and workspace with a mock that follows `script`.
    fn with(script: Value) -> Scenario {
        let mock = Mock::start(&script.to_string());
        let (home_guard, home) = temp();
        let (workspace_guard, workspace) = temp();
        std::fs::write(
            home.join("keel.toml"),
            format!(
                "{}\n[runs]\nstale_after_secs = 0.001\n",
                common::FAST_RETRIES
            ),
        )
        .unwrap();
        Scenario {
            mock,
            home,
            workspace,
            _guards: (home_guard, workspace_guard),
        }
    }

    /// `keel acp` on this home, with an environment variable (a test hook's) when asked; the
    /// second and third values collect its stderr lines and its protocol (stdout) lines.
    fn acp(&self, hook: Option<(&str, String)>) -> (AcpAgent, Lines, Lines) {
        let mut config = AcpAgentConfig::new(keel_bin())
            .args(["acp", "--provider", "mock", "--base-url", &self.mock.url])
            .env("KEEL_HOME", self.home.display().to_string());
        if let Some((name, value)) = hook {
            config = config.env(name, value);
        }
        let (err, out) = (Lines::default(), Lines::default());
        let (err_sink, out_sink) = (err.clone(), out.clone());
        let agent = AcpAgent::new(config).with_debug(move |line, direction| match direction {
            LineDirection::Stderr => err_sink.push(line),
            LineDirection::Stdout => out_sink.push(line),
            LineDirection::Stdin => {}
        });
        (agent, err, out)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.workspace.join("log.txt")).unwrap_or_default()
    }

    /// `keel runs`, one `(id, state)` per run, newest first.
    fn runs(&self) -> Vec<(String, String)> {
        let listed = run(keel(&self.home).arg("runs"));
        assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
        stdout(&listed)
            .lines()
            .filter(|line| !line.starts_with("no runs yet"))
            .map(|line| {
                let mut words = line.split_whitespace();
                (words.next().unwrap().into(), words.next().unwrap().into())
            })
            .collect()
    }
}

/// Lines a process wrote, shared with the SDK's debug callback.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn push(&self, line: &str) {
        self.0.lock().unwrap().push(line.to_string());
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn contains(&self, text: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains(text))
    }
}

/// The next `session/update` of `session` (its `update` object); `None` for a prompt's
/// response. Anything else (a permission request) fails the test: these runs ask for none.
async fn next_update(session: &mut ActiveSession<'_, Agent>) -> Result<Option<Value>, Error> {
    let message = tokio::time::timeout(PATIENCE, session.read_update())
        .await
        .map_err(|_| Error::internal_error().data("no update in time"))??;
    match message {
        SessionMessage::Message(Dispatch::Notification(notification))
            if notification.method == "session/update" =>
        {
            Ok(Some(notification.params["update"].clone()))
        }
        SessionMessage::PromptResponse(response) => response.map(|_| None),
        other => panic!("unexpected message from keel acp: {other:?}"),
    }
}

/// Sends `prompt` and returns its updates until its response. A prompt that arrives while the
/// resumed run is still finishing (its answer shown, its lane not yet released) is refused as
/// busy: sent again a moment later, as an editor would.
async fn prompt(session: &mut ActiveSession<'_, Agent>, prompt: &str) -> Result<Vec<Value>, Error> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    'send: loop {
        session.send_prompt(prompt)?;
        let mut updates = Vec::new();
        loop {
            match next_update(session).await {
                Ok(Some(update)) => updates.push(update),
                Ok(None) => return Ok(updates),
                Err(busy)
                    if updates.is_empty()
                        && tokio::time::Instant::now() < deadline
                        && format!("{busy:?}").contains("already running") =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue 'send;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Updates, in order, until the agent's text (its message chunks joined) says `what`.
async fn updates_until_said(
    session: &mut ActiveSession<'_, Agent>,
    what: &str,
) -> Result<Vec<Value>, Error> {
    let mut seen = Vec::new();
    let mut said = String::new();
    loop {
        match next_update(session).await? {
            Some(update) => {
                if kind(&update) == "agent_message_chunk" {
                    said.push_str(text(&update));
                }
                seen.push(update);
                if said.contains(what) {
                    return Ok(seen);
                }
            }
            None => panic!("the prompt ended first: {seen:#?}"),
        }
    }
}

/// The agent's text in `updates`, its message chunks joined.
fn said(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| kind(u) == "agent_message_chunk")
        .map(|u| text(u).to_string())
        .collect()
}

fn kind(update: &Value) -> &str {
    update["sessionUpdate"].as_str().unwrap_or_default()
}

fn text(update: &Value) -> &str {
    update["content"]["text"].as_str().unwrap_or_default()
}

/// Starts a session in a `keel acp` whose prompt's run a test hook freezes (it prints
/// `paused`), then drops the connection, which SIGKILLs it. Returns the session id.
async fn prompt_and_kill(scenario: &Scenario, hook: (&str, String), paused: &str) -> String {
    let (agent, err, _) = scenario.acp(Some(hook));
    let session_id = Arc::new(Mutex::new(None::<String>));
    let seen = session_id.clone();
    let workspace = scenario.workspace.clone();
    let connection = Client
        .v1()
        .name("e2e")
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let SessionSetup { mut session, .. } = cx
                .build_session(&workspace)
                .block_task()
                .start_session()
                .await?;
            *seen.lock().unwrap() = Some(session.session_id().0.to_string());
            session.send_prompt(PROMPT)?;
            loop {
                if next_update(&mut session).await?.is_none() {
                    return Err::<(), _>(
                        Error::internal_error().data("the prompt ended before the pause"),
                    );
                }
            }
        });
    let paused = async {
        while !err.contains(paused) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        ended = connection => panic!("keel acp ended before it paused: {ended:?}\n{:#?}", err.all()),
        () = paused => {}
        () = tokio::time::sleep(PATIENCE) => panic!("keel acp never paused: {:#?}", err.all()),
    }
    // The connection is dropped: the SDK SIGKILLed keel acp's process group.
    let id = session_id.lock().unwrap().clone();
    id.expect("the session was made before the pause")
}

#[tokio::test]
async fn a_killed_keel_acp_resumes_its_run_when_the_session_is_loaded() {
    // 1 input, 2 llm_response, 3 tool_result: killed once the append's result is stored (it is
    // replayed, not run again), and once before the call ran (the resume runs it, once).
    for at in [3, 2] {
        let scenario = Scenario::new();
        let session_id = prompt_and_kill(&scenario, (PAUSE, at.to_string()), PAUSED).await;
        let context = format!("killed after checkpoint {at}");
        let runs = scenario.runs();
        assert_eq!(runs.len(), 1, "{context}: {runs:?}");
        assert!(
            runs[0].1 == "running" || runs[0].1 == "timed_out",
            "{context}: the killed run is left as it was: {runs:?}"
        );

        let (agent, err, out) = scenario.acp(None);
        let workspace = scenario.workspace.clone();
        let (_o, other) = temp();
        let id = session_id.clone();
        let (before, follow_up) = Client
            .v1()
            .name("e2e")
            .connect_with(agent, async move |cx| {
                let init = cx
                    .send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                assert!(init.agent_capabilities.load_session);
                // Loaded from another directory, the run is not resumed there.
                let SessionSetup { mut session, .. } = cx
                    .load_session(id.clone(), &other)
                    .block_task()
                    .start_session()
                    .await?;
                let elsewhere = updates_until_said(&mut session, "was not resumed from").await?;
                assert_eq!(text(&elsewhere[0]), PROMPT);
                drop(session);
                let SessionSetup { mut session, .. } = cx
                    .load_session(id, &workspace)
                    .block_task()
                    .start_session()
                    .await?;
                // Everything up to the resumed run's answer: the replay, then the run.
                let before = updates_until_said(&mut session, ANSWER).await?;
                let follow_up = prompt(&mut session, FOLLOW_UP).await?;
                Ok((before, follow_up))
            })
            .await
            .unwrap_or_else(|e| panic!("{context}: {e:?}\n{:#?}", err.all()));

        // The replay: the prompt, the model's text, the call.
        assert_eq!(
            kind(&before[0]),
            "user_message_chunk",
            "{context}: {before:#?}"
        );
        assert_eq!(text(&before[0]), PROMPT);
        assert_eq!(
            kind(&before[1]),
            "agent_message_chunk",
            "{context}: {before:#?}"
        );
        assert_eq!(text(&before[1]), "Appending.");
        assert_eq!(kind(&before[2]), "tool_call", "{context}: {before:#?}");
        assert_eq!(before[2]["toolCallId"], "a1");
        assert_eq!(before[2]["kind"], "edit");
        if at == 3 {
            assert_eq!(before[2]["status"], "completed", "{context}: {before:#?}");
        } else {
            // Not run yet when killed: the resumed run runs it and says so, as updates of
            // the call the replay showed, not a second `tool_call`.
            assert!(before[2]["status"].is_null() || before[2]["status"] == "pending");
            let announced = before
                .iter()
                .filter(|u| kind(u) == "tool_call" && u["toolCallId"] == "a1")
                .count();
            assert_eq!(announced, 1, "{context}: {before:#?}");
            assert!(
                before.iter().any(|u| kind(u) == "tool_call_update"
                    && u["toolCallId"] == "a1"
                    && u["status"] == "completed"),
                "{context}: {before:#?}"
            );
        }
        assert!(
            said(&before[3..]).contains(ANSWER),
            "{context}: {before:#?}"
        );

        // The side effect happened once, the run completed, and the next prompt continued the
        // conversation.
        assert_eq!(scenario.log(), "alpha\n", "{context}");
        assert!(
            said(&follow_up).contains(SECOND_ANSWER),
            "{context}: {follow_up:#?}"
        );
        let runs = scenario.runs();
        assert_eq!(runs.len(), 2, "{context}: {runs:?}");
        assert!(
            runs.iter().all(|(_, state)| state == "completed"),
            "{context}: {runs:?}"
        );
        let requests = scenario.mock.requests();
        assert_eq!(requests.len(), 3, "{context}: one model call per step");
        let last = requests.last().unwrap().to_string();
        assert!(
            last.contains(PROMPT) && last.contains(ANSWER),
            "{context}: {last}"
        );
        // stdout was the protocol and nothing else.
        for line in out.all() {
            assert!(
                serde_json::from_str::<Value>(&line).is_ok(),
                "{context}: not JSON-RPC on stdout: {line}"
            );
        }
    }
}

/// `keel run --json` on the scenario's home (for `user` when given); its report.
fn keel_run(scenario: &Scenario, user: Option<&str>, prompt: &str) -> Value {
    let mut command = keel(&scenario.home);
    command
        .args(["run", "--json", "--provider", "mock", "--base-url"])
        .arg(&scenario.mock.url)
        .arg("--workspace")
        .arg(&scenario.workspace);
    if let Some(user) = user {
        command.args(["--user", user]);
    }
    let output = run(command.arg(prompt));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    report(&output)
}

#[tokio::test]
async fn a_cli_conversation_loads_and_no_one_elses_does() {
    let scenario = Scenario::new();
    // Ours: a conversation begun at the terminal, with no user.
    let ours = keel_run(&scenario, None, PROMPT);
    assert_eq!(ours["state"], "completed");
    let ours = ours["session_id"].as_str().unwrap().to_string();
    // Bob's: a conversation of another keel user.
    let made = run(keel(&scenario.home).args(["users", "set", "bob", "--unlimited"]));
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let bobs = keel_run(&scenario, Some("bob"), "bob's secret plan");
    let bobs = bobs["session_id"].as_str().unwrap().to_string();

    let (agent, err, _) = scenario.acp(None);
    let workspace = scenario.workspace.clone();
    let refused = Client
        .v1()
        .name("e2e")
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let mut refused = Vec::new();
            let unknown = uuid_like();
            for id in [
                bobs.as_str(),
                unknown.as_str(),
                "../../etc/passwd",
                "",
                &"x".repeat(100_000),
            ] {
                let loaded = cx.load_session(id.to_string(), &workspace);
                match loaded.block_task().start_session().await {
                    Ok(_) => panic!("session `{}` was loaded", &id[..id.len().min(40)]),
                    Err(error) => refused.push(error),
                }
            }
            // A bad cwd is the same error for Bob's session as for one no one made.
            let mut bad_cwd = Vec::new();
            for id in [bobs.as_str(), unknown.as_str()] {
                let loaded = cx.load_session(id.to_string(), "not/absolute");
                match loaded.block_task().start_session().await {
                    Ok(_) => panic!("session `{id}` was loaded from a relative cwd"),
                    Err(error) => bad_cwd.push(serde_json::to_value(error).unwrap()),
                }
            }
            assert_eq!(bad_cwd[0], bad_cwd[1]);
            assert_eq!(bad_cwd[0]["code"], -32602, "{bad_cwd:?}");
            let SessionSetup { mut session, .. } = cx
                .load_session(ours, &workspace)
                .block_task()
                .start_session()
                .await?;
            let replayed = updates_until_said(&mut session, ANSWER).await?;
            assert_eq!(text(&replayed[0]), PROMPT, "{replayed:#?}");
            // A prompt after the load continues that conversation.
            prompt(&mut session, FOLLOW_UP).await?;
            Ok(refused)
        })
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{:#?}", err.all()));
    let first = serde_json::to_value(&refused[0]).unwrap();
    for error in &refused {
        assert_eq!(i32::from(error.code), -32002, "{error:?}");
        let shown = serde_json::to_value(error).unwrap();
        assert!(!shown.to_string().contains("secret"), "{shown}");
        assert_eq!(shown["data"]["reason"], first["data"]["reason"], "{shown}");
    }
    let last = scenario.mock.requests().last().unwrap().to_string();
    assert!(last.contains(PROMPT) && last.contains(FOLLOW_UP), "{last}");
    assert!(!last.contains("secret"), "{last}");
}

/// A well-formed session id no one made.
fn uuid_like() -> String {
    "0192f7a0-0000-7000-8000-000000000000".to_string()
}

#[tokio::test]
async fn a_call_cut_off_by_the_kill_is_said_not_redone() {
    let scenario = Scenario::new();
    let hook = (PAUSE_IN_TOOL, "append_file".to_string());
    let session_id = prompt_and_kill(&scenario, hook, PAUSED_IN_TOOL).await;

    let (agent, err, _) = scenario.acp(None);
    let workspace = scenario.workspace.clone();
    let updates = Client
        .v1()
        .name("e2e")
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let SessionSetup { mut session, .. } = cx
                .load_session(session_id, &workspace)
                .block_task()
                .start_session()
                .await?;
            updates_until_said(&mut session, "is halted").await
        })
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{:#?}", err.all()));
    let told = said(&updates);
    assert!(told.contains("resume_unsafe"), "{told}");
    assert!(told.contains("append_file"), "{told}");
    assert!(told.contains("not redone"), "{told}");
    assert!(told.contains("--unsafe-call retry"), "{told}");
    // Neither the killed call nor the resume appended anything, and the run waits for a person.
    assert_eq!(scenario.log(), "");
    let runs = scenario.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].1, "waiting_on_human", "{runs:?}");
    assert_eq!(
        scenario.mock.requests().len(),
        1,
        "no model call after the halt"
    );
}

#[tokio::test]
async fn a_run_waiting_for_approval_is_said_on_load_and_the_next_prompt_decides_it() {
    let scenario = Scenario::with(json!({"steps": [
        {"tool_calls": [{"id": "rm1", "name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Left your home alone.", "forever": true}
    ]}));
    // HOME for the command: a directory in the workspace holding a canary.
    let fake_home = scenario.workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    let mut command = keel(&scenario.home);
    command
        .env("HOME", &fake_home)
        .args(["run", "--json", "--provider", "mock", "--base-url"])
        .arg(&scenario.mock.url)
        .arg("--workspace")
        .arg(&scenario.workspace)
        .arg("clean my home");
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let waiting = report(&output);
    assert_eq!(waiting["approval"]["tool"], "shell", "{waiting}");
    let session_id = waiting["session_id"].as_str().unwrap().to_string();

    let (agent, err, _) = scenario.acp(Some(("HOME", fake_home.display().to_string())));
    let workspace = scenario.workspace.clone();
    let (loaded, decided) = Client
        .v1()
        .name("e2e")
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let SessionSetup { mut session, .. } = cx
                .load_session(session_id, &workspace)
                .block_task()
                .start_session()
                .await?;
            let loaded = updates_until_said(&mut session, "`deny`").await?;
            let decided = prompt(&mut session, "deny").await?;
            Ok((loaded, decided))
        })
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{:#?}", err.all()));
    assert_eq!(text(&loaded[0]), "clean my home", "{loaded:#?}");
    assert_eq!(kind(&loaded[1]), "tool_call", "{loaded:#?}");
    assert_eq!(loaded[1]["toolCallId"], "rm1");
    let told = said(&loaded);
    assert!(
        told.contains("keel waits for your approval of `shell`"),
        "{told}"
    );
    assert!(
        said(&decided).contains("Left your home alone."),
        "{decided:#?}"
    );
    assert!(fake_home.join("canary").exists(), "a denied call ran");
    let runs = scenario.runs();
    assert_eq!(
        runs.len(),
        1,
        "the decision went on with the waiting run: {runs:?}"
    );
    assert_eq!(runs[0].1, "completed", "{runs:?}");
}

/// The live (not zombie) `keel acp` processes on `home`, found by their environment in
/// `/proc`: the test may not ask keel (every `keel` command reconciles the store).
fn acp_pids(home: &std::path::Path) -> Vec<u32> {
    let needle = format!("KEEL_HOME={}", home.display());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let dir = entry.path();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.chars().next());
        let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let has = |bytes: &[u8], part: &str| bytes.split(|b| *b == 0).any(|p| p == part.as_bytes());
        if state != Some('Z') && has(&environ, &needle) && has(&cmdline, "acp") {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test]
async fn a_keel_acp_started_before_the_crash_resumes_the_run_on_load() {
    // The editor's second window: a `keel acp` that started (and reconciled) before the other
    // one died. Its load must not take the dead worker's run for a live one.
    let scenario = Scenario::new();
    let (agent, err, _) = scenario.acp(None);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let (id_tx, id_rx) = tokio::sync::oneshot::channel::<String>();
    let workspace = scenario.workspace.clone();
    let survivor = Client
        .v1()
        .name("e2e")
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            ready_tx.send(()).unwrap();
            let id = id_rx.await.unwrap();
            let SessionSetup { mut session, .. } = cx
                .load_session(id, &workspace)
                .block_task()
                .start_session()
                .await?;
            updates_until_said(&mut session, ANSWER).await
        });
    let crash = async {
        ready_rx.await.unwrap();
        let survivors = acp_pids(&scenario.home);
        assert_eq!(survivors.len(), 1, "{survivors:?}");
        let id = prompt_and_kill(&scenario, (PAUSE, "3".into()), PAUSED).await;
        // The SDK kills the process group as the connection drops; the load waits until the
        // killed worker is really gone.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while acp_pids(&scenario.home) != survivors {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the killed keel acp never went"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        id_tx.send(id).unwrap();
    };
    let (before, ()) = tokio::join!(survivor, crash);
    let before = before.unwrap_or_else(|e| panic!("{e:?}\n{:#?}", err.all()));
    assert!(
        !said(&before).contains("still"),
        "the dead worker's run was taken for a live one: {before:#?}"
    );
    assert!(said(&before).contains(ANSWER), "{before:#?}");
    assert_eq!(scenario.log(), "alpha\n", "the append happened once");
    let runs = scenario.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].1, "completed", "{runs:?}");
}
