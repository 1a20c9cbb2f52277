//! `session/load`: an editor reopens a keel conversation, from keel's store alone (a restarted
//! editor, or a new `keel acp` after the last one crashed).
//!
//! The session must be stored and belong to the user this `keel acp` runs for (the same user,
//! or none for both); anything else, a malformed id included, is the same JSON-RPC "resource
//! not found" error, so that a caller learns nothing about sessions that are not theirs (a bad
//! `cwd` is refused before the store is asked, the same for every id). Its agent is built for
//! the request's `cwd`, its history is sent back as `session/update`s ([`crate::replay`], then
//! the task list as a plan) before the response, and then what its last run left is taken up:
//! - interrupted (its worker died and the reconciler made it `timed_out`, resumable): it is
//!   resumed as `keel resume` does, after the response, its events streamed as updates while it
//!   holds the session's prompt slot (a prompt meanwhile is refused; `session/cancel` stops it).
//!   Completed tool calls are replayed from the envelope, never run twice. Only in the
//!   directory it started in (its launch spec's workspace): loaded from another `cwd`, it is
//!   said and left for a load from that directory, so its file tools never go on elsewhere;
//! - halted for a decision (`resume_unsafe`: a side-effecting call may or may not have taken
//!   effect; `prompt_drift`): said as an agent message with how to decide; not redone;
//! - waiting for an approval or an answer: said as an agent message, and the session's next
//!   prompt answers it (as for a prompt that paused in this process);
//! - still running in another process: said, and left alone. The reconciler runs first, so a
//!   run whose worker died since this process started counts as interrupted, not running.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The request and response this module answers, as the server's dispatch names them.
pub use agent_client_protocol::v1::schema::{LoadSessionRequest, LoadSessionResponse};

use agent_client_protocol::v1::schema::SessionUpdate;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error};
use keel_core::{
    AgentState, ErrorReason, PendingApproval, ResumeOptions, RunRecord, SessionInfo, Store,
    StoreError,
};
use keel_extensions::todo::TodoList;
use tokio_util::sync::CancellationToken;

use crate::factory::AgentFactory;
use crate::replay;
use crate::server::AcpState;
use crate::session::{AcpSession, Waiting};
use crate::updates::chunk;

/// What a loaded session's last run leaves to do.
#[derive(Debug, Clone)]
pub enum LastRun {
    /// No run, or it ended: nothing.
    Ended,
    /// Its worker died at a point it can be resumed from: resume it.
    Interrupted {
        /// The run.
        run_id: String,
    },
    /// It waits for a person: say what, and let the next prompt answer it.
    Waits {
        /// What the next prompt answers.
        waiting: Waiting,
        /// What to tell the editor.
        notice: String,
    },
    /// Something to tell the editor, and nothing to do (a halted run, one running elsewhere).
    Notice(String),
}

/// Handles `session/load`: replays, answers, then resumes an interrupted run in a task.
pub async fn load_session(
    state: &AcpState,
    request: LoadSessionRequest,
    responder: Responder<LoadSessionResponse>,
    cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let (session, last, shown_pending) = match open_stored(state, &request, cx.clone()).await {
        Ok(opened) => opened,
        Err(error) => return responder.respond_with_error(error),
    };
    let resume = match last {
        LastRun::Ended => None,
        LastRun::Interrupted { run_id } => match session.start_turn() {
            Ok(turn) => Some((turn, run_id)),
            // A prompt of this process holds the slot (a race with a load of an open session).
            Err(_) => None,
        },
        LastRun::Waits { waiting, notice } => {
            session.set_waiting(Some(waiting));
            say(&session, &notice);
            None
        }
        LastRun::Notice(notice) => {
            say(&session, &notice);
            None
        }
    };
    responder.respond(LoadSessionResponse::new())?;
    let Some((turn, run_id)) = resume else {
        return Ok(());
    };
    let factory = state.factory.clone();
    cx.spawn(async move {
        // The slot's token: `session/cancel` cancels it, as it would a prompt's.
        let cancel = session
            .turn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        resume_run(&session, factory.as_ref(), &run_id, cancel, shown_pending).await;
        drop(turn);
        Ok(())
    })
}

