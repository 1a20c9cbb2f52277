//! One write of the store (append messages to a session; for a commit, also upsert the run and
//! write the rest of its boundary), planned as statements that the writer's thread runs in one
//! transaction ([`crate::writer`]).
//!
//! A write is planned as a list of [`Batch`]es, each a few statements that share their first
//! parameters. Each chunk of up to [`ROWS_PER_QUERY`] messages is one batch that, for a run's
//! messages, first checks the session's lane fence ([`LANE_FENCE`]), then (1) creates the
//! session or bumps its count, `updated_at` and title, and (2) inserts the rows, numbering them
//! from the session's new count, so nothing is read back (a compaction summary's
//! `summary_of.last` also goes to the `summary_last` column, see
//! `migrations/0003_summaries.sql`). The last one also (3) upserts the run and reads whether it
//! was asked to stop, and (4) writes the boundary's checkpoint, envelope rows, events and journal
//! ([`crate::durability`]); only a boundary with hundreds of rows spills into further batches.
//!
//! Every statement of a batch shares its first parameters:
//!
//! | parameter | value |
//! | --- | --- |
//! | `$1` | session id |
//! | `$2` | now (message `created_at`, session `updated_at`, journal `updated_at`) |
//! | `$3` | title candidate (first non-internal user message), or NULL |
//! | `$4` | number of messages in this batch |
//! | `$5` | run id, or NULL |
//!
//! Every other value is bound once, numbered in the order the text first uses it, so the text and
//! its arguments are built together and cannot disagree. The writer prepares each distinct
//! statement once (its statement cache); the text varies only with the shape of the write (how
//! many messages, envelope rows and events, whether there is a run, a checkpoint, a journal).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use keel_core::store::{Commit, session_title};
use keel_core::{Message, Role, StoreError};
use rusqlite::types::Value;

use crate::codec::{MessageColumns, RunCounts, timestamp, worker_column};
use crate::connections::Connections;
use crate::param::Param;
use crate::{OrBackend, durability};

/// Messages per batch, and envelope rows per `INSERT`: keeps the number of distinct statement
/// texts small.
pub(crate) const ROWS_PER_QUERY: usize = 64;

/// Parameters a batch may reach before further statements go to a new batch: far below SQLite's
/// limit (32766) whatever the largest statement adds.
const PARAMS_PER_BATCH: usize = 4_000;

/// Parameters bound per message: role, content, tool_calls, tool_call_id, reasoning, meta,
/// summary_last.
const MESSAGE_PARAMS: usize = 7;

/// Statement text a batch reserves for each message it inserts (~240 bytes).
const MESSAGE_TEXT: usize = 256;

/// Statement text a batch reserves for the session's bump (~330 bytes).
const SESSION_TEXT: usize = 512;

/// Statement text a batch reserves for a boundary's run, checkpoint, envelope row, events and
/// token log (~3 KB for a typical one), so that writing it never grows the text: the growing
/// was a tenth of planning a boundary.
const BOUNDARY_TEXT: usize = 4096;

/// Parameters a batch reserves for a boundary (~65 for a typical one), for the same reason.
const BOUNDARY_PARAMS: usize = 80;

/// Creates the session `$1` at `$2` unless it exists.
pub(crate) const ENSURE_SESSION: &str = "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
     VALUES ($1, $2, $2, NULL, 0) ON CONFLICT (id) DO NOTHING";

const BUMP_SESSION: &str = "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
     VALUES ($1, $2, $2, $3, $4) \
     ON CONFLICT (id) DO UPDATE SET \
         updated_at = excluded.updated_at, \
         title = COALESCE(sessions.title, excluded.title), \
         message_count = sessions.message_count + excluded.message_count";

const INSERT_MESSAGES: &str = "INSERT INTO messages \
     (session_id, seq, run_id, role, content, tool_calls, tool_call_id, reasoning, meta, \
     summary_last, created_at) VALUES ";

/// Each row's seq: the session's count (already bumped by `$4`) minus `$4`, plus its position.
const ROW_SEQ: &str = "(SELECT message_count FROM sessions WHERE id = $1) - $4 + ";

