//! The console bench's home: a SQLite store holding many runs, as the daemon writes them.
//!
//! Two steps. First a real `keel serve` (with `keel mock-provider` as the model, no latency)
//! runs a template: [`USERS`] users, one conversation each, `per_conversation` runs in each
//! (a `list_dir` call then an answer; the first conversation's last run is a long one of
//! `long_iterations` model calls), so every row is one the daemon wrote: runs, messages,
//! events, checkpoints, tool calls, token log. Then the daemon stops and the template is
//! copied with SQL in one transaction until the store holds the runs asked for: each copy
//! gets new conversation and run ids (a UUID's last 12 hex digits replaced), its timestamps
//! moved back in time (the copies spread over 20 days, newest first), and everything else as
//! the template has it — token-log months included, so every run counts in this month. The
//! tables copied are the ones with a `session_id` or `run_id` column (read from the schema,
//! so a new table comes along); `usage_log`'s month totals are multiplied to match.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, ensure};
use keel_mock::{Script, Step};
use serde_json::{Value, json};

/// The users owning the conversations: `user-0` … `user-4`.
pub const USERS: usize = 5;

/// How far back the oldest copy goes, in seconds (20 days).
const SPREAD_S: i64 = 20 * 24 * 3600;

/// What to seed.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Runs stored in all (rounded to a whole number of template copies).
    pub runs: usize,
    /// Runs in each conversation.
    pub per_conversation: usize,
    /// Model calls of the long run whose page is measured.
    pub long_iterations: u32,
}

/// A seeded home (deleted when dropped).
pub struct Seeded {
    /// The temporary directory holding the home (deleted with it).
    pub _dir: tempfile::TempDir,
    /// `KEEL_HOME`.
    pub home: PathBuf,
    /// An admin API key of the home.
    pub admin_key: String,
    /// The runs stored.
    pub runs: usize,
    /// The conversations stored.
    pub conversations: usize,
    /// The long run (the newest copy's).
    pub long_run: String,
    /// The long run's stored events.
    pub long_run_events: usize,
    /// The run halfway down the newest-first list (a later page's cursor).
    pub middle_run: String,
    /// Rows per table after seeding.
    pub tables: Vec<(String, i64)>,
    /// Seconds the seeding took (not measured by the bench).
    pub seconds: f64,
}

/// A child process that prints its URL on stdout (`keel serve`, `keel mock-provider`);
/// killed when dropped.
pub struct Process {
    child: Child,
    /// The URL it printed.
    pub url: String,
}

impl Process {
    /// Starts `command` and waits for the first line with a URL in it.
    pub fn start(mut command: Command) -> anyhow::Result<Process> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start a keel process")?;
        let mut reader = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            if let Some(at) = line.find("http://") {
                let url = line[at..].trim().trim_end_matches('/').to_string();
                std::thread::spawn(move || for _ in reader.lines() {});
                return Ok(Process { child, url });
            }
            line.clear();
        }
        let _ = child.kill();
        let _ = child.wait();
        anyhow::bail!("a keel process exited without printing its address")
    }

    /// Its process id, as /proc names it.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `keel` (the executable `exe`) in `home`, on its SQLite store.
pub fn keel(exe: &Path, home: &Path) -> Command {
    let mut command = Command::new(exe);
    command
        .env("KEEL_HOME", home)
        .env_remove("KEEL_DATABASE_URL");
    command
}

/// Runs `keel args…` in `home`; what it printed.
fn keel_output(exe: &Path, home: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = keel(exe, home).args(args).output()?;
    ensure!(
        output.status.success(),
        "keel {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// K − 1 `list_dir` calls, then an answer; no latency, usage given.
fn script(iterations: u32) -> Script {
    let mut steps: Vec<Step> = (1..iterations)
        .map(|i| {
            Step::tool_call("list_dir", json!({"path": "."}))
                .with_text(format!("Looking, step {i}."))
                .with_usage(400 + 60 * u64::from(i), 24)
        })
        .collect();
    steps
        .push(Step::text("Everything is listed.").with_usage(400 + 60 * u64::from(iterations), 16));
    Script::new(steps).with_per_turn()
}

/// `keel mock-provider` on `script`, its script file in `dir`.
fn mock(exe: &Path, dir: &Path, name: &str, script: &Script) -> anyhow::Result<Process> {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(script)?)?;
    let mut command = Command::new(exe);
    command
        .arg("mock-provider")
        .arg("--no-record")
        .arg("--script")
        .arg(&path);
    Process::start(command)
}

/// Writes `home`'s keel.toml for the model at `mock`.
fn configure(home: &Path, workspace: &Path, mock: &Process, sizes: &Sizes) -> anyhow::Result<()> {
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "provider = \"mock\"\nbase_url = \"{}\"\nworkspace = \"{}\"\nstream = false\n\
             max_iterations = {}\n\n[serve]\nworkers = {}\n",
            mock.url,
            workspace.display(),
            sizes.long_iterations.max(2) + 1,
            USERS,
        ),
    )?;
    Ok(())
}

