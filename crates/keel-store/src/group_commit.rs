//! Group commit: the writer's own task takes every write transaction ([`Connections::transaction`])
//! and, when several are waiting, runs them together as one SQLite transaction.
//!
//! A commit's cost is mostly the commit itself — the WAL frames of every page it dirtied —
//! and the boundaries of many runs dirty the same pages (the last leaf of each table and
//! index). Under load, one transaction for all the boundaries waiting writes those pages once.
//! Each commit of a group is wrapped in a savepoint: one that fails is rolled back alone and
//! gets its error; the others are kept. Every caller is answered only after the group's
//! `COMMIT`, so a boundary is durable before its run acts on it, as without grouping.
//!
//! The task owns the work once a commit is queued: a caller that stops waiting (a cancelled
//! run) does not leave a transaction half done; its commit lands or fails with the group's.
//!
//! [`Connections::transaction`]: crate::connections::Connections::transaction

use sqlx::sqlite::SqliteConnection;
use tokio::sync::{mpsc, oneshot};

use crate::batch::{Batch, ROLLBACK_TO_SAVEPOINT};
use crate::connections::{Writer, rollback};

/// Most commits in one transaction: bounds how long the first of a group waits for the last.
const MAX_GROUP: usize = 256;

/// A write transaction waiting for the writer.
pub(crate) struct Pending {
    /// Its batches, run in order.
    pub(crate) batches: Vec<Batch>,
    /// Where its outcome goes (see [`crate::connections::Connections::transaction`]).
    pub(crate) done: oneshot::Sender<Result<bool, String>>,
}

/// Starts the writer's task on the current runtime; it ends when every sender is dropped.
pub(crate) fn start(writer: Writer) -> mpsc::UnboundedSender<Pending> {
    let (commits, queue) = mpsc::unbounded_channel();
    tokio::spawn(run(writer, queue));
    commits
}

async fn run(writer: Writer, mut queue: mpsc::UnboundedReceiver<Pending>) {
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let commits = group
            .iter_mut()
            .map(|pending| std::mem::take(&mut pending.batches))
            .collect();
        let outcomes = write(&writer, commits).await;
        for (pending, outcome) in group.into_iter().zip(outcomes) {
            // A caller that stopped waiting has nobody to tell.
            let _ = pending.done.send(outcome);
        }
    }
}

/// Writes the commits as one transaction; one outcome per commit, in order.
async fn write(writer: &Writer, commits: Vec<Vec<Batch>>) -> Vec<Result<bool, String>> {
    match writer.lend().await {
        Ok(mut conn) => write_on(writer, &mut conn, commits).await,
        Err(e) => vec![Err(e.to_string()); commits.len()],
    }
}

/// [`write`] on the writer's connection, already lent. Marked unfinished meanwhile: a holder
/// cancelled midway leaves it to the next one to roll back.
pub(crate) async fn write_on(
    writer: &Writer,
    conn: &mut SqliteConnection,
    mut commits: Vec<Vec<Batch>>,
) -> Vec<Result<bool, String>> {
    let count = commits.len();
    writer.set_unfinished(true);
    let outcomes = if count == 1 {
        vec![alone(conn, commits.pop().unwrap_or_default()).await]
    } else {
        together(conn, commits).await
    };
    writer.set_unfinished(false);
    outcomes
}

/// One commit: `BEGIN IMMEDIATE` and `COMMIT` ride on its first and last batches, so a
/// typical boundary is a single trip to the connection's thread.
async fn alone(conn: &mut SqliteConnection, mut batches: Vec<Batch>) -> Result<bool, String> {
    let Some(last) = batches.len().checked_sub(1) else {
        return Ok(false);
    };
    batches[0].begin_immediate();
    batches[last].commit();
    let mut returned = false;
    for batch in batches {
        match batch.run(conn).await {
            Ok(row) => returned |= row.unwrap_or(false),
            Err(e) => {
                // Also when the failure was BEGIN itself: a ROLLBACK without a transaction
                // fails harmlessly.
                rollback(conn).await;
                return Err(e);
            }
        }
    }
    Ok(returned)
}

