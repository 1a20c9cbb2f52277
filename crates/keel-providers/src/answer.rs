//! What every adapter's reading of an answer shares: the error for an answer that cannot be
//! read, a tool call with the gaps a lax server leaves filled, and a call's argument text.

use keel_core::{ProviderError, ProviderErrorKind, ToolCall};
use serde_json::Value;

/// The error for an answer (or a stream event) that cannot be read.
pub(crate) fn malformed(message: String) -> ProviderError {
    ProviderError::new(ProviderErrorKind::MalformedResponse, message)
}

/// The tool call at `index` among an answer's calls, with the gaps some servers leave filled:
/// a missing id becomes `{prefix}_{index}` (`call_0`, `toolu_0`), empty arguments `{}`.
pub(crate) fn filled_call(
    prefix: &str,
    index: usize,
    id: String,
    name: String,
    arguments: String,
) -> ToolCall {
    ToolCall {
        id: if id.is_empty() {
            format!("{prefix}_{index}")
        } else {
            id
        },
        name,
        arguments: if arguments.trim().is_empty() {
            "{}".to_string()
        } else {
            arguments
        },
    }
}

/// Raw argument text: kept verbatim when it is a string (as OpenAI sends it), serialized when a
/// server sent a JSON object instead, empty for `null`.
pub(crate) fn argument_text(arguments: Value) -> String {
    match arguments {
        Value::String(text) => text,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
