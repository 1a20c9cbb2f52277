//! `on_status`: the run's status as it changes — thinking, executing, compacting, waiting for
//! approval or for the human, finished (what an ACP client shows).
//!
//! ```sh
//! cargo run -p keel-extensions --example on_status
//! ```

mod support;

use keel_extensions::AgentCallbacks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(false)
        .on_status(|change| {
            println!(
                "[{}] {} (state {})",
                change.iteration,
                change.status.as_str(),
                change.state
            );
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
