//! The run's [`ContextStrategy`] at work: the kernel finds the rung of the recovery ladder,
//! shows the strategy a [`ContextView`] of the run, and carries out its [`Decision`] (after the
//! memory flush when messages are to leave the context). See [`crate::context_strategy`].

use super::{Run, Step, Then, Tier};
use crate::context;
use crate::context_strategy::{Action, ContextStrategy, ContextView, Decision, Rung};
use crate::event::EventKind;

impl Run {
    /// The strategy that decides for this run (see [`crate::context_strategy`]).
    pub(super) fn strategy(&self) -> &dyn ContextStrategy {
        self.settings.context.context_strategy()
    }

    /// Where the ladder stands: R3 when an R2 fired within `recovery_gap` iterations, R2 when
    /// an R1 did, else R1.
    fn rung(&self) -> Rung {
        let gap = self.settings.context.recovery_gap;
        let recent =
            |at: Option<u32>| at.is_some_and(|at| self.iteration.saturating_sub(at) <= gap);
        if recent(self.ladder.last_r2) {
            Rung::AskHuman
        } else if recent(self.ladder.last_r1) {
            Rung::DeepPrune
        } else {
            Rung::Compact
        }
    }

    /// What the strategy decides at `rung`, shown the run as it is.
    fn decide(&self, rung: Rung) -> Decision {
        let tokens_from = |until: usize| {
            let (start, kept) = self.dropped_to(until);
            self.tokens_from(start, &kept)
        };
        let view = ContextView {
            messages: &self.messages,
            counts: &self.counts,
            start: self.context_start,
            summary: self.summary_index,
            kept: &self.kept,
            rung,
            window: self.window(),
            threshold: self.threshold(),
            settings: &self.settings.context,
            state: &self.context_state,
            tokens_from: &tokens_from,
        };
        self.strategy().decide(&view)
    }

    /// Climbs the ladder one rung, as the strategy decides; `None` when the run can go on
    /// without a model call.
    pub(in crate::run) fn recover(&mut self) -> Option<Step> {
        let rung = self.rung();
        let mut decision = self.decide(rung);
        if matches!(
            decision.action,
            Action::Summarize { .. } | Action::Drop { .. }
        ) {
            // Messages are about to leave the context: the model saves what it must first.
            let flushed = self.flushing();
            if let Some(step) = self.flush_before_compaction() {
                return Some(step);
            }
            if flushed {
                // The flush turn is over, and its request is no longer sent: decide anew.
                decision = self.decide(rung);
            }
        }
        let Decision { action, state } = decision;
        if let Some(state) = state {
            self.context_state = state;
        }
        match action {
            Action::Nothing => {
                self.reset_flush();
                None
            }
            // Between turns nobody is there to ask: the next run climbs the ladder itself.
            Action::AskHuman if self.between_turns => None,
            Action::AskHuman => self.ask_for_help(),
            Action::Drop { until } => {
                self.slide(until);
                self.reset_flush();
                None
            }
            Action::Summarize { until } => {
                let tier = if rung == Rung::Compact {
                    Tier::R1
                } else {
                    Tier::R2
                };
                if self.between_turns {
                    return self.summarize(tier, Then::Finish, "between_turns", until);
                }
                self.summarize(tier, Then::NextCall, "threshold", until)
                    .or_else(|| self.ask_for_help())
            }
        }
    }

    /// Where the live context starts, and the pinned messages kept before it, once it is
    /// dropped before `until`: exchange by exchange (see [`crate::context_strategy::next_start`]),
    /// never the last message, keeping the pinned exchanges of what goes.
    fn dropped_to(&self, until: usize) -> (usize, Vec<usize>) {
        let last = self.messages.len().saturating_sub(1);
        let mut start = self.context_start;
        let mut kept = self.kept.clone();
        while start < until && start < last {
            let from = start;
            start = crate::context_strategy::next_start(&self.messages, start);
            kept.extend(context::pinned_exchanges(&self.messages, from..start));
        }
        (start, kept)
    }

    /// Drops the live context before `until` (see [`Run::dropped_to`]): the sliding window's
    /// way, with no model call.
    fn slide(&mut self, until: usize) {
        let (before_tokens, before_messages) = (self.context_tokens(), self.context_len());
        (self.context_start, self.kept) = self.dropped_to(until);
        self.refresh_notes();
        self.ladder.recoveries += 1;
        self.events.push(EventKind::CompactionRun {
            strategy: self.strategy().name().into(),
            before_tokens,
            after_tokens: self.context_tokens(),
            before_messages,
            after_messages: self.context_len(),
            pinned: 0,
            summary_failed: false,
        });
    }
}
