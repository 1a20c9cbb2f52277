//! keel-extensions owns keel's own agent features, each an [`Extension`] plugged into the loop
//! kernel through its one seam (see [`keel_core::extension`]): the tools the loop answers
//! itself (the run journal's three, `todo`, `clarify`, `request_more_iterations`), the memory
//! notes with their flush before a compaction, importance scores, routing by complexity,
//! recalling and learning known facts, the tool hooks around each call, and delegation to
//! sub-agents (`delegate_task`); and the typed callbacks an embedder watches a run with
//! ([`callbacks`], built on the kernel's event sinks).
//!
//! It depends on keel-core alone: no store, no HTTP, no provider. It must not be depended on by
//! keel-core; the crates that assemble an agent (keel-config, keel-server, the binary) register
//! what they want, usually [`standard`] and the configured ones.

pub mod builder_ext;
pub mod callbacks;
pub mod clarify;
pub mod delegation;
pub mod facts;
pub mod importance;
pub mod iterations;
pub mod journal_tools;
pub mod memory_notes;
pub mod routing;
pub mod todo;
pub mod tool_hooks;

use std::sync::Arc;

pub use builder_ext::AgentBuilderExt;
pub use callbacks::{AgentCallbacks, Thinking, ToolProgress};
use keel_core::extension::Extension;

/// The extensions every keel agent has unless told otherwise, in their order:
/// `request_more_iterations`, the journal's tools, `todo`, `clarify` (the order the model sees
/// them in, `ask_human` coming before `clarify`), and importance scores.
pub fn standard() -> Vec<Arc<dyn Extension>> {
    vec![
        Arc::new(iterations::MoreIterations),
        Arc::new(journal_tools::JournalTools),
        Arc::new(todo::Todo),
        Arc::new(clarify::Clarify),
        Arc::new(importance::Importance),
    ]
}
