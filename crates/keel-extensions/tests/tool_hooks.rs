//! Tool hooks around the loop's tool calls, with fake hook commands: a deny keeps the tool from
//! running and tells the model why, a rewrite runs the tool with new (re-checked) arguments, a
//! failing hook denies, post_tool hooks annotate, and a call a resume replays meets no hook.

#[path = "../../keel-core/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use keel_core::event::Emitter;
use keel_core::extension::ExtensionSet;
use keel_core::tool_exec::{BatchOutcome, Replay, ToolExecutor};
use keel_core::{
    Agent, AgentState, EventKind, EventLog, HookEvent, HookOutcome, RunRequest, RunSettings, Store,
    SystemClock, Tool, ToolCall, ToolCallRecord, ToolContext, ToolError, ToolOutput, ToolRegistry,
    ToolSpec,
};
use keel_extensions::AgentBuilderExt;
use keel_extensions::tool_hooks::{HookCommand, HookFailure, ToolHook, ToolHooks, ToolMatcher};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use support::{last_tool_message, tool_message};
use tokio_util::sync::CancellationToken;

type Answer = dyn Fn(&Value) -> Result<String, HookFailure> + Send + Sync;

/// A hook command whose answer is a closure of its input; it keeps every input it got, and how
/// many envelope rows the run had when it ran.
struct FakeHook {
    answer: Box<Answer>,
    inputs: Mutex<Vec<Value>>,
    store: Arc<MemoryStore>,
    rows_seen: Mutex<Vec<usize>>,
}

impl FakeHook {
    fn new(
        store: &Arc<MemoryStore>,
        answer: impl Fn(&Value) -> Result<String, HookFailure> + Send + Sync + 'static,
    ) -> Arc<FakeHook> {
        Arc::new(FakeHook {
            answer: Box::new(answer),
            inputs: Mutex::new(Vec::new()),
            store: store.clone(),
            rows_seen: Mutex::new(Vec::new()),
        })
    }

    fn printing(store: &Arc<MemoryStore>, stdout: &'static str) -> Arc<FakeHook> {
        Self::new(store, move |_| Ok(stdout.to_string()))
    }

    fn inputs(&self) -> Vec<Value> {
        self.inputs.lock().unwrap().clone()
    }
}

#[async_trait]
impl HookCommand for FakeHook {
    async fn run(&self, input: &str) -> Result<String, HookFailure> {
        let input: Value = serde_json::from_str(input).expect("hooks get JSON");
        let run_id = input["run_id"].as_str().unwrap_or_default().to_string();
        let rows = self.store.tool_calls(&run_id).await.unwrap().len();
        self.rows_seen.lock().unwrap().push(rows);
        self.inputs.lock().unwrap().push(input.clone());
        (self.answer)(&input)
    }
}

fn hook(event: HookEvent, pattern: &str, command: &Arc<FakeHook>) -> ToolHook {
    ToolHook {
        event,
        matcher: ToolMatcher::new(pattern),
        label: format!("fake {pattern}"),
        command: command.clone(),
    }
}

/// `write {path, text?}`: side-effecting; keeps the arguments of every call.
#[derive(Clone, Default)]
struct Writes(Arc<Mutex<Vec<Value>>>);

struct Write(Writes, ToolSpec);

#[async_trait]
impl Tool for Write {
    fn spec(&self) -> &ToolSpec {
        &self.1
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.0.0.lock().unwrap().push(args.clone());
        Ok(ToolOutput::text(format!("wrote {}", args["path"])))
    }
}

impl Writes {
    fn tool(&self) -> Arc<dyn Tool> {
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        });
        Arc::new(Write(
            self.clone(),
            ToolSpec::new("write", "writes", schema),
        ))
    }

    /// The paths written, in order.
    fn paths(&self) -> Vec<String> {
        let calls = self.0.lock().unwrap();
        calls
            .iter()
            .map(|a| a["path"].as_str().unwrap().to_string())
            .collect()
    }
}

struct World {
    store: Arc<MemoryStore>,
    writes: Writes,
    log: Arc<EventLog>,
}

