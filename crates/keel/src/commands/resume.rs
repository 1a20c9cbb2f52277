//! `keel resume`, `keel answer` and `keel approve`: going on with a run that stopped — its
//! worker died, it halted for a decision, it waits for an answer or for approval of a call.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_core::{AgentError, ApprovalDecision, ContinueOptions, ResumeOptions, UnsafeCall};
use tokio_util::sync::CancellationToken;

use crate::cli::{
    AgentArgs, AnswerArgs, ApprovalChoice, ApproveArgs, ResumeArgs, UnsafeCallChoice,
};
use crate::commands::lane::{self, LaneRequest};
use crate::commands::run::{
    SettingsSource, build, exit_code, release_unless_paused, show_result, watch_ctrl_c,
};
use crate::config::{ConfigError, keel_home};
use crate::launch::LaunchSpec;
use crate::output::TerminalOutput;
use crate::setup;
use crate::terminal_text::terminal_safe;

/// How to go on.
enum GoOn {
    Resume {
        accept_prompt_change: bool,
        unsafe_call: Option<UnsafeCall>,
        force: bool,
    },
    Answer(String),
    /// The decision about the call it names.
    Approve(String, ApprovalDecision),
}

/// Runs `keel resume`.
pub async fn resume(config_file: Option<&Path>, args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let how = GoOn::Resume {
        force: args.force,
        accept_prompt_change: args.accept_prompt_change,
        unsafe_call: args.unsafe_call.map(|choice| match choice {
            UnsafeCallChoice::Retry => UnsafeCall::Retry,
            UnsafeCallChoice::Skip => UnsafeCall::Skip,
        }),
    };
    go_on(config_file, &args.run_id, &args.agent, args.json, how).await
}

/// Runs `keel answer`.
pub async fn answer(config_file: Option<&Path>, args: AnswerArgs) -> anyhow::Result<ExitCode> {
    let how = GoOn::Answer(args.answer.join(" "));
    go_on(config_file, &args.run_id, &args.agent, args.json, how).await
}

/// Runs `keel approve`.
pub async fn approve(config_file: Option<&Path>, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let decision = match args.decision {
        ApprovalChoice::Once => ApprovalDecision::ApproveOnce,
        ApprovalChoice::Session => ApprovalDecision::ApproveSession,
        ApprovalChoice::Deny => ApprovalDecision::Deny,
    };
    let call_id = match args.call_id.as_deref().map(str::trim) {
        Some(call_id) if !call_id.is_empty() => call_id.to_string(),
        _ => return Err(ConfigError(missing_call_id(&args.run_id, &args.decision).await?).into()),
    };
    let how = GoOn::Approve(call_id, decision);
    go_on(config_file, &args.run_id, &args.agent, args.json, how).await
}

/// Why `keel approve` without `--call-id` decides nothing, naming the call the run waits on
/// (when it waits on one) so that the person sees what they would approve.
async fn missing_call_id(run_id: &str, decision: &ApprovalChoice) -> anyhow::Result<String> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let pending = keel_core::approval::stored_pending(store.as_ref(), run_id).await?;
    let choice = match decision {
        ApprovalChoice::Once => "once",
        ApprovalChoice::Session => "session",
        ApprovalChoice::Deny => "deny",
    };
    Ok(match pending {
        Some(call) => format!(
            "keel approve needs --call-id, the call it decides: run `{run_id}` waits for approval \
             of call `{}`: `{}` {} ({}). To decide that call: keel approve {run_id} {choice} \
             --call-id {}",
            terminal_safe(&call.call_id),
            terminal_safe(&call.tool),
            terminal_safe(&call.arguments),
            terminal_safe(&call.reason),
            terminal_safe(&call.call_id)
        ),
        None => format!(
            "keel approve needs --call-id, the call it decides (the run's report names it: \
             `approval.call_id`); run `{run_id}` waits for no approval now"
        ),
    })
}

