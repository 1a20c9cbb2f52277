//! keel-acp: `keel acp`, keel as an Agent Client Protocol agent over stdio. An editor (Zed,
//! JetBrains, Neovim) starts it, opens sessions and sends prompts; each prompt is a durable keel
//! run whose events stream back as session updates and whose approvals are the editor's
//! permission requests.
//!
//! The parts: [`server`] (the handlers: `initialize`, `session/new`, `session/prompt`,
//! `session/cancel`), [`session`] (the [`SessionRegistry`] of open [`AcpSession`]s), [`turn`]
//! (one prompt = one durable run), [`updates`] (events → `session/update`), [`human`]
//! (approvals → `session/request_permission`), [`content`] (prompt blocks → text) and
//! [`factory`] (the [`AgentFactory`] the binary implements: agents, lanes, the store).

pub mod content;
pub mod factory;
pub mod human;
pub mod load;
pub mod replay;
pub mod server;
pub mod session;
pub mod turn;
pub mod updates;

pub use factory::{AgentFactory, AgentSpec, BuiltAgent, LaneGrant};
pub use server::{AcpState, agent, initialize_response, serve, serve_stdio};
pub use session::{AcpSession, SessionRegistry, Waiting};
