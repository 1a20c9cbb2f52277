//! The console bench's measurement: a `keel serve` child on a seeded home, a console session
//! signed in as a browser does (the sign-in form's cookie and token, then the key posted), and
//! each page asked for `requests` times in turn, one request at a time over one kept-alive
//! connection; each latency is from sending the request to the whole body read. The daemon's
//! CPU time (user + system, from /proc, 10 ms ticks) over a page's requests is divided among
//! them; it includes whatever else the idle daemon does meanwhile (nothing runs).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use reqwest::header::{CONTENT_TYPE, COOKIE, HeaderMap, SET_COOKIE};

use crate::seed::{Process, Seeded, keel};

/// How a page is asked for.
#[derive(Clone, Copy, Debug)]
enum Auth {
    /// With the console session's cookie.
    Session,
    /// With the admin key as a bearer token (the API's `/metrics`).
    AdminKey,
}

/// One page's measurement.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was asked for.
    pub name: String,
    /// Requests measured.
    pub requests: usize,
    /// Latency percentiles and maximum, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// The daemon's CPU time per request, in microseconds.
    pub cpu_us: f64,
    /// The body's size, in bytes (the last one's).
    pub bytes: usize,
}

/// What one home measured.
pub struct Measured {
    /// One row per page.
    pub rows: Vec<Row>,
    /// The daemon's resident memory at the end, and its peak, in MiB.
    pub rss_mib: (f64, f64),
    /// The generator's own CPU time over the measurement, in milliseconds.
    pub generator_cpu_ms: f64,
}

/// The pages measured, by name: the console's lists, usage and run page, and `/metrics`.
fn pages(seeded: &Seeded) -> Vec<(String, String, Auth)> {
    let mut pages = vec![
        ("home (waiting + running)".to_string(), "/".to_string()),
        ("runs, first page".into(), "/runs".into()),
        (
            "runs, page at the middle".into(),
            format!("/runs?before={}", seeded.middle_run),
        ),
        ("runs, one user's".into(), "/runs?user=user-3".into()),
        ("runs, state=error".into(), "/runs?state=error".into()),
        ("conversations, first page".into(), "/conversations".into()),
        ("usage, this month".into(), "/usage".into()),
        (
            format!("run page ({} events)", seeded.long_run_events),
            format!("/runs/{}", seeded.long_run),
        ),
    ]
    .into_iter()
    .map(|(name, path)| (name, path, Auth::Session))
    .collect::<Vec<_>>();
    pages.push(("/metrics scrape".into(), "/metrics".into(), Auth::AdminKey));
    pages
}

/// A process's CPU time (user + system) from /proc (`self` for this one).
pub fn cpu_time_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A process's resident memory and its peak, in KiB, from /proc.
fn rss_kib_of(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The value of cookie `name` among a response's `Set-Cookie` headers.
fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(SET_COOKIE).iter().find_map(|value| {
        let text = value.to_str().ok()?;
        let pair = text.split(';').next()?;
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name && !value.is_empty()).then(|| value.to_string())
    })
}

/// `value` percent-encoded for a form body.
fn form_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Signs in to the console at `base` with `key`: the session cookie (`keel_session=…`).
async fn sign_in(http: &reqwest::Client, base: &str, key: &str) -> anyhow::Result<String> {
    let form = http.get(format!("{base}/sign-in")).send().await?;
    let token = set_cookie(form.headers(), "keel_sign_in").context("no sign-in cookie")?;
    let signed = http
        .post(format!("{base}/sign-in"))
        .header(COOKIE, format!("keel_sign_in={token}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!(
            "key={}&next=%2F&csrf={}",
            form_value(key),
            form_value(&token)
        ))
        .send()
        .await?;
    let session = set_cookie(signed.headers(), "keel_session")
        .with_context(|| format!("signing in answered {}", signed.status()))?;
    Ok(format!("keel_session={session}"))
}

/// The `p`th percentile of sorted `values` (nearest rank).
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// Measures every page `requests` times on `seeded`'s home, with the keel executable `exe`.
pub async fn measure(exe: &Path, seeded: &Seeded, requests: usize) -> anyhow::Result<Measured> {
    ensure!(requests >= 1, "--requests must be at least 1");
    let daemon = Process::start({
        let mut serve = keel(exe, &seeded.home);
        serve.args(["serve", "--bind", "127.0.0.1:0"]);
        serve
    })?;
    let pid = daemon.pid();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let cookie = sign_in(&http, &daemon.url, &seeded.admin_key).await?;
    let generator_before = cpu_time_of("self");
    let mut rows = Vec::new();
    for (name, path, auth) in pages(seeded) {
        let get = || {
            let request = http.get(format!("{}{path}", daemon.url));
            match auth {
                Auth::Session => request.header(COOKIE, &cookie),
                Auth::AdminKey => request.bearer_auth(&seeded.admin_key),
            }
        };
        // Unmeasured: the statements prepared, the pages cached as a second visit finds them.
        for _ in 0..3 {
            let response = get().send().await?;
            let status = response.status();
            ensure!(status.is_success(), "GET {path} answered {status}");
            response.bytes().await?;
        }
        let mut latencies = Vec::with_capacity(requests);
        let mut bytes = 0;
        let cpu_before = cpu_time_of(&pid);
        for _ in 0..requests {
            let sent = Instant::now();
            let response = get().send().await?;
            let status = response.status();
            let body = response.bytes().await?;
            latencies.push(sent.elapsed());
            ensure!(status.is_success(), "GET {path} answered {status}");
            bytes = body.len();
        }
        let cpu = cpu_time_of(&pid).saturating_sub(cpu_before);
        latencies.sort();
        rows.push(Row {
            name,
            requests,
            p50_ms: percentile(&latencies, 50.0),
            p99_ms: percentile(&latencies, 99.0),
            max_ms: percentile(&latencies, 100.0),
            cpu_us: cpu.as_secs_f64() * 1e6 / requests as f64,
            bytes,
        });
    }
    let generator_cpu_ms = cpu_time_of("self")
        .saturating_sub(generator_before)
        .as_secs_f64()
        * 1e3;
    let (rss, peak) = rss_kib_of(&pid);
    Ok(Measured {
        rows,
        rss_mib: (rss as f64 / 1024.0, peak as f64 / 1024.0),
        generator_cpu_ms,
    })
}
