//! `on_stream_delta`: each piece of a streamed answer as it arrives — print the text as the
//! model writes it. Called per token: keep it cheap.
//!
//! ```sh
//! cargo run -p keel-extensions --example on_stream_delta
//! ```

mod support;

use std::io::Write;

use keel_core::StreamDelta;
use keel_extensions::AgentCallbacks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(true)
        .on_stream_delta(|delta| match delta {
            StreamDelta::Text { text } => {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            StreamDelta::ToolCallStarted { name, .. } => println!("[calling {name}]"),
            StreamDelta::Finished { .. } => println!(),
            _ => {}
        })
        .build()?;
    agent.chat("Do I need an umbrella in Paris?").await?;
    Ok(())
}