/// `id` and `session_id` are `$5` and `$1`; the other columns follow. `cancel_requested_at` is
/// not among them: only `request_cancel` sets it.
const INSERT_RUN: &str = "INSERT INTO runs (id, session_id, state, reason, provider, model, \
     model_used, iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
     final_text, error, started_at, updated_at, finished_at, cost, heartbeat_at, \
     resume_available, event_count, launch, worker) VALUES ($5, $1";

/// Updates every column but `session_id`, `started_at` and `state`: the first two are index
/// keys, and `state` decides membership of the partial index `runs_active`; setting any of them,
/// even to the same value, would rewrite index pages on every save. Adds the boundary's events
/// to `event_count`. (Whether the run was asked to stop is read by [`CANCEL_REQUESTED`]: a
/// `RETURNING` clause here would make SQLite build and drop a temporary table for its one row,
/// at every commit.)
const UPSERT_RUN_TAIL: &str = ") ON CONFLICT (id) DO UPDATE SET \
     reason = excluded.reason, provider = excluded.provider, \
     model = excluded.model, model_used = excluded.model_used, \
     iterations = excluded.iterations, input_tokens = excluded.input_tokens, \
     output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens, \
     cache_write_tokens = excluded.cache_write_tokens, final_text = excluded.final_text, \
     error = excluded.error, updated_at = excluded.updated_at, finished_at = excluded.finished_at, \
     cost = excluded.cost, heartbeat_at = excluded.heartbeat_at, \
     resume_available = excluded.resume_available, launch = excluded.launch, \
     worker = excluded.worker, \
     event_count = runs.event_count + excluded.event_count";

/// Whether the committed run (`$5`), saved by the statements before, was asked to stop: the
/// commit's answer (see [`Batch::run`]).
const CANCEL_REQUESTED: &str = "SELECT cancel_requested_at IS NOT NULL FROM runs WHERE id = $5";

/// The lane fence (`migrations/0024_lane_fence_in_the_commit.sql`): a row when another run than
/// `$5` holds the lane of session `$1`, and the write must not store `$5`'s messages there.
const LANE_FENCE: &str = "SELECT 1 FROM session_lanes WHERE session_id = $1 AND run_id <> $5";

/// Why a write that [`LANE_FENCE`] stopped failed.
const FENCED: &str = "the session's lane is held by another run";

/// Takes the committed run (`$5`) out of its lane's queue, if it was queued.
const DEQUEUE_IN_COMMIT: &str = "DELETE FROM run_queue WHERE run_id = $5";

/// Statements under construction that share their parameters: the texts and the arguments,
/// numbered together.
pub(crate) struct Batch {
    /// The statements' texts, one after another.
    sql: String,
    /// Where each finished statement's text ends in `sql`; the text after the last is the
    /// statement being written (possibly empty).
    ends: Vec<usize>,
    args: Vec<Value>,
    /// Whether a statement inserts messages (see [`Batch::stores_messages`]).
    stores_messages: bool,
}

impl Batch {
    /// A batch with no statement and no parameter yet.
    pub(crate) fn new() -> Self {
        Batch::with_room(1024, 0)
    }

    /// An empty batch with room for `text` bytes of statements and `params` parameters.
    fn with_room(text: usize, params: usize) -> Self {
        Batch {
            sql: String::with_capacity(text),
            ends: Vec::with_capacity(16),
            args: Vec::with_capacity(params),
            stores_messages: false,
        }
    }

    /// A batch of the one statement `sql`, whose parameters `$1`, `$2`, … are bound next, in
    /// order, with [`Batch::bind`].
    pub(crate) fn of(sql: &str) -> Self {
        let mut batch = Batch::new();
        batch.sql(sql);
        batch
    }

    /// A batch with the shared parameters `$1`…`$5` bound (see the module documentation), with
    /// room for `messages` messages and, if `boundary`, a boundary.
    fn shared(shared: &Shared<'_>, messages: usize, boundary: bool) -> Self {
        let (text, params) = if boundary {
            (BOUNDARY_TEXT, BOUNDARY_PARAMS)
        } else {
            (0, 0)
        };
        let mut batch = Batch::with_room(
            SESSION_TEXT + messages * MESSAGE_TEXT + text,
            5 + messages * MESSAGE_PARAMS + params,
        );
        batch.param(shared.session_id);
        batch.param(shared.now.as_str());
        batch.param(shared.title.as_deref());
        // At most ROWS_PER_QUERY, so the cast cannot truncate.
        batch.param(messages as i64);
        batch.param(shared.run_id);
        batch
    }

    /// Binds `value` as the next parameter and returns its number; writes nothing.
    pub(crate) fn param<T: Param>(&mut self, value: T) -> usize {
        self.args.push(value.into_value());
        self.args.len()
    }

    /// Binds `value` as the next parameter, for [`Batch::of`].
    pub(crate) fn bind<T: Param>(mut self, value: T) -> Self {
        self.param(value);
        self
    }

    /// Binds `value` and writes `, $n` for it: the next value of a row or list.
    pub(crate) fn value<T: Param>(&mut self, value: T) -> &mut Self {
        let n = self.param(value);
        self.placeholder(n)
    }

    /// Writes `, $n`, a parameter bound earlier.
    pub(crate) fn placeholder(&mut self, n: usize) -> &mut Self {
        self.sql(", $").number(n)
    }

    /// Writes `n` in decimal: a placeholder's or a row's number. (Without `std::fmt`, whose
    /// machinery was most of the cost of writing a boundary's ~40 placeholders.)
    pub(crate) fn number(&mut self, n: usize) -> &mut Self {
        self.sql(itoa::Buffer::new().format(n))
    }

    /// Appends SQL text to the current statement.
    pub(crate) fn sql(&mut self, text: &str) -> &mut Self {
        self.sql.push_str(text);
        self
    }

    /// Ends the current statement, if any.
    pub(crate) fn end_statement(&mut self) -> &mut Self {
        if self.sql.len() > self.ends.last().copied().unwrap_or(0) {
            self.ends.push(self.sql.len());
        }
        self
    }

    /// Each statement's text, the unfinished one included, empty ones left out.
    fn statements(&self) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.ends
            .iter()
            .copied()
            .chain(std::iter::once(self.sql.len()))
            .map(move |end| {
                let text = &self.sql[start..end];
                start = end;
                text
            })
            .filter(|text| !text.is_empty())
    }

    /// Whether a statement inserts messages: the transaction then ends by indexing them for
    /// search ([`crate::search_index`]).
    pub(crate) fn stores_messages(&self) -> bool {
        self.stores_messages
    }

    /// True when `more` parameters would take the batch past [`PARAMS_PER_BATCH`].
    pub(crate) fn is_full(&self, more: usize) -> bool {
        self.args.len() + more > PARAMS_PER_BATCH
    }

    /// Parameters bound so far.
    #[cfg(test)]
    pub(crate) fn params(&self) -> usize {
        self.args.len()
    }

    /// The text built so far, statements separated by `;\n`.
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        self.statements().collect::<Vec<_>>().join(";\n")
    }

    /// Runs every statement of the batch on `conn`, each prepared once per connection; returns
    /// the value of the one column of the last row a statement returned, if any did. A row from
    /// [`LANE_FENCE`] refuses the whole write instead.
    pub(crate) fn run(&self, conn: &rusqlite::Connection) -> Result<Option<bool>, String> {
        let mut returned = None;
        for text in self.statements() {
            // Built only from this crate's constants and parameter numbers: no outside text.
            let mut statement = conn.prepare_cached(text).map_err(|e| e.to_string())?;
            let slots = slots(&statement, text);
            for (i, slot) in slots.iter().enumerate() {
                let index = i + 1;
                let value = slot
                    .and_then(|slot| self.args.get(slot))
                    .ok_or_else(|| format!("parameter {index} of `{text}` is not bound"))?;
                statement
                    .raw_bind_parameter(index, value)
                    .map_err(|e| e.to_string())?;
            }
            let mut rows = statement.raw_query();
            if let Some(row) = rows.next().map_err(|e| e.to_string())? {
                if text == LANE_FENCE {
                    return Err(FENCED.into());
                }
                returned = Some(row.get::<_, bool>(0).map_err(|e| e.to_string())?);
                while rows.next().map_err(|e| e.to_string())?.is_some() {}
            }
        }
        Ok(returned)
    }
}

