//! Running a batch of tool calls: checks, ordering, cancellation, panics, truncation.
//!
//! Calls run in the order the model made them, as the model and the user expect: a batch is
//! cut into consecutive groups, where a run of idempotent calls (reads, lookups) runs
//! concurrently and every other call — side-effecting or interactive — runs alone, after what
//! came before it and before what comes after it. So appends land in order and a read after a
//! write sees it. Whatever happens — unknown tool, bad arguments, a tool error, a panic — the
//! model gets a clear result and the run goes on. Results come back in call order.
//!
//! When a message the user sent meanwhile is about to join the run ([`crate::steering`]), calls
//! not started yet are skipped with a result that says so; calls running finish.
//!
//! On cancel, idempotent calls are abandoned at once (their result says so) and calls not yet
//! started never start; a side-effecting call in flight is awaited, since stopping a write
//! halfway is worse than finishing it (the driver's hard time limit still ends the run).
//!
//! A transient failure (timeout, refused, 429, 5xx) of an idempotent tool is retried after
//! 0.5 s, 2 s and 8 s (seed 001); then the error goes to the model. Side-effecting tools are
//! never retried: a half-applied write must not happen twice.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use tokio::time::Instant;

use crate::checkpoint::ToolCallRecord;
use crate::child_run::ChildRuns;
use crate::clock::Clock;
use crate::event::{Emitter, EventKind};
use crate::extension::{Gate, ToolCallSite, ToolDone};
use crate::files::{DEFAULT_MAX_FILE_BYTES, FileOrigin, FileRecord, guess_media_type};
use crate::message::ToolCall;
use crate::registry::{PreparedCall, ToolRegistry};
use crate::run::{BatchSpend, ToolResult};
use crate::run_settings::RunSettings;
use crate::steering::Steering;
use crate::store::Store;
pub use crate::tool::truncate_output;
use crate::tool::{Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput};

/// Runs tool batches for one run.
pub struct ToolExecutor<'a> {
    /// The tools.
    pub registry: &'a Arc<ToolRegistry>,
    /// The context every call gets (its `call_id` is filled in per call).
    pub context: &'a ToolContext,
    /// Results longer than this many characters are cut with a marker.
    pub max_chars: usize,
    /// Where tool events go.
    pub emitter: &'a Emitter,
    /// The waits before each retry of a transient failure of an idempotent tool.
    pub retry_delays: &'a [Duration],
    /// Where side-effecting calls are recorded before they start and when they finish.
    pub store: &'a dyn Store,
    /// Timestamps for the envelope.
    pub clock: &'a dyn Clock,
    /// The tools offered to this run: a call to another is refused, never run.
    pub offered: Arc<[crate::tool::ToolSpec]>,
    /// The run's settings, with the extensions that wrap its calls.
    pub settings: &'a RunSettings,
    /// Who starts and resumes child runs, for the extensions that answer calls with them.
    pub children: Option<&'a dyn ChildRuns>,
    /// What the child runs of the current batch spend (see [`BatchSpend`]).
    pub spend: &'a BatchSpend,
}

/// What a resumed run knows about calls made before its worker died.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// The envelope rows of the run, by call id.
    pub records: HashMap<String, ToolCallRecord>,
    /// Unfinished side-effecting calls a human decided to run again.
    pub rerun: HashSet<String>,
}

/// How a batch ended.
#[derive(Debug)]
pub enum BatchOutcome {
    /// Every call has a result (in call order), and the envelope rows to commit with them.
    Done(Vec<ToolResult>, Vec<ToolCallRecord>),
    /// Nothing ran: this side-effecting call started before a crash and may have done its
    /// work; running it again is not safe.
    Unsafe(ToolCall),
}

