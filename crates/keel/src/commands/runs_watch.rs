//! `keel runs watch`: the runs as a table in the terminal, redrawn every interval — for a
//! person without a browser. It reads this machine's store, or with `--server` (`KEEL_SERVER`)
//! a daemon's `GET /v1/runs` with its key (`KEEL_API_KEY`): the runs that key sees.
//! `--once` prints one frame and exits (for pipes and scripts).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, Utc};
use keel_core::RunRecord;
use serde::Deserialize;

use crate::cli::RunsWatchArgs;
use crate::config::keel_home;
use crate::output::one_line;
use crate::remote::client::{Client, segment};
use crate::terminal_text::terminal_safe;

/// One run, as a row of the table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Row {
    /// Run id.
    pub id: String,
    /// Its state, with the reason when there is one.
    pub state: String,
    /// Why it ended in `error` (or waits).
    #[serde(default)]
    pub reason: Option<String>,
    /// Model asked for.
    pub model: String,
    /// Model that last answered.
    #[serde(default)]
    pub model_used: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// Tokens used.
    #[serde(default)]
    pub usage: keel_core::Usage,
    /// Dollars spent.
    #[serde(default)]
    pub cost: f64,
    /// When it was queued, then when it started.
    pub started_at: DateTime<Utc>,
}

impl From<RunRecord> for Row {
    fn from(run: RunRecord) -> Row {
        Row {
            id: run.id,
            state: run.state.to_string(),
            reason: run.reason.map(|reason| reason.to_string()),
            model: run.model,
            model_used: run.model_used,
            iterations: run.iterations,
            usage: run.usage,
            cost: run.cost,
            started_at: run.started_at,
        }
    }
}

/// A page of the API's runs.
#[derive(Deserialize)]
struct Page {
    items: Vec<Row>,
}

/// Where the rows come from.
enum Source {
    Local(std::sync::Arc<dyn keel_platform::DaemonStore>),
    Remote(Client),
}