/// Statement texts whose parameter slots a thread remembers before it forgets them all: the
/// texts vary only with the shape of a write, a few dozen in practice.
const REMEMBERED_TEXTS: usize = 256;

/// The slots of statement texts, by text.
type Slots = HashMap<String, Rc<[Option<usize>]>, BuildHasherDefault<TextHasher>>;

thread_local! {
    /// The slots of each statement text run on this thread (see [`slots`]).
    static SLOTS: RefCell<Slots> = RefCell::new(Slots::default());
}

/// Hashes a statement text by its length and its last bytes only (FNV-1a): texts of the same
/// shape differ there (their row and parameter numbers), and the map compares whole texts
/// anyway, so a collision costs a comparison, never a wrong answer. Hashing a whole text of a
/// kilobyte or more for each statement run would cost more than what the map saves.
#[derive(Default)]
struct TextHasher(u64);

impl std::hash::Hasher for TextHasher {
    fn write(&mut self, bytes: &[u8]) {
        let tail = &bytes[bytes.len().saturating_sub(32)..];
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in (bytes.len() as u64).to_le_bytes().iter().chain(tail) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// For each parameter of `statement` (prepared from `text`), in SQLite's order, the position
/// of its argument in [`Batch::args`] (`$n` is `n - 1`; `None` for a name that is not `$n`).
///
/// SQLite numbers a statement's distinct names in the order the text first uses them, so the
/// answer depends on the text alone; it is asked once per text and thread, since asking SQLite
/// for each parameter's name walks the statement's list of names, every commit (a twentieth of
/// the writer's time at 100 conversations).
fn slots(statement: &rusqlite::Statement<'_>, text: &str) -> Rc<[Option<usize>]> {
    SLOTS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(slots) = cache.get(text) {
            return slots.clone();
        }
        let slots: Rc<[Option<usize>]> = (1..=statement.parameter_count())
            .map(|index| {
                statement
                    .parameter_name(index)
                    .and_then(|name| name.strip_prefix('$'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| n.checked_sub(1))
            })
            .collect();
        if cache.len() >= REMEMBERED_TEXTS {
            cache.clear();
        }
        cache.insert(text.to_owned(), slots.clone());
        slots
    })
}

/// The list of batches a write is planned as, each started with the shared parameters.
pub(crate) struct Plan<'a> {
    shared: Shared<'a>,
    batches: Vec<Batch>,
}

