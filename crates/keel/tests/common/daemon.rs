//! A real `keel serve` for end-to-end tests: started on a free port in its own KEEL_HOME, with
//! `keel mock-provider` as its model; keys made with `keel keys create`; an async HTTP client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{FAST_RETRIES, Mock, keel, run, stderr, stdout};

/// A running `keel serve`, killed when dropped.
pub struct Daemon {
    child: Option<Child>,
    /// Its address, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// Its KEEL_HOME.
    pub home: PathBuf,
    /// Its stderr, collected in the background.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

/// `keel.toml` for a daemon on `mock`, with the file tools on `workspace`; `extra` is added at
/// the end (e.g. a `[serve]` table).
pub fn daemon_config(home: &Path, mock: &Mock, workspace: &Path, extra: &str) {
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "provider = \"mock\"\nbase_url = \"{}\"\nworkspace = \"{}\"\n{FAST_RETRIES}\n{extra}\n",
            mock.url,
            workspace.display()
        ),
    )
    .unwrap();
}

impl Daemon {
    /// Starts `keel serve --bind 127.0.0.1:0` in `home` and waits for the address it prints.
    pub fn start(home: &Path) -> Daemon {
        Self::start_with(home, &[])
    }

    /// [`Daemon::start`] with more environment variables (e.g. a test hook).
    pub fn start_with(home: &Path, env: &[(&str, &str)]) -> Daemon {
        super::bound::arm();
        let mut child = keel(home)
            .envs(env.iter().copied())
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        super::bound::started(child.id());
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (found, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stdout.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(at) = line.find("http://") {
                    let _ = found.send(line[at..].trim().to_string());
                    break;
                }
                line.clear();
            }
            for _ in stdout.lines() {}
        });
        let url = address
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!(
                    "keel serve printed no address within 120 s; stderr:\n{}",
                    log.lock().unwrap()
                )
            });
        Daemon {
            child: Some(child),
            url,
            home: home.to_path_buf(),
            log,
        }
    }

    /// What it wrote on stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits (a few ms at a time) until its stderr holds `text`.
    pub fn until_logged(&self, text: &str) {
        for _ in 0..3000 {
            if self.log().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("keel serve never logged {text:?}; its log:\n{}", self.log());
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            super::bound::ended(child.id());
        }
    }

    /// Sends SIGTERM and waits for it to exit; returns its exit code. One that has not exited
    /// after 120 s is killed, and the test fails.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = super::bound::wait_until(&mut child, Duration::from_secs(120));
        super::bound::ended(child.id());
        let Some(status) = status else {
            panic!(
                "keel serve did not exit within 120 s of SIGTERM; its log:\n{}",
                self.log()
            );
        };
        status.code()
    }

    /// An async client with `key`.
    pub fn client(&self, key: &str) -> Api {
        keel_providers::install_crypto_provider();
        Api {
            // Every request is bounded, `?wait=true` and event streams included.
            http: reqwest::Client::builder()
                .timeout(super::bound::REQUEST_TIMEOUT)
                .build()
                .unwrap(),
            base: self.url.clone(),
            key: Some(key.to_string()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `keel keys create ARGS` in `home`: the key it printed.
pub fn make_key(home: &Path, args: &[&str]) -> String {
    let output = run(keel(home).args(["keys", "create"]).args(args));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output).trim().to_string()
}

/// The daemon's API, as a test calls it.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// The daemon's URL.
    pub base: String,
    key: Option<String>,
}

impl Api {
    /// The same client with another key (or none).
    pub fn with_key(&self, key: Option<&str>) -> Api {
        Api {
            key: key.map(str::to_string),
            ..self.clone()
        }
    }

    /// A request with the key.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// GET `path`: status and JSON body (`Value::Null` when not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        answer(self.request(reqwest::Method::GET, path)).await
    }

    /// POST `body` to `path`: status and JSON body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        answer(self.request(reqwest::Method::POST, path).json(&body)).await
    }

    /// A new conversation's id.
    pub async fn conversation(&self, policy: Option<&str>) -> String {
        let body = match policy {
            Some(policy) => json!({ "lane_policy": policy }),
            None => json!({}),
        };
        let (status, body) = self.post("/v1/conversations", body).await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    /// Sends `text` to `conversation`; the run id.
    pub async fn send(&self, conversation: &str, text: &str) -> String {
        let (status, body) = self
            .post(
                &format!("/v1/conversations/{conversation}/messages"),
                json!({ "text": text }),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body["run_id"].as_str().unwrap().to_string()
    }

    /// Waits (polling the run, a few ms apart) until `run_id` is in one of `states`.
    pub async fn until_state(&self, run_id: &str, states: &[&str]) -> Value {
        let mut last = Value::Null;
        for _ in 0..3000 {
            let (status, run) = self.get(&format!("/v1/runs/{run_id}")).await;
            if status == 200 && states.iter().any(|s| run["state"] == *s) {
                return run;
            }
            last = run;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {run_id} never reached {states:?}; it is {last}");
    }

    /// The SSE frames of `path` until the stream ends (`Last-Event-ID` when given):
    /// `(id, event, data)`, the end frame included.
    pub async fn sse(&self, path: &str, last_id: Option<&str>) -> Vec<(String, String, Value)> {
        self.sse_until(path, last_id, usize::MAX).await
    }

    /// The SSE frames of `path` up to the first event named `name` (included).
    pub async fn sse_until_event(&self, path: &str, name: &str) -> Vec<(String, String, Value)> {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let mut frames = response.bytes_stream().eventsource();
        let mut seen = Vec::new();
        while let Some(Ok(frame)) = frames.next().await {
            let data = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
            let found = frame.event == name;
            seen.push((frame.id, frame.event, data));
            if found {
                return seen;
            }
        }
        panic!("{path} ended before {name}: {seen:?}");
    }

    /// The first `count` SSE frames of `path` (or fewer, when it ends first).
    pub async fn sse_until(
        &self,
        path: &str,
        last_id: Option<&str>,
        count: usize,
    ) -> Vec<(String, String, Value)> {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;
        let mut request = self.request(reqwest::Method::GET, path);
        if let Some(id) = last_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let mut frames = response.bytes_stream().eventsource();
        let mut seen = Vec::new();
        while seen.len() < count {
            let Some(Ok(frame)) = frames.next().await else {
                break;
            };
            let data = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
            seen.push((frame.id, frame.event, data));
        }
        seen
    }
}

async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The output of a finished command, for assertion messages.
pub fn shown(output: &std::process::Output) -> String {
    format!("stdout: {}\nstderr: {}", stdout(output), stderr(output))
}
