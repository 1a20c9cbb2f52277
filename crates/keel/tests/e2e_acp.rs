//! End to end: `keel acp` driven by the ACP SDK's client side (the protocol crate's own, as an
//! editor would use it), spawning the real binary against `keel mock-provider`: initialize, a
//! new session, a prompt whose tool call streams as updates, permission requests answered
//! "allow once" and "reject", a cancel mid-turn, and the hostile cases (an unknown session, a
//! second prompt while one runs, a huge prompt, malformed JSON-RPC lines on the raw pipe).

mod common;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionNotification, StopReason, TextContent,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, Error};
use common::{Mock, bound, temp};
use serde_json::{Value, json};

/// What the editor saw and how it answers permission requests.
#[derive(Default)]
struct Editor {
    /// Every `session/update`, as JSON, in arrival order.
    updates: Mutex<Vec<Value>>,
    /// Every permission request, as JSON.
    asked: Mutex<Vec<Value>>,
    /// The option ids to pick, in order (a request with none left is cancelled).
    answers: Mutex<VecDeque<&'static str>>,
}

impl Editor {
    fn with_answers(answers: &[&'static str]) -> Arc<Editor> {
        let editor = Editor::default();
        editor
            .answers
            .lock()
            .unwrap()
            .extend(answers.iter().copied());
        Arc::new(editor)
    }

    fn updates(&self) -> Vec<Value> {
        self.updates.lock().unwrap().clone()
    }

    /// Waits (polling, bounded) until an update satisfies `check`.
    async fn wait_for(&self, what: &str, check: impl Fn(&Value) -> bool) {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if self.updates().iter().any(&check) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no update {what} in {:#?}", self.updates());
    }
}

/// `keel acp --provider mock --base-url MOCK` with its own KEEL_HOME.
fn keel_acp(home: &Path, mock: &Mock, env: &[(&str, &Path)]) -> AcpAgent {
    bound::arm();
    let config = home.join("keel.toml");
    if !config.exists() {
        std::fs::write(&config, common::FAST_RETRIES).unwrap();
    }
    let mut config = AcpAgentConfig::new(common::keel_bin())
        .args(["acp", "--provider", "mock", "--base-url", &mock.url])
        .env("KEEL_HOME", home.display().to_string());
    for (name, value) in env {
        config = config.env(*name, value.display().to_string());
    }
    AcpAgent::new(config)
}

/// Runs `main` as an editor connected to `agent`, recording updates in `editor`.
async fn as_editor<R>(
    agent: AcpAgent,
    editor: Arc<Editor>,
    main: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<R, Error>,
) -> R {
    let seen = editor.clone();
    let asked = editor.clone();
    let connected = Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx: ConnectionTo<Agent>| {
                let mut value = serde_json::to_value(&notification.update).unwrap();
                value["sessionId"] = json!(&*notification.session_id.0);
                seen.updates.lock().unwrap().push(value);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse>,
                        _cx: ConnectionTo<Agent>| {
                asked
                    .asked
                    .lock()
                    .unwrap()
                    .push(serde_json::to_value(&request).unwrap());
                let pick = asked.answers.lock().unwrap().pop_front();
                let outcome = pick
                    .and_then(|id| request.options.iter().find(|o| &*o.option_id.0 == id))
                    .map_or(RequestPermissionOutcome::Cancelled, |option| {
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                            option.option_id.clone(),
                        ))
                    });
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, main);
    tokio::time::timeout(Duration::from_secs(120), connected)
        .await
        .expect("the editor's session with keel acp took over 120 s")
        .expect("the ACP connection failed")
}

fn text(t: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(t))]
}

async fn initialize(cx: &ConnectionTo<Agent>) -> Result<Value, Error> {
    let response = cx
        .send_request(InitializeRequest::new(ProtocolVersion::V1))
        .block_task()
        .await?;
    Ok(serde_json::to_value(response).unwrap())
}

async fn new_session(cx: &ConnectionTo<Agent>, cwd: &Path) -> Result<String, Error> {
    let response = cx
        .send_request(NewSessionRequest::new(cwd.to_path_buf()))
        .block_task()
        .await?;
    Ok(response.session_id.0.to_string())
}

