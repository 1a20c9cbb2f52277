//! A real `keel serve`-like daemon for the console's tests: the API and the console served on
//! a loopback port over the in-memory store, an engine on a scripted model, and a browser-like
//! client that keeps the console's cookies by hand (so each test can read their flags).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use keel_core::clock::Clock;
use keel_core::{Agent, Store};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::PlatformStore;
use keel_server::AppState;
use keel_server::engine::{Engine, EngineOptions};
use keel_server::hub::Hub;
use keel_server::keys::new_key;
use keel_store::MemoryStore;
use reqwest::header::{HeaderMap, HeaderValue};

/// A clock a test moves by hand.
pub struct TestClock(Mutex<DateTime<Utc>>);

impl TestClock {
    /// Moves it on by `by`.
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap();
        *now += by;
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// The daemon: its address, store, state and clock.
pub struct Daemon {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its store.
    pub store: Arc<MemoryStore>,
    /// Its state.
    pub state: AppState,
    /// The console's clock.
    pub clock: Arc<TestClock>,
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
    /// A daemon whose model answers "ok" to every turn.
    pub async fn start() -> Daemon {
        Daemon::with_script(Script::new(vec![Step::text("ok")]).with_per_turn()).await
    }

    /// A daemon whose model follows `script`.
    pub async fn with_script(script: Script) -> Daemon {
        let store = Arc::new(MemoryStore::new());
        let hub = Arc::new(Hub::new(store.clone()));
        let engine = Engine::new(store.clone(), hub.clone(), EngineOptions::default());
        let agent = Agent::builder()
            .store(store.clone())
            .event_sink(hub.clone())
            .event_sink(engine.sink())
            .provider(Arc::new(ScriptedProvider::new(script)))
            .model("m")
            .build()
            .unwrap();
        engine.start(Arc::new(agent)).await.unwrap();
        let state = AppState {
            store: store.clone(),
            engine,
            hub,
            max_request_bytes: 64 * 1024,
            inbox: Arc::new(keel_platform::Inbox::new(
                store.clone(),
                keel_platform::InboxSettings::default(),
            )),
            modules: Vec::new().into(),
        };
        let clock = Arc::new(TestClock(Mutex::new(Utc::now())));
        let console = keel_console::routes_with(
            state.clone(),
            keel_console::ConsoleOptions {
                session_lifetime: TimeDelta::hours(1),
                max_sessions: 100,
                clock: clock.clone(),
                channels: Vec::new(),
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(keel_server::serve::serve_with(
            listener,
            state.clone(),
            console,
            keel_server::ConnectionLimits::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Daemon {
            base,
            store,
            state,
            clock,
            stop: Some(stop),
        }
    }

    /// A new key for `user` (admin when `admin`), stored; the key.
    pub async fn key(&self, user: Option<&str>, admin: bool) -> String {
        let made = new_key(user.map(str::to_string), admin, Vec::new(), Utc::now()).unwrap();
        self.store.save_api_key(&made.record).await.unwrap();
        made.key
    }

    /// The id of the key `key`.
    pub async fn key_id(&self, key: &str) -> String {
        self.store
            .api_key_by_hash(&keel_server::keys::hash_key(key))
            .await
            .unwrap()
            .unwrap()
            .id
    }

    /// A browser on this daemon, signed in with nothing yet.
    pub fn browser(&self) -> Browser {
        // reqwest is built without a TLS provider of its own (the workspace's choice).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Browser {
            base: self.base.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Vec::new(),
        }
    }

    /// The store, as the kernel's.
    pub fn kernel(&self) -> &dyn Store {
        self.store.as_ref()
    }
}

/// An answer: status, headers, body.
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: String,
}

impl Page {
    /// The `Location` header.
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The `Set-Cookie` lines.
    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    /// The value of the first form field named `name`.
    pub fn field(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&marker)? + marker.len();
        let end = self.body[start..].find('"')?;
        Some(self.body[start..start + end].to_string())
    }
}

/// A client that keeps cookies by name, as a browser would for this one site.
pub struct Browser {
    base: String,
    http: reqwest::Client,
    /// The cookies held: name and value.
    pub cookies: Vec<(String, String)>,
}

impl Browser {
    /// GET `path`.
    pub async fn get(&mut self, path: &str) -> Page {
        self.get_with(path, &[]).await
    }