/// Finds, checks, builds and replays the stored session the request names; registers it.
/// Also the ids of the tool calls the replay showed as pending.
async fn open_stored(
    state: &AcpState,
    request: &LoadSessionRequest,
    cx: ConnectionTo<Client>,
) -> Result<(Arc<AcpSession>, LastRun, Vec<String>), Error> {
    let id = request.session_id.0.to_string();
    // keel's conversations opened by editors have uuid ids; sub-agents', events' and mail
    // triggers' sessions (and anything else) are not theirs to load.
    if uuid::Uuid::parse_str(&id).is_err() {
        return Err(not_found(&id));
    }
    if state.sessions.get(&id).is_some_and(|open| open.busy()) {
        return Err(Error::invalid_request()
            .data("a prompt is running in this session: wait for it or cancel it, then load it"));
    }
    // The request's own faults (a bad cwd, a configuration that does not build) are found
    // before the store is asked, so that they say nothing about whether the session exists.
    let session = AcpSession::open(state.factory.as_ref(), cx, &id, &request.cwd)?;
    let store = state.factory.store();
    let info = store
        .session(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(&id))?;
    if !belongs_to(&info, session.user.as_deref()) {
        return Err(not_found(&id));
    }
    let messages = store.messages(&id).await.map_err(store_error)?;
    let replayed = replay::replay(&messages);
    // The calls shown as pending: a resumed run that starts one updates it, not announces it.
    let shown_pending = replay::pending_calls(&replayed);
    for update in replayed {
        session.updates.send(update);
    }
    if let Some(plan) = store
        .journal(&id)
        .await
        .map_err(store_error)?
        .as_ref()
        .and_then(replay::plan)
    {
        session.updates.send(SessionUpdate::Plan(plan));
    }
    // A worker that died since this process started (another `keel acp`, a `keel chat`) left
    // its run `running`: the reconciler times it out now, so that it is resumed here.
    if let Err(error) = state.factory.reconcile().await {
        tracing::warn!(%error, "keel acp: the reconciler failed before a session load");
    }
    let last = last_run(store.as_ref(), &id, &session.cwd)
        .await
        .map_err(store_error)?;
    state.sessions.insert(session.clone())?;
    Ok((session, last, shown_pending))
}

/// Whether the session is the caller's: its owner is the user this `keel acp` runs for, or it
/// has none and neither has the caller.
pub fn belongs_to(info: &SessionInfo, user: Option<&str>) -> bool {
    info.owner.as_deref() == user
}

/// The error for a session that cannot be loaded, whatever the reason: JSON-RPC "resource not
/// found" (-32002).
pub fn not_found(id: &str) -> Error {
    let shown: String = id.chars().take(80).collect();
    Error::new(-32002, "Resource not found").data(serde_json::json!({
        "sessionId": shown,
        "reason": "keel has no session with this id that this keel acp may open"
    }))
}

fn store_error(error: StoreError) -> Error {
    Error::internal_error().data(error.to_string())
}

/// What the session's newest run leaves to do for an editor working in `cwd`, with what the
/// store keeps about what it waits for.
pub async fn last_run(
    store: &dyn Store,
    session_id: &str,
    cwd: &Path,
) -> Result<LastRun, StoreError> {
    let Some(run) = store
        .list_runs(Some(session_id), 1)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(LastRun::Ended);
    };
    let (approval, question) = if run.state == AgentState::WaitingOnHuman && run.reason.is_none() {
        let approval = keel_core::approval::stored_pending(store, &run.id).await?;
        let question = keel_core::human::last_question(store, &run.id).await?;
        (approval, question)
    } else {
        (None, None)
    };
    Ok(classify(&run, cwd, approval, question))
}

/// What a run in `run`'s state leaves to do for an editor working in `cwd`; `approval` and
/// `question` are what it waits for, when it waits for a person.
pub fn classify(
    run: &RunRecord,
    cwd: &Path,
    approval: Option<PendingApproval>,
    question: Option<(String, Vec<String>)>,
) -> LastRun {
    let id = &run.id;
    match run.state {
        AgentState::TimedOut if run.resume_available => match launched_in(run) {
            Some(workspace) if !same_dir(&workspace, cwd) => LastRun::Notice(format!(
                "keel: run {id} of this session was interrupted while working in {}; it was not \
                 resumed from {}. Load the session from {} (or `keel resume {id}`) to go on \
                 with it.",
                workspace.display(),
                cwd.display(),
                workspace.display()
            )),
            _ => LastRun::Interrupted { run_id: id.clone() },
        },
        AgentState::Queued | AgentState::Running | AgentState::WaitingForTool => {
            LastRun::Notice(format!(
                "keel: run {id} of this session is still {} in another process; its updates \
                 are not shown here. If that process is gone, `keel resume {id}` goes on with it.",
                run.state
            ))
        }
        AgentState::WaitingOnHuman => match (run.reason, approval, question) {
            (Some(reason), _, _) => LastRun::Notice(halted(id, reason, run.error.as_deref())),
            (None, Some(call), _) => LastRun::Waits {
                notice: approval_notice(&call),
                waiting: Waiting::Approval {
                    run_id: id.clone(),
                    call,
                },
            },
            (None, None, Some((question, choices))) => LastRun::Waits {
                notice: question_notice(&question, &choices),
                waiting: Waiting::Question { run_id: id.clone() },
            },
            (None, None, None) => LastRun::Notice(format!(
                "keel: run {id} waits for a person (see `keel runs show {id}`)."
            )),
        },
        _ => LastRun::Ended,
    }
}

