//! The workers' signals on PostgreSQL: one `LISTEN keel_signals` connection per store, started
//! when someone first asks for [`StoreSignals::signals`], relaying every notification that
//! names a [`StoreSignal`] into a tokio broadcast. A lost connection is made again (after a
//! short wait that grows while the database stays away); what was notified meanwhile is lost,
//! which the workers' polling covers. The relay stops with the last clone of its store, or at
//! [`PgStore::close`].

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_platform::signals::CHANNEL;
use keel_platform::{StoreSignal, StoreSignals};
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{broadcast, oneshot};

use super::PgStore;

/// Signals a receiver may fall behind by before it lags (and polls instead).
const BACKLOG: usize = 1024;

/// The relay of one store (shared by its clones).
#[derive(Debug)]
pub(crate) struct Relay {
    sender: broadcast::Sender<StoreSignal>,
    /// Dropped (or sent) to stop the listening task; `None` until it starts, and after.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    started: std::sync::Once,
    /// The listening connection's backend process (0 while none), for the tests to cut it.
    backend: Arc<AtomicI32>,
}

impl Relay {
    /// A relay not listening yet.
    pub(crate) fn new() -> Relay {
        Relay {
            sender: broadcast::channel(BACKLOG).0,
            stop: Mutex::new(None),
            started: std::sync::Once::new(),
            backend: Arc::new(AtomicI32::new(0)),
        }
    }

    /// A receiver of every signal from now on, starting the listening task on `pool` the first
    /// time (outside a tokio runtime nothing can listen: `None`).
    fn subscribe(&self, pool: &PgPool) -> Option<broadcast::Receiver<StoreSignal>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let receiver = self.sender.subscribe();
        self.started.call_once(|| {
            let (stop, stopped) = oneshot::channel();
            *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(stop);
            runtime.spawn(listen(
                pool.clone(),
                self.sender.clone(),
                stopped,
                self.backend.clone(),
            ));
        });
        Some(receiver)
    }

    /// Stops the listening task, if it runs.
    pub(crate) fn stop(&self) {
        if let Some(stop) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Listens on `pool` until `stopped`, sending what it hears to `sender`; connects again when
/// the connection is lost.
async fn listen(
    pool: PgPool,
    sender: broadcast::Sender<StoreSignal>,
    mut stopped: oneshot::Receiver<()>,
    backend: Arc<AtomicI32>,
) {
    let mut wait = Duration::from_millis(50);
    loop {
        let connecting = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(CHANNEL).await?;
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut listener)
                .await?;
            Ok::<_, sqlx::Error>((listener, pid))
        };
        let connected = tokio::select! {
            connected = connecting => connected,
            _ = &mut stopped => return,
        };
        match connected {
            Ok((mut listener, pid)) => {
                backend.store(pid, Ordering::SeqCst);
                wait = Duration::from_millis(50);
                loop {
                    let next = tokio::select! {
                        next = listener.try_recv() => next,
                        _ = &mut stopped => return,
                    };
                    match next {
                        Ok(Some(notification)) => {
                            if let Some(signal) = StoreSignal::parse(notification.payload()) {
                                // No receiver now: nobody to tell.
                                let _ = sender.send(signal);
                            }
                        }
                        // The connection was lost (and what came meanwhile with it): a new one.
                        Ok(None) | Err(_) => break,
                    }
                }
                backend.store(0, Ordering::SeqCst);
            }
            Err(_) if pool.is_closed() => return,
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = &mut stopped => return,
        }
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// Many workers share the database: they take each other's queued runs, and hear each other's
/// signals through `LISTEN keel_signals`.
impl StoreSignals for PgStore {
    fn signals(&self) -> Option<broadcast::Receiver<StoreSignal>> {
        self.signals.subscribe(&self.pool)
    }

    fn shared(&self) -> bool {
        true
    }
}

impl PgStore {
    /// The backend process of the connection listening for signals (`None` while none), so a
    /// test can cut it and see the relay connect again.
    pub fn listening_backend(&self) -> Option<i32> {
        Some(self.signals.backend.load(Ordering::SeqCst)).filter(|pid| *pid != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notifies `signal` every few milliseconds until `receiver` hears it (a notification sent
    /// before the relay listens again is lost, as in production).
    async fn heard(
        store: &PgStore,
        receiver: &mut broadcast::Receiver<StoreSignal>,
        signal: StoreSignal,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(signal.payload())
                .execute(store.pool())
                .await
                .unwrap();
            let got = tokio::time::timeout(Duration::from_millis(100), async {
                loop {
                    match receiver.recv().await {
                        Ok(got) if got == signal => return true,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return false,
                    }
                }
            })
            .await;
            if got == Ok(true) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{signal:?} never arrived"
            );
        }
    }

    #[tokio::test]
    async fn notifications_arrive_and_survive_a_lost_connection() {
        let Some(store) = crate::postgres::testing::store().await else {
            return;
        };
        let mut receiver = store.signals().expect("PostgreSQL signals");
        heard(&store, &mut receiver, StoreSignal::Queued("s1".into())).await;
        // A stranger's notification on the channel is no signal; the next one still arrives.
        sqlx::query("SELECT pg_notify($1, 'hello')")
            .bind(CHANNEL)
            .execute(store.pool())
            .await
            .unwrap();
        heard(&store, &mut receiver, StoreSignal::Cancel("r1".into())).await;
        // The connection is cut under the relay: it listens again on a new one.
        let cut = store.listening_backend().expect("a listening connection");
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(cut)
            .execute(store.pool())
            .await
            .unwrap();
        heard(&store, &mut receiver, StoreSignal::Events("r1".into())).await;
        assert_ne!(store.listening_backend(), Some(cut));
        // A clone shares the relay: one listening connection per store.
        let clone = store.clone();
        let mut second = clone.signals().unwrap();
        heard(&clone, &mut second, StoreSignal::Freed("s1".into())).await;
        assert_eq!(clone.listening_backend(), store.listening_backend());
        store.close().await;
    }
}
