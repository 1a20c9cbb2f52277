//! keel's events as ACP `session/update`s: answer text → `agent_message_chunk`, reasoning →
//! `agent_thought_chunk`, a tool call → `tool_call` (pending, then `in_progress`) and
//! `tool_call_update` (completed or failed, with the result as text), the `todo` tool's list →
//! `plan`. The loop answers its own tools (`todo`, `clarify`, …) without tool events: their
//! calls are closed when the step completes, and the `todo` list is followed by applying each
//! call to the list the turn started with, as the loop does. [`TurnMapper`] is the pure part (events in, updates out, unit-tested);
//! [`UpdateSink`] is the [`EventSink`] that sends what it maps to the editor.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate,
    TextContent, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};
use keel_core::provider::StreamDelta;
use keel_core::{Event, EventKind, EventSink};
use keel_extensions::todo::TodoList;

/// Where mapped updates go: the editor's connection in `keel acp`, a list in tests.
pub trait UpdateOut: Send + Sync {
    /// Sends one update of `session_id`.
    fn send(&self, session_id: &str, update: SessionUpdate);
}

/// The longest tool result sent to the editor, in characters (the model saw at most
/// `tool_result_max_chars` anyway; this only bounds one notification).
pub const MAX_TOOL_OUTPUT_CHARS: usize = 64 * 1024;

/// What one prompt's events have shown so far: which tool calls the editor knows, whether any
/// answer text or reasoning streamed.
#[derive(Debug, Default)]
pub struct TurnMapper {
    announced: HashSet<String>,
    /// Calls announced and not finished, in order.
    open: Vec<String>,
    /// The session's task list, as the loop keeps it.
    todo: TodoList,
    streamed_text: bool,
    streamed_reasoning: HashSet<u32>,
    iteration: u32,
}

impl TurnMapper {
    /// A mapper for a new prompt.
    pub fn new() -> Self {
        TurnMapper::default()
    }

    /// A mapper for a new prompt of a session whose task list is `todo`.
    pub fn with_todo(todo: TodoList) -> Self {
        TurnMapper {
            todo,
            ..TurnMapper::default()
        }
    }

    /// This mapper, knowing `calls` as announced and not finished (a resumed run's calls the
    /// replay showed as pending): their start is an update, not a second `tool_call`.
    pub fn knowing(mut self, calls: impl IntoIterator<Item = String>) -> Self {
        for call in calls {
            if self.announced.insert(call.clone()) {
                self.open.push(call);
            }
        }
        self
    }

    /// Whether answer text streamed in this prompt (else the final text is sent at the end).
    pub fn streamed_text(&self) -> bool {
        self.streamed_text
    }

