//! One heartbeat timer for all of an agent's runs. A run racing a long step (a model call, a
//! tool, a human) writes its heartbeat at each tick and learns there whether another process
//! asked it to stop. Sharing the timer keeps a step from registering a timer of its own, which
//! on a quiet runtime wakes the timer thread every time: more than an iteration's own work.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

/// Ticks every interval while anyone listens, on a task started by the first listener.
#[derive(Clone, Debug)]
pub struct HeartbeatTicker {
    interval: Duration,
    ticks: Arc<OnceLock<watch::Receiver<u64>>>,
}

impl HeartbeatTicker {
    /// A ticker with this interval; nothing runs until [`HeartbeatTicker::subscribe`].
    pub fn new(interval: Duration) -> HeartbeatTicker {
        HeartbeatTicker {
            interval,
            ticks: Arc::default(),
        }
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A receiver whose `changed()` fires at the next tick and each one after. The first call
    /// starts the ticking task on the current tokio runtime; it ends once the ticker and every
    /// receiver are dropped.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        let interval = self.interval;
        self.ticks
            .get_or_init(|| {
                let (ticks, receiver) = watch::channel(0);
                tokio::spawn(async move {
                    let mut count = 0u64;
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep(interval) => {}
                            _ = ticks.closed() => return,
                        }
                        count += 1;
                        if ticks.send(count).is_err() {
                            return;
                        }
                    }
                });
                receiver
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn listeners_share_the_ticks() {
        let ticker = HeartbeatTicker::new(Duration::from_secs(30));
        let mut first = ticker.subscribe();
        let mut second = ticker.subscribe();
        let start = tokio::time::Instant::now();
        first.changed().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        second.changed().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(30), "the same tick");
        first.changed().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(60));
    }
}
