//! `keel serve`: the daemon. Reconciles what the last process left, builds one agent from the
//! configuration, and serves the HTTP API until SIGTERM or SIGINT; then it stops taking runs,
//! lets running ones reach their next boundary (resumable), and exits.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use keel_core::EventSink;
use keel_core::worker::WorkerProbe;
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;

use crate::cli::ServeArgs;
use crate::config::keel_home;
use crate::output::PauseAtCheckpoint;
use crate::setup;
use keel_config::worker::ProcProbe;

/// Runs `keel serve`.
pub async fn serve(config_file: Option<&Path>, args: ServeArgs) -> anyhow::Result<ExitCode> {
    log_to_stderr();
    let home = keel_home()?;
    // Many daemons share a PostgreSQL store (that is what it is for); a SQLite one is this
    // daemon's alone.
    let shared = matches!(
        setup::store_location(&home)?,
        keel_config::store_settings::StoreLocation::Postgres(_)
    );
    let _only_daemon = if shared {
        std::fs::create_dir_all(&home)
            .with_context(|| format!("cannot create KEEL_HOME {}", home.display()))?;
        None
    } else {
        Some(lock_home(&home)?)
    };
    let serve = keel_config::serve_settings::load(config_file, &home)?;
    let schedules = keel_config::schedules_settings::load(config_file, &home)?;
    let (channels, webhooks) = keel_config::serve_settings::load_channels(config_file, &home)?;
    let channels = keel_channels::ChannelsConfig::from_toml(&channels, &webhooks)
        .map_err(keel_config::config::ConfigError)?;
    // The daemon takes no agent flags: keel.toml and the environment decide.
    let configured = keel_config::assembly::load_settings(
        config_file,
        &home,
        &keel_config::Overrides::default(),
    )?;
    if let Some(notice) = &configured.fallback {
        eprintln!("{}", notice.warning());
    }
    if let Some(notice) = keel_config::sandbox_settings::notice(&configured.settings) {
        eprintln!("{notice}");
    }
    // Every open run holds a connection to its client and one to its model.
    if let Ok(hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(_, hard)| hard) {
        let _ = rlimit::increase_nofile_limit(hard);
    }
    let store = setup::open_store(&home).await?;
    let settings = &configured.settings;
    let probe = Arc::new(ProcProbe::new());
    let worker = probe
        .this_process()
        .map_or_else(|| format!("pid {}", std::process::id()), |w| w.to_string());
    let hub = Arc::new(Hub::new(store.clone()));
    let engine = Engine::new(
        store.clone(),
        hub.clone(),
        EngineOptions {
            workers: serve.workers,
            queue_limit: serve.queue_limit,
            default_lane_policy: serve.lane_policy,
            shutdown_grace: serve.shutdown_grace,
            reconcile_every: serve.reconcile_every,
            reconcile: settings.reconcile,
            worker,
            provider: settings.provider.name.clone(),
            model: settings.model.clone(),
            probe,
            compact_between_turns: serve.compact_between_turns,
            collect_quiet: serve.collect_quiet,
            collect_cap: serve.collect_cap,
        },
    );
    let mut sinks: Vec<Arc<dyn EventSink>> =
        vec![hub.clone(), engine.sink(), configured.lastgood.clone()];
    if let Some(hook) = PauseAtCheckpoint::from_env() {
        sinks.push(Arc::new(hook));
    }
    if let Some(traces) = crate::telemetry::sink(config_file, &home, &settings.provider.name)? {
        sinks.push(traces);
    }
    // The scheduler's clock: the system's, or for tests the instant `[schedules] clock_file`
    // holds. The `schedule` tool counts a new schedule's first slot from the same clock.
    let clock: Arc<dyn keel_core::clock::Clock> = match &schedules.clock_file {
        Some(path) => Arc::new(keel_schedules::clock::FileClock::new(path)),
        None => Arc::new(keel_core::clock::SystemClock),
    };
    let schedule_tool: Arc<dyn keel_core::Tool> = Arc::new(keel_schedules::ScheduleTool::new(
        store.clone(),
        clock.clone(),
    ));
    let agent = keel_config::assembly::agent(
        settings,
        &configured.own_files,
        store.clone(),
        sinks,
        None,
        vec![schedule_tool],
    )?;
    let modules = agent.tool_modules();
    if let Some(unknown) = serve
        .default_modules
        .iter()
        .flatten()
        .find(|module| !modules.contains(module))
    {
        anyhow::bail!(keel_config::config::ConfigError(format!(
            "[serve] default_modules names `{unknown}`, which no tool has; the modules are: {}",
            modules.join(", ")
        )));
    }
    let reconciled = engine
        .start(Arc::new(agent))
        .await
        .context("cannot start the run engine")?;
    if reconciled.timed_out > 0 {
        eprintln!(
            "keel serve: {} run(s) lost their worker; {} resume now",
            reconciled.timed_out, reconciled.resumable
        );
    }
    let inbox = keel_platform::Inbox::new(
        store.clone(),
        keel_platform::InboxSettings {
            guest_monthly_tokens: Some(serve.guest_monthly_tokens),
            default_modules: serve.default_modules.clone(),
            lane_policy: serve.lane_policy,
            max_attachment_bytes: serve.max_attachment_bytes,
        },
    );
    let state = AppState {
        store,
        engine,
        hub,
        max_request_bytes: serve.max_request_bytes,
        inbox: Arc::new(inbox),
        modules: modules.into(),
    };
    let limits = keel_server::ConnectionLimits {
        max_connections: serve.max_connections,
        header_timeout: serve.header_timeout,
        body_timeout: serve.body_timeout,
    };
    let running = if channels.is_empty() {
        None
    } else {
        let running = keel_channels::start(state.clone(), &channels)
            .await
            .map_err(|error| match error {
                keel_channels::StartError::Config(why) => {
                    anyhow::Error::new(keel_config::config::ConfigError(why))
                }
                other => anyhow::Error::new(other).context("cannot start the channels"),
            })?;
        println!("keel serve: channels: {}", running.names.join(", "));
        Some(running)
    };
    let scheduler = schedules.enabled.then(|| {
        keel_server::scheduler::start(
            &state,
            clock,
            keel_schedules::scheduler::SchedulerOptions {
                tick: schedules.tick,
                grace: chrono::Duration::from_std(schedules.grace)
                    .unwrap_or(keel_schedules::catch_up::DEFAULT_GRACE),
            },
        )
    });
    // Listening once the channels started: a channel that cannot start stops the daemon
    // before anyone is told its address.
    let bind = args.bind.unwrap_or(serve.bind);
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    println!("keel serve: listening on http://{}", listener.local_addr()?);
    let metrics = super::serve_metrics::start(
        config_file,
        &home,
        &state,
        running.as_ref().map(|running| running.names.as_slice()),
    )
    .await?;
    let routes = running
        .as_ref()
        .map_or_else(axum::Router::new, |running| running.routes.clone())
        .merge(keel_openai::routes(state.clone()))
        .merge(keel_console::routes_with(
            state.clone(),
            keel_console::ConsoleOptions {
                channels: running
                    .as_ref()
                    .map_or_else(Vec::new, |running| running.names.clone()),
                ..Default::default()
            },
        ));
    let stopped = keel_server::serve::serve_with(listener, state, routes, limits, stop_signal())
        .await
        .context("the HTTP server failed")?;
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    if let Some(scheduler) = scheduler {
        scheduler.stop().await;
    }
    if let Some(running) = running {
        running.shutdown().await;
    }
    eprintln!(
        "keel serve: stopped; {} run(s) interrupted at a boundary, {} still going at the \
         deadline (both resume at the next start)",
        stopped.interrupted, stopped.abandoned
    );
    Ok(ExitCode::SUCCESS)
}

