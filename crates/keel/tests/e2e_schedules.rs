//! End to end: schedules through `keel serve` and the mock, on a clock a file holds
//! (`[schedules] clock_file`). The model schedules a message every minute with the `schedule`
//! tool; the first slot fires into its conversation; the daemon stops, the clock moves across
//! three slots, the daemon starts again: `skip` records the three missed and runs none, `once`
//! runs one for all, `all` runs each in order — and no slot ever runs twice. A `schedule` call
//! from an email trigger waits for a person's approval.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, last_message, temp};
use keel_platform::{DaemonStore, ScheduleFilter, SlotOutcome};
use serde_json::json;

/// The model schedules `tick {time}` every minute with `catch_up`, then answers "Done." to
/// every later message.
fn schedules_every_minute(catch_up: &str) -> String {
    json!({"steps": [
        {"tool_calls": [{"id": "s1", "name": "schedule", "arguments": {
            "action": "add", "every": "1m", "text": "tick {time}", "catch_up": catch_up}}]},
        {"text": "Done.", "forever": true}
    ]})
    .to_string()
}

struct Setup {
    mock: Mock,
    home: PathBuf,
    clock: PathBuf,
    _guards: Vec<tempfile::TempDir>,
}

fn setup(script: &str) -> Setup {
    let mock = Mock::start(script);
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    let clock = home.join("now");
    set_clock(&clock, "2026-11-29T12:00:00Z");
    // No grace: a slot is on time only at its instant, so a clock moved past slots makes
    // them late at once.
    daemon_config(
        &home,
        &mock,
        &workspace,
        &format!(
            "[schedules]\ntick_ms = 20\ngrace_secs = 0\nclock_file = \"{}\"\n",
            clock.display()
        ),
    );
    Setup {
        mock,
        home,
        clock,
        _guards: vec![home_guard, workspace_guard],
    }
}

fn set_clock(path: &Path, at: &str) {
    // Written whole, then renamed: the scheduler never reads half an instant.
    let next = path.with_extension("next");
    std::fs::write(&next, at).unwrap();
    std::fs::rename(&next, path).unwrap();
}

fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
    text.parse().unwrap()
}

async fn store(home: &Path) -> Arc<dyn DaemonStore> {
    Arc::new(
        keel_store::SqliteStore::open(&home.join("keel.db"))
            .await
            .unwrap(),
    )
}

