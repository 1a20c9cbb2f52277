//! Conversions between keel-core values and column values: timestamps, counters, roles, run
//! states, and the JSON columns of a message. Every decoding failure is a
//! [`StoreError::Corrupt`] that says what was being read and where.

use std::fmt;

use chrono::{DateTime, Utc};
use keel_core::timestamp::Fraction;
use keel_core::worker::Worker;
use keel_core::{
    AgentState, Checkpoint, ErrorReason, Event, Journal, LaneHolder, Message, MessageMeta,
    Reasoning, Role, RunRecord, SessionInfo, StoreError, StoredMessage, ToolCall, ToolCallRecord,
    Usage, UserRecord,
};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};
use sqlx::{Decode, Row, Type};

/// A row of either database, read by column name: what lets one decoder serve the SQLite and
/// the PostgreSQL store.
pub(crate) trait Columns {
    /// The value of column `name`, or sqlx's error.
    fn value<'r, T: Value<'r>>(&'r self, name: &str) -> Result<T, sqlx::Error>;
}

/// A column value both databases decode (text, integers, floats, booleans, bytes and their
/// `Option`s).
pub(crate) trait Value<'r>:
    Decode<'r, Sqlite> + Type<Sqlite> + Decode<'r, Postgres> + Type<Postgres>
{
}

impl<'r, T> Value<'r> for T where
    T: Decode<'r, Sqlite> + Type<Sqlite> + Decode<'r, Postgres> + Type<Postgres>
{
}

impl Columns for SqliteRow {
    fn value<'r, T: Value<'r>>(&'r self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

impl Columns for PgRow {
    fn value<'r, T: Value<'r>>(&'r self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

/// The record a value was read from, for error messages; formatted only on failure.
#[derive(Clone, Copy)]
pub(crate) enum Place<'a> {
    Table(&'static str),
    Session(&'a str),
    Message(&'a str, i64),
    Run(&'a str),
    User(&'a str),
    Checkpoint(&'a str, i64),
    ToolCall(&'a str, &'a str),
    Event(&'a str, i64),
    Journal(&'a str),
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Table(table) => write!(f, "a row of `{table}`"),
            Place::Session(id) => write!(f, "session `{id}`"),
            Place::Message(session, seq) => write!(f, "message {seq} of session `{session}`"),
            Place::Run(id) => write!(f, "run `{id}`"),
            Place::User(id) => write!(f, "user `{id}`"),
            Place::Checkpoint(run, seq) => write!(f, "checkpoint {seq} of run `{run}`"),
            Place::ToolCall(run, call) => write!(f, "tool call `{call}` of run `{run}`"),
            Place::Event(run, seq) => write!(f, "event {seq} of run `{run}`"),
            Place::Journal(session) => write!(f, "the journal of session `{session}`"),
        }
    }
}

fn corrupt(place: Place<'_>, what: impl fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{place}: {what}"))
}

/// A row limit as SQL takes it.
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A timestamp as stored: RFC 3339 in UTC with exactly nine fractional digits, so that it is
/// lossless and text order is time order.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    keel_core::timestamp::rfc3339(at, Fraction::Nine)
}

fn parse_timestamp(
    text: &str,
    column: &str,
    place: Place<'_>,
) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| corrupt(place, format_args!("{column}: bad timestamp `{text}`: {e}")))
}

/// Column `name` of `row`, read from `place` (named in the error).
pub(crate) fn column<'r, T: Value<'r>>(
    row: &'r impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<T, StoreError> {
    row.value(name)
        .map_err(|e| corrupt(place, format_args!("column {name}: {e}")))
}

/// Timestamp column `name` of `row`.
pub(crate) fn time_column(
    row: &impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<DateTime<Utc>, StoreError> {
    let text: &str = column(row, name, place)?;
    parse_timestamp(text, name, place)
}

/// Nullable timestamp column `name` of `row`.
pub(crate) fn optional_time_column(
    row: &impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let text: Option<&str> = column(row, name, place)?;
    text.map(|text| parse_timestamp(text, name, place))
        .transpose()
}

fn count_column<T: TryFrom<i64>>(
    row: &impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<T, StoreError> {
    let value: i64 = column(row, name, place)?;
    T::try_from(value).map_err(|_| corrupt(place, format_args!("{name}: out of range: {value}")))
}

/// A nullable JSON column.
pub(crate) fn json_column<T: DeserializeOwned>(
    row: &impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<Option<T>, StoreError> {
    let text: Option<&str> = column(row, name, place)?;
    text.map(|text| {
        serde_json::from_str(text)
            .map_err(|e| corrupt(place, format_args!("{name}: bad JSON: {e}")))
    })
    .transpose()
}

/// Like [`json_column`], for a column that is never NULL.
fn required_json_column<T: DeserializeOwned>(
    row: &impl Columns,
    name: &str,
    place: Place<'_>,
) -> Result<T, StoreError> {
    json_column(row, name, place)?.ok_or_else(|| corrupt(place, format_args!("{name}: NULL")))
}

/// JSON text of an optional value (NULL for `None`), for a column of `what`.
pub(crate) fn optional_json<T: serde::Serialize>(
    value: Option<&T>,
    what: &str,
) -> Result<Option<String>, StoreError> {
    value.map(|value| to_json(value, what)).transpose()
}

/// JSON text of a value, for a column of `what`.
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(
    value: &T,
    what: &str,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| cannot_encode(what, e))
}

/// JSON text of each of `values`, one per line (JSON never holds a raw newline: serde escapes
/// it inside strings), for a column of `what`. Written into one buffer: no string of its own
/// per value, grown step by step.
pub(crate) fn json_lines<T: serde::Serialize>(
    values: &[T],
    what: &str,
) -> Result<String, StoreError> {
    let mut buffer = Vec::with_capacity(values.len() * 384);
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            buffer.push(b'\n');
        }
        serde_json::to_writer(&mut buffer, value).map_err(|e| cannot_encode(what, e))?;
    }
    // serde_json writes UTF-8 only: this takes the buffer as it is after checking it.
    String::from_utf8(buffer).map_err(|e| cannot_encode(what, e))
}

fn cannot_encode(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("cannot encode {what}: {e}"))
}

/// A run's counters as stored: SQLite integers are signed 64-bit (and SQLite would store a NaN
/// cost as NULL, so it is refused too).
#[derive(Debug)]
pub(crate) struct RunCounts {
    /// Model calls made.
    pub iterations: i64,
    /// Prompt tokens.
    pub input_tokens: i64,
    /// Completion tokens.
    pub output_tokens: i64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: i64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: i64,
}

impl RunCounts {
    /// The counters of `run`, or an error naming the one too large to store.
    pub(crate) fn of(run: &RunRecord) -> Result<Self, StoreError> {
        let count = |value: u64, what: &str| {
            i64::try_from(value).map_err(|_| {
                StoreError::Backend(format!(
                    "cannot save run `{}`: {what} {value} is too large to store",
                    run.id
                ))
            })
        };
        if !run.cost.is_finite() {
            return Err(StoreError::Backend(format!(
                "cannot save run `{}`: cost {} is not a finite number",
                run.id, run.cost
            )));
        }
        Ok(RunCounts {
            iterations: i64::from(run.iterations),
            input_tokens: count(run.usage.input_tokens, "input_tokens")?,
            output_tokens: count(run.usage.output_tokens, "output_tokens")?,
            cache_read_tokens: count(run.usage.cache_read_tokens, "cache_read_tokens")?,
            cache_write_tokens: count(run.usage.cache_write_tokens, "cache_write_tokens")?,
        })
    }
}

/// The columns of a message that are not stored as they are.
pub(crate) struct MessageColumns {
    /// Lowercase role name.
    pub role: &'static str,
    /// JSON array of the tool calls; `None` when there are none.
    pub tool_calls: Option<String>,
    /// JSON of the reasoning, when there is some.
    pub reasoning: Option<String>,
    /// JSON of the metadata; `None` when it is the default.
    pub meta: Option<String>,
    /// For a compaction summary, the seq of the last message it replaces (`summary_of.last`),
    /// kept in a column of its own so the latest summary is found through an index.
    pub summary_last: Option<i64>,
}

impl MessageColumns {
    /// Encodes `message`.
    pub(crate) fn encode(message: &Message) -> Result<Self, StoreError> {
        let json = |value: Result<String, serde_json::Error>, what: &str| {
            value.map_err(|e| StoreError::Backend(format!("cannot encode message {what}: {e}")))
        };
        let tool_calls = if message.tool_calls.is_empty() {
            None
        } else {
            Some(json(
                serde_json::to_string(&message.tool_calls),
                "tool calls",
            )?)
        };
        let reasoning = match &message.reasoning {
            Some(reasoning) => Some(json(serde_json::to_string(reasoning), "reasoning")?),
            None => None,
        };
        let meta = if message.meta == MessageMeta::default() {
            None
        } else {
            Some(json(serde_json::to_string(&message.meta), "metadata")?)
        };
        let summary_last = message
            .meta
            .summary_of
            .map(|range| stored_count(range.last, "summary_of.last"))
            .transpose()?;
        Ok(MessageColumns {
            role: message.role.as_str(),
            tool_calls,
            reasoning,
            meta,
            summary_last,
        })
    }
}

fn parse_role(text: &str, place: Place<'_>) -> Result<Role, StoreError> {
    match text {
        "system" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        other => Err(corrupt(place, format_args!("unknown role `{other}`"))),
    }
}

/// Decodes a row of `SELECT id, created_at, updated_at, title, message_count, owner,
/// lane_policy, place, trusted FROM sessions`.
pub(crate) fn decode_session(row: &impl Columns) -> Result<SessionInfo, StoreError> {
    let id: String = column(row, "id", Place::Table("sessions"))?;
    let place = Place::Session(&id);
    Ok(SessionInfo {
        created_at: time_column(row, "created_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
        title: column(row, "title", place)?,
        message_count: count_column(row, "message_count", place)?,
        owner: column(row, "owner", place)?,
        lane_policy: {
            let policy: &str = column(row, "lane_policy", place)?;
            keel_core::LanePolicy::parse(policy)
                .ok_or_else(|| corrupt(place, format_args!("unknown lane policy `{policy}`")))?
        },
        place: json_column(row, "place", place)?,
        trusted: column(row, "trusted", place)?,
        id,
    })
}

/// Decodes a row of `SELECT run_id, worker, claimed_at, paused FROM session_lanes …` (`paused`:
/// the holder's run waits for a human).
pub(crate) fn decode_lane_holder(row: &impl Columns) -> Result<LaneHolder, StoreError> {
    let place = Place::Table("session_lanes");
    Ok(LaneHolder {
        run_id: column(row, "run_id", place)?,
        worker: column(row, "worker", place)?,
        claimed_at: time_column(row, "claimed_at", place)?,
        paused: column::<Option<bool>>(row, "paused", place)?.unwrap_or(false),
    })
}

/// Decodes a row of `SELECT seq, run_id, role, content, tool_calls, tool_call_id, reasoning,
/// meta, created_at FROM messages` of session `session_id`.
pub(crate) fn decode_message(
    row: &impl Columns,
    session_id: &str,
) -> Result<StoredMessage, StoreError> {
    let seq: i64 = column(row, "seq", Place::Session(session_id))?;
    let place = Place::Message(session_id, seq);
    let seq = u64::try_from(seq).map_err(|_| corrupt(place, "negative seq"))?;
    let role: &str = column(row, "role", place)?;
    let message = Message {
        role: parse_role(role, place)?,
        content: column(row, "content", place)?,
        tool_calls: json_column::<Vec<ToolCall>>(row, "tool_calls", place)?.unwrap_or_default(),
        tool_call_id: column(row, "tool_call_id", place)?,
        reasoning: json_column::<Reasoning>(row, "reasoning", place)?,
        meta: json_column::<MessageMeta>(row, "meta", place)?.unwrap_or_default(),
    };
    Ok(StoredMessage {
        seq,
        run_id: column(row, "run_id", place)?,
        created_at: time_column(row, "created_at", place)?,
        message,
    })
}

/// Decodes a row selecting every column of `runs`.
pub(crate) fn decode_run(row: &impl Columns) -> Result<RunRecord, StoreError> {
    let id: String = column(row, "id", Place::Table("runs"))?;
    let place = Place::Run(&id);
    let state: &str = column(row, "state", place)?;
    let state: AgentState = state.parse().map_err(|e| corrupt(place, e))?;
    let reason: Option<&str> = column(row, "reason", place)?;
    let reason = reason
        .map(|text| {
            serde_json::from_value::<ErrorReason>(serde_json::Value::String(text.to_string()))
                .map_err(|_| corrupt(place, format_args!("unknown error reason `{text}`")))
        })
        .transpose()?;
    Ok(RunRecord {
        session_id: column(row, "session_id", place)?,
        state,
        reason,
        provider: column(row, "provider", place)?,
        model: column(row, "model", place)?,
        model_used: column(row, "model_used", place)?,
        iterations: count_column(row, "iterations", place)?,
        usage: Usage {
            input_tokens: count_column(row, "input_tokens", place)?,
            output_tokens: count_column(row, "output_tokens", place)?,
            cache_read_tokens: count_column(row, "cache_read_tokens", place)?,
            cache_write_tokens: count_column(row, "cache_write_tokens", place)?,
        },
        final_text: column(row, "final_text", place)?,
        error: column(row, "error", place)?,
        started_at: time_column(row, "started_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
        finished_at: optional_time_column(row, "finished_at", place)?,
        cost: column(row, "cost", place)?,
        heartbeat_at: optional_time_column(row, "heartbeat_at", place)?,
        cancel_requested_at: optional_time_column(row, "cancel_requested_at", place)?,
        resume_available: column(row, "resume_available", place)?,
        launch: column(row, "launch", place)?,
        worker: worker_from_column(row, place)?,
        id,
    })
}

/// The run's worker as its `worker` column holds it: JSON, or NULL.
pub(crate) fn worker_column(run: &RunRecord) -> Result<Option<String>, StoreError> {
    run.worker
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| {
            StoreError::Corrupt(format!("cannot encode the worker of run `{}`: {e}", run.id))
        })
}

fn worker_from_column(row: &impl Columns, place: Place<'_>) -> Result<Option<Worker>, StoreError> {
    let text: Option<&str> = column(row, "worker", place)?;
    text.map(|text| {
        serde_json::from_str(text).map_err(|e| corrupt(place, format_args!("worker: {e}")))
    })
    .transpose()
}

/// A permission as stored.
pub(crate) fn permission_name(permission: keel_core::Permission) -> &'static str {
    match permission {
        keel_core::Permission::Guest => "guest",
        keel_core::Permission::User => "user",
        keel_core::Permission::Admin => "admin",
        keel_core::Permission::Owner => "owner",
    }
}

fn permission_of(name: &str, place: Place<'_>) -> Result<keel_core::Permission, StoreError> {
    Ok(match name {
        "guest" => keel_core::Permission::Guest,
        "user" => keel_core::Permission::User,
        "admin" => keel_core::Permission::Admin,
        "owner" => keel_core::Permission::Owner,
        other => return Err(corrupt(place, format_args!("unknown permission `{other}`"))),
    })
}

/// Decodes a row of `SELECT id, monthly_token_budget, created_at, updated_at, permission FROM
/// users`.
pub(crate) fn decode_user(row: &impl Columns) -> Result<UserRecord, StoreError> {
    let id: String = column(row, "id", Place::Table("users"))?;
    let place = Place::User(&id);
    let budget: Option<i64> = column(row, "monthly_token_budget", place)?;
    let monthly_token_budget = budget
        .map(|b| u64::try_from(b).map_err(|_| corrupt(place, format_args!("negative budget {b}"))))
        .transpose()?;
    let permission: &str = column(row, "permission", place)?;
    Ok(UserRecord {
        monthly_token_budget,
        created_at: time_column(row, "created_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
        permission: permission_of(permission, place)?,
        id,
    })
}

/// Decodes a row of `SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens
/// FROM usage_log` of `user_id`.
pub(crate) fn decode_usage(row: &impl Columns, user_id: &str) -> Result<Usage, StoreError> {
    let place = Place::User(user_id);
    Ok(Usage {
        input_tokens: count_column(row, "input_tokens", place)?,
        output_tokens: count_column(row, "output_tokens", place)?,
        cache_read_tokens: count_column(row, "cache_read_tokens", place)?,
        cache_write_tokens: count_column(row, "cache_write_tokens", place)?,
    })
}

/// Decodes a row of `SELECT run_id, seq, boundary, iteration, message_cursor, persisted,
/// prompt_hash, completed_calls, state, created_at FROM checkpoints`.
pub(crate) fn decode_checkpoint(row: &impl Columns) -> Result<Checkpoint, StoreError> {
    let run_id: String = column(row, "run_id", Place::Table("checkpoints"))?;
    let seq: i64 = column(row, "seq", Place::Run(&run_id))?;
    let place = Place::Checkpoint(&run_id, seq);
    let boundary: &str = column(row, "boundary", place)?;
    Ok(Checkpoint {
        seq: count_column(row, "seq", place)?,
        boundary: boundary.parse().map_err(|e| corrupt(place, e))?,
        iteration: count_column(row, "iteration", place)?,
        message_cursor: count_column(row, "message_cursor", place)?,
        persisted: count_column(row, "persisted", place)?,
        prompt_hash: column(row, "prompt_hash", place)?,
        completed_calls: required_json_column(row, "completed_calls", place)?,
        state: column(row, "state", place)?,
        frame: column(row, "frame", place)?,
        created_at: time_column(row, "created_at", place)?,
        run_id,
    })
}

/// Decodes a row of `SELECT run_id, call_id, name, arguments, idempotent, started_at,
/// completed_at, ok, output FROM tool_calls`.
pub(crate) fn decode_tool_call(row: &impl Columns) -> Result<ToolCallRecord, StoreError> {
    let run_id: String = column(row, "run_id", Place::Table("tool_calls"))?;
    let call_id: String = column(row, "call_id", Place::Run(&run_id))?;
    let place = Place::ToolCall(&run_id, &call_id);
    Ok(ToolCallRecord {
        name: column(row, "name", place)?,
        arguments: column(row, "arguments", place)?,
        idempotent: column(row, "idempotent", place)?,
        started_at: time_column(row, "started_at", place)?,
        completed_at: optional_time_column(row, "completed_at", place)?,
        ok: column(row, "ok", place)?,
        output: column(row, "output", place)?,
        run_id,
        call_id,
    })
}

/// Decodes the envelope rows a checkpoint of run `run_id` holds, from a row of `SELECT seq,
/// tool_calls` (`migrations/0025_tool_calls_with_their_checkpoint.sql`): a record of another
/// run there is corrupt, as its JSON not being an array of records is.
pub(crate) fn decode_held_tool_calls(
    row: &impl Columns,
    run_id: &str,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    let seq: i64 = column(row, "seq", Place::Run(run_id))?;
    let place = Place::Checkpoint(run_id, seq);
    let records: Vec<ToolCallRecord> = json_column(row, "tool_calls", place)?.unwrap_or_default();
    match records.iter().find(|record| record.run_id != run_id) {
        Some(other) => Err(corrupt(
            place,
            format_args!(
                "tool_calls: holds tool call `{}` of run `{}`",
                other.call_id, other.run_id
            ),
        )),
        None => Ok(records),
    }
}

/// Decodes the rows of `SELECT seq, events, payload` of run `run_id` (of `run_events`, and of
/// its checkpoints that hold events: see `durability::select_event_rows`), in order, into their
/// events numbered above `after`, each with its number. A row's payload holds one event's JSON
/// per line, as many lines as `events` says (`migrations/0020_events_per_commit.sql`).
pub(crate) fn decode_events(
    rows: &[impl Columns],
    run_id: &str,
    after: i64,
) -> Result<Vec<(u64, Event)>, StoreError> {
    let mut events = Vec::with_capacity(rows.len() * 4);
    for row in rows {
        // SQLite reads NULL as 0 or "": a row missing its number or payload is corrupt, not
        // events numbered from 0 or none.
        let seq: i64 = column::<Option<i64>>(row, "seq", Place::Run(run_id))?
            .ok_or_else(|| corrupt(Place::Run(run_id), "an events row without its number"))?;
        let count: i64 = column(row, "events", Place::Event(run_id, seq))?;
        let payload: &str = column::<Option<&str>>(row, "payload", Place::Event(run_id, seq))?
            .ok_or_else(|| corrupt(Place::Event(run_id, seq), "payload: missing"))?;
        let mut lines = 0i64;
        for (i, line) in payload.split('\n').enumerate() {
            let number = seq.saturating_add(i as i64);
            lines += 1;
            if number <= after {
                continue;
            }
            let event = serde_json::from_str(line).map_err(|e| {
                corrupt(
                    Place::Event(run_id, number),
                    format_args!("payload: bad JSON: {e}"),
                )
            })?;
            events.push((u64::try_from(number).unwrap_or(0), event));
        }
        if lines != count {
            return Err(corrupt(
                Place::Event(run_id, seq),
                format_args!("payload: {lines} events where the row says {count}"),
            ));
        }
    }
    Ok(events)
}

/// Decodes a row of `SELECT journal FROM journals` of session `session_id`.
pub(crate) fn decode_journal(row: &impl Columns, session_id: &str) -> Result<Journal, StoreError> {
    required_json_column(row, "journal", Place::Journal(session_id))
}

/// A count as stored: SQLite integers are signed 64-bit.
pub(crate) fn stored_count(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Backend(format!("{what} is too large to store: {value}")))
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