impl World {
    fn new() -> World {
        World {
            store: Arc::new(MemoryStore::new()),
            writes: Writes::default(),
            log: Arc::new(EventLog::new()),
        }
    }

    fn agent(&self, provider: &Arc<ScriptedProvider>, hooks: Vec<ToolHook>) -> Agent {
        Agent::builder()
            .provider(provider.clone())
            .model("m")
            .store(self.store.clone())
            .tools(vec![self.writes.tool(), support::Echo::tool()])
            .event_sink(self.log.clone())
            .hooks(ToolHooks::new(hooks))
            .build()
            .unwrap()
    }

    /// Every `agent.tool.hook` event: (index, stage, tool, outcome, reason, arguments,
    /// annotation).
    fn hook_events(&self) -> Vec<HookSeen> {
        self.log
            .events()
            .into_iter()
            .filter_map(|event| match event.kind {
                EventKind::ToolHook {
                    index,
                    stage,
                    tool,
                    outcome,
                    reason,
                    arguments,
                    annotation,
                    ..
                } => Some(HookSeen {
                    index,
                    stage,
                    tool,
                    outcome,
                    reason,
                    arguments,
                    annotation,
                }),
                _ => None,
            })
            .collect()
    }
}

#[derive(Debug)]
struct HookSeen {
    index: usize,
    stage: HookEvent,
    tool: String,
    outcome: HookOutcome,
    reason: Option<String>,
    arguments: Option<String>,
    annotation: Option<String>,
}

fn two_turns(tool: &str, args: Value) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call(tool, args),
        Step::text("done"),
    ]))
}

#[tokio::test]
async fn a_deny_keeps_the_tool_from_running_and_the_model_sees_why() {
    let world = World::new();
    let deny = FakeHook::printing(
        &world.store,
        r#"{"decision":"deny","reason":"no secrets here"}"#,
    );
    let provider = two_turns("write", json!({"path": "secret.txt"}));
    let agent = world.agent(&provider, vec![hook(HookEvent::PreTool, "wr*", &deny)]);
    let report = agent.run(RunRequest::new("go")).await.unwrap();

    assert_eq!(report.state, AgentState::Completed);
    assert!(world.writes.paths().is_empty(), "the tool must not run");
    let seen = last_tool_message(&provider.requests()[1]);
    assert!(
        seen.contains("was not run") && seen.contains("hook denied it: no secrets here"),
        "{seen}"
    );
    assert!(!report.tool_calls[0].ok);
    // The hook saw the call as documented, before anything was recorded.
    let input = &deny.inputs()[0];
    assert_eq!(input["event"], "pre_tool");
    assert_eq!(input["tool"], "write");
    assert_eq!(input["arguments"], json!({"path": "secret.txt"}));
    assert_eq!(input["call_id"], report.tool_calls[0].id.as_str());
    assert_eq!(input["session_id"], report.session_id.as_str());
    assert_eq!(input["run_id"], report.run_id.as_str());
    assert!(input.get("result").is_none());
    assert_eq!(*deny.rows_seen.lock().unwrap(), [0]);
    // The envelope shows it finished (refused), never merely started.
    let rows = world.store.tool_calls(&report.run_id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].completed_at.is_some() && rows[0].ok == Some(false));
    let events = world.hook_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].outcome, HookOutcome::Deny);
    assert_eq!(events[0].stage, HookEvent::PreTool);
    assert_eq!(events[0].tool, "write");
    assert_eq!(events[0].reason.as_deref(), Some("no secrets here"));
}

