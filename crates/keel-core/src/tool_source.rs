//! Tool sources: tools that come and go while an agent lives (an MCP server's tools, which the
//! server may change at any time). The registry asks each source for its tools whenever it
//! lists or looks them up, so a changed list is offered from the next run on; a run keeps the
//! list it started with (it is part of the run's durable frame).

use std::sync::Arc;

use async_trait::async_trait;

use crate::tool::Tool;

/// A set of tools that may change at run time.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// Waits until the source knows its first list of tools, or gave up on it (a server that
    /// did not start). The source bounds the wait; it returns at once after the first time.
    async fn ready(&self);

    /// The tools the source offers now.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;

    /// The modules its tools belong to, whether or not they are listed yet (what a persona's
    /// `allowed_modules` may name). By default, those of its tools now.
    fn modules(&self) -> Vec<String> {
        self.tools()
            .iter()
            .filter_map(|tool| tool.spec().module.clone())
            .collect()
    }
}
