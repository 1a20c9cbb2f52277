//! How the SQLite and PostgreSQL stores keep a run's events (schema versions 20 and 23): a commit's events are
//! one row, one event per line: its checkpoint's row when it has one, a row of `run_events`
//! otherwise. They read back one by one, in order across both, from the start or from any
//! event, even the middle of a row; rows from before version 20 hold one event each; a row whose
//! lines and count disagree is reported as corrupt, never read short.

use keel_core::store::Commit;
use keel_core::{Checkpoint, Event, EventKind, Store, StoreError};
use serde_json::json;

mod common;
#[macro_use]
mod rows;
use common::{checkpoint, many_events, run_record};
use rows::{Raw, int, opt_int};

on_sqlite_and_postgres!(
    a_commits_events_are_one_row_and_read_back_from_any_event,
    a_boundarys_events_are_kept_in_its_checkpoints_row_and_read_in_order_with_the_rest,
    a_superseded_checkpoint_keeps_none_of_its_events,
    a_row_whose_lines_and_count_disagree_is_corrupt_not_read_short,
    a_checkpoint_whose_lines_and_count_disagree_is_corrupt_not_read_short,
    a_checkpoint_that_says_it_holds_events_but_has_none_is_corrupt,
);

/// Stores `events` as the commits of run `r1` in session `s1`, `sizes[i]` events in the i-th.
async fn commit_in_groups(store: &dyn Store, events: &[Event], sizes: &[usize]) {
    let groups: Vec<(usize, bool)> = sizes.iter().map(|&size| (size, false)).collect();
    commit_boundaries(store, events, &groups).await;
}

/// Stores `events` as the commits of run `r1` in session `s1`: the i-th holds `groups[i].0`
/// events and, if `groups[i].1`, the run's next checkpoint (numbered from 1).
async fn commit_boundaries(store: &dyn Store, events: &[Event], groups: &[(usize, bool)]) {
    let record = run_record("r1", "s1", common::at(0));
    let mut rest = events;
    let mut seq = 0;
    for &(size, with_checkpoint) in groups {
        let (these, later) = rest.split_at(size);
        rest = later;
        let saved: Option<Checkpoint> = with_checkpoint.then(|| {
            seq += 1;
            checkpoint(&record, seq, "h", json!({"step": seq}))
        });
        let mut commit = Commit::new(&record, &[]);
        commit.events = these;
        commit.checkpoint = saved.as_ref();
        store.commit(&commit).await.unwrap();
    }
    assert!(rest.is_empty());
}

/// `(seq, first_event, events, event_names)` of every checkpoint of run `r1`, in order.
async fn checkpoint_rows(raw: &Raw) -> Vec<(i64, Option<i64>, i64, Option<String>)> {
    raw.rows(
        "SELECT seq, first_event, events, event_names FROM checkpoints \
         WHERE run_id = 'r1' ORDER BY seq",
    )
    .await
    .iter()
    .map(|row| (int(&row[0]), opt_int(&row[1]), int(&row[2]), row[3].clone()))
    .collect()
}

/// `runs.event_count` of run `r1`: it counts events, not rows.
async fn event_count(raw: &Raw) -> i64 {
    raw.count("SELECT event_count FROM runs WHERE id = 'r1'")
        .await
}

/// Asserts that run `r1` reads back as `events`, whole and after every point.
async fn assert_reads_back(store: &dyn Store, events: &[Event]) {
    assert_eq!(store.events("r1").await.unwrap(), events);
    // From every point, the middle of a row included, and past the end.
    for after in 0..=events.len() as u64 + 2 {
        let read = store.events_after("r1", after).await.unwrap();
        let want: Vec<(u64, Event)> = events
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, e)| (i as u64 + 1, e))
            .filter(|(seq, _)| *seq > after)
            .collect();
        assert_eq!(read, want, "after {after}");
    }
    assert!(store.events_after("r1", u64::MAX).await.unwrap().is_empty());
}

/// `(seq, events, name)` of every row of run `r1`, in order.
async fn rows(raw: &Raw) -> Vec<(i64, i64, String)> {
    raw.rows("SELECT seq, events, name FROM run_events WHERE run_id = 'r1' ORDER BY seq")
        .await
        .iter()
        .map(|row| (int(&row[0]), int(&row[1]), row[2].clone().unwrap()))
        .collect()
}

