//! keel serve's OpenAI routes in process on a loopback port, over the in-memory store and an
//! engine on a scripted model (with a `shell` tool whose every call asks for approval), and a
//! plain HTTP client that reads answers and streams as an OpenAI client would.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use keel_core::{Agent, ApprovalNeed, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_mock::{Script, ScriptedProvider};
use keel_openai::OpenAiOptions;
use keel_platform::PlatformStore;
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_server::keys::new_key;
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// `shell {command}`: every call needs approval; what ran is kept.
#[derive(Default)]
pub struct Shell {
    /// The commands run, in order.
    pub ran: Mutex<Vec<String>>,
    /// Whether each ran for an untrusted source, in order.
    pub untrusted: Mutex<Vec<bool>>,
}

static SHELL_SPEC: std::sync::LazyLock<ToolSpec> = std::sync::LazyLock::new(|| {
    ToolSpec::new(
        "shell",
        "runs a command",
        json!({"type": "object", "properties": {"command": {"type": "string"}},
               "required": ["command"]}),
    )
});

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &SHELL_SPEC
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.untrusted.lock().unwrap().push(ctx.untrusted_source);
        let command = args["command"].as_str().unwrap_or_default().to_string();
        self.ran.lock().unwrap().push(command.clone());
        Ok(ToolOutput::text(format!("ran {command}")))
    }
    fn approval(&self, args: &Value) -> Option<ApprovalNeed> {
        Some(ApprovalNeed {
            reason: "every command asks".into(),
            pattern: args["command"].as_str()?.into(),
        })
    }
}

/// The daemon: its address, state, store, scripted model and tool.
pub struct Daemon {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its state.
    pub state: AppState,
    /// Its store.
    pub store: Arc<MemoryStore>,
    /// The model.
    pub provider: Arc<ScriptedProvider>,
    /// The `shell` tool.
    pub shell: Arc<Shell>,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Daemon {
    /// A daemon whose model follows `script`, with the default options.
    pub async fn start(script: Script) -> Daemon {
        Daemon::start_with(script, OpenAiOptions::default(), 64 * 1024).await
    }

    /// A daemon whose model follows `script`, each lane holding at most `queue_limit` queued
    /// runs.
    pub async fn with_queue_limit(script: Script, queue_limit: usize) -> Daemon {
        let engine = EngineOptions {
            queue_limit,
            ..EngineOptions::default()
        };
        Daemon::start_full(script, OpenAiOptions::default(), 64 * 1024, engine).await
    }

    /// A daemon whose model follows `script`, its OpenAI routes behaving as `options` say,
    /// taking bodies of at most `max_request_bytes`.
    pub async fn start_with(
        script: Script,
        options: OpenAiOptions,
        max_request_bytes: usize,
    ) -> Daemon {
        Daemon::start_full(script, options, max_request_bytes, EngineOptions::default()).await
    }

    /// [`Daemon::start_with`], the engine as `engine` says (its model is always `m`).
    pub async fn start_full(
        script: Script,
        options: OpenAiOptions,
        max_request_bytes: usize,
        engine: EngineOptions,
    ) -> Daemon {
        let store = Arc::new(MemoryStore::new());
        let hub = Arc::new(Hub::new(store.clone()));
        let engine_options = EngineOptions {
            model: "m".into(),
            ..engine
        };
        let engine = Engine::new(store.clone(), hub.clone(), engine_options);
        let provider = Arc::new(ScriptedProvider::new(script));
        let shell = Arc::new(Shell::default());
        let agent = Agent::builder()
            .store(store.clone())
            .event_sink(hub.clone())
            .event_sink(engine.sink())
            .provider(provider.clone())
            .tool(shell.clone())
            .stream(true)
            .human_reachable(true)
            .model("m")
            .build()
            .unwrap();
        engine.start(Arc::new(agent)).await.unwrap();
        let state = AppState {
            store: store.clone(),
            engine,
            hub,
            max_request_bytes,
            inbox: Arc::new(keel_platform::Inbox::new(
                store.clone(),
                keel_platform::InboxSettings::default(),
            )),
            modules: Vec::new().into(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(keel_server::serve::serve_with(
            listener,
            state.clone(),
            keel_openai::routes_with(state.clone(), options),
            keel_server::ConnectionLimits::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        let _ = rustls::crypto::ring::default_provider().install_default();
        Daemon {
            base,
            state,
            store,
            provider,
            shell,
            http: reqwest::Client::new(),
            stop: Some(stop),
        }
    }

    /// A new key for `user`, stored; the key.
    pub async fn key(&self, user: &str) -> String {
        let now = Utc::now();
        let record = keel_core::UserRecord {
            id: user.to_string(),
            monthly_token_budget: None,
            created_at: now,
            updated_at: now,
            permission: keel_core::tool::Permission::User,
        };
        keel_core::Store::save_user(self.store.as_ref(), &record)
            .await
            .unwrap();
        let made = new_key(Some(user.to_string()), false, Vec::new(), Utc::now()).unwrap();
        self.store.save_api_key(&made.record).await.unwrap();
        made.key
    }

    /// A request to `path` with `key`.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `POST /v1/chat/completions` with `body` (and `headers`): the status, the headers and
    /// the body (JSON, or the stream's `data:` payloads as a JSON array of chunks, `[DONE]`
    /// as the string).
    pub async fn chat(&self, key: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
        let mut request = self
            .request(reqwest::Method::POST, "/v1/chat/completions", Some(key))
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Answer::read(request.send().await.unwrap()).await
    }
}

/// An answer as a client reads it.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`, if sent.
    pub retry_after: Option<String>,
    /// The JSON body, or the stream's chunks (then `[DONE]` is the last, as a string).
    pub body: Value,
}

impl Answer {
    /// Reads a response whole.
    pub async fn read(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let streamed = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        let text = response.text().await.unwrap();
        let body = if streamed {
            Value::Array(chunks(&text))
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            retry_after,
            body,
        }
    }

    /// The whole answer's content.
    pub fn content(&self) -> String {
        self.body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// A streamed answer's content, its chunks' deltas joined.
    pub fn streamed(&self) -> String {
        self.deltas("content")
    }

    /// A streamed answer's `delta.<field>`s joined.
    pub fn deltas(&self, field: &str) -> String {
        self.body
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][field].as_str())
            .collect()
    }

    /// The run id the answer's id names.
    pub fn run_id(&self) -> String {
        let id = match &self.body {
            Value::Array(chunks) => chunks[0]["id"].as_str().unwrap().to_string(),
            body => body["id"].as_str().unwrap().to_string(),
        };
        id.strip_prefix("chatcmpl-").unwrap().to_string()
    }
}

/// The `data:` payloads of an SSE text, as JSON (or the string `[DONE]`).
pub fn chunks(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| {
            line.strip_prefix("data: ")
                .or_else(|| line.strip_prefix("data:"))
        })
        .map(|data| serde_json::from_str(data.trim()).unwrap_or(Value::String(data.trim().into())))
        .collect()
}

/// A chat body for `model` with `messages` given as (role, text).
pub fn body(model: &str, messages: &[(&str, &str)]) -> Value {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    json!({"model": model, "messages": messages})
}
