//! The daemon's state on the in-memory store with a one-step scripted model, and a key.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{Agent, MemoryStore, Store};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_server::keys::new_key;

/// A started engine's state, and a key of user `ann`.
pub async fn state() -> (AppState, String) {
    let store = Arc::new(MemoryStore::new());
    let hub = Arc::new(Hub::new(store.clone()));
    let engine = Engine::new(store.clone(), hub.clone(), EngineOptions::default());
    let agent = Agent::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::new(vec![Step::text("ok")]).with_per_turn(),
        )))
        .model("m")
        .store(store.clone())
        .event_sink(hub.clone())
        .event_sink(engine.sink())
        .build()
        .unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    let made = new_key(Some("ann".into()), false, Vec::new(), Utc::now()).unwrap();
    store.save_api_key(&made.record).await.unwrap();
    let state = AppState {
        store: store.clone(),
        engine,
        hub,
        max_request_bytes: 64 * 1024,
        inbox: Arc::new(keel_core::platform::Inbox::new(
            store.clone(),
            keel_core::platform::InboxSettings::default(),
        )),
        modules: Vec::new().into(),
    };
    (state, made.key)
}
