//! The context a new run reads (`Store::context_messages`): every message after those the latest
//! compaction summary replaces, pinned ones kept, held to one contract on `SqliteStore` (in memory
//! and on a file) and `MemoryStore`. Moved from `contract.rs`.

mod common;
use common::{
    at, memory, openai_run_record as run_record, postgres, sqlite_file, sqlite_in_memory,
};
use keel_core::tokens::Encoding;
use keel_core::{InternalReason, Message, SeqRange, TokenCount, ToolCall};
use keel_platform::DaemonStore;

macro_rules! context_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn the_context_starts_after_the_latest_summary() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                context_messages_on(&store).await;
            }
        }
    };
}

context_tests!(memory_store, memory());
context_tests!(sqlite_in_memory_store, sqlite_in_memory());
context_tests!(sqlite_file_store, sqlite_file());
context_tests!(postgres_store, postgres());

/// A compaction summary standing in for messages `first..=last`, with a cached token count.
fn summary(first: u64, last: u64) -> Message {
    let mut message = Message::internal_user(
        format!("Summary of messages {first} to {last}."),
        InternalReason::CompactionSummary,
    );
    message.meta.summary_of = Some(SeqRange { first, last });
    message.meta.tokens = Some(TokenCount {
        encoding: Encoding::O200kBase,
        count: 12,
    });
    message
}

/// Checks that the context of `session` is exactly its stored messages from seq `from` on, and
/// returns their seqs.
async fn context_from(store: &dyn DaemonStore, session: &str, from: u64) -> Vec<u64> {
    let context = store.context_messages(session).await.unwrap();
    let mut expected = store.messages(session).await.unwrap();
    expected.retain(|stored| stored.seq >= from);
    assert_eq!(context, expected, "context of `{session}` from seq {from}");
    context.iter().map(|stored| stored.seq).collect()
}

async fn context_messages_on(store: &dyn DaemonStore) {
    assert!(store.context_messages("nobody").await.unwrap().is_empty());
    store.ensure_session("empty").await.unwrap();
    assert!(store.context_messages("empty").await.unwrap().is_empty());

    // No summary: every message.
    let mut counted = Message::assistant("a1");
    counted.meta.tokens = Some(TokenCount {
        encoding: Encoding::Cl100kBase,
        count: 7,
    });
    let opening = [
        Message::system("be brief"),
        Message::user("q1"),
        counted,
        Message::user("q2"),
    ];
    store
        .append_messages("s", Some("r1"), &opening)
        .await
        .unwrap();
    assert_eq!(context_from(store, "s", 1).await, [1, 2, 3, 4]);

    // One summary (seq 5, replacing 2..=3): from seq 4 on, the summary among them.
    store
        .save_run(
            &run_record("r2", "s", at(1)),
            &[summary(2, 3), Message::assistant("a2")],
        )
        .await
        .unwrap();
    assert_eq!(context_from(store, "s", 4).await, [4, 5, 6]);
    let context = store.context_messages("s").await.unwrap();
    // Metadata round-trips, the summary's range and every cached token count included.
    assert_eq!(context[1].message, summary(2, 3));
    assert_eq!(context[1].run_id.as_deref(), Some("r2"));
    let all: Vec<Message> = store
        .messages("s")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message)
        .collect();
    assert_eq!(all[..4], opening);

    // Two summaries: only the latest counts (seq 8, replacing 2..=6).
    let more = [Message::user("q3"), summary(2, 6), Message::assistant("a3")];
    store.append_messages("s", None, &more).await.unwrap();
    assert_eq!(context_from(store, "s", 7).await, [7, 8, 9]);
    // The latest by position, even when it replaces less than an earlier one did.
    store
        .append_messages("s", None, &[summary(1, 4)])
        .await
        .unwrap();
    assert_eq!(context_from(store, "s", 5).await, [5, 6, 7, 8, 9, 10]);
    assert_eq!(store.messages("s").await.unwrap().len(), 10);

    // A summary whose range ends at the last message: the summary alone, then what follows.
    let turns = [
        Message::user("q"),
        Message::assistant("a"),
        Message::user("q"),
    ];
    store.append_messages("t", None, &turns).await.unwrap();
    store
        .append_messages("t", None, &[summary(1, 3)])
        .await
        .unwrap();
    assert_eq!(context_from(store, "t", 4).await, [4]);
    store
        .append_messages("t", None, &[Message::assistant("after")])
        .await
        .unwrap();
    assert_eq!(context_from(store, "t", 4).await, [4, 5]);

    // A summary deep in a long batch (written in several statements by a SQL store).
    let mut long: Vec<Message> = (0..200)
        .map(|i| Message::assistant(i.to_string()))
        .collect();
    long[150] = summary(1, 150);
    store.append_messages("long", None, &long).await.unwrap();
    assert_eq!(context_from(store, "long", 151).await.len(), 50);
    // Pinned messages survive compaction: the context starts at the first pinned one the
    // latest summary replaced (a run sends only the pinned ones of those)...
    let mut rule = Message::user("Always answer in French.");
    rule.meta.pinned = true;
    let pins = [
        Message::user("q1"),
        rule,
        Message::assistant("a1"),
        summary(1, 3),
        Message::assistant("a2"),
    ];
    store.append_messages("p", None, &pins).await.unwrap();
    assert_eq!(context_from(store, "p", 2).await, [2, 3, 4, 5]);
    // ...at the call of a pinned result, so the call comes with it...
    let mut result = Message::tool_result("c1", "found it");
    result.meta.pinned = true;
    let exchange = [
        Message::user("q1"),
        Message::user("q2"),
        Message::assistant_with_calls(
            "",
            vec![ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{}".into(),
            }],
        ),
        result,
        Message::assistant("a1"),
        summary(1, 5),
    ];
    store.append_messages("x", None, &exchange).await.unwrap();
    assert_eq!(context_from(store, "x", 3).await, [3, 4, 5, 6]);
    // ...and a pin after the summary's range changes nothing.
    let mut late = Message::user("late");
    late.meta.pinned = true;
    store
        .append_messages("x", None, &[late, summary(1, 6)])
        .await
        .unwrap();
    assert_eq!(context_from(store, "x", 3).await, [3, 4, 5, 6, 7, 8]);

    // Other sessions' summaries do not count.
    store
        .append_messages("u", None, &[Message::user("fresh")])
        .await
        .unwrap();
    assert_eq!(context_from(store, "u", 1).await, [1]);
}
