//! Steering: messages the user sends while a run works join it before its next model call.
//! Calls of the batch not started yet are skipped with a result that says why, a call running
//! finishes; the messages are stored at that boundary, in order, and survive a crash; a run
//! about to finish, or cancelled at that boundary, leaves them to their source.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use keel_core::steering::SKIPPED_FOR_STEER;
use keel_core::{
    AgentState, ChatRequest, ChatResponse, DeltaSink, EventKind, Message, Provider, ProviderError,
    ResumeOptions, Role, RunRequest, SteerMessage, Steering, Store, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use support::{Appender, Guarded, agent_with};
use tokio_util::sync::CancellationToken;

/// A steering source the tests post to: what waits, what the run took, what it said joined.
#[derive(Default)]
struct Mailbox {
    waiting: Mutex<Vec<SteerMessage>>,
    taken: Mutex<Vec<String>>,
    joined: Mutex<Vec<String>>,
    /// Cancelled when the run takes its messages (a cancel racing the steer).
    cancel_on_take: Option<CancellationToken>,
}

impl Mailbox {
    fn post(&self, id: &str, text: &str) {
        self.waiting.lock().unwrap().push(SteerMessage {
            id: id.into(),
            text: text.into(),
            at: chrono::Utc::now(),
        });
    }

    fn waiting(&self) -> Vec<String> {
        let waiting = self.waiting.lock().unwrap();
        waiting.iter().map(|m| m.id.clone()).collect()
    }

    fn joined(&self) -> Vec<String> {
        self.joined.lock().unwrap().clone()
    }
}

#[async_trait]
impl Steering for Mailbox {
    fn pending(&self) -> bool {
        !self.waiting.lock().unwrap().is_empty()
    }

    async fn take(&self) -> Vec<SteerMessage> {
        let taken = std::mem::take(&mut *self.waiting.lock().unwrap());
        (self.taken.lock().unwrap()).extend(taken.iter().map(|m| m.id.clone()));
        if let Some(cancel) = &self.cancel_on_take {
            cancel.cancel();
        }
        taken
    }

    async fn joined(&self, taken: &[SteerMessage]) {
        (self.joined.lock().unwrap()).extend(taken.iter().map(|m| m.id.clone()));
    }
}

/// A side-effecting `post {text}` tool: records the text, then (when the text says so) the
/// user sends two messages while it still runs.
struct PostsSteer {
    mailbox: Arc<Mailbox>,
    ran: Arc<Mutex<Vec<String>>>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for PostsSteer {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let text = args["text"].as_str().unwrap_or("").to_string();
        self.ran.lock().unwrap().push(text.clone());
        if text == "first" {
            self.mailbox.post("q2", "actually, use the blue one");
            self.mailbox.post("q3", "and make it small");
        }
        Ok(ToolOutput::text(format!("posted {text}")))
    }
}

fn posts_steer(mailbox: &Arc<Mailbox>, ran: &Arc<Mutex<Vec<String>>>) -> Arc<dyn Tool> {
    Arc::new(PostsSteer {
        mailbox: mailbox.clone(),
        ran: ran.clone(),
        spec: ToolSpec::new("post", "posts text", json!({"type": "object"})),
    })
}

/// A provider that lets the user send a message while its `nth` call (1-based) is answered.
struct PostsDuringCall {
    inner: Arc<ScriptedProvider>,
    mailbox: Arc<Mailbox>,
    nth: usize,
    calls: AtomicUsize,
}

#[async_trait]
impl Provider for PostsDuringCall {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            self.mailbox.post("q2", "stop, do something else");
        }
        self.inner.chat(request, sink).await
    }
}

fn roles_and_texts<M: std::borrow::Borrow<Message>>(messages: &[M]) -> Vec<(Role, String)> {
    messages
        .iter()
        .map(|m| m.borrow())
        .filter(|m| m.role != Role::System)
        .map(|m| (m.role, m.content.clone()))
        .collect()
}

fn steered(mailbox: &Arc<Mailbox>) -> Option<Arc<dyn Steering>> {
    Some(mailbox.clone() as Arc<dyn Steering>)
}