/// One user's client of the template daemon.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    async fn conversation(&self) -> anyhow::Result<String> {
        let body: Value = self
            .http
            .post(format!("{}/v1/conversations", self.base))
            .bearer_auth(&self.key)
            .json(&json!({}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(body["id"]
            .as_str()
            .context("no conversation id")?
            .to_string())
    }

    /// Sends a message and waits for its run to end; the run's id.
    async fn run(&self, conversation: &str, text: &str) -> anyhow::Result<String> {
        let body: Value = self
            .http
            .post(format!(
                "{}/v1/conversations/{conversation}/messages?wait=true",
                self.base
            ))
            .bearer_auth(&self.key)
            .json(&json!({ "text": text }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let id = body["run_id"].as_str().or_else(|| body["id"].as_str());
        Ok(id
            .with_context(|| format!("no run id in {body}"))?
            .to_string())
    }
}

/// Seeds a home with `sizes.runs` runs, using the keel executable `exe`.
pub async fn seed(exe: &Path, sizes: &Sizes) -> anyhow::Result<Seeded> {
    ensure!(
        sizes.per_conversation >= 1,
        "--per-conversation must be at least 1"
    );
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("items.txt"), "one item per line\n")?;
    let admin_key = keel_output(exe, &home, &["keys", "create", "--admin"])?;
    let mut keys = Vec::new();
    for user in 0..USERS {
        let user = format!("user-{user}");
        keel_output(exe, &home, &["users", "set", &user, "--unlimited"])?;
        keys.push(keel_output(
            exe,
            &home,
            &["keys", "create", "--user", &user],
        )?);
    }
    let http = reqwest::Client::new();

    // The template's regular runs.
    let regular = mock(exe, dir.path(), "regular.json", &script(2))?;
    configure(&home, &workspace, &regular, sizes)?;
    let daemon = Process::start({
        let mut serve = keel(exe, &home);
        serve.args(["serve", "--bind", "127.0.0.1:0"]);
        serve
    })?;
    let mut tasks = tokio::task::JoinSet::new();
    for (user, key) in keys.iter().enumerate() {
        let client = Client {
            http: http.clone(),
            base: daemon.url.clone(),
            key: key.clone(),
        };
        // The first conversation's last run is the long one, made below.
        let regular_runs = sizes.per_conversation - usize::from(user == 0);
        tasks.spawn(async move {
            let conversation = client.conversation().await?;
            for i in 0..regular_runs {
                client
                    .run(&conversation, &format!("List the workspace, please ({i})."))
                    .await?;
            }
            anyhow::Ok((user, conversation))
        });
    }
    let mut first = None;
    while let Some(joined) = tasks.join_next().await {
        let (user, conversation) = joined??;
        if user == 0 {
            first = Some(conversation);
        }
    }
    drop(daemon);
    drop(regular);

    // The long run, on a model script of its own.
    let long = mock(exe, dir.path(), "long.json", &script(sizes.long_iterations))?;
    configure(&home, &workspace, &long, sizes)?;
    let daemon = Process::start({
        let mut serve = keel(exe, &home);
        serve.args(["serve", "--bind", "127.0.0.1:0"]);
        serve
    })?;
    let client = Client {
        http,
        base: daemon.url.clone(),
        key: keys[0].clone(),
    };
    let template_long = client
        .run(
            &first.context("no first conversation")?,
            "List the workspace, step by step, taking your time.",
        )
        .await?;
    drop(daemon);
    drop(long);

    let copies = sizes.runs.div_ceil(USERS * sizes.per_conversation).max(1);
    let db = home.join("keel.db");
    let (long_run, middle_run, tables) =
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let conn = rusqlite::Connection::open(&db)?;
            multiply(&conn, copies)?;
            let long_run: String = conn.query_row(
                "SELECT id FROM runs WHERE id = ?1 OR id IN (SELECT new FROM temp.ids \
                 WHERE old = ?1) ORDER BY started_at DESC LIMIT 1",
                [&template_long],
                |row| row.get(0),
            )?;
            let runs: i64 = conn.query_row("SELECT count(*) FROM runs", [], |row| row.get(0))?;
            let middle: String = conn.query_row(
                "SELECT id FROM runs ORDER BY started_at DESC, id DESC LIMIT 1 OFFSET ?1",
                [runs / 2],
                |row| row.get(0),
            )?;
            let tables = row_counts(&conn)?;
            Ok((long_run, middle, tables))
        })
        .await??;
    // The events the run page shows, as the store reads them (they are stored with the run's
    // checkpoints).
    let store = keel_store::SqliteStore::open(&home.join("keel.db")).await?;
    let long_run_events = keel_core::Store::events_after(&store, &long_run, 0)
        .await?
        .len();
    keel_core::Store::close(&store).await;
    let count = |table: &str| {
        tables
            .iter()
            .find(|(name, _)| name == table)
            .map_or(0, |(_, n)| *n as usize)
    };
    Ok(Seeded {
        runs: count("runs"),
        conversations: count("sessions"),
        _dir: dir,
        home,
        admin_key,
        long_run,
        long_run_events,
        middle_run,
        tables,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A table's columns: name, declared type, part of the primary key.
fn columns(
    conn: &rusqlite::Connection,
    table: &str,
) -> anyhow::Result<Vec<(String, String, bool)>> {
    let mut statement = conn.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, i64>(5)? > 0,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The store's own tables (no FTS index, no migrations' bookkeeping), sessions and runs first.
fn tables(conn: &rusqlite::Connection) -> anyhow::Result<Vec<String>> {
    let mut statement = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' \
         AND name NOT LIKE '\\_sqlx%' ESCAPE '\\' AND sql NOT LIKE 'CREATE VIRTUAL%' \
         AND name NOT LIKE 'messages\\_fts\\_%' ESCAPE '\\' \
         ORDER BY name <> 'sessions', name <> 'runs', name",
    )?;
    let names = statement.query_map([], |row| row.get::<_, String>(0))?;
    Ok(names.collect::<Result<_, _>>()?)
}

/// Rows in each table.
fn row_counts(conn: &rusqlite::Connection) -> anyhow::Result<Vec<(String, i64)>> {
    let mut counts = Vec::new();
    for table in tables(conn)? {
        let n: i64 = conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |row| {
            row.get(0)
        })?;
        if n > 0 {
            counts.push((table, n));
        }
    }
    Ok(counts)
}

