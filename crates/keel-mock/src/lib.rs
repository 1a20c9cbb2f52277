//! keel-mock is keel's test kit: a scripted, fault-injecting model server speaking three wire
//! APIs over real HTTP ([`MockServer`], [`serve_forever`]), an in-process [`ScriptedProvider`]
//! with the same script semantics for unit tests and benchmarks, and the mock's reading of each
//! API's request rules as pure functions ([`validate`]).
//!
//! It owns the [`Script`] format (one [`Step`] per request: text, tool calls, reasoning, errors,
//! delays, cut streams, mid-stream error events; per-model step lists; per-turn reading), the
//! step cursors, and
//! its own encoding of each
//! wire API. It depends on `keel-core` for the `Provider` vocabulary only, and must not depend
//! on any adapter crate (`keel-providers`): a test of an adapter against this mock is a test of
//! two independent readings of the same public protocol.
//!
//! # Endpoints
//!
//! | route | API | whole answer | stream (`"stream": true`) |
//! | --- | --- | --- | --- |
//! | `POST /v1/chat/completions` | OpenAI chat completions | `chat.completion` | `data:` chunks, `[DONE]` |
//! | `POST /v1/messages` | Anthropic Messages (needs `anthropic-version`) | `message` | `message_start` … `message_stop` |
//! | `POST /v1/responses` | OpenAI Responses | `response` | `response.created` … `response.completed` |
//! | `GET /v1/_mock/requests` | the request bodies received, in arrival order | | |
//!
//! Every API route takes the next step of one shared script: a chat request, then an Anthropic
//! one, then a Responses one consume steps 1, 2 and 3 (unless their model has steps of its own:
//! see [Per-model steps](#per-model-steps); or the script is read by each request's position in
//! its turn: see [Per-turn scripts](#per-turn-scripts)). A request the real API would reject is
//! answered 400 in that API's error format and takes no step. A step's reply is written in the
//! route's format: `reasoning` is `reasoning_content`, an Anthropic `thinking` block (with a
//! made-up signature) or a Responses `reasoning` item; `finish_reason: "length"` is
//! `finish_reason: length`, `stop_reason: max_tokens` or an `incomplete` response
//! (`max_output_tokens`). Error steps get each API's own error body fitting the status and kind
//! (e.g. Anthropic 529 `overloaded_error`, Responses 400 `model_not_found`).
//!
//! # Script format
//!
//! A script file, with every kind of step (see [`Step`] for every field):
//!
//! ```json
//! {"steps": [
//!   {"error": {"status": 429, "headers": {"retry-after": "1"}}},
//!   {"error": {"status": 400, "kind": "context_overflow"}},
//!   {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
//!   {"text": "The file says hello.", "reasoning": "Read it first.", "usage": {"input_tokens": 90}},
//!   {"text": "The file says hello.", "cut_after_chunks": 2, "cut_mode": "eof"},
//!   {"text": "The file says hello.",
//!    "stream_error": {"after_chunks": 3, "kind": "overloaded"}},
//!   {"text": "The file says hello.",
//!    "stream_error": {"after_chunks": 3, "kind": "rate_limit", "message": "slow down",
//!                     "responses_event": "error"}},
//!   {"text": "The file says hello.", "delay_ms": 500, "chunk_delay_ms": 20, "forever": true}
//! ]}
//! ```
//!
//! `stream_error` ([`StreamError`]) breaks a streamed answer off after `after_chunks` events
//! (capped before the events that carry the stop reason) with the API's own error event, then
//! ends the stream cleanly:
//!
//! - Anthropic: `event: error` / `{"type": "error", "error": {"type": "overloaded_error",
//!   "message": "Overloaded"}}`;
//! - Responses: `response.failed` whose `response` has `status: "failed"` and
//!   `error: {code, message}`, or with `"responses_event": "error"` a bare `error` event
//!   `{type, sequence_number, code, message, param}`;
//! - chat completions: a `data: {"error": {message, type, param, code}}` chunk, no `[DONE]`.
//!
//! `kind` defaults to `server`, `message` to the API's own wording. A whole (non-streamed)
//! answer of such a step is the API's HTTP error for the kind (an overloaded Anthropic answer is
//! a 529). The in-process provider sends the first `after_chunks` deltas, then
//! `Finished { stop_reason: None }` and a `ProviderError` of the kind.
//!
//! # Per-model steps
//!
//! Beside (or instead of) the top-level `steps`, a script may give models step lists of their
//! own under `models`. A request whose `model` is one of its keys (matched exactly) consumes the
//! next step of that list, with a cursor of its own; every other request consumes the top-level
//! steps. Here the agent's calls to `gpt-test` take the top-level steps and the compaction
//! summaries sent to `summary-model` take theirs, however the two interleave:
//!
//! ```json
//! {"steps": [
//!   {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
//!   {"text": "The file says hello."}
//! ],
//!  "models": {
//!   "summary-model": {"steps": [
//!     {"error": {"status": 529}},
//!     {"text": "Summary: the user asked to read a.txt.", "forever": true}
//!   ]}
//! }}
//! ```
//!
//! A model's list takes every field a step takes (`times`, `forever`, errors, delays, cuts,
//! stream errors) and is checked the same way, problems naming their place
//! (`models.summary-model.steps[1]: ...`). When it runs out, that model's requests get the 500
//! ``keel-mock: script for model `summary-model` exhausted after N responses``; the top-level
//! steps running out answer `keel-mock: script exhausted after N responses`. Each list numbers
//! its own answers, so default tool-call ids (`call_<n>_<i>`) do not depend on how the lists'
//! requests interleave (give `id`s explicitly where two lists' ids must differ). The request log
//! keeps every request, of every model, in arrival order. The in-process [`ScriptedProvider`]
//! routes by `ChatRequest::model` the same way; in Rust,
//! `Script::new(agent_steps).with_model("summary-model", summary_steps)`.
//!
//! # Per-turn scripts
//!
//! With `"per_turn": true` ([`Script::per_turn`]) no request consumes a step: each gets the
//! step at its position in its own turn, the number of assistant replies it carries after its
//! last real user message. So any number of conversations, interleaved or concurrent, each walk
//! the script from its start (what `keel bench` runs), and a new user message starts it over:
//!
//! ```json
//! {"per_turn": true,
//!  "steps": [
//!   {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
//!   {"text": "The file says hello.", "usage": {"input_tokens": 900, "output_tokens": 12}}
//! ]}
//! ```
//!
//! Position 0 is a turn's first call, 1 the call after the first tool results, and so on; a
//! step's `times` covers that many positions, `forever` every later one, and a position past
//! the end gets the usual "exhausted" 500. Per-model lists are read by position too. A real user
//! message is one that is not just tool results: in process, a user message the loop did not
//! inject (its `meta.internal` is unset); over HTTP, where the loop's own messages cannot be
//! told apart, a user message that neither carries tool results (an Anthropic `tool_result`
//! block) nor directly follows them (so a warning or nudge after tool results continues the
//! turn, while one after a plain answer, like a `max_tokens` continuation, starts one). A
//! reply is an `assistant` message on chat completions and Anthropic, and on Responses a run of
//! output items (`reasoning`, assistant `message`, `function_call`) between input items.
//! Default tool-call ids number every per-turn answer the server or provider gave
//! (`call_<n>_<i>`), so they never repeat within a conversation. For thousands of
//! conversations in process, `ScriptedProvider::new(script).without_recording()` keeps no
//! copy of the requests; a step whose `usage` gives `input_tokens` spares serializing the
//! request for the estimate.
//!
//! # In Rust
//!
//! Scripts built with [`Step`]'s builders, against the in-process provider; the summary call
//! between the agent's two calls takes its own step:
//!
//! ```
//! use keel_core::{ChatRequest, Message, NoDeltas, Provider, ProviderErrorKind, ToolChoice};
//! use keel_mock::{Script, ScriptedProvider, Step};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let provider = ScriptedProvider::new(
//!     Script::new(vec![
//!         Step::error(429).with_header("retry-after", "1"),
//!         Step::tool_call("read_file", json!({"path": "a.txt"})),
//!     ])
//!     .with_model("summary-model", vec![Step::text("Summary: reading a.txt.")]),
//! );
//! let request = ChatRequest {
//!     model: "gpt-test".into(),
//!     messages: vec![Message::user("read a.txt").into()],
//!     tools: Vec::new().into(),
//!     tool_choice: ToolChoice::Auto,
//!     max_tokens: None,
//!     temperature: None,
//!     stream: false,
//! };
//! let error = provider.chat(&request, &NoDeltas).await.unwrap_err();
//! assert_eq!(error.kind, ProviderErrorKind::RateLimit);
//!
//! let summary_request = ChatRequest { model: "summary-model".into(), ..request.clone() };
//! let summary = provider.chat(&summary_request, &NoDeltas).await.unwrap();
//! assert_eq!(summary.message.content, "Summary: reading a.txt.");
//!
//! let answer = provider.chat(&request, &NoDeltas).await.unwrap();
//! assert_eq!(answer.message.tool_calls[0].id, "call_1_0");
//! # }
//! ```

mod answer;
mod chat_completions;
mod cursor;
pub mod embeddings;
mod messages;
mod openai_common;
mod panics;
mod responses;
pub mod script;
pub mod scripted;
pub mod server;
mod step_builders;
mod turn_position;
pub mod validate;
mod wire;

pub use panics::PanicsAt;
pub use script::{
    CutMode, ErrorReply, FinishReason, ModelScript, ResponsesErrorEvent, Script, ScriptError,
    ScriptToolCall, ScriptUsage, Step, StreamError, ToolArguments,
};
pub use scripted::ScriptedProvider;
pub use server::{MockError, MockServer, ServeOptions, serve_forever};