#[tokio::test]
async fn a_rewrite_runs_the_tool_with_the_new_arguments_and_the_call_keeps_the_models() {
    let world = World::new();
    let rewrite = FakeHook::printing(
        &world.store,
        r#"{"decision":"allow","arguments":{"path":"safe/a.txt","text":"x"}}"#,
    );
    let provider = two_turns("write", json!({"path": "a.txt"}));
    let agent = world.agent(&provider, vec![hook(HookEvent::PreTool, "write", &rewrite)]);
    let report = agent.run(RunRequest::new("go")).await.unwrap();

    assert_eq!(world.writes.paths(), ["safe/a.txt"]);
    assert!(report.tool_calls[0].ok);
    assert_eq!(report.tool_calls[0].arguments, json!({"path": "a.txt"}));
    let rows = world.store.tool_calls(&report.run_id).await.unwrap();
    assert_eq!(rows[0].arguments, r#"{"path":"a.txt"}"#);
    let events = world.hook_events();
    assert_eq!(events[0].outcome, HookOutcome::Rewrite);
    let rewritten: Value = serde_json::from_str(events[0].arguments.as_deref().unwrap()).unwrap();
    assert_eq!(rewritten, json!({"path": "safe/a.txt", "text": "x"}));
}

#[tokio::test]
async fn a_rewrite_the_schema_refuses_denies_and_says_what_is_wrong() {
    let world = World::new();
    let rewrite = FakeHook::printing(
        &world.store,
        r#"{"decision":"allow","arguments":{"path":7,"extra":true}}"#,
    );
    let provider = two_turns("write", json!({"path": "a.txt"}));
    let agent = world.agent(&provider, vec![hook(HookEvent::PreTool, "*", &rewrite)]);
    agent.run(RunRequest::new("go")).await.unwrap();

    assert!(world.writes.paths().is_empty());
    let seen = last_tool_message(&provider.requests()[1]);
    assert!(
        seen.contains("was not run") && seen.contains("do not fit the tool's schema"),
        "{seen}"
    );
    assert!(seen.contains("/path"), "{seen}");
    let events = world.hook_events();
    assert_eq!(events[0].outcome, HookOutcome::Error);
    assert!(events[0].arguments.is_some());
}

#[tokio::test]
async fn rewrites_chain_in_order_and_the_first_deny_wins() {
    let world = World::new();
    let first = FakeHook::printing(
        &world.store,
        r#"{"decision":"allow","arguments":{"path":"b.txt"}}"#,
    );
    let second = FakeHook::new(&world.store, |input| {
        // Sees the first hook's rewrite, and rewrites it again.
        let path = input["arguments"]["path"].as_str().unwrap();
        Ok(json!({"decision": "allow", "arguments": {"path": format!("{path}.bak")}}).to_string())
    });
    let third = FakeHook::printing(&world.store, "");
    let provider = two_turns("write", json!({"path": "a.txt"}));
    let agent = world.agent(
        &provider,
        vec![
            hook(HookEvent::PreTool, "*", &first),
            hook(HookEvent::PreTool, "write", &second),
            hook(HookEvent::PreTool, "write", &third),
        ],
    );
    agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(world.writes.paths(), ["b.txt.bak"]);
    assert_eq!(third.inputs()[0]["arguments"], json!({"path": "b.txt.bak"}));
    let outcomes: Vec<_> = world.hook_events().iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [
            HookOutcome::Rewrite,
            HookOutcome::Rewrite,
            HookOutcome::Allow
        ]
    );

    // Now a deny in the middle: the hook after it never runs.
    let world = World::new();
    let allow = FakeHook::printing(&world.store, r#"{"decision":"allow"}"#);
    let deny = FakeHook::printing(&world.store, r#"{"decision":"deny","reason":"no"}"#);
    let after = FakeHook::printing(&world.store, "");
    let provider = two_turns("write", json!({"path": "a.txt"}));
    let agent = world.agent(
        &provider,
        vec![
            hook(HookEvent::PreTool, "*", &allow),
            hook(HookEvent::PreTool, "*", &deny),
            hook(HookEvent::PreTool, "*", &after),
        ],
    );
    agent.run(RunRequest::new("go")).await.unwrap();
    assert!(world.writes.paths().is_empty());
    assert!(after.inputs().is_empty());
    let indexes: Vec<_> = world.hook_events().iter().map(|e| e.index).collect();
    assert_eq!(indexes, [0, 1]);
}

#[tokio::test]
async fn a_failing_or_garbled_pre_hook_denies() {
    for (answer, expected) in [
        (
            Err(HookFailure("exited with status 1".into())),
            "exited with status 1",
        ),
        (Ok("sure, go ahead".to_string()), "not JSON"),
        (
            Ok(r#"{"decision":"perhaps"}"#.to_string()),
            "unknown decision",
        ),
        (
            Err(HookFailure("timed out after 0.2 s".into())),
            "timed out",
        ),
    ] {
        let world = World::new();
        let failing = FakeHook::new(&world.store, move |_| answer.clone());
        let provider = two_turns("write", json!({"path": "a.txt"}));
        let agent = world.agent(&provider, vec![hook(HookEvent::PreTool, "*", &failing)]);
        let report = agent.run(RunRequest::new("go")).await.unwrap();
        assert_eq!(report.state, AgentState::Completed);
        assert!(world.writes.paths().is_empty(), "{expected}");
        let seen = last_tool_message(&provider.requests()[1]);
        assert!(
            seen.contains("was not run") && seen.contains(expected),
            "{seen}"
        );
        let events = world.hook_events();
        assert_eq!(events[0].outcome, HookOutcome::Error);
        assert!(events[0].reason.as_deref().unwrap().contains(expected));
    }
}

#[tokio::test]
async fn post_hooks_annotate_and_a_failing_one_is_ignored_with_a_warning() {
    let world = World::new();
    let note = FakeHook::printing(&world.store, r#"{"annotation":"reviewed by the linter"}"#);
    let broken = FakeHook::new(&world.store, |_| {
        Err(HookFailure("exited with status 2".into()))
    });
    let rewrite = FakeHook::printing(
        &world.store,
        r#"{"decision":"allow","arguments":{"path":"b.txt"}}"#,
    );
    let provider = two_turns("write", json!({"path": "a.txt"}));
    let agent = world.agent(
        &provider,
        vec![
            hook(HookEvent::PostTool, "write", &broken),
            hook(HookEvent::PreTool, "write", &rewrite),
            hook(HookEvent::PostTool, "*", &note),
        ],
    );
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(world.writes.paths(), ["b.txt"]);
    let seen = tool_message(&provider.requests()[1], 0);
    assert_eq!(
        seen,
        "wrote \"b.txt\"\n\n[post_tool hook note: reviewed by the linter]"
    );
    // The post hook sees the arguments that ran and the result, without `_session_id`.
    let input = &note.inputs()[0];
    assert_eq!(input["event"], "post_tool");
    assert_eq!(input["arguments"], json!({"path": "b.txt"}));
    assert_eq!(
        input["result"],
        json!({"ok": true, "output": "wrote \"b.txt\""})
    );
    // The stored result is what the model saw, so a resume replays the note too.
    let rows = world.store.tool_calls(&report.run_id).await.unwrap();
    assert_eq!(rows[0].output.as_deref(), Some(seen.as_str()));
    let events = world.hook_events();
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.index, e.stage, e.outcome))
        .collect();
    assert_eq!(
        summary,
        [
            (1, HookEvent::PreTool, HookOutcome::Rewrite),
            (0, HookEvent::PostTool, HookOutcome::Error),
            (2, HookEvent::PostTool, HookOutcome::Annotate),
        ]
    );
    assert_eq!(
        events[2].annotation.as_deref(),
        Some("reviewed by the linter")
    );
    assert!(events[1].reason.as_deref().unwrap().contains("status 2"));
}

#[tokio::test]
async fn a_hook_whose_matcher_does_not_fit_never_runs() {
    let world = World::new();
    let deny = FakeHook::printing(&world.store, r#"{"decision":"deny"}"#);
    let provider = two_turns("echo", json!({"text": "hi"}));
    let agent = world.agent(
        &provider,
        vec![
            hook(HookEvent::PreTool, "write", &deny),
            hook(HookEvent::PostTool, "wr*", &deny),
        ],
    );
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(last_tool_message(&provider.requests()[1]), "echo: hi");
    assert!(report.tool_calls[0].ok);
    assert!(deny.inputs().is_empty());
    assert!(world.hook_events().is_empty());
}

#[tokio::test]
async fn calls_refused_before_the_hooks_never_reach_them() {
    let world = World::new();
    let allow = FakeHook::printing(&world.store, "");
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("write", json!({"path": 3}))
            .with_tool_call("nope", json!({}))
            .with_tool_call("write", json!({"wrong": "x"})),
        Step::text("done"),
    ]));
    let agent = world.agent(&provider, vec![hook(HookEvent::PreTool, "*", &allow)]);
    agent.run(RunRequest::new("go")).await.unwrap();
    assert!(allow.inputs().is_empty());
    assert!(world.writes.paths().is_empty());
}

