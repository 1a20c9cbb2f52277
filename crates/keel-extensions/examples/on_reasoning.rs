//! `on_reasoning`: the reasoning text of each model answer that has some (models with extended
//! thinking), whole, once the answer is complete. `keel run --show-reasoning` shows the same.
//!
//! ```sh
//! cargo run -p keel-extensions --example on_reasoning
//! ```

mod support;

use keel_extensions::AgentCallbacks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(true)
        .on_reasoning(|reasoning| {
            eprintln!("[reasoning {}] {}", reasoning.iteration, reasoning.text);
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