#[tokio::test]
async fn calls_not_started_are_skipped_and_the_messages_come_before_the_next_model_call() {
    let mailbox = Arc::new(Mailbox::default());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("post", json!({"text": "first"}))
            .with_tool_call("post", json!({"text": "second"}))
            .with_tool_call("echo", json!({"text": "third"})),
        Step::text("blue and small it is"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(
        provider.clone(),
        store.clone(),
        vec![posts_steer(&mailbox, &ran), support::Echo::tool()],
    );
    let mut request = RunRequest::new("make me a widget");
    request.steering = steered(&mailbox);
    let report = agent.run(request).await.unwrap();

    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("blue and small it is"));
    // The call running when the user wrote finished; the others never started.
    assert_eq!(*ran.lock().unwrap(), ["first"]);
    let sent = &provider.requests()[1];
    let skipped = SKIPPED_FOR_STEER.to_string();
    let expected = vec![
        (Role::User, "make me a widget".to_string()),
        (Role::Assistant, String::new()),
        (Role::Tool, "posted first".to_string()),
        (Role::Tool, skipped.clone()),
        (Role::Tool, skipped.clone()),
        (Role::User, "actually, use the blue one".to_string()),
        (Role::User, "and make it small".to_string()),
    ];
    // Sent as one user turn (providers want turns to alternate), after the skipped results.
    let mut as_sent = expected[..5].to_vec();
    as_sent.push((
        Role::User,
        "actually, use the blue one\n\nand make it small".to_string(),
    ));
    assert_eq!(roles_and_texts(&sent.messages), as_sent);
    // Stored one by one, before the answer, and only then handed back as joined.
    let stored: Vec<Message> = store
        .messages(&report.session_id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message)
        .collect();
    let mut with_answer = expected.clone();
    with_answer.push((Role::Assistant, "blue and small it is".to_string()));
    assert_eq!(roles_and_texts(&stored), with_answer);
    assert!(stored[3].meta.failed, "a skipped call did not run");
    assert_eq!(mailbox.joined(), ["q2", "q3"]);
    let events = store.events(&report.run_id).await.unwrap();
    let steers: Vec<&EventKind> = events
        .iter()
        .map(|e| &e.kind)
        .filter(|k| k.name() == "agent.lane.steered")
        .collect();
    assert_eq!(
        steers,
        [&EventKind::LaneSteered {
            absorbed: vec!["q2".into(), "q3".into()]
        }]
    );
}

#[tokio::test]
async fn a_steer_before_the_batch_skips_all_of_it_and_asks_no_approval() {
    let mailbox = Arc::new(Mailbox::default());
    let appender = Appender::default();
    let scripted = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "danger zone"}))
            .with_tool_call("append", json!({"text": "plain"})),
        Step::text("ok, something else"),
    ]));
    let provider = Arc::new(PostsDuringCall {
        inner: scripted.clone(),
        mailbox: mailbox.clone(),
        nth: 1,
        calls: AtomicUsize::new(0),
    });
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(
        provider,
        store.clone(),
        vec![Arc::new(Guarded(appender.tool()))],
    );
    let mut request = RunRequest::new("go");
    request.steering = steered(&mailbox);
    let report = agent.run(request).await.unwrap();

    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert!(appender.lines().is_empty(), "nothing of the batch ran");
    assert!(
        report
            .tool_calls
            .iter()
            .all(|c| c.output == SKIPPED_FOR_STEER)
    );
    let texts = roles_and_texts(&scripted.requests()[1].messages);
    assert_eq!(
        texts.last(),
        Some(&(Role::User, "stop, do something else".to_string()))
    );
    assert_eq!(mailbox.joined(), ["q2"]);
}

