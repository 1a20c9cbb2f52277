//! Fixtures shared by the durability tests and the `commit` bench: runs, times, checkpoints,
//! envelope rows and events of many shapes.

// Each test crate uses its own part of these.
#![allow(dead_code)]

use chrono::{DateTime, Duration, TimeZone, Utc};
use keel_core::{
    AgentState, Boundary, Checkpoint, ErrorReason, Event, EventKind, ProviderErrorKind, RunRecord,
    StopReason, StreamDelta, ToolCallRecord, Usage,
};

/// A fixed instant `minutes` after a base time, with a sub-microsecond part.
pub fn at(minutes: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
        + Duration::minutes(minutes)
        + Duration::nanoseconds(17)
}

pub fn run_record(id: &str, session_id: &str, started_at: DateTime<Utc>) -> RunRecord {
    RunRecord {
        id: id.into(),
        session_id: session_id.into(),
        state: AgentState::Running,
        reason: None,
        provider: "anthropic".into(),
        model: "claude-sonnet-4".into(),
        model_used: None,
        iterations: 0,
        usage: Usage::default(),
        final_text: None,
        error: None,
        started_at,
        updated_at: started_at,
        finished_at: None,
        cost: 0.0,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    }
}

/// [`run_record`] on OpenAI's `gpt-4.1`, as the store contract's older checks write it.
pub fn openai_run_record(id: &str, session_id: &str, started_at: DateTime<Utc>) -> RunRecord {
    RunRecord {
        provider: "openai".into(),
        model: "gpt-4.1".into(),
        ..run_record(id, session_id, started_at)
    }
}

pub fn event(run: &RunRecord, minutes: i64, kind: EventKind) -> Event {
    Event {
        ts: at(minutes) + Duration::nanoseconds(minutes.rem_euclid(1000)),
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        kind,
    }
}

/// An event of `run`, stamped now.
pub fn event_now(run: &RunRecord, kind: EventKind) -> Event {
    Event {
        ts: Utc::now(),
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        kind,
    }
}

/// A finished `read_file` call of `run`, as the envelope keeps it.
pub fn tool_call(run: &RunRecord, call_id: &str) -> ToolCallRecord {
    let now = Utc::now();
    ToolCallRecord {
        run_id: run.id.clone(),
        call_id: call_id.into(),
        name: "read_file".into(),
        arguments: r#"{"path": "src/main.rs"}"#.into(),
        idempotent: true,
        started_at: now,
        completed_at: Some(now),
        ok: Some(true),
        output: Some("fn main() {}\n".into()),
    }
}

/// The event of [`tool_call`]'s call completing, stamped now.
pub fn completed_event(run: &RunRecord, call_id: &str) -> Event {
    event_now(
        run,
        EventKind::ToolCompleted {
            call_id: call_id.into(),
            name: "read_file".into(),
            ok: true,
            output: "fn main() {}\n".into(),
            truncated: false,
            duration_ms: 2,
        },
    )
}

/// Checkpoint `seq` of `run`, after a tool result, with `state` and `prompt_hash`.
pub fn checkpoint(
    run: &RunRecord,
    seq: u32,
    prompt_hash: &str,
    state: impl std::fmt::Display,
) -> Checkpoint {
    Checkpoint {
        run_id: run.id.clone(),
        seq,
        boundary: Boundary::ToolResult,
        iteration: run.iterations,
        message_cursor: 1,
        persisted: u64::from(seq),
        prompt_hash: prompt_hash.into(),
        completed_calls: vec!["call_1".into()],
        state: state.to_string(),
        frame: None,
        created_at: Utc::now(),
    }
}

/// Events of many shapes: nested objects, options, floats, flattened stream deltas.
pub fn many_events(run: &RunRecord) -> Vec<Event> {
    vec![
        event(
            run,
            1,
            EventKind::RunStarted {
                provider: "anthropic".into(),
                model: "claude-sonnet-4".into(),
                context: Default::default(),
            },
        ),
        event(
            run,
            2,
            EventKind::ModelResponse {
                iteration: 1,
                model: "claude-sonnet-4-20250514".into(),
                stop_reason: StopReason::ToolUse,
                tool_calls: 2,
                usage: Usage {
                    input_tokens: 1_234,
                    output_tokens: 56,
                    cache_read_tokens: 1_000,
                    cache_write_tokens: 7,
                },
                latency_ms: 812,
            },
        ),
        event(
            run,
            3,
            EventKind::ModelError {
                iteration: 2,
                kind: ProviderErrorKind::RateLimit,
                status: None,
                message: "slow down".into(),
            },
        ),
        event(
            run,
            4,
            EventKind::StreamDelta {
                delta: StreamDelta::ToolCallArguments {
                    index: 1,
                    fragment: "{\"pa".into(),
                },
            },
        ),
        event(
            run,
            5,
            EventKind::BudgetNear {
                tokens: 90_000,
                cost: 0.1 + 0.2,
                message: "You are close to the budget.".into(),
            },
        ),
        event(
            run,
            6,
            EventKind::ToolCompleted {
                call_id: "call_1".into(),
                name: "read_file".into(),
                ok: false,
                output: "no such file: 日本語.txt".into(),
                truncated: true,
                duration_ms: 3,
            },
        ),
        event(
            run,
            7,
            EventKind::RunFailed {
                state: AgentState::Error,
                reason: Some(ErrorReason::ProviderFatal),
                message: "gave up".into(),
                iterations: 2,
            },
        ),
    ]
}

/// A fresh `MemoryStore`, for the contract tests' store makers.
pub async fn memory() -> (keel_store::MemoryStore, ()) {
    (keel_store::MemoryStore::new(), ())
}

/// A fresh SQLite store in memory.
pub async fn sqlite_in_memory() -> (keel_store::SqliteStore, ()) {
    (keel_store::SqliteStore::open_temporary().await.unwrap(), ())
}

/// A fresh SQLite store on a file in a temporary directory (kept while the guard lives).
pub async fn sqlite_file() -> (keel_store::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = keel_store::SqliteStore::open(&dir.path().join("keel.db"))
        .await
        .unwrap();
    (store, dir)
}

/// Checks the session-search index of the SQLite database at `path` (schema version 19 on):
/// see `keel_store::check_search_index`.
pub fn assert_search_index_consistent(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    keel_store::check_search_index(&conn).unwrap();
}

/// A store a contract suite runs on: made, or skipped (`KEEL_TEST_PG=skip`, said on stderr).
pub trait Made {
    /// The store.
    type Store;
    /// What keeps it alive (a temporary directory, say).
    type Guard;
    /// The store and its guard; `None` when skipped.
    fn made(self) -> Option<(Self::Store, Self::Guard)>;
}

impl<S, G> Made for (S, G) {
    type Store = S;
    type Guard = G;
    fn made(self) -> Option<(S, G)> {
        Some(self)
    }
}

impl<S, G> Made for Option<(S, G)> {
    type Store = S;
    type Guard = G;
    fn made(self) -> Option<(S, G)> {
        self
    }
}

/// A PostgreSQL store on a fresh schema of `KEEL_TEST_PG`; `None` when `KEEL_TEST_PG=skip`.
pub async fn postgres() -> Option<(keel_store::PgStore, ())> {
    keel_store::postgres::testing::store()
        .await
        .map(|store| (store, ()))
}