async fn go_on(
    config_file: Option<&Path>,
    run_id: &str,
    flags: &AgentArgs,
    json: bool,
    how: GoOn,
) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let reconciled = setup::reconcile(store.as_ref(), config_file, &home).await?;
    let Some(record) = store.run(run_id).await? else {
        return Err(ConfigError(format!("no run `{run_id}`: `keel runs` lists them")).into());
    };
    let (flags, switch_models) = as_started(run_id, record.launch.as_deref(), flags);
    let output = Arc::new(TerminalOutput::new(!json));
    let source = SettingsSource {
        config_file,
        home: &home,
        flags: &flags,
    };
    // Nothing is stored before the agent is built: a run that cannot be set up stays as it was.
    let (agent, _) = build(
        source,
        store,
        output.clone(),
        &record.session_id,
        None,
        reconciled,
    )
    .map_err(|e| {
        let unchanged = format!("run `{run_id}` is unchanged: fix this and resume it again");
        match e.downcast::<ConfigError>() {
            Ok(config) => ConfigError(format!("{config}; {unchanged}")).into(),
            Err(other) => anyhow::anyhow!("{other:#}; {unchanged}"),
        }
    })?;
    let cancel = CancellationToken::new();
    let watcher = watch_ctrl_c(cancel.clone());
    // The resumed run takes its session's lane again (a paused run still holds it): it never
    // runs beside another run of its session.
    let lane = LaneRequest {
        session_id: &record.session_id,
        run_id,
        stale_after: setup::reconcile_policy(config_file, &home).stale_after,
        wait: true,
    };
    if let Some(code) = lane::claim(agent.store().as_ref(), &lane, &cancel)
        .await?
        .refusal(&record.session_id)
    {
        watcher.abort();
        return Ok(code);
    }
    // A panic in the run ends it `error (internal)` with the seed 003 answer.
    let work = async {
        match how {
            GoOn::Resume {
                accept_prompt_change,
                unsafe_call,
                force,
            } => {
                let options = ResumeOptions {
                    accept_prompt_change,
                    unsafe_call,
                    cancel: Some(cancel),
                    force,
                    switch_models,
                    steering: None,
                };
                agent.resume(run_id, options).await
            }
            // Ctrl-C stops a run that goes on with an answer or a decision at a safe point too.
            GoOn::Answer(text) => {
                let options = ContinueOptions {
                    switch_models,
                    cancel: Some(cancel),
                };
                agent.answer_with_options(run_id, &text, options).await
            }
            GoOn::Approve(call_id, decision) => {
                let options = ContinueOptions {
                    switch_models,
                    cancel: Some(cancel),
                };
                agent
                    .approve_with_options(run_id, &call_id, decision, options)
                    .await
            }
        }
    };
    let report = agent.survive_panic(run_id, work).await;
    watcher.abort();
    let released = release_unless_paused(
        agent.store().as_ref(),
        &record.session_id,
        run_id,
        report.as_ref().ok(),
    )
    .await;
    let report = report.map_err(|e| match e {
        // What the user must do differently: a usage error, exit code 2.
        AgentError::NotResumable(message) | AgentError::InvalidAnswer(message) => {
            anyhow::Error::new(ConfigError(message))
        }
        other => anyhow::Error::new(other),
    })?;
    released?;
    let streamed = output.finish();
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        show_result(&report, streamed);
    }
    Ok(exit_code(report.state))
}

/// The flags that go on with the run as it started: its launch spec under the flags given,
/// each override said on stderr. Also whether the flags chose other models than the run's.
fn as_started(run_id: &str, launch: Option<&str>, given: &AgentArgs) -> (AgentArgs, bool) {
    let switch_models =
        given.model.is_some() || given.provider.is_some() || !given.fallback_models.is_empty();
    let Some(spec) = launch.and_then(LaunchSpec::from_json) else {
        eprintln!(
            "keel: run {run_id} does not record how it was started (an older keel): going on \
             with the current configuration and flags"
        );
        return (given.clone(), switch_models);
    };
    let (flags, notes) = spec.flags(&given.overrides());
    for note in notes {
        eprintln!("keel: {note}");
    }
    (
        AgentArgs::from_overrides(flags, given.events.clone()),
        switch_models,
    )
}