    /// GET `path` with `extra` headers.
    pub async fn get_with(&mut self, path: &str, extra: &[(&'static str, &str)]) -> Page {
        let mut request = self.http.get(format!("{}{path}", self.base));
        for (name, value) in extra {
            request = request.header(*name, HeaderValue::from_str(value).unwrap());
        }
        self.send(request).await
    }

    /// POST the form `fields` to `path`, with `extra` headers.
    pub async fn post(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        extra: &[(&'static str, &str)],
    ) -> Page {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(fields).unwrap());
        for (name, value) in extra {
            request = request.header(*name, HeaderValue::from_str(value).unwrap());
        }
        self.send(request).await
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let cookie_line = self
            .cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ");
        let request = if cookie_line.is_empty() {
            request
        } else {
            request.header("cookie", cookie_line)
        };
        let response = request.send().await.unwrap();
        let page = Page {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: String::new(),
        };
        let body = response.text().await.unwrap();
        let page = Page { body, ..page };
        for line in page.set_cookies() {
            let pair = line.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(held, _)| held != name);
            let removed = line.contains("Max-Age=0") || value.is_empty();
            if !removed {
                self.cookies.push((name.to_string(), value.to_string()));
            }
        }
        page
    }

    /// Signs in with `key` through the sign-in form; the answer to the form's POST.
    pub async fn sign_in(&mut self, key: &str) -> Page {
        let form = self.get("/sign-in").await;
        let token = form
            .field("csrf")
            .expect("the sign-in form carries a token");
        self.post(
            "/sign-in",
            &[("csrf", &token), ("key", key), ("next", "/")],
            &[],
        )
        .await
    }

    /// The CSRF token of the signed-in session, read from a page's sign-out form.
    pub async fn csrf(&mut self) -> String {
        self.get("/").await.field("csrf").expect("a signed-in page")
    }
}

/// A conversation stored for `owner` (on `platform` when given), whose first message is
/// `title`; its id.
pub async fn conversation(
    daemon: &Daemon,
    id: &str,
    owner: Option<&str>,
    platform: Option<&str>,
    title: &str,
) -> String {
    use keel_platform::{ConversationStore, NewConversation};
    daemon
        .store
        .create_conversation(&NewConversation {
            id: id.to_string(),
            owner: owner.map(str::to_string),
            lane_policy: keel_core::LanePolicy::Queue,
            at: Utc::now(),
            place: platform.map(|platform| keel_core::PlatformPlace {
                platform: platform.to_string(),
                channel_id: "c1".to_string(),
                thread_id: None,
                server_id: None,
            }),
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap();
    daemon
        .store
        .append_messages(id, None, &[keel_core::Message::user(title)])
        .await
        .unwrap();
    id.to_string()
}

/// A run of `conversation` stored in `state`, started `age` ago, with `tokens` output tokens.
pub async fn run(
    daemon: &Daemon,
    id: &str,
    conversation: &str,
    state: keel_core::AgentState,
    age: TimeDelta,
    tokens: u64,
) {
    let started = Utc::now() - age;
    let run = keel_core::RunRecord {
        id: id.to_string(),
        session_id: conversation.to_string(),
        state,
        reason: None,
        provider: "mock".to_string(),
        model: "m-asked".to_string(),
        model_used: Some("m-used".to_string()),
        iterations: 3,
        usage: keel_core::Usage {
            input_tokens: 0,
            output_tokens: tokens,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
        final_text: None,
        error: None,
        started_at: started,
        updated_at: started,
        finished_at: state.is_terminal().then_some(started),
        cost: 0.5,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    };
    daemon.store.save_run(&run, &[]).await.unwrap();
}
