//! The command line: every subcommand and flag of `keel`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::cli_admin::*;
pub use crate::cli_testkit::*;

/// keel — a resilient agent-loop runtime.
///
/// Every subcommand is listed below; `keel help COMMAND` tells more about one.
///
/// Traces (OpenTelemetry spans over OTLP/HTTP) are off until `[telemetry] otlp_endpoint` in
/// keel.toml, or `OTEL_EXPORTER_OTLP_ENDPOINT`, names a collector (e.g.
/// http://localhost:4318); message content goes into them only with `[telemetry]
/// record_content = true`.
// The about is this comment, not the crate's description: clap lists the subcommands itself,
// from `Command`, so the help never names a stale subset of them.
#[derive(Debug, Parser)]
#[command(name = "keel", version, propagate_version = true)]
pub struct Cli {
    /// Configuration file (default: $KEEL_HOME/keel.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// A broken configuration file is an error (exit 2), never replaced by its last good copy.
    #[arg(long, global = true)]
    pub strict_config: bool,

    /// Keep keel's state in this PostgreSQL database (postgres://user@host:5432/keel) instead
    /// of the SQLite file $KEEL_HOME/keel.db: any number of `keel serve` workers share it, and
    /// every command reads the same runs (default: `[store] url` of keel.toml).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "KEEL_DATABASE_URL",
        hide_env_values = true
    )]
    pub database: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one turn: send PROMPT, let the model use tools, print the answer.
    Run(RunArgs),
    /// An interactive session with line editing and history (/new, /exit).
    Chat(ChatArgs),
    /// List stored sessions, or print one's transcript.
    Sessions(SessionsArgs),
    /// List runs, show one (checkpoints, tool envelope, events), or cancel one.
    Runs(RunsArgs),
    /// Resume a run whose worker died, or one halted for a decision.
    Resume(ResumeArgs),
    /// Answer the question a run is waiting on, and let it go on.
    Answer(AnswerArgs),
    /// Decide about the tool call a run waits to have approved (once, session or deny).
    Approve(ApproveArgs),
    /// List users with their monthly token budget and this month's usage, or set a budget.
    Users(UsersArgs),
    /// A built-in scripted scenario on the in-process mock model; needs no key and no network.
    Demo,
    /// Serve a scripted model over HTTP (chat-completions, Responses and Anthropic Messages).
    MockProvider(MockProviderArgs),
    /// Run many concurrent conversations against the scripted model and report the loop's own
    /// overhead per iteration, wall time against the ideal, throughput and memory.
    Bench(BenchArgs),
    /// The daemon: serve conversations and runs over an HTTP API with live events, a web
    /// console at `/` (sign in with an API key from `keel keys create`), and Prometheus
    /// metrics at `/metrics` (an admin key; `[telemetry] metrics_bind` serves them on an
    /// address of their own without one). Channels (Telegram, Slack, Discord, email,
    /// webhooks) are off until `keel.toml` has a `[channels.telegram]` (…`slack`, `discord`,
    /// `email`) or `[[webhooks]]` table. It also speaks the OpenAI API
    /// (`/v1/chat/completions`, `/v1/responses`, `/v1/models`; base URL `http://ADDR/v1`, a
    /// user's key as the API key), so OpenAI clients and chat front-ends drive durable keel
    /// runs.
    Serve(ServeArgs),
    /// Channels of `keel serve` (`[channels.NAME]`, `[[webhooks]]`; off until configured):
    /// status.
    Channels(ChannelsArgs),
    /// The daemon's API keys: create (shown once), list, revoke.
    Keys(KeysArgs),
    /// Schedules of `keel serve`: messages that enter a conversation later (once, every
    /// interval, cron): list, add, show, pause, resume, rm.
    Schedules(SchedulesArgs),
    /// What the token log holds for a month: calls, tokens and dollars per user and model.
    Usage(UsageArgs),
    /// Personas: the system prompt and model settings per platform and server (add, set, list).
    Personas(PersonasArgs),
    /// MCP servers: start each configured one and list its state and tools.
    Mcp(crate::commands::mcp::McpArgs),
    /// Skills: list the SKILL.md directories keel reads, and the ones it skipped.
    Skills(crate::commands::skills::SkillsArgs),
    /// Known facts keel remembers about a user (`[memory] facts = true`): list, rm.
    Facts(crate::commands::facts::FactsArgs),
    /// Serve the Agent Client Protocol over stdio, for editors (Zed, JetBrains, Neovim): each
    /// session is a keel conversation working in the editor's directory, each prompt a durable
    /// run streamed as session updates, approvals asked as permission requests.
    Acp(AcpArgs),
}

