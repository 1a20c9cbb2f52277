//! The courier under an outage, in paused time: the platform answers 429 (`retry_after`) and
//! then 503 for a minute; afterwards every reply is delivered, each target's in order, none
//! lost and none twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use keel_channels::courier::{Courier, CourierPolicy};
use keel_channels::{DeliveryError, Outlet, Reply};
use keel_platform::{DaemonStore, Notice};
use keel_store::MemoryStore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// An outlet that refuses with a 429, then 503s until a minute after the first, then delivers.
struct Flaky {
    start: Instant,
    calls: Mutex<u32>,
    delivered: Mutex<Vec<(String, String)>>,
    refused: Mutex<Vec<&'static str>>,
}

#[async_trait]
impl Outlet for Flaky {
    fn channel(&self) -> &str {
        "fake"
    }

    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        if call == 1 {
            self.refused.lock().unwrap().push("429");
            return Err(DeliveryError::RetryAfter(
                Duration::from_secs(5),
                "429".into(),
            ));
        }
        if self.start.elapsed() < Duration::from_secs(65) {
            self.refused.lock().unwrap().push("503");
            return Err(DeliveryError::from_status(503, None, "503".into()));
        }
        let mut delivered = self.delivered.lock().unwrap();
        delivered.push((target.to_string(), reply.text().to_string()));
        Ok(format!("m{}", delivered.len()))
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_429_and_a_minute_of_503s_every_reply_arrives_in_order() {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    for n in 0..5 {
        for target in ["a", "b"] {
            store
                .add_notice(&Notice {
                    channel: "fake".into(),
                    target: target.into(),
                    session_id: String::new(),
                    body: format!("{target}{n}"),
                    at: Utc::now(),
                })
                .await
                .unwrap();
        }
    }
    let outlet = Arc::new(Flaky {
        start: Instant::now(),
        calls: Mutex::new(0),
        delivered: Mutex::new(Vec::new()),
        refused: Mutex::new(Vec::new()),
    });
    let policy = CourierPolicy {
        poll: Duration::from_millis(200),
        first_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(30),
        parallel: 4,
    };
    let courier = Courier::new(store.clone(), outlet.clone(), policy);
    let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
    tasks.spawn(courier.run(stop.clone(), tasks.clone()));

    let deadline = Instant::now() + Duration::from_secs(600);
    while outlet.delivered.lock().unwrap().len() < 10 {
        assert!(
            Instant::now() < deadline,
            "not delivered within ten minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing more comes: every row is marked delivered.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.cancel();
    tasks.close();
    tasks.wait().await;

    let delivered = outlet.delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), 10, "{delivered:?}");
    for target in ["a", "b"] {
        let texts: Vec<&str> = delivered
            .iter()
            .filter(|(t, _)| t == target)
            .map(|(_, text)| text.as_str())
            .collect();
        let expected: Vec<String> = (0..5).map(|n| format!("{target}{n}")).collect();
        assert_eq!(texts, expected, "{target}'s replies out of order or lost");
    }
    let refused = outlet.refused.lock().unwrap().clone();
    assert_eq!(refused[0], "429");
    assert!(
        refused.iter().filter(|r| **r == "503").count() >= 2,
        "{refused:?}"
    );
    // The backoff is capped, so the outage's end is noticed within `max_backoff`.
    assert!(
        outlet.start.elapsed() < Duration::from_secs(65 + 30 + 10),
        "{:?}",
        outlet.start.elapsed()
    );
    assert!(store.pending_outbox("fake", 100).await.unwrap().is_empty());
}