/// The workspace a run's launch spec says it started in.
fn launched_in(run: &RunRecord) -> Option<PathBuf> {
    let launch: serde_json::Value = serde_json::from_str(run.launch.as_deref()?).ok()?;
    launch.get("workspace")?.as_str().map(PathBuf::from)
}

/// Whether two directories are the same one (as their canonical paths say, when both exist).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The notice for a run halted for a decision keel does not take for the person.
fn halted(run_id: &str, reason: ErrorReason, error: Option<&str>) -> String {
    let what = error.unwrap_or("it needs a decision");
    let how = match reason {
        ErrorReason::ResumeUnsafe => format!(
            "it was not redone. Check, then: `keel resume {run_id} --unsafe-call retry` (run the \
             call again) or `--unsafe-call skip`"
        ),
        ErrorReason::PromptDrift => format!(
            "it was not resumed. To go on under the new prompt: `keel resume {run_id} \
             --accept-prompt-change`"
        ),
        _ => format!("see `keel runs show {run_id}`"),
    };
    format!("keel: run {run_id} is halted ({reason}): {what}; {how}.")
}

fn approval_notice(call: &PendingApproval) -> String {
    format!(
        "keel waits for your approval of `{}` {} ({}): reply `once`, `session` or `deny`.",
        call.tool, call.arguments, call.reason
    )
}

fn question_notice(question: &str, choices: &[String]) -> String {
    format!(
        "{}\n\n(keel waits for your answer: reply with it.)",
        keel_core::human::with_numbered_choices(question, choices)
    )
}

fn say(session: &AcpSession, text: &str) {
    session
        .updates
        .send(SessionUpdate::AgentMessageChunk(chunk(text)));
}

/// Resumes `run_id` on `session` as `keel resume` does (its lane, then the run from its latest
/// checkpoint), with a prompt's pieces: its end is said as a prompt's is
/// ([`AcpSession::finish`]), except a halt, said with how to decide it. `shown_pending`: the
/// calls the replay showed as pending, which the editor already knows.
async fn resume_run(
    session: &AcpSession,
    factory: &dyn AgentFactory,
    run_id: &str,
    cancel: CancellationToken,
    shown_pending: Vec<String>,
) {
    let todo = match session.agent.store().journal(&session.id).await {
        Ok(Some(journal)) => TodoList::of(&journal),
        _ => TodoList::default(),
    };
    // The calls the replay showed as pending are known to the editor: when the resumed run
    // starts one, it is updated, not announced a second time.
    session.updates.begin_resumed_turn(todo, shown_pending);
    session.human.begin_turn(cancel.clone());
    if let Err(error) = session.claim(factory, run_id, &cancel).await {
        say(
            session,
            &format!("keel: run {run_id} was not resumed: {}", why(&error)),
        );
        return;
    }
    let options = ResumeOptions {
        cancel: Some(cancel.clone()),
        ..ResumeOptions::default()
    };
    let report = session
        .agent
        .survive_panic(run_id, session.agent.resume(run_id, options))
        .await;
    match session.release(factory, run_id, report).await {
        Ok(report) => match (report.state, report.reason) {
            (AgentState::WaitingOnHuman, Some(reason)) => say(
                session,
                &format!(
                    "\n\n{}",
                    halted(&report.run_id, reason, report.error.as_deref())
                ),
            ),
            _ => {
                session.finish(&report, &cancel);
            }
        },
        Err(error) => say(
            session,
            &format!("keel: run {run_id} could not be resumed: {}", why(&error)),
        ),
    }
}

