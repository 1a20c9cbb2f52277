//! `keel mock-provider` in a child process, for `keel bench --http`: the model server does not
//! share the bench's CPU time or memory counters, as a real provider would not.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use keel_mock::Script;

/// A running `keel mock-provider`; killed when dropped.
pub struct MockProcess {
    child: Child,
    url: String,
}

impl MockProcess {
    /// Writes `script` into `dir` and starts this executable's `mock-provider` on it, without
    /// request recording; returns once it printed its address.
    pub fn start(script: &Script, dir: &Path) -> anyhow::Result<MockProcess> {
        let path = dir.join("bench-script.json");
        std::fs::write(&path, serde_json::to_vec(script)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let exe = std::env::current_exe().context("cannot find the keel executable")?;
        let mut child = Command::new(exe)
            .arg("mock-provider")
            .arg("--no-record")
            .arg("--script")
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start keel mock-provider")?;
        let mut first = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout).read_line(&mut first)?;
        }
        let address = first.trim();
        if !address.starts_with("http://") {
            let _ = child.kill();
            anyhow::bail!("keel mock-provider did not start (it printed {first:?})");
        }
        Ok(MockProcess {
            url: format!("{address}/v1"),
            child,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The API base URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
