//! Tool hooks (DESIGN.md section 10): commands from the configuration that see a tool call
//! before it runs and its result after — an extension wrapping the calls of the tools its hooks
//! match ([`Extension::before_tool`], [`Extension::after_tool`]).
//!
//! This module owns the protocol and starts no process: a [`HookCommand`] gets the call as one
//! JSON object on stdin and returns what it printed on stdout ([`answer`] reads it). The
//! input is
//!
//! ```json
//! {"event": "pre_tool", "tool": "write_file", "call_id": "c1",
//!  "arguments": {"path": "a.txt", "content": "hi"}, "session_id": "s", "run_id": "r"}
//! ```
//!
//! and for `post_tool` the same with `"event": "post_tool"`, the arguments the tool ran with,
//! and `"result": {"ok": true, "output": "..."}` (the result as the model will see it).
//!
//! The hooks matching a call run one after another, in configuration order. A `pre_tool` hook
//! allows, denies or rewrites the arguments; rewrites chain (the next hook sees the rewritten
//! arguments), each is checked against the tool's schema again, and the first deny wins: the
//! tool does not run and the model sees the reason. A hook that fails — a non-zero exit, output
//! that is not an answer, its time limit — denies. A `post_tool` hook may annotate the result;
//! one that fails is ignored. Each `post_tool` hook sees the tool's own result, without
//! the notes of the hooks before it. Every hook run is an `agent.tool.hook` event.

mod answer;
mod matcher;

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::event::{Emitter, EventKind, HookEvent, HookOutcome};
use keel_core::extension::{Extension, Gate, ToolCallSite, ToolDone};
use keel_core::message::ToolCall;
use serde_json::{Value, json};
use tokio::time::Instant;

pub use answer::{PreAnswer, parse_post, parse_pre};
pub use matcher::ToolMatcher;

/// Why a hook command gave no answer: it could not start, exited with an error, timed out or
/// printed too much. The message says which, for the events and the model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookFailure(pub String);

/// Runs one hook's command.
#[async_trait]
pub trait HookCommand: Send + Sync {
    /// Runs the command with `input` on its stdin and returns what it printed on stdout. It
    /// must end by its own time limit and leave no process behind, also when the returned
    /// future is dropped.
    async fn run(&self, input: &str) -> Result<String, HookFailure>;
}

/// One configured hook.
#[derive(Clone)]
pub struct ToolHook {
    /// When it runs.
    pub event: HookEvent,
    /// The tools it sees.
    pub matcher: ToolMatcher,
    /// How events name it: its command line.
    pub label: String,
    /// What runs.
    pub command: Arc<dyn HookCommand>,
}

/// The call a hook sees, but its arguments.
#[derive(Clone, Copy, Debug)]
pub struct HookCall<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The tool call id.
    pub call_id: &'a str,
    /// The conversation.
    pub session_id: &'a str,
    /// The run.
    pub run_id: &'a str,
}

/// An agent's hooks, in configuration order. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolHooks {
    hooks: Arc<[ToolHook]>,
}

impl ToolHooks {
    /// The hooks, in the order they run.
    pub fn new(hooks: Vec<ToolHook>) -> Self {
        ToolHooks {
            hooks: hooks.into(),
        }
    }

    /// True when there are no hooks.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// True when some `event` hook sees `tool`.
    pub fn any(&self, event: HookEvent, tool: &str) -> bool {
        self.matching(event, tool).next().is_some()
    }

