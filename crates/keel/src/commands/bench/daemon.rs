//! A `keel serve` child process for the benches that drive the daemon as a user's client
//! would, over real sockets: its home (SQLite, `keel mock-provider` as the model), an admin key,
//! the process itself (CPU and memory read from `/proc`), and the few API calls the benches
//! make.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use keel_mock::{Script, Step};
use serde_json::{Value, json};

use super::mock_process::MockProcess;
use super::report::{cpu_time_of, rss_kib_of};

/// Makes a daemon's home and workspace in `dir` (a workspace file for `list_dir` to find, the
/// model at `mock`, streamed answers or not, the iteration cap, the lanes' workers, and room
/// for two connections a worker: a run's stream and its message); the home.
pub(super) fn prepare_home(
    dir: &Path,
    mock: &MockProcess,
    stream: bool,
    max_iterations: u32,
    workers: usize,
) -> anyhow::Result<PathBuf> {
    let home = dir.join("home");
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("items.txt"), "one item per line\n")?;
    let model_url = mock.url().trim_end_matches("/v1");
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "provider = \"mock\"\nbase_url = \"{model_url}\"\nworkspace = \"{}\"\nstream = {stream}\n\
             max_iterations = {max_iterations}\n\n[serve]\nworkers = {workers}\n\
             max_connections = {}\n",
            workspace.display(),
            // Past `[serve] max_connections` (1,024 by default) the daemon answers 503 and
            // closes: 1,000 conversations' streams and messages come close to it.
            workers * 2 + 256,
        ),
    )?;
    Ok(home)
}

/// K − 1 `list_dir` calls (a real tool of the daemon), then the answer, each after the
/// latency; usage given so nothing is estimated.
pub(super) fn script(iterations: u32, latency_ms: u64) -> Script {
    let mut steps: Vec<Step> = (1..iterations)
        .map(|i| {
            Step::tool_call("list_dir", json!({"path": "."}))
                .with_text(format!("Looking, step {i}."))
                .with_usage(400 + 60 * u64::from(i), 24)
                .with_delay_ms(latency_ms)
        })
        .collect();
    steps.push(
        Step::text("Everything is listed.")
            .with_usage(400 + 60 * u64::from(iterations), 16)
            .with_delay_ms(latency_ms),
    );
    Script::new(steps).with_per_turn()
}

/// `keel` in `home` on the store `database` names.
fn keel_command(home: &Path, database: Option<&str>) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("cannot find the keel executable")?;
    let mut command = Command::new(exe);
    command.env("KEEL_HOME", home);
    match database {
        Some(url) => command.env("KEEL_DATABASE_URL", url),
        None => command.env_remove("KEEL_DATABASE_URL"),
    };
    Ok(command)
}

/// `keel keys create --admin` in `home`: the key.
pub(super) fn admin_key(home: &Path, database: Option<&str>) -> anyhow::Result<String> {
    let output = keel_command(home, database)?
        .args(["keys", "create", "--admin"])
        .output()
        .context("cannot run keel keys create")?;
    anyhow::ensure!(
        output.status.success(),
        "keel keys create failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// A `keel serve` child on a free port; killed when dropped.
pub(super) struct DaemonProcess {
    child: Child,
    /// Its API's base URL (`http://127.0.0.1:PORT`).
    pub(super) url: String,
}

impl DaemonProcess {
    /// Starts `keel serve` in `home` on the store `database` names; returns once it printed
    /// its address.
    pub(super) fn start(home: &Path, database: Option<&str>) -> anyhow::Result<DaemonProcess> {
        let mut child = keel_command(home, database)?
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start keel serve")?;
        let mut reader = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            if let Some(at) = line.find("http://") {
                let url = line[at..].trim().to_string();
                std::thread::spawn(move || for _ in reader.lines() {});
                return Ok(DaemonProcess { child, url });
            }
            line.clear();
        }
        let _ = child.kill();
        anyhow::bail!("keel serve did not start")
    }

    /// Its process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory now, in KiB.
    pub(super) fn rss_kib(&self) -> u64 {
        rss_kib_of(&self.pid().to_string()).0
    }

    /// Its peak resident memory, in KiB.
    pub(super) fn peak_rss_kib(&self) -> u64 {
        rss_kib_of(&self.pid().to_string()).1
    }

    /// The CPU time (user + system) it has used.
    pub(super) fn cpu_time(&self) -> Duration {
        cpu_time_of(&self.pid().to_string())
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon's API as the benches call it: one HTTP client, the base URL and an admin key.
#[derive(Clone)]
pub(super) struct Api {
    /// The HTTP client (its connection pool is shared by clones).
    pub(super) http: reqwest::Client,
    /// The daemon's base URL.
    pub(super) base: String,
    /// The bearer key.
    pub(super) key: String,
}

impl Api {
    /// Creates a conversation; its id.
    pub(super) async fn conversation(&self) -> anyhow::Result<String> {
        let body: Value = self
            .http
            .post(format!("{}/v1/conversations", self.base))
            .bearer_auth(&self.key)
            .json(&json!({}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        body["id"]
            .as_str()
            .map(str::to_string)
            .context("a conversation without an id")
    }

    /// One conversation, one message and its run's stream read to the end, unmeasured: the
    /// daemon's tokenizer tables, statements and connections are set up before a bench's clock.
    pub(super) async fn warm_up(&self) -> anyhow::Result<()> {
        let conversation = self.conversation().await?;
        let (_, run_id) = self.send(&conversation).await?;
        self.follow(&run_id).await?;
        Ok(())
    }

    /// Sends the message; how long the 202 took, and the run's id.
    pub(super) async fn send(&self, conversation: &str) -> anyhow::Result<(Duration, String)> {
        let started = std::time::Instant::now();
        let (answered, run_id) = self.post_message(conversation).await?;
        Ok((answered.duration_since(started), run_id))
    }

    /// Sends the message; when its 202 arrived (before its body was read), and the run's id.
    pub(super) async fn post_message(
        &self,
        conversation: &str,
    ) -> anyhow::Result<(std::time::Instant, String)> {
        let response = self
            .http
            .post(format!(
                "{}/v1/conversations/{conversation}/messages",
                self.base
            ))
            .bearer_auth(&self.key)
            .json(&json!({"text": "List the workspace, step by step."}))
            .send()
            .await?
            .error_for_status()?;
        let answered = std::time::Instant::now();
        let body: Value = response.json().await?;
        let run_id = body["run_id"].as_str().context("no run id")?.to_string();
        Ok((answered, run_id))
    }

    /// Opens the conversation's event stream (`GET /v1/conversations/{id}/events`): the
    /// response once its headers came, its frames still to read.
    pub(super) async fn conversation_events(
        &self,
        conversation: &str,
    ) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .get(format!(
                "{}/v1/conversations/{conversation}/events",
                self.base
            ))
            .bearer_auth(&self.key)
            .send()
            .await?
            .error_for_status()?)
    }

    /// Reads the run's event stream to its end; the state it ended in.
    pub(super) async fn follow(&self, run_id: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .get(format!("{}/v1/runs/{run_id}/events", self.base))
            .bearer_auth(&self.key)
            .send()
            .await?
            .error_for_status()?;
        let mut frames = response.bytes_stream().eventsource();
        while let Some(frame) = frames.next().await {
            let frame = frame.context("the event stream broke")?;
            if frame.event == "keel.stream.end" {
                let end: Value = serde_json::from_str(&frame.data)?;
                return Ok(end["state"].as_str().unwrap_or("unknown").to_string());
            }
        }
        anyhow::bail!("the event stream of run {run_id} ended without its end frame")
    }
}
