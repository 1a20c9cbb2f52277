//! What a run needs to survive its worker (DESIGN.md section 7, `migrations/0004_durability.sql`):
//! the rest of a safe boundary's commit (checkpoint, tool-call envelope rows, events, journal),
//! added to the commit's batches so the whole boundary is one transaction, and the reads,
//! heartbeats and cancel requests around them.
//!
//! A boundary's statements follow the run upsert in the same query (see [`crate::batch`]), in
//! this order: the checkpoint and the events reference the run, which exists by then, and the
//! events are numbered from `runs.event_count`, which the upsert has just raised by their number:
//! the first of `m` is `event_count - m + 1`, found through the primary key without reading a
//! single event. A commit's events are one row, one event per line of its payload
//! (`migrations/0020_events_per_commit.sql`): its checkpoint's row, when it has one
//! (`migrations/0023_events_with_their_checkpoint.sql`), a row of `run_events` otherwise; the
//! readers take both, by number. Its tool-call envelope rows are likewise in its checkpoint's
//! row when it has one (`migrations/0025_tool_calls_with_their_checkpoint.sql`), and in
//! `tool_calls` otherwise, where the rows written outside commits also go
//! ([`record_tool_calls`]); [`tool_calls`] reads both.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use keel_core::store::Commit;
use keel_core::{Checkpoint, Event, Journal, StoreError, ToolCallRecord};
use sqlx::sqlite::SqliteConnection;

use crate::OrBackend;
use crate::batch::{Batch, Plan, ROWS_PER_QUERY};
use crate::codec::{self, stored_count, timestamp, to_json};
use crate::connections::Connections;

