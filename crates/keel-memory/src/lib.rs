//! keel-memory: long-term memory for keel's agents (DESIGN.md section 11).
//!
//! - [`importance`]: how much a text matters, by cheap deterministic rules.
//! - [`facts`]: known facts — what a new one needs and which older one it supersedes.
//! - [`embedding`]: the [`Embedder`] trait, on any OpenAI-compatible `/v1/embeddings`.
//! - [`fusion`]: reciprocal rank fusion of several rankings.
//! - [`retrieval`]: tri-hybrid retrieval (full text, vectors, recency × importance), fused,
//!   cut to a token budget, merged with pinned memories.
//! - [`Memory`]: all of it over a [`keel_core::Store`], as the agent's
//!   [`keel_extensions::facts::Recall`] hook.
//! - [`tools`]: the `remember` and `forget` tools.

#![warn(missing_docs)]

pub mod embedding;
pub mod facts;
pub mod fusion;
pub mod learn;
pub use keel_extensions::importance;
mod memory;
pub mod retrieval;
pub mod tools;

pub use embedding::Embedder;
pub use facts::{FactError, NewFact};
pub use learn::Learning;
pub use memory::{
    CACHE_TTL, KNOWN_FACTS_HEADING, MESSAGE_PIECE_CHARS, Memory, PINNED_MESSAGES,
    RECALL_EMBED_TIMEOUT, Remembered, Retrieval, fact_candidate_id, message_candidate_id,
};
pub use retrieval::{Piece, RetrievalSettings};
