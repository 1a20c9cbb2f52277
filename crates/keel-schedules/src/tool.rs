//! The `schedule` tool: the model schedules a message into its own conversation — once at an
//! instant, every interval, or on a cron expression in a time zone — lists the conversation's
//! schedules, and cancels one it made.
//!
//! Whose schedule it is is the loop's to say, never the model's: the conversation and the owner
//! come from the call's context (`session_id`, `user_id`), and the answer goes to the
//! conversation's channel like any run's. `list` and `cancel` see only this conversation's
//! schedules; a schedule an operator made cannot be cancelled here; nothing rewrites a
//! schedule's text. The tool changes things, so in an untrusted conversation (an email
//! trigger) each call waits for a person's approval (keel-core `reach`).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::clock::Clock;
use keel_core::{Permission, Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_platform::schedule::{DEFAULT_CATCH_UP, DEFAULT_CATCH_UP_CAP, DEFAULT_MAX_FAILURES};
use keel_platform::{
    CatchUp, Creator, DaemonStore, Schedule, ScheduleFilter, ScheduleKind, ScheduleState,
};
use serde::Deserialize;
use serde_json::json;

use crate::spec::{Kind, Spec};

/// The tool's name.
pub const SCHEDULE_TOOL: &str = "schedule";

/// The module of the tool, for personas' `allowed_modules`.
pub const SCHEDULES_MODULE: &str = "schedules";

/// The most active or paused schedules the model may have in one conversation.
pub const MAX_MODEL_SCHEDULES: usize = 20;

/// The longest text a schedule may send, in characters.
pub const MAX_TEXT_CHARS: usize = 4000;

const DESCRIPTION: &str = "Schedule a message to yourself in this conversation, to be handled \
later like a message from the user (a reminder, a daily summary, a check). action `add` needs \
`text` and exactly one of `at` (an RFC 3339 time with its offset, e.g. 2026-12-01T09:00:00+01:00), \
`every` (an interval of at least 1m: 90s, 15m, 2h, 1d) or `cron` (five fields: minute hour \
day-of-month month weekday, read in `tz`, an IANA zone such as Europe/Berlin; UTC if none). \
`text` may contain {time} and {date}, filled in with the time it fires. `catch_up` says what \
happens to times missed while keel was not running: `once` (default: one run for all), `skip` \
(none) or `all` (each). action `list` shows this conversation's schedules; action `cancel` with `id` \
removes one you made. Schedules of other conversations, and schedules an operator made, are \
out of reach.";

/// The arguments of `schedule`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleArgs {
    action: String,
    at: Option<String>,
    every: Option<String>,
    cron: Option<String>,
    tz: Option<String>,
    text: Option<String>,
    catch_up: Option<String>,
    id: Option<String>,
}

fn parameters() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "list", "cancel"],
                "description": "add a schedule, list this conversation's, or cancel one"},
            "at": {"type": "string",
                "description": "add, once: an RFC 3339 time with its offset"},
            "every": {"type": "string",
                "description": "add, repeating: an interval such as 15m, 2h, 1d (at least 1m)"},
            "cron": {"type": "string",
                "description": "add, on a calendar: five cron fields, e.g. \"0 9 * * 1-5\""},
            "tz": {"type": "string",
                "description": "add: the IANA time zone of `cron` and of {time}/{date} (UTC)"},
            "text": {"type": "string",
                "description": "add: the message to handle when it fires ({time}, {date})"},
            "catch_up": {"type": "string", "enum": ["skip", "once", "all"],
                "description": "add: what to do with times missed while keel was down (once)"},
            "id": {"type": "string", "description": "cancel: the schedule's id"}
        },
        "required": ["action"],
        "additionalProperties": false
    })
}

/// The `schedule` tool over a store, at a clock's time.
pub struct ScheduleTool {
    store: Arc<dyn DaemonStore>,
    clock: Arc<dyn Clock>,
    spec: ToolSpec,
}

impl ScheduleTool {
    /// A `schedule` tool keeping schedules in `store`; `clock` says when "now" is (the
    /// scheduler's clock, so a schedule's first slot is counted from the time the scheduler
    /// sees).
    pub fn new(store: Arc<dyn DaemonStore>, clock: Arc<dyn Clock>) -> Self {
        let mut spec = ToolSpec::new(SCHEDULE_TOOL, DESCRIPTION, parameters())
            // Its reads and writes stay in this conversation's schedules.
            .reach(Reach::Conversation)
            .in_module(SCHEDULES_MODULE);
        spec.required_permission = Permission::User;
        ScheduleTool { store, clock, spec }
    }
}

#[async_trait]
impl Tool for ScheduleTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        mut args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        keel_core::tool::strip_injected(&mut args);
        let args: ScheduleArgs = serde_json::from_value(args).map_err(|e| {
            ToolError::invalid_arguments(format!("invalid arguments for `schedule`: {e}"))
        })?;
        match args.action.as_str() {
            "add" => self.add(args, ctx).await,
            "list" => self.list(ctx).await,
            "cancel" => self.cancel(args, ctx).await,
            other => Err(ToolError::invalid_arguments(format!(
                "unknown action `{other}`: use add, list or cancel"
            ))),
        }
    }
}

