//! Embedding keel as a library: an agent with a custom tool, an event sink and a store.
//!
//! Runs on keel's in-process scripted model, so it needs no key and no network:
//!
//! ```sh
//! cargo run -p keel-core --example embed
//! ```
//!
//! With `OPENAI_API_KEY` set (and optionally `OPENAI_BASE_URL`, `KEEL_MODEL`) it talks to a
//! real model instead.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{
    Agent, Event, EventKind, EventSink, Provider, RunRequest, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use keel_mock::{ScriptedProvider, Step};
use keel_providers::{OpenAiChat, OpenAiConfig};
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// A tool of the embedding application: looks up a city's population.
struct Population {
    spec: ToolSpec,
}

impl Population {
    fn new() -> Self {
        let schema = json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
            "additionalProperties": false
        });
        Population {
            spec: ToolSpec::new("population", "Population of a city", schema).idempotent(),
        }
    }
}

#[async_trait]
impl Tool for Population {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match args["city"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase()
            .as_str()
        {
            "paris" => Ok(ToolOutput::text("2,102,650 (2023)")),
            "lyon" => Ok(ToolOutput::text("522,250 (2023)")),
            other => Err(ToolError::failed(format!("no data for `{other}`"))),
        }
    }
}

/// Prints tool activity as it happens.
struct PrintTools;

impl EventSink for PrintTools {
    fn emit(&self, event: &Event) {
        match &event.kind {
            EventKind::ToolStarted {
                name, arguments, ..
            } => println!("  → {name} {arguments}"),
            EventKind::ToolCompleted { output, .. } => println!("  ← {output}"),
            _ => {}
        }
    }
}

fn provider() -> (Arc<dyn Provider>, String) {
    if std::env::var("OPENAI_API_KEY").is_ok_and(|k| !k.is_empty()) {
        let model = std::env::var("KEEL_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
        match OpenAiChat::new(OpenAiConfig::from_env()) {
            Ok(provider) => return (Arc::new(provider), model),
            Err(e) => eprintln!("cannot use OpenAI ({e}); using the scripted model"),
        }
    }
    let scripted = ScriptedProvider::from_steps(vec![
        Step::tool_call("population", json!({"city": "Paris"}))
            .with_tool_call("population", json!({"city": "Lyon"})),
        Step::text(
            "Paris has about 2.1 million people, Lyon about 0.5 million: Paris is ~4× larger.",
        ),
        Step::text("Lyon is in the Auvergne-Rhône-Alpes region."),
    ]);
    (Arc::new(scripted), "scripted".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (provider, model) = provider();
    let agent = Agent::builder()
        .provider(provider)
        .model(model)
        .system_prompt("Answer with the tools you have. Be brief.")
        .tool(Arc::new(Population::new()))
        .store(Arc::new(MemoryStore::new()))
        .event_sink(Arc::new(PrintTools))
        .max_iterations(10)
        .build()?;

    // The full interface: a report of everything the run did.
    println!("Q: How much larger is Paris than Lyon?");
    let report = agent
        .run(RunRequest::new("How much larger is Paris than Lyon?"))
        .await?;
    println!(
        "A: {}",
        report.final_text.as_deref().unwrap_or("(no answer)")
    );
    println!(
        "   state {}, {} iterations, {} tool calls, {} tokens\n",
        report.state,
        report.iterations,
        report.tool_calls.len(),
        report.usage.total()
    );

    // The simple interface: text in, text out, one continuing conversation.
    println!("Q: Which region is Lyon in?");
    let answer = agent.chat("Which region is Lyon in?").await?;
    println!("A: {answer}");
    Ok(())
}