/// Several commits in one transaction, each in its own savepoint.
async fn together(
    conn: &mut SqliteConnection,
    commits: Vec<Vec<Batch>>,
) -> Vec<Result<bool, String>> {
    let count = commits.len();
    if let Err(e) = statement(conn, "BEGIN IMMEDIATE").await {
        return vec![Err(e); count];
    }
    let mut outcomes = Vec::with_capacity(count);
    for mut batches in commits {
        let Some(last) = batches.len().checked_sub(1) else {
            outcomes.push(Ok(false));
            continue;
        };
        batches[0].savepoint();
        batches[last].release();
        let mut outcome = Ok(false);
        for batch in batches {
            match batch.run(conn).await {
                Ok(row) => {
                    if let Ok(returned) = &mut outcome {
                        *returned |= row.unwrap_or(false);
                    }
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        if outcome.is_err()
            && let Err(e) = statement(conn, ROLLBACK_TO_SAVEPOINT).await
        {
            // The transaction is in an unknown state: none of the group is kept.
            rollback(conn).await;
            outcomes.push(outcome);
            let failure = format!("the group's transaction failed: {e}");
            let unwritten = count - outcomes.len();
            return outcomes
                .into_iter()
                .map(|o| o.and(Err(failure.clone())))
                .chain(std::iter::repeat_n(Err(failure.clone()), unwritten))
                .collect();
        }
        outcomes.push(outcome);
    }
    if let Err(e) = statement(conn, "COMMIT").await {
        rollback(conn).await;
        return outcomes
            .into_iter()
            .map(|o| o.and(Err(format!("cannot commit: {e}"))))
            .collect();
    }
    outcomes
}

async fn statement(conn: &mut SqliteConnection, sql: &'static str) -> Result<(), String> {
    sqlx::query(sql)
        .execute(conn)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::Connections;

    fn insert(id: i64) -> Vec<Batch> {
        let mut batch = Batch::new();
        batch.sql("INSERT INTO t (id) VALUES (");
        let n = batch.param(id).unwrap();
        batch.sql(&format!("${n})"));
        vec![batch]
    }

    async fn ids(conns: &Connections) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM t ORDER BY id")
            .fetch_all(&mut *conns.reader().await.unwrap())
            .await
            .unwrap()
    }

    async fn table() -> Connections {
        let conns = Connections::open_in_memory().await.unwrap();
        statement(
            &mut conns.writer().await.unwrap(),
            "CREATE TABLE t (id INTEGER PRIMARY KEY)",
        )
        .await
        .unwrap();
        conns
    }

    #[tokio::test]
    async fn a_failing_commit_of_a_group_is_rolled_back_alone() {
        let conns = table().await;
        let group = vec![insert(1), insert(2), insert(1), Vec::new(), insert(3)];
        let outcomes = write(&conns.writer_handle(), group).await;
        assert_eq!(outcomes[0], Ok(false));
        assert_eq!(outcomes[1], Ok(false));
        assert!(
            outcomes[2].as_ref().unwrap_err().contains("UNIQUE"),
            "{outcomes:?}"
        );
        assert_eq!(outcomes[3], Ok(false), "an empty commit is nothing to do");
        assert_eq!(outcomes[4], Ok(false));
        assert_eq!(ids(&conns).await, [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_commit_alone_fails_whole_and_the_next_goes_through() {
        let conns = table().await;
        let mut twice = insert(5);
        twice.extend(insert(5));
        let outcomes = write(&conns.writer_handle(), vec![twice]).await;
        assert!(outcomes[0].is_err());
        assert_eq!(conns.transaction(insert(6)).await, Ok(false));
        assert_eq!(
            ids(&conns).await,
            [6],
            "nothing of the failed commit is kept"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_all_land_once() {
        let conns = table().await;
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..200 {
            let conns = conns.clone();
            tasks.spawn(async move { conns.transaction(insert(id)).await });
        }
        while let Some(outcome) = tasks.join_next().await {
            assert_eq!(outcome.unwrap(), Ok(false));
        }
        assert_eq!(ids(&conns).await, (0..200).collect::<Vec<_>>());
    }
}