/// `keel acp`.
#[derive(Debug, Clone, Args)]
pub struct AcpArgs {
    /// Model and loop options for every session (the editor's directory is the workspace).
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `keel serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `[serve] bind`, else 127.0.0.1:8787). Port 0 picks a free
    /// port; the address listened on is printed.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<std::net::SocketAddr>,
}

/// Where `keel run` and `keel chat` send their messages instead of running them here.
#[derive(Debug, Clone, Default, Args)]
pub struct RemoteArgs {
    /// Send the message to a `keel serve` daemon at URL and stream its events.
    #[arg(long, value_name = "URL", env = "KEEL_SERVER")]
    pub server: Option<String>,

    /// The daemon's API key (`keel keys create` makes one).
    #[arg(long, value_name = "KEY", env = "KEEL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// How to reach a model and run the loop; shared by `run` and `chat`.
#[derive(Debug, Clone, Default, Args)]
pub struct AgentArgs {
    /// Model provider: `openai`, `openai-responses`, `anthropic`, `mock` (a `keel mock-provider`),
    /// or a `[providers.NAME]` of keel.toml.
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,

    /// Wire API to speak: `openai-chat`, `openai-responses` or `anthropic-messages` (default:
    /// from the provider's configuration, its name, its base URL, else openai-chat).
    #[arg(long, value_name = "API")]
    pub api: Option<String>,

    /// Model name.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,

    /// Base URL of the provider's API (e.g. http://localhost:11434/v1 for Ollama).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,

    /// Cap on model calls per turn.
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,

    /// Directory the file tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Ask the provider for whole answers instead of streams.
    #[arg(long)]
    pub no_stream: bool,

    /// Append every event as a JSON line to FILE.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// A model to fall back to when the primary fails for good: `provider:model`, or a model of
    /// the same provider. Repeat for a chain.
    #[arg(long = "fallback-model", value_name = "M")]
    pub fallback_models: Vec<String>,

    /// After this many seconds, one last "summarize what you did" turn.
    #[arg(long, value_name = "SECS")]
    pub soft_timeout: Option<f64>,

    /// After this many seconds, stop as timed_out.
    #[arg(long, value_name = "SECS")]
    pub hard_timeout: Option<f64>,

    /// Most tokens (input + output) the run may use.
    #[arg(long, value_name = "N")]
    pub token_budget: Option<u64>,

    /// Most dollars the run may spend (at the price table's prices).
    #[arg(long, value_name = "USD")]
    pub cost_limit: Option<f64>,

    /// The user the run is for: their monthly token budget applies (see `keel users`).
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,

    /// The model's context window in tokens, overriding the built-in table.
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u32>,
}

impl AgentArgs {
    /// The settings these flags set over the configuration.
    pub fn overrides(&self) -> keel_config::Overrides {
        keel_config::Overrides {
            provider: self.provider.clone(),
            api: self.api.clone(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            max_iterations: self.max_iterations,
            workspace: self.workspace.clone(),
            no_stream: self.no_stream,
            fallback_models: self.fallback_models.clone(),
            soft_timeout: self.soft_timeout,
            hard_timeout: self.hard_timeout,
            token_budget: self.token_budget,
            cost_limit: self.cost_limit,
            user: self.user.clone(),
            context_window: self.context_window,
        }
    }

    /// Flags setting `overrides`, writing events to `events`.
    pub fn from_overrides(overrides: keel_config::Overrides, events: Option<PathBuf>) -> Self {
        AgentArgs {
            provider: overrides.provider,
            api: overrides.api,
            model: overrides.model,
            base_url: overrides.base_url,
            max_iterations: overrides.max_iterations,
            workspace: overrides.workspace,
            no_stream: overrides.no_stream,
            events,
            fallback_models: overrides.fallback_models,
            soft_timeout: overrides.soft_timeout,
            hard_timeout: overrides.hard_timeout,
            token_budget: overrides.token_budget,
            cost_limit: overrides.cost_limit,
            user: overrides.user,
            context_window: overrides.context_window,
        }
    }
}

/// `keel run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Continue this stored session (default: a new one).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub session: Option<String>,