impl ScheduleTool {
    async fn add(&self, args: ScheduleArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.id.is_some() {
            return Err(ToolError::invalid_arguments(
                "`add` takes no `id`: a schedule's id is given when it is made",
            ));
        }
        let (kind, when) = match (&args.at, &args.every, &args.cron) {
            (Some(at), None, None) => (Kind::Once, at),
            (None, Some(every), None) => (Kind::Every, every),
            (None, None, Some(cron)) => (Kind::Cron, cron),
            _ => {
                return Err(ToolError::invalid_arguments(
                    "`add` needs exactly one of `at`, `every` or `cron`",
                ));
            }
        };
        let text = args.text.as_deref().map(str::trim).unwrap_or_default();
        if text.is_empty() {
            return Err(ToolError::invalid_arguments(
                "`add` needs `text`: the message to handle when it fires",
            ));
        }
        if text.chars().count() > MAX_TEXT_CHARS {
            return Err(ToolError::invalid_arguments(format!(
                "`text` is longer than {MAX_TEXT_CHARS} characters"
            )));
        }
        let catch_up = match args.catch_up.as_deref() {
            None => DEFAULT_CATCH_UP,
            Some(name) => CatchUp::parse(name).ok_or_else(|| {
                ToolError::invalid_arguments(format!(
                    "`catch_up` must be skip, once or all, not `{name}`"
                ))
            })?,
        };
        let spec = Spec::parse(kind.as_str(), when, args.tz.as_deref())
            .map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
        let now = self.clock.now();
        let first = spec
            .first_slot(now)
            .map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
        let mine = self
            .list_of(&ctx.session_id)
            .await?
            .into_iter()
            .filter(|s| s.state != ScheduleState::Done)
            .count();
        if mine >= MAX_MODEL_SCHEDULES {
            return Err(ToolError::denied(format!(
                "this conversation has {mine} schedules already, the most it may have; cancel \
                 one first"
            )));
        }
        let schedule = Schedule {
            id: new_id(),
            session_id: ctx.session_id.clone(),
            owner: ctx.user_id.clone(),
            created_by: Creator::Model,
            kind: match spec.kind() {
                Kind::Once => ScheduleKind::Once,
                Kind::Every => ScheduleKind::Every,
                Kind::Cron => ScheduleKind::Cron,
            },
            spec: spec.spec_text(),
            tz: spec.tz_name(),
            text: text.to_owned(),
            catch_up,
            catch_up_cap: DEFAULT_CATCH_UP_CAP,
            state: ScheduleState::Active,
            paused_reason: None,
            next_slot: Some(first),
            failures: 0,
            max_failures: DEFAULT_MAX_FAILURES,
            created_at: now,
            updated_at: now,
        };
        self.store
            .create_schedule(&schedule)
            .await
            .map_err(|e| ToolError::failed(format!("cannot keep the schedule: {e}")))?;
        Ok(ToolOutput::text(format!(
            "Scheduled {}: {}, first at {}; missed times: {}.",
            schedule.id,
            spec.describe(),
            shown(first, &spec),
            catch_up.as_str()
        )))
    }

    async fn list(&self, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let schedules = self.list_of(&ctx.session_id).await?;
        if schedules.is_empty() {
            return Ok(ToolOutput::text("This conversation has no schedules."));
        }
        let mut out = format!(
            "{} schedule{} in this conversation:",
            schedules.len(),
            if schedules.len() == 1 { "" } else { "s" }
        );
        for schedule in &schedules {
            let when = Spec::parse(
                schedule.kind.as_str(),
                &schedule.spec,
                schedule.tz.as_deref(),
            )
            .map_or_else(
                |_| format!("{} {}", schedule.kind, schedule.spec),
                |s| s.describe(),
            );
            let next = match (schedule.state, schedule.next_slot) {
                (ScheduleState::Active, Some(next)) => format!("next {}", next.to_rfc3339()),
                (ScheduleState::Paused, _) => format!(
                    "paused: {}",
                    schedule
                        .paused_reason
                        .as_deref()
                        .unwrap_or("by an operator")
                ),
                _ => "done".to_owned(),
            };
            out.push_str(&format!(
                "\n- {} ({}, made by the {}): {when}; {next}; text: {}",
                schedule.id, schedule.state, schedule.created_by, schedule.text
            ));
        }
        Ok(ToolOutput::text(out))
    }

    async fn cancel(&self, args: ScheduleArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(id) = args
            .id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty())
        else {
            return Err(ToolError::invalid_arguments(
                "`cancel` needs the schedule's `id`",
            ));
        };
        let found = self
            .store
            .schedule(id)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read schedules: {e}")))?;
        // Another conversation's schedule is refused as one that is not there: its existence
        // is not this conversation's to learn.
        let Some(schedule) = found.filter(|s| s.session_id == ctx.session_id) else {
            return Err(ToolError::denied(format!(
                "no schedule `{id}` belongs to this conversation; you can cancel only this \
                 conversation's schedules (see action `list`)"
            )));
        };
        if schedule.created_by == Creator::Operator {
            return Err(ToolError::denied(format!(
                "schedule `{id}` was made by an operator; only an operator can cancel it (keel \
                 schedules rm)"
            )));
        }
        self.store
            .delete_schedule(id)
            .await
            .map_err(|e| ToolError::failed(format!("cannot cancel the schedule: {e}")))?;
        Ok(ToolOutput::text(format!("Cancelled schedule {id}.")))
    }

    async fn list_of(&self, session_id: &str) -> Result<Vec<Schedule>, ToolError> {
        self.store
            .list_schedules(&ScheduleFilter {
                session_id: Some(session_id.to_owned()),
                owner: None,
                limit: 100,
            })
            .await
            .map_err(|e| ToolError::failed(format!("cannot read schedules: {e}")))
    }
}

/// A new schedule's id: time-ordered, unique (a UUID v7, as the API makes them).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn shown(at: DateTime<Utc>, spec: &Spec) -> String {
    at.with_timezone(&spec.tz())
        .format("%Y-%m-%d %H:%M %Z")
        .to_string()
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
