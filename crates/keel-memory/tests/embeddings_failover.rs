//! Embeddings over HTTP that outlast a dead endpoint: the chain retries the first (a refused
//! connection is a transient `network` failure), then asks the next endpoint serving the same
//! model, so the fact is stored with its vector and recalled by meaning, not degraded to full
//! text.

use std::sync::Arc;
use std::time::Duration;

use keel_core::recovery::RetryPolicy;
use keel_core::store::OWNER;
use keel_extensions::facts::Recall;
use keel_memory::embedding::EmbedderChain;
use keel_memory::{Memory, NewFact};
use keel_mock::{MockServer, Script};
use keel_platform::DaemonStore;
use keel_providers::{OpenAiConfig, OpenAiEmbeddings};
use keel_store::MemoryStore;

fn endpoint(base_url: String) -> Arc<OpenAiEmbeddings> {
    Arc::new(OpenAiEmbeddings::new(&OpenAiConfig::new(base_url), "mock-embed").unwrap())
}

#[tokio::test]
async fn a_dead_embeddings_endpoint_fails_over_to_the_next() {
    let server = MockServer::start_local(Script::new(vec![])).await.unwrap();
    // A port nothing listens on: every request to it is refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    let chain = EmbedderChain::new(
        endpoint(format!("http://127.0.0.1:{dead}/v1")),
        vec![endpoint(server.base_url())],
        retry,
    )
    .unwrap();
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Memory::new(store).with_embedder(Arc::new(chain));

    let remembered = memory
        .remember(
            OWNER,
            NewFact {
                text: "the deploy target is eu-west-3".into(),
                ..NewFact::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(remembered.embedding_error, None);
    assert!(
        remembered.fact.embedding.is_some(),
        "embedded by the second endpoint"
    );

    let recalled = memory
        .recall(OWNER, "now", "where are deployments targeted?")
        .await;
    assert!(
        recalled.prompt_section.contains("eu-west-3"),
        "{}",
        recalled.prompt_section
    );
    let degraded = recalled.detail["degraded"].to_string();
    assert!(
        !degraded.contains("embeddings unavailable"),
        "recall kept its vectors: {degraded}"
    );
}
