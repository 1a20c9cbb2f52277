//! Known facts as extensions: what a run should know about its user is recalled before it
//! starts (into its turn context, never the system prompt), and what it said is learned from
//! once it has ended. The recalling and learning themselves are `keel-memory`'s
//! ([`Recall`], [`Learn`]).

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::event::EventKind;
use keel_core::extension::{Extension, FinishedRun, RunStart};
use keel_core::known_facts::{self, Learn, Recall};

/// Recalls known facts for each run before it starts: not for a run refused by its budget,
/// nor for an untrusted session (it is shown nothing of the user's private memory).
pub struct FactRecall(pub Arc<dyn Recall>);

#[async_trait]
impl Extension for FactRecall {
    fn name(&self) -> &'static str {
        "known_facts"
    }

    async fn prepare(&self, start: &mut RunStart<'_>) {
        if start.refusal.is_some() || start.settings.untrusted {
            return;
        }
        let user = start.user_id.unwrap_or(known_facts::OWNER);
        let recalled = self.0.recall(user, start.session_id, start.message).await;
        if !recalled.prompt_section.trim_end().is_empty() {
            start.turn_sections.push(recalled.prompt_section);
        }
        start.opening_events.push(EventKind::MemoryRetrieved {
            detail: recalled.detail,
        });
    }
}

/// Learns from each run once it has ended.
pub struct Learning(pub Arc<dyn Learn>);

#[async_trait]
impl Extension for Learning {
    fn name(&self) -> &'static str {
        "learning"
    }

    async fn finished(&self, run: &FinishedRun<'_>) -> Vec<EventKind> {
        let finished = known_facts::FinishedRun {
            user_id: run.user_id.unwrap_or(known_facts::OWNER),
            session_id: run.session_id,
            run_id: run.run_id,
            trusted: run.trusted,
            messages: run.messages,
        };
        match self.0.learn(&finished).await {
            Some(detail) => vec![EventKind::MemoryLearned { detail }],
            None => Vec::new(),
        }
    }
}
