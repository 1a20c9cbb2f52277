//! The double-texting policies through the engine, on `MemoryStore` and keel-mock's model, in
//! tokio's paused time: what each stores is exactly what it promises — `reject` refuses and
//! stores nothing, `collect` folds the messages of a quiet window (and those that arrive while
//! a run works) into one run with each line timed, `rollback` cancels the running run and
//! hides its messages from the next run's context — and, for every policy, 50 conversations
//! with 5 messages sent at once keep the lane invariant: no two runs of a conversation overlap,
//! they start in arrival order, and every message is in exactly one run's input or refused
//! (under `interrupt` and `rollback`, or its run was stopped before it began, cancelled).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use keel_core::{Agent, AgentState, Event, EventKind, EventSink, LanePolicy, SessionInfo, Store};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::{ConversationStore, NewConversation, RunFilter};
use keel_server::engine::{Engine, EngineError, EngineOptions};
use keel_server::live::LiveEvents;
use keel_store::MemoryStore;
use tokio::time::Instant;

/// Records what the engine tells the hub, and when each run starts and stops here.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    starts: Mutex<Vec<(String, String, Instant)>>,
    stops: Mutex<HashMap<String, Instant>>,
}

impl EventSink for Recorder {
    fn emit(&self, event: &Event) {
        self.events.lock().unwrap().push(event.clone());
    }
}

impl LiveEvents for Recorder {
    fn run_starting(&self, run_id: &str, session_id: &str, _stored_events: u64) {
        let start = (run_id.into(), session_id.into(), Instant::now());
        self.starts.lock().unwrap().push(start);
    }
    fn run_stopped(&self, run_id: &str, _state: AgentState) {
        self.stops
            .lock()
            .unwrap()
            .insert(run_id.into(), Instant::now());
    }
    fn shutdown(&self) {}
}

impl Recorder {
    /// The lane's decisions told, but `agent.lane.queued` (every message's).
    fn lane_events(&self) -> Vec<Event> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|event| event.kind.name().starts_with("agent.lane."))
            .filter(|event| event.kind.name() != "agent.lane.queued")
            .cloned()
            .collect()
    }

    /// The `agent.lane.queued` events told: (run, runs ahead).
    fn queued(&self) -> Vec<(String, usize)> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::LaneQueued { ahead, .. } => Some((event.run_id.clone(), *ahead)),
                _ => None,
            })
            .collect()
    }
}

struct Setup {
    store: Arc<MemoryStore>,
    engine: Arc<Engine>,
    live: Arc<Recorder>,
    provider: Arc<ScriptedProvider>,
}

async fn setup(delay_ms: u64, options: EngineOptions) -> Setup {
    let script = Script::new(vec![Step::text("ok").with_delay_ms(delay_ms)]).with_per_turn();
    setup_with(script, None, options).await
}

async fn setup_with(
    script: Script,
    tool: Option<Arc<dyn keel_core::Tool>>,
    options: EngineOptions,
) -> Setup {
    let store = Arc::new(MemoryStore::new());
    let live = Arc::new(Recorder::default());
    let engine = Engine::new(store.clone(), live.clone(), options);
    let provider = Arc::new(ScriptedProvider::new(script));
    let mut builder = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .event_sink(live.clone())
        .event_sink(engine.sink());
    if let Some(tool) = tool {
        builder = builder.tool(tool);
    }
    let agent = builder.build().unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    Setup {
        store,
        engine,
        live,
        provider,
    }
}

async fn conversation(store: &MemoryStore, id: &str, policy: LanePolicy) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: policy,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

/// The user messages stored for each run of `session`, by run.
async fn inputs(store: &MemoryStore, session: &str) -> HashMap<String, Vec<String>> {
    let mut inputs: HashMap<String, Vec<String>> = HashMap::new();
    for stored in store.messages(session).await.unwrap() {
        if stored.message.role == keel_core::Role::User
            && let Some(run) = stored.run_id
        {
            inputs
                .entry(run)
                .or_default()
                .push(stored.message.content.clone());
        }
    }
    inputs
}