/// The updates of `kind` (`tool_call`, `agent_message_chunk`, …).
fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The agent's message text, its chunks joined.
fn said(updates: &[Value]) -> String {
    of_kind(updates, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_with_a_tool_call_streams_its_updates_in_order() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"text": "The file says hello.", "reasoning": "Read it first."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(workspace.join("notes.txt"), "hello from the workspace").unwrap();
    let editor = Editor::with_answers(&[]);
    let cwd = workspace.clone();
    let (init, session, stop) = as_editor(
        keel_acp(&home, &mock, &[]),
        editor.clone(),
        async move |cx| {
            let init = initialize(&cx).await?;
            let session = new_session(&cx, &cwd).await?;
            let response = cx
                .send_request(PromptRequest::new(
                    session.clone(),
                    text("what do my notes say?"),
                ))
                .block_task()
                .await?;
            Ok((init, session, response.stop_reason))
        },
    )
    .await;

    assert_eq!(init["protocolVersion"], 1, "{init}");
    assert_eq!(init["agentCapabilities"]["loadSession"], true, "{init}");
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"], true,
        "{init}"
    );
    assert_eq!(init["agentInfo"]["name"], "keel", "{init}");
    assert!(uuid_v7(&session), "{session}");
    assert_eq!(stop, StopReason::EndTurn);

    let updates = editor.updates();
    assert!(updates.iter().all(|u| u["sessionId"] == session.as_str()));
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    let first = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    // The call is announced, runs, completes; then the model thinks and answers.
    assert!(first("tool_call") < first("tool_call_update"), "{kinds:?}");
    assert!(
        first("tool_call_update") < first("agent_thought_chunk"),
        "{kinds:?}"
    );
    assert!(
        first("agent_thought_chunk") < first("agent_message_chunk"),
        "{kinds:?}"
    );
    let call = of_kind(&updates, "tool_call")[0];
    assert_eq!(call["kind"], "read", "{call}");
    assert_eq!(call["title"], "read_file: notes.txt", "{call}");
    assert_eq!(call["rawInput"], json!({"path": "notes.txt"}), "{call}");
    let call_id = call["toolCallId"].as_str().unwrap();
    let statuses: Vec<&str> = of_kind(&updates, "tool_call_update")
        .iter()
        .filter(|u| u["toolCallId"] == call_id)
        .filter_map(|u| u["status"].as_str())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{updates:#?}");
    let completed = of_kind(&updates, "tool_call_update")
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap();
    assert!(
        completed["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("hello from the workspace"),
        "{completed}"
    );
    assert_eq!(said(&updates), "The file says hello.");
    let thought: String = of_kind(&updates, "agent_thought_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(thought, "Read it first.");
    // The conversation is keel's: the session id is a stored session with the turn in it.
    let transcript = common::transcript(&home, &session);
    assert!(transcript.contains("what do my notes say?"), "{transcript}");
    assert!(transcript.contains("The file says hello."), "{transcript}");
}

fn uuid_v7(id: &str) -> bool {
    id.len() == 36 && id.as_bytes()[14] == b'7'
}

const RM_HOME: &str = "rm -rf ~";

/// A home for the command in the workspace, holding a canary (as e2e_approval does: keel's
/// sandbox lets a command delete nothing outside the workspace).
fn fake_home(workspace: &Path) -> PathBuf {
    let home = workspace.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("canary"), "still here").unwrap();
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_requests_answered_allow_once_and_reject() {
    let rm = json!({"tool_calls": [{"name": "shell", "arguments": {"command": RM_HOME}}]});
    let script = json!({"steps": [rm, {"text": "Cleaned."}, rm, {"text": "Left it."}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let fake = fake_home(&workspace);
    let editor = Editor::with_answers(&["allow_once", "reject_once"]);
    let agent = keel_acp(&home, &mock, &[("HOME", &fake)]);
    let (cwd, canary) = (workspace.clone(), fake.join("canary"));
    let (first, allowed_ran, second, rejected_kept) =
        as_editor(agent, editor.clone(), async move |cx| {
            initialize(&cx).await?;
            let session = new_session(&cx, &cwd).await?;
            let first = cx
                .send_request(PromptRequest::new(session.clone(), text("clean my home")))
                .block_task()
                .await?;
            let allowed_ran = !canary.exists();
            std::fs::create_dir_all(canary.parent().unwrap()).unwrap();
            std::fs::write(&canary, "still here").unwrap();
            let second = cx
                .send_request(PromptRequest::new(session, text("clean it again")))
                .block_task()
                .await?;
            Ok((
                first.stop_reason,
                allowed_ran,
                second.stop_reason,
                canary.exists(),
            ))
        })
        .await;
    assert_eq!(first, StopReason::EndTurn);
    assert_eq!(second, StopReason::EndTurn);
    assert!(allowed_ran, "allow once did not run the call");
    assert!(rejected_kept, "reject ran the call");

    let asked = editor.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    let kinds: Vec<&str> = asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    assert_eq!(
        asked[0]["toolCall"]["rawInput"],
        json!({"command": RM_HOME})
    );
    let updates = editor.updates();
    let status_of = |request: &Value| -> Vec<String> {
        let id = &request["toolCall"]["toolCallId"];
        of_kind(&updates, "tool_call_update")
            .iter()
            .filter(|u| u["toolCallId"] == *id)
            .filter_map(|u| u["status"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(
        status_of(&asked[0]).last().unwrap(),
        "completed",
        "{updates:#?}"
    );
    assert_eq!(
        status_of(&asked[1]).last().unwrap(),
        "failed",
        "{updates:#?}"
    );
    assert_eq!(said(&updates), "Cleaned.Left it.");
}

/// The tool results the model got, from every request the mock received, in order.
fn tool_results(mock: &Mock) -> Vec<String> {
    mock.requests()
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_menu_is_a_permission_request_and_a_free_question_is_answered_by_the_next_prompt() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "clarify", "arguments": {
            "question": "Which format should the export use?",
            "choices": ["CSV", "JSON", "YAML"]
        }}]},
        {"text": "Exported as JSON."},
        {"tool_calls": [{"name": "clarify", "arguments": {
            "question": "What name should the file have?"
        }}]},
        {"text": "Saved."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let editor = Editor::with_answers(&["choice-2"]);
    let cwd = workspace.clone();
    let watched = editor.clone();
    let (stops, asked_between) = as_editor(
        keel_acp(&home, &mock, &[]),
        editor.clone(),
        async move |cx| {
            initialize(&cx).await?;
            let session = new_session(&cx, &cwd).await?;
            let mut stops = Vec::new();
            for prompt in ["export my data", "now save it", "report.json"] {
                let response = cx
                    .send_request(PromptRequest::new(session.clone(), text(prompt)))
                    .block_task()
                    .await?;
                stops.push(response.stop_reason);
            }
            Ok((stops, watched.asked.lock().unwrap().len()))
        },
    )
    .await;
    assert_eq!(stops, [StopReason::EndTurn; 3]);
    // The menu was a permission request whose options are the choices; the free question
    // was not one.
    assert_eq!(asked_between, 1);
    let asked = editor.asked.lock().unwrap().clone();
    let names: Vec<&str> = asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["CSV", "JSON", "YAML"]);
    assert_eq!(
        asked[0]["toolCall"]["title"],
        "Which format should the export use?"
    );
    let said = said(&editor.updates());
    assert!(said.starts_with("Exported as JSON."), "{said}");
    // The second prompt ended on the question, and the third answered it.
    assert!(said.contains("What name should the file have?"), "{said}");
    assert!(said.ends_with("Saved."), "{said}");
    let results = tool_results(&mock);
    assert!(results.iter().any(|r| r.contains("JSON")), "{results:?}");
    assert!(
        results.iter().any(|r| r.contains("report.json")),
        "{results:?}"
    );
    assert_eq!(
        mock.requests().len(),
        4,
        "the answer started no run of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_todo_list_is_the_plan() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "todo", "arguments": {"action": "add", "items": [
            {"text": "read the code", "status": "done"},
            {"text": "fix the bug", "status": "in_progress"},
            {"text": "run the tests"}
        ]}}]},
        {"text": "Planned."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let editor = Editor::with_answers(&[]);
    let cwd = workspace.clone();
    let stop = as_editor(
        keel_acp(&home, &mock, &[]),
        editor.clone(),
        async move |cx| {
            initialize(&cx).await?;
            let session = new_session(&cx, &cwd).await?;
            Ok(cx
                .send_request(PromptRequest::new(session, text("plan it")))
                .block_task()
                .await?
                .stop_reason)
        },
    )
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    let updates = editor.updates();
    let plans = of_kind(&updates, "plan");
    assert_eq!(plans.len(), 1, "{updates:#?}");
    let entries: Vec<(&str, &str)> = plans[0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["content"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("read the code", "completed"),
            ("fix the bug", "in_progress"),
            ("run the tests", "pending")
        ]
    );
    assert_eq!(of_kind(&updates, "tool_call")[0]["kind"], "think");
    let todo_done = of_kind(&updates, "tool_call_update");
    assert_eq!(todo_done[0]["status"], "completed", "{updates:#?}");
    assert!(
        todo_done[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("Added 3 item(s)."),
        "{updates:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_answers_cancelled_and_the_session_goes_on() {
    // The command waits for the test's go, given once the cancel was sent.
    let command = "touch started; while [ ! -e go ]; do sleep 0.01; done; echo done";
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
        {"text": "Again."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let editor = Editor::with_answers(&[]);
    let (cwd, watched) = (workspace.clone(), editor.clone());
    let (busy, stop, again) = as_editor(
        keel_acp(&home, &mock, &[]),
        editor.clone(),
        async move |cx| {
            initialize(&cx).await?;
            let session = new_session(&cx, &cwd).await?;
            let running = cx.send_request(PromptRequest::new(session.clone(), text("wait for go")));
            watched
                .wait_for("with the shell call in progress", |u| {
                    u["sessionUpdate"] == "tool_call_update" && u["status"] == "in_progress"
                })
                .await;
            // A second prompt while one runs is refused; the first goes on.
            let busy = cx
                .send_request(PromptRequest::new(session.clone(), text("me too")))
                .block_task()
                .await
                .expect_err("a second prompt while one runs");
            cx.send_notification(CancelNotification::new(session.clone()))?;
            std::fs::write(cwd.join("go"), "").unwrap();
            let stop = running.block_task().await?.stop_reason;
            let again = cx
                .send_request(PromptRequest::new(session, text("and now?")))
                .block_task()
                .await?
                .stop_reason;
            Ok((busy, stop, again))
        },
    )
    .await;
    assert_eq!(
        busy.code,
        agent_client_protocol::ErrorCode::INVALID_REQUEST,
        "{busy:?}"
    );
    assert_eq!(stop, StopReason::Cancelled);
    assert_eq!(again, StopReason::EndTurn);
    assert!(workspace.join("started").exists());
    assert!(
        said(&editor.updates()).ends_with("Again."),
        "{:#?}",
        editor.updates()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_sessions_bad_cwds_and_huge_prompts_are_refused_and_the_connection_goes_on() {
    let mock = Mock::start(&json!({"steps": [{"text": "Still here."}]}).to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let editor = Editor::with_answers(&[]);
    let cwd = workspace.clone();
    let (errors, stop) = as_editor(
        keel_acp(&home, &mock, &[]),
        editor.clone(),
        async move |cx| {
            initialize(&cx).await?;
            let mut errors = Vec::new();
            for id in [
                "01a2295d-22cc-765d-a25e-0bcbdf2119b4".to_string(),
                "../../etc/passwd".to_string(),
                "x".repeat(10_000),
            ] {
                let error = cx
                    .send_request(PromptRequest::new(id, text("hi")))
                    .block_task()
                    .await
                    .expect_err("a prompt to an unknown session");
                errors.push(("unknown session", error));
            }
            for bad in [PathBuf::from("relative/dir"), cwd.join("missing")] {
                let error = cx
                    .send_request(NewSessionRequest::new(bad))
                    .block_task()
                    .await
                    .expect_err("a session in no directory");
                errors.push(("bad cwd", error));
            }
            let session = new_session(&cx, &cwd).await?;
            let huge = "x".repeat(3 * 1024 * 1024);
            let error = cx
                .send_request(PromptRequest::new(session.clone(), text(&huge)))
                .block_task()
                .await
                .expect_err("a 3 MiB prompt");
            errors.push(("huge prompt", error));
            let stop = cx
                .send_request(PromptRequest::new(session, text("still there?")))
                .block_task()
                .await?
                .stop_reason;
            Ok((errors, stop))
        },
    )
    .await;
    for (what, error) in &errors {
        let expected = match *what {
            "unknown session" => -32002,
            _ => -32602,
        };
        assert_eq!(i32::from(error.code), expected, "{what}: {error:?}");
        assert!(
            format!("{error:?}").len() < 2_000,
            "{what}: the error echoes too much"
        );
    }
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(said(&editor.updates()), "Still here.");
    // Nothing reached the model but the one good prompt.
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn malformed_json_rpc_lines_get_errors_and_stdout_stays_the_protocol() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let mock = Mock::start(&json!({"steps": [{"text": "ok"}]}).to_string());
    let (_h, home) = temp();
    let mut child = common::keel(&home)
        .args(["acp", "--provider", "mock", "--base-url", &mock.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    bound::started(child.id());
    let mut stdin = child.stdin.take().unwrap();
    let (lines, read) = std::sync::mpsc::channel::<String>();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut exchange = |line: &str| -> Value {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let answer = read
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no answer to {line}"));
        serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("stdout holds a line that is not JSON ({e}): {answer}"))
    };
    let parse = exchange("this is not json {");
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    let init = exchange(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
    );
    assert_eq!(init["result"]["agentInfo"]["name"], "keel", "{init}");
    let bad_params =
        exchange(r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":5}}"#);
    assert_eq!(bad_params["id"], 2, "{bad_params}");
    assert!(
        bad_params["error"]["code"].as_i64().is_some(),
        "{bad_params}"
    );
    let unknown = exchange(r#"{"jsonrpc":"2.0","id":3,"method":"keel/rm_rf","params":{}}"#);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let array = exchange(r#"[1, 2, 3]"#);
    assert!(array["error"]["code"].as_i64().is_some(), "{array}");
    // Still serving: a session opens after all that.
    let workspace = home.display().to_string();
    let opened = exchange(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"session/new","params":{{"cwd":{},"mcpServers":[]}}}}"#,
        json!(workspace)
    ));
    assert!(opened["result"]["sessionId"].is_string(), "{opened}");
    drop(stdin);
    let status = bound::wait_until(&mut child, Duration::from_secs(60));
    bound::ended(child.id());
    let status = status.expect("keel acp ends at the end of its input");
    assert_eq!(
        status.code(),
        Some(0),
        "keel acp ends cleanly at end of input"
    );
}

/// The state `keel runs` shows for run `id`.
fn run_state(home: &Path, id: &str) -> String {
    let listed = common::run(common::keel(home).arg("runs"));
    assert_eq!(listed.status.code(), Some(0), "{}", common::stderr(&listed));
    let shown = common::stdout(&listed);
    shown
        .lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(id)).then(|| words.next().unwrap_or_default().to_string())
        })
        .unwrap_or_else(|| panic!("no run {id} in {shown}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_run_continued_by_an_approval() {
    // The approved call deletes nothing that exists; the model call after it is slow, so the
    // cancel arrives while it is in flight.
    let script = json!({"steps": [
        {"tool_calls": [{"id": "rm1", "name": "shell",
            "arguments": {"command": "rm -rf ~/keel-h4-absent"}}]},
        {"text": "Too late.", "delay_ms": 30000, "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(home.join("keel.toml"), common::FAST_RETRIES).unwrap();
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    // `keel run` leaves the run waiting for approval of the call.
    let mut command = common::keel(&home);
    command
        .env("HOME", &fake_home)
        .args(["run", "--json", "--provider", "mock", "--base-url"])
        .arg(&mock.url)
        .arg("--workspace")
        .arg(&workspace)
        .arg("tidy my home");
    let output = common::run(&mut command);
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    let waiting = common::report(&output);
    assert_eq!(waiting["approval"]["tool"], "shell", "{waiting}");
    let run_id = waiting["run_id"].as_str().unwrap().to_string();
    let session = waiting["session_id"].as_str().unwrap().to_string();

    // The editor loads the session, approves with its next prompt, and cancels while the
    // continued run waits on the model.
    let editor = Editor::with_answers(&[]);
    let (cwd, watched) = (workspace.clone(), &mock);
    let stop = as_editor(
        keel_acp(&home, &mock, &[("HOME", &fake_home)]),
        editor.clone(),
        async move |cx| {
            initialize(&cx).await?;
            let load = agent_client_protocol::v1::schema::LoadSessionRequest::new(
                session.clone(),
                cwd.clone(),
            );
            cx.send_request(load).block_task().await?;
            let started = Instant::now();
            let running = cx.send_request(PromptRequest::new(session.clone(), text("once")));
            while watched.requests().len() < 2 {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the approved run never called the model again"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cx.send_notification(CancelNotification::new(session.clone()))?;
            let stop = running.block_task().await?.stop_reason;
            assert!(
                started.elapsed() < Duration::from_secs(25),
                "the cancel waited for the slow model call"
            );
            Ok(stop)
        },
    )
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    assert_eq!(
        run_state(&home, &run_id),
        "cancelled",
        "{:#?}",
        editor.updates()
    );
    assert_eq!(mock.requests().len(), 2, "no model call after the cancel");
    assert!(
        !said(&editor.updates()).contains("Too late."),
        "{:#?}",
        editor.updates()
    );
}
