//! Real hook scripts around the real file tools, in a run: a deny keeps the file from being
//! written and the model sees why; a rewrite writes where the hook says (and a rewrite the
//! schema refuses denies); a hook that times out, exits 1 or prints garbage denies; a post hook
//! annotates, a failing one is ignored with an event; a hook whose matcher misses never runs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::hooks::{Scripts, none_running};
use keel_core::{
    Agent, AgentState, EventKind, EventLog, HookEvent, HookOutcome, RunReport, RunRequest,
};
use keel_extensions::AgentBuilderExt;
use keel_extensions::tool_hooks::{ToolHook, ToolHooks, ToolMatcher};
use keel_mock::{ScriptedProvider, Step};
use keel_tools::{CommandHook, Sandbox, Workspace, file_tools};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(20);

/// A workspace, hook scripts beside it, and the events of the last run.
struct Setup {
    workspace: tempfile::TempDir,
    scripts: Scripts,
    log: Arc<EventLog>,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            workspace: tempfile::tempdir().unwrap(),
            scripts: Scripts::new(),
            log: Arc::new(EventLog::new()),
        }
    }

    fn hook(
        &self,
        event: HookEvent,
        pattern: &str,
        command: String,
        timeout: Duration,
    ) -> ToolHook {
        ToolHook {
            event,
            matcher: ToolMatcher::new(pattern),
            label: command.clone(),
            // The scripts are beside the workspace, in a /tmp the sandbox would hide.
            command: Arc::new(
                CommandHook::new(command, self.workspace.path(), timeout)
                    .sandbox(Sandbox::detect().writable(self.scripts.dir())),
            ),
        }
    }

    /// Runs a model that makes `calls` (one per turn) and then answers "done".
    async fn run(&self, hooks: Vec<ToolHook>, calls: &[(&str, Value)]) -> (RunReport, Vec<String>) {
        let mut steps: Vec<Step> = calls
            .iter()
            .map(|(tool, args)| Step::tool_call(*tool, args.clone()))
            .collect();
        steps.push(Step::text("done"));
        let provider = Arc::new(ScriptedProvider::from_steps(steps));
        let workspace = Arc::new(Workspace::new(self.workspace.path()).unwrap());
        let agent = Agent::builder()
            .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
            .provider(provider.clone())
            .model("m")
            .tools(file_tools(workspace))
            .event_sink(self.log.clone())
            .hooks(ToolHooks::new(hooks))
            .build()
            .unwrap();
        let report = agent.run(RunRequest::new("go")).await.unwrap();
        assert_eq!(report.state, AgentState::Completed);
        let results = report.tool_calls.iter().map(|c| c.output.clone()).collect();
        (report, results)
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.workspace.path().join(name)).ok()
    }

    fn outcomes(&self) -> Vec<(HookEvent, HookOutcome, Option<String>)> {
        self.log
            .events()
            .into_iter()
            .filter_map(|event| match event.kind {
                EventKind::ToolHook {
                    stage,
                    outcome,
                    reason,
                    ..
                } => Some((stage, outcome, reason)),
                _ => None,
            })
            .collect()
    }
}

/// The example hook of the README (`examples/hooks/no_secrets.sh`): denies writes to paths
/// containing "secret".
fn no_secrets() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hooks/no_secrets.sh"
    );
    std::fs::read_to_string(path).unwrap()
}

fn write(path: &str, content: &str) -> (&'static str, Value) {
    ("write_file", json!({"path": path, "content": content}))
}

