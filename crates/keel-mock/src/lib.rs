//! keel-mock is keel's test kit: a scripted, fault-injecting model server speaking the OpenAI
//! chat-completions wire format over real HTTP ([`MockServer`], [`serve_forever`]), and an
//! in-process [`ScriptedProvider`] with the same script semantics for unit tests and benchmarks.
//!
//! It owns the [`Script`] format (one [`Step`] per request: text, tool calls, reasoning, errors,
//! delays, cut streams), the step cursor, and its own encoding of each wire API. It depends on
//! `keel-core` for the `Provider` vocabulary only, and must not depend on any adapter crate
//! (`keel-providers`): a test of an adapter against this mock is a test of two independent
//! readings of the same public protocol.
//!
//! A script, as a file (see [`Step`] for every field):
//!
//! ```json
//! {"steps": [
//!   {"error": {"status": 429, "headers": {"retry-after": "1"}}},
//!   {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
//!   {"text": "The file says hello.", "cut_after_chunks": 2},
//!   {"text": "The file says hello.", "forever": true}
//! ]}
//! ```
//!
//! The same in Rust, against the in-process provider:
//!
//! ```
//! use keel_core::{ChatRequest, Message, NoDeltas, Provider, ProviderErrorKind, ToolChoice};
//! use keel_mock::{ScriptedProvider, Step};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let provider = ScriptedProvider::from_steps(vec![
//!     Step::error(429).with_header("retry-after", "1"),
//!     Step::tool_call("read_file", json!({"path": "a.txt"})),
//! ]);
//! let request = ChatRequest {
//!     model: "gpt-test".into(),
//!     messages: vec![Message::user("read a.txt")],
//!     tools: Vec::new(),
//!     tool_choice: ToolChoice::Auto,
//!     max_tokens: None,
//!     stream: false,
//! };
//! let error = provider.chat(&request, &NoDeltas).await.unwrap_err();
//! assert_eq!(error.kind, ProviderErrorKind::RateLimit);
//! let answer = provider.chat(&request, &NoDeltas).await.unwrap();
//! assert_eq!(answer.message.tool_calls[0].id, "call_1_0");
//! # }
//! ```

mod answer;
mod chat_completions;
mod cursor;
pub mod script;
pub mod scripted;
pub mod server;
mod step_builders;
mod wire;

pub use script::{
    CutMode, ErrorReply, FinishReason, Script, ScriptError, ScriptToolCall, ScriptUsage, Step,
    ToolArguments,
};
pub use scripted::ScriptedProvider;
pub use server::{MockError, MockServer, serve_forever};
