//! `request_more_iterations` (seed 000): the model asks for 10 more iterations of the loop,
//! giving a reason, up to a hard cap; answered by the loop, which raises the run's limit.

use keel_core::event::EventKind;
use keel_core::extension::{Extension, LoopAnswer, LoopTurn};
use keel_core::message::ToolCall;
use keel_core::run_settings::RunSettings;
use keel_core::tool::ToolSpec;
use serde_json::json;

/// The tool, offered when the run's hard cap is above its limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct MoreIterations;

impl Extension for MoreIterations {
    fn name(&self) -> &'static str {
        REQUEST_MORE_ITERATIONS
    }

    fn loop_tools(&self, settings: &RunSettings) -> Vec<ToolSpec> {
        if settings.iteration_cap > settings.max_iterations {
            vec![request_more_iterations_spec()]
        } else {
            Vec::new()
        }
    }

    fn answer(
        &self,
        call: &ToolCall,
        _: &serde_json::Value,
        turn: &mut LoopTurn<'_>,
    ) -> LoopAnswer {
        let extension = extend_iterations(call, *turn.iteration_limit, turn.iteration_cap);
        *turn.iteration_limit = extension.limit;
        turn.events.push(EventKind::IterationsExtended {
            granted: extension.granted,
            limit: extension.limit,
            reason: extension.reason,
        });
        if extension.granted {
            LoopAnswer::Ok(extension.answer)
        } else {
            LoopAnswer::Err(extension.answer)
        }
    }
}

/// The name of the iteration-extension tool.
pub const REQUEST_MORE_ITERATIONS: &str = "request_more_iterations";

/// How many iterations one granted request adds.
pub const ITERATIONS_PER_REQUEST: u32 = 10;

/// The spec the model sees for `request_more_iterations`.
pub fn request_more_iterations_spec() -> ToolSpec {
    ToolSpec::new(
        REQUEST_MORE_ITERATIONS,
        "Ask for 10 more iterations of the agent loop when you have a clear plan but would run out \
         of iterations before finishing. Say what remains to be done.",
        json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "What remains to be done, and why more iterations will finish it."}
            },
            "required": ["reason"],
            "additionalProperties": false
        }),
    )
}

/// The outcome of one `request_more_iterations` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The new iteration limit.
    pub limit: u32,
    /// The answer for the model.
    pub answer: String,
    /// Whether the limit moved.
    pub granted: bool,
    /// The reason the model gave.
    pub reason: String,
}

/// Decides a `request_more_iterations` call against the current `limit` and the hard `cap`.
pub fn extend_iterations(call: &ToolCall, limit: u32, cap: u32) -> Grant {
    let reason = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|args| args["reason"].as_str().map(str::trim).map(str::to_string))
        .unwrap_or_default();
    if reason.is_empty() {
        return Grant {
            limit,
            answer: "Error: give a `reason`: what remains to be done and why more iterations \
                     will finish it."
                .into(),
            granted: false,
            reason,
        };
    }
    if limit >= cap {
        return Grant {
            limit,
            answer: format!(
                "Refused: the hard cap of {cap} iterations is reached. Finish with what you have \
                 and say what is left."
            ),
            granted: false,
            reason,
        };
    }
    let new_limit = (limit + ITERATIONS_PER_REQUEST).min(cap);
    Grant {
        limit: new_limit,
        answer: format!(
            "Granted: {} more iterations (the limit is now {new_limit}, at most {cap}).",
            new_limit - limit
        ),
        granted: true,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(arguments: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: REQUEST_MORE_ITERATIONS.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn grants_ten_up_to_the_cap_and_then_refuses() {
        let granted = extend_iterations(&call(r#"{"reason": "two files left"}"#), 25, 50);
        assert_eq!(granted.limit, 35);
        assert!(granted.granted && granted.answer.contains("10 more"));
        let partial = extend_iterations(&call(r#"{"reason": "x"}"#), 45, 50);
        assert_eq!(partial.limit, 50);
        assert!(partial.answer.contains("5 more"));
        let refused = extend_iterations(&call(r#"{"reason": "x"}"#), 50, 50);
        assert!(!refused.granted && refused.answer.contains("hard cap of 50"));
    }

    #[test]
    fn a_reason_is_required() {
        let missing = extend_iterations(&call("{}"), 25, 50);
        assert!(!missing.granted && missing.limit == 25 && missing.answer.contains("reason"));
        assert!(!extend_iterations(&call("not json"), 25, 50).granted);
    }
}