/// What an error says: its data when that is text, else its message.
fn why(error: &Error) -> String {
    error
        .data
        .as_ref()
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| error.message.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HERE: &str = "/work/here";

    fn run(state: &str, reason: Option<&str>, resume_available: bool) -> RunRecord {
        serde_json::from_value(json!({
            "launch": json!({"workspace": HERE}).to_string(),
            "id": "r1",
            "session_id": "s1",
            "state": state,
            "reason": reason,
            "provider": "mock",
            "model": "m",
            "model_used": null,
            "iterations": 1,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "final_text": null,
            "error": "resuming would run `append_file` (call a1) again",
            "started_at": "2026-11-29T21:00:00Z",
            "updated_at": "2026-11-29T21:00:00Z",
            "finished_at": null,
            "resume_available": resume_available,
        }))
        .unwrap()
    }

    fn classify_here(
        run: &RunRecord,
        approval: Option<PendingApproval>,
        question: Option<(String, Vec<String>)>,
    ) -> LastRun {
        classify(run, Path::new(HERE), approval, question)
    }

    fn info(owner: Option<&str>) -> SessionInfo {
        serde_json::from_value(json!({
            "id": "s1",
            "created_at": "2026-11-29T21:00:00Z",
            "updated_at": "2026-11-29T21:00:00Z",
            "title": null,
            "message_count": 0,
            "owner": owner,
        }))
        .unwrap()
    }

    fn call() -> PendingApproval {
        serde_json::from_value(json!({
            "call_id": "c1",
            "tool": "shell",
            "arguments": {"command": "rm -rf build"},
            "reason": "shell needs approval",
            "pattern": "rm",
        }))
        .unwrap()
    }

    #[test]
    fn a_reconciled_resumable_run_is_resumed_and_nothing_else_is() {
        assert!(matches!(
            classify_here(&run("timed_out", None, true), None, None),
            LastRun::Interrupted { run_id } if run_id == "r1"
        ));
        for (state, resumable) in [
            ("timed_out", false),
            ("completed", false),
            ("cancelled", false),
            ("error", false),
            ("max_steps", false),
        ] {
            assert!(
                matches!(
                    classify_here(&run(state, None, resumable), None, None),
                    LastRun::Ended
                ),
                "{state}"
            );
        }
    }

    #[test]
    fn an_interrupted_run_resumes_only_in_the_directory_it_started_in() {
        let elsewhere = classify(
            &run("timed_out", None, true),
            Path::new("/work/other"),
            None,
            None,
        );
        let LastRun::Notice(text) = elsewhere else {
            panic!("a notice: {elsewhere:?}");
        };
        assert!(text.contains("/work/here"), "{text}");
        assert!(text.contains("not resumed from /work/other"), "{text}");
        // A run of an older keel, which recorded no launch spec, resumes where it is loaded.
        let mut old = run("timed_out", None, true);
        old.launch = None;
        assert!(matches!(
            classify(&old, Path::new("/work/other"), None, None),
            LastRun::Interrupted { .. }
        ));
    }

    #[test]
    fn a_halted_run_is_said_and_not_redone() {
        let LastRun::Notice(text) = classify_here(
            &run("waiting_on_human", Some("resume_unsafe"), false),
            Some(call()),
            None,
        ) else {
            panic!("a notice");
        };
        assert!(text.contains("run r1 is halted (resume_unsafe)"), "{text}");
        assert!(text.contains("append_file"), "{text}");
        assert!(text.contains("not redone"), "{text}");
        assert!(text.contains("--unsafe-call retry"), "{text}");
        let LastRun::Notice(text) = classify_here(
            &run("waiting_on_human", Some("prompt_drift"), false),
            None,
            None,
        ) else {
            panic!("a notice");
        };
        assert!(text.contains("--accept-prompt-change"), "{text}");
    }

    #[test]
    fn a_run_live_elsewhere_is_left_alone() {
        for state in ["running", "waiting_for_tool", "queued"] {
            let LastRun::Notice(text) = classify_here(&run(state, None, false), None, None) else {
                panic!("{state}: a notice");
            };
            assert!(text.contains("another process"), "{text}");
        }
    }

    #[test]
    fn a_run_waiting_for_a_person_waits_for_the_next_prompt() {
        let waits = classify_here(&run("waiting_on_human", None, false), Some(call()), None);
        let LastRun::Waits { waiting, notice } = waits else {
            panic!("waits");
        };
        assert!(
            matches!(&waiting, Waiting::Approval { run_id, call } if run_id == "r1" && call.call_id == "c1")
        );
        assert!(notice.contains("`shell`"), "{notice}");
        assert!(notice.contains("`once`, `session` or `deny`"), "{notice}");

        let question = Some((
            "Which branch?".to_string(),
            vec!["main".into(), "dev".into()],
        ));
        let LastRun::Waits { waiting, notice } =
            classify_here(&run("waiting_on_human", None, false), None, question)
        else {
            panic!("waits");
        };
        assert!(matches!(&waiting, Waiting::Question { run_id } if run_id == "r1"));
        assert!(notice.starts_with("Which branch?"), "{notice}");
        assert!(notice.contains("dev"), "{notice}");
    }

    #[test]
    fn only_the_owner_of_a_session_may_load_it() {
        assert!(belongs_to(&info(None), None));
        assert!(belongs_to(&info(Some("ann")), Some("ann")));
        assert!(!belongs_to(&info(Some("ann")), Some("bob")));
        assert!(!belongs_to(&info(Some("ann")), None));
        assert!(!belongs_to(&info(None), Some("bob")));
    }

    #[test]
    fn a_session_that_cannot_be_loaded_is_not_found_and_says_no_more() {
        let long = "x".repeat(10_000);
        let error = not_found(&long);
        assert_eq!(i32::from(error.code), -32002);
        let data = error.data.unwrap();
        assert_eq!(data["sessionId"].as_str().unwrap().len(), 80);
        assert_eq!(
            data["reason"],
            "keel has no session with this id that this keel acp may open"
        );
    }
}
