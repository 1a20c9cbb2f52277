//! Answering the model's clarifying questions from your own code: `on_clarify` gets each
//! question the model asks (`clarify` with its choices, or `ask_human`) and returns the answer —
//! here, always the first choice. Return `None` to let the run wait for `Agent::answer`.
//!
//! Runs on keel's in-process scripted model, so it needs no key and no network:
//!
//! ```sh
//! cargo run -p keel-core --example clarify
//! ```

use std::sync::Arc;

use keel_core::{Agent, RunRequest};
use keel_mock::{ScriptedProvider, Step};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call(
            "clarify",
            json!({"question": "Which report?", "choices": ["weekly", "monthly"]}),
        ),
        Step::text("Here is the weekly report."),
    ]));
    let agent = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(model)
        .model("scripted")
        .on_clarify(|question| async move {
            println!("the model asks: {}", question.text);
            for (i, choice) in question.choices.iter().enumerate() {
                println!("  {}. {choice}", i + 1);
            }
            // A choice's number (1-based) or its text, or an answer of your own.
            Some("1".to_string())
        })
        .build()?;
    let report = agent.run(RunRequest::new("send me the report")).await?;
    println!("{}", report.final_text.unwrap_or_default());
    Ok(())
}