/// The checkpoint's run is the commit's (`$5`).
const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (run_id, seq, boundary, iteration, \
     message_cursor, persisted, prompt_hash, completed_calls, state, frame, created_at";

/// The columns of the events a checkpoint row holds, after [`INSERT_CHECKPOINT`]'s.
const CHECKPOINT_EVENT_COLUMNS: &str = ", first_event, events, event_names, event_payload";

/// The column of the envelope rows a checkpoint row holds, after its events' columns.
const CHECKPOINT_TOOL_CALLS_COLUMN: &str = ", tool_calls";

/// Parameters bound per checkpoint, its events' and envelope rows' columns included.
const CHECKPOINT_PARAMS: usize = 14;

const INSERT_TOOL_CALLS: &str = "INSERT INTO tool_calls (run_id, call_id, name, arguments, \
     idempotent, started_at, completed_at, ok, output) VALUES ";

/// A later row of the same call replaces the earlier one, within a statement too.
const UPSERT_TOOL_CALLS_TAIL: &str = " ON CONFLICT (run_id, call_id) DO UPDATE SET \
     name = excluded.name, arguments = excluded.arguments, idempotent = excluded.idempotent, \
     started_at = excluded.started_at, completed_at = excluded.completed_at, ok = excluded.ok, \
     output = excluded.output";

/// Parameters bound per envelope row.
const TOOL_CALL_PARAMS: usize = 9;

/// The events of a commit without a checkpoint: the first's time follows [`add_event_values`]'s.
const INSERT_EVENTS: &str =
    "INSERT INTO run_events (run_id, seq, events, name, payload, ts) VALUES ($5";

/// The first of a commit's `m` events is numbered this `- m + 1` (see the module documentation).
const EVENT_COUNT: &str = "(SELECT event_count FROM runs WHERE id = $5)";

/// Parameters an events row binds.
const EVENT_PARAMS: usize = 4;

/// The journal of the commit's session (`$1`), updated now (`$2`).
const UPSERT_JOURNAL: &str = "INSERT INTO journals (session_id, journal, updated_at) VALUES ($1";

const UPSERT_JOURNAL_TAIL: &str = ", $2) ON CONFLICT (session_id) DO UPDATE SET \
     journal = excluded.journal, updated_at = excluded.updated_at";

/// Every column of `checkpoints`, as [`codec::decode_checkpoint`] reads them.
macro_rules! select_checkpoints {
    () => {
        "SELECT run_id, seq, boundary, iteration, message_cursor, persisted, prompt_hash, \
         completed_calls, state, frame, created_at FROM checkpoints WHERE run_id = $1"
    };
}

/// Every checkpoint of run `$1`, oldest first.
pub(crate) const SELECT_CHECKPOINTS: &str = concat!(select_checkpoints!(), " ORDER BY seq");

/// The latest checkpoint, its frame from the latest checkpoint that has one.
pub(crate) const SELECT_LATEST_CHECKPOINT: &str = "SELECT run_id, seq, boundary, iteration, \
     message_cursor, persisted, prompt_hash, completed_calls, state, \
     COALESCE(frame, (SELECT f.frame FROM checkpoints f WHERE f.run_id = $1 \
         AND f.frame IS NOT NULL ORDER BY f.seq DESC LIMIT 1)) AS frame, created_at \
     FROM checkpoints WHERE run_id = $1 ORDER BY seq DESC LIMIT 1";

/// The envelope rows of run `$1` in `tool_calls`, by start time then call id.
pub(crate) const SELECT_TOOL_CALLS: &str = "SELECT run_id, call_id, name, arguments, idempotent, \
     started_at, completed_at, ok, output FROM tool_calls WHERE run_id = $1 \
     ORDER BY started_at, call_id";

/// The checkpoints of `$1` that hold envelope rows, oldest first, as
/// [`codec::decode_held_tool_calls`] reads them.
pub(crate) const SELECT_HELD_TOOL_CALLS: &str = "SELECT seq, tool_calls FROM checkpoints \
     WHERE run_id = $1 AND tool_calls IS NOT NULL ORDER BY seq";

/// The rows of `run_events` of `$1`, and the checkpoints of `$1` that hold events, as
/// [`codec::decode_events`] reads them, ordered by their first event's number: the caller adds
/// a condition on each (`$run_events`, `$checkpoints`, or `""`).
macro_rules! select_event_rows {
    ($run_events:literal, $checkpoints:literal) => {
        concat!(
            "SELECT seq, events, payload FROM run_events WHERE run_id = $1",
            $run_events,
            " UNION ALL SELECT first_event, events, event_payload FROM checkpoints \
             WHERE run_id = $1 AND events > 0",
            $checkpoints,
            " ORDER BY 1"
        )
    };
}
pub(crate) use select_event_rows;

/// Every row holding events of run `$1`, by first event.
pub(crate) const SELECT_EVENTS: &str = select_event_rows!("", "");

/// The journal of session `$1`.
pub(crate) const SELECT_JOURNAL: &str = "SELECT journal FROM journals WHERE session_id = $1";

/// Sets the heartbeat only, and answers whether the run was asked to stop; no row: no run.
pub(crate) const HEARTBEAT: &str = "UPDATE runs SET heartbeat_at = $2 WHERE id = $1 \
     RETURNING cancel_requested_at IS NOT NULL";

/// The first request wins; later ones leave its time. Returns a row when the run was found,
/// either way.
pub(crate) const REQUEST_CANCEL: &str = "UPDATE runs SET cancel_requested_at = \
     COALESCE(cancel_requested_at, $2) WHERE id = $1 RETURNING 1";

/// Adds the commit's checkpoint, envelope rows, events, journal and token log rows, in that order, after its
/// run upsert (the last statement of `plan`).
pub(crate) fn add_boundary(plan: &mut Plan<'_>, commit: &Commit<'_>) -> Result<(), StoreError> {
    // The checkpoint's row holds the envelope rows when they are all of the commit's run.
    let held = commit.checkpoint.is_some()
        && commit
            .tool_calls
            .iter()
            .all(|call| call.run_id == commit.run.id);
    let (held_calls, table_calls) = if held {
        (commit.tool_calls, &[][..])
    } else {
        (&[][..], commit.tool_calls)
    };
    if let Some(checkpoint) = commit.checkpoint {
        let batch = plan.batch(CHECKPOINT_PARAMS);
        add_checkpoint(batch, checkpoint, commit.events, held_calls)?;
    } else if !commit.events.is_empty() {
        add_events(plan.batch(EVENT_PARAMS), commit.events)?;
    }
    for chunk in table_calls.chunks(ROWS_PER_QUERY) {
        add_tool_calls(plan.batch(chunk.len() * TOOL_CALL_PARAMS), chunk);
    }
    if let Some(journal) = commit.journal {
        let batch = plan.batch(1);
        batch
            .end_statement()
            .sql(UPSERT_JOURNAL)
            .value(to_json(journal, "the journal")?)
            .sql(UPSERT_JOURNAL_TAIL);
    }
    crate::token_log::add_charges(plan, commit.charges)
}

/// The insert of `checkpoint`, holding `events` and the envelope rows `calls` (the commit's,
/// possibly none).
fn add_checkpoint(
    batch: &mut Batch,
    checkpoint: &Checkpoint,
    events: &[Event],
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    batch.end_statement().sql(INSERT_CHECKPOINT);
    if !events.is_empty() {
        batch.sql(CHECKPOINT_EVENT_COLUMNS);
    }
    if !calls.is_empty() {
        batch.sql(CHECKPOINT_TOOL_CALLS_COLUMN);
    }
    batch
        .sql(") VALUES ($5")
        .value(i64::from(checkpoint.seq))
        .value(checkpoint.boundary.as_str())
        .value(i64::from(checkpoint.iteration))
        .value(stored_count(checkpoint.message_cursor, "message_cursor")?)
        .value(stored_count(checkpoint.persisted, "persisted")?)
        .value(checkpoint.prompt_hash.as_str())
        .value(to_json(&checkpoint.completed_calls, "completed calls")?)
        .value(checkpoint.state.as_str())
        .value(checkpoint.frame.as_deref())
        .value(timestamp(checkpoint.created_at));
    if !events.is_empty() {
        add_event_values(batch, events)?;
    }
    if !calls.is_empty() {
        batch.value(to_json(calls, "the tool-call envelope")?);
    }
    batch.sql(")");
    Ok(())
}

/// One upsert of up to [`ROWS_PER_QUERY`] envelope rows.
pub(crate) fn add_tool_calls(batch: &mut Batch, calls: &[ToolCallRecord]) {
    batch.end_statement().sql(INSERT_TOOL_CALLS);
    for (row, call) in calls.iter().enumerate() {
        let n = batch.param(call.run_id.as_str());
        batch.sql(if row == 0 { "($" } else { ", ($" }).number(n);
        batch
            .value(call.call_id.as_str())
            .value(call.name.as_str())
            .value(call.arguments.as_str())
            .value(call.idempotent)
            .value(timestamp(call.started_at))
            .value(call.completed_at.map(timestamp))
            .value(call.ok)
            .value(call.output.as_deref())
            .sql(")");
    }
    batch.sql(UPSERT_TOOL_CALLS_TAIL);
}

/// The insert of a commit's `events` (not empty) as one row of `run_events`.
fn add_events(batch: &mut Batch, events: &[Event]) -> Result<(), StoreError> {
    batch.end_statement().sql(INSERT_EVENTS);
    add_event_values(batch, events)?;
    batch.value(timestamp(events[0].ts)).sql(")");
    Ok(())
}

/// Writes the values of `events` (not empty) as a row holds them: the first's number, how many,
/// their names, and their JSON one per line.
fn add_event_values(batch: &mut Batch, events: &[Event]) -> Result<(), StoreError> {
    let mut names = String::with_capacity(events.len() * 24);
    for event in events {
        if !names.is_empty() {
            names.push(' ');
        }
        names.push_str(event.kind.name());
    }
    let payload = codec::json_lines(events, "an event")?;
    let count = stored_count(events.len() as u64, "the number of events")?;
    let m = batch.param(count);
    batch
        .sql(", ")
        .sql(EVENT_COUNT)
        .sql(" - $")
        .number(m)
        .sql(" + 1")
        .placeholder(m)
        .value(names)
        .value(payload);
    Ok(())
}

/// Every checkpoint of `run_id`, oldest first.
pub(crate) async fn checkpoints(
    reader: &mut SqliteConnection,
    run_id: &str,
) -> Result<Vec<Checkpoint>, StoreError> {
    let rows = sqlx::query(SELECT_CHECKPOINTS)
        .bind(run_id)
        .fetch_all(reader)
        .await
        .or_backend(|| format!("cannot read the checkpoints of run `{run_id}`"))?;
    rows.iter().map(codec::decode_checkpoint).collect()
}

/// The latest checkpoint of `run_id`.
pub(crate) async fn latest_checkpoint(
    reader: &mut SqliteConnection,
    run_id: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    let row = sqlx::query(SELECT_LATEST_CHECKPOINT)
        .bind(run_id)
        .fetch_optional(reader)
        .await
        .or_backend(|| format!("cannot read the latest checkpoint of run `{run_id}`"))?;
    row.as_ref().map(codec::decode_checkpoint).transpose()
}

/// The envelope rows of `run_id`, by start time, then call id: the rows of `tool_calls`, and
/// those its checkpoints hold, one record a call (see [`keep_latest`]).
pub(crate) async fn tool_calls(
    reader: &mut SqliteConnection,
    run_id: &str,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    let cannot_read = || format!("cannot read the tool calls of run `{run_id}`");
    // The table first: a call's records only move forward, from the table to a checkpoint, so
    // a commit landing between the two reads is seen whole or not at all.
    let rows = sqlx::query(SELECT_TOOL_CALLS)
        .bind(run_id)
        .fetch_all(&mut *reader)
        .await
        .or_backend(cannot_read)?;
    let mut calls = rows
        .iter()
        .map(codec::decode_tool_call)
        .collect::<Result<Vec<_>, _>>()?;
    let held = sqlx::query(SELECT_HELD_TOOL_CALLS)
        .bind(run_id)
        .fetch_all(reader)
        .await
        .or_backend(cannot_read)?;
    if held.is_empty() {
        return Ok(calls);
    }
    let mut positions: HashMap<String, usize> = calls
        .iter()
        .enumerate()
        .map(|(i, call)| (call.call_id.clone(), i))
        .collect();
    for row in &held {
        for record in codec::decode_held_tool_calls(row, run_id)? {
            keep_latest(&mut calls, &mut positions, record);
        }
    }
    calls.sort_by(|a, b| (a.started_at, &a.call_id).cmp(&(b.started_at, &b.call_id)));
    Ok(calls)
}

/// Adds `record`, held by a checkpoint's row (read in order), to `calls`: it replaces the
/// table's or an earlier checkpoint's record of the same call, unless it is unfinished and that
/// one finished (`migrations/0025_tool_calls_with_their_checkpoint.sql`).
pub(crate) fn keep_latest(
    calls: &mut Vec<ToolCallRecord>,
    positions: &mut HashMap<String, usize>,
    record: ToolCallRecord,
) {
    match positions.get(&record.call_id) {
        Some(&i) if calls[i].completed_at.is_some() && record.completed_at.is_none() => {}
        Some(&i) => calls[i] = record,
        None => {
            positions.insert(record.call_id.clone(), calls.len());
            calls.push(record);
        }
    }
}

/// Inserts or replaces envelope rows, in one transaction.
pub(crate) async fn record_tool_calls(
    conns: &Connections,
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    let mut batches = Vec::with_capacity(calls.len().div_ceil(ROWS_PER_QUERY));
    for chunk in calls.chunks(ROWS_PER_QUERY) {
        let mut batch = Batch::new();
        add_tool_calls(&mut batch, chunk);
        batches.push(batch);
    }
    conns
        .transaction(batches)
        .await
        .map(drop)
        .or_backend(|| "cannot record tool calls".into())
}

/// The events of `run_id`, in order.
pub(crate) async fn events(
    reader: &mut SqliteConnection,
    run_id: &str,
) -> Result<Vec<Event>, StoreError> {
    let rows = sqlx::query(SELECT_EVENTS)
        .bind(run_id)
        .fetch_all(reader)
        .await
        .or_backend(|| format!("cannot read the events of run `{run_id}`"))?;
    let events = codec::decode_events(&rows, run_id, 0)?;
    Ok(events.into_iter().map(|(_, event)| event).collect())
}

/// The journal of `session_id`.
pub(crate) async fn journal(
    reader: &mut SqliteConnection,
    session_id: &str,
) -> Result<Option<Journal>, StoreError> {
    let row = sqlx::query(SELECT_JOURNAL)
        .bind(session_id)
        .fetch_optional(reader)
        .await
        .or_backend(|| format!("cannot read the journal of session `{session_id}`"))?;
    row.as_ref()
        .map(|row| codec::decode_journal(row, session_id))
        .transpose()
}

/// Sets the heartbeat of `run_id`; returns whether it was asked to stop (false: no such run).
pub(crate) async fn heartbeat(
    conns: &Connections,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let doing = || format!("cannot record the heartbeat of run `{run_id}`");
    let batch = Batch::of(HEARTBEAT).bind(run_id).bind(timestamp(at));
    let cancel = conns.transaction(vec![batch]).await.or_backend(doing)?;
    Ok(cancel.unwrap_or(false))
}

/// Asks `run_id` to stop at `at`, unless it was asked before; false when there is no such run.
pub(crate) async fn request_cancel(
    conns: &Connections,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let batch = Batch::of(REQUEST_CANCEL).bind(run_id).bind(timestamp(at));
    let found = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot request run `{run_id}` to stop"))?;
    Ok(found.is_some())
}

/// Why a commit failed when its checkpoint is already stored: another worker wrote that
/// boundary of the run, so this one lost it (rather than SQLite's words for the primary key it
/// broke). `None` when that is not the reason.
pub(crate) async fn superseded(conns: &Connections, commit: &Commit<'_>) -> Option<StoreError> {
    let checkpoint = commit.checkpoint?;
    let stored: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM checkpoints WHERE run_id = $1 AND seq = $2")
            .bind(&commit.run.id)
            .bind(i64::from(checkpoint.seq))
            .fetch_optional(&mut *conns.reader().await.ok()?)
            .await
            .ok()?;
    stored.map(|_| StoreError::Superseded {
        run_id: commit.run.id.clone(),
        seq: checkpoint.seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::AssertSqlSafe;

    /// The details of `EXPLAIN QUERY PLAN` for `query`, one step a line.
    async fn plan(conns: &Connections, query: &str) -> String {
        // Rows of EXPLAIN QUERY PLAN are (id, parent, notused, detail).
        let rows: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {query}")))
                .bind("r")
                .bind("x")
                .fetch_all(&mut *conns.reader().await.unwrap())
                .await
                .unwrap();
        rows.into_iter()
            .map(|row| row.3)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn reads_and_the_event_numbering_seek_their_primary_keys() {
        let conns = Connections::open_temporary().await.unwrap();
        for query in [
            SELECT_CHECKPOINTS,
            SELECT_LATEST_CHECKPOINT,
            SELECT_EVENTS,
            SELECT_JOURNAL,
            SELECT_TOOL_CALLS,
            HEARTBEAT,
            REQUEST_CANCEL,
            "SELECT event_count FROM runs WHERE id = $1",
        ] {
            let text = plan(&conns, query).await;
            assert!(text.contains("SEARCH"), "{query}:\n{text}");
            assert!(!text.contains("SCAN"), "{query}:\n{text}");
            // Only the envelope rows (by start time) and the events checkpoints hold (by
            // number) are sorted: a handful per run.
            if query != SELECT_TOOL_CALLS && query != SELECT_EVENTS {
                assert!(!text.contains("TEMP B-TREE"), "{query}:\n{text}");
            }
        }
    }

    /// The opcodes of each statement of every batch of a full boundary's commit (messages,
    /// checkpoint, envelope rows, events, journal, token log; a running and a finished run), as
    /// SQLite compiled them on a migrated database.
    async fn boundary_statements() -> Vec<(String, Vec<(String, Option<String>)>)> {
        use keel_core::token_log::TokenCharge;
        use keel_core::{AgentState, Boundary, EventKind, Message, Usage};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel.db");
        crate::SqliteStore::open(&path).await.unwrap().close().await;
        let conn = rusqlite::Connection::open(&path).unwrap();
        let now = Utc::now();
        let mut run = crate::batch::tests::run();
        let checkpoint = Checkpoint {
            run_id: "r".into(),
            seq: 2,
            boundary: Boundary::ToolResult,
            iteration: 1,
            message_cursor: 1,
            persisted: 2,
            prompt_hash: "h".into(),
            completed_calls: Vec::new(),
            state: "{}".into(),
            frame: None,
            created_at: now,
        };
        let call = ToolCallRecord {
            run_id: "r".into(),
            call_id: "c".into(),
            name: "t".into(),
            arguments: "{}".into(),
            idempotent: false,
            started_at: now,
            completed_at: None,
            ok: None,
            output: None,
        };
        let event = Event {
            ts: now,
            run_id: "r".into(),
            session_id: "s".into(),
            kind: EventKind::RunStarted {
                provider: "p".into(),
                model: "m".into(),
                context: Default::default(),
            },
        };
        let charge = TokenCharge {
            user_id: Some("u".into()),
            model: "m".into(),
            usage: Usage::default(),
            cost: 0.0,
            at: now,
        };
        let journal = Journal::default();
        let mut statements = Vec::new();
        for (state, messages) in [
            (AgentState::Running, vec![Message::assistant("a")]),
            (
                AgentState::Completed,
                vec![Message::tool_result("c", "out"), Message::assistant("b")],
            ),
        ] {
            run.state = state;
            let commit = Commit {
                run: &run,
                messages: &messages,
                checkpoint: Some(&checkpoint),
                tool_calls: &[call.clone(), call.clone()],
                events: &[event.clone(), event.clone()],
                journal: Some(&journal),
                charges: std::slice::from_ref(&charge),
            };
            for batch in crate::batch::plan("s", Some("r"), &messages, Some(&commit)).unwrap() {
                for text in batch.text().split(";\n") {
                    let mut explain = conn.prepare(&format!("EXPLAIN {text}")).unwrap();
                    let mut rows = explain.raw_query();
                    let mut opcodes = Vec::new();
                    while let Some(row) = rows.next().unwrap() {
                        // EXPLAIN's columns: addr, opcode, p1, p2, p3, p4, p5, comment.
                        opcodes.push((row.get(1).unwrap(), row.get(5).unwrap()));
                    }
                    statements.push((text.to_string(), opcodes));
                }
            }
        }
        statements
    }

    /// Asserts that a full boundary's statements, among them one that starts with `among`, use
    /// no `opcode`.
    async fn assert_no_boundary_statement_uses(opcode: &str, among: &str) {
        let statements = boundary_statements().await;
        assert!(statements.len() >= 10, "{statements:?}");
        assert!(
            statements.iter().any(|(text, _)| text.starts_with(among)),
            "`{among}…` is among them: {statements:?}"
        );
        for (text, opcodes) in &statements {
            assert!(
                opcodes.iter().all(|(used, _)| used != opcode),
                "{text}: {opcodes:?}"
            );
        }
    }

    /// A temporary table costs a commit a B-tree opened, filled and dropped (a `RETURNING`
    /// clause, a multi-row insert into a table with triggers, an `IN` list, which the partial
    /// index `runs_active` had until `migrations/0021_active_runs_without_a_list.sql`): no
    /// statement of a boundary builds one, not even when it starts or ends a run.
    #[tokio::test]
    async fn a_boundarys_statements_build_no_temporary_table() {
        assert_no_boundary_statement_uses("OpenEphemeral", "UPDATE runs SET state").await;
    }

    /// A trigger on a table a boundary writes would make its insert a write of more than one
    /// thing that may abort, for which SQLite keeps a statement journal: a copy of each page the
    /// statement touches (the lane fence was such a trigger on `messages` until
    /// `migrations/0024_lane_fence_in_the_commit.sql`). No statement of a boundary runs one.
    #[tokio::test]
    async fn a_boundarys_statements_run_no_trigger() {
        assert_no_boundary_statement_uses("Program", "INSERT INTO messages").await;
    }
}