#[tokio::test]
async fn a_deny_hook_keeps_the_file_unwritten_and_tells_the_model_why() {
    let setup = Setup::new();
    let command = setup.scripts.script("no_secrets.sh", &no_secrets());
    let hooks = vec![setup.hook(HookEvent::PreTool, "write_*", command, LONG)];
    let (report, results) = setup
        .run(hooks, &[write("secret.txt", "pw"), write("ok.txt", "fine")])
        .await;
    assert!(setup.file("secret.txt").is_none());
    assert_eq!(setup.file("ok.txt").as_deref(), Some("fine"));
    assert!(!report.tool_calls[0].ok && report.tool_calls[1].ok);
    assert!(
        results[0]
            .contains(r#"a pre_tool hook denied it: paths containing "secret" are off limits"#),
        "{}",
        results[0]
    );
    let outcomes: Vec<_> = setup.outcomes().into_iter().map(|(_, o, _)| o).collect();
    assert_eq!(outcomes, [HookOutcome::Deny, HookOutcome::Allow]);
}

#[tokio::test]
async fn a_rewriting_hook_writes_where_it_says_and_a_bad_rewrite_denies() {
    let setup = Setup::new();
    let command = setup.scripts.script(
        "redirect.sh",
        r#"cat > /dev/null; echo '{"decision":"allow","arguments":{"path":"drafts.txt","content":"rewritten"}}'"#,
    );
    let hooks = vec![setup.hook(HookEvent::PreTool, "write_file", command, LONG)];
    let (report, _) = setup.run(hooks, &[write("final.txt", "original")]).await;
    assert!(setup.file("final.txt").is_none());
    assert_eq!(setup.file("drafts.txt").as_deref(), Some("rewritten"));
    assert_eq!(report.tool_calls[0].arguments["path"], "final.txt");

    let setup = Setup::new();
    let command = setup.scripts.script(
        "broken.sh",
        r#"echo '{"decision":"allow","arguments":{"path":"x.txt","content":5}}'"#,
    );
    let hooks = vec![setup.hook(HookEvent::PreTool, "write_file", command, LONG)];
    let (_, results) = setup.run(hooks, &[write("final.txt", "original")]).await;
    assert!(setup.file("final.txt").is_none() && setup.file("x.txt").is_none());
    assert!(
        results[0].contains("do not fit the tool's schema"),
        "{}",
        results[0]
    );
}

#[tokio::test]
async fn a_hook_that_times_out_denies_and_is_gone() {
    let setup = Setup::new();
    let command = setup
        .scripts
        .script("slow.sh", r#"sleep 30; echo '{"decision":"allow"}'"#);
    let hooks = vec![setup.hook(HookEvent::PreTool, "*", command, Duration::from_millis(200))];
    let (_, results) = setup.run(hooks, &[write("a.txt", "x")]).await;
    assert!(setup.file("a.txt").is_none());
    assert!(
        results[0].contains("did not finish within 200ms"),
        "{}",
        results[0]
    );
    assert!(none_running(&setup.scripts.dir().display().to_string()).await);
}

#[tokio::test]
async fn a_hook_that_exits_1_or_prints_garbage_denies() {
    let setup = Setup::new();
    let exits = setup
        .scripts
        .script("exits.sh", r#"echo '{"decision":"allow"}'; exit 1"#);
    let garbage = setup.scripts.script("garbage.sh", "echo 'sure, why not'");
    let unknown = setup
        .scripts
        .script("unknown.sh", r#"echo '{"decision":"yes"}'"#);
    let hooks = vec![
        setup.hook(HookEvent::PreTool, "write_file", exits, LONG),
        setup.hook(HookEvent::PreTool, "append_file", garbage, LONG),
        setup.hook(HookEvent::PreTool, "list_dir", unknown, LONG),
    ];
    let (_, results) = setup
        .run(
            hooks,
            &[
                write("a.txt", "x"),
                ("append_file", json!({"path": "b.txt", "content": "y"})),
                ("list_dir", json!({"path": "."})),
            ],
        )
        .await;
    assert!(setup.file("a.txt").is_none() && setup.file("b.txt").is_none());
    assert!(
        results[0].contains("exited with status 1"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("not JSON"), "{}", results[1]);
    assert!(results[2].contains("unknown decision"), "{}", results[2]);
    for result in &results {
        assert!(result.contains("was not run") && result.contains("so the call was denied"));
    }
    assert!(
        setup
            .outcomes()
            .iter()
            .all(|(_, o, _)| *o == HookOutcome::Error)
    );
}

#[tokio::test]
async fn a_post_hook_annotates_and_a_failing_one_is_ignored_with_an_event() {
    let setup = Setup::new();
    let annotate = setup.scripts.script(
        "count.sh",
        r#"input=$(cat)
case "$input" in
  *'"ok":true'*) echo '{"annotation":"checked by count.sh"}' ;;
  *) echo '{}' ;;
esac"#,
    );
    let failing = setup.scripts.script("fails.sh", "echo oops >&2; exit 2");
    let hooks = vec![
        setup.hook(HookEvent::PostTool, "*", failing, LONG),
        setup.hook(HookEvent::PostTool, "write_file", annotate, LONG),
    ];
    let (report, results) = setup.run(hooks, &[write("a.txt", "x")]).await;
    assert_eq!(setup.file("a.txt").as_deref(), Some("x"));
    assert!(report.tool_calls[0].ok);
    assert!(
        results[0].ends_with("\n\n[post_tool hook note: checked by count.sh]"),
        "{}",
        results[0]
    );
    let outcomes = setup.outcomes();
    assert_eq!(outcomes[0].1, HookOutcome::Error);
    assert!(outcomes[0].2.as_deref().unwrap().contains("oops"));
    assert_eq!(outcomes[1].1, HookOutcome::Annotate);
}

#[tokio::test]
async fn a_hook_whose_matcher_misses_never_runs() {
    let setup = Setup::new();
    let marker = setup.scripts.script(
        "marker.sh",
        r#"touch "$DIR/ran"; echo '{"decision":"deny"}'"#,
    );
    let hooks = vec![
        setup.hook(HookEvent::PreTool, "write_*", marker.clone(), LONG),
        setup.hook(HookEvent::PostTool, "read_file", marker, LONG),
    ];
    std::fs::write(setup.workspace.path().join("b.txt"), "hi").unwrap();
    let (report, _) = setup
        .run(hooks, &[("list_dir", json!({"path": "."}))])
        .await;
    assert!(report.tool_calls[0].ok);
    assert!(!setup.scripts.at("ran").exists());
    assert!(setup.outcomes().is_empty());
}
