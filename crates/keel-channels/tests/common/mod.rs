//! A daemon's state on the memory store for keel-channels' integration tests: an engine
//! started on a scripted model that answers `step` every turn, with the store and live events
//! wired in as `keel serve` wires them.

use std::sync::Arc;

use keel_core::Agent;
use keel_mock::{Script, ScriptedProvider, Step};
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_store::MemoryStore;

/// The started daemon's state, its store and its model.
pub async fn daemon_state(step: Step) -> (AppState, Arc<MemoryStore>, Arc<ScriptedProvider>) {
    let store = Arc::new(MemoryStore::new());
    let hub = Arc::new(Hub::new(store.clone()));
    let engine = Engine::new(store.clone(), hub.clone(), EngineOptions::default());
    let provider = Arc::new(ScriptedProvider::new(
        Script::new(vec![step]).with_per_turn(),
    ));
    let agent = Agent::builder()
        .store(store.clone())
        .event_sink(hub.clone())
        .event_sink(engine.sink())
        .provider(provider.clone())
        .model("m")
        .build()
        .unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    let inbox = Arc::new(keel_platform::Inbox::new(
        store.clone(),
        keel_platform::InboxSettings::default(),
    ));
    let state = AppState {
        store: store.clone(),
        engine,
        hub,
        max_request_bytes: 64 * 1024,
        inbox,
        modules: Vec::new().into(),
    };
    (state, store, provider)
}