impl ToolExecutor<'_> {
    /// Runs `calls` and returns one result per call, in call order. Calls the envelope shows
    /// completed are replayed, not run; an unfinished side-effecting call stops the batch
    /// before anything runs.
    pub async fn run_batch(&self, calls: &[ToolCall], replay: &Replay) -> BatchOutcome {
        self.run_steered_batch(calls, replay, None).await
    }

    /// [`ToolExecutor::run_batch`] for a run that messages may join (see [`crate::steering`]):
    /// once `steering` has one pending, calls not started yet are not started; each gets
    /// [`crate::steering::SKIPPED_FOR_STEER`]. Calls already running finish.
    pub async fn run_steered_batch(
        &self,
        calls: &[ToolCall],
        replay: &Replay,
        steering: Option<&dyn Steering>,
    ) -> BatchOutcome {
        for call in calls {
            let unfinished = replay
                .records
                .get(&call.id)
                .is_some_and(|record| record.completed_at.is_none());
            let idempotent = self
                .registry
                .get(&call.name)
                .is_some_and(|tool| tool.spec().idempotent);
            if unfinished && !idempotent && !replay.rerun.contains(&call.id) {
                return BatchOutcome::Unsafe(call.clone());
            }
        }
        let mut outcomes = Vec::with_capacity(calls.len());
        let mut rest = calls;
        while !rest.is_empty() {
            let group_len = rest
                .iter()
                .position(|call| !self.may_overlap(call))
                .unwrap_or(rest.len())
                .max(1);
            let (group, tail) = rest.split_at(group_len);
            let runs = group.iter().map(|c| self.run_one(c, replay, steering));
            outcomes.extend(join_all(runs).await);
            rest = tail;
        }
        let (results, records) = outcomes.into_iter().unzip();
        BatchOutcome::Done(results, records)
    }

    /// True for a call that may run beside its neighbours: an idempotent, non-interactive tool.
    fn may_overlap(&self, call: &ToolCall) -> bool {
        self.registry
            .get(&call.name)
            .is_some_and(|tool| tool.spec().idempotent && !tool.spec().interactive)
    }

    async fn run_one(
        &self,
        call: &ToolCall,
        replay: &Replay,
        steering: Option<&dyn Steering>,
    ) -> (ToolResult, ToolCallRecord) {
        if let Some(record) = replay.records.get(&call.id)
            && record.completed_at.is_some()
        {
            // Finished before the crash: its stored result is the result, never a second run.
            let result = ToolResult {
                call_id: call.id.clone(),
                ok: record.ok.unwrap_or(false),
                content: record.output.clone().unwrap_or_default(),
            };
            return (result, record.clone());
        }
        self.emitter.emit(EventKind::ToolStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let started = Instant::now();
        let idempotent = self
            .registry
            .get(&call.name)
            .is_some_and(|tool| tool.spec().idempotent);
        let mut record = ToolCallRecord {
            run_id: self.context.run_id.clone(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            idempotent,
            started_at: self.clock.now(),
            completed_at: None,
            ok: None,
            output: None,
        };
        let prepared = if self.context.cancel.is_cancelled() {
            Err(format!(
                "Error: `{}` was not run: the run was cancelled.",
                call.name
            ))
        } else if steering.is_some_and(|steering| steering.pending()) {
            // The user changed course: nothing of this call has happened yet.
            Err(crate::steering::SKIPPED_FOR_STEER.to_string())
        } else if self.registry.get(&call.name).is_some()
            && !self.offered.iter().any(|tool| tool.name == call.name)
        {
            Err(self.refuse_unoffered(call))
        } else {
            self.registry.prepare(call)
        };
        // Extensions see only calls that passed every check; a call they deny is never recorded
        // as started.
        let prepared = match prepared {
            Ok(prepared) => self.before_tool(call, prepared).await,
            Err(message) => Err(message),
        };
        // A steer that arrived while the extensions looked at the call still comes first.
        let prepared = prepared.and_then(|prepared| match steering {
            Some(steering) if steering.pending() => {
                Err(crate::steering::SKIPPED_FOR_STEER.to_string())
            }
            _ => Ok(prepared),
        });
        // The arguments the tool ran with, kept for the extensions that see its result.
        let mut ran_with = None;
        let (ok, raw) = match prepared {
            Err(message) => (false, message),
            Ok(prepared) => {
                // A side effect is recorded as started before it can happen, so a crash
                // mid-call is never mistaken for "not run".
                let recorded = if idempotent {
                    Ok(())
                } else {
                    self.store
                        .record_tool_calls(std::slice::from_ref(&record))
                        .await
                };
                match recorded {
                    Err(error) => (
                        false,
                        format!(
                            "Error: `{}` was not run: keel could not record it ({error}).",
                            call.name
                        ),
                    ),
                    Ok(()) => {
                        let context = self.call_context(call);
                        let check = |args: &serde_json::Value| {
                            self.registry.check_arguments(&call.name, args)
                        };
                        let site = self.site(&context, &check);
                        // An extension that answers the call itself is never abandoned on
                        // cancel: what it started sees the cancel itself (a child run ends as
                        // cancelled, so none is left running without its parent). Its result
                        // is not handed to the extensions that wrap the call.
                        let answered = (self.settings.extensions)
                            .call_tool(call, &prepared.args, &site)
                            .await;
                        match answered {
                            Some(Ok(content)) => (true, content),
                            Some(Err(content)) => (false, content),
                            None => {
                                self.run_tool(call, prepared, idempotent, &context, &mut ran_with)
                                    .await
                            }
                        }
                    }
                }
            }
        };
        // The one place every result passes: keel's secrets (keys, passwords, its secret
        // environment) never reach the store, the events or a model, whatever printed them.
        // Before the cut, so no part of a secret is left at the end.
        let secrets = crate::redact::registered();
        let (mut content, truncated) = truncate_output(&secrets.redact(&raw), self.max_chars);
        if let Some(args) = &ran_with {
            let before = content.len();
            let after = self.after_tool(call, args, ok, content).await;
            // Extensions that see results (post_tool hooks) only append their notes: the
            // result needs cleaning again only when one did (it is already clean otherwise).
            content = if after.len() == before {
                after
            } else {
                secrets.redact(&after)
            };
        }
        record.completed_at = Some(self.clock.now());
        record.ok = Some(ok);
        record.output = Some(content.clone());
        if !idempotent {
            // Best effort: if this write fails, a resume sees the call unfinished and asks a
            // human instead of running it again — the safe side.
            let _ = self
                .store
                .record_tool_calls(std::slice::from_ref(&record))
                .await;
        }
        self.emitter.emit(EventKind::ToolCompleted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok,
            output: content.clone(),
            truncated,
            duration_ms: started.elapsed().as_millis() as u64,
        });
        let result = ToolResult {
            call_id: call.id.clone(),
            ok,
            content,
        };
        (result, record)
    }
}

