//! `on_tool_progress`: a line before each tool call runs and after it ends (the CLI's spinner
//! and a gateway's progress messages are built on this).
//!
//! ```sh
//! cargo run -p keel-extensions --example on_tool_progress
//! ```

mod support;

use keel_extensions::{AgentCallbacks, ToolProgress};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(true)
        .on_tool_progress(|progress| match progress {
            ToolProgress::Started {
                name, arguments, ..
            } => println!("→ {name} {arguments}"),
            ToolProgress::Retrying { name, attempt, .. } => println!("↻ {name} (retry {attempt})"),
            ToolProgress::Completed {
                name,
                ok,
                output,
                duration_ms,
                ..
            } => println!(
                "{} {name} ({duration_ms} ms): {output}",
                if *ok { "✓" } else { "✗" }
            ),
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
