//! The one seam features plug into. The kernel runs the loop; everything else an agent does —
//! tools the loop answers itself (the run journal's, `todo`, `clarify`, `request_more_iterations`),
//! what is decided when a run starts (routing, prompt sections, the memory snapshot, recalled
//! facts), what happens to each message (importance), the turn before a compaction (the memory
//! flush), what wraps or answers a tool call (hooks, delegation) and what happens once a run has ended
//! (learning) — is an [`Extension`] registered on the agent with
//! [`crate::AgentBuilder::extension`].
//!
//! **Ordering.** Extensions are asked in the order they were registered, at every hook. At run
//! start each sees what the ones before it decided (the settings they changed, the sections they
//! added). A loop tool belongs to the first extension that offers it; a second offering the same
//! name is refused when the agent is built. Before a tool call, the first extension that denies
//! the call decides; the first that answers it itself ([`Extension::call_tool`]) runs it, and
//! when none does the registry's tool runs; after it, each appends in order. The first
//! extension that words the refusal of a call to a tool the run does not offer words it.
//!
//! **State.** An extension keeps no state of its own between a run's steps: what it must keep
//! goes in the session's [`Journal`] under a key it owns (see [`Journal::extension`]), which the
//! run checkpoints at every boundary and stores with the session when it changes. So a restored
//! run, in another process, sees exactly what the crashed one saw.
//!
//! **No I/O in the state machine.** The hooks a [`crate::Run`] calls as it decides
//! ([`Extension::answer`], [`Extension::on_message`], [`Extension::notes`],
//! [`Extension::before_compaction`]) are synchronous and pure; the ones the agent and the driver
//! call ([`Extension::prepare`], [`Extension::before_tool`], [`Extension::call_tool`],
//! [`Extension::after_tool`], [`Extension::finished`]) are async and may do I/O.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::child_run::ChildRuns;
use crate::event::{Emitter, EventKind};
use crate::human::Question;
use crate::journal::Journal;
use crate::message::{Message, ToolCall};
use crate::run::BatchSpend;
use crate::run_settings::RunSettings;
use crate::store::{SessionInfo, StoredMessage};
use crate::tool::{ToolContext, ToolSpec};

/// A feature of the agent, plugged into the loop. Every hook has a default that does nothing,
/// so an extension implements only what it takes part in.
#[async_trait]
pub trait Extension: Send + Sync {
    /// A short stable name (`todo`, `routing`): in errors, and the key of what it keeps in the
    /// journal when it keeps anything.
    fn name(&self) -> &'static str;

    /// A run is about to start: change its settings (the model, the system prompt), add
    /// turn-context sections and events, or refuse it. Called once per new run, never on
    /// resume (a resumed run keeps what it started with).
    async fn prepare(&self, start: &mut RunStart<'_>) {
        let _ = start;
    }

    /// The tools this extension answers inside the loop, offered to a run with `settings`
    /// (after the registry's tools, in registration order).
    fn loop_tools(&self, settings: &RunSettings) -> Vec<ToolSpec> {
        let _ = settings;
        Vec::new()
    }

    /// Answers a call to one of [`Extension::loop_tools`]; `args` are the parsed arguments
    /// (`{}` when the model sent none). Pure: it may change only what `turn` holds.
    fn answer(&self, call: &ToolCall, args: &Value, turn: &mut LoopTurn<'_>) -> LoopAnswer {
        let _ = (args, turn);
        LoopAnswer::Err(format!("`{}` has no answer here", call.name))
    }

    /// A message joins the run (the user's, or a tool result): annotate it (its importance).
    fn on_message(&self, message: &mut Message) {
        let _ = message;
    }

    /// What the model is reminded of from the journal in the run's turn context, when the run
    /// starts and after each compaction (`compacted`: older messages left the context).
    fn notes(&self, journal: &Journal, compacted: bool) -> Option<String> {
        let _ = (journal, compacted);
        None
    }

    /// The turn the model gets before a compaction drops or summarizes older messages, when
    /// this extension wants one and the run offers what it needs (`offered`).
    fn before_compaction(&self, offered: &[ToolSpec]) -> Option<PreCompactionTurn> {
        let _ = offered;
        None
    }

    /// The system prompt of a resumed run whose configured prompt changed (and the change was
    /// accepted): `prompt` is the new configured one with what extensions before this one added.
    fn restate_prompt(
        &self,
        prompt: Option<String>,
        journal: &Journal,
        offered: &[ToolSpec],
    ) -> Option<String> {
        let _ = (journal, offered);
        prompt
    }

    /// True when this extension sees calls to `tool` before and after they run
    /// ([`Extension::before_tool`], [`Extension::after_tool`]); the executor asks only the
    /// extensions that do, and keeps a call's arguments for after it only then.
    fn wraps_tool(&self, tool: &str) -> bool {
        let _ = tool;
        false
    }

