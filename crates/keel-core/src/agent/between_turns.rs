//! [`Agent::compact_between_turns`]: a stored conversation compacted now, between two of its
//! runs (seed 004's gateway compression), so its next message is answered without a summary
//! call first. The compaction is the run's own ([`Run::between_turns`]); this is the I/O around
//! it: the session's lane, the summary call, and the summary stored.
//!
//! No run is stored for it. A run record would be listed among the conversation's runs as if a
//! person had sent something, and the commit that ends a run of a conversation with a delivery
//! route writes an outbox row: a channel would deliver a reply nobody asked for. So the summary
//! is appended alone ([`crate::Store::append_messages`]), exactly as a run's compaction appends
//! it (an internal message whose `summary_of` names the seqs it stands in for), under the
//! session's lane claim, whose holder (`compaction-…`) names the work; the store's lane fence
//! refuses the write if another run took the lane meanwhile. The lane is held from before the
//! history is read until the summary is stored, so no run of the session starts meanwhile; a
//! run that holds it means "not now".

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError};
use crate::event::{Emitter, EventKind};
use crate::lane::{LaneClaim, LaneOutcome};
use crate::message::SeqRange;
use crate::provider::{NoDeltas, Usage};
use crate::run::{Run, Step};
use crate::run_options::RunOptions;
use crate::store::StoreError;

/// A compaction between turns, asked of [`Agent::compact_between_turns`].
#[derive(Clone, Debug)]
pub struct BetweenTurns {
    /// The conversation.
    pub session_id: String,
    /// Compact when the context of its next run would stand above this share of the model's
    /// window (seed 004: 0.85); 0 or less never compacts.
    pub above: f64,
    /// The user its runs are for: the tools and budget of the next run are theirs.
    pub user_id: Option<String>,
    /// What the incoming-message pipeline chose for its runs (persona, tool modules): the next
    /// run's system prompt and tools are counted with them.
    pub options: RunOptions,
    /// Who holds the lane meanwhile, for people reading a busy lane (e.g. `host:pid`).
    pub worker: String,
    /// A claim not renewed for this long is taken over by the next run; it is renewed every
    /// third of it while the summary is made.
    pub stale_after: Duration,
    /// Stops the compaction: nothing is stored, the lane is let go.
    pub cancel: CancellationToken,
}

impl BetweenTurns {
    /// Compact `session_id` when its context stands above `above` of the window.
    pub fn new(session_id: impl Into<String>, above: f64) -> Self {
        BetweenTurns {
            session_id: session_id.into(),
            above,
            user_id: None,
            options: RunOptions::default(),
            worker: format!("pid:{}", std::process::id()),
            stale_after: Duration::from_secs(60),
            cancel: CancellationToken::new(),
        }
    }
}

/// What a compaction between turns did.
#[derive(Clone, Debug, PartialEq)]
pub struct BetweenTurnsReport {
    /// The conversation.
    pub session_id: String,
    /// The lane claim it held (`compaction-…`); no run of this id is stored.
    pub holder: String,
    /// The seqs the stored summary stands in for.
    pub summary_of: SeqRange,
    /// Estimated tokens of the next request before and after.
    pub before_tokens: u64,
    /// See `before_tokens`.
    pub after_tokens: u64,
    /// Tokens the summary call used.
    pub usage: Usage,
}

impl Agent {
    /// Compacts the stored conversation `request.session_id` now when its next run's context
    /// (this agent's system prompt and tools, the user's and the pipeline's choices, the
    /// session's history, the model's window) stands above `request.above` of the window, with
    /// the run's own compaction: the context strategy decides, one summary call is made (retried
    /// and handed to the fallbacks as a run's), and the summary is stored as a run's compaction
    /// stores it. Returns `None` when nothing was done: below the share, a run holds the lane,
    /// the strategy wants no summary, the summary model failed (the next run tries again), the
    /// user's budget is spent, or `request.cancel` fired. See the module docs for why no run is
    /// stored.
    pub async fn compact_between_turns(
        &self,
        request: BetweenTurns,
    ) -> Result<Option<BetweenTurnsReport>, AgentError> {
        if request.above.is_nan() || request.above <= 0.0 {
            return Ok(None);
        }
        if self.store.session(&request.session_id).await?.is_none() {
            return Ok(None);
        }
        let holder = format!("compaction-{}", uuid::Uuid::now_v7());
        if !self.claim_lane(&request, &holder).await? {
            return Ok(None);
        }
        let outcome = self.compact_holding(&request, &holder).await;
        if let Err(error) = self
            .store
            .release_session(&request.session_id, &holder)
            .await
        {
            tracing::warn!(%error, session = request.session_id, "cannot let the lane go");
        }
        match outcome {
            // Another run took the lane over (this claim went stale): it is that run's now.
            Err(AgentError::Store(StoreError::LaneLost { .. })) => Ok(None),
            outcome => outcome,
        }
    }