    /// The updates `event` becomes (often none).
    pub fn map(&mut self, event: &Event) -> Vec<SessionUpdate> {
        match &event.kind {
            EventKind::StreamDelta { delta } => match delta {
                StreamDelta::Text { text } if !text.is_empty() => {
                    self.streamed_text = true;
                    vec![SessionUpdate::AgentMessageChunk(chunk(text))]
                }
                StreamDelta::Reasoning { text } if !text.is_empty() => {
                    self.streamed_reasoning.insert(self.iteration);
                    vec![SessionUpdate::AgentThoughtChunk(chunk(text))]
                }
                _ => Vec::new(),
            },
            EventKind::ModelRequest { iteration, .. } => {
                self.iteration = *iteration;
                Vec::new()
            }
            // Reasoning of a whole (not streamed) answer comes once, with the answer.
            EventKind::ModelReasoning(reasoning)
                if !self.streamed_reasoning.contains(&reasoning.iteration)
                    && !reasoning.text.is_empty() =>
            {
                vec![SessionUpdate::AgentThoughtChunk(chunk(&reasoning.text))]
            }
            EventKind::ToolCallParsed(call) => {
                let mut updates = self.announce(&call.call_id, &call.name, &call.arguments, None);
                if call.name == TODO_TOOL {
                    updates.extend(self.todo_call(&call.call_id, &call.arguments));
                }
                updates
            }
            // The step's calls all have results now: those the loop answered itself had no
            // tool events.
            EventKind::StepCompleted(_) => std::mem::take(&mut self.open)
                .into_iter()
                .map(|id| status_update(&id, ToolCallStatus::Completed))
                .collect(),
            EventKind::ToolStarted {
                call_id,
                name,
                arguments,
            } => {
                let mut updates =
                    self.announce(call_id, name, arguments, Some(ToolCallStatus::InProgress));
                if updates.is_empty() {
                    updates.push(status_update(call_id, ToolCallStatus::InProgress));
                }
                updates
            }
            EventKind::ToolCompleted {
                call_id,
                name,
                ok,
                output,
                ..
            } => {
                let mut updates = self.announce(call_id, name, "{}", None);
                self.close(call_id);
                let status = if *ok {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                };
                let fields = ToolCallUpdateFields::new()
                    .status(status)
                    .content(vec![text_content(&bounded(output))]);
                updates.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id.clone(),
                    fields,
                )));
                updates
            }
            // A denied call is never started: the editor sees it fail, not run.
            EventKind::ApprovalDecided {
                call_id,
                decision: keel_core::ApprovalDecision::Deny,
            } => {
                self.close(call_id);
                let fields = ToolCallUpdateFields::new()
                    .status(ToolCallStatus::Failed)
                    .content(vec![text_content("Denied: the call was not run.")]);
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id.clone(),
                    fields,
                ))]
            }
            _ => Vec::new(),
        }
    }

    /// A `tool_call` for a call the editor does not know yet (none for a known one).
    fn announce(
        &mut self,
        call_id: &str,
        name: &str,
        arguments: &str,
        status: Option<ToolCallStatus>,
    ) -> Vec<SessionUpdate> {
        if !self.announced.insert(call_id.to_string()) {
            return Vec::new();
        }
        self.open.push(call_id.to_string());
        vec![SessionUpdate::ToolCall(tool_call(
            call_id,
            name,
            arguments,
            status.unwrap_or(ToolCallStatus::Pending),
        ))]
    }
}

impl TurnMapper {
    /// A `todo` call, applied to the list as the loop applies it: its result, and the plan
    /// when the list changed.
    fn todo_call(&mut self, call_id: &str, arguments: &str) -> Vec<SessionUpdate> {
        let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
        self.close(call_id);
        let (status, text, changed) = match self.todo.apply(&args) {
            Ok((answer, changed)) => (ToolCallStatus::Completed, answer, changed),
            Err(why) => (ToolCallStatus::Failed, format!("Error: {why}"), false),
        };
        let fields = ToolCallUpdateFields::new()
            .status(status)
            .content(vec![text_content(&text)]);
        let mut updates = vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call_id.to_string(),
            fields,
        ))];
        if changed {
            updates.push(SessionUpdate::Plan(plan_of(&self.todo)));
        }
        updates
    }

    fn close(&mut self, call_id: &str) {
        self.open.retain(|id| id != call_id);
    }
}

/// The name of keel's task-list tool, whose list becomes the editor's plan.
pub const TODO_TOOL: &str = "todo";

/// The `tool_call` announcing `name(arguments)` as call `call_id`.
pub fn tool_call(call_id: &str, name: &str, arguments: &str, status: ToolCallStatus) -> ToolCall {
    let input: serde_json::Value = serde_json::from_str(arguments)
        .unwrap_or_else(|_| serde_json::Value::String(arguments.to_string()));
    ToolCall::new(call_id.to_string(), title(name, &input))
        .kind(tool_kind(name))
        .status(status)
        .raw_input(input)
}

/// A `tool_call_update` that only changes the status.
pub fn status_update(call_id: &str, status: ToolCallStatus) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        call_id.to_string(),
        ToolCallUpdateFields::new().status(status),
    ))
}

