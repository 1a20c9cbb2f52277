//! `keel chat`: an interactive session with line editing and history.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_core::RunRequest;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::cli::ChatArgs;
use crate::commands::lane::{self, Lane, LaneRequest};
use crate::commands::run::{
    SettingsSource, build, existing_or_new_session, release_unless_paused, show_result,
    watch_ctrl_c,
};
use crate::config::keel_home;
use crate::output::TerminalOutput;
use crate::setup;

/// Runs `keel chat` until `/exit` or end of input.
pub fn chat(
    runtime: &Runtime,
    config_file: Option<&Path>,
    args: ChatArgs,
) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = runtime.block_on(setup::open_store(&home))?;
    runtime.block_on(crate::commands::run::known_user(
        store.as_ref(),
        args.agent.user.as_deref(),
    ))?;
    let reconciled = runtime.block_on(setup::reconcile(store.as_ref(), config_file, &home))?;
    // A long-running process: keep reconciling what other processes' dead workers leave.
    let sweeper = {
        let store = store.clone();
        let config_file = config_file.map(Path::to_path_buf);
        let home = home.clone();
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(RECONCILE_EVERY).await;
                let _ = setup::reconcile(store.as_ref(), config_file.as_deref(), &home).await;
            }
        })
    };
    let mut session = runtime.block_on(existing_or_new_session(
        store.as_ref(),
        args.session.as_deref(),
    ))?;
    let stale_after = setup::reconcile_policy(config_file, &home).stale_after;
    let output = Arc::new(TerminalOutput::new(true).with_reasoning(args.show_reasoning));
    let (agent, user) = {
        let _guard = runtime.enter();
        let source = SettingsSource {
            config_file,
            home: &home,
            flags: &args.agent,
        };
        build(
            source,
            store.clone(),
            output.clone(),
            &session,
            Some(Arc::new(crate::prompt_human::PromptHuman)),
            reconciled,
        )?
    };
    let settings = agent.settings().clone();

    let mut editor = DefaultEditor::new()?;
    let history = home.join("chat_history.txt");
    let _ = editor.load_history(&history);
    println!(
        "keel chat — {} on {}, session {session}. /new starts a new conversation, /exit leaves.",
        settings.model, settings.provider
    );
    loop {
        let line = match editor.readline("› ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                println!("(Ctrl-D or /exit to leave)");
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        match line {
            "/exit" | "/quit" => break,
            "/new" => {
                session = uuid::Uuid::now_v7().to_string();
                println!("new session {session}");
                continue;
            }
            _ if line.starts_with('/') => {
                println!("unknown command {line}: /new starts a new conversation, /exit leaves");
                continue;
            }
            _ => {}
        }
        let cancel = CancellationToken::new();
        let run_id = uuid::Uuid::now_v7().to_string();
        let mut request = RunRequest::new(line)
            .session(session.clone())
            .cancel_token(cancel.clone());
        request.user_id = user.clone();
        request.run_id = Some(run_id.clone());
        let lane = LaneRequest {
            session_id: &session,
            run_id: &run_id,
            stale_after,
            wait: true,
        };
        let report = runtime.block_on(async {
            let watcher = watch_ctrl_c(cancel.clone());
            let report = match lane::claim(store.as_ref(), &lane, &cancel).await {
                Ok(Lane::Claimed) => {
                    let report = agent.run(request).await;
                    let released = release_unless_paused(
                        store.as_ref(),
                        &session,
                        &run_id,
                        report.as_ref().ok(),
                    )
                    .await;
                    let report = report.map_err(anyhow::Error::from)?;
                    released.map(|()| Some(report))
                }
                Ok(refused) => {
                    // The exit code is for one-shot commands; the chat goes on.
                    let _ = refused.refusal(&session);
                    Ok(None)
                }
                Err(e) => Err(e),
            };
            watcher.abort();
            report
        })?;
        let Some(report) = report else { continue };
        let streamed = output.finish();
        show_result(&report, streamed);
    }
    sweeper.abort();
    let _ = std::fs::create_dir_all(&home);
    let _ = editor.save_history(&history);
    Ok(ExitCode::SUCCESS)
}

/// How often a chat session runs the reconciler.
const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(300);