    /// Print one JSON object describing the run at the end, instead of text.
    #[arg(long)]
    pub json: bool,

    /// When another run of the session is active, fail at once (exit 3) instead of waiting
    /// for it to end.
    #[arg(long)]
    pub no_wait: bool,

    /// Show the model's reasoning (models that think) on stderr, marked `[reasoning]` and
    /// dimmed on a terminal; it is never part of the answer.
    #[arg(long)]
    pub show_reasoning: bool,

    /// Run on a daemon instead of here.
    #[command(flatten)]
    pub remote: RemoteArgs,

    /// Model and loop options.
    #[command(flatten)]
    pub agent: AgentArgs,

    /// The message to send.
    #[arg(value_name = "PROMPT", required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

/// `keel chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this stored session (default: a new one).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub session: Option<String>,

    /// Show the model's reasoning (models that think) on stderr, marked `[reasoning]` and
    /// dimmed on a terminal; it is never part of the answer.
    #[arg(long)]
    pub show_reasoning: bool,

    /// Talk to a daemon instead of running here.
    #[command(flatten)]
    pub remote: RemoteArgs,

    /// Model and loop options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `keel sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// `show ID` prints a transcript.
    #[command(subcommand)]
    pub action: Option<SessionsAction>,

    /// How many sessions to list (at least 1).
    #[arg(long, default_value_t = 50, value_parser = at_least_one)]
    pub limit: usize,
}

/// `keel sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// Print a session's transcript.
    Show {
        /// Session id (a Telegram group's, e.g. `-1001`, included).
        #[arg(allow_hyphen_values = true)]
        id: String,
    },
}

/// `keel runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// `show ID` or `cancel ID`.
    #[command(subcommand)]
    pub action: Option<RunsAction>,

    /// How many runs to list (at least 1).
    #[arg(long, default_value_t = 50, value_parser = at_least_one)]
    pub limit: usize,

    /// Only the runs of this session.
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub session: Option<String>,
}

/// `keel runs` subcommands.
#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Print a run: its record, checkpoints, tool envelope, events, and a handoff when it ended
    /// badly.
    Show {
        /// Run id.
        id: String,
    },
    /// Ask a run to stop; a loop in another process sees it at its next boundary.
    Cancel {
        /// Run id.
        id: String,
    },
    /// A live table of runs (state, model, iterations, tokens, cost, age), redrawn until
    /// Ctrl-C: this machine's store, or with --server a daemon's runs that its key sees.
    Watch(RunsWatchArgs),
}

/// `keel runs watch`.
#[derive(Debug, Args)]
pub struct RunsWatchArgs {
    /// Print one frame and exit (for pipes and scripts).
    #[arg(long)]
    pub once: bool,

    /// Seconds between frames.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub interval: f64,

    /// How many runs to show, newest first (at least 1).
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    pub limit: usize,

    /// Only the runs of this session (a conversation, with --server).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub session: Option<String>,

    /// Watch a daemon's runs instead of this machine's.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// What to do with the side-effecting call a crash interrupted.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum UnsafeCallChoice {
    /// Run it again (you checked it did not take effect).
    Retry,
    /// Do not run it again; the model is told it may or may not have taken effect.
    Skip,
}

