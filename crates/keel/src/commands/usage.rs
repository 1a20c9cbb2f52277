//! `keel usage`: the token log of a month, summed per user and model.

use std::process::ExitCode;

use chrono::Utc;
use keel_core::Usage;
use keel_core::token_log::usage_month;
use keel_platform::UsageQuery;
use keel_platform::usage::is_usage_month;

use crate::cli::UsageArgs;
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel usage`.
pub async fn usage(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let month = args.month.unwrap_or_else(|| usage_month(Utc::now()));
    if !is_usage_month(&month) {
        return Err(ConfigError(format!(
            "--month wants YYYY-MM, e.g. 2026-11, not `{month}`"
        ))
        .into());
    }
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let lines = store
        .usage_lines(&UsageQuery {
            user_id: args.user.clone(),
            month: month.clone(),
        })
        .await?;
    if args.json {
        for line in &lines {
            println!("{}", serde_json::to_string(line)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if lines.is_empty() {
        println!("no model calls in {month}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("usage in {month}");
    println!(
        "{:<20} {:<28} {:>6} {:>12} {:>12} {:>12} {:>10}",
        "user", "model", "calls", "input", "output", "cached", "cost"
    );
    let mut total = Usage::default();
    let mut cost = 0.0;
    let mut calls = 0;
    for line in &lines {
        println!(
            "{:<20} {:<28} {:>6} {:>12} {:>12} {:>12} {:>10}",
            line.user_id.as_deref().unwrap_or("(no user)"),
            line.model,
            line.calls,
            line.usage.input_tokens,
            line.usage.output_tokens,
            line.usage.cache_read_tokens,
            format!("${:.4}", line.cost)
        );
        total += line.usage;
        cost += line.cost;
        calls += line.calls;
    }
    println!(
        "{:<20} {:<28} {:>6} {:>12} {:>12} {:>12} {:>10}",
        "total",
        "",
        calls,
        total.input_tokens,
        total.output_tokens,
        total.cache_read_tokens,
        format!("${cost:.4}")
    );
    Ok(ExitCode::SUCCESS)
}