    /// Sees a call to a tool it wraps that passed every check, before it runs: let it run
    /// (with these arguments, which `site.check` checks against the tool's schema) or deny it
    /// with the result the model gets. Extensions are asked in order, each seeing the
    /// arguments the one before let through; the first denial decides. A cancel abandons them.
    async fn before_tool(&self, call: &ToolCall, args: Value, site: &ToolCallSite<'_>) -> Gate {
        let _ = (call, site);
        Gate::Run(args)
    }

    /// True when this extension may answer calls to `tool` itself ([`Extension::call_tool`]);
    /// the executor asks only the extensions that do, so a call no extension runs costs no
    /// async hook per extension.
    fn runs_tool(&self, tool: &str) -> bool {
        let _ = tool;
        false
    }

    /// Answers a call that passed every check (and was recorded as started when its tool is
    /// not idempotent) itself, instead of the registry's tool (`delegate_task` runs child runs
    /// through `site.children`): `Ok` is the result the model gets, `Err` an error result.
    /// `None` when the call is not this extension's. Never abandoned on cancel: what it starts
    /// sees the cancel itself.
    async fn call_tool(
        &self,
        call: &ToolCall,
        args: &Value,
        site: &ToolCallSite<'_>,
    ) -> Option<Result<String, String>> {
        let _ = (call, args, site);
        None
    }

    /// The refusal of a call to one of the agent's tools that the run does not offer, in this
    /// extension's words (`delegate_task` at the depth where delegation stops); `None` leaves
    /// the wording to the next extension, and at last to the kernel's.
    fn refuse_unoffered(&self, call: &ToolCall, site: &ToolCallSite<'_>) -> Option<String> {
        let _ = (call, site);
        None
    }

    /// Sees the result of a call to a tool it wraps before the model does; returns the content
    /// the model gets (in order: each sees what the one before returned).
    async fn after_tool(
        &self,
        call: &ToolCall,
        done: ToolDone<'_>,
        site: &ToolCallSite<'_>,
    ) -> String {
        let _ = (call, site);
        done.content
    }

    /// A run has ended and is stored: learn from it. Returns the events that say what was done.
    async fn finished(&self, run: &FinishedRun<'_>) -> Vec<EventKind> {
        let _ = run;
        Vec::new()
    }
}

/// The extensions of an agent, in registration order. Cheap to clone; compares equal to any
/// other set (they are the agent's, not a setting of the run).
#[derive(Clone, Default)]
pub struct ExtensionSet(Arc<[Arc<dyn Extension>]>);

impl ExtensionSet {
    /// The set of `extensions`, in this order.
    pub fn new(extensions: Vec<Arc<dyn Extension>>) -> Self {
        ExtensionSet(extensions.into())
    }

    /// The extensions, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Extension>> {
        self.0.iter()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when the loop answers calls to `name` in a run with `settings` (`ask_human`, or an
    /// extension's loop tool).
    pub fn is_loop_tool(&self, name: &str, settings: &RunSettings) -> bool {
        name == crate::agent_tools::ASK_HUMAN
            || self.0.iter().any(|extension| {
                extension
                    .loop_tools(settings)
                    .iter()
                    .any(|tool| tool.name == name)
            })
    }

    /// The extensions that wrap calls to `tool` ([`Extension::wraps_tool`]), in order.
    pub fn wrapping<'a>(
        &'a self,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a Arc<dyn Extension>> + 'a {
        self.0
            .iter()
            .filter(move |extension| extension.wraps_tool(tool))
    }

    /// Runs `call` through the first extension that answers it itself
    /// ([`Extension::call_tool`]); `None` when none does and the registry's tool runs.
    pub async fn call_tool(
        &self,
        call: &ToolCall,
        args: &Value,
        site: &ToolCallSite<'_>,
    ) -> Option<Result<String, String>> {
        for extension in self.0.iter().filter(|e| e.runs_tool(&call.name)) {
            if let Some(result) = extension.call_tool(call, args, site).await {
                return Some(result);
            }
        }
        None
    }

    /// The refusal of a call to a tool the run does not offer, from the first extension that
    /// words it ([`Extension::refuse_unoffered`]).
    pub fn refuse_unoffered(&self, call: &ToolCall, site: &ToolCallSite<'_>) -> Option<String> {
        self.0
            .iter()
            .find_map(|extension| extension.refuse_unoffered(call, site))
    }

    /// The turn before a compaction, from the first extension that wants one.
    pub fn before_compaction(&self, offered: &[ToolSpec]) -> Option<PreCompactionTurn> {
        self.0
            .iter()
            .find_map(|extension| extension.before_compaction(offered))
    }

    /// The notes of every extension, in order.
    pub fn notes(&self, journal: &Journal, compacted: bool) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|extension| extension.notes(journal, compacted))
            .collect()
    }

    /// The system prompt a resumed run shows with `prompt` as its configured one.
    pub fn restate_prompt(
        &self,
        prompt: Option<String>,
        journal: &Journal,
        offered: &[ToolSpec],
    ) -> Option<String> {
        self.0.iter().fold(prompt, |prompt, extension| {
            extension.restate_prompt(prompt, journal, offered)
        })
    }
}