/// Holds `$KEEL_HOME/serve.lock` for the daemon's life: two daemons on one store would both
/// start its queued runs (running several processes on one store is PostgreSQL's job,
/// DESIGN.md §13). The lock goes with the process, however it ends.
fn lock_home(home: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(home)
        .with_context(|| format!("cannot create KEEL_HOME {}", home.display()))?;
    let path = home.join("serve.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            crate::config::ConfigError(format!(
                "another keel serve is running on {} (it holds {}); stop it first, or give \
                 this one its own KEEL_HOME",
                home.display(),
                path.display()
            ))
        },
    )?;
    Ok(file)
}

/// The daemon's log lines (a refused webhook, a channel's error, a reply put off) on stderr:
/// keel's own at `info`, other crates' at `warn`, or as `KEEL_LOG` says (e.g.
/// `KEEL_LOG=debug`, `KEEL_LOG=warn,keel_channels=debug`).
fn log_to_stderr() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let keel = [
        "keel",
        "keel_core",
        "keel_server",
        "keel_schedules",
        "keel_channels",
        "keel_platform",
        "keel_store",
        "keel_providers",
        "keel_tools",
        "keel_mcp",
        "keel_memory",
        "keel_extensions",
        "keel_config",
        "keel_telemetry",
    ];
    let filter = match std::env::var("KEEL_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|error| {
            eprintln!("keel serve: KEEL_LOG is not a log filter ({error}); using the default");
            Targets::new().with_default(LevelFilter::WARN)
        }),
        _ => keel.iter().fold(
            Targets::new().with_default(LevelFilter::WARN),
            |targets, crate_name| targets.with_target(*crate_name, LevelFilter::INFO),
        ),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true);
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .try_init();
}

/// Resolves at the first SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    eprintln!(
        "keel serve: stopping: no new runs; running ones stop at their next boundary \
         (SIGTERM or Ctrl-C again to quit at once)"
    );
    tokio::spawn(async {
        let again = async {
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        again.await;
        eprintln!("keel serve: stopped at once; the runs resume at the next start");
        std::process::exit(crate::sigterm::EXIT_CODE);
    });
}
