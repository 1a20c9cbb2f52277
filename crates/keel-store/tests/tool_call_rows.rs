//! How the SQLite and PostgreSQL stores keep a run's tool-call envelope (schema version 25): a commit's records
//! are held by its checkpoint's row when it has one; the records written outside commits (a
//! call about to have a side effect, before and after it), those of a commit without a
//! checkpoint, and any of another run stay rows of `tool_calls`. A run's envelope reads back as
//! one record a call across both, the latest of each: a checkpoint's over the table's, a later
//! checkpoint's over an earlier one's, never an unfinished record over a finished one.

use chrono::{Duration, Utc};
use keel_core::store::Commit;
use keel_core::{Checkpoint, RunRecord, Store, StoreError, ToolCallRecord};
use serde_json::json;

mod common;
#[macro_use]
mod rows;
use common::{checkpoint, run_record, tool_call};
use rows::Raw;

on_sqlite_and_postgres!(
    a_commits_records_live_in_its_checkpoints_row_and_read_back_in_start_order,
    a_call_recorded_before_its_side_effect_reads_as_its_commit_finished_it,
    an_unfinished_record_never_hides_a_finished_one,
    a_later_checkpoints_record_wins_over_an_earlier_ones,
    records_without_a_checkpoint_or_of_another_run_are_rows_of_the_table,
    a_superseded_commit_stores_none_of_its_records,
    a_held_record_of_another_run_is_corrupt_not_read,
);

/// Commits `calls` for `run`, with checkpoint `seq` when it is some.
async fn commit(
    store: &dyn Store,
    run: &RunRecord,
    seq: Option<u32>,
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    let saved: Option<Checkpoint> = seq.map(|seq| checkpoint(run, seq, "h", json!({"at": seq})));
    store
        .commit(&Commit {
            checkpoint: saved.as_ref(),
            tool_calls: calls,
            ..Commit::new(run, &[])
        })
        .await
        .map(drop)
}

/// How many rows of `tool_calls` run `run_id` has, and how many of its checkpoints hold records.
async fn rows(raw: &Raw, run_id: &str) -> (i64, i64) {
    (
        raw.count(&format!(
            "SELECT count(*) FROM tool_calls WHERE run_id = '{run_id}'"
        ))
        .await,
        raw.count(&format!(
            "SELECT count(*) FROM checkpoints WHERE run_id = '{run_id}' \
             AND tool_calls IS NOT NULL"
        ))
        .await,
    )
}

/// `call` as recorded before its side effect: started, not finished.
fn unfinished(mut call: ToolCallRecord) -> ToolCallRecord {
    call.completed_at = None;
    call.ok = None;
    call.output = None;
    call
}

/// `call` started `minutes` after the others of its fixture.
fn started_later(mut call: ToolCallRecord, minutes: i64) -> ToolCallRecord {
    call.started_at += Duration::minutes(minutes);
    call.completed_at = call.completed_at.map(|at| at + Duration::minutes(minutes));
    call
}

async fn a_commits_records_live_in_its_checkpoints_row_and_read_back_in_start_order(
    store: &dyn Store,
    raw: &Raw,
) {
    let run = run_record("r1", "s1", Utc::now());
    let first = started_later(tool_call(&run, "call_b"), 0);
    let second = started_later(tool_call(&run, "call_a"), 1);
    commit(store, &run, Some(1), &[second.clone(), first.clone()])
        .await
        .unwrap();
    assert_eq!(rows(raw, "r1").await, (0, 1), "no row of `tool_calls`");
    assert_eq!(store.tool_calls("r1").await.unwrap(), [first, second]);
}

async fn a_call_recorded_before_its_side_effect_reads_as_its_commit_finished_it(
    store: &dyn Store,
    raw: &Raw,
) {
    let run = run_record("r1", "s1", Utc::now());
    let done = tool_call(&run, "call_1");
    store
        .record_tool_calls(&[unfinished(done.clone())])
        .await
        .unwrap();
    // Unfinished, as a resume after a crash mid-call sees it.
    assert_eq!(
        store.tool_calls("r1").await.unwrap(),
        [unfinished(done.clone())]
    );
    store
        .record_tool_calls(std::slice::from_ref(&done))
        .await
        .unwrap();
    let mut as_committed = done.clone();
    as_committed.output = Some("fn main() {}\n[committed]".into());
    commit(store, &run, Some(1), std::slice::from_ref(&as_committed))
        .await
        .unwrap();
    assert_eq!(rows(raw, "r1").await, (1, 1));
    assert_eq!(store.tool_calls("r1").await.unwrap(), [as_committed]);
}

