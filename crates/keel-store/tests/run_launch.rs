//! A run's launch spec and worker are kept with it, and changed when a resumer takes it over.

mod common;

use common::{at, run_record};
use keel_core::Store;
use keel_core::store::Commit;
use keel_core::worker::Worker;
use keel_store::SqliteStore;

#[tokio::test]
async fn a_run_keeps_its_launch_and_worker() {
    keeps_its_launch_and_worker(&SqliteStore::open_temporary().await.unwrap()).await;
}

#[tokio::test]
async fn a_run_keeps_its_launch_and_worker_on_postgres() {
    if let Some(store) = keel_store::postgres::testing::store().await {
        keeps_its_launch_and_worker(&store).await;
    }
}

async fn keeps_its_launch_and_worker(store: &dyn Store) {
    let mut run = run_record("r1", "s1", at(0));
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);

    run.launch = Some(r#"{"provider":"mock","workspace":"/w"}"#.into());
    run.worker = Some(Worker {
        host: "box".into(),
        pid: 42,
        started: Some(123_456),
        namespace: Some("pid:[4026531836]".into()),
    });
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert_eq!(store.active_runs().await.unwrap(), [run.clone()]);

    run.worker = Some(Worker {
        host: "box".into(),
        pid: 43,
        started: None,
        namespace: None,
    });
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
}