#[tokio::test]
async fn a_steer_while_the_run_answers_waits_for_a_run_of_its_own() {
    let mailbox = Arc::new(Mailbox::default());
    let scripted = Arc::new(ScriptedProvider::from_steps(vec![Step::text("done")]));
    let provider = Arc::new(PostsDuringCall {
        inner: scripted.clone(),
        mailbox: mailbox.clone(),
        nth: 1,
        calls: AtomicUsize::new(0),
    });
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider, store.clone(), vec![]);
    let mut request = RunRequest::new("go");
    request.steering = steered(&mailbox);
    let report = agent.run(request).await.unwrap();

    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("done"));
    assert_eq!(scripted.requests().len(), 1, "no extra model call");
    assert_eq!(mailbox.waiting(), ["q2"], "still the source's");
    assert!(mailbox.taken.lock().unwrap().is_empty());
    let stored = store.messages(&report.session_id).await.unwrap();
    assert!(
        stored
            .iter()
            .all(|m| m.message.content != "stop, do something else")
    );
}

#[tokio::test]
async fn a_run_cancelled_as_it_takes_the_messages_leaves_them_to_their_source() {
    let cancel = CancellationToken::new();
    let mailbox = Arc::new(Mailbox {
        cancel_on_take: Some(cancel.clone()),
        ..Mailbox::default()
    });
    let ran = Arc::new(Mutex::new(Vec::new()));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("post", json!({"text": "first"})),
        Step::text("never asked"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider.clone(), store, vec![posts_steer(&mailbox, &ran)]);
    let mut request = RunRequest::new("go").cancel_token(cancel);
    request.steering = steered(&mailbox);
    let report = agent.run(request).await.unwrap();

    assert_eq!(report.state, AgentState::Cancelled);
    assert_eq!(provider.requests().len(), 1);
    assert_eq!(*mailbox.taken.lock().unwrap(), ["q2", "q3"]);
    assert!(
        mailbox.joined().is_empty(),
        "not joined: the source keeps them"
    );
}

/// A provider whose `nth` call (1-based) never answers: the worker dies in it.
struct HangsOnCall {
    inner: Arc<ScriptedProvider>,
    nth: usize,
    calls: AtomicUsize,
    entered: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Provider for HangsOnCall {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
        self.inner.chat(request, sink).await
    }
}

#[tokio::test]
async fn a_steered_message_stored_before_a_crash_is_sent_by_the_resumed_run() {
    let mailbox = Arc::new(Mailbox::default());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let entered = Arc::new(tokio::sync::Notify::new());
    let first = Arc::new(HangsOnCall {
        inner: Arc::new(ScriptedProvider::from_steps(vec![Step::tool_call(
            "post",
            json!({"text": "first"}),
        )])),
        nth: 2,
        calls: AtomicUsize::new(0),
        entered: entered.clone(),
    });
    let store = Arc::new(MemoryStore::new());
    let tools = vec![posts_steer(&mailbox, &ran)];
    let agent = Arc::new(agent_with(first, store.clone(), tools.clone()));
    let mut request = RunRequest::new("go");
    request.run_id = Some("r1".into());
    request.steering = steered(&mailbox);
    let task = tokio::spawn({
        let agent = agent.clone();
        async move { agent.run(request).await }
    });
    // The worker dies in the model call after the steer's boundary.
    entered.notified().await;
    task.abort();
    let _ = task.await;
    assert_eq!(mailbox.joined(), ["q2", "q3"]);

    let second = Arc::new(ScriptedProvider::from_steps(vec![Step::text(
        "blue, small",
    )]));
    let resumer = agent_with(second.clone(), store.clone(), tools);
    let options = ResumeOptions {
        force: true,
        ..ResumeOptions::default()
    };
    let report = resumer.resume("r1", options).await.unwrap();

    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert_eq!(*ran.lock().unwrap(), ["first"], "nothing ran twice");
    let sent = roles_and_texts(&second.requests()[0].messages);
    assert_eq!(
        sent.last(),
        Some(&(
            Role::User,
            "actually, use the blue one\n\nand make it small".to_string()
        ))
    );
    let stored = store.messages(&report.session_id).await.unwrap();
    let once = |text: &str| stored.iter().filter(|m| m.message.content == text).count();
    assert_eq!(once("actually, use the blue one"), 1);
    assert_eq!(once("and make it small"), 1);
}
