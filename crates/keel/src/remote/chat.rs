//! `keel chat --server`: an interactive session whose turns run on a daemon. A question the
//! run asks (`ask_human`) is answered at the prompt, and the run goes on.

use std::process::ExitCode;
use std::sync::Arc;

use keel_core::AgentState;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use crate::cli::RemoteArgs;
use crate::output::TerminalOutput;
use crate::remote::events::follow;
use crate::remote::session::{Turn, client, conversation, explain, show, turn};
use crate::terminal_text::terminal_safe;

/// Runs `keel chat --server` until `/exit` or end of input.
pub async fn chat(
    remote: &RemoteArgs,
    session: Option<&str>,
    show_reasoning: bool,
) -> anyhow::Result<ExitCode> {
    let client = client(remote)?;
    let mut conversation_id = conversation(&client, session).await?;
    let output = Arc::new(TerminalOutput::new(true).with_reasoning(show_reasoning));
    let mut editor = DefaultEditor::new()?;
    println!(
        "keel chat — on {}, conversation {conversation_id}. /new starts a new conversation, \
         /exit leaves.",
        client.base()
    );
    loop {
        let Some(line) = read_line(&mut editor, "› ").await? else {
            break;
        };
        match line.as_str() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/new" => {
                conversation_id = conversation(&client, None).await?;
                println!("new conversation {conversation_id}");
                continue;
            }
            _ if line.starts_with('/') => {
                println!("unknown command {line}: /new starts a new conversation, /exit leaves");
                continue;
            }
            _ => {}
        }
        let _ = editor.add_history_entry(line.as_str());
        let mut report = match turn(&client, &conversation_id, &line, &output, false).await? {
            Turn::Reported(report) => report,
            Turn::Refused(_) => continue,
        };
        // A question: answer it here and follow the run on.
        while report.state == AgentState::WaitingOnHuman
            && let Some(question) = report.question.clone()
        {
            output.finish();
            let asked = keel_core::human::with_numbered_choices(&question, &report.choices);
            println!("\n? {}", terminal_safe(&asked));
            let Some(answer) = read_line(&mut editor, "answer › ").await? else {
                break;
            };
            client
                .answer(&report.run_id, &answer)
                .await
                .map_err(explain)?;
            follow(&client, &report.run_id, output.as_ref())
                .await
                .map_err(explain)?;
            *report = client.report(&report.run_id).await.map_err(explain)?;
        }
        let streamed = output.finish();
        show(&report, streamed, &client);
    }
    Ok(ExitCode::SUCCESS)
}

/// A trimmed line from the terminal; `None` at end of input.
async fn read_line(editor: &mut DefaultEditor, prompt: &str) -> anyhow::Result<Option<String>> {
    loop {
        let read = tokio::task::block_in_place(|| editor.readline(prompt));
        match read {
            Ok(line) => return Ok(Some(line.trim().to_string())),
            Err(ReadlineError::Interrupted) => println!("(Ctrl-D or /exit to leave)"),
            Err(ReadlineError::Eof) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}