/// Events of many shapes, with newlines, quotes and non-ASCII text inside their strings.
fn events_with_newlines() -> Vec<Event> {
    let record = run_record("r1", "s1", common::at(0));
    let mut events = many_events(&record);
    events.push(common::event(
        &record,
        9,
        EventKind::ToolCompleted {
            call_id: "call_1".into(),
            name: "shell".into(),
            ok: true,
            output: "line one\nline two\r\n\"quoted\"\n\u{2028}é\n".into(),
            truncated: false,
            duration_ms: 3,
        },
    ));
    events
}

async fn a_commits_events_are_one_row_and_read_back_from_any_event(store: &dyn Store, raw: &Raw) {
    let events = events_with_newlines();
    let n = events.len();
    assert!(n >= 7, "{n}");
    let sizes = [1, 4, n - 5];
    commit_in_groups(store, &events, &sizes).await;

    let stored = rows(raw).await;
    let expected: Vec<(i64, i64)> = vec![(1, 1), (2, 4), (6, sizes[2] as i64)];
    assert_eq!(
        stored
            .iter()
            .map(|(seq, m, _)| (*seq, *m))
            .collect::<Vec<_>>(),
        expected
    );
    let names: Vec<&str> = events[1..5].iter().map(|e| e.kind.name()).collect();
    assert_eq!(stored[1].2, names.join(" "));

    assert_reads_back(store, &events).await;
    assert!(store.events_after("nobody", 0).await.unwrap().is_empty());
    assert_eq!(event_count(raw).await, n as i64);
    store.close().await;
}

#[tokio::test]
async fn rows_of_one_event_each_as_before_version_20_read_the_same() {
    let (store, dir) = common::sqlite_file().await;
    let path = dir.path().join("keel.db");
    let raw = &Raw::Sqlite(path.clone());
    let events = events_with_newlines();
    // A first commit makes the run; the rest are written the way version 4 to 19 wrote them:
    // one row per event, with no `events` column (its default).
    commit_in_groups(&store, &events[..1], &[1]).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (i, event) in events.iter().enumerate().skip(1) {
        conn.execute(
            "INSERT INTO run_events (run_id, seq, ts, name, payload) VALUES ('r1', ?1, '', ?2, ?3)",
            rusqlite::params![
                i as i64 + 1,
                event.kind.name(),
                serde_json::to_string(event).unwrap()
            ],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE runs SET event_count = ?1 WHERE id = 'r1'",
        [events.len() as i64],
    )
    .unwrap();
    assert_eq!(store.events("r1").await.unwrap(), events);
    let read = store.events_after("r1", 3).await.unwrap();
    assert_eq!(read.first().map(|(seq, _)| *seq), Some(4));
    assert_eq!(read.len(), events.len() - 3);
    // A commit after them numbers its row on from the count.
    let more = &events[..2];
    commit_in_groups(&store, more, &[2]).await;
    let last = rows(raw).await.pop().unwrap();
    assert_eq!((last.0, last.1), (events.len() as i64 + 1, 2));
    assert_eq!(store.events("r1").await.unwrap().len(), events.len() + 2);
    store.close().await;
}

async fn a_boundarys_events_are_kept_in_its_checkpoints_row_and_read_in_order_with_the_rest(
    store: &dyn Store,
    raw: &Raw,
) {
    let events = events_with_newlines();
    let n = events.len();
    // Rows of `run_events` (commits without a checkpoint, and every commit before version 23)
    // between checkpoints that hold events, and a checkpoint that holds none.
    let groups = [(1, false), (2, true), (0, true), (1, false), (n - 4, true)];
    commit_boundaries(store, &events, &groups).await;

    let names: Vec<&str> = events[1..3].iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        checkpoint_rows(raw).await,
        vec![
            (1, Some(2), 2, Some(names.join(" "))),
            (2, None, 0, None),
            (
                3,
                Some(5),
                n as i64 - 4,
                Some(
                    events[4..]
                        .iter()
                        .map(|e| e.kind.name())
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            ),
        ]
    );
    let event_rows: Vec<(i64, i64)> = rows(raw)
        .await
        .iter()
        .map(|(seq, m, _)| (*seq, *m))
        .collect();
    assert_eq!(event_rows, vec![(1, 1), (4, 1)]);
    assert_reads_back(store, &events).await;
    // The checkpoints read as they were written, their events aside.
    let stored = store.checkpoints("r1").await.unwrap();
    assert_eq!(stored.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(stored[2].state, json!({"step": 3}).to_string());
    assert_eq!(event_count(raw).await, n as i64);
    store.close().await;
}

async fn a_superseded_checkpoint_keeps_none_of_its_events(store: &dyn Store, _raw: &Raw) {
    let events = events_with_newlines();
    commit_boundaries(store, &events[..2], &[(2, true)]).await;
    // Another worker's commit of the same boundary loses, and numbers nothing.
    let record = run_record("r1", "s1", common::at(0));
    let again = checkpoint(&record, 1, "h", json!({"step": 1}));
    let mut commit = Commit::new(&record, &[]);
    commit.events = &events[2..5];
    commit.checkpoint = Some(&again);
    let error = store.commit(&commit).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Superseded { seq: 1, .. }),
        "{error}"
    );
    assert_reads_back(store, &events[..2]).await;
    // The next boundary's events follow on from the two.
    let next = checkpoint(&record, 2, "h", json!({"step": 2}));
    commit.checkpoint = Some(&next);
    store.commit(&commit).await.unwrap();
    assert_reads_back(store, &events[..5]).await;
    store.close().await;
}

