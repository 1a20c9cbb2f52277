//! What the callback examples share: a scripted model (no key, no network), an in-memory
//! store and one tool.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Agent, AgentBuilder, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// Today's weather in a city (made up).
struct Weather {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Weather {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let city = args["city"].as_str().unwrap_or("nowhere");
        Ok(ToolOutput::text(format!("{city}: 18 °C, light rain")))
    }
}

/// An agent builder on a scripted model that thinks, calls `weather` for Paris, then answers
/// — streamed when `stream` is set. Add a callback and build.
pub fn agent(stream: bool) -> AgentBuilder {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": false
    });
    let weather = Weather {
        spec: ToolSpec::new("weather", "Today's weather in a city", schema).idempotent(),
    };
    let model = ScriptedProvider::from_steps(vec![
        Step::tool_call("weather", json!({"city": "Paris"}))
            .with_reasoning("The user asks about Paris; I should look the weather up."),
        Step::text("Take an umbrella: 18 °C and light rain in Paris.")
            .with_reasoning("Rain means an umbrella."),
    ]);
    Agent::builder()
        .provider(Arc::new(model))
        .model("scripted")
        .store(Arc::new(MemoryStore::new()))
        .tool(Arc::new(weather))
        .stream(stream)
}
