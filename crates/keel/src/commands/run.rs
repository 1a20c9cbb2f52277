//! `keel run`: one turn, streamed to the terminal or reported as JSON.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_core::reconcile::ReconcileReport;
use keel_core::{AgentState, EventSink, Message, RunReport, RunRequest, Store};
use keel_platform::DaemonStore;
use tokio_util::sync::CancellationToken;

use crate::cli::{AgentArgs, RunArgs};
use crate::commands::lane::{self, LaneRequest};
use crate::config::{ConfigError, keel_home};
use crate::output::{JsonLinesSink, TerminalOutput};
use crate::setup;
use crate::terminal_text::terminal_safe;

/// Runs `keel run`.
pub async fn run(config_file: Option<&Path>, args: RunArgs) -> anyhow::Result<ExitCode> {
    let prompt = args.prompt.join(" ");
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    known_user(store.as_ref(), args.agent.user.as_deref()).await?;
    let reconciled = setup::reconcile(store.as_ref(), config_file, &home).await?;
    let session_id = existing_or_new_session(store.as_ref(), args.session.as_deref()).await?;

    let output = Arc::new(TerminalOutput::new(!args.json).with_reasoning(args.show_reasoning));
    let source = SettingsSource {
        config_file,
        home: &home,
        flags: &args.agent,
    };
    // A person at the terminal answers questions and approvals inline; without one the run
    // waits for `keel answer` or `keel approve`.
    let human = std::io::stdin()
        .is_terminal()
        .then(|| Arc::new(crate::prompt_human::PromptHuman) as Arc<dyn keel_core::HumanChannel>);
    let built = build(
        source,
        store.clone(),
        output.clone(),
        &session_id,
        human,
        reconciled,
    );
    let (agent, user) = match built {
        Ok(built) => built,
        Err(error) => {
            // Nothing is lost: the message is kept so the user can continue this session once
            // the configuration is fixed.
            store
                .append_messages(&session_id, None, &[Message::user(prompt)])
                .await?;
            let saved = format!(
                "your message is saved in session {session_id} (continue with --session {session_id})"
            );
            return Err(match error.downcast::<ConfigError>() {
                Ok(config) => ConfigError(format!("{config}; {saved}")).into(),
                Err(other) => anyhow::anyhow!("{other:#}; {saved}"),
            });
        }
    };

    let cancel = CancellationToken::new();
    let watcher = watch_ctrl_c(cancel.clone());
    let run_id = uuid::Uuid::now_v7().to_string();
    let lane = LaneRequest {
        session_id: &session_id,
        run_id: &run_id,
        stale_after: setup::reconcile_policy(config_file, &home).stale_after,
        wait: !args.no_wait,
    };
    if let Some(code) = lane::claim(store.as_ref(), &lane, &cancel)
        .await?
        .refusal(&session_id)
    {
        watcher.abort();
        return Ok(code);
    }
    let mut request = RunRequest::new(prompt)
        .session(session_id.clone())
        .cancel_token(cancel);
    request.user_id = user;
    request.run_id = Some(run_id.clone());
    // A panic in the run ends it `error (internal)` with the seed 003 answer, not a crash that
    // leaves it `running` for the reconciler.
    let report = agent.survive_panic(&run_id, agent.run(request)).await;
    watcher.abort();
    let released =
        release_unless_paused(store.as_ref(), &session_id, &run_id, report.as_ref().ok()).await;
    let report = report?;
    released?;
    let streamed = output.finish();
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        show_result(&report, streamed);
    }
    Ok(exit_code(report.state))
}

/// Releases the session's lane after a run, unless the run waits for a human (it keeps the
/// lane until answered). A run that reached its end released it already, in its terminal
/// commit; this covers a run that stopped without one (a store failure).
pub async fn release_unless_paused(
    store: &dyn Store,
    session_id: &str,
    run_id: &str,
    report: Option<&RunReport>,
) -> anyhow::Result<()> {
    if report.is_none_or(|report| report.state != AgentState::WaitingOnHuman) {
        store.release_session(session_id, run_id).await?;
    }
    Ok(())
}

