//! Usage (`GET /usage?month=&user=`): a month of the token log per user (tokens, dollars, and
//! what is left of a monthly budget) and per user and model. A user sees their own; an admin
//! everyone's, or one user's.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use keel_core::token_log::usage_month;
use keel_platform::UsageQuery;
use keel_platform::usage::{UsageLine, is_usage_month};
use maud::{Markup, html};
use serde::Deserialize;

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::format::{count, dollars};
use crate::layout;
use crate::session::Viewer;

/// `?month=&user=`.
#[derive(Debug, Default, Deserialize)]
pub struct UsageQueryString {
    /// `YYYY-MM`; this month (UTC) when empty.
    pub month: Option<String>,
    /// One user (an admin's filter).
    pub user: Option<String>,
}

/// One user's month, summed.
#[derive(Default)]
struct UserMonth {
    calls: u64,
    input: u64,
    output: u64,
    cost: f64,
    budget: Option<u64>,
    used: u64,
}

/// `GET /usage`.
pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Query(query): Query<UsageQueryString>,
) -> Result<Markup, ConsoleError> {
    let now = state.clock.now();
    let month = query
        .month
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| usage_month(now));
    if !is_usage_month(&month) {
        return Err(ConsoleError::invalid(format!(
            "A month is written YYYY-MM, e.g. 2026-11, not `{month}`."
        )));
    }
    let wanted = query.user.filter(|u| !u.trim().is_empty());
    let caller = &viewer.caller;
    let user_id = if caller.admin {
        wanted.clone()
    } else {
        Some(caller.user_id.clone().unwrap_or_default())
    };
    let lines = if !caller.admin && wanted.is_some() && wanted != caller.user_id {
        Vec::new()
    } else {
        state
            .app
            .store
            .usage_lines(&UsageQuery {
                user_id: user_id.clone(),
                month: month.clone(),
            })
            .await?
    };
    let mut users: BTreeMap<Option<String>, UserMonth> = BTreeMap::new();
    if let Some(own) = user_id.clone().filter(|u| !u.is_empty()) {
        users.entry(Some(own)).or_default();
    }
    for line in &lines {
        let sum = users.entry(line.user_id.clone()).or_default();
        sum.calls += line.calls;
        sum.input += line.usage.input_tokens;
        sum.output += line.usage.output_tokens;
        sum.cost += line.cost;
    }
    for (user, sum) in users.iter_mut() {
        if let Some(user) = user {
            sum.budget = state
                .app
                .store
                .user(user)
                .await?
                .and_then(|record| record.monthly_token_budget);
            if sum.budget.is_some() {
                sum.used = state.app.store.monthly_usage(user, &month).await?.total();
            }
        }
    }
    let body = html! {
        h1 { "Usage" }
        form class="filters" method="get" action="/usage" {
            label { "Month" input type="month" name="month" value=(month); }
            @if caller.admin {
                label {
                    "User"
                    input type="text" name="user" value=[wanted.as_deref()] autocomplete="off"
                        spellcheck="false";
                }
            }
            button type="submit" { "Show" }
        }
        h2 { "By user" }
        @if users.is_empty() {
            p class="note" { "No model calls in " (month) "." }
        } @else {
            (by_user(&users))
        }
        @if !lines.is_empty() {
            h2 { "By user and model" }
            (by_model(&lines))
        }
    };
    Ok(layout::page("Usage", Some(&viewer), body))
}

fn by_user(users: &BTreeMap<Option<String>, UserMonth>) -> Markup {
    html! {
        div class="table-wrap" {
            table class="cards" {
                thead {
                    tr {
                        th scope="col" { "User" }
                        th scope="col" class="num" { "Calls" }
                        th scope="col" class="num" { "Input tokens" }
                        th scope="col" class="num" { "Output tokens" }
                        th scope="col" class="num" { "Cost" }
                        th scope="col" class="num" { "Monthly budget" }
                        th scope="col" class="num" { "Budget left" }
                    }
                }
                tbody {
                    @for (user, sum) in users {
                        tr {
                            td data-label="User" { (user.as_deref().unwrap_or("(no user)")) }
                            td data-label="Calls" class="num" { (count(sum.calls)) }
                            td data-label="Input tokens" class="num" { (count(sum.input)) }
                            td data-label="Output tokens" class="num" { (count(sum.output)) }
                            td data-label="Cost" class="num" { (dollars(sum.cost)) }
                            @if let Some(budget) = sum.budget {
                                td data-label="Monthly budget" class="num" { (count(budget)) " tokens" }
                                td data-label="Budget left" class="num" {
                                    (count(budget.saturating_sub(sum.used))) " tokens"
                                }
                            } @else {
                                td data-label="Monthly budget" class="num" { "unlimited" }
                                td data-label="Budget left" class="num" { "—" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn by_model(lines: &[UsageLine]) -> Markup {
    html! {
        div class="table-wrap" {
            table class="cards" {
                thead {
                    tr {
                        th scope="col" { "User" }
                        th scope="col" { "Model" }
                        th scope="col" class="num" { "Calls" }
                        th scope="col" class="num" { "Input tokens" }
                        th scope="col" class="num" { "Cached input" }
                        th scope="col" class="num" { "Output tokens" }
                        th scope="col" class="num" { "Cost" }
                    }
                }
                tbody {
                    @for line in lines {
                        tr {
                            td data-label="User" { (line.user_id.as_deref().unwrap_or("(no user)")) }
                            td data-label="Model" { (line.model) }
                            td data-label="Calls" class="num" { (count(line.calls)) }
                            td data-label="Input tokens" class="num" { (count(line.usage.input_tokens)) }
                            td data-label="Cached input" class="num" { (count(line.usage.cache_read_tokens)) }
                            td data-label="Output tokens" class="num" { (count(line.usage.output_tokens)) }
                            td data-label="Cost" class="num" { (dollars(line.cost)) }
                        }
                    }
                }
            }
        }
    }
}