/// A pre_tool hook that cancels the run while it runs, then answers (`hang`: never answers).
struct CancelsTheRun {
    token: CancellationToken,
    hang: bool,
}

#[async_trait]
impl HookCommand for CancelsTheRun {
    async fn run(&self, _: &str) -> Result<String, HookFailure> {
        self.token.cancel();
        if self.hang {
            std::future::pending::<()>().await;
        }
        Ok(String::new())
    }
}

#[tokio::test]
async fn a_cancel_while_the_pre_hooks_run_keeps_the_tool_from_starting() {
    for hang in [false, true] {
        let world = World::new();
        let token = CancellationToken::new();
        let hook = ToolHook {
            event: HookEvent::PreTool,
            matcher: ToolMatcher::new("*"),
            label: "cancels".into(),
            command: Arc::new(CancelsTheRun {
                token: token.clone(),
                hang,
            }),
        };
        let provider = two_turns("write", json!({"path": "a.txt"}));
        let agent = world.agent(&provider, vec![hook]);
        let run = agent.run(RunRequest::new("go").cancel_token(token));
        // A hook that never answers must not hold the run (this bound only fails a broken run).
        let report = tokio::time::timeout(std::time::Duration::from_secs(10), run)
            .await
            .expect("the run ends")
            .unwrap();
        assert_eq!(report.state, AgentState::Cancelled, "hang: {hang}");
        assert!(world.writes.paths().is_empty(), "hang: {hang}");
    }
}