impl std::fmt::Debug for ExtensionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|extension| extension.name()))
            .finish()
    }
}

impl PartialEq for ExtensionSet {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What an extension sees and may change when a run starts.
pub struct RunStart<'a> {
    /// The conversation.
    pub session_id: &'a str,
    /// The session as stored before this run (`None` when the run creates it).
    pub session: Option<&'a SessionInfo>,
    /// The user, when known.
    pub user_id: Option<&'a str>,
    /// The new message.
    pub message: &'a str,
    /// The caller named the model (a persona's): routing leaves it alone.
    pub model_named: bool,
    /// The run's settings so far.
    pub settings: &'a mut RunSettings,
    /// The tools the run will offer (after permission, persona and trust filters).
    pub tools: &'a [ToolSpec],
    /// The session's journal, as the run will start with it.
    pub journal: &'a mut Journal,
    /// Set when the journal changed: stored with the run's first checkpoint.
    pub journal_changed: bool,
    /// Sections for the run's turn context, each under its heading, in order (see
    /// [`crate::prompt_parts::compose`]).
    pub turn_sections: Vec<String>,
    /// Events to emit before the run starts, in order (what was chosen and why).
    pub events: Vec<EventKind>,
    /// Events the run emits as it starts, after saying which tools it offers (what was
    /// recalled for it).
    pub opening_events: Vec<EventKind>,
    /// Why the run may not start (a budget); the message is still stored.
    pub refusal: Option<String>,
}

/// What a loop tool may read and change of the run answering it.
pub struct LoopTurn<'a> {
    /// The session's journal, where extensions keep their state.
    pub journal: &'a mut Journal,
    /// Set when the answer changed the journal.
    pub journal_changed: bool,
    /// The run's iteration limit, and the most `request_more_iterations` may raise it to.
    pub iteration_limit: &'a mut u32,
    /// The hard cap of the iteration limit.
    pub iteration_cap: u32,
    /// Events the answer emits.
    pub events: Vec<EventKind>,
}

/// How a loop tool answered.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopAnswer {
    /// The result the model gets.
    Ok(String),
    /// An error result the model gets.
    Err(String),
    /// Put this question to the human; the answer is the call's result.
    Ask(Question),
}

/// A turn before a compaction: the model is told `prompt` and may call only `tools`.
#[derive(Clone, Debug, PartialEq)]
pub struct PreCompactionTurn {
    /// What the model is asked.
    pub prompt: &'static str,
    /// The only tools it may call on that turn.
    pub tools: &'static [&'static str],
    /// The tool whose successful calls count as saved (`agent.memory.flushed`'s `saved`).
    pub saves_with: &'static str,
}

/// Whether a tool call may run.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Run it with these arguments.
    Run(Value),
    /// Do not run it; the model gets this result.
    Deny(String),
}

/// Where a tool call an extension sees (or runs itself) comes from.
pub struct ToolCallSite<'a> {
    /// The call's context (session, run, call id, user, trust, cancellation).
    pub context: &'a ToolContext,
    /// The tools the run offers.
    pub offered: &'a [ToolSpec],
    /// The run's settings.
    pub settings: &'a RunSettings,
    /// Checks arguments against the tool's schema (for an extension that rewrites them).
    pub check: &'a (dyn Fn(&Value) -> Result<(), String> + Send + Sync),
    /// Where events go.
    pub emitter: &'a Emitter,
    /// Who starts and resumes child runs (the agent), for an extension that answers a call
    /// with them; `None` when the run is driven without one.
    pub children: Option<&'a dyn ChildRuns>,
    /// What the child runs of the call's batch spend, counted against the run's budgets.
    pub spend: &'a BatchSpend,
}

/// A tool call that ran (or was refused), before the model sees its result.
pub struct ToolDone<'a> {
    /// The arguments it ran with.
    pub args: &'a Value,
    /// False when `content` is an error.
    pub ok: bool,
    /// The result so far (cut to size, secrets removed).
    pub content: String,
}

/// A run that has ended, for extensions to learn from.
#[derive(Clone, Copy, Debug)]
pub struct FinishedRun<'a> {
    /// Its user, when it had one.
    pub user_id: Option<&'a str>,
    /// Its session.
    pub session_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// False when its message came from an untrusted source.
    pub trusted: bool,
    /// The messages it stored, in order.
    pub messages: &'a [StoredMessage],
}
