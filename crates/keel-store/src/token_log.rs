//! The token log on SQL (`migrations/0010_token_log.sql`): a commit's model calls become rows,
//! each added to its user's running month total in `usage_log` in the same transaction.

use keel_core::token_log::{TokenCharge, usage_month};
use keel_core::{StoreError, Usage};
use keel_platform::usage::{UsageLine, UsageQuery};
use sqlx::sqlite::SqliteConnection;

use crate::OrBackend;
use crate::batch::Plan;
use crate::codec::{self, Columns, Place, column, stored_count, timestamp};

/// A row of the commit's run (`$5`) in its session (`$1`).
const INSERT_CHARGE: &str = "INSERT INTO token_log (session_id, run_id, user_id, model, month, \
     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost, created_at) \
     VALUES ($1, $5";

/// Parameters bound per row (its usage is bound once more for the user's month).
const CHARGE_PARAMS: usize = 15;

/// Adds a row's usage to its user's month (`usage_log`).
const ADD_TO_MONTH: &str = "INSERT INTO usage_log (user_id, month, input_tokens, \
     output_tokens, cache_read_tokens, cache_write_tokens) VALUES (";

const ADD_TO_MONTH_TAIL: &str = ") ON CONFLICT (user_id, month) DO UPDATE SET \
     input_tokens = usage_log.input_tokens + excluded.input_tokens, \
     output_tokens = usage_log.output_tokens + excluded.output_tokens, \
     cache_read_tokens = usage_log.cache_read_tokens + excluded.cache_read_tokens, \
     cache_write_tokens = usage_log.cache_write_tokens + excluded.cache_write_tokens";

/// What user `$1` spent in month `$2`.
pub(crate) const SELECT_MONTH: &str = "SELECT input_tokens, output_tokens, cache_read_tokens, \
     cache_write_tokens FROM usage_log WHERE user_id = $1 AND month = $2";

/// `$2`: the user, or NULL for every user.
pub(crate) const SELECT_LINES: &str = "SELECT user_id, model, count(*) AS calls, \
     sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, \
     sum(cache_read_tokens) AS cache_read_tokens, sum(cache_write_tokens) AS cache_write_tokens, \
     sum(cost) AS cost FROM token_log WHERE month = $1 AND ($2 IS NULL OR user_id = $2) \
     GROUP BY user_id, model ORDER BY user_id, model";

/// Adds the commit's token log rows, and each user's month total, to `plan`.
pub(crate) fn add_charges(plan: &mut Plan<'_>, charges: &[TokenCharge]) -> Result<(), StoreError> {
    for charge in charges {
        let month = usage_month(charge.at);
        let batch = plan.batch(CHARGE_PARAMS);
        batch
            .end_statement()
            .sql(INSERT_CHARGE)
            .value(charge.user_id.as_deref())
            .value(charge.model.as_str());
        let month_param = batch.param(month.as_str());
        batch.placeholder(month_param);
        let counts = counts(&charge.usage)?;
        let numbers: Vec<usize> = counts.iter().map(|count| batch.param(*count)).collect();
        for n in &numbers {
            batch.placeholder(*n);
        }
        batch
            .value(charge.cost)
            .value(timestamp(charge.at))
            .sql(")");
        if let Some(user) = &charge.user_id {
            let user = batch.param(user.as_str());
            batch
                .end_statement()
                .sql(ADD_TO_MONTH)
                .sql("$")
                .number(user)
                .placeholder(month_param);
            for n in &numbers {
                batch.placeholder(*n);
            }
            batch.sql(ADD_TO_MONTH_TAIL);
        }
    }
    Ok(())
}

/// The four token counts of `usage`, as stored.
fn counts(usage: &Usage) -> Result<[i64; 4], StoreError> {
    Ok([
        stored_count(usage.input_tokens, "input_tokens")?,
        stored_count(usage.output_tokens, "output_tokens")?,
        stored_count(usage.cache_read_tokens, "cache_read_tokens")?,
        stored_count(usage.cache_write_tokens, "cache_write_tokens")?,
    ])
}

/// What `user_id` spent in `month`.
pub(crate) async fn monthly_usage(
    reader: &mut SqliteConnection,
    user_id: &str,
    month: &str,
) -> Result<Usage, StoreError> {
    let row = sqlx::query(SELECT_MONTH)
        .bind(user_id)
        .bind(month)
        .fetch_optional(reader)
        .await
        .or_backend(|| format!("cannot read usage of user `{user_id}`"))?;
    Ok(row
        .as_ref()
        .map(|row| codec::decode_usage(row, user_id))
        .transpose()?
        .unwrap_or_default())
}

/// The month's token log summed per user and model.
pub(crate) async fn usage_lines(
    reader: &mut SqliteConnection,
    query: &UsageQuery,
) -> Result<Vec<UsageLine>, StoreError> {
    let rows = sqlx::query(SELECT_LINES)
        .bind(&query.month)
        .bind(query.user_id.as_deref())
        .fetch_all(reader)
        .await
        .or_backend(|| format!("cannot read the token log of {}", query.month))?;
    rows.iter().map(decode_line).collect()
}

/// Decodes a row of [`SELECT_LINES`]' columns.
pub(crate) fn decode_line(row: &impl Columns) -> Result<UsageLine, StoreError> {
    let place = Place::Table("token_log");
    let calls: i64 = column(row, "calls", place)?;
    Ok(UsageLine {
        user_id: column(row, "user_id", place)?,
        model: column(row, "model", place)?,
        calls: u64::try_from(calls).unwrap_or_default(),
        usage: codec::decode_usage(row, "(any)")?,
        cost: column(row, "cost", place)?,
    })
}
