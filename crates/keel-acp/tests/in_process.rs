//! keel-acp in process: the SDK's client connected to [`keel_acp::agent`] with a factory that
//! builds agents on the scripted model and the memory store. How each way a run ends becomes
//! the prompt's stop reason (and what the editor is told), and a whole (not streamed) answer
//! arriving once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification,
    StopReason, TextContent,
};
use agent_client_protocol::{Agent, Client, Error};
use keel_acp::{AcpState, AgentFactory, AgentSpec, BuiltAgent, LaneGrant};
use keel_core::{RunReport, Store};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Agents on the scripted model: `steps` for the session's model, `max_iterations` and
/// `stream` as given.
struct Scripted {
    store: Arc<MemoryStore>,
    steps: Mutex<Option<Vec<Step>>>,
    max_iterations: u32,
    stream: bool,
    token_budget: Option<u64>,
}

#[async_trait::async_trait]
impl AgentFactory for Scripted {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn build(&self, spec: AgentSpec) -> Result<BuiltAgent, String> {
        let steps = self.steps.lock().unwrap().take().unwrap_or_default();
        let agent = keel_core::Agent::builder()
            .provider(Arc::new(ScriptedProvider::from_steps(steps)))
            .model("m")
            .store(self.store.clone())
            .event_sink(spec.sink)
            .human(spec.human)
            .max_iterations(self.max_iterations)
            .stream(self.stream)
            .budgets(keel_core::budget::Budgets {
                token_budget: self.token_budget,
                ..Default::default()
            })
            .build()
            .map_err(|e| e.to_string())?;
        Ok(BuiltAgent {
            agent: Arc::new(agent),
            user: None,
        })
    }

    async fn claim_lane(
        &self,
        _session_id: &str,
        _run_id: &str,
        _cancel: &CancellationToken,
    ) -> Result<LaneGrant, String> {
        Ok(LaneGrant::Claimed)
    }

    async fn release_lane(
        &self,
        _session_id: &str,
        _run_id: &str,
        _report: Option<&RunReport>,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// One prompt "go" in a new session: its stop reason and every update, as JSON.
async fn one_prompt(
    steps: Vec<Step>,
    max_iterations: u32,
    stream: bool,
) -> (StopReason, Vec<Value>) {
    prompt_with(Scripted {
        store: Arc::new(MemoryStore::new()),
        steps: Mutex::new(Some(steps)),
        max_iterations,
        stream,
        token_budget: None,
    })
    .await
}

/// One prompt "go" in a new session of `factory`'s agents.
async fn prompt_with(factory: Scripted) -> (StopReason, Vec<Value>) {
    let factory = Arc::new(factory);
    let updates = Arc::new(Mutex::new(Vec::new()));
    let seen = updates.clone();
    let cwd = std::env::temp_dir();
    let done = Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx: ConnectionTo<Agent>| {
                seen.lock()
                    .unwrap()
                    .push(serde_json::to_value(&notification.update).unwrap());
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(
            keel_acp::agent(AcpState::new(factory)),
            async move |cx: ConnectionTo<Agent>| -> Result<StopReason, Error> {
                cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                let session = cx
                    .send_request(NewSessionRequest::new(cwd))
                    .block_task()
                    .await?
                    .session_id;
                let prompt = vec![ContentBlock::Text(TextContent::new("go"))];
                Ok(cx
                    .send_request(PromptRequest::new(session, prompt))
                    .block_task()
                    .await?
                    .stop_reason)
            },
        );
    let stop = tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("the prompt took over 60 s")
        .expect("the connection failed");
    let updates = updates.lock().unwrap().clone();
    (stop, updates)
}

fn said(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_arrives_once_and_ends_the_turn() {
    let (stop, updates) = one_prompt(vec![Step::text("All done.")], 10, false).await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(said(&updates), "All done.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_iterations_is_max_turn_requests() {
    let steps = vec![
        Step::tool_call("nothing_here", json!({})),
        Step::tool_call("nothing_here", json!({"again": true})),
        Step::text("never reached"),
    ];
    let (stop, updates) = one_prompt(steps, 1, true).await;
    assert_eq!(stop, StopReason::MaxTurnRequests, "{updates:#?}");
    assert!(!said(&updates).contains("never reached"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_ends_the_turn_saying_why() {
    let (stop, updates) = one_prompt(vec![Step::error(400)], 10, true).await;
    assert_eq!(stop, StopReason::EndTurn);
    let said = said(&updates);
    assert!(said.contains("keel: the run ended as error"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_tokens_is_max_tokens() {
    let (stop, updates) = prompt_with(Scripted {
        store: Arc::new(MemoryStore::new()),
        steps: Mutex::new(Some(vec![
            Step::tool_call("nothing_here", json!({})).with_usage(100, 100),
            Step::text("never reached"),
        ])),
        max_iterations: 10,
        stream: true,
        token_budget: Some(10),
    })
    .await;
    assert_eq!(stop, StopReason::MaxTokens, "{updates:#?}");
    assert!(!said(&updates).contains("never reached"));
}
