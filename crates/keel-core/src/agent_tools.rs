//! `ask_human`, the one tool the kernel answers itself: its answer comes from a human — at the
//! chat prompt, or later through `keel answer`. Every other tool the loop answers (the journal's,
//! `todo`, `clarify`, `request_more_iterations`) is an extension's (see [`crate::extension`]).

use serde_json::json;

use crate::tool::ToolSpec;

/// The name of the tool that asks the human.
pub const ASK_HUMAN: &str = "ask_human";

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
