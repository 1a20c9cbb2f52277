//! The async driver: performs the steps a [`Run`] decides, persists every safe boundary, and
//! emits the events. All decisions stay in the run; this file only does what they say, and
//! enforces the two things only a clock can: the time limits and the cancel flag.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::event::{Emitter, EventKind};
use crate::provider::Provider;
use crate::registry::ToolRegistry;
use crate::run::{ModelCall, Run, Step};
use crate::store::{Store, StoreError};
use crate::tool::ToolContext;
use crate::tool_exec::ToolExecutor;

/// What a driver needs to perform steps.
pub struct Driver<'a> {
    /// The models, by provider name.
    pub providers: &'a HashMap<String, Arc<dyn Provider>>,
    /// The tools.
    pub registry: &'a Arc<ToolRegistry>,
    /// Where boundaries are persisted.
    pub store: &'a dyn Store,
    /// Where events go.
    pub emitter: &'a Emitter,
    /// Timestamps for records.
    pub clock: &'a dyn Clock,
    /// Fires when the user asks to stop.
    pub cancel: &'a CancellationToken,
    /// The user, when known.
    pub user_id: Option<String>,
}

/// Whether cancelling may interrupt a step in flight.
#[derive(Clone, Copy)]
enum Interruptible {
    Yes,
    No,
}

/// How a step that races the clock and the cancel flag ended.
enum Raced<T> {
    Done(T),
    Cancelled,
    HardLimit,
}

impl Driver<'_> {
    /// Drives `run` from its first step to a terminal state. Fails only when the store does;
    /// every other failure ends the run in a terminal state instead.
    pub async fn drive(&self, run: &mut Run) -> Result<(), StoreError> {
        let started = Instant::now();
        let soft = run.settings().soft_timeout.map(|limit| started + limit);
        let hard = run.settings().hard_timeout;
        let hard_at = hard.map(|limit| started + limit);
        let retry_delays = run.settings().tool_retry_delays.clone();
        let context = ToolContext {
            session_id: run.session_id().to_string(),
            run_id: run.id().to_string(),
            call_id: String::new(),
            user_id: self.user_id.clone(),
            untrusted_source: false,
            cancel: self.cancel.clone(),
        };
        let executor = ToolExecutor {
            registry: self.registry,
            context: &context,
            max_chars: run.settings().tool_result_max_chars,
            emitter: self.emitter,
            retry_delays: &retry_delays,
        };
        let mut step = run.start();
        loop {
            // Safe boundary: everything the run decided so far becomes durable before anything
            // else happens (input, llm_response, tool_result, final).
            self.persist(run).await?;
            if matches!(step, Step::Finish) {
                return Ok(());
            }
            if self.cancel.is_cancelled() {
                step = run.cancel();
                continue;
            }
            step = match step {
                Step::Finish => Step::Finish,
                Step::CallModel(call) => {
                    let work = self.call_model(run.iteration(), call);
                    match self.race(hard_at, Interruptible::Yes, work).await {
                        Raced::Done(result) => {
                            note_soft_limit(run, soft);
                            run.on_model_result(result)
                        }
                        // An in-flight call is abandoned at once; no partial reply is kept.
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::Summarize(call) => {
                    let work = self.summarize(call);
                    match self.race(hard_at, Interruptible::Yes, work).await {
                        Raced::Done(result) => run.on_summary(result),
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::RunTools(calls) => {
                    // Cancellation waits for running tools: they finish and are stored, and the
                    // flag is seen at the next boundary.
                    let work = executor.run_batch(&calls);
                    match self.race(hard_at, Interruptible::No, work).await {
                        Raced::Done(results) => {
                            note_soft_limit(run, soft);
                            run.on_tool_results(results)
                        }
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
            };
        }
    }

    /// Waits out a retry's backoff, then calls the model.
    async fn call_model(
        &self,
        iteration: u32,
        call: ModelCall,
    ) -> Result<crate::provider::ChatResponse, crate::provider_error::ProviderError> {
        if !call.wait.is_zero() {
            tokio::time::sleep(call.wait).await;
        }
        let Some(provider) = self.providers.get(&call.provider) else {
            return Err(crate::provider_error::ProviderError::new(
                crate::provider_error::ProviderErrorKind::InvalidRequest,
                format!("no provider named `{}` is configured", call.provider),
            ));
        };
        let request = &call.request;
        self.emitter.emit(EventKind::ModelRequest {
            iteration,
            model: request.model.clone(),
            messages: request.messages.len(),
            tools: request.tools.len(),
            stream: request.stream,
        });
        let started = Instant::now();
        let result = provider.chat(request, self.emitter).await;
        match &result {
            Ok(response) => self.emitter.emit(EventKind::ModelResponse {
                iteration,
                model: response.model.clone(),
                stop_reason: response.stop_reason,
                tool_calls: response.message.tool_calls.len(),
                usage: response.usage,
                latency_ms: started.elapsed().as_millis() as u64,
            }),
            Err(error) => self.emitter.emit(EventKind::ModelError {
                iteration,
                kind: error.kind,
                status: error.status,
                message: error.message.clone(),
            }),
        }
        result
    }

    /// Asks a model for a compaction summary: whole, never streamed to the user.
    async fn summarize(
        &self,
        call: ModelCall,
    ) -> Result<crate::provider::ChatResponse, crate::provider_error::ProviderError> {
        let Some(provider) = self.providers.get(&call.provider) else {
            return Err(crate::provider_error::ProviderError::new(
                crate::provider_error::ProviderErrorKind::InvalidRequest,
                format!("no provider named `{}` is configured", call.provider),
            ));
        };
        provider
            .chat(&call.request, &crate::provider::NoDeltas)
            .await
    }

    /// Runs `work` until it finishes, the hard limit passes, or (when interruptible) the run
    /// is cancelled.
    async fn race<T>(
        &self,
        hard_at: Option<Instant>,
        interruptible: Interruptible,
        work: impl Future<Output = T>,
    ) -> Raced<T> {
        let deadline = async {
            match hard_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            match interruptible {
                Interruptible::Yes => self.cancel.cancelled().await,
                Interruptible::No => std::future::pending().await,
            }
        };
        tokio::select! {
            done = work => Raced::Done(done),
            _ = cancelled => Raced::Cancelled,
            _ = deadline => Raced::HardLimit,
        }
    }

    /// Persists a run that ended before it started (e.g. refused for its budget) and emits its
    /// events.
    pub async fn settle(&self, run: &mut Run) -> Result<(), StoreError> {
        self.persist(run).await
    }

    async fn persist(&self, run: &mut Run) -> Result<(), StoreError> {
        let record = run.record(self.clock.now());
        self.store.save_run(&record, run.unpersisted()).await?;
        run.mark_persisted();
        for kind in run.drain_events() {
            self.emitter.emit(kind);
        }
        Ok(())
    }
}

/// Tells the run when its soft time limit has passed.
fn note_soft_limit(run: &mut Run, soft: Option<Instant>) {
    if soft.is_some_and(|at| Instant::now() >= at) {
        run.on_soft_limit();
    }
}