#[tokio::test]
async fn a_call_a_resume_replays_meets_no_hook_again() {
    let world = World::new();
    let pre = FakeHook::printing(&world.store, r#"{"decision":"deny","reason":"no"}"#);
    let post = FakeHook::printing(&world.store, r#"{"annotation":"again"}"#);
    let hooks = ToolHooks::new(vec![
        hook(HookEvent::PreTool, "*", &pre),
        hook(HookEvent::PostTool, "*", &post),
    ]);
    let mut registry = ToolRegistry::new();
    registry.register(world.writes.tool()).unwrap();
    let registry = Arc::new(registry);
    let mut settings = RunSettings::new("mock", "m");
    settings.extensions = ExtensionSet::new(vec![Arc::new(hooks)]);
    let context = ToolContext {
        session_id: "s".into(),
        run_id: "r".into(),
        call_id: String::new(),
        user_id: None,
        untrusted_source: false,
        place: None,
        cancel: CancellationToken::new(),
    };
    let emitter = Emitter::new(
        Arc::new([world.log.clone() as Arc<dyn keel_core::EventSink>]),
        Arc::new(SystemClock),
        "r",
        "s",
    );
    let executor = ToolExecutor {
        registry: &registry,
        context: &context,
        max_chars: 1000,
        emitter: &emitter,
        retry_delays: &[],
        store: world.store.as_ref(),
        clock: &SystemClock,
        offered: registry.specs().into(),
        settings: &settings,
        children: None,
        spend: &keel_core::run::BatchSpend::default(),
    };
    let call = ToolCall {
        id: "c1".into(),
        name: "write".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    };
    let done = ToolCallRecord {
        run_id: "r".into(),
        call_id: "c1".into(),
        name: "write".into(),
        arguments: call.arguments.clone(),
        idempotent: false,
        started_at: chrono::Utc::now(),
        completed_at: Some(chrono::Utc::now()),
        ok: Some(true),
        output: Some("wrote \"a.txt\"".into()),
    };
    let replay = Replay {
        records: HashMap::from([("c1".to_string(), done)]),
        rerun: Default::default(),
    };
    let BatchOutcome::Done(results, _) = executor.run_batch(&[call], &replay).await else {
        panic!("a completed call is replayed");
    };
    assert_eq!(results[0].content, "wrote \"a.txt\"");
    assert!(pre.inputs().is_empty() && post.inputs().is_empty());
    assert!(world.writes.paths().is_empty());
}
