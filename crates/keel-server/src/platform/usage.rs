//! `GET /v1/usage`: the token log's report.

use axum::extract::State;
use chrono::Utc;
use keel_core::token_log::usage_month;
use keel_platform::UsageQuery;
use keel_platform::usage::is_usage_month;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::ApiQuery;
use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(usage))
}

/// `?user=&month=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// Only this user (an admin's choice; a user's key sees only its own).
    pub user: Option<String>,
    /// `YYYY-MM` (default: this month, UTC).
    pub month: Option<String>,
}

/// The calls of one user with one model in a month.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageLineView {
    /// The user; null for runs for no user.
    pub user_id: Option<String>,
    /// The model that answered.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Prompt tokens (cached ones included).
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the cache.
    pub cache_write_tokens: u64,
    /// Dollars.
    pub cost: f64,
}

/// A month of the token log.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    /// `YYYY-MM`.
    pub month: String,
    /// Per user and model.
    pub lines: Vec<UsageLineView>,
    /// Every line's tokens (input + output).
    pub total_tokens: u64,
    /// Every line's dollars.
    pub total_cost: f64,
}

/// The token log of a month: calls, tokens and dollars per user and model. A user's key sees
/// its own; an admin's sees everyone's, or one user's with `?user=`.
#[utoipa::path(get, path = "/v1/usage",
    params(("user" = Option<String>, Query, description = "Only this user"),
           ("month" = Option<String>, Query, description = "YYYY-MM, default this month (UTC)")),
    responses((status = 200, body = UsageReport), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<UsageParams>,
) -> Result<axum::Json<UsageReport>, ApiError> {
    let month = params.month.unwrap_or_else(|| usage_month(Utc::now()));
    if !is_usage_month(&month) {
        return Err(ApiError::invalid(format!(
            "`month` wants YYYY-MM, e.g. 2026-11, not `{month}`"
        )));
    }
    let user_id = if caller.admin {
        params.user
    } else {
        match params.user {
            Some(user) if Some(&user) != caller.user_id.as_ref() => {
                return Err(ApiError::not_found(format!("user `{user}`")));
            }
            // A key with neither user nor admin is never made; it would see nothing.
            _ => Some(caller.user_id.clone().unwrap_or_default()),
        }
    };
    let lines = state
        .store
        .usage_lines(&UsageQuery {
            user_id,
            month: month.clone(),
        })
        .await?;
    let total_tokens = lines.iter().map(|line| line.usage.total()).sum();
    let total_cost = lines.iter().map(|line| line.cost).sum();
    let lines = lines
        .into_iter()
        .map(|line| UsageLineView {
            user_id: line.user_id,
            model: line.model,
            calls: line.calls,
            input_tokens: line.usage.input_tokens,
            output_tokens: line.usage.output_tokens,
            cache_read_tokens: line.usage.cache_read_tokens,
            cache_write_tokens: line.usage.cache_write_tokens,
            cost: line.cost,
        })
        .collect();
    Ok(axum::Json(UsageReport {
        month,
        lines,
        total_tokens,
        total_cost,
    }))
}
