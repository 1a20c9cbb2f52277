//! `on_tool_call_parsed`: each tool call of a model answer, whole, as soon as the answer is
//! complete and before it runs — a preview of what the agent is about to do.
//!
//! ```sh
//! cargo run -p keel-extensions --example on_tool_call_parsed
//! ```

mod support;

use keel_extensions::AgentCallbacks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = support::agent(true)
        .on_tool_call_parsed(|call| {
            println!(
                "model call {} wants {}({}) [id {}]",
                call.iteration, call.name, call.arguments, call.call_id
            );
        })
        .build()?;
    let answer = agent.chat("Do I need an umbrella in Paris?").await?;
    println!("{answer}");
    Ok(())
}
