//! Every series' name, with its help text. Prometheus conventions: `keel_` first, counters end
//! `_total`, base units (`_seconds`, `_usd`).

use metrics::Unit;

/// Runs that reached a terminal state, by `state` (`completed`, `cancelled`, `timed_out`,
/// `max_steps`, `budget_exceeded`, `error`) and `reason` (`none`, an error's reason, or how a
/// queued run was cancelled: `queued`, `steered`, `collected`).
pub const RUNS: &str = "keel_runs_total";
/// Model calls, by `model` (as asked for) and `error` (`none`, or the error class).
pub const MODEL_CALLS: &str = "keel_model_calls_total";
/// Failed model calls tried again, by `model` and `error` class.
pub const RETRIES: &str = "keel_provider_retries_total";
/// Moves to the next model of a fallback chain, by the model given up (`from`) and `error`.
pub const FALLBACKS: &str = "keel_provider_fallbacks_total";
/// Tool calls that ended, by `tool` and `outcome` (`ok`, `error`).
pub const TOOL_CALLS: &str = "keel_tool_calls_total";
/// Decisions about tool calls waiting for approval, by `decision` (`approve_once`,
/// `approve_session`, `deny`).
pub const APPROVALS: &str = "keel_approvals_total";
/// Messages refused by a conversation's lane, by `reason` (`queue_full`: 429; `busy`: the
/// `reject` policy).
pub const LANE_REJECTIONS: &str = "keel_lane_rejections_total";
/// What the reconciler did, by `action` (`timed_out`, `cancelled`, `resumed`).
pub const RECONCILER_ACTIONS: &str = "keel_reconciler_actions_total";
/// How long model calls took, by `model`.
pub const MODEL_LATENCY: &str = "keel_model_latency_seconds";
/// How long tool calls took, by `tool`.
pub const TOOL_DURATION: &str = "keel_tool_duration_seconds";
/// The loop's own time per iteration: from a model call's answer to the next call (or the
/// run's end), less the time its tools ran.
pub const LOOP_OVERHEAD: &str = "keel_loop_overhead_seconds";

/// Runs being driven by this process now.
pub const RUNS_ACTIVE: &str = "keel_runs_active";
/// Runs waiting in this process's lanes now.
pub const RUNS_QUEUED: &str = "keel_runs_queued";
/// Tokens of this month's model calls (UTC; the token log, so a restart loses nothing), by
/// `model` and `kind` (`input`, which includes `cache_read`; `output`; `cache_read`;
/// `cache_write`). Resets on the 1st, as budgets do.
pub const TOKENS: &str = "keel_tokens_total";
/// Dollars of this month's model calls, by `model` (the token log).
pub const COST: &str = "keel_cost_usd_total";
/// Tokens of this month's model calls, by `user` and `kind` (the token log; runs for no user
/// are left out).
pub const USER_TOKENS: &str = "keel_user_tokens_total";
/// Dollars of this month's model calls, by `user` (the token log).
pub const USER_COST: &str = "keel_user_cost_usd_total";
/// Replies waiting in a channel's outbox, by `channel` (only when channels run).
pub const OUTBOX_BACKLOG: &str = "keel_outbox_backlog";

/// The recorded series' help, with `Some(Seconds)` for the histograms.
pub(super) const DESCRIBED: &[(&str, Option<Unit>, &str)] = &[
    (RUNS, None, "Runs that reached a terminal state."),
    (
        MODEL_CALLS,
        None,
        "Model calls, by model and error class (none: answered).",
    ),
    (RETRIES, None, "Failed model calls tried again."),
    (
        FALLBACKS,
        None,
        "Moves to the next model of a fallback chain.",
    ),
    (
        TOOL_CALLS,
        None,
        "Tool calls that ended, by tool and outcome.",
    ),
    (
        APPROVALS,
        None,
        "Decisions about tool calls that needed approval.",
    ),
    (
        LANE_REJECTIONS,
        None,
        "Messages refused by a conversation's lane.",
    ),
    (
        RECONCILER_ACTIONS,
        None,
        "Runs the reconciler timed out, cancelled or resumed.",
    ),
    (
        MODEL_LATENCY,
        Some(Unit::Seconds),
        "How long model calls took.",
    ),
    (
        TOOL_DURATION,
        Some(Unit::Seconds),
        "How long tool calls took.",
    ),
    (
        LOOP_OVERHEAD,
        Some(Unit::Seconds),
        "The loop's own time per iteration (model calls and tools left out).",
    ),
];
