//! The run's context: what part of the transcript the model sees, and the recovery ladder that
//! keeps it under the window (DESIGN.md section 6, seed 001).
//!
//! - R1, compaction: when the estimate crosses `compact_threshold` of the window, everything but
//!   the last `keep_last` messages is summarized by one model call, with the latest successful
//!   result of each tool pinned into the summary. If that call fails, the messages are dropped
//!   with a deterministic note instead, so work never stalls.
//! - R2, deep prune: still over within `recovery_gap` iterations of R1 — the same, keeping only
//!   the last `deep_keep` messages, marked "deep pruned". A provider's context-overflow error
//!   fires R2 at once and the call is retried once.
//! - R3: still over within `recovery_gap` iterations of R2 — the model must ask the human
//!   where one can answer; otherwise the run stops as `error: context_exhausted`.
//!
//! At most `max_recoveries` fire in one turn. Nothing is ever removed from the transcript: a
//! summary is stored as an internal message that names the seqs it stands in for.
//!
//! The ladder, and carrying out a decision, are the kernel's; what to do at a rung is the
//! run's [context strategy](crate::context_strategy)'s: compaction summarizes as above, the
//! sliding window drops the oldest exchanges instead and never asks the human, and a library
//! user's strategy decides as it likes (see [`strategy`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ModelCall, Run, Step};
use crate::context::{self, ContextPieces};
use crate::event::EventKind;
use crate::message::{InternalReason, Message, Role, SeqRange};
use crate::provider::{ChatRequest, ChatResponse, ToolChoice};
use crate::provider_error::ProviderError;
use crate::state::{AgentState, ErrorReason};
use crate::tokens;

mod strategy;
mod summary_recovery;

/// The question R3 makes the model put to the human (seed 001).
pub const CONTEXT_HELP_QUESTION: &str = "I've made progress but I'm losing context faster than \
I can recover. Keep going, change direction, or stop?";

/// Where the run stands on the recovery ladder this turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Ladder {
    recoveries: u32,
    last_r1: Option<u32>,
    last_r2: Option<u32>,
    overflow_retried: bool,
}

/// Which summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Tier {
    R1,
    R2,
}

/// What to do once a summary is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Then {
    /// Go on to the next model call.
    NextCall,
    /// Retry the call the provider refused as too long.
    RetryCall,
    /// Stop: a compaction between turns, with no call after it (see `super::between_turns`).
    Finish,
}

/// A summary call in flight.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct PendingSummary {
    /// The call, kept so a resumed run can make it again.
    pub(super) call: ModelCall,
    tier: Tier,
    then: Then,
    reason: String,
    cut: usize,
    first_seq: u64,
    pinned: Vec<(String, String, String)>,
    summarized: usize,
    before_tokens: u64,
    before_messages: usize,
    /// The models the summary may be asked of, in order, where it is among them, and the
    /// retries spent on that one (see [`Run::recover_summary`]); none in older checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    chain: Vec<crate::run_settings::ModelTarget>,
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    chain_index: usize,
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    retries: u32,
}

impl Run {
    /// Places the context after loading: it starts after what the latest stored summary
    /// stands in for.
    pub(super) fn resume_context(&mut self) {
        let latest = (0..self.messages.len())
            .rev()
            .find(|&i| self.messages[i].meta.summary_of.is_some());
        if let Some(index) = latest {
            let last = self.messages[index]
                .meta
                .summary_of
                .map_or(0, |range| range.last);
            self.summary_index = Some(index);
            self.context_start = (0..self.messages.len())
                .find(|&i| self.seq_of(i) > last)
                .unwrap_or(self.messages.len());
            // What the store loaded of the replaced messages are the pinned ones (and those
            // between them): the pinned ones stay.
            self.keep_pinned(0, self.context_start);
        }
    }