/// `keel resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to resume.
    pub run_id: String,

    /// Go on under the current system prompt although it changed since the run started.
    #[arg(long)]
    pub accept_prompt_change: bool,

    /// For a run halted before a side-effecting call a crash interrupted: run it again or skip
    /// it.
    #[arg(long, value_enum, value_name = "retry|skip")]
    pub unsafe_call: Option<UnsafeCallChoice>,

    /// Resume even though the run's heartbeat is fresh and its worker cannot be checked (it ran
    /// on another host): you know it is gone. A worker on this host is checked without it.
    #[arg(long)]
    pub force: bool,

    /// Print one JSON object describing the run at the end, instead of text.
    #[arg(long)]
    pub json: bool,

    /// Model and loop options (the run keeps its own limits and model chain).
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `keel answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The run waiting for an answer.
    pub run_id: String,

    /// The answer.
    #[arg(value_name = "TEXT", required = true, num_args = 1..)]
    pub answer: Vec<String>,

    /// Print one JSON object describing the run at the end, instead of text.
    #[arg(long)]
    pub json: bool,

    /// Model and loop options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// A decision about a tool call waiting for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalChoice {
    /// Run this call.
    Once,
    /// Run it, and the same call (for `shell`, the same command line) for the rest of the
    /// session without asking.
    Session,
    /// Do not run it; the model is told.
    Deny,
}

/// `keel approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The run waiting for approval.
    pub run_id: String,

    /// The decision.
    #[arg(value_enum)]
    pub decision: ApprovalChoice,

    /// The id of the tool call decided, as the run's report names it (`approval.call_id`).
    /// Required: a decision never lands on a call other than the one it names.
    #[arg(long, value_name = "ID")]
    pub call_id: Option<String>,

    /// Print one JSON object describing the run at the end, instead of text.
    #[arg(long)]
    pub json: bool,

    /// Model and loop options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// A count that must be at least 1 (`--limit 0` would list nothing and look like an empty
/// store).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_names_every_subcommand_and_the_facts_setting_keel_reads() {
        use clap::CommandFactory;
        let mut command = Cli::command();
        let help = command.render_help().to_string();
        assert!(
            help.starts_with("keel — a resilient agent-loop runtime\n"),
            "{help}"
        );
        let names: Vec<String> = command
            .get_subcommands()
            .map(|sub| sub.get_name().to_string())
            .collect();
        assert!(names.len() > 15, "{names:?}");
        for name in &names {
            assert!(
                help.contains(&format!("\n  {name} ")),
                "{name} missing: {help}"
            );
        }
        // `keel facts` is about `[memory] facts`, the setting the memory settings read.
        assert!(help.contains("`[memory] facts = true`"), "{help}");
        assert!(!help.contains("enabled = true"), "{help}");
    }

    #[test]
    fn session_ids_of_seed_000_are_accepted_telegram_groups_included() {
        for id in [
            "-1001",
            "slack:C1:1700.5",
            "discord:42",
            "email_trigger",
            "sub-1-abc",
        ] {
            let parsed = Cli::try_parse_from(["keel", "sessions", "show", id]).unwrap();
            assert!(
                matches!(&parsed.command, Command::Sessions(SessionsArgs { action: Some(SessionsAction::Show { id: got }), .. }) if got == id),
                "{id}"
            );
            let parsed = Cli::try_parse_from(["keel", "runs", "--session", id]).unwrap();
            assert!(
                matches!(&parsed.command, Command::Runs(RunsArgs { session: Some(got), .. }) if got == id),
                "{id}"
            );
            let parsed = Cli::try_parse_from(["keel", "run", "--session", id, "hi"]).unwrap();
            assert!(
                matches!(&parsed.command, Command::Run(RunArgs { session: Some(got), .. }) if got == id),
                "{id}"
            );
        }
    }

    #[test]
    fn sessions_limit_zero_is_a_usage_error() {
        for command in ["sessions", "runs"] {
            let err = Cli::try_parse_from(["keel", command, "--limit", "0"]).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains("must be at least 1"), "{err}");
        }
        let parsed = Cli::try_parse_from(["keel", "sessions", "--limit", "1"]).unwrap();
        assert!(matches!(
            parsed.command,
            Command::Sessions(SessionsArgs { limit: 1, .. })
        ));
    }

    #[test]
    fn run_takes_no_wait() {
        let parsed = Cli::try_parse_from(["keel", "run", "--no-wait", "hi"]).unwrap();
        assert!(matches!(
            parsed.command,
            Command::Run(RunArgs { no_wait: true, .. })
        ));
    }
}
