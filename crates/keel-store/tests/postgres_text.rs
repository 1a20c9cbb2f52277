//! Free text with NUL characters (a tool's binary output, say), which PostgreSQL's `TEXT` cannot
//! hold, reads back from the PostgreSQL store as it was written: a message's content, a run's
//! final text and error, an envelope row's arguments and output; text that merely looks escaped
//! too. `KEEL_TEST_PG` names the database (`skip` skips).

use keel_core::store::Commit;
use keel_core::{Message, Store};

mod common;
use common::{at, run_record, tool_call};

#[tokio::test]
async fn text_with_nul_characters_reads_back_as_written() {
    let Some(store) = keel_store::postgres::testing::store().await else {
        return;
    };
    let texts = [
        "binary\0output",
        "\0",
        "back\\slash \\0",
        "\u{FDD0}keel-escaped:not really",
    ];
    let messages: Vec<Message> = texts.iter().map(|text| Message::user(*text)).collect();
    let mut run = run_record("r1", "s1", at(0));
    run.final_text = Some(texts[0].into());
    run.error = Some(texts[2].into());
    let mut call = tool_call(&run, "call_1");
    call.arguments = texts[3].into();
    call.output = Some(texts[0].into());
    // Outside a checkpoint: a row of `tool_calls`.
    let commit = Commit {
        tool_calls: std::slice::from_ref(&call),
        ..Commit::new(&run, &messages)
    };
    store.commit(&commit).await.unwrap();
    let read: Vec<String> = store
        .messages("s1")
        .await
        .unwrap()
        .into_iter()
        .map(|stored| stored.message.content)
        .collect();
    assert_eq!(read, texts);
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert_eq!(store.tool_calls("r1").await.unwrap(), [call]);
    let title = store.session("s1").await.unwrap().unwrap().title.unwrap();
    assert_eq!(title, "binary\u{FFFD}output");
}