    /// The seq a message has (or will have) in the store.
    pub(super) fn seq_of(&self, index: usize) -> u64 {
        match self.seqs.get(index) {
            Some(seq) => *seq,
            None => self.next_seq + (index - self.seqs.len()) as u64,
        }
    }

    /// The window of the model the next call goes to.
    pub(super) fn window(&self) -> u32 {
        self.settings.context.window_for(&self.current().model)
    }

    /// The indices of the messages sent verbatim, in order: the first user message when the
    /// sliding window dropped it, then everything from the context start but summaries and
    /// the requests of flush turns that are over.
    fn verbatim(&self) -> impl Iterator<Item = usize> + '_ {
        self.verbatim_from(self.context_start, &self.kept)
    }

    /// [`Run::verbatim`] were the live context to start at `start`, with the pinned messages
    /// `kept` from before it.
    fn verbatim_from<'a>(
        &'a self,
        start: usize,
        kept: &'a [usize],
    ) -> impl Iterator<Item = usize> + 'a {
        let keeps_first = self.strategy().keeps_first_user();
        let first = self.first_user.filter(|&i| {
            // Unless it is a pinned one, kept anyway.
            i < start && keeps_first && kept.binary_search(&i).is_err()
        });
        let spent_flush = |message: &Message| {
            message.meta.internal == Some(InternalReason::MemoryFlush) && !self.flushing()
        };
        // The pinned messages kept from before the context start, in order with the first
        // user message.
        let split = first.map_or(kept.len(), |first| {
            kept.partition_point(|&kept| kept < first)
        });
        kept[..split]
            .iter()
            .copied()
            .chain(first)
            .chain(kept[split..].iter().copied())
            .chain((start..self.messages.len()).filter(move |&i| {
                !context::is_summary(&self.messages[i]) && !spent_flush(&self.messages[i])
            }))
    }

    /// Appends the messages the model sees to `request`: the summary, then the verbatim part,
    /// with oversized arguments and results cut (see [`context::clip_for_request`]), the run's
    /// message with its turn context before it (see [`super::turn`]). When the run's message
    /// is no longer sent (a compaction summarized it), the turn context follows the summary.
    pub(super) fn add_context_messages(&self, request: &mut Vec<Arc<Message>>) {
        let window = self.first_window();
        let summary = self.summary_index.map(|i| self.messages[i].clone());
        let after_summary = request.len() + usize::from(summary.is_some());
        let with_context = std::cell::Cell::new(false);
        request.extend(summary.into_iter().chain(self.verbatim().map(|i| {
            let message = &self.messages[i];
            if let Some(sent) = self.with_turn_context(i, message) {
                with_context.set(true);
                return Arc::new(sent);
            }
            let limit = context::sent_share(window, self.calls_sharing(i, message));
            context::clip_for_request(message, limit).map_or_else(|| message.clone(), Arc::new)
        })));
        if !with_context.get()
            && let Some(context) = self.turn_context_message()
        {
            request.insert(after_summary, Arc::new(context));
        }
    }

    /// Counts `message`, about to be appended, once: it keeps the count of its whole self, and
    /// the count returned is of what a request carries of it.
    pub(super) fn count_sent(&self, message: &mut Message) -> u32 {
        let whole = tokens::cache_tokens(self.encoding, message);
        let limit = self.sent_limit(self.messages.len(), message);
        context::clip_for_request(message, limit)
            .map_or(whole, |sent| tokens::message_tokens(self.encoding, &sent))
    }

    /// The characters each call's arguments or result may take in a request, for `message`
    /// at `index`: its answer's share of the run's window. The run's first model sets the
    /// window, so the count taken at [`Run::push`] and the request always agree.
    pub(super) fn sent_limit(&self, index: usize, message: &Message) -> usize {
        context::sent_share(self.first_window(), self.calls_sharing(index, message))
    }

    /// How many calls share the window with `message` at `index`: its own calls, or for a tool
    /// result the calls of the answer it belongs to.
    fn calls_sharing(&self, index: usize, message: &Message) -> usize {
        match message.role {
            Role::Tool => self.messages[..index]
                .iter()
                .rev()
                .find(|m| m.role != Role::Tool)
                .map_or(1, |m| m.tool_calls.len()),
            _ => message.tool_calls.len(),
        }
    }

    /// The run's first model's window, which sets what each message may carry.
    fn first_window(&self) -> u32 {
        self.settings.context.window_for(&self.settings.model)
    }

    /// Estimated tokens of the next request (before ephemeral layers).
    pub fn context_tokens(&self) -> u64 {
        self.tokens_from(self.context_start, &self.kept)
    }

    /// [`Run::context_tokens`] were the live context to start at `start` with `kept`.
    fn tokens_from(&self, start: usize, kept: &[usize]) -> u64 {
        let summary = self.summary_index.map_or(0, |i| u64::from(self.counts[i]));
        u64::from(self.fixed_tokens)
            + u64::from(self.turn.tokens)
            + summary
            + self
                .verbatim_from(start, kept)
                .map(|i| u64::from(self.counts[i]))
                .sum::<u64>()
    }

    /// What the next request is built from, piece by piece.
    pub(super) fn context_pieces(&self) -> ContextPieces {
        let system_prompt_tokens = self.settings.system_prompt.as_deref().map_or(0, |prompt| {
            u64::from(self.encoding.count_repeated(prompt) + tokens::MESSAGE_OVERHEAD)
        });
        let last = self.messages.len().checked_sub(1);
        let (history_messages, history_tokens) = self
            .verbatim()
            .filter(|&i| Some(i) != last)
            .fold((0, 0), |(n, sum), i| {
                (n + 1, sum + u64::from(self.counts[i]))
            });
        ContextPieces {
            system_prompt_tokens,
            tools_tokens: u64::from(self.fixed_tokens).saturating_sub(system_prompt_tokens),
            facts_tokens: u64::from(self.turn.tokens),
            summary_tokens: self.summary_index.map_or(0, |i| u64::from(self.counts[i])),
            history_messages,
            history_tokens,
            message_tokens: last.map_or(0, |i| u64::from(self.counts[i])),
            total_tokens: self.context_tokens(),
        }
    }

    fn context_len(&self) -> usize {
        usize::from(self.summary_index.is_some()) + self.verbatim().count()
    }

    fn threshold(&self) -> u64 {
        (f64::from(self.window()) * self.settings.context.compact_threshold) as u64
    }

    /// Before a model call: keeps the context under the threshold. Returns the step to take
    /// instead of the call (a summary, or the end of the run), or `None` to go on. Adds a
    /// context-pressure warning layer when the context stays close to full.
    pub(super) fn fit_context(&mut self) -> Option<Step> {
        let window = self.window();
        if self.fixed_tokens >= window {
            // Nothing a summary can drop would help: say so before any call.
            return Some(self.fail(
                AgentState::Error,
                Some(ErrorReason::ContextExhausted),
                format!(
                    "{}'s context window ({window} tokens) is smaller than the prompt sent with \
                     every call: the system prompt and tool definitions take {} tokens. Use a \
                     larger window (--context-window), a shorter system prompt or fewer tools.",
                    self.current().model,
                    self.fixed_tokens
                ),
            ));
        }
        let threshold = self.threshold();
        let estimate = self.context_tokens();
        let can_recover = self.ladder.recoveries < self.settings.context.max_recoveries;
        if estimate > threshold && can_recover {
            if let Some(step) = self.recover() {
                return Some(step);
            }
        } else {
            self.reset_flush();
        }
        let estimate = self.context_tokens();
        if estimate * 10 >= threshold * 9 {
            let percent = estimate * 100 / u64::from(self.window().max(1));
            self.warnings.push(format!(
                "Context notice: this conversation fills about {percent}% of the model's context \
                 window. Be brief, avoid reading large files whole, and finish soon."
            ));
        }
        None
    }

    /// After a provider said the prompt is too long: R2 and one retry, else the end.
    pub(super) fn on_context_overflow(&mut self, error: &ProviderError) -> Step {
        if !self.ladder.overflow_retried {
            self.ladder.overflow_retried = true;
            let keep = self.settings.context.deep_keep;
            let until = context::cut_point(&self.messages, self.context_start, keep);
            if let Some(step) = self.summarize(Tier::R2, Then::RetryCall, "context_overflow", until)
            {
                return step;
            }
        }
        self.fail(
            AgentState::Error,
            Some(ErrorReason::ContextExhausted),
            format!(
                "the conversation no longer fits {}'s context window: {error}",
                self.current().model
            ),
        )
    }

    /// Starts a summary of the live context before `until` (moved back rather than split a
    /// tool call from its results); `None` when there is nothing to summarize.
    fn summarize(&mut self, tier: Tier, then: Then, reason: &str, until: usize) -> Option<Step> {
        let mut cut = until.clamp(self.context_start, self.messages.len());
        while cut > self.context_start
            && self.messages.get(cut).is_some_and(|m| m.role == Role::Tool)
        {
            cut -= 1;
        }
        // Pinned messages are kept as they are, never summarized.
        let pinned = context::pinned_exchanges(&self.messages, self.context_start..cut);
        let head: Vec<usize> = (self.context_start..cut)
            .filter(|&i| !context::is_summary(&self.messages[i]))
            .filter(|i| pinned.binary_search(i).is_err())
            .collect();
        if head.is_empty() {
            return None;
        }
        self.ladder.recoveries += 1;
        match tier {
            Tier::R1 => self.ladder.last_r1 = Some(self.iteration),
            Tier::R2 => self.ladder.last_r2 = Some(self.iteration),
        }
        let head_messages: Vec<&Message> = head.iter().map(|&i| &*self.messages[i]).collect();
        let pinned = context::pinned_results(&head_messages);
        let previous = self.summary_index.map(|i| &*self.messages[i]);
        let input = context::summary_input(previous, &head_messages, &pinned);
        let first_seq = previous
            .and_then(|summary| summary.meta.summary_of)
            .map_or(self.seq_of(head[0]), |range| range.first);
        let chain = self.summary_chain();
        let target = chain
            .first()
            .cloned()
            .unwrap_or_else(|| self.current().clone());
        let call = ModelCall {
            provider: target.provider,
            request: ChatRequest {
                model: target.model,
                messages: vec![
                    Message::system(context::SUMMARY_INSTRUCTIONS).into(),
                    Message::user(input).into(),
                ],
                tools: Vec::new().into(),
                tool_choice: ToolChoice::Auto,
                max_tokens: Some(self.settings.context.summary_max_tokens),
                temperature: None,
                stream: false,
            },
            wait: Duration::ZERO,
        };
        self.pending_summary = Some(PendingSummary {
            call: call.clone(),
            tier,
            then,
            reason: reason.to_string(),
            cut,
            first_seq,
            pinned,
            summarized: head.len(),
            before_tokens: self.context_tokens(),
            before_messages: self.context_len(),
            chain,
            chain_index: 0,
            retries: 0,
        });
        Some(Step::Summarize(call))
    }

    /// Feeds back the summary (or its failure) of the last [`Step::Summarize`] and returns the
    /// next step. A failed summary becomes a deterministic note: the context shrinks anyway.
    pub fn on_summary(&mut self, result: Result<ChatResponse, ProviderError>) -> Step {
        self.boundary = crate::checkpoint::Boundary::Compaction;
        let step = self.apply_summary(result);
        self.remember(step)
    }

    fn apply_summary(&mut self, result: Result<ChatResponse, ProviderError>) -> Step {
        let Some(mut pending) = self.pending_summary.take() else {
            return self.next_model_call();
        };
        let (text, failed) = match result {
            Ok(response) => {
                self.charge(&response);
                let text = response.message.content.trim().to_string();
                if text.is_empty() {
                    (self.truncation_note(&pending, "it answered nothing"), true)
                } else {
                    (text, false)
                }
            }
            Err(error) => {
                // Retried, or asked of the next model, as the run's own calls are.
                if let Some(step) = self.recover_summary(&mut pending, &error) {
                    self.pending_summary = Some(pending);
                    return step;
                }
                (self.truncation_note(&pending, &error.to_string()), true)
            }
        };
        let last_seq = self.seq_of(pending.cut - 1);
        let header = match pending.tier {
            Tier::R1 => format!(
                "Summary of the earlier conversation (messages {}–{last_seq}):",
                pending.first_seq
            ),
            Tier::R2 => format!(
                "[deep pruned] Summary of the earlier conversation (messages {}–{last_seq}):",
                pending.first_seq
            ),
        };
        let mut summary = Message::internal_user(
            format!(
                "{header}\n{text}{}",
                context::pinned_section(&pending.pinned)
            ),
            InternalReason::CompactionSummary,
        );
        summary.meta.summary_of = Some(SeqRange {
            first: pending.first_seq,
            last: last_seq,
        });
        self.push(summary);
        self.summary_index = Some(self.messages.len() - 1);
        self.keep_pinned(self.context_start, pending.cut);
        self.context_start = pending.cut;
        // The prefix changed anyway: the journal and task list are shown as they are now.
        self.refresh_notes();
        self.reset_flush();
        let (after_tokens, after_messages) = (self.context_tokens(), self.context_len());
        self.events.push(match pending.tier {
            Tier::R1 => EventKind::CompactionRun {
                strategy: self.strategy().name().into(),
                before_tokens: pending.before_tokens,
                after_tokens,
                before_messages: pending.before_messages,
                after_messages,
                pinned: pending.pinned.len(),
                summary_failed: failed,
            },
            Tier::R2 => EventKind::RecoveryFired {
                tier: "r2".into(),
                reason: pending.reason.clone(),
                before_tokens: pending.before_tokens,
                after_tokens,
                before_messages: pending.before_messages,
                after_messages,
            },
        });
        match pending.then {
            Then::NextCall => self.next_model_call(),
            Then::RetryCall => Step::CallModel(self.model_call(Duration::ZERO)),
            Then::Finish => Step::Finish,
        }
    }

    fn truncation_note(&self, pending: &PendingSummary, why: &str) -> String {
        format!(
            "[{} earlier messages were dropped from the context: the summary model failed ({why}). \
             The pinned results below are what they found.]",
            pending.summarized
        )
    }

    /// R3: the model must ask the human, or the run ends when no human can answer.
    fn ask_for_help(&mut self) -> Option<Step> {
        self.ladder.recoveries += 1;
        let (tokens, messages) = (self.context_tokens(), self.context_len());
        self.events.push(EventKind::RecoveryFired {
            tier: "r3".into(),
            reason: "threshold".into(),
            before_tokens: tokens,
            after_tokens: tokens,
            before_messages: messages,
            after_messages: messages,
        });
        if self.settings.human_reachable && self.tools.iter().any(|t| t.name == "ask_human") {
            self.push(Message::internal_user(
                format!("Call ask_human now with this question: {CONTEXT_HELP_QUESTION}"),
                InternalReason::LoopNudge,
            ));
            self.next_tool_choice = Some(ToolChoice::Tool("ask_human".into()));
            return None;
        }
        Some(self.fail(
            AgentState::Error,
            Some(ErrorReason::ContextExhausted),
            format!(
                "Stopped: the conversation keeps outgrowing the model's context window ({} \
                 tokens) even after summarizing twice. {CONTEXT_HELP_QUESTION}",
                self.window()
            ),
        ))
    }
}
