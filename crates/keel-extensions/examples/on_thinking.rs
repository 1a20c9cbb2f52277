//! `on_thinking`: a "thinking…" indicator that starts with each model call and stops when the
//! run moves on from it.
//!
//! ```sh
//! cargo run -p keel-extensions --example on_thinking
//! ```

mod support;

use std::time::Instant;

use keel_extensions::{AgentCallbacks, Thinking};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let since = std::sync::Mutex::new(Instant::now());
    let agent = support::agent(false)
        .on_thinking(move |thinking| {
            let Ok(mut since) = since.lock() else { return };
            match thinking {
                Thinking::Started { iteration } => {
                    *since = Instant::now();
                    println!("thinking… (model call {iteration})");
                }
                Thinking::Stopped => println!("done thinking after {:?}", since.elapsed()),
            }
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
