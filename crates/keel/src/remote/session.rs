//! `keel run --server` and `keel chat --server`: a turn sent to the daemon, its events shown
//! as they arrive, its report printed as the local mode prints it.

use std::process::ExitCode;
use std::sync::Arc;

use keel_core::{AgentState, RunReport};

use crate::cli::RemoteArgs;
use crate::commands::run::{exit_code, show_result};
use crate::config::ConfigError;
use crate::output::TerminalOutput;
use crate::remote::client::{Client, RemoteError};
use crate::remote::events::follow;
use crate::terminal_text::terminal_safe;

/// The client for `--server` and `--api-key`.
pub fn client(remote: &RemoteArgs) -> anyhow::Result<Client> {
    let server = remote.server.as_deref().unwrap_or_default();
    Client::new(server, remote.api_key.clone()).map_err(|e| ConfigError(e.to_string()).into())
}

/// The conversation to talk in: `--session`, or a new one on the server.
pub async fn conversation(client: &Client, session: Option<&str>) -> anyhow::Result<String> {
    match session {
        Some(id) => Ok(id.to_string()),
        None => client.create_conversation().await.map_err(explain),
    }
}

/// What a turn ended as: its report, or the exit code of a refusal already explained.
pub enum Turn {
    /// The run ended or waits for a human.
    Reported(Box<RunReport>),
    /// The server did not take the message; said so on stderr.
    Refused(ExitCode),
}

/// Sends `text` to `conversation`, shows the run's events on `output` as they arrive, and
/// returns its report. The first Ctrl-C asks the server to cancel the run.
pub async fn turn(
    client: &Client,
    conversation: &str,
    text: &str,
    output: &Arc<TerminalOutput>,
    quiet: bool,
) -> anyhow::Result<Turn> {
    let accepted = match client.send_message(conversation, text).await {
        Ok(accepted) => accepted,
        Err(RemoteError::Refused {
            status: 429,
            message,
            retry_after,
            ..
        }) => {
            let wait = retry_after.map_or(String::new(), |s| format!("; try again in {s} s"));
            eprintln!("keel: {}{wait}", terminal_safe(&message));
            return Ok(Turn::Refused(ExitCode::from(3)));
        }
        Err(error) => return Err(explain(error)),
    };
    if accepted.position > 0 && !quiet {
        eprintln!(
            "keel: queued behind {} run(s) of conversation {conversation}",
            accepted.position
        );
    }
    let run_id = accepted.run_id;
    let canceller = {
        let client = client.clone();
        let run_id = run_id.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nkeel: cancelling… (Ctrl-C again to quit at once)");
                let _ = client.cancel(&run_id).await;
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        })
    };
    let followed = follow(client, &run_id, output.as_ref()).await;
    canceller.abort();
    followed.map_err(explain)?;
    let report = client.report(&run_id).await.map_err(explain)?;
    Ok(Turn::Reported(Box::new(report)))
}

/// Prints a turn's end as `keel run` does; says how to answer a question over the server.
pub fn show(report: &RunReport, streamed: bool, client: &Client) {
    if report.state == AgentState::WaitingOnHuman && report.question.is_some() {
        if !streamed && let Some(text) = &report.final_text {
            println!("{}", terminal_safe(text));
        }
        eprintln!(
            "keel: the run waits for your answer: {}\n  answer with: curl -X POST -H \
             'Authorization: Bearer $KEEL_API_KEY' -d '{{\"text\":\"...\"}}' {}/v1/runs/{}/answer",
            terminal_safe(&keel_core::human::with_numbered_choices(
                report.question.as_deref().unwrap_or_default(),
                &report.choices
            )),
            client.base(),
            report.run_id
        );
        return;
    }
    show_result(report, streamed);
}

/// `keel run --server`.
pub async fn run(
    remote: &RemoteArgs,
    session: Option<&str>,
    prompt: &str,
    json: bool,
    show_reasoning: bool,
) -> anyhow::Result<ExitCode> {
    let client = client(remote)?;
    let conversation = conversation(&client, session).await?;
    let output = Arc::new(TerminalOutput::new(!json).with_reasoning(show_reasoning));
    let report = match turn(&client, &conversation, prompt, &output, json).await? {
        Turn::Reported(report) => report,
        Turn::Refused(code) => return Ok(code),
    };
    let streamed = output.finish();
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        show(&report, streamed, &client);
    }
    Ok(exit_code(report.state))
}

/// A refusal as the binary reports it: a bad key, an unknown conversation or a malformed
/// request is a usage error (exit 2); the rest exit 1.
pub fn explain(error: RemoteError) -> anyhow::Error {
    match error.status() {
        Some(400 | 401 | 403 | 404 | 413) => ConfigError(error.to_string()).into(),
        _ => error.into(),
    }
}
