//! Where a conversation's time goes: a [`Provider`] wrapper stamps when each model call starts
//! and returns, into the timeline of the conversation it runs in (a task-local), so the time
//! between a call's return and the next call's start — the loop's own work — can be told apart
//! from the model's.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use keel_core::{ChatRequest, ChatResponse, DeltaSink, Provider, ProviderError};

tokio::task_local! {
    static TIMELINE: RefCell<Vec<(Instant, Instant)>>;
}

/// A provider that times each call of the provider it wraps into the current conversation's
/// timeline (see [`timed`]); outside a conversation it only passes calls on.
pub struct TimedProvider {
    inner: Arc<dyn Provider>,
}

impl TimedProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>) -> TimedProvider {
        TimedProvider { inner }
    }
}

#[async_trait]
impl Provider for TimedProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        let started = Instant::now();
        let answer = self.inner.chat(request, sink).await;
        let returned = Instant::now();
        let _ = TIMELINE.try_with(|calls| calls.borrow_mut().push((started, returned)));
        answer
    }
}

/// One conversation's timing: when it started and ended, and each model call's start and
/// return in between.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// When the conversation was handed to the agent.
    pub started: Instant,
    /// When the agent returned.
    pub ended: Instant,
    /// (start, return) of each model call, in order.
    pub calls: Vec<(Instant, Instant)>,
}

impl Timeline {
    /// The loop's own time in each iteration (one model call and what follows it): from the
    /// previous call's return (the start, for the first) to this call's start; the last one
    /// also gets the time from its call's return to the end.
    pub fn overheads(&self) -> Vec<Duration> {
        let mut previous = self.started;
        let mut gaps: Vec<Duration> = self
            .calls
            .iter()
            .map(|&(start, returned)| {
                let gap = start.saturating_duration_since(previous);
                previous = returned;
                gap
            })
            .collect();
        if let Some(last) = gaps.last_mut() {
            *last += self.ended.saturating_duration_since(previous);
        }
        gaps
    }

    /// How long each model call took, as the loop saw it.
    pub fn model_times(&self) -> impl Iterator<Item = Duration> + '_ {
        self.calls
            .iter()
            .map(|&(start, returned)| returned.saturating_duration_since(start))
    }

    /// From start to end.
    pub fn wall(&self) -> Duration {
        self.ended.saturating_duration_since(self.started)
    }
}

/// Runs `conversation` with a timeline of its own and returns its output and timeline.
pub async fn timed<T>(conversation: impl Future<Output = T>) -> (T, Timeline) {
    TIMELINE
        .scope(RefCell::new(Vec::new()), async {
            let started = Instant::now();
            let output = conversation.await;
            let ended = Instant::now();
            let calls = TIMELINE.with(|calls| calls.take());
            (
                output,
                Timeline {
                    started,
                    ended,
                    calls,
                },
            )
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads_are_the_gaps_between_model_calls() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let timeline = Timeline {
            started: t0,
            ended: at(100),
            calls: vec![(at(1), at(31)), (at(33), at(63)), (at(66), at(96))],
        };
        let ms = |d: Duration| d.as_millis() as u64;
        assert_eq!(
            timeline.overheads().into_iter().map(ms).collect::<Vec<_>>(),
            [1, 2, 3 + 4]
        );
        assert_eq!(timeline.model_times().map(ms).collect::<Vec<_>>(), [30; 3]);
        assert_eq!(ms(timeline.wall()), 100);
    }

    #[tokio::test]
    async fn a_timed_conversation_collects_its_own_calls_only() {
        let provider = TimedProvider::new(Arc::new(keel_mock::ScriptedProvider::from_steps(vec![
            keel_mock::Step::text("hi").repeat_forever(),
        ])));
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![keel_core::Message::user("q").into()],
            tools: Vec::new().into(),
            tool_choice: keel_core::ToolChoice::Auto,
            max_tokens: None,
            temperature: None,
            stream: false,
        };
        let call = || provider.chat(&request, &keel_core::NoDeltas);
        // Outside a conversation nothing is recorded (and nothing fails).
        call().await.unwrap();
        let ((), timeline) = timed(async {
            call().await.unwrap();
            call().await.unwrap();
        })
        .await;
        assert_eq!(timeline.calls.len(), 2);
        assert_eq!(timeline.overheads().len(), 2);
    }
}