async fn runs_of(store: &MemoryStore, session: &str) -> Vec<keel_core::RunRecord> {
    let mut runs = store
        .find_runs(&RunFilter {
            session_id: Some(session.into()),
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    runs.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    runs
}

#[tokio::test(start_paused = true)]
async fn reject_refuses_a_message_while_the_lane_is_busy_and_stores_nothing() {
    let s = setup(1_000, EngineOptions::default()).await;
    let lane = conversation(&s.store, "lane", LanePolicy::Reject).await;
    let first = s.engine.submit(&lane, "one".into(), None).await.unwrap();
    let refused = s.engine.submit(&lane, "two".into(), None).await;
    match refused {
        Err(EngineError::Busy {
            conversation,
            running,
        }) => {
            assert_eq!(conversation, "lane");
            assert_eq!(running.as_deref(), Some(first.run_id.as_str()));
        }
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(runs_of(&s.store, "lane").await.len(), 1, "no run stored");
    assert_eq!(
        s.live.queued(),
        vec![(first.run_id.clone(), 0)],
        "one queued"
    );
    let rejected = s.live.lane_events();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].kind.name(), "agent.lane.rejected");
    assert_eq!(rejected[0].run_id, "", "a rejected message has no run");
    assert_eq!(rejected[0].session_id, "lane");
    s.engine.wait(&first.run_id).await.unwrap();
    // Answered, the conversation takes a message again.
    let third = s.engine.submit(&lane, "three".into(), None).await.unwrap();
    let report = s.engine.wait(&third.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    let inputs = inputs(&s.store, "lane").await;
    assert_eq!(inputs.len(), 2);
    assert!(inputs.values().all(|texts| texts[0] != "two"));
}

#[tokio::test(start_paused = true)]
async fn collect_waits_a_quiet_window_and_runs_the_messages_as_one_timed_message() {
    let options = EngineOptions {
        collect_quiet: Duration::from_millis(1_500),
        ..EngineOptions::default()
    };
    let s = setup(2_000, options).await;
    let lane = conversation(&s.store, "lane", LanePolicy::Collect).await;
    let a = s.engine.submit(&lane, "a".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let b = s.engine.submit(&lane, "b".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        s.live.starts.lock().unwrap().is_empty(),
        "each message restarts the window"
    );
    let c = s.engine.submit(&lane, "c".into(), None).await.unwrap();
    let report = s.engine.wait(&a.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    for absorbed in [&b.run_id, &c.run_id] {
        let run = s.store.run(absorbed).await.unwrap().unwrap();
        assert_eq!(run.state, AgentState::Cancelled);
        assert_eq!(
            run.error.as_deref(),
            Some(format!("collected into run {}", a.run_id).as_str())
        );
    }
    let inputs = inputs(&s.store, "lane").await;
    assert_eq!(inputs.len(), 1, "one run: {inputs:?}");
    let lines: Vec<&str> = inputs[&a.run_id][0].lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, text) in lines.iter().zip(["a", "b", "c"]) {
        // `[hh:mm:ss] text`
        assert!(
            line.starts_with('[') && line.ends_with(&format!("] {text}")),
            "{line}"
        );
        assert_eq!(line.find(']'), Some(9), "{line}");
    }
    let collected = s.live.lane_events();
    assert_eq!(collected.len(), 1);
    assert_eq!(collected[0].run_id, a.run_id);
    assert!(matches!(
        &collected[0].kind,
        EventKind::LaneCollected { absorbed, left_out: 0 } if absorbed == &[b.run_id.clone(), c.run_id.clone()]
    ));

    // While a run works, what arrives is one follow-up run, in order.
    let d = s.engine.submit(&lane, "d".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(s.live.starts.lock().unwrap().len(), 2, "d runs");
    let e = s.engine.submit(&lane, "e".into(), None).await.unwrap();
    let f = s.engine.submit(&lane, "f".into(), None).await.unwrap();
    s.engine.wait(&d.run_id).await.unwrap();
    s.engine.wait(&e.run_id).await.unwrap();
    let inputs = crate::inputs(&s.store, "lane").await;
    let follow_up = &inputs[&e.run_id][0];
    assert!(follow_up.contains("] e\n["), "{follow_up}");
    assert!(follow_up.ends_with("] f"), "{follow_up}");
    assert!(!inputs.contains_key(&f.run_id));
}

#[tokio::test(start_paused = true)]
async fn collect_over_its_cap_leaves_the_oldest_out_and_says_so() {
    let options = EngineOptions {
        collect_cap: 2,
        ..EngineOptions::default()
    };
    let s = setup(100, options).await;
    let lane = conversation(&s.store, "lane", LanePolicy::Collect).await;
    let mut runs = Vec::new();
    for text in ["m1", "m2", "m3", "m4"] {
        runs.push(s.engine.submit(&lane, text.into(), None).await.unwrap());
    }
    s.engine.wait(&runs[0].run_id).await.unwrap();
    let inputs = inputs(&s.store, "lane").await;
    let text = &inputs[&runs[0].run_id][0];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "(2 earlier messages were left out)");
    assert!(
        lines[1].ends_with("] m3") && lines[2].ends_with("] m4"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn rollback_cancels_the_running_run_and_hides_its_messages_from_the_next() {
    let s = setup(5_000, EngineOptions::default()).await;
    let lane = conversation(&s.store, "lane", LanePolicy::Rollback).await;
    let first = s
        .engine
        .submit(&lane, "draft a long answer".into(), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = s
        .engine
        .submit(&lane, "no, just say hi".into(), None)
        .await
        .unwrap();
    assert_eq!(
        s.engine.wait(&first.run_id).await.unwrap().state,
        AgentState::Cancelled
    );
    assert_eq!(
        s.engine.wait(&second.run_id).await.unwrap().state,
        AgentState::Completed
    );
    // Kept in the store, marked; out of the context.
    let stored = s.store.messages("lane").await.unwrap();
    assert!(
        stored
            .iter()
            .any(|m| m.message.content == "draft a long answer")
    );
    assert_eq!(
        s.store.rolled_back_runs("lane").await.unwrap(),
        vec![(first.run_id.clone(), second.run_id.clone())]
    );
    let context = s.store.context_messages("lane").await.unwrap();
    assert!(
        context
            .iter()
            .all(|m| m.run_id.as_deref() != Some(first.run_id.as_str())),
        "{context:?}"
    );
    let requests = s.provider.requests();
    let last = requests.last().unwrap();
    assert!(
        last.messages
            .iter()
            .all(|m| !m.content.contains("draft a long answer")),
        "the model never sees the rolled-back message again"
    );
    let events = s.live.lane_events();
    assert!(
        events.iter().any(|e| e.run_id == first.run_id
            && matches!(&e.kind, EventKind::LaneRolledBack { by } if by == &second.run_id)),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_schedules_fire_waits_its_turn_under_every_policy() {
    let s = setup(1_000, EngineOptions::default()).await;
    for (n, policy) in [
        LanePolicy::Reject,
        LanePolicy::Collect,
        LanePolicy::Rollback,
    ]
    .into_iter()
    .enumerate()
    {
        let lane = conversation(&s.store, &format!("c{n}"), policy).await;
        let first = s.engine.submit(&lane, "mine".into(), None).await.unwrap();
        // "mine" runs when the slot fires.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let slot = keel_platform::SlotKey {
            schedule_id: format!("s{n}"),
            slot: Utc::now(),
        };
        let fired = s
            .engine
            .submit_scheduled(
                &lane,
                "the daily digest".into(),
                None,
                Default::default(),
                slot,
            )
            .await
            .unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        // What the user sends next is the user's double text: refused, or folded with what
        // follows, never with the fire.
        let after = match policy {
            LanePolicy::Rollback => None,
            _ => Some(s.engine.submit(&lane, "and this".into(), None).await),
        };
        if policy == LanePolicy::Reject {
            assert!(
                matches!(after, Some(Err(EngineError::Busy { .. }))),
                "{policy:?}"
            );
        }
        for run in [&first.run_id, &fired.run_id] {
            let state = s.engine.wait(run).await.unwrap().state;
            assert_eq!(state, AgentState::Completed, "{policy:?}: not stopped");
        }
        let inputs = inputs(&s.store, &lane.id).await;
        assert_eq!(
            inputs[&fired.run_id],
            vec!["the daily digest".to_string()],
            "{policy:?}"
        );
        if let Some(Ok(after)) = after {
            s.engine.wait(&after.run_id).await.unwrap();
            let inputs = crate::inputs(&s.store, &lane.id).await;
            assert!(inputs[&after.run_id][0].ends_with("and this"), "{inputs:?}");
        }
    }
}

/// A side-effecting tool that takes 2 s and counts the calls it finished.
struct Send(keel_core::ToolSpec, Arc<std::sync::atomic::AtomicUsize>);

#[async_trait::async_trait]
impl keel_core::Tool for Send {
    fn spec(&self) -> &keel_core::ToolSpec {
        &self.0
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &keel_core::ToolContext,
    ) -> Result<keel_core::ToolOutput, keel_core::ToolError> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(keel_core::ToolOutput::text("sent"))
    }
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_lets_a_side_effecting_call_in_flight_finish_and_records_its_result() {
    let spec =
        keel_core::ToolSpec::new("send", "sends mail", serde_json::json!({"type": "object"}));
    assert!(spec.side_effecting());
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let script = Script::new(vec![
        Step::tool_call("send", serde_json::json!({})),
        Step::text("done"),
    ])
    .with_per_turn();
    let tool: Arc<dyn keel_core::Tool> = Arc::new(Send(spec, sent.clone()));
    let s = setup_with(script, Some(tool), EngineOptions::default()).await;
    let lane = conversation(&s.store, "lane", LanePolicy::Interrupt).await;
    let first = s
        .engine
        .submit(&lane, "mail them".into(), None)
        .await
        .unwrap();
    // The call is under way (it takes 2 s) when the next message interrupts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = s.engine.submit(&lane, "stop".into(), None).await.unwrap();
    assert_eq!(
        s.engine.wait(&first.run_id).await.unwrap().state,
        AgentState::Cancelled
    );
    assert_eq!(
        sent.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "it finished"
    );
    let calls = s.store.tool_calls(&first.run_id).await.unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].completed_at.is_some() && calls[0].ok == Some(true),
        "{calls:?}"
    );
    let results: Vec<String> = s
        .store
        .messages("lane")
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.run_id.as_deref() == Some(first.run_id.as_str()))
        .filter(|m| m.message.role == keel_core::Role::Tool)
        .map(|m| m.message.content)
        .collect();
    assert_eq!(results, vec!["sent".to_string()], "its result is recorded");
    assert!(s.live.lane_events().iter().any(|e| e.run_id == first.run_id
        && matches!(&e.kind, EventKind::LaneInterrupted { by } if by == &second.run_id)));
    assert_eq!(
        s.engine.wait(&second.run_id).await.unwrap().state,
        AgentState::Completed
    );
}

/// 50 conversations under `policy`, 5 messages each sent at once: the lane invariant.
async fn fifty_by_five(policy: LanePolicy) {
    let options = EngineOptions {
        collect_quiet: Duration::from_millis(50),
        ..EngineOptions::default()
    };
    let s = setup(20, options).await;
    let mut sends = Vec::new();
    for c in 0..50 {
        let lane = conversation(&s.store, &format!("c{c}"), policy).await;
        for m in 0..5 {
            let engine = s.engine.clone();
            let lane = lane.clone();
            sends.push(tokio::spawn(async move {
                let text = format!("c{c} m{m}");
                let sent = engine.submit(&lane, text.clone(), None).await;
                (lane.id, text, sent)
            }));
        }
    }
    let mut accepted: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let mut refused = 0;
    for send in sends {
        let (lane, text, sent) = send.await.unwrap();
        match sent {
            Ok(submitted) => accepted
                .entry(lane)
                .or_default()
                .push((submitted.run_id, text)),
            Err(EngineError::Busy { .. }) if policy == LanePolicy::Reject => refused += 1,
            Err(other) => panic!("{policy:?}: {other}"),
        }
    }
    for runs in accepted.values() {
        for (run_id, _) in runs {
            s.engine.wait(run_id).await.unwrap();
        }
    }
    // Let a lane's last run stop being driven.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let starts = s.live.starts.lock().unwrap().clone();
    let stops = s.live.stops.lock().unwrap().clone();
    let mut counted = 0;
    for c in 0..50 {
        let session = format!("c{c}");
        // No two runs of the conversation overlap, and they start in arrival order.
        let spans: Vec<(&String, Instant, Instant)> = starts
            .iter()
            .filter(|(_, s, _)| *s == session)
            .map(|(run, _, at)| (run, *at, stops[run]))
            .collect();
        for pair in spans.windows(2) {
            assert!(pair[0].2 <= pair[1].1, "{policy:?} {session}: overlap");
        }
        let arrival: Vec<String> = runs_of(&s.store, &session)
            .await
            .into_iter()
            .map(|run| run.id)
            .collect();
        let order: Vec<usize> = spans
            .iter()
            .map(|(run, _, _)| arrival.iter().position(|id| id == *run).unwrap())
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{policy:?} {session}: {order:?}"
        );
        // Every accepted message is in exactly one run's input.
        let inputs = inputs(&s.store, &session).await;
        let texts: Vec<&String> = inputs.values().flatten().collect();
        for (run_id, text) in accepted.get(&session).into_iter().flatten() {
            let carriers = texts
                .iter()
                .filter(|input| input.lines().any(|line| line.ends_with(text.as_str())))
                .count();
            // Under interrupt and rollback, a run stopped before it began stored nothing: its
            // record says cancelled (the user who sent the next message stopped it).
            let stopped = matches!(policy, LanePolicy::Interrupt | LanePolicy::Rollback)
                && carriers == 0
                && s.store.run(run_id).await.unwrap().unwrap().state == AgentState::Cancelled;
            assert!(
                carriers == 1 || stopped,
                "{policy:?} {session}: `{text}` in {inputs:?}"
            );
            counted += 1;
        }
    }
    assert_eq!(
        counted + refused,
        250,
        "{policy:?}: every message accounted for"
    );
    if policy == LanePolicy::Reject {
        assert!(refused > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_queue() {
    fifty_by_five(LanePolicy::Queue).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_interrupt() {
    fifty_by_five(LanePolicy::Interrupt).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_reject() {
    fifty_by_five(LanePolicy::Reject).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_collect() {
    fifty_by_five(LanePolicy::Collect).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_rollback() {
    fifty_by_five(LanePolicy::Rollback).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_invariant_holds_under_steer() {
    fifty_by_five(LanePolicy::Steer).await;
}
