//! The builder methods of keel's own features, on [`AgentBuilder`]: each registers one
//! extension (and the tools it brings).

use std::sync::Arc;

use crate::facts::{Learn, Recall};
use keel_core::AgentBuilder;

use crate::delegation::{DelegateTaskTool, Delegation, DelegationPolicy};
use crate::facts::{FactRecall, Learning};
use crate::memory_notes::{MemoryBackend, MemoryLimits, MemoryNotes, MemoryTool};
use crate::routing::{Routing, RoutingPolicy};
use crate::tool_hooks::ToolHooks;

/// Builder methods for keel's own features. `use keel_extensions::AgentBuilderExt;`
pub trait AgentBuilderExt: Sized {
    /// Adds [`crate::standard`]: the loop's own tools and importance scores.
    fn standard_extensions(self) -> Self;

    /// Durable memory: the `memory` tool on `backend` within `limits`, each session's system
    /// prompt showing the notes as they were when it started, and the flush before a
    /// compaction.
    fn memory(self, backend: Arc<dyn MemoryBackend>, limits: MemoryLimits) -> Self;

    /// Recalls what each run should know about its user (known facts) into its turn context
    /// before it starts (see `keel-memory`).
    fn recall(self, recall: Arc<dyn Recall>) -> Self;

    /// Learns from each run once it has ended.
    fn learn(self, learn: Arc<dyn Learn>) -> Self;

    /// Routes each message to a model by its tier when the caller names no model: greetings
    /// to `fast`, code and multi-step work to `smart`.
    fn routing(self, policy: RoutingPolicy) -> Self;

    /// Commands that see each tool call before it runs and its result after (default: none).
    fn hooks(self, hooks: ToolHooks) -> Self;

    /// Lets runs hand tasks to sub-agents with `delegate_task`, within `policy` (see
    /// [`crate::delegation`]); off unless called. A policy out of bounds fails the build.
    fn delegation(self, policy: DelegationPolicy) -> Self;
}

impl AgentBuilderExt for AgentBuilder {
    fn standard_extensions(self) -> Self {
        crate::standard()
            .into_iter()
            .fold(self, |builder, extension| builder.extension(extension))
    }

    fn memory(self, backend: Arc<dyn MemoryBackend>, limits: MemoryLimits) -> Self {
        self.tool(Arc::new(MemoryTool::new(backend.clone(), limits)))
            .extension(Arc::new(MemoryNotes { backend }))
    }

    fn recall(self, recall: Arc<dyn Recall>) -> Self {
        self.extension(Arc::new(FactRecall(recall)))
    }

    fn learn(self, learn: Arc<dyn Learn>) -> Self {
        self.extension(Arc::new(Learning(learn)))
    }

    fn routing(self, policy: RoutingPolicy) -> Self {
        self.extension(Arc::new(Routing(Arc::new(policy))))
    }

    fn hooks(self, hooks: ToolHooks) -> Self {
        if hooks.is_empty() {
            return self;
        }
        self.extension(Arc::new(hooks))
    }

    fn delegation(self, policy: DelegationPolicy) -> Self {
        let builder = match policy.validate() {
            Ok(()) => self,
            Err(why) => self.invalid(why),
        };
        builder
            .tool(Arc::new(DelegateTaskTool::new(&policy)))
            .extension(Arc::new(Delegation::new(policy)))
    }
}
