//! `keel mock-provider`: a scripted model server for tests. Prints its address on the first
//! stdout line, then serves until killed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use keel_mock::{MockServer, Script, ServeOptions};

use crate::cli::MockProviderArgs;
use crate::config::ConfigError;

/// Runs `keel mock-provider`.
pub async fn serve(args: MockProviderArgs) -> anyhow::Result<ExitCode> {
    let script = Script::from_file(&args.script).map_err(|e| ConfigError(e.to_string()))?;
    let options = ServeOptions {
        record: !args.no_record,
    };
    let server = MockServer::start_with(args.bind, script, options)
        .await
        .with_context(|| format!("cannot listen on {}", args.bind))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "http://{}", server.addr())?;
    stdout.flush()?;
    drop(stdout);
    eprintln!(
        "keel mock-provider: serving {} at {} (/chat/completions, /messages, /responses); \
         Ctrl-C to stop",
        args.script.display(),
        server.base_url()
    );
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
