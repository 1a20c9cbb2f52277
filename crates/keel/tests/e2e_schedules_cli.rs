//! `keel schedules`, run as an operator runs it on the daemon's store: add a schedule to a
//! conversation (every interval, or cron in a time zone), list it, show it with its slots
//! (fired with the run, missed, refused), pause, resume and remove it; what cannot be used is
//! refused with exit code 2 and a reason, and nothing is stored then.

mod common;

use chrono::{DateTime, Utc};
use common::{keel, run, stderr, stdout, temp};
use keel_platform::schedule::{ScheduleStore, SlotOutcome, SlotRecord};
use keel_platform::{ConversationStore, NewConversation};
use keel_store::SqliteStore;
use serde_json::Value;

async fn conversation(home: &std::path::Path, id: &str) {
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: Default::default(),
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    store.close().await;
}

/// Runs `keel schedules ARGS` in `home`, which must succeed; its stdout.
fn schedules(home: &std::path::Path, args: &[&str]) -> String {
    let output = run(keel(home).arg("schedules").args(args));
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    stdout(&output)
}

#[tokio::test]
async fn an_operator_adds_lists_shows_pauses_resumes_and_removes_a_schedule() {
    let (_guard, home) = temp();
    conversation(&home, "c1").await;
    let added = schedules(
        &home,
        &[
            "add",
            "--conversation",
            "c1",
            "--every",
            "15m",
            "stand",
            "up",
        ],
    );
    assert!(
        added.contains("added to conversation c1: every 15m, catch-up once"),
        "{added}"
    );
    let id = added.split_whitespace().nth(1).unwrap().to_string();
    let cron = schedules(
        &home,
        &[
            "add",
            "--conversation",
            "c1",
            "--cron",
            "0 9 * * 1-5",
            "--tz",
            "Europe/Berlin",
            "--catch-up",
            "skip",
            "good morning",
        ],
    );
    assert!(
        cron.contains("cron \"0 9 * * 1-5\" (Europe/Berlin), catch-up skip"),
        "{cron}"
    );

    let listed = schedules(&home, &["list"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed.contains(&format!("{id}  active  every 15m  next ")),
        "{listed}"
    );
    assert!(listed.contains("stand up"));
    let json: Vec<Value> = schedules(&home, &["list", "--conversation", "c1", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(json.len(), 2);
    let mine = json.iter().find(|s| s["id"] == id.as_str()).unwrap();
    assert_eq!(
        (mine["spec"].as_str(), mine["created_by"].as_str()),
        (Some("900"), Some("operator"))
    );
    let next: DateTime<Utc> = mine["next_slot"].as_str().unwrap().parse().unwrap();
    assert!(schedules(&home, &["show", &id]).contains("no slots yet"));

    // Its slots, as the scheduler records them, are shown newest first.
    let store = SqliteStore::open(&home.join("keel.db")).await.unwrap();
    for (minutes, outcome, reason) in [
        (0, SlotOutcome::Missed, None),
        (
            15,
            SlotOutcome::Refused,
            Some("ann is over the monthly budget"),
        ),
    ] {
        let record = SlotRecord {
            schedule_id: id.clone(),
            slot: next + chrono::Duration::minutes(minutes),
            outcome,
            run_id: None,
            reason: reason.map(str::to_string),
            at: Utc::now(),
        };
        assert!(store.record_slot(&record).await.unwrap());
    }
    store.close().await;
    let shown = schedules(&home, &["show", &id]);
    let refused = shown
        .find("refused  ann is over the monthly budget")
        .expect(&shown);
    let missed = shown.find("missed").expect(&shown);
    assert!(refused < missed, "{shown}");
    let shown: Value = serde_json::from_str(&schedules(&home, &["show", &id, "--json"])).unwrap();
    assert_eq!(shown["slots"].as_array().unwrap().len(), 2);

    assert!(schedules(&home, &["pause", &id]).contains(&format!("schedule {id} paused")));
    let listed = schedules(&home, &["list"]);
    assert!(
        listed.contains(&format!("{id}  paused (paused by an operator)")),
        "{listed}"
    );
    let resumed = schedules(&home, &["resume", &id]);
    assert!(
        resumed.contains(&format!("schedule {id} resumed; next at ")),
        "{resumed}"
    );
    assert!(schedules(&home, &["list"]).contains(&format!("{id}  active")));

    assert!(schedules(&home, &["rm", &id]).contains(&format!("schedule {id} deleted")));
    let again = run(keel(&home).args(["schedules", "rm", &id]));
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains(&format!("no schedule has the id `{id}`")));
    assert_eq!(schedules(&home, &["list"]).lines().count(), 1);
}

#[tokio::test]
async fn what_cannot_be_used_is_refused_with_a_reason_and_nothing_is_stored() {
    let (_guard, home) = temp();
    conversation(&home, "c1").await;
    for (args, says) in [
        (
            vec!["--conversation", "c1", "--every", "10s", "hi"],
            "too short",
        ),
        (
            vec!["--conversation", "c1", "--at", "2020-01-01T00:00:00Z", "hi"],
            "in the past",
        ),
        (
            vec![
                "--conversation",
                "c1",
                "--cron",
                "0 9 * * *",
                "--tz",
                "Mars/Base",
                "hi",
            ],
            "time zone",
        ),
        (
            vec![
                "--conversation",
                "c1",
                "--every",
                "1h",
                "--catch-up",
                "maybe",
                "hi",
            ],
            "catch_up",
        ),
        (
            vec!["--conversation", "nope", "--every", "1h", "hi"],
            "no conversation has the id `nope`",
        ),
    ] {
        let output = run(keel(&home).args(["schedules", "add"]).args(&args));
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // Two "when"s, or none, are refused by the parser.
    let both = run(keel(&home).args([
        "schedules",
        "add",
        "--conversation",
        "c1",
        "--every",
        "1h",
        "--cron",
        "0 9 * * *",
        "hi",
    ]));
    assert!(!both.status.success());
    let none = run(keel(&home).args(["schedules", "add", "--conversation", "c1", "hi"]));
    assert!(!none.status.success());
    assert!(schedules(&home, &["list"]).contains("no schedules"));
}
