//! `Store::commit` on SQLite: the one transaction the loop writes at every safe boundary, on a
//! file database in a temporary directory (WAL, `synchronous=NORMAL`, as `SqliteStore::open`
//! sets it up).
//!
//! - `boundary`: a typical boundary: the run record, one assistant message, a checkpoint with
//!   a ~3 KB state (no frame: the run's first checkpoint, written before measuring, has it),
//!   two tool-call envelope rows and three events;
//! - `append_only`: a boundary without a checkpoint: the run record and one message.
//!
//! Each commit is a new boundary of the same run (iteration, checkpoint seq and call ids
//! carry on), so the tables grow through the measurement as they do in a long run. Building
//! the records is outside the measurement.
//!
//! `cargo bench -p keel-store --bench commit -- --warm-up-time 1 --measurement-time 2`

use chrono::Utc;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use keel_core::store::Commit;
use keel_core::{
    AgentState, Checkpoint, Event, EventKind, Message, RunRecord, StopReason, Store,
    ToolCallRecord, Usage,
};
use keel_store::SqliteStore;

#[path = "../tests/common/mod.rs"]
mod common;
use common::{checkpoint, completed_event, event_now, run_record, tool_call};
use serde_json::json;

/// A prompt hash of the length the loop writes.
const PROMPT_HASH: &str = "sha256:9f86d081884c7d65";

/// A state JSON of about 3 KB, like a run's counters, guardrails and pending step.
fn typical_state() -> String {
    let history: Vec<serde_json::Value> = (0..24)
        .map(|i| json!({"tool": "read_file", "args_hash": format!("{i:016x}"), "ok": true}))
        .collect();
    json!({
        "iterations": 7,
        "usage": {"input_tokens": 123_456, "output_tokens": 7_890},
        "cost": 0.4321,
        "guard": {"level": 0, "history": history},
        "pending": {"kind": "tools", "calls": ["call_1", "call_2"]},
        "notes": "x".repeat(1_350),
    })
    .to_string()
}

/// The run's frame (settings and tool specs), written with its first checkpoint only.
fn frame() -> String {
    json!({
        "settings": {"provider": "anthropic", "model": "claude-sonnet-4", "max_iterations": 50},
        "tools": ["read_file", "grep", "run_command", "ask_human"],
    })
    .to_string()
}

/// One boundary's records, built before it is measured.
struct BoundaryRecords {
    run: RunRecord,
    checkpoint: Option<Checkpoint>,
    calls: Vec<ToolCallRecord>,
    events: Vec<Event>,
    charges: Vec<keel_core::TokenCharge>,
}

impl BoundaryRecords {
    /// The `seq`th boundary of `run`; `full`: with its checkpoint, envelope rows and events.
    fn new(run: &RunRecord, seq: u32, state: &str, full: bool) -> BoundaryRecords {
        let mut run = run.clone();
        run.iterations = seq;
        run.updated_at = Utc::now();
        run.state = if seq.is_multiple_of(2) {
            AgentState::Running
        } else {
            AgentState::WaitingForTool
        };
        if !full {
            return BoundaryRecords {
                run,
                checkpoint: None,
                calls: Vec::new(),
                events: Vec::new(),
                charges: Vec::new(),
            };
        }
        let calls = vec![
            tool_call(&run, &format!("call_{seq}_a")),
            tool_call(&run, &format!("call_{seq}_b")),
        ];
        let events = vec![
            event_now(
                &run,
                EventKind::ModelResponse {
                    iteration: seq,
                    model: "claude-sonnet-4".into(),
                    stop_reason: StopReason::ToolUse,
                    tool_calls: 2,
                    usage: Usage::default(),
                    latency_ms: 900,
                },
            ),
            completed_event(&run, &format!("call_{seq}_a")),
            completed_event(&run, &format!("call_{seq}_b")),
        ];
        // The model call this boundary follows, in the token log.
        let charges = vec![keel_core::TokenCharge {
            user_id: Some("ada".into()),
            model: "claude-sonnet-4".into(),
            usage: Usage::default(),
            cost: 0.01,
            at: Utc::now(),
        }];
        BoundaryRecords {
            checkpoint: Some(checkpoint(&run, seq, PROMPT_HASH, state)),
            run,
            calls,
            events,
            charges,
        }
    }

    fn commit<'a>(&'a self, messages: &'a [Message]) -> Commit<'a> {
        Commit {
            run: &self.run,
            messages,
            checkpoint: self.checkpoint.as_ref(),
            tool_calls: &self.calls,
            events: &self.events,
            journal: None,
            charges: &self.charges,
        }
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = rt
        .block_on(SqliteStore::open(&dir.path().join("keel.db")))
        .expect("sqlite");
    let state = typical_state();
    assert!((2_500..3_500).contains(&state.len()), "{}", state.len());
    let answer = [Message::assistant(
        "I read the file; main is empty, so the program does nothing. ".repeat(4),
    )];

    let mut group = c.benchmark_group("commit");
    for (name, full) in [("boundary", true), ("append_only", false)] {
        let run = run_record(name, &format!("session-{name}"), Utc::now());
        // The run's first boundary writes its frame; the measured ones carry on from it.
        let first = Checkpoint {
            frame: Some(frame()),
            ..checkpoint(&run, 1, PROMPT_HASH, &state)
        };
        rt.block_on(store.commit(&Commit {
            checkpoint: Some(&first),
            ..Commit::new(&run, &answer)
        }))
        .expect("first commit");
        let mut seq = 1;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    seq += 1;
                    BoundaryRecords::new(&run, seq, &state, full)
                },
                |boundary| {
                    rt.block_on(store.commit(&boundary.commit(&answer)))
                        .expect("commit")
                },
                BatchSize::SmallInput,
            )
        });
        // Everything measured was written.
        let written = rt.block_on(store.messages(&run.session_id)).expect("read");
        assert_eq!(written.len(), seq as usize, "{name}");
        let checkpoints = rt.block_on(store.checkpoints(&run.id)).expect("read");
        let expected = if full { seq as usize } else { 1 };
        assert_eq!(checkpoints.len(), expected, "{name}");
        eprintln!("{name}: {seq} boundaries written");
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
