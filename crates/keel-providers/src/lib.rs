//! keel-providers owns keel's wire adapters: the code that turns a [`keel_core::ChatRequest`]
//! into one provider's HTTP request and reads the answer (whole JSON or a server-sent event
//! stream) back into a [`keel_core::ChatResponse`], sorting every failure into a
//! [`keel_core::ProviderError`] the recovery policy can act on.
//!
//! It speaks three APIs: OpenAI chat-completions ([`openai_chat`], which also covers the many
//! compatible servers: Ollama, vLLM, llama.cpp's server, proxies), the OpenAI Responses API
//! ([`openai_responses`]) and Anthropic Messages ([`anthropic`]). [`Api`] resolves which one a
//! provider speaks and [`connect`] builds the adapter. Each adapter is built the same way:
//!
//! - `<adapter>/request.rs`: `ChatRequest` → wire JSON,
//! - `<adapter>/response.rs`: a whole JSON answer → `ChatResponse`,
//! - `<adapter>/stream.rs`: an accumulator fed one SSE event at a time,
//! - `<adapter>/mod.rs`: its configuration, its headers and how it sends (one post, or more),
//!
//! and shares the rest:
//!
//! - `call.rs`: the one call path (post, classify, stream or read whole, the deadline, the
//!   one `Finished` delta) and the `Provider` impl every adapter gets from it,
//! - `sse.rs`: the server-sent-event read loop that feeds an adapter's accumulator,
//! - `http.rs`: client construction, sending, reading a body and transport errors,
//! - `wire_json.rs`: wire bodies written as JSON bytes (and as trees for tests), each tool
//!   list's JSON written once and reused by the calls that send it,
//! - [`classify`]: HTTP status + headers + body → `ProviderError`.
//!
//! It must not depend on any keel crate but `keel-core`: the loop, the store and the tools know
//! nothing about wire formats, and this crate knows nothing about them.

#![warn(missing_docs)]

mod answer;
pub mod anthropic;
pub mod api;
mod call;
pub mod classify;
mod connect;
pub mod embeddings;
mod http;
pub mod openai_chat;
pub mod openai_responses;
mod sse;
#[cfg(test)]
mod stream_test_support;
mod tls;
mod wire_json;
#[cfg(test)]
mod wire_test_support;

pub use anthropic::{Anthropic, AnthropicConfig};
pub use api::Api;
pub use classify::{classify_http_error, retry_hint};
pub use connect::{Endpoint, connect};
pub use embeddings::OpenAiEmbeddings;
pub use http::{ConfigError, build_client, install_crypto_provider};
pub use openai_chat::{OpenAiChat, OpenAiConfig};
pub use openai_responses::OpenAiResponses;
