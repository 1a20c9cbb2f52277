//! Tools and helpers shared by the loop's integration tests.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use keel_core::{
    Agent, ApprovalNeed, ChatRequest, Provider, Role, Store, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

type Handler = dyn Fn(Value) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A tool whose behaviour is a closure.
pub struct TestTool {
    spec: ToolSpec,
    handler: Box<Handler>,
}

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        (self.handler)(args).await
    }
}

fn tool(
    spec: ToolSpec,
    handler: impl Fn(Value) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync + 'static,
) -> Arc<dyn Tool> {
    Arc::new(TestTool {
        spec,
        handler: Box::new(handler),
    })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// `echo {text}` → "echo: TEXT".
pub struct Echo;

impl Echo {
    pub fn tool() -> Arc<dyn Tool> {
        let spec = ToolSpec::new(
            "echo",
            "echoes text",
            object(json!({"text": {"type": "string"}}), &["text"]),
        );
        tool(spec.idempotent(), |args| {
            Box::pin(async move {
                Ok(ToolOutput::text(format!(
                    "echo: {}",
                    args["text"].as_str().unwrap_or("")
                )))
            })
        })
    }
}

/// `fails` → a tool error.
pub struct Fails;

impl Fails {
    pub fn tool() -> Arc<dyn Tool> {
        tool(
            ToolSpec::new("fails", "always fails", json!({"type": "object"})),
            |_| Box::pin(async { Err(ToolError::failed("the disk is on fire")) }),
        )
    }
}

/// `panics` → a panic inside the tool.
pub struct Panics;

impl Panics {
    pub fn tool() -> Arc<dyn Tool> {
        tool(
            ToolSpec::new("panics", "always panics", json!({"type": "object"})),
            |_| Box::pin(async { panic!("boom") }),
        )
    }
}

/// `slow {ms, tag}` → waits on the barrier (when given), sleeps `ms`, returns TAG. Idempotent,
/// so calls in one batch run concurrently.
pub struct Slow;

impl Slow {
    pub fn tool(barrier: Option<Arc<tokio::sync::Barrier>>) -> Arc<dyn Tool> {
        let schema = object(
            json!({"ms": {"type": "integer"}, "tag": {"type": "string"}}),
            &["ms", "tag"],
        );
        tool(
            ToolSpec::new("slow", "sleeps", schema).idempotent(),
            move |args| {
                let barrier = barrier.clone();
                Box::pin(async move {
                    if let Some(barrier) = barrier {
                        barrier.wait().await;
                    }
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)))
                        .await;
                    Ok(ToolOutput::text(
                        args["tag"].as_str().unwrap_or("").to_string(),
                    ))
                })
            },
        )
    }
}

/// Records how many spy tools run at once.
#[derive(Clone, Default)]
pub struct Spy {
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    max_during_interactive: Arc<AtomicUsize>,
}

impl Spy {
    /// An idempotent tool called `name` that takes 10 ms and records concurrency.
    pub fn tool(&self, name: &str, interactive: bool) -> Arc<dyn Tool> {
        let mut spec = ToolSpec::new(name, "spy", json!({"type": "object"})).idempotent();
        spec.interactive = interactive;
        let spy = self.clone();
        tool(spec, move |_| {
            let spy = spy.clone();
            Box::pin(async move {
                let now = spy.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                spy.max_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                if interactive {
                    let seen = spy.in_flight.load(Ordering::SeqCst);
                    spy.max_during_interactive.fetch_max(seen, Ordering::SeqCst);
                }
                spy.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::text("ok"))
            })
        })
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn max_in_flight_during_interactive(&self) -> usize {
        self.max_during_interactive.load(Ordering::SeqCst)
    }
}

/// An agent on model `m` with the given tools and store.
pub fn agent_with(
    provider: Arc<dyn Provider>,
    store: Arc<dyn Store>,
    tools: Vec<Arc<dyn Tool>>,
) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .tools(tools)
        .system_prompt("test")
        .build()
        .unwrap()
}

/// The content of the `n`th tool message of a request.
pub fn tool_message(request: &ChatRequest, n: usize) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .nth(n)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

/// The content of the last tool message of a request.
pub fn last_tool_message(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

/// A tool that fails transiently `failures` times, then succeeds; counts its calls.
pub struct Flaky {
    pub calls: Arc<AtomicUsize>,
}

impl Flaky {
    pub fn tool(
        name: &str,
        idempotent: bool,
        failures: usize,
    ) -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let mut spec = ToolSpec::new(name, "flaky", json!({"type": "object"}));
        spec.idempotent = idempotent;
        let tool = tool(spec, move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move {
                if n <= failures {
                    Err(ToolError::transient(format!("HTTP 503 on attempt {n}")))
                } else {
                    Ok(ToolOutput::text(format!("ok on attempt {n}")))
                }
            })
        });
        (tool, calls)
    }
}

/// A clock tests move by hand.
pub struct ManualClock(std::sync::Mutex<chrono::DateTime<chrono::Utc>>);

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock(std::sync::Mutex::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        )))
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap();
        *now += chrono::Duration::from_std(by).unwrap();
    }
}

impl keel_core::Clock for ManualClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        *self.0.lock().unwrap()
    }
}

/// A side-effecting `append {text}` tool that appends to a shared log; while `hang` is set it
/// hangs after appending (a worker dying mid-call) or before (`hang_before`).
#[derive(Clone, Default)]
pub struct Appender {
    pub log: Arc<std::sync::Mutex<Vec<String>>>,
    pub hang_after: Arc<std::sync::atomic::AtomicBool>,
    pub hang_before: Arc<std::sync::atomic::AtomicBool>,
    pub entered: Arc<tokio::sync::Notify>,
}

impl Appender {
    pub fn tool(&self) -> Arc<dyn Tool> {
        let me = self.clone();
        let spec = ToolSpec::new(
            "append",
            "appends text to the log",
            object(json!({"text": {"type": "string"}}), &["text"]),
        );
        tool(spec, move |args| {
            let me = me.clone();
            Box::pin(async move {
                me.entered.notify_one();
                if me.hang_before.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                me.log
                    .lock()
                    .unwrap()
                    .push(args["text"].as_str().unwrap_or("").to_string());
                if me.hang_after.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok(ToolOutput::text("appended"))
            })
        })
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// An idempotent `wait` tool that hangs while `hang` is set, then answers "waited".
pub fn waiter(
    hang: Arc<std::sync::atomic::AtomicBool>,
    entered: Arc<tokio::sync::Notify>,
) -> Arc<dyn Tool> {
    let spec = ToolSpec::new("wait", "waits", json!({"type": "object"})).idempotent();
    tool(spec, move |_| {
        let hang = hang.clone();
        let entered = entered.clone();
        Box::pin(async move {
            entered.notify_one();
            if hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            Ok(ToolOutput::text("waited"))
        })
    })
}

/// A tool whose calls with a `text` starting with `danger` need approval (the appender's
/// `danger…` texts).
pub struct Guarded(pub Arc<dyn Tool>);

#[async_trait]
impl Tool for Guarded {
    fn spec(&self) -> &ToolSpec {
        self.0.spec()
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.0.call(args, ctx).await
    }
    fn approval(&self, args: &Value) -> Option<ApprovalNeed> {
        let text = args["text"].as_str()?;
        text.starts_with("danger").then(|| ApprovalNeed {
            reason: "it is dangerous".into(),
            pattern: text.into(),
        })
    }
}