/// The slots of the only schedule of `conversation`, oldest first, as `HH:MM outcome`.
async fn slots(store: &dyn DaemonStore, conversation: &str) -> Vec<String> {
    let schedules = store
        .list_schedules(&ScheduleFilter {
            session_id: Some(conversation.into()),
            owner: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(schedules.len(), 1, "{schedules:?}");
    let mut slots = store.slots(&schedules[0].id, 100).await.unwrap();
    slots.reverse();
    slots
        .iter()
        .map(|s| format!("{} {}", s.record.slot.format("%H:%M"), s.record.outcome))
        .collect()
}

/// Waits (a few ms at a time) until the schedule's slots are `expected` and every fired
/// slot's run has ended.
async fn until_slots(store: &dyn DaemonStore, conversation: &str, expected: &[&str]) {
    let mut seen = Vec::new();
    for _ in 0..3000 {
        seen = slots(store, conversation).await;
        if seen == expected {
            let schedules = store
                .list_schedules(&ScheduleFilter {
                    session_id: Some(conversation.into()),
                    owner: None,
                    limit: 10,
                })
                .await
                .unwrap();
            let entries = store.slots(&schedules[0].id, 100).await.unwrap();
            if entries
                .iter()
                .filter(|e| e.record.outcome == SlotOutcome::Fired)
                .all(|e| e.run_state.is_some_and(|s| s.is_terminal()))
            {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the slots never became {expected:?}; last seen {seen:?}");
}

/// What each model call was asked about, when it was a user's message (or a fire's).
fn user_messages(mock: &Mock) -> Vec<String> {
    mock.requests()
        .iter()
        .map(last_message)
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The whole story for one catch-up policy: the user messages the model saw, in order.
async fn across_a_restart(catch_up: &str, after_restart: &[&str]) -> Vec<String> {
    let setup = setup(&schedules_every_minute(catch_up));
    let key = make_key(&setup.home, &["--user", "ann"]);
    let mut daemon = Daemon::start(&setup.home);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let run = api.send(&conversation, "remind me every minute").await;
    api.until_state(&run, &["completed"]).await;
    let store = store(&setup.home).await;
    assert_eq!(
        slots(store.as_ref(), &conversation).await,
        Vec::<String>::new()
    );

    // The first slot, on time.
    set_clock(&setup.clock, "2026-11-29T12:01:00Z");
    until_slots(store.as_ref(), &conversation, &["12:01 fired"]).await;

    // Down across 12:02, 12:03 and 12:04; back at 12:04:30.
    daemon.terminate();
    set_clock(&setup.clock, "2026-11-29T12:04:30Z");
    daemon = Daemon::start(&setup.home);
    let mut expected = vec!["12:01 fired"];
    expected.extend_from_slice(after_restart);
    until_slots(store.as_ref(), &conversation, &expected).await;

    // Restarted again at the same instant: nothing fires twice; then 12:05 fires on time.
    daemon.terminate();
    daemon = Daemon::start(&setup.home);
    set_clock(&setup.clock, "2026-11-29T12:05:00Z");
    expected.push("12:05 fired");
    until_slots(store.as_ref(), &conversation, &expected).await;
    let schedule = &store
        .list_schedules(&ScheduleFilter {
            session_id: Some(conversation.clone()),
            owner: None,
            limit: 10,
        })
        .await
        .unwrap()[0];
    assert_eq!(schedule.next_slot, Some(at("2026-11-29T12:06:00Z")));
    assert_eq!(schedule.failures, 0, "every fire completed");
    drop(daemon);
    user_messages(&setup.mock)
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_records_the_three_missed_slots_and_runs_none() {
    let seen = across_a_restart("skip", &["12:02 missed", "12:03 missed", "12:04 missed"]).await;
    assert_eq!(seen, ["remind me every minute", "tick 12:01", "tick 12:05"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn once_runs_one_catch_up_for_the_three() {
    let seen = across_a_restart("once", &["12:02 missed", "12:03 missed", "12:04 fired"]).await;
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[..2], ["remind me every minute", "tick 12:01"]);
    assert!(
        seen[2].starts_with("tick 12:04\n\n(Scheduled for 2026-11-29 12:04 UTC; this one run also stands for 2 earlier times"),
        "{seen:?}"
    );
    assert_eq!(seen[3], "tick 12:05");
}

#[tokio::test(flavor = "multi_thread")]
async fn all_runs_each_of_the_three_in_order() {
    let seen = across_a_restart("all", &["12:02 fired", "12:03 fired", "12:04 fired"]).await;
    assert_eq!(
        seen,
        [
            "remind me every minute",
            "tick 12:01",
            "tick 12:02",
            "tick 12:03",
            "tick 12:04",
            "tick 12:05"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_call_from_an_email_trigger_waits_for_approval() {
    let setup = setup(&schedules_every_minute("skip"));
    let daemon = Daemon::start(&setup.home);
    let admin = daemon.client(&make_key(&setup.home, &["--admin"]));
    for args in [
        vec!["users", "set", "ann", "--permission", "user"],
        vec![
            "users",
            "link",
            "ann",
            "--platform",
            "slack",
            "--platform-user-id",
            "U2",
        ],
    ] {
        let output = common::run(common::keel(&setup.home).args(&args));
        assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    }
    let email = json!({
        "platform": "slack", "platform_user_id": "U2", "platform_channel_id": "C9",
        "text": "please remind me every minute", "source": "email_trigger"
    });
    let (status, report) = admin.post("/v1/messages?wait=true", email).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "waiting_on_human", "{report}");
    assert_eq!(report["approval"]["tool"], "schedule", "{report}");
    let store = store(&setup.home).await;
    let conversation = report["session_id"].as_str().unwrap();
    let made = store
        .list_schedules(&ScheduleFilter {
            session_id: Some(conversation.into()),
            owner: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert!(made.is_empty(), "scheduled before approval: {made:?}");
}
