//! How the SQLite store keeps a run's events (schema version 20): a commit's events are one row,
//! one event per line, and they read back one by one, from the start or from any event, even
//! the middle of a row; rows from before version 20 hold one event each; a row whose lines and
//! count disagree is reported as corrupt, never read short.

use keel_core::store::Commit;
use keel_core::{Event, EventKind, Store};
use keel_store::SqliteStore;

mod common;
use common::{many_events, run_record};

/// Stores `events` as the commits of run `r1` in session `s1`, `sizes[i]` events in the i-th.
async fn commit_in_groups(store: &SqliteStore, events: &[Event], sizes: &[usize]) {
    let record = run_record("r1", "s1", common::at(0));
    let mut rest = events;
    for &size in sizes {
        let (these, later) = rest.split_at(size);
        rest = later;
        let mut commit = Commit::new(&record, &[]);
        commit.events = these;
        store.commit(&commit).await.unwrap();
    }
    assert!(rest.is_empty());
}

/// `(seq, events, name)` of every row of run `r1`, in order.
fn rows(path: &std::path::Path) -> Vec<(i64, i64, String)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT seq, events, name FROM run_events WHERE run_id = 'r1' ORDER BY seq")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
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

#[tokio::test]
async fn a_commits_events_are_one_row_and_read_back_from_any_event() {
    let (store, dir) = common::sqlite_file().await;
    let path = dir.path().join("keel.db");
    let events = events_with_newlines();
    let n = events.len();
    assert!(n >= 7, "{n}");
    let sizes = [1, 4, n - 5];
    commit_in_groups(&store, &events, &sizes).await;

    let stored = rows(&path);
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

    assert_eq!(store.events("r1").await.unwrap(), events);
    // From every point, the middle of a row included, and past the end.
    for after in 0..=n as u64 + 2 {
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
    assert!(store.events_after("nobody", 0).await.unwrap().is_empty());
    // The run counts events, not rows.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let count: i64 = conn
        .query_row("SELECT event_count FROM runs WHERE id = 'r1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(count, n as i64);
    store.close().await;
}

#[tokio::test]
async fn rows_of_one_event_each_as_before_version_20_read_the_same() {
    let (store, dir) = common::sqlite_file().await;
    let path = dir.path().join("keel.db");
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
    let last = rows(&path).pop().unwrap();
    assert_eq!((last.0, last.1), (events.len() as i64 + 1, 2));
    assert_eq!(store.events("r1").await.unwrap().len(), events.len() + 2);
    store.close().await;
}

#[tokio::test]
async fn a_row_whose_lines_and_count_disagree_is_corrupt_not_read_short() {
    let (store, dir) = common::sqlite_file().await;
    let path = dir.path().join("keel.db");
    let events = events_with_newlines();
    commit_in_groups(&store, &events[..3], &[3]).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (events, what) in [
        (4, "3 events where the row says 4"),
        (2, "3 events where the row says 2"),
    ] {
        conn.execute("UPDATE run_events SET events = ?1", [events])
            .unwrap();
        for read in [
            store.events("r1").await.map(drop),
            store.events_after("r1", 1).await.map(drop),
        ] {
            let error = read.unwrap_err().to_string();
            assert!(error.contains("event 1 of run `r1`"), "{error}");
            assert!(error.contains(what), "{error}");
        }
    }
    // A line that is not an event is named by its own number.
    conn.execute(
        "UPDATE run_events SET events = 3, payload = payload || 'x'",
        [],
    )
    .unwrap();
    let error = store.events("r1").await.unwrap_err().to_string();
    assert!(error.contains("event 3 of run `r1`"), "{error}");
    assert!(error.contains("bad JSON"), "{error}");
    store.close().await;
}
