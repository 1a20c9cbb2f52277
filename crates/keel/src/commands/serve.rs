//! `keel serve`: the daemon. Opens the store, reconciles what the last process left, builds
//! one agent from the configuration, and serves the HTTP API until SIGTERM or SIGINT, then
//! stops taking runs, lets running ones reach their next boundary and exits.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use keel_core::EventSink;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_server::AppState;

use crate::cli::{AgentArgs, ServeArgs};
use crate::config::keel_home;
use crate::output::PauseAtCheckpoint;
use crate::setup;

/// Runs `keel serve`.
pub async fn serve(config_file: Option<&Path>, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let serve = setup::serve_settings(config_file, &home)?;
    let configured = setup::load_settings(config_file, &home, &AgentArgs::default())?;
    if let Some(notice) = &configured.fallback {
        eprintln!("{}", notice.warning());
    }
    // Every open run holds a connection to its client and one to its model.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let store = setup::open_store(&home).await?;
    let hub = Arc::new(Hub::new(store.clone()));
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![hub.clone(), configured.lastgood.clone()];
    if let Some(hook) = PauseAtCheckpoint::from_env() {
        sinks.push(Arc::new(hook));
    }
    let settings = &configured.settings;
    let agent = Arc::new(setup::agent(
        settings,
        &configured.own_files,
        store.clone(),
        sinks,
        None,
    )?);
    let options = EngineOptions {
        workers: serve.workers,
        queue_limit: serve.queue_limit,
        default_lane_policy: serve.lane_policy,
        shutdown_grace: serve.shutdown_grace,
        reconcile_every: serve.reconcile_every,
        stale_after: settings.reconcile.stale_after,
        worker: crate::worker::this_worker_name(),
        provider: settings.provider.name.clone(),
        model: settings.model.clone(),
        ..EngineOptions::default()
    };
    let engine = Engine::new(store.clone(), agent, hub.clone(), options);
    let started = engine.start().await.context("cannot start the run engine")?;
    let bind = args.bind.unwrap_or(serve.bind);
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let address = listener.local_addr()?;
    println!("keel serve: listening on http://{address}");
    eprintln!("keel serve: {started}");
    let state = AppState { store, engine, hub };
    keel_server::serve::serve(listener, state, stop_signal())
        .await
        .context("the HTTP server failed")?;
    eprintln!("keel serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Resolves at the first SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("keel serve: stopping: no new runs; running ones stop at their next boundary");
}
