//! The command line's platform administration: users, API keys, personas and usage.

use clap::{Args, Subcommand};

/// `keel users`.
#[derive(Debug, Args)]
pub struct UsersArgs {
    /// `set ID` changes a user's budget.
    #[command(subcommand)]
    pub action: Option<UsersAction>,
}

/// `keel users` subcommands.
#[derive(Debug, Subcommand)]
pub enum UsersAction {
    /// Create a user or change one: monthly token budget, permission (what is not given stays).
    Set {
        /// User id.
        id: String,
        /// Most tokens per calendar month (UTC).
        #[arg(long, value_name = "N", conflicts_with = "unlimited")]
        monthly_tokens: Option<u64>,
        /// No monthly limit.
        #[arg(long)]
        unlimited: bool,
        /// What the user may do: guest, user, admin or owner (new users: user).
        #[arg(long, value_enum, value_name = "LEVEL")]
        permission: Option<PermissionLevel>,
    },
    /// Link a platform identity to a user: messages from it run as that user, on one budget.
    Link {
        /// User id (must exist).
        id: String,
        /// The platform, e.g. telegram, slack, discord.
        #[arg(long)]
        platform: String,
        /// The user's id on that platform.
        #[arg(long, value_name = "ID")]
        platform_user_id: String,
        /// Their name there.
        #[arg(long)]
        username: Option<String>,
    },
    /// Approve a pairing code an unknown sender was given on a channel (`allow = "pairing"`):
    /// they become a user (or, with --user, that user) and may talk from now on.
    Pair {
        /// The code, as the sender was told it (`ABCD-2345`).
        code: String,
        /// Link the sender to this existing user instead of making a new one.
        #[arg(long, value_name = "ID")]
        user: Option<String>,
    },
}

/// `keel channels`.
#[derive(Debug, Args)]
pub struct ChannelsArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ChannelsAction,
}

/// `keel channels` subcommands.
#[derive(Debug, Subcommand)]
pub enum ChannelsAction {
    /// Each configured channel: its last event and error, and its replies waiting, delivered
    /// and given up.
    Status {
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `keel schedules`.
#[derive(Debug, Args)]
pub struct SchedulesArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: SchedulesAction,
}

/// `keel schedules` subcommands.
#[derive(Debug, Subcommand)]
pub enum SchedulesAction {
    /// Schedules, newest first: id, state, when, next slot, conversation, text.
    List {
        /// Only this conversation's.
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a schedule to a conversation: each fire sends TEXT into it as a run of its owner.
    Add {
        /// The conversation it fires into.
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// Once, at an RFC 3339 instant (2026-12-01T09:00:00+01:00).
        #[arg(long, value_name = "TIME", group = "when", required_unless_present_any = ["every", "cron"])]
        at: Option<String>,
        /// Every interval (90s, 15m, 2h, 1d; at least 60 s).
        #[arg(long, value_name = "INTERVAL", group = "when")]
        every: Option<String>,
        /// A 5-field cron expression ("0 9 * * 1-5"), read in --tz.
        #[arg(long, value_name = "EXPR", group = "when")]
        cron: Option<String>,
        /// The IANA time zone of --cron (default UTC).
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
        /// Slots missed while no daemon ran: skip (recorded missed), once (one run for all,
        /// the default) or all (one run each, up to 10).
        #[arg(long, value_name = "POLICY")]
        catch_up: Option<String>,
        /// The message each fire sends.
        #[arg(required = true)]
        text: Vec<String>,
    },
    /// One schedule with its recent slots: fired (with the run), missed, refused, failed.
    Show {
        /// The schedule's id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Pause a schedule: it does not fire until resumed.
    Pause {
        /// The schedule's id.
        id: String,
    },
    /// Resume a paused schedule from now.
    Resume {
        /// The schedule's id.
        id: String,
    },
    /// Delete a schedule and its slots' records (runs it fired stay).
    Rm {
        /// The schedule's id.
        id: String,
    },
}

/// `--permission`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PermissionLevel {
    /// Anyone, including unknown users.
    Guest,
    /// A known user.
    User,
    /// An administrator.
    Admin,
    /// The owner of the deployment.
    Owner,
}

impl From<PermissionLevel> for keel_core::Permission {
    fn from(level: PermissionLevel) -> Self {
        match level {
            PermissionLevel::Guest => keel_core::Permission::Guest,
            PermissionLevel::User => keel_core::Permission::User,
            PermissionLevel::Admin => keel_core::Permission::Admin,
            PermissionLevel::Owner => keel_core::Permission::Owner,
        }
    }
}

/// `keel keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: KeysAction,
}

/// `keel keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysAction {
    /// Make a key and print it once (only its hash is stored).
    Create {
        /// The user the key acts as: it sees and acts on that user's conversations only.
        #[arg(long, value_name = "ID")]
        user: Option<String>,
        /// The key sees and acts on everything.
        #[arg(long)]
        admin: bool,
        /// A platform the key may post incoming messages for (`POST /v1/messages`), and whose
        /// conversations it sees; repeat for several. Without --user it is a channel key.
        #[arg(long, value_name = "NAME")]
        platform: Vec<String>,
    },
    /// List keys (ids, users, when made and revoked; never the keys).
    List,
    /// Revoke a key by its id: it authenticates nothing from now on.
    Revoke {
        /// The key's id, as `keel keys list` shows it.
        key_id: String,
    },
}

/// `keel personas`.
#[derive(Debug, Args)]
pub struct PersonasArgs {
    /// What to do (default: list).
    #[command(subcommand)]
    pub action: Option<PersonasAction>,
}

/// `keel personas` subcommands.
#[derive(Debug, Subcommand)]
pub enum PersonasAction {
    /// Make a persona (or replace the one with this name).
    Add {
        /// Its name.
        name: String,
        /// Its settings.
        #[command(flatten)]
        fields: PersonaFields,
    },
    /// Change a persona: what is not given stays.
    Set {
        /// Its name.
        name: String,
        /// What to change.
        #[command(flatten)]
        fields: PersonaFields,
    },
    /// List personas.
    List,
}

/// A persona's settings on the command line.
#[derive(Debug, Clone, Args)]
pub struct PersonaFields {
    /// The system prompt.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// The platform it serves.
    #[arg(long)]
    pub platform: Option<String>,
    /// The server on that platform it serves.
    #[arg(long, value_name = "ID")]
    pub server: Option<String>,
    /// The model to ask instead of the configured one.
    #[arg(long)]
    pub model: Option<String>,
    /// Cap on output tokens per call.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// A tool module it may use (repeat; default: every module).
    #[arg(long = "module", value_name = "NAME")]
    pub modules: Vec<String>,
    /// Sampling temperature, 0–2.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Make it the default persona.
    #[arg(long)]
    pub default: bool,
}

/// `keel usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Only this user.
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// The month, YYYY-MM (default: this month, UTC).
    #[arg(long, value_name = "YYYY-MM")]
    pub month: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}