    /// The compaction, the lane held.
    async fn compact_holding(
        &self,
        request: &BetweenTurns,
        holder: &str,
    ) -> Result<Option<BetweenTurnsReport>, AgentError> {
        let session_id = request.session_id.as_str();
        let session = self.store.session(session_id).await?;
        let (settings, tools, over_budget) = self
            .frame(
                session_id,
                session.as_ref(),
                request.user_id.as_deref(),
                &request.options,
            )
            .await?;
        if over_budget.is_some() {
            return Ok(None);
        }
        let history = self.store.context_messages(session_id).await?;
        let mut run = Run::between_turns(
            holder,
            session_id,
            settings,
            tools,
            history,
            self.clock.now(),
        );
        let mut step = run.compact_between_turns(request.above);
        let emitter = Emitter::new(self.sinks.clone(), self.clock.clone(), holder, session_id);
        let cancel = request.cancel.clone();
        let driver = self.driver(&emitter, &cancel, request.user_id.clone());
        while let Step::Summarize(call) = step {
            let result = tokio::select! {
                result = driver.call_model(0, call, &NoDeltas, false) => result,
                _ = cancel.cancelled() => return Ok(None),
                lost = self.keep_lane(request, holder) => return Err(lost.into()),
            };
            step = run.on_summary(result);
        }
        let events = run.drain_events();
        let Some((before_tokens, after_tokens)) = events.iter().find_map(|kind| match kind {
            EventKind::CompactionRun {
                before_tokens,
                after_tokens,
                summary_failed: false,
                ..
            } => Some((*before_tokens, *after_tokens)),
            _ => None,
        }) else {
            // No summary, or only the note a failed one leaves: the next run tries again.
            return Ok(None);
        };
        let messages = run.unpersisted();
        let Some(summary_of) = messages.iter().find_map(|message| message.meta.summary_of) else {
            return Ok(None);
        };
        self.store
            .append_messages(session_id, Some(holder), &messages)
            .await?;
        for kind in events {
            emitter.emit(kind);
        }
        Ok(Some(BetweenTurnsReport {
            session_id: session_id.to_string(),
            holder: holder.to_string(),
            summary_of,
            before_tokens,
            after_tokens,
            usage: run.usage(),
        }))
    }

    /// Claims the session's lane for `holder`; false when a run holds it.
    async fn claim_lane(&self, request: &BetweenTurns, holder: &str) -> Result<bool, StoreError> {
        let claim = LaneClaim {
            session_id: &request.session_id,
            run_id: holder,
            worker: &request.worker,
            at: self.clock.now(),
            stale_after: chrono::Duration::from_std(request.stale_after)
                .unwrap_or(chrono::Duration::MAX),
        };
        Ok(matches!(
            self.store.claim_session(&claim).await?,
            LaneOutcome::Claimed
        ))
    }

    /// Renews the lane claim every third of `stale_after` while the summary is made; returns
    /// when another run took the lane.
    async fn keep_lane(&self, request: &BetweenTurns, holder: &str) -> StoreError {
        let every = (request.stale_after / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match self.claim_lane(request, holder).await {
                Ok(true) => {}
                Ok(false) => {
                    return StoreError::LaneLost {
                        run_id: holder.to_string(),
                        session_id: request.session_id.clone(),
                        holder: String::new(),
                    };
                }
                Err(error) => tracing::warn!(%error, holder, "cannot renew the lane claim"),
            }
        }
    }
}
