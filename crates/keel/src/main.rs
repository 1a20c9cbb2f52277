//! The `keel` command-line program: run, chat, serve and the rest (`keel --help` lists them).
//!
//! Exit codes: 0 the run completed; 3 it ended in another state; 2 a usage or configuration
//! error; 1 anything else (e.g. the store could not be opened); 143 stopped by SIGTERM at a
//! safe point, the run resumable (see [`sigterm`]).

// keel's own lines are best-effort: a reader that went away (`keel run … 2>&1 | head -1`, a
// closed log pipe) loses them, never the run. std's print macros panic on a broken pipe, and
// a run in progress then ended `error (internal)`; these take their place in the whole crate.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod cli;
mod cli_admin;
mod cli_testkit;

use keel_config::{config, launch, resolve, worker};
mod commands;
mod output;
mod prompt_human;
mod remote;
mod setup;
mod sigterm;
mod telemetry;
mod terminal_text;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// mimalloc: the loop allocates many small, short-lived strings and JSON values per iteration
/// (messages, events, checkpoints), and glibc's allocator spent a quarter of `keel bench`'s
/// CPU time on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::config::ConfigError;
use crate::terminal_text::terminal_safe;
use keel_core::redact::redact_userinfo;

/// keel's environment holds its keys, and `/proc/PID/environ` would show them to every process
/// of the same user, `shell` commands run with `sandbox = "off"` included (in the sandbox, keel's
/// process is out of sight anyway). A process that is not dumpable has its `/proc/PID` files
/// owned by root and cannot be attached to; root still reads them. Children are dumpable again
/// from their `exec` on.
fn hide_own_environment() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{DumpableBehavior, set_dumpable_behavior};
        // A failure leaves keel as it was: readable by its user, as before.
        let _ = set_dumpable_behavior(DumpableBehavior::NotDumpable);
    }
}

fn main() -> ExitCode {
    hide_own_environment();
    let cli = Cli::parse();
    if cli.strict_config {
        config::set_strict();
    }
    setup::choose_store(cli.database.clone(), cli.config.clone());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("keel: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The daemon stops on SIGTERM its own way: at every run's next boundary, not the process's.
    if !matches!(cli.command, Command::Serve(_)) {
        runtime.spawn(sigterm::watch());
    }
    let config = cli.config.as_deref();
    let result = match cli.command {
        Command::Run(args) if args.remote.server.is_some() => {
            runtime.block_on(remote::session::run(
                &args.remote,
                args.session.as_deref(),
                &args.prompt.join(" "),
                args.json,
                args.show_reasoning,
            ))
        }
        Command::Run(args) => runtime.block_on(commands::run::run(config, args)),
        Command::Chat(args) if args.remote.server.is_some() => runtime.block_on(
            remote::chat::chat(&args.remote, args.session.as_deref(), args.show_reasoning),
        ),
        Command::Chat(args) => commands::chat::chat(&runtime, config, args),
        Command::Keys(args) => runtime.block_on(commands::keys::keys(args)),
        Command::Serve(args) => runtime.block_on(commands::serve::serve(config, args)),
        Command::Acp(args) => runtime.block_on(commands::acp::acp(config, args)),
        Command::Sessions(args) => runtime.block_on(commands::sessions::sessions(args)),
        Command::Users(args) => runtime.block_on(commands::users::users(args)),
        Command::Schedules(args) => runtime.block_on(commands::schedules::schedules(args)),
        Command::Channels(args) => {
            runtime.block_on(commands::channels::channels(cli.config.as_deref(), args))
        }
        Command::Facts(args) => runtime.block_on(commands::facts::facts(args)),
        Command::Usage(args) => runtime.block_on(commands::usage::usage(args)),
        Command::Personas(args) => runtime.block_on(commands::personas::personas(args)),
        Command::Mcp(args) => runtime.block_on(commands::mcp::mcp(config, args)),
        Command::Skills(args) => commands::skills::skills(config, args),
        Command::Runs(args) => runtime.block_on(commands::runs::runs(config, args)),
        Command::Resume(args) => runtime.block_on(commands::resume::resume(config, args)),
        Command::Answer(args) => runtime.block_on(commands::resume::answer(config, args)),
        Command::Approve(args) => runtime.block_on(commands::resume::approve(config, args)),
        Command::Demo => runtime.block_on(commands::demo::demo()),
        Command::MockProvider(args) => runtime.block_on(commands::mock_provider::serve(args)),
        Command::Bench(args) => {
            runtime.block_on(commands::bench::bench(args, cli.database.clone()))
        }
    };
    runtime.block_on(telemetry::flush());
    runtime.block_on(setup::close_stores());
    // A blocking tool call still running (e.g. a read of a FIFO no one writes), abandoned at
    // a hard limit or a cancel, must not keep the process alive: dropping the runtime would
    // wait for it forever.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        Err(error) => {
            let message = redact_userinfo(&format!("{error:#}"));
            eprintln!("keel: error: {}", terminal_safe(&message));
            if error.downcast_ref::<ConfigError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
