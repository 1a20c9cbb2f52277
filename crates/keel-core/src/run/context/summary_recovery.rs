//! When a compaction's summary call fails: the classified retries and the fallback chain of
//! the run's own calls ([`recovery::decide`]), from the summary model on through the run's
//! chain (seed 004's auxiliary-task chains). Only when every model of it has failed does the
//! summary become the deterministic truncation note, so a flaky summary model no longer drops
//! what a retry or the next model would have summarized.

use std::time::Duration;

use super::{PendingSummary, Run, Step};
use crate::event::EventKind;
use crate::provider_error::ProviderError;
use crate::recovery::{self, Recovery};
use crate::run_settings::ModelTarget;

impl Run {
    /// The models a summary is asked of, in order: the summary model when one is set, then
    /// the run's chain from the model it is on; each once.
    pub(super) fn summary_chain(&self) -> Vec<ModelTarget> {
        let mut chain: Vec<ModelTarget> = self
            .settings
            .context
            .summary_model
            .iter()
            .cloned()
            .collect();
        let rest = &self.chain[self.chain_index.min(self.chain.len().saturating_sub(1))..];
        for target in rest {
            if !chain.contains(target) {
                chain.push(target.clone());
            }
        }
        chain
    }

    /// After the summary call of `pending` failed with `error`: the same call again after a
    /// wait, or to the next model of the summary's chain (`Some`), or `None` when the error
    /// or the chain's end says to give up.
    pub(super) fn recover_summary(
        &mut self,
        pending: &mut PendingSummary,
        error: &ProviderError,
    ) -> Option<Step> {
        let current = pending.chain.get(pending.chain_index)?.clone();
        let next = pending.chain.get(pending.chain_index + 1).cloned();
        let jitter = self.next_jitter();
        let decision = recovery::decide(
            error,
            pending.retries,
            next.is_some(),
            &self.settings.retry,
            jitter,
        );
        match decision {
            Recovery::Retry { wait } => {
                pending.retries += 1;
                self.events.push(EventKind::ProviderRetry {
                    iteration: self.iteration,
                    model: current.to_string(),
                    attempt: pending.retries,
                    wait_ms: wait.as_millis() as u64,
                    kind: error.kind,
                });
                pending.call.wait = wait;
                Some(Step::Summarize(pending.call.clone()))
            }
            // A summary input too long for this model may fit the next one's window.
            Recovery::Fallback | Recovery::ContextOverflow => {
                let next = next?;
                pending.chain_index += 1;
                pending.retries = 0;
                self.events.push(EventKind::ProviderFallback {
                    iteration: self.iteration,
                    from: current.to_string(),
                    to: next.to_string(),
                    kind: error.kind,
                });
                pending.call.provider = next.provider;
                pending.call.request.model = next.model;
                pending.call.wait = Duration::ZERO;
                Some(Step::Summarize(pending.call.clone()))
            }
            Recovery::Fail(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use serde_json::json;

    use super::*;
    use crate::context::ContextSettings;
    use crate::message::{Message, ToolCall};
    use crate::provider::{ChatResponse, StopReason, Usage};
    use crate::provider_error::ProviderErrorKind;
    use crate::run::ModelCall;
    use crate::run_settings::RunSettings;
    use crate::tool::ToolSpec;

    /// A run whose first step is a summary: eight reads of ~200 tokens in a 2000-token window.
    fn run(summary_model: Option<ModelTarget>, fallbacks: &[(&str, &str)]) -> Run {
        let mut settings = RunSettings::new("primary", "m1");
        settings.fallbacks = fallbacks
            .iter()
            .map(|(provider, model)| ModelTarget::new(*provider, *model))
            .collect();
        settings.context = ContextSettings {
            window: Some(2000),
            keep_last: 4,
            deep_keep: 2,
            summary_model,
            ..ContextSettings::default()
        };
        settings.max_iterations = 100;
        let mut history = vec![Message::user("research the files")];
        for i in 0..8 {
            history.push(Message::assistant_with_calls(
                "",
                vec![ToolCall {
                    id: format!("c{i}"),
                    name: "read".into(),
                    arguments: format!(r#"{{"path":"f{i}"}}"#),
                }],
            ));
            history.push(Message::tool_result(
                format!("c{i}"),
                format!("f{i}w:{}", " word".repeat(200)),
            ));
        }
        Run::new(
            "r",
            "s",
            settings,
            vec![ToolSpec::new("read", "reads", json!({"type": "object"}))],
            Run::history(history),
            Message::user("go on"),
            DateTime::from_timestamp(0, 0).unwrap(),
        )
    }

    fn summarize(step: Step) -> ModelCall {
        match step {
            Step::Summarize(call) => call,
            other => panic!("expected a summary call, got {other:?}"),
        }
    }

    fn model_call(step: Step) -> ModelCall {
        match step {
            Step::CallModel(call) => call,
            other => panic!("expected a model call, got {other:?}"),
        }
    }

    fn target(call: &ModelCall) -> (&str, &str) {
        (call.provider.as_str(), call.request.model.as_str())
    }

    fn summary(text: &str, model: &str) -> ChatResponse {
        ChatResponse {
            message: Message::assistant(text),
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 50,
                output_tokens: 20,
                ..Usage::default()
            },
            model: model.into(),
        }
    }

    fn cheap() -> Option<ModelTarget> {
        Some(ModelTarget::new("aux", "cheap"))
    }

    #[test]
    fn a_rate_limited_summary_waits_as_asked_and_the_retry_succeeds() {
        let mut run = run(cheap(), &[]);
        let first = summarize(run.start());
        assert_eq!(target(&first), ("aux", "cheap"));
        let limited = ProviderError::new(ProviderErrorKind::RateLimit, "slow down")
            .with_status(429)
            .with_retry_after(Duration::from_secs(7));
        let retry = summarize(run.on_summary(Err(limited)));
        assert_eq!(target(&retry), ("aux", "cheap"));
        assert_eq!(retry.wait, Duration::from_secs(7));
        assert_eq!(retry.request.messages, first.request.messages);
        assert!(run.drain_events().iter().any(|e| matches!(
            e,
            EventKind::ProviderRetry { model, attempt: 1, .. } if model == "aux:cheap"
        )));
        let next = model_call(run.on_summary(Ok(summary("Summary: eight files read.", "cheap"))));
        let sent = &next.request.messages[0].content;
        assert!(sent.contains("Summary: eight files read."), "{sent}");
        assert!(!sent.contains("were dropped"), "{sent}");
        assert!(run.drain_events().iter().any(|e| matches!(
            e,
            EventKind::CompactionRun {
                summary_failed: false,
                ..
            }
        )));
    }

    #[test]
    fn a_summary_model_that_stays_down_falls_back_to_the_runs_chain() {
        let mut run = run(cheap(), &[("backup", "m2")]);
        assert_eq!(
            run.summary_chain(),
            [
                ModelTarget::new("aux", "cheap"),
                ModelTarget::new("primary", "m1"),
                ModelTarget::new("backup", "m2"),
            ]
        );
        summarize(run.start());
        let down = || ProviderError::new(ProviderErrorKind::Server, "aux down").with_status(503);
        // Two retries of the summary model, as for the run's own calls...
        summarize(run.on_summary(Err(down())));
        summarize(run.on_summary(Err(down())));
        // ...then the next model of the chain: the run's own.
        let fallback = summarize(run.on_summary(Err(down())));
        assert_eq!(target(&fallback), ("primary", "m1"));
        assert_eq!(fallback.wait, Duration::ZERO);
        assert!(run.drain_events().iter().any(|e| matches!(
            e,
            EventKind::ProviderFallback { from, to, .. }
                if from == "aux:cheap" && to == "primary:m1"
        )));
        // A missing model goes on to the next at once.
        let missing =
            ProviderError::new(ProviderErrorKind::ModelNotFound, "no m1").with_status(404);
        let last = summarize(run.on_summary(Err(missing)));
        assert_eq!(target(&last), ("backup", "m2"));
        let next = model_call(run.on_summary(Ok(summary("Summary by m2.", "m2"))));
        assert!(next.request.messages[0].content.contains("Summary by m2."));
        // The main chain is where it was: the run's next call goes to its own model.
        assert_eq!(target(&next), ("primary", "m1"));
    }

    #[test]
    fn a_resumed_run_makes_the_summary_call_it_had_moved_on_to() {
        let mut run = run(cheap(), &[]);
        summarize(run.start());
        let missing = ProviderError::new(ProviderErrorKind::ModelNotFound, "gone").with_status(404);
        let fallback = summarize(run.on_summary(Err(missing)));
        assert_eq!(target(&fallback), ("primary", "m1"));
        let pending = run.pending_summary.clone().unwrap();
        let state = serde_json::to_value(&pending).unwrap();
        let back: PendingSummary = serde_json::from_value(state).unwrap();
        assert_eq!(back.call, fallback);
        assert_eq!((back.chain_index, back.retries), (1, 0));
    }

    #[test]
    fn only_a_chain_that_fails_whole_leaves_the_truncation_note() {
        let mut run = run(None, &[]);
        assert_eq!(run.summary_chain(), [ModelTarget::new("primary", "m1")]);
        summarize(run.start());
        // Invalid requests are not retried, and there is no other model.
        let invalid = ProviderError::new(ProviderErrorKind::InvalidRequest, "bad").with_status(400);
        let next = model_call(run.on_summary(Err(invalid)));
        assert!(next.request.messages[0].content.contains("were dropped"));
    }
}