impl ToolExecutor<'_> {
    /// Keeps the files a call produced (seed 003 "extract files") as records of the run, and
    /// returns the text for the model, with a note for a file that could not be kept.
    async fn keep_files(&self, output: ToolOutput) -> String {
        let mut content = output.content;
        for file in output.files {
            if file.content.len() > DEFAULT_MAX_FILE_BYTES {
                content.push_str(&format!(
                    "\n(keel did not keep `{}` for the answer: {} bytes is over its limit of \
                     {DEFAULT_MAX_FILE_BYTES})",
                    file.path,
                    file.content.len()
                ));
                continue;
            }
            let media_type = guess_media_type(&file.path, &file.content);
            let mut record = FileRecord::new(
                file.path.clone(),
                media_type,
                &file.content,
                self.context.session_id.clone(),
                FileOrigin::Produced,
                self.clock.now(),
            );
            record.user_id = self.context.user_id.clone();
            record.run_id = Some(self.context.run_id.clone());
            if let Err(error) = self.store.save_file(&record, &file.content).await {
                content.push_str(&format!(
                    "\n(keel could not keep `{}` for the answer: {error})",
                    file.path
                ));
            }
        }
        content
    }

    /// Runs the registry's tool of a call that passed every check: `(ok, content)`. Keeps the
    /// arguments it ran with in `ran_with` when some extension will see its result.
    async fn run_tool(
        &self,
        call: &ToolCall,
        prepared: PreparedCall,
        idempotent: bool,
        context: &ToolContext,
        ran_with: &mut Option<serde_json::Value>,
    ) -> (bool, String) {
        let mut args = prepared.args;
        if self
            .settings
            .extensions
            .wrapping(&call.name)
            .next()
            .is_some()
        {
            *ran_with = Some(args.clone());
        }
        context.inject(&mut args, prepared.tool.spec().notifies);
        let work = self.call_with_retries(call, prepared.tool, args, context);
        let outcome = if idempotent {
            // Abandoned on cancel: dropping a read loses nothing.
            tokio::select! {
                outcome = work => outcome,
                _ = context.cancel.cancelled() => Err(format!(
                    "Error: `{}` was abandoned: the run was cancelled.",
                    call.name
                )),
            }
        } else {
            work.await
        };
        match outcome {
            Ok(output) => (true, self.keep_files(output).await),
            Err(message) => (false, message),
        }
    }

    /// The refusal of a call to one of the agent's tools that the run does not offer: in the
    /// words of the first extension that words it, else the kernel's.
    fn refuse_unoffered(&self, call: &ToolCall) -> String {
        let check = |args: &serde_json::Value| self.registry.check_arguments(&call.name, args);
        let context = self.call_context(call);
        let site = self.site(&context, &check);
        (self.settings.extensions)
            .refuse_unoffered(call, &site)
            .unwrap_or_else(|| {
                format!(
                    "Error: `{}` is not one of your tools here: it was not run.",
                    call.name
                )
            })
    }

    /// Asks the extensions that wrap `call` ([`crate::extension::Extension::before_tool`]):
    /// the call as they let it run (perhaps with rewritten arguments), or the message of their
    /// denial. A cancel abandons them and the call.
    async fn before_tool(
        &self,
        call: &ToolCall,
        prepared: PreparedCall,
    ) -> Result<PreparedCall, String> {
        if self
            .settings
            .extensions
            .wrapping(&call.name)
            .next()
            .is_none()
        {
            return Ok(prepared);
        }
        let PreparedCall { tool, args } = prepared;
        let check = |args: &serde_json::Value| self.registry.check_arguments(&call.name, args);
        let context = self.call_context(call);
        let site = self.site(&context, &check);
        let gates = async {
            let mut args = args;
            for extension in self.settings.extensions.wrapping(&call.name) {
                match extension.before_tool(call, args, &site).await {
                    Gate::Run(rewritten) => args = rewritten,
                    denied @ Gate::Deny(_) => return denied,
                }
            }
            Gate::Run(args)
        };
        let cancelled = || format!("Error: `{}` was not run: the run was cancelled.", call.name);
        // Nothing has happened yet: a cancel abandons them (a hook's process is killed).
        let gate = tokio::select! {
            gate = gates => gate,
            _ = self.context.cancel.cancelled() => Gate::Deny(cancelled()),
        };
        match gate {
            Gate::Deny(message) => Err(message),
            Gate::Run(_) if self.context.cancel.is_cancelled() => Err(cancelled()),
            Gate::Run(args) => Ok(PreparedCall { tool, args }),
        }
    }

    /// Hands a call's result, `content`, to the extensions that wrap it, in order; returns
    /// what the model gets.
    async fn after_tool(
        &self,
        call: &ToolCall,
        args: &serde_json::Value,
        ok: bool,
        mut content: String,
    ) -> String {
        let check = |args: &serde_json::Value| self.registry.check_arguments(&call.name, args);
        let context = self.call_context(call);
        let site = self.site(&context, &check);
        for extension in self.settings.extensions.wrapping(&call.name) {
            let done = ToolDone { args, ok, content };
            content = extension.after_tool(call, done, &site).await;
        }
        content
    }

    /// The context `call` runs with: the run's, with its call id.
    fn call_context(&self, call: &ToolCall) -> ToolContext {
        let mut context = self.context.clone();
        context.call_id = call.id.clone();
        context
    }

    /// Where the extensions seeing a call find the run.
    fn site<'s>(
        &'s self,
        context: &'s ToolContext,
        check: &'s (dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync),
    ) -> ToolCallSite<'s> {
        ToolCallSite {
            context,
            offered: &self.offered,
            settings: self.settings,
            check,
            emitter: self.emitter,
            children: self.children,
            spend: self.spend,
        }
    }

    /// Calls the tool, retrying transient failures of idempotent tools; the error is the text
    /// the model will see.
    async fn call_with_retries(
        &self,
        call: &ToolCall,
        tool: Arc<dyn Tool>,
        args: serde_json::Value,
        context: &ToolContext,
    ) -> Result<ToolOutput, String> {
        let retryable = tool.spec().idempotent;
        let mut attempt = 0;
        loop {
            let error = match call_once(tool.clone(), args.clone(), context.clone()).await {
                Ok(output) => return Ok(output),
                Err(Failure::Tool(error)) => error,
                Err(Failure::Crashed(message)) => return Err(message),
            };
            let transient = error.kind == ToolErrorKind::Transient;
            if !(retryable && transient) || context.cancel.is_cancelled() {
                return Err(format!("Error: {}", error.message));
            }
            let Some(wait) = self.retry_delays.get(attempt).copied() else {
                return Err(match attempt {
                    0 => format!("Error: {}", error.message),
                    _ => format!(
                        "Error: {} (gave up after {} attempts)",
                        error.message,
                        attempt + 1
                    ),
                });
            };
            attempt += 1;
            self.emitter.emit(EventKind::ToolRetry {
                call_id: call.id.clone(),
                name: call.name.clone(),
                attempt: attempt as u32,
                wait_ms: wait.as_millis() as u64,
                error: crate::redact::registered().redact(&error.message),
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = context.cancel.cancelled() => return Err(format!("Error: {}", error.message)),
            }
        }
    }
}

/// Why one attempt failed.
enum Failure {
    Tool(ToolError),
    Crashed(String),
}

/// One attempt, run in place with its panics caught: a panicking tool becomes a tool error
/// instead of unwinding through the loop. (Not a spawned task: that would cost two thread
/// wake-ups per call, more than the loop's own work in an iteration.)
async fn call_once(
    tool: Arc<dyn Tool>,
    args: serde_json::Value,
    context: ToolContext,
) -> Result<ToolOutput, Failure> {
    let outcome = AssertUnwindSafe(tool.call(args, &context))
        .catch_unwind()
        .await;
    match outcome {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(error)) => Err(Failure::Tool(error)),
        Err(payload) => Err(Failure::Crashed(describe_panic(&tool.spec().name, payload))),
    }
}

fn describe_panic(name: &str, payload: Box<dyn std::any::Any + Send>) -> String {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    format!("Error: tool `{name}` crashed (panic: {detail}). Try another approach.")
}
