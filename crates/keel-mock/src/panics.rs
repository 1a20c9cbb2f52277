//! A provider that panics: keel's own failure (a bug in the loop, a provider, a tool source),
//! for the tests of what becomes of a run that panics.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use keel_core::{ChatRequest, ChatResponse, DeltaSink, Provider, ProviderError};

use crate::ScriptedProvider;

/// Answers as its scripted provider does, except that its call number `panic_at` (1-based)
/// panics with `message`.
pub struct PanicsAt {
    inner: ScriptedProvider,
    calls: AtomicUsize,
    panic_at: usize,
    message: &'static str,
}

impl PanicsAt {
    /// `inner`'s answers, and a panic with `message` at call number `panic_at` (1-based).
    pub fn new(inner: ScriptedProvider, panic_at: usize, message: &'static str) -> Self {
        PanicsAt {
            inner,
            calls: AtomicUsize::new(0),
            panic_at,
            message,
        }
    }
}

#[async_trait]
impl Provider for PanicsAt {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.panic_at {
            panic!("{}", self.message);
        }
        self.inner.chat(request, sink).await
    }
}
