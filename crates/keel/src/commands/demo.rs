//! `keel demo`: a built-in scripted scenario on the in-process mock model, narrated step by
//! step. Needs no key and no network; works in a temporary directory it removes afterwards.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use keel_core::{Agent, Event, EventKind, EventSink, RunRequest, StreamDelta};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use keel_tools::{Workspace, file_tools};
use serde_json::json;

use crate::commands::run::exit_code;
use crate::output::one_line;

const TASK: &str = "Read my notes and write a short summary of open items to summary.md.";

const SUMMARY: &str = "# Open items\n\n- Ship the v1 release on Friday (owner: Ana)\n- Write the \
migration guide (owner: Bob)\n- Fix the flaky login test\n";

/// Runs `keel demo`.
pub async fn demo() -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir().context("cannot create a temporary workspace")?;
    std::fs::create_dir_all(dir.path().join("notes"))?;
    std::fs::write(
        dir.path().join("notes/standup.md"),
        "Monday standup\n- Ana: v1 release goes out Friday\n- Bob: starts the migration guide\n",
    )?;
    std::fs::write(
        dir.path().join("notes/todo.txt"),
        "[x] set up CI\n[ ] fix the flaky login test\n[ ] migration guide\n",
    )?;
    let workspace = Arc::new(Workspace::new(dir.path())?);

    let provider = ScriptedProvider::from_steps(vec![
        Step::tool_call("list_dir", json!({"path": "."}))
            .with_text("I'll start by looking at what is in the workspace."),
        Step::tool_call("read_file", json!({"path": "notes/standup.md"}))
            .with_tool_call("read_file", json!({"path": "notes/todo.txt"}))
            .with_text("Two notes; reading both at once."),
        Step::tool_call("read_file", json!({"path": "../.env"}))
            .with_text("Let me check the parent directory for more context."),
        Step::tool_call(
            "write_file",
            json!({"path": "summary.md", "content": SUMMARY}),
        )
        .with_text("That is outside the workspace, so I'll work with the notes I have."),
        Step::text(
            "Done: summary.md lists three open items — the Friday release, the migration guide \
             and the flaky login test.",
        ),
    ]);

    println!("keel demo — a scripted model works through a task in a temporary workspace.");
    println!("No key and no network: the model is keel's in-process mock.\n");
    println!("workspace  {}", dir.path().display());
    println!("user    ▸ {TASK}");

    let narrator = Arc::new(Narrator::default());
    let agent = Agent::builder()
        .provider(Arc::new(provider))
        .model("demo-model")
        .store(Arc::new(MemoryStore::new()))
        .tools(file_tools(workspace))
        .event_sink(narrator.clone())
        .build()?;
    let report = agent.run(RunRequest::new(TASK)).await?;

    println!(
        "\n── the run ended as `{}` after {} iterations and {} tool calls ({} tokens).",
        report.state,
        report.iterations,
        report.tool_calls.len(),
        report.usage.total()
    );
    let failed = report.tool_calls.iter().filter(|c| !c.ok).count();
    println!(
        "   {failed} call was refused and the model carried on; the transcript holds {} messages.",
        agent.store().messages(&report.session_id).await?.len()
    );
    let written = std::fs::read_to_string(dir.path().join("summary.md"))
        .context("the demo did not write summary.md")?;
    println!("\nsummary.md now holds:\n");
    for line in written.lines() {
        println!("   {line}");
    }
    println!(
        "\nNext: point keel at a real model with `keel run --provider openai PROMPT` (see README)."
    );
    Ok(exit_code(report.state))
}

/// Prints each step of the run as it happens.
#[derive(Default)]
struct Narrator {
    speaking: Mutex<bool>,
}

impl Narrator {
    fn line(&self, text: String) {
        let mut speaking = self.speaking.lock().unwrap_or_else(|e| e.into_inner());
        if *speaking {
            println!();
            *speaking = false;
        }
        println!("{text}");
    }
}

impl EventSink for Narrator {
    fn emit(&self, event: &Event) {
        match &event.kind {
            EventKind::ModelRequest {
                iteration,
                messages,
                tools,
                ..
            } => self.line(format!(
                "\n── iteration {iteration}: asking the model ({messages} messages, {tools} tools)"
            )),
            EventKind::StreamDelta {
                delta: StreamDelta::Text { text },
            } => {
                let mut speaking = self.speaking.lock().unwrap_or_else(|e| e.into_inner());
                let mut out = std::io::stdout().lock();
                if !*speaking {
                    let _ = write!(out, "model   ▸ ");
                    *speaking = true;
                }
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
            EventKind::ToolStarted {
                name, arguments, ..
            } => self.line(format!("call    ▸ {name} {}", one_line(arguments, 90))),
            EventKind::ToolCompleted {
                name, ok, output, ..
            } => {
                let verdict = if *ok { "ok" } else { "refused/failed" };
                self.line(format!(
                    "result  ◂ {name} {verdict}: {}",
                    one_line(output, 110)
                ));
            }
            _ => {}
        }
    }
}
