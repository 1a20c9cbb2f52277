//! The hub keeps a bounded number of stopped runs and drops a conversation's channel with its
//! last follower: counts, in paused time.

use chrono::Utc;
use keel_core::EventKind;
use keel_store::MemoryStore;

use super::*;

fn hub(retention_s: u64, max_stopped: usize) -> Hub {
    Hub::with_limits(
        Arc::new(MemoryStore::new()),
        Duration::from_secs(retention_s),
        max_stopped,
    )
}

fn event(run_id: &str) -> Event {
    Event {
        ts: Utc::now(),
        run_id: run_id.into(),
        session_id: "s".into(),
        kind: EventKind::RunCompleted {
            iterations: 1,
            usage: Default::default(),
        },
    }
}

/// Drives `run_id` through the hub: started, one event, stopped.
fn drive(hub: &Hub, run_id: &str) {
    hub.run_starting(run_id, "s", 0);
    hub.emit(&event(run_id));
    hub.run_stopped(run_id, AgentState::Completed);
}

#[tokio::test(start_paused = true)]
async fn stopped_runs_are_kept_up_to_the_count_then_the_oldest_go() {
    let hub = hub(300, 3);
    for i in 0..10_000 {
        drive(&hub, &format!("run-{i}"));
        assert!(hub.sizes().kept_runs <= 3);
    }
    assert_eq!(hub.sizes().kept_runs, 3);
    assert_eq!(hub.sizes().stops, 3);
    // The newest stay, the events with them.
    assert!(hub.snapshot("run-9999").is_some());
    assert!(hub.snapshot("run-9996").is_none());
    assert_eq!(hub.snapshot("run-9997").unwrap().frames.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_driven_again_is_not_dropped_for_its_earlier_stop() {
    let hub = hub(300, 3);
    drive(&hub, "again");
    hub.run_starting("again", "s", 1);
    for i in 0..5 {
        drive(&hub, &format!("run-{i}"));
    }
    // Live, so kept whatever the count of stopped runs.
    assert!(hub.snapshot("again").is_some());
    assert_eq!(hub.sizes().kept_runs, 4);
    hub.run_stopped("again", AgentState::Completed);
    assert!(hub.snapshot("again").is_some());
}

#[tokio::test(start_paused = true)]
async fn stopped_runs_go_after_the_retention_and_live_ones_stay() {
    let hub = hub(60, 100);
    for i in 0..50 {
        drive(&hub, &format!("run-{i}"));
    }
    hub.run_starting("live", "s", 0);
    assert_eq!(hub.sizes().kept_runs, 51);
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(hub.sizes().kept_runs, 1);
    assert_eq!(hub.sizes().stops, 0);
    assert!(hub.snapshot("live").is_some());
}

#[tokio::test]
async fn a_conversation_channel_goes_with_its_last_follower() {
    let hub = hub(300, 3);
    let first = hub.follow_conversation("s");
    let mut second = hub.follow_conversation("s");
    assert_eq!(hub.sizes().followed_conversations, 1);
    drop(first);
    assert_eq!(hub.sizes().followed_conversations, 1);
    hub.run_starting("r", "s", 0);
    hub.emit(&event("r"));
    assert_eq!(second.recv().await.unwrap().run_id, "r");
    drop(second);
    assert_eq!(hub.sizes().followed_conversations, 0);
    for i in 0..1_000 {
        drop(hub.follow_conversation(&format!("conversation-{i}")));
    }
    assert_eq!(
        hub.sizes(),
        HubSizes {
            kept_runs: 1,
            ..HubSizes::default()
        }
    );
}

#[tokio::test]
async fn an_announced_frame_goes_without_an_sse_id_so_a_reconnect_resumes_from_a_stored_event() {
    use axum::response::IntoResponse;
    use futures::StreamExt;

    let hub = Arc::new(hub(300, 3));
    let mut body = stream::conversation_events(hub.clone(), "s".into(), None)
        .into_response()
        .into_body()
        .into_data_stream();
    // The follower subscribes in its own task; an announcement before that reaches nobody.
    while hub.sizes().followed_conversations == 0 {
        tokio::task::yield_now().await;
    }
    hub.announce("s", "lane", "agent.lane.rejected", "{}".into());
    hub.run_starting("r", "s", 0);
    hub.emit(&event("r"));
    let mut text = String::new();
    while !text.contains("agent_run.completed") {
        let chunk = body.next().await.unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert!(frames[0].contains("event: agent.lane.rejected"), "{text}");
    assert!(
        !frames[0].contains("id:"),
        "an announcement is never stored: no id a client could resume from: {text}"
    );
    assert!(frames[1].contains("id: r:1"), "{text}");
}