/// Commits three events in the one row `groups` puts them in (after as many as `first - 1`
/// before), in `table`, then makes its count and lines disagree: every read of them is an error
/// that names the row's first event and says how, and a line that is not an event is named by
/// its own number.
async fn assert_a_disagreeing_row_is_corrupt(
    groups: &[(usize, bool)],
    table: &str,
    payload: &str,
    first: u64,
    store: &dyn Store,
    raw: &Raw,
) {
    let events = events_with_newlines();
    let n = groups.iter().map(|(size, _)| size).sum::<usize>();
    commit_boundaries(store, &events[..n], groups).await;
    let place = format!("event {first} of run `r1`");
    for (events, what) in [
        (4, "3 events where the row says 4"),
        (2, "3 events where the row says 2"),
    ] {
        raw.execute(&format!(
            "UPDATE {table} SET events = {events} WHERE events = 3"
        ))
        .await;
        for read in [
            store.events("r1").await.map(drop),
            store.events_after("r1", first).await.map(drop),
        ] {
            let error = read.unwrap_err().to_string();
            assert!(error.contains(&place), "{error}");
            assert!(error.contains(what), "{error}");
        }
        raw.execute(&format!(
            "UPDATE {table} SET events = 3 WHERE events = {events}"
        ))
        .await;
    }
    raw.execute(&format!(
        "UPDATE {table} SET {payload} = {payload} || 'x' WHERE events = 3"
    ))
    .await;
    let error = store.events("r1").await.unwrap_err().to_string();
    assert!(
        error.contains(&format!("event {} of run `r1`", first + 2)),
        "{error}"
    );
    assert!(error.contains("bad JSON"), "{error}");
    store.close().await;
}

async fn a_row_whose_lines_and_count_disagree_is_corrupt_not_read_short(
    store: &dyn Store,
    raw: &Raw,
) {
    let groups = [(3, false)];
    assert_a_disagreeing_row_is_corrupt(&groups, "run_events", "payload", 1, store, raw).await;
}

async fn a_checkpoint_whose_lines_and_count_disagree_is_corrupt_not_read_short(
    store: &dyn Store,
    raw: &Raw,
) {
    let groups = [(1, false), (3, true)];
    let table = "checkpoints";
    assert_a_disagreeing_row_is_corrupt(&groups, table, "event_payload", 2, store, raw).await;
}

async fn a_checkpoint_that_says_it_holds_events_but_has_none_is_corrupt(
    store: &dyn Store,
    raw: &Raw,
) {
    let events = events_with_newlines();
    commit_boundaries(store, &events[..3], &[(3, true)]).await;
    for broken in [
        "UPDATE checkpoints SET event_payload = NULL",
        "UPDATE checkpoints SET first_event = NULL",
    ] {
        let row = raw
            .rows("SELECT event_payload, first_event FROM checkpoints WHERE run_id = 'r1'")
            .await
            .remove(0);
        let (payload, first) = (
            row[0].clone().unwrap_or_default(),
            opt_int(&row[1]).unwrap_or(1),
        );
        raw.execute(broken).await;
        for read in [
            store.events("r1").await.map(drop),
            store.events_after("r1", 0).await.map(drop),
        ] {
            let error = read.unwrap_err();
            assert!(matches!(error, StoreError::Corrupt(_)), "{broken}: {error}");
            assert!(error.to_string().contains("run `r1`"), "{broken}: {error}");
        }
        raw.execute(&format!(
            "UPDATE checkpoints SET event_payload = '{}', first_event = {first}",
            payload.replace('\'', "''")
        ))
        .await;
        assert_eq!(store.events("r1").await.unwrap(), events[..3]);
    }
    store.close().await;
}