/// Runs `keel runs watch`.
pub async fn watch(
    config_file: Option<&std::path::Path>,
    args: RunsWatchArgs,
) -> anyhow::Result<ExitCode> {
    let _ = config_file;
    let (source, title) = match &args.remote.server {
        Some(url) => (
            Source::Remote(Client::new(url, args.remote.api_key.clone())?),
            url.trim_end_matches('/').to_string(),
        ),
        None => {
            let home = keel_home()?;
            let store = crate::setup::open_store(&home).await?;
            (Source::Local(store), home.display().to_string())
        }
    };
    let terminal = std::io::stdout().is_terminal();
    let every = Duration::from_secs_f64(args.interval.max(0.2));
    loop {
        let rows = rows(&source, &args).await?;
        let text = frame(&rows, Utc::now(), &title, args.limit);
        let mut out = std::io::stdout().lock();
        if args.once {
            write!(out, "{text}")?;
            return Ok(ExitCode::SUCCESS);
        }
        if terminal {
            // Home, clear the screen, draw.
            write!(out, "\x1b[H\x1b[2J{text}")?;
        } else {
            writeln!(out, "{text}")?;
        }
        out.flush()?;
        drop(out);
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

async fn rows(source: &Source, args: &RunsWatchArgs) -> anyhow::Result<Vec<Row>> {
    Ok(match source {
        Source::Local(store) => store
            .list_runs(args.session.as_deref(), args.limit)
            .await?
            .into_iter()
            .map(Row::from)
            .collect(),
        Source::Remote(client) => {
            let mut path = format!("/v1/runs?limit={}", args.limit.min(200));
            if let Some(session) = &args.session {
                let _ = write!(path, "&conversation={}", segment(session));
            }
            let response = client
                .send(client.request(reqwest::Method::GET, &path))
                .await?;
            let text = response.text().await.map_err(|e| client.unreachable(e))?;
            serde_json::from_str::<Page>(&text)
                .map_err(|e| anyhow::anyhow!("the keel server's runs are not as expected: {e}"))?
                .items
        }
    })
}

/// One frame: a title line with the counts by state, then a row per run (newest first).
pub fn frame(rows: &[Row], now: DateTime<Utc>, title: &str, limit: usize) -> String {
    let mut out = String::new();
    let count = |states: &[&str]| {
        rows.iter()
            .filter(|row| states.contains(&row.state.as_str()))
            .count()
    };
    let _ = writeln!(
        out,
        "keel runs — {} — {} — {} running, {} queued, {} waiting (the newest {limit})",
        terminal_safe(title),
        now.format("%H:%M:%S UTC"),
        count(&["running", "waiting_for_tool"]),
        count(&["queued"]),
        count(&["waiting_on_human"]),
    );
    let _ = writeln!(
        out,
        "{:<36}  {:<28}  {:<24}  {:>5}  {:>9}  {:>9}  {:>5}",
        "RUN", "STATE", "MODEL", "ITER", "TOKENS", "COST", "AGE"
    );
    if rows.is_empty() {
        out.push_str("(no runs yet)\n");
    }
    for row in rows {
        let state = match &row.reason {
            Some(reason) => format!("{} ({reason})", row.state),
            None => row.state.clone(),
        };
        let model = row.model_used.as_deref().unwrap_or(&row.model);
        // Made safe before padding, so the columns stay aligned.
        let cell = |text: &str, width: usize| {
            let safe = terminal_safe(text).replace('\t', " ");
            if safe.chars().count() <= width {
                one_line(&safe, width)
            } else {
                one_line(&safe, width - 1)
            }
        };
        let _ = writeln!(
            out,
            "{:<36}  {:<28}  {:<24}  {:>5}  {:>9}  {:>9}  {:>5}",
            cell(&row.id, 36),
            cell(&state, 28),
            cell(model, 24),
            row.iterations,
            row.usage.total(),
            format!("${:.4}", row.cost),
            age(now - row.started_at),
        );
    }
    out
}

/// An age in its largest unit: `42s`, `5m`, `3h`, `2d`.
fn age(age: chrono::Duration) -> String {
    if age.num_days() > 0 {
        format!("{}d", age.num_days())
    } else if age.num_hours() > 0 {
        format!("{}h", age.num_hours())
    } else if age.num_minutes() > 0 {
        format!("{}m", age.num_minutes())
    } else {
        format!("{}s", age.num_seconds().max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        now: DateTime<Utc>,
        id: &str,
        state: &str,
        reason: Option<&str>,
        model: &str,
        seconds_ago: i64,
    ) -> Row {
        Row {
            id: id.into(),
            state: state.into(),
            reason: reason.map(str::to_string),
            model: model.into(),
            model_used: None,
            iterations: 3,
            usage: keel_core::Usage {
                input_tokens: 1200,
                output_tokens: 34,
                ..Default::default()
            },
            cost: 0.0123,
            started_at: now - chrono::Duration::seconds(seconds_ago),
        }
    }

    #[test]
    fn a_frame_counts_the_states_and_shows_a_row_per_run() {
        let now = Utc::now();
        let rows = [
            row(now, "r3", "running", None, "gpt-x", 5),
            row(now, "r2", "waiting_on_human", None, "gpt-x", 300),
            row(
                now,
                "r1",
                "error",
                Some("provider_fatal"),
                "m\x1b[31m",
                7200,
            ),
        ];
        let text = frame(&rows, now, "http://127.0.0.1:8787", 20);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("1 running, 0 queued, 1 waiting"),
            "{text}"
        );
        assert!(lines[1].starts_with("RUN "), "{text}");
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[2].starts_with("r3 ") && lines[2].contains("running"));
        assert!(lines[2].contains(" 1234 ") && lines[2].contains("$0.0123"));
        assert!(lines[2].trim_end().ends_with("5s"), "{text}");
        assert!(lines[3].trim_end().ends_with("5m"), "{text}");
        assert!(lines[4].contains("error (provider_fatal)"), "{text}");
        assert!(lines[4].trim_end().ends_with("2h"), "{text}");
        assert!(
            !text.contains('\x1b'),
            "a model name cannot drive the terminal"
        );
    }

    #[test]
    fn no_runs_say_so() {
        let text = frame(&[], Utc::now(), "home", 20);
        assert!(text.contains("(no runs yet)"), "{text}");
    }

    #[test]
    fn the_apis_run_view_reads_as_a_row() {
        let view = serde_json::json!({
            "id": "r", "conversation_id": "c", "state": "completed", "reason": null,
            "provider": "mock", "model": "m", "model_used": "m-2026", "iterations": 2,
            "usage": {"input_tokens": 10, "output_tokens": 2}, "cost": 0.5,
            "final_text": "hi", "error": null, "started_at": "2026-11-29T10:00:00Z",
            "updated_at": "2026-11-29T10:00:01Z", "finished_at": null,
            "cancel_requested_at": null, "resume_available": false
        });
        let row: Row = serde_json::from_value(view).unwrap();
        assert_eq!(row.usage.total(), 12);
        assert_eq!(row.model_used.as_deref(), Some("m-2026"));
    }
}
