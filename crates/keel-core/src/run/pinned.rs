//! Pinned messages (`MessageMeta::pinned`) survive compaction verbatim: a summary never
//! stands in for them, the sliding window never drops them, and a later run of the session
//! loads them with the live context (see [`crate::Store::context_messages`]). A pin keeps its
//! whole tool-call exchange ([`crate::context::pinned_exchanges`]): a pinned call is never sent
//! without its results, nor a pinned result without its call. The request sends them after the
//! summary, before the live messages, in their order.

use super::Run;
use crate::context;

impl Run {
    /// Keeps verbatim the pinned exchanges among the messages `from..to`, which are leaving the
    /// live context (a summary replaces them, or the sliding window drops them).
    pub(super) fn keep_pinned(&mut self, from: usize, to: usize) {
        let kept = context::pinned_exchanges(&self.messages, from..to);
        self.kept.extend(kept);
    }
}

#[cfg(test)]
#[path = "pinned_tests.rs"]
mod tests;
