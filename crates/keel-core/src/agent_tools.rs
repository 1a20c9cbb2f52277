//! Tools the loop answers itself instead of sending to the registry: they change the run, not
//! the world. `request_more_iterations` (seed 000: +10 per call with a reason, up to a hard
//! cap), the run journal's three tools (see [`crate::journal`]), the task list's `todo` (see
//! [`crate::todo`]), and `ask_human` and `clarify` (see [`crate::clarify`]), whose answer comes
//! from a human — at the chat prompt, or later through `keel answer`.

use serde_json::json;

use crate::message::ToolCall;
use crate::tool::ToolSpec;

/// The name of the iteration-extension tool.
pub const REQUEST_MORE_ITERATIONS: &str = "request_more_iterations";

/// How many iterations one granted request adds.
pub const ITERATIONS_PER_REQUEST: u32 = 10;

/// The name of the tool that asks the human.
pub const ASK_HUMAN: &str = "ask_human";

/// True when the loop itself answers calls to `name`.
pub fn is_agent_tool(name: &str) -> bool {
    name == REQUEST_MORE_ITERATIONS
        || name == ASK_HUMAN
        || name == crate::todo::TODO
        || name == crate::clarify::CLARIFY
        || crate::journal::is_journal_tool(name)
}

/// The spec the model sees for `ask_human`.
pub fn ask_human_spec() -> ToolSpec {
    ToolSpec::new(
        ASK_HUMAN,
        "Ask the human a question and wait for the answer. Use it when you cannot go on without \
         a decision or information only they have; say exactly what you need.",
        json!({
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
            "additionalProperties": false
        }),
    )
    .interactive()
}

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
pub struct Extension {
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
pub fn extend_iterations(call: &ToolCall, limit: u32, cap: u32) -> Extension {
    let reason = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|args| args["reason"].as_str().map(str::trim).map(str::to_string))
        .unwrap_or_default();
    if reason.is_empty() {
        return Extension {
            limit,
            answer: "Error: give a `reason`: what remains to be done and why more iterations \
                     will finish it."
                .into(),
            granted: false,
            reason,
        };
    }
    if limit >= cap {
        return Extension {
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
    Extension {
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