/// The exit code for a run's terminal state: 0 when completed, else 3.
pub fn exit_code(state: AgentState) -> ExitCode {
    if state == AgentState::Completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// Prints the answer when it was not streamed, and one line on stderr when the run ended
/// without completing.
pub fn show_result(report: &RunReport, streamed: bool) {
    if !streamed && let Some(text) = &report.final_text {
        println!("{}", terminal_safe(text));
    }
    match report.state {
        AgentState::Completed => {}
        AgentState::Cancelled => eprintln!("keel: run cancelled (session {})", report.session_id),
        AgentState::WaitingOnHuman => match (&report.approval, &report.question) {
            (Some(call), _) => eprintln!(
                "keel: the run waits for your approval of `{}` {}: {}\n  decide with: keel approve {} once|session|deny --call-id {}",
                terminal_safe(&call.tool),
                terminal_safe(&call.arguments),
                terminal_safe(&call.reason),
                report.run_id,
                terminal_safe(&call.call_id)
            ),
            (None, Some(question)) => eprintln!(
                "keel: the run waits for your answer: {}{}\n  answer with: keel answer {} \"...\"",
                terminal_safe(question),
                terminal_safe(&keel_core::human::with_numbered_choices(
                    "",
                    &report.choices
                )),
                report.run_id
            ),
            (None, None) => eprintln!(
                "keel: the run is halted: {}\n  decide, then: keel resume {} (see `keel runs show {}`)",
                terminal_safe(report.error.as_deref().unwrap_or("it needs a decision")),
                report.run_id,
                report.run_id
            ),
        },
        state => eprintln!(
            "keel: run ended as {state}: {} (session {})",
            terminal_safe(report.error.as_deref().unwrap_or("no detail")),
            report.session_id
        ),
    }
}

/// `--user ID` must name a stored user: an unknown one would run without any budget.
pub async fn known_user(store: &dyn Store, user: Option<&str>) -> anyhow::Result<()> {
    match user {
        Some(id) if store.user(id).await?.is_none() => Err(ConfigError(format!(
            "no user `{id}`: `keel users` lists them; make one with `keel users set {id} \
             --monthly-tokens N` (or --unlimited)"
        ))
        .into()),
        _ => Ok(()),
    }
}

/// `--session ID` must name a stored session; without it a new id is made.
pub async fn existing_or_new_session(
    store: &dyn Store,
    requested: Option<&str>,
) -> anyhow::Result<String> {
    match requested {
        Some(id) => match store.session(id).await? {
            Some(_) => Ok(id.to_string()),
            None => Err(ConfigError(format!(
                "no session `{id}`: `keel sessions` lists the stored ones"
            ))
            .into()),
        },
        None => Ok(uuid::Uuid::now_v7().to_string()),
    }
}

/// Where a command's settings come from: the config file (or its default place), KEEL_HOME and
/// the command's flags.
#[derive(Clone, Copy)]
pub struct SettingsSource<'a> {
    /// `--config`, when given.
    pub config_file: Option<&'a Path>,
    /// KEEL_HOME.
    pub home: &'a Path,
    /// The agent flags of the command.
    pub flags: &'a AgentArgs,
}

/// Builds the agent for `keel run`, `keel chat`, `keel acp`, `keel resume` and `keel answer`: settings,
/// event sinks (the terminal, the events file, the last-good saver, the test hook), and the
/// config-fallback notice. Returns the agent and the user the runs are for.
pub fn build(
    source: SettingsSource<'_>,
    store: Arc<dyn DaemonStore>,
    output: Arc<dyn EventSink>,
    session_id: &str,
    human: Option<Arc<dyn keel_core::HumanChannel>>,
    reconciled: ReconcileReport,
) -> anyhow::Result<(keel_core::Agent, Option<String>)> {
    let configured = setup::load_settings(source.config_file, source.home, source.flags)?;
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![output, configured.lastgood.clone()];
    if let Some(path) = &source.flags.events {
        let sink = JsonLinesSink::open(path)
            .map_err(|e| ConfigError(format!("cannot open events file {}: {e}", path.display())))?;
        sinks.push(Arc::new(sink));
    }
    if let Some(hook) = crate::output::PauseAtCheckpoint::from_env() {
        sinks.push(Arc::new(hook));
    }
    sinks.push(Arc::new(crate::sigterm::SafePointExit));
    if let Some(traces) = crate::telemetry::sink(
        source.config_file,
        source.home,
        &configured.settings.provider.name,
    )? {
        sinks.push(traces);
    }
    let mut notices = Vec::new();
    if let Some(notice) = &configured.fallback {
        eprintln!("{}", notice.warning());
        notices.push(notice.event(session_id));
    }
    if let Some(notice) = keel_config::sandbox_settings::notice(&configured.settings) {
        eprintln!("{notice}");
    }
    if reconciled != ReconcileReport::default() {
        notices.push(reconciled.event(chrono::Utc::now()));
    }
    for event in &notices {
        for sink in &sinks {
            sink.emit(event);
        }
    }
    let agent = setup::agent(
        &configured.settings,
        &configured.own_files,
        store,
        sinks,
        human,
        // Schedules are the daemon's: a one-off run offers no `schedule` tool.
        Vec::new(),
    )?;
    Ok((agent, configured.settings.user.clone()))
}

/// First Ctrl-C cancels the run at its next safe point; a second exits at once. Abort the
/// returned task when the run is over.
pub fn watch_ctrl_c(cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nkeel: cancelling… (Ctrl-C again to quit at once)");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    })
}