/// What kind of tool `name` is, for the editor's icon.
pub fn tool_kind(name: &str) -> ToolKind {
    match name {
        "read_file" | "list_dir" | "read_attachment" | "skill_view" | "skills_list"
        | "get_run_journal" => ToolKind::Read,
        "write_file" | "append_file" => ToolKind::Edit,
        "shell" => ToolKind::Execute,
        "session_search" => ToolKind::Search,
        "http_get" => ToolKind::Fetch,
        TODO_TOOL | "clarify" | "ask_human" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

/// A one-line title: the tool and its main argument (`shell: ls -la`, `read_file: a.txt`).
pub fn title(name: &str, input: &serde_json::Value) -> String {
    let main = ["command", "path", "url", "query", "pattern", "name", "goal"]
        .iter()
        .find_map(|key| input.get(key).and_then(|v| v.as_str()));
    match main {
        Some(value) => {
            let line = value.lines().next().unwrap_or_default();
            let short: String = line.chars().take(80).collect();
            let cut = short.len() < line.len() || line.len() < value.len();
            format!("{name}: {short}{}", if cut { "…" } else { "" })
        }
        None => name.to_string(),
    }
}

/// The task list as the editor's plan: done and cancelled items are `completed`.
pub fn plan_of(todo: &TodoList) -> Plan {
    let entries = todo
        .items()
        .iter()
        .map(|item| {
            let status = match item.status.as_str() {
                "done" | "cancelled" => PlanEntryStatus::Completed,
                "in_progress" => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            };
            PlanEntry::new(item.text.clone(), PlanEntryPriority::Medium, status)
        })
        .collect();
    Plan::new(entries)
}

/// A text chunk.
pub fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
}

fn text_content(text: &str) -> ToolCallContent {
    ToolCallContent::from(ContentBlock::Text(TextContent::new(text)))
}

fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_TOOL_OUTPUT_CHARS) {
        Some((cut, _)) => format!("{}\n[… cut for the editor]", &text[..cut]),
        None => text.to_string(),
    }
}

/// The [`EventSink`] of one ACP session: maps each event of its runs and sends the updates.
pub struct UpdateSink {
    session_id: String,
    out: Arc<dyn UpdateOut>,
    turn: Mutex<TurnMapper>,
}

impl UpdateSink {
    /// A sink for `session_id` sending to `out`.
    pub fn new(session_id: impl Into<String>, out: Arc<dyn UpdateOut>) -> Self {
        UpdateSink {
            session_id: session_id.into(),
            out,
            turn: Mutex::new(TurnMapper::new()),
        }
    }

    /// Starts a new prompt of a session whose task list is `todo`: forgets what the previous
    /// prompt showed.
    pub fn begin_turn(&self, todo: TodoList) {
        *self.turn.lock().unwrap_or_else(|e| e.into_inner()) = TurnMapper::with_todo(todo);
    }

    /// [`UpdateSink::begin_turn`] for a resumed run whose `calls` the editor was shown as
    /// pending (by the replay): their start updates them instead of announcing them again.
    pub fn begin_resumed_turn(&self, todo: TodoList, calls: impl IntoIterator<Item = String>) {
        *self.turn.lock().unwrap_or_else(|e| e.into_inner()) =
            TurnMapper::with_todo(todo).knowing(calls);
    }

    /// Whether answer text streamed since [`UpdateSink::begin_turn`].
    pub fn streamed_text(&self) -> bool {
        self.turn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .streamed_text()
    }

    /// Sends `update` as this session's, outside any event.
    pub fn send(&self, update: SessionUpdate) {
        self.out.send(&self.session_id, update);
    }
}

impl EventSink for UpdateSink {
    fn emit(&self, event: &Event) {
        // Another session's events (a delegated child's) are not this editor session's.
        if event.session_id != self.session_id {
            return;
        }
        let updates = self
            .turn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(event);
        for update in updates {
            self.out.send(&self.session_id, update);
        }
    }
}

#[cfg(test)]
#[path = "updates_tests.rs"]
mod tests;