/// Copies the template `copies − 1` times (see the module's doc), in one transaction.
fn multiply(conn: &rusqlite::Connection, copies: usize) -> anyhow::Result<()> {
    conn.execute_batch(
        "CREATE TEMP TABLE copies (k INTEGER PRIMARY KEY);
         CREATE TEMP TABLE ids (old TEXT NOT NULL, k INTEGER NOT NULL, new TEXT NOT NULL,
             PRIMARY KEY (old, k));",
    )?;
    if copies < 2 {
        return Ok(());
    }
    let spread = SPREAD_S / copies as i64;
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "WITH RECURSIVE c(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM c WHERE k < ?1) \
         INSERT INTO temp.copies SELECT k FROM c",
        [copies as i64 - 1],
    )?;
    for table in ["sessions", "runs"] {
        tx.execute_batch(&format!(
            "INSERT INTO temp.ids SELECT t.id, c.k, substr(t.id, 1, 24) || \
             printf('%012x', abs(random()) % 281474976710656) FROM {table} t, temp.copies c"
        ))?;
    }
    for table in tables(&tx)? {
        let columns = columns(&tx, &table)?;
        let owned = table == "sessions"
            || table == "runs"
            || columns
                .iter()
                .any(|(name, _, _)| name == "session_id" || name == "run_id");
        if !owned {
            continue;
        }
        let names: Vec<String> = columns.iter().map(|(n, _, _)| format!("\"{n}\"")).collect();
        let single_key = columns.iter().filter(|(_, _, pk)| *pk).count() == 1;
        let values: Vec<String> = columns
            .iter()
            .map(|(name, kind, pk)| {
                let column = format!("t.\"{name}\"");
                let is_id = (name == "id" && (table == "sessions" || table == "runs"))
                    || name.ends_with("_id")
                    || name.ends_with("_by");
                if *pk && single_key && kind.eq_ignore_ascii_case("INTEGER") {
                    "NULL".to_string()
                } else if is_id && !name.starts_with("tool_call") && name != "user_id" {
                    format!(
                        "COALESCE((SELECT new FROM temp.ids WHERE old = {column} AND k = c.k), \
                         {column})"
                    )
                } else if name.ends_with("_at") || name == "ts" {
                    format!(
                        "CASE WHEN {column} IS NULL THEN NULL ELSE strftime('%Y-%m-%dT%H:%M:%S', \
                         {column}, printf('-%d seconds', c.k * {spread})) || substr({column}, 20) \
                         END"
                    )
                } else {
                    column
                }
            })
            .collect();
        tx.execute_batch(&format!(
            "INSERT INTO \"{table}\" ({}) SELECT {} FROM \"{table}\" t, temp.copies c",
            names.join(", "),
            values.join(", ")
        ))
        .with_context(|| format!("cannot copy table {table}"))?;
    }
    let tokens: Vec<String> = columns(&tx, "usage_log")?
        .into_iter()
        .filter(|(name, _, _)| name.ends_with("_tokens"))
        .map(|(name, _, _)| format!("\"{name}\" = \"{name}\" * {copies}"))
        .collect();
    if !tokens.is_empty() {
        tx.execute_batch(&format!("UPDATE usage_log SET {}", tokens.join(", ")))?;
    }
    tx.commit()?;
    Ok(())
}
