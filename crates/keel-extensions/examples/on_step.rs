//! `on_step`: after each complete agent turn (the model answered and every tool call it asked
//! for has its result) — step tracking for a gateway or a progress bar.
//!
//! ```sh
//! cargo run -p keel-extensions --example on_step
//! ```

mod support;

use keel_extensions::AgentCallbacks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(false)
        .on_step(|step| {
            let tools = if step.tools.is_empty() {
                "answered".to_string()
            } else {
                format!("called {}", step.tools.join(", "))
            };
            println!(
                "step {}: {tools} ({} tokens so far)",
                step.iteration,
                step.usage.total()
            );
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
