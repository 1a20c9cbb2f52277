//! A scrape: the recorded series, then what is read now — the runs active and queued here, the
//! token log's month by model and by user, the channels' outbox backlogs — in the Prometheus
//! text format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::Utc;
use keel_core::{StoreError, Usage};
use keel_platform::usage::UsageQuery;

use super::names;
use crate::state::AppState;

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every series of `state`'s daemon, as a scrape answers them.
pub async fn render(state: &AppState) -> Result<String, StoreError> {
    let metrics = state.engine.metrics();
    let mut out = metrics.render_recorded();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    let sizes = state.engine.sizes();
    family(
        &mut out,
        names::RUNS_ACTIVE,
        "gauge",
        "Runs being driven by this process.",
    );
    sample(&mut out, names::RUNS_ACTIVE, &[], sizes.driven as f64);
    family(
        &mut out,
        names::RUNS_QUEUED,
        "gauge",
        "Runs waiting in this process's lanes.",
    );
    sample(&mut out, names::RUNS_QUEUED, &[], sizes.queued as f64);
    token_log(&mut out, state).await?;
    let channels = metrics.channels();
    if !channels.is_empty() {
        family(
            &mut out,
            names::OUTBOX_BACKLOG,
            "gauge",
            "Replies waiting in a channel's outbox.",
        );
        for channel in &channels {
            let stats = state.store.outbox_stats(channel).await?;
            sample(
                &mut out,
                names::OUTBOX_BACKLOG,
                &[("channel", channel)],
                stats.pending as f64,
            );
        }
    }
    Ok(out)
}

/// The month's token log, summed by model and by user.
async fn token_log(out: &mut String, state: &AppState) -> Result<(), StoreError> {
    let month = keel_core::token_log::usage_month(Utc::now());
    let lines = state
        .store
        .usage_lines(&UsageQuery {
            user_id: None,
            month,
        })
        .await?;
    let mut by_model: BTreeMap<&str, (Usage, f64)> = BTreeMap::new();
    let mut by_user: BTreeMap<&str, (Usage, f64)> = BTreeMap::new();
    for line in &lines {
        add(by_model.entry(line.model.as_str()).or_default(), line);
        if let Some(user) = &line.user_id {
            add(by_user.entry(user.as_str()).or_default(), line);
        }
    }
    let month_note = "this month (UTC) so far, from the token log; resets on the 1st";
    family(
        out,
        names::TOKENS,
        "counter",
        &format!("Tokens of model calls by model and kind, {month_note}."),
    );
    for (model, (usage, _)) in &by_model {
        tokens(out, names::TOKENS, ("model", model), usage);
    }
    family(
        out,
        names::COST,
        "counter",
        &format!("Dollars of model calls by model, {month_note}."),
    );
    for (model, (_, cost)) in &by_model {
        sample(out, names::COST, &[("model", model)], *cost);
    }
    family(
        out,
        names::USER_TOKENS,
        "counter",
        &format!("Tokens of model calls by user and kind, {month_note}."),
    );
    for (user, (usage, _)) in &by_user {
        tokens(out, names::USER_TOKENS, ("user", user), usage);
    }
    family(
        out,
        names::USER_COST,
        "counter",
        &format!("Dollars of model calls by user, {month_note}."),
    );
    for (user, (_, cost)) in &by_user {
        sample(out, names::USER_COST, &[("user", user)], *cost);
    }
    Ok(())
}

fn add(sum: &mut (Usage, f64), line: &keel_platform::usage::UsageLine) {
    sum.0.input_tokens += line.usage.input_tokens;
    sum.0.output_tokens += line.usage.output_tokens;
    sum.0.cache_read_tokens += line.usage.cache_read_tokens;
    sum.0.cache_write_tokens += line.usage.cache_write_tokens;
    sum.1 += line.cost;
}

fn tokens(out: &mut String, name: &str, who: (&str, &str), usage: &Usage) {
    for (kind, count) in [
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_tokens),
        ("cache_write", usage.cache_write_tokens),
    ] {
        sample(out, name, &[who, ("kind", kind)], count as f64);
    }
}

/// A family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape(help, false));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escape(value, true));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value (`quote`: `"` escaped too) or help text, escaped as the format says.
pub fn escape(text: &str, quote: bool) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\\', '\n', '"']) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '"' if quote => escaped.push_str("\\\""),
            c => escaped.push(c),
        }
    }
    escaped.into()
}
