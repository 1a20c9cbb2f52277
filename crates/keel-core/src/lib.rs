//! keel-core owns the agent loop and everything it decides: the message format, the `Provider`,
//! `Tool` and `Store` traits, the tool registry, events, run states, and the run state machine
//! with its async driver.
//!
//! It must not depend on any other keel crate, and does no HTTP, no SQL and no filesystem work:
//! adapters, stores and tools implement the traits defined here, and only the `keel` binary and
//! `keel-server` put the pieces together.

pub mod agent;
pub mod agent_tools;
pub mod approval;
pub mod budget;
pub mod checkpoint;
pub mod child_run;
pub mod clock;
pub mod context;
pub mod context_strategy;
pub mod driver;
pub mod event;
pub mod extension;
pub mod files;
pub mod fixup;
pub mod heartbeat;
pub mod human;
pub mod journal;
pub mod lane;
pub mod loop_guard;
pub mod message;
pub mod place;
pub mod prompt_parts;
pub mod provider;
pub mod provider_error;
pub mod reach;
pub mod reconcile;
pub mod recovery;
pub mod redact;
pub mod registry;
pub mod run;
pub mod run_options;
pub mod run_settings;
pub mod session_kind;
pub mod state;
pub mod steering;
pub mod store;
pub mod timestamp;
pub mod token_log;
pub mod tokens;
pub mod tool;
pub mod tool_exec;
pub mod tool_source;
pub mod worker;

pub use agent::{
    Agent, AgentBuilder, AgentError, BetweenTurns, BetweenTurnsReport, ContinueOptions,
    ResumeOptions, RunReport, RunRequest, UnsafeCall,
};
pub use approval::{ApprovalDecision, ApprovalNeed, PendingApproval};
pub use checkpoint::{Boundary, Checkpoint, ToolCallRecord};
pub use clock::{Clock, SystemClock};
pub use event::{
    Emitter, Event, EventKind, EventLog, EventSink, HookEvent, HookOutcome, ModelReasoning,
    ParsedToolCall, RunStatus, StatusChange, StepSummary,
};
pub use human::{HumanChannel, Question};
pub use journal::Journal;
pub use lane::{LaneClaim, LaneHolder, LaneOutcome, LanePolicy};
pub use message::{
    InternalReason, Message, MessageMeta, Reasoning, Role, SeqRange, TokenCount, ToolCall,
};
pub use provider::{
    ChatRequest, ChatResponse, DeltaSink, NoDeltas, Provider, StopReason, StreamDelta, ToolChoice,
    Usage,
};
pub use provider_error::{ProviderError, ProviderErrorKind};
pub use registry::{PreparedCall, RegistryError, ToolRegistry};
pub use run::{ModelCall, Run, Step, ToolCallReport, ToolResult};
pub use run_options::{PlatformPlace, RunOptions};
pub use run_settings::{ModelTarget, RunSettings};
pub use session_kind::SessionKind;
pub use state::{AgentState, ErrorReason};
pub use steering::{SteerMessage, Steering};
pub use store::{RunRecord, SessionInfo, Store, StoreError, StoredMessage, UserRecord};
pub use token_log::TokenCharge;
pub use tool::{
    Permission, Reach, Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput, ToolSpec,
};
pub use tool_source::ToolSource;
