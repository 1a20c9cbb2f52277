use keel_store::MemoryStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::scheduler::tests::{ManualClock, at, conversation, every_minute};

fn ctx(session: &str) -> ToolContext {
    ToolContext {
        session_id: session.into(),
        run_id: "r1".into(),
        call_id: "call-1".into(),
        user_id: Some("ana".into()),
        untrusted_source: false,
        place: None,
        cancel: CancellationToken::new(),
    }
}

async fn tool() -> (ScheduleTool, Arc<dyn DaemonStore>) {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    conversation(store.as_ref(), "c1").await;
    conversation(store.as_ref(), "c2").await;
    let clock = ManualClock::at("2026-11-29T12:00:00Z");
    (ScheduleTool::new(store.clone(), clock), store)
}

async fn call(
    tool: &ScheduleTool,
    args: serde_json::Value,
    session: &str,
) -> Result<String, ToolError> {
    // The loop injects its keys before a call; the tool must take them out again.
    let mut args = args;
    ctx(session).inject(&mut args, false);
    tool.call(args, &ctx(session)).await.map(|out| out.content)
}

#[tokio::test]
async fn add_keeps_a_schedule_of_this_conversation_for_its_user() {
    let (tool, store) = tool().await;
    let said = call(
        &tool,
        json!({"action": "add", "cron": "0 9 * * *", "tz": "Europe/Berlin",
               "text": "Good morning, it is {date}", "catch_up": "once"}),
        "c1",
    )
    .await
    .unwrap();
    assert!(said.starts_with("Scheduled "), "{said}");
    assert!(said.contains("first at 2026-11-30 09:00 CET"), "{said}");
    let schedules = store
        .list_schedules(&ScheduleFilter {
            session_id: Some("c1".into()),
            owner: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(schedules.len(), 1);
    let s = &schedules[0];
    assert_eq!(s.owner.as_deref(), Some("ana"));
    assert_eq!(s.created_by, Creator::Model);
    assert_eq!(s.kind, ScheduleKind::Cron);
    assert_eq!(s.spec, "0 9 * * *");
    assert_eq!(s.tz.as_deref(), Some("Europe/Berlin"));
    assert_eq!(s.catch_up, CatchUp::Once);
    assert_eq!(s.next_slot, Some(at("2026-11-30T08:00:00Z")));

    call(
        &tool,
        json!({"action": "add", "every": "15m", "text": "check"}),
        "c1",
    )
    .await
    .unwrap();
    call(
        &tool,
        json!({"action": "add", "at": "2026-11-29T13:00:00Z", "text": "call Bo"}),
        "c1",
    )
    .await
    .unwrap();
    // Without a policy, missed times arrive once, late (keel-platform's default).
    let every = store
        .list_schedules(&ScheduleFilter {
            session_id: Some("c1".into()),
            owner: None,
            limit: 10,
        })
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.kind == ScheduleKind::Every)
        .unwrap();
    assert_eq!(every.catch_up, CatchUp::Once);
    let listed = call(&tool, json!({"action": "list"}), "c1").await.unwrap();
    assert!(
        listed.starts_with("3 schedules in this conversation"),
        "{listed}"
    );
    assert!(
        listed.contains("every 15m; next 2026-11-29T12:15:00+00:00"),
        "{listed}"
    );
}

#[tokio::test]
async fn add_says_what_is_wrong() {
    let (tool, _) = tool().await;
    for (args, expected) in [
        (json!({"action": "add", "text": "x"}), "exactly one of"),
        (
            json!({"action": "add", "every": "1h", "cron": "* * * * *", "text": "x"}),
            "exactly one of",
        ),
        (json!({"action": "add", "every": "1h"}), "needs `text`"),
        (
            json!({"action": "add", "every": "30s", "text": "x"}),
            "too short",
        ),
        (
            json!({"action": "add", "cron": "0 9 * *", "text": "x"}),
            "five-field",
        ),
        (
            json!({"action": "add", "cron": "0 9 * * *", "tz": "Nowhere", "text": "x"}),
            "unknown time zone",
        ),
        (
            json!({"action": "add", "at": "2026-11-29T11:00:00Z", "text": "x"}),
            "in the past",
        ),
        (
            json!({"action": "add", "every": "1h", "text": "x", "catch_up": "some"}),
            "skip, once or all",
        ),
        (
            json!({"action": "add", "every": "1h", "text": "x", "id": "mine"}),
            "takes no `id`",
        ),
        (json!({"action": "rewrite", "id": "x"}), "unknown action"),
        (
            json!({"action": "add", "every": "1h", "text": "x", "owner": "bo"}),
            "unknown field",
        ),
    ] {
        let error = call(&tool, args.clone(), "c1").await.unwrap_err();
        assert!(
            error.message.contains(expected),
            "{args}: {}",
            error.message
        );
    }
}

#[tokio::test]
async fn list_and_cancel_reach_only_this_conversations_schedules() {
    let (tool, store) = tool().await;
    let mut theirs = every_minute("s-other", "c2", "2026-11-29T12:01:00Z", CatchUp::Skip);
    theirs.created_by = Creator::Model;
    store.create_schedule(&theirs).await.unwrap();
    store
        .create_schedule(&every_minute(
            "s-op",
            "c1",
            "2026-11-29T12:01:00Z",
            CatchUp::Skip,
        ))
        .await
        .unwrap();
    let listed = call(&tool, json!({"action": "list"}), "c1").await.unwrap();
    assert!(
        listed.contains("s-op") && !listed.contains("s-other"),
        "{listed}"
    );

    let error = call(&tool, json!({"action": "cancel", "id": "s-other"}), "c1")
        .await
        .unwrap_err();
    assert_eq!(error.kind, keel_core::ToolErrorKind::Denied);
    assert!(
        error
            .message
            .contains("no schedule `s-other` belongs to this conversation")
    );
    assert!(store.schedule("s-other").await.unwrap().is_some());

    let error = call(&tool, json!({"action": "cancel", "id": "s-op"}), "c1")
        .await
        .unwrap_err();
    assert!(
        error.message.contains("made by an operator"),
        "{}",
        error.message
    );
    assert!(store.schedule("s-op").await.unwrap().is_some());

    let said = call(
        &tool,
        json!({"action": "add", "every": "1h", "text": "mine"}),
        "c1",
    )
    .await
    .unwrap();
    let id = said
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches(':');
    let said = call(&tool, json!({"action": "cancel", "id": id}), "c1")
        .await
        .unwrap();
    assert_eq!(said, format!("Cancelled schedule {id}."));
    assert!(store.schedule(id).await.unwrap().is_none());
}

#[tokio::test]
async fn the_tool_needs_a_user_and_asks_in_an_untrusted_conversation() {
    let (tool, _) = tool().await;
    assert_eq!(tool.spec().required_permission, Permission::User);
    assert!(tool.spec().side_effecting());
    let need = keel_core::reach::untrusted_need(tool.spec()).expect("approval in untrusted");
    assert!(need.reason.contains("changes things"), "{}", need.reason);
}