    /// The hooks of `event` that see `tool`, with their positions.
    fn matching<'a>(
        &'a self,
        event: HookEvent,
        tool: &'a str,
    ) -> impl Iterator<Item = (usize, &'a ToolHook)> + 'a {
        self.hooks
            .iter()
            .enumerate()
            .filter(move |(_, hook)| hook.event == event && hook.matcher.matches(tool))
    }

    /// Runs the `pre_tool` hooks that see `call` on `args` (already checked against the tool's
    /// schema). `check` checks a rewrite the same way; a rewrite it refuses denies the call.
    pub async fn before(
        &self,
        call: HookCall<'_>,
        mut args: Value,
        check: &(dyn Fn(&Value) -> Result<(), String> + Sync),
        emitter: &Emitter,
    ) -> Gate {
        for (index, hook) in self.matching(HookEvent::PreTool, call.tool) {
            let input = input(HookEvent::PreTool, call, &args, None);
            let started = Instant::now();
            let answer = hook.command.run(&input).await;
            let mut report = Report::new(index, hook, HookEvent::PreTool, call);
            let denial = match answer
                .map_err(|failure| failure.0)
                .and_then(|o| parse_pre(&o))
            {
                Ok(PreAnswer::Allow) => None,
                Ok(PreAnswer::Rewrite(rewritten)) => {
                    report.arguments = Some(rewritten.to_string());
                    match check(&rewritten) {
                        Ok(()) => {
                            report.outcome = HookOutcome::Rewrite;
                            args = rewritten;
                            None
                        }
                        Err(problems) => {
                            let why = format!(
                                "it rewrote the arguments to ones that do not fit the tool's \
                                 schema: {problems}"
                            );
                            report.fail(&why);
                            Some(format!(
                                "Error: `{}` was not run: a pre_tool hook {why}.",
                                call.tool
                            ))
                        }
                    }
                }
                Ok(PreAnswer::Deny(reason)) => {
                    report.outcome = HookOutcome::Deny;
                    report.reason = Some(reason.clone());
                    Some(format!(
                        "Error: `{}` was not run: a pre_tool hook denied it: {reason}",
                        call.tool
                    ))
                }
                Err(why) => {
                    report.fail(&why);
                    Some(format!(
                        "Error: `{}` was not run: a pre_tool hook that checks it failed ({why}), \
                         so the call was denied.",
                        call.tool
                    ))
                }
            };
            report.emit(emitter, started);
            if let Some(message) = denial {
                return Gate::Deny(message);
            }
        }
        Gate::Run(args)
    }

    /// Runs the `post_tool` hooks that see `call`, which ran with `args` and gave `output`
    /// (`ok` false: an error); returns `output` with their annotations appended, each marked
    /// as a hook's. A hook that fails is left out (its event says why).
    pub async fn after(
        &self,
        call: HookCall<'_>,
        args: &Value,
        ok: bool,
        output: String,
        emitter: &Emitter,
    ) -> String {
        let mut annotated = output.clone();
        for (index, hook) in self.matching(HookEvent::PostTool, call.tool) {
            let input = input(HookEvent::PostTool, call, args, Some((ok, &output)));
            let started = Instant::now();
            let answer = hook.command.run(&input).await;
            let mut report = Report::new(index, hook, HookEvent::PostTool, call);
            match answer
                .map_err(|failure| failure.0)
                .and_then(|o| parse_post(&o))
            {
                Ok(None) => {}
                Ok(Some(annotation)) => {
                    annotated.push_str(&format!("\n\n[post_tool hook note: {annotation}]"));
                    report.outcome = HookOutcome::Annotate;
                    report.annotation = Some(annotation);
                }
                Err(why) => report.fail(&why),
            }
            report.emit(emitter, started);
        }
        annotated
    }
}

#[async_trait]
impl Extension for ToolHooks {
    fn name(&self) -> &'static str {
        "tool_hooks"
    }

    fn wraps_tool(&self, tool: &str) -> bool {
        self.any(HookEvent::PreTool, tool) || self.any(HookEvent::PostTool, tool)
    }

    async fn before_tool(&self, call: &ToolCall, args: Value, site: &ToolCallSite<'_>) -> Gate {
        if !self.any(HookEvent::PreTool, &call.name) {
            return Gate::Run(args);
        }
        self.before(hook_call(call, site), args, site.check, site.emitter)
            .await
    }

    async fn after_tool(
        &self,
        call: &ToolCall,
        done: ToolDone<'_>,
        site: &ToolCallSite<'_>,
    ) -> String {
        if !self.any(HookEvent::PostTool, &call.name) {
            return done.content;
        }
        let ToolDone { args, ok, content } = done;
        self.after(hook_call(call, site), args, ok, content, site.emitter)
            .await
    }
}

/// `call` as its hooks see it.
fn hook_call<'a>(call: &'a ToolCall, site: &'a ToolCallSite<'_>) -> HookCall<'a> {
    HookCall {
        tool: &call.name,
        call_id: &call.id,
        session_id: &site.context.session_id,
        run_id: &site.context.run_id,
    }
}

/// The JSON a hook gets on stdin.
fn input(
    event: HookEvent,
    call: HookCall<'_>,
    args: &Value,
    result: Option<(bool, &str)>,
) -> String {
    let mut input = json!({
        "event": event.as_str(),
        "tool": call.tool,
        "call_id": call.call_id,
        "arguments": args,
        "session_id": call.session_id,
        "run_id": call.run_id,
    });
    if let Some((ok, output)) = result {
        input["result"] = json!({"ok": ok, "output": output});
    }
    input.to_string()
}

/// One hook run, becoming its `agent.tool.hook` event.
struct Report {
    index: usize,
    hook: String,
    stage: HookEvent,
    call_id: String,
    tool: String,
    outcome: HookOutcome,
    reason: Option<String>,
    arguments: Option<String>,
    annotation: Option<String>,
}

impl Report {
    fn new(index: usize, hook: &ToolHook, stage: HookEvent, call: HookCall<'_>) -> Self {
        Report {
            index,
            hook: hook.label.clone(),
            stage,
            call_id: call.call_id.to_string(),
            tool: call.tool.to_string(),
            outcome: HookOutcome::Allow,
            reason: None,
            arguments: None,
            annotation: None,
        }
    }

    fn fail(&mut self, why: &str) {
        self.outcome = HookOutcome::Error;
        self.reason = Some(why.to_string());
    }

    fn emit(self, emitter: &Emitter, started: Instant) {
        emitter.emit(EventKind::ToolHook {
            index: self.index,
            hook: self.hook,
            stage: self.stage,
            call_id: self.call_id,
            tool: self.tool,
            outcome: self.outcome,
            reason: self.reason,
            arguments: self.arguments,
            annotation: self.annotation,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }
}
