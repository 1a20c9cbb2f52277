//! `keel runs`: list runs, show one (record, launch, worker, checkpoints, tool envelope, events,
//! handoff), ask one to stop (a finished one says so, exit 3), or watch them (`runs_watch`).

use std::fmt::Write as _;
use std::process::ExitCode;

use chrono::Utc;
use keel_core::{AgentState, RunRecord};

use crate::cli::{RunsAction, RunsArgs};
use crate::config::{ConfigError, keel_home};
use crate::launch::LaunchSpec;
use crate::output::one_line;
use crate::setup;
use crate::terminal_text::terminal_safe;

/// Runs `keel runs`.
pub async fn runs(
    config_file: Option<&std::path::Path>,
    args: RunsArgs,
) -> anyhow::Result<ExitCode> {
    let action = match args.action {
        Some(RunsAction::Watch(watch)) => {
            return super::runs_watch::watch(config_file, watch).await;
        }
        action => action,
    };
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    setup::reconcile(store.as_ref(), config_file, &home).await?;
    match action {
        None => {
            let runs = store.list_runs(args.session.as_deref(), args.limit).await?;
            if runs.is_empty() {
                println!("no runs yet: start one with `keel run PROMPT`");
            }
            for run in runs {
                println!("{}", terminal_safe(&summary_line(&run)));
            }
        }
        Some(RunsAction::Show { id }) => {
            let Some(run) = store.run(&id).await? else {
                return Err(no_run(&id));
            };
            let mut out = String::new();
            let _ = writeln!(out, "{}", summary_line(&run));
            let _ = writeln!(out, "session {}  provider {}", run.session_id, run.provider);
            if let Some(spec) = run.launch.as_deref().and_then(LaunchSpec::from_json) {
                let _ = writeln!(
                    out,
                    "launched: {} ({}) at {}, model {}, workspace {}",
                    spec.provider,
                    spec.api,
                    spec.base_url,
                    spec.model,
                    spec.workspace.display()
                );
            }
            if let Some(worker) = &run.worker {
                let _ = writeln!(out, "worker: {worker}");
            }
            if let Some(error) = &run.error {
                let _ = writeln!(out, "why: {error}");
            }
            if run.resume_available {
                let _ = writeln!(out, "resume with: keel resume {}", run.id);
            }
            let children = keel_extensions::delegation::child_runs(store.as_ref(), &run).await?;
            if !children.is_empty() {
                let _ = writeln!(out, "\nsub-agents:");
                write_tree(&mut out, &children, 1);
            }
            if ended_badly(&run)
                && let Some(handoff) = store
                    .journal(&run.session_id)
                    .await?
                    .and_then(|journal| journal.handoff())
            {
                let _ = writeln!(out, "\nhandoff (from the run journal):");
                for line in handoff.lines() {
                    let _ = writeln!(out, "  {line}");
                }
            }
            let _ = writeln!(out, "\ncheckpoints:");
            for c in store.checkpoints(&id).await? {
                let _ = writeln!(
                    out,
                    "  {:>3}  {:<14} iteration {:<3} messages {}..={}  {}",
                    c.seq,
                    c.boundary.as_str(),
                    c.iteration,
                    c.message_cursor,
                    c.persisted,
                    c.created_at.format("%H:%M:%S%.3f")
                );
            }
            let _ = writeln!(out, "\ntool envelope:");
            for t in store.tool_calls(&id).await? {
                let status = match (t.completed_at, t.ok) {
                    (None, _) => "STARTED, NOT COMPLETED".to_string(),
                    (Some(_), Some(true)) => "ok".to_string(),
                    (Some(_), _) => "failed".to_string(),
                };
                let _ = writeln!(
                    out,
                    "  {}  {} {}  [{}{}]  {}",
                    t.call_id,
                    t.name,
                    one_line(&t.arguments, 60),
                    if t.idempotent { "idempotent, " } else { "" },
                    status,
                    one_line(t.output.as_deref().unwrap_or(""), 60)
                );
            }
            let _ = writeln!(out, "\nevents:");
            for e in store.events(&id).await? {
                let mut payload = serde_json::to_value(&e.kind).unwrap_or_default();
                if let Some(map) = payload.as_object_mut() {
                    map.remove("event");
                }
                let _ = writeln!(
                    out,
                    "  {}  {}  {}",
                    e.ts.format("%H:%M:%S%.3f"),
                    e.kind.name(),
                    one_line(&payload.to_string(), 120)
                );
            }
            print!("{}", terminal_safe(&out));
        }
        // Taken above, before the store is opened for a reconcile.
        Some(RunsAction::Watch(_)) => {}
        Some(RunsAction::Cancel { id }) => {
            let Some(run) = store.run(&id).await? else {
                return Err(no_run(&id));
            };
            if run.state.is_terminal() {
                eprintln!(
                    "keel: run {id} already ended as {}: there is nothing to cancel",
                    run.state
                );
                return Ok(ExitCode::from(3));
            }
            if !store.request_cancel(&id, Utc::now()).await? {
                return Err(no_run(&id));
            }
            println!(
                "asked run {id} to stop: a running loop stops at its next boundary; a paused run \
                 is cancelled by the reconciler after the cancel timeout"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per sub-agent — id, state, iterations, goal — its own below it, indented.
fn write_tree(out: &mut String, children: &[keel_extensions::delegation::ChildRun], level: usize) {
    for child in children {
        let run = &child.record;
        let state = match run.reason {
            Some(reason) => format!("{} ({reason})", run.state),
            None => run.state.to_string(),
        };
        let _ = writeln!(
            out,
            "{}{}  {:<22} {:>3} iter  {}",
            "  ".repeat(level),
            run.id,
            state,
            run.iterations,
            one_line(&child.goal, 60)
        );
        write_tree(out, &child.children, level + 1);
    }
}

fn no_run(id: &str) -> anyhow::Error {
    ConfigError(format!("no run `{id}`: `keel runs` lists them")).into()
}

fn ended_badly(run: &RunRecord) -> bool {
    !matches!(
        run.state,
        AgentState::Completed | AgentState::Running | AgentState::Queued
    )
}

/// One line: id, state, model, iterations, tokens, cost, age.
fn summary_line(run: &RunRecord) -> String {
    let age = Utc::now() - run.started_at;
    let age = if age.num_days() > 0 {
        format!("{}d", age.num_days())
    } else if age.num_hours() > 0 {
        format!("{}h", age.num_hours())
    } else if age.num_minutes() > 0 {
        format!("{}m", age.num_minutes())
    } else {
        format!("{}s", age.num_seconds().max(0))
    };
    let state = match run.reason {
        Some(reason) => format!("{} ({reason})", run.state),
        None => run.state.to_string(),
    };
    format!(
        "{}  {:<28} {:<20} {:>3} iter  {:>7} tok  ${:.4}  {age} ago",
        run.id,
        state,
        run.model_used.as_deref().unwrap_or(&run.model),
        run.iterations,
        run.usage.total(),
        run.cost,
    )
}