async fn an_unfinished_record_never_hides_a_finished_one(store: &dyn Store, _raw: &Raw) {
    let run = run_record("r1", "s1", Utc::now());
    let done = tool_call(&run, "call_1");
    store
        .record_tool_calls(std::slice::from_ref(&done))
        .await
        .unwrap();
    commit(store, &run, Some(1), &[unfinished(done.clone())])
        .await
        .unwrap();
    assert_eq!(
        store.tool_calls("r1").await.unwrap(),
        std::slice::from_ref(&done)
    );
    // Nor does a later checkpoint's hide an earlier one's.
    let other = tool_call(&run, "call_2");
    commit(store, &run, Some(2), std::slice::from_ref(&other))
        .await
        .unwrap();
    commit(store, &run, Some(3), &[unfinished(other.clone())])
        .await
        .unwrap();
    let mut read = store.tool_calls("r1").await.unwrap();
    read.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    assert_eq!(read, [done, other]);
}

async fn a_later_checkpoints_record_wins_over_an_earlier_ones(store: &dyn Store, _raw: &Raw) {
    let run = run_record("r1", "s1", Utc::now());
    let mut call = tool_call(&run, "call_1");
    commit(store, &run, Some(1), std::slice::from_ref(&call))
        .await
        .unwrap();
    call.ok = Some(false);
    call.output = Some("the second word".into());
    commit(store, &run, Some(2), std::slice::from_ref(&call))
        .await
        .unwrap();
    assert_eq!(store.tool_calls("r1").await.unwrap(), [call]);
}

async fn records_without_a_checkpoint_or_of_another_run_are_rows_of_the_table(
    store: &dyn Store,
    raw: &Raw,
) {
    let run = run_record("r1", "s1", Utc::now());
    let child = run_record("r2", "s1", Utc::now());
    let own = tool_call(&run, "call_1");
    commit(store, &run, None, std::slice::from_ref(&own))
        .await
        .unwrap();
    assert_eq!(rows(raw, "r1").await, (1, 0));
    // Another run's record in the commit: the table keeps every record of that commit.
    let mine = started_later(tool_call(&run, "call_2"), 1);
    let theirs = tool_call(&child, "call_9");
    commit(store, &run, Some(1), &[mine.clone(), theirs.clone()])
        .await
        .unwrap();
    assert_eq!(rows(raw, "r1").await, (2, 0));
    assert_eq!(rows(raw, "r2").await, (1, 0));
    assert_eq!(store.tool_calls("r1").await.unwrap(), [own, mine]);
    assert_eq!(store.tool_calls("r2").await.unwrap(), [theirs]);
}

async fn a_superseded_commit_stores_none_of_its_records(store: &dyn Store, raw: &Raw) {
    let run = run_record("r1", "s1", Utc::now());
    let winner = tool_call(&run, "call_1");
    commit(store, &run, Some(1), std::slice::from_ref(&winner))
        .await
        .unwrap();
    // Another worker's commit of the same boundary, with a call of its own.
    let loser = tool_call(&run, "call_2");
    let err = commit(store, &run, Some(1), &[loser]).await.unwrap_err();
    assert!(matches!(err, StoreError::Superseded { .. }), "{err}");
    assert_eq!(rows(raw, "r1").await, (0, 1));
    assert_eq!(store.tool_calls("r1").await.unwrap(), [winner]);
}

async fn a_held_record_of_another_run_is_corrupt_not_read(store: &dyn Store, raw: &Raw) {
    let run = run_record("r1", "s1", Utc::now());
    commit(store, &run, Some(1), &[tool_call(&run, "call_1")])
        .await
        .unwrap();
    raw.execute("UPDATE checkpoints SET tool_calls = replace(tool_calls, '\"r1\"', '\"r7\"')")
        .await;
    let err = store.tool_calls("r1").await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Corrupt(_)), "{text}");
    assert!(
        text.contains("checkpoint 1 of run `r1`") && text.contains("of run `r7`"),
        "{text}"
    );
}
