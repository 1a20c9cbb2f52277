//! The mock's reading of each wire API's request rules, as pure functions over a request body,
//! so other crates' tests can hold the requests they build to the same standard the mock
//! server enforces. Header rules (Anthropic's `anthropic-version`) are checked by the server
//! only.
//!
//! ```
//! use serde_json::json;
//!
//! let request = json!({
//!     "model": "claude-test",
//!     "max_tokens": 100,
//!     "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}],
//! });
//! let problem = keel_mock::validate::messages(&request).unwrap_err();
//! assert!(problem.contains("roles must alternate"), "{problem}");
//! ```

use serde_json::Value;

use crate::wire::Invalid;

/// Checks an OpenAI chat-completions request body; the error is the message the mock's
/// 400 answer would carry.
pub fn chat_completions(request: &Value) -> Result<(), String> {
    crate::chat_completions::check(request)
        .map(drop)
        .map_err(message)
}

/// Checks an Anthropic Messages request body; the error is the message the mock's 400 answer
/// would carry.
pub fn messages(request: &Value) -> Result<(), String> {
    crate::messages::check(request).map(drop).map_err(message)
}

/// Checks an OpenAI Responses request body; the error is the message the mock's 400 answer
/// would carry.
pub fn responses(request: &Value) -> Result<(), String> {
    crate::responses::check(request).map(drop).map_err(message)
}

fn message(invalid: Invalid) -> String {
    invalid.message
}
