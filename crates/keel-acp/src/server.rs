//! The ACP agent: `initialize`, `session/new`, `session/prompt` and `session/cancel` over a
//! transport (stdio for `keel acp`). Prompts run in tasks of their own, so the connection
//! keeps reading (a cancel, a permission answer) while a run works.

use std::sync::Arc;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, Implementation, InitializeRequest, InitializeResponse,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ConnectTo, Error};

use crate::content::prompt_text;
use crate::factory::AgentFactory;
use crate::session::{AcpSession, SessionRegistry};

/// What every handler shares: the binary's factory and the open sessions.
#[derive(Clone)]
pub struct AcpState {
    /// Builds agents, claims lanes, holds the store.
    pub factory: Arc<dyn AgentFactory>,
    /// The open sessions.
    pub sessions: Arc<SessionRegistry>,
}

impl AcpState {
    /// The state of a new connection.
    pub fn new(factory: Arc<dyn AgentFactory>) -> Self {
        AcpState {
            factory,
            sessions: Arc::new(SessionRegistry::new()),
        }
    }
}

/// The agent's answer to `initialize`: protocol v1, sessions can be loaded, prompts take text
/// and embedded context (no images or audio), and keel's name and version.
pub fn initialize_response() -> InitializeResponse {
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(
            PromptCapabilities::new()
                .embedded_context(true)
                .image(false)
                .audio(false),
        );
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("keel", env!("CARGO_PKG_VERSION")).title("keel"))
}

/// Serves ACP over stdin and stdout until the editor closes stdin.
pub async fn serve_stdio(factory: Arc<dyn AgentFactory>) -> Result<(), Error> {
    serve(AcpState::new(factory), agent_client_protocol::Stdio::new()).await
}

/// Serves ACP over `transport` with `state` until the other side closes it.
pub async fn serve(
    state: AcpState,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), Error> {
    agent(state).connect_to(transport).await
}

/// The ACP agent with `state`: every handler registered, not yet connected (a client may
/// connect to it in process, as keel-acp's tests do).
pub fn agent(state: AcpState) -> impl ConnectTo<Client> + 'static {
    let new_state = state.clone();
    let prompt_state = state.clone();
    let load_state = state.clone();
    let cancel_state = state;
    Agent
        .v1()
        .name("keel")
        .on_receive_request(
            async move |_request: InitializeRequest,
                        responder: Responder<InitializeResponse>,
                        _cx: ConnectionTo<Client>| {
                responder.respond(initialize_response())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        cx: ConnectionTo<Client>| {
                match new_session(&new_state, request, cx).await {
                    Ok(response) => responder.respond(response),
                    Err(error) => responder.respond_with_error(error),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest,
                        responder: Responder<PromptResponse>,
                        cx: ConnectionTo<Client>| {
                start_prompt(&prompt_state, request, responder, &cx)
            },
            agent_client_protocol::on_receive_request!(),
        )
        // session/load: see crate::load.
        .on_receive_request(
            async move |request: crate::load::LoadSessionRequest,
                        responder: Responder<crate::load::LoadSessionResponse>,
                        cx: ConnectionTo<Client>| {
                crate::load::load_session(&load_state, request, responder, cx).await
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx: ConnectionTo<Client>| {
                if let Some(session) = cancel_state.sessions.get(&notification.session_id.0) {
                    session.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
}

/// `session/new`: a new keel conversation (a uuid v7 id) working in the request's `cwd`.
/// The client's `mcpServers` are not started (keel's own MCP configuration applies).
async fn new_session(
    state: &AcpState,
    request: NewSessionRequest,
    cx: ConnectionTo<Client>,
) -> Result<NewSessionResponse, Error> {
    let session_id = uuid::Uuid::now_v7().to_string();
    let session = AcpSession::open(state.factory.as_ref(), cx, &session_id, &request.cwd)?;
    let store = state.factory.store();
    let stored = async {
        store.ensure_session(&session_id).await?;
        if let Some(user) = &session.user {
            store.adopt_session(&session_id, user).await?;
        }
        Ok::<_, keel_core::StoreError>(())
    };
    stored
        .await
        .map_err(|e| Error::internal_error().data(e.to_string()))?;
    if !request.mcp_servers.is_empty() {
        tracing::info!(
            count = request.mcp_servers.len(),
            "the editor's MCP servers are not used: keel's own [mcp] configuration applies"
        );
    }
    state.sessions.insert(session)?;
    Ok(NewSessionResponse::new(session_id))
}

/// `session/prompt`: refused at once for an unknown session, a prompt while one runs, or a
/// prompt keel does not take; else the run goes on in a task of its own and answers there.
fn start_prompt(
    state: &AcpState,
    request: PromptRequest,
    responder: Responder<PromptResponse>,
    cx: &ConnectionTo<Client>,
) -> Result<(), Error> {
    let session = match state.sessions.find(&request.session_id.0) {
        Ok(session) => session,
        Err(error) => return responder.respond_with_error(error),
    };
    let text = match prompt_text(&request.prompt) {
        Ok(text) => text,
        Err(why) => {
            return responder.respond_with_error(Error::invalid_params().data(why.to_string()));
        }
    };
    let turn = match session.start_turn() {
        Ok(turn) => turn,
        Err(error) => return responder.respond_with_error(error),
    };
    let factory = state.factory.clone();
    cx.spawn(async move {
        match session.prompt(factory.as_ref(), turn, text).await {
            Ok(response) => responder.respond(response),
            Err(error) => responder.respond_with_error(error),
        }
    })
}