impl Plan<'_> {
    /// The batch to add a statement of `params` parameters to: the last one, or a new one when
    /// it is full.
    pub(crate) fn batch(&mut self, params: usize) -> &mut Batch {
        if self.batches.last().is_none_or(|last| last.is_full(params)) {
            self.batches.push(Batch::shared(&self.shared, 0, false));
        }
        let last = self.batches.len() - 1;
        &mut self.batches[last]
    }
}

/// The values every batch of a write binds first.
struct Shared<'a> {
    session_id: &'a str,
    now: String,
    title: Option<String>,
    run_id: Option<&'a str>,
}

/// Appends `messages` to `session_id` (created if missing) and, for a commit, writes the rest of
/// it, in one transaction on the writer. Returns whether the committed run was asked to stop
/// (false without a commit). `doing` names the whole operation in error messages.
pub(crate) async fn write(
    conns: &Connections,
    session_id: &str,
    run_id: Option<&str>,
    messages: &[Message],
    commit: Option<&Commit<'_>>,
    doing: &(dyn Fn() -> String + Sync),
) -> Result<bool, StoreError> {
    let batches = plan(session_id, run_id, messages, commit)?;
    conns
        .transaction(batches)
        .await
        .map(|returned| returned.unwrap_or(false))
        .or_backend(doing)
}

/// The batches of a write (see [`write`]).
pub(crate) fn plan<'a>(
    session_id: &'a str,
    run_id: Option<&'a str>,
    messages: &[Message],
    commit: Option<&Commit<'_>>,
) -> Result<Vec<Batch>, StoreError> {
    let counts = commit.map(|commit| RunCounts::of(commit.run)).transpose()?;
    let shared = Shared {
        session_id,
        now: timestamp(chrono::Utc::now()),
        title: messages
            .iter()
            .find(|m| m.role == Role::User && !m.is_internal())
            .map(|m| session_title(&m.content)),
        run_id,
    };
    let mut batches = Vec::with_capacity(messages.len().div_ceil(ROWS_PER_QUERY).max(1));
    // The last batch also takes the boundary, if there is one.
    let boundary = commit.is_some();
    if messages.is_empty() {
        let mut batch = Batch::shared(&shared, 0, boundary);
        batch.sql(ENSURE_SESSION);
        batches.push(batch);
    }
    let chunks = messages.len().div_ceil(ROWS_PER_QUERY);
    for (i, chunk) in messages.chunks(ROWS_PER_QUERY).enumerate() {
        let mut batch = Batch::shared(&shared, chunk.len(), boundary && i + 1 == chunks);
        add_messages(&mut batch, chunk, run_id.is_some())?;
        batches.push(batch);
    }
    let mut plan = Plan { shared, batches };
    if let (Some(commit), Some(counts)) = (commit, counts) {
        add_run(plan.batch(0), commit, &counts)?;
        durability::add_boundary(&mut plan, commit)?;
    }
    Ok(plan.batches)
}

