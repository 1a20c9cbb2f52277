//! The daemon's state on the in-memory store, for the integration tests: an engine started on
//! an agent whose provider, model and tools each test chooses, with the store and the live
//! events wired in as `keel serve` wires them.

#![allow(dead_code)]

use keel_platform::PlatformStore;
use std::sync::Arc;

use chrono::Utc;
use keel_core::{Agent, AgentBuilder};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_server::keys::new_key;
use keel_store::MemoryStore;

/// A started engine's state on a fresh store, with `options`, on the agent that `agent`
/// finishes from a builder that has the store and the event sinks (it adds the provider, the
/// model and any tools); and that store.
pub async fn state_with(
    options: EngineOptions,
    agent: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> (AppState, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let hub = Arc::new(Hub::new(store.clone()));
    let engine = Engine::new(store.clone(), hub.clone(), options);
    let builder = Agent::builder()
        .store(store.clone())
        .event_sink(hub.clone())
        .event_sink(engine.sink());
    let agent = agent(builder).build().unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    let state = AppState {
        store: store.clone(),
        engine,
        hub,
        max_request_bytes: 64 * 1024,
        inbox: Arc::new(keel_platform::Inbox::new(
            store.clone(),
            keel_platform::InboxSettings::default(),
        )),
        modules: Vec::new().into(),
    };
    (state, store)
}

/// A started engine's state on a model that answers "ok", and a key of user `ann`.
pub async fn state() -> (AppState, String) {
    let (state, store) = state_with(EngineOptions::default(), |builder| {
        builder
            .provider(Arc::new(ScriptedProvider::new(
                Script::new(vec![Step::text("ok")]).with_per_turn(),
            )))
            .model("m")
    })
    .await;
    let made = new_key(Some("ann".into()), false, Vec::new(), Utc::now()).unwrap();
    store.save_api_key(&made.record).await.unwrap();
    (state, made.key)
}

/// A side-effecting tool that asks for approval on every call (pattern `*`, for `reason`),
/// answers `answer`, and counts the calls it ran.
pub struct AskingTool {
    spec: keel_core::ToolSpec,
    reason: &'static str,
    answer: &'static str,
    /// The calls it ran.
    pub ran: Arc<std::sync::atomic::AtomicUsize>,
}

impl AskingTool {
    /// The tool of `spec`, asking for `reason`, answering `answer`.
    pub fn new(spec: keel_core::ToolSpec, reason: &'static str, answer: &'static str) -> Self {
        AskingTool {
            spec,
            reason,
            answer,
            ran: Arc::default(),
        }
    }

    /// How many calls it ran.
    pub fn ran(&self) -> usize {
        self.ran.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl keel_core::Tool for AskingTool {
    fn spec(&self) -> &keel_core::ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &keel_core::ToolContext,
    ) -> Result<keel_core::ToolOutput, keel_core::ToolError> {
        self.ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(keel_core::ToolOutput::text(self.answer))
    }

    fn approval(&self, _args: &serde_json::Value) -> Option<keel_core::ApprovalNeed> {
        Some(keel_core::ApprovalNeed {
            reason: self.reason.into(),
            pattern: "*".into(),
        })
    }
}
