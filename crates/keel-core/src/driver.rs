//! The async driver: performs the steps a [`Run`] decides, persists every safe boundary, and
//! emits the events. All decisions stay in the run; this file only does what they say.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::event::{Emitter, EventKind};
use crate::provider::Provider;
use crate::registry::ToolRegistry;
use crate::run::{Run, Step};
use crate::store::{Store, StoreError};
use crate::tool::ToolContext;
use crate::tool_exec::ToolExecutor;

/// What a driver needs to perform steps.
pub struct Driver<'a> {
    /// The model.
    pub provider: &'a dyn Provider,
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

impl Driver<'_> {
    /// Drives `run` from its first step to a terminal state. Fails only when the store does;
    /// every other failure ends the run in a terminal state instead.
    pub async fn drive(&self, run: &mut Run) -> Result<(), StoreError> {
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
        };
        let mut step = run.start();
        loop {
            // Safe boundary: everything the run decided so far becomes durable before anything
            // else happens (input, llm_response, tool_result, final).
            self.persist(run).await?;
            step = match step {
                Step::Finish => return Ok(()),
                _ if self.cancel.is_cancelled() => run.cancel(),
                Step::CallModel(request) => {
                    let iteration = run.iteration();
                    self.emitter.emit(EventKind::ModelRequest {
                        iteration,
                        model: request.model.clone(),
                        messages: request.messages.len(),
                        tools: request.tools.len(),
                        stream: request.stream,
                    });
                    let started = Instant::now();
                    let result = tokio::select! {
                        result = self.provider.chat(&request, self.emitter) => result,
                        // An in-flight call is abandoned at once; no partial reply is kept.
                        _ = self.cancel.cancelled() => {
                            step = run.cancel();
                            continue;
                        }
                    };
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
                    run.on_model_result(result)
                }
                Step::RunTools(calls) => {
                    let results = executor.run_batch(&calls).await;
                    run.on_tool_results(results)
                }
            };
        }
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