/// Checks the lane fence if the messages are a run's (`fenced`), bumps the session by
/// `chunk.len()` and inserts the chunk's rows, one statement each: a multi-row insert may fail
/// halfway, so SQLite would copy each page it touches into a statement journal first. (The
/// `k`-th row's text is the same in every batch, so the writer prepares one statement per row
/// position.)
fn add_messages(batch: &mut Batch, chunk: &[Message], fenced: bool) -> Result<(), StoreError> {
    batch.stores_messages = true;
    if fenced {
        batch.sql(LANE_FENCE).end_statement();
    }
    batch.sql(BUMP_SESSION);
    for (row, message) in chunk.iter().enumerate() {
        batch.end_statement().sql(INSERT_MESSAGES);
        batch.sql("($1, ").sql(ROW_SEQ).number(row + 1).sql(", $5");
        let columns = MessageColumns::encode(message)?;
        batch
            .value(columns.role)
            .value(message.content.as_str())
            .value(columns.tool_calls)
            .value(message.tool_call_id.as_deref())
            .value(columns.reasoning)
            .value(columns.meta)
            .value(columns.summary_last)
            .sql(", $2)");
    }
    Ok(())
}

/// Upserts the commit's run (see [`UPSERT_RUN_TAIL`]), then sets its state and moves it to
/// another session or start time, each only if it changed.
fn add_run(batch: &mut Batch, commit: &Commit<'_>, counts: &RunCounts) -> Result<(), StoreError> {
    let run = commit.run;
    let events = i64::try_from(commit.events.len()).unwrap_or(i64::MAX);
    let state = batch.param(run.state.as_str());
    // A run that ends or waits for a person tells its conversation's channel, in this commit.
    if run.state.is_terminal() || run.state == keel_core::AgentState::WaitingOnHuman {
        crate::channels::add_outbox_row(batch, state, &timestamp(run.updated_at));
    }
    batch.end_statement().sql(INSERT_RUN);
    batch.placeholder(state);
    batch
        .value(run.reason.map(|reason| reason.as_str()))
        .value(run.provider.as_str())
        .value(run.model.as_str())
        .value(run.model_used.as_deref())
        .value(counts.iterations)
        .value(counts.input_tokens)
        .value(counts.output_tokens)
        .value(counts.cache_read_tokens)
        .value(counts.cache_write_tokens)
        .value(run.final_text.as_deref())
        .value(run.error.as_deref());
    let started = batch.param(timestamp(run.started_at));
    batch
        .placeholder(started)
        .value(timestamp(run.updated_at))
        .value(run.finished_at.map(timestamp))
        .value(run.cost)
        .value(run.heartbeat_at.map(timestamp))
        .value(run.resume_available)
        .value(events)
        .value(run.launch.as_deref())
        .value(worker_column(run)?)
        .sql(UPSERT_RUN_TAIL)
        .end_statement();
    batch
        .sql("UPDATE runs SET state = $")
        .number(state)
        .sql(" WHERE id = $5 AND state <> $")
        .number(state)
        .end_statement()
        .sql("UPDATE runs SET session_id = $1, started_at = $")
        .number(started)
        .sql(" WHERE id = $5 AND (session_id <> $1 OR started_at <> $")
        .number(started)
        .sql(")");
    // A run that came from its lane's queue leaves it in the commit that stores its message
    // (a primary-key probe of a table that holds only waiting messages).
    batch.end_statement().sql(DEQUEUE_IN_COMMIT);
    if run.state.is_terminal() {
        batch.end_statement().sql(crate::lanes::RELEASE_IN_COMMIT);
    }
    batch.end_statement().sql(CANCEL_REQUESTED);
    Ok(())
}

#[cfg(test)]
#[path = "batch_tests.rs"]
pub(crate) mod tests;
