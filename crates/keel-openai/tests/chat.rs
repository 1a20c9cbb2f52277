//! `POST /v1/chat/completions` in process over a real socket: whole and streamed answers with
//! usage and reasoning, a conversation continued by its history over three turns, a named
//! conversation, a repeated request answered from its one run, and a stream the client drops
//! then asks for again.

mod common;

use common::{Answer, Daemon, body};
use futures::StreamExt;
use keel_core::Store;
use keel_mock::{Script, Step};
use keel_openai::OpenAiOptions;
use serde_json::{Value, json};

#[tokio::test]
async fn a_whole_answer_and_a_streamed_one_with_usage_and_reasoning() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("Hello there.").with_usage(11, 3),
        Step::text("Streamed answer.")
            .with_reasoning("Think first.")
            .with_usage(7, 5),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let whole = daemon
        .chat(&key, body("keel", &[("user", "hi")]), &[])
        .await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(whole.body["object"], "chat.completion");
    assert_eq!(whole.content(), "Hello there.");
    assert_eq!(whole.body["choices"][0]["finish_reason"], "stop");
    assert_eq!(whole.body["usage"]["prompt_tokens"], 11);
    assert_eq!(whole.body["usage"]["completion_tokens"], 3);
    assert_eq!(whole.body["usage"]["total_tokens"], 14);
    let run = daemon.store.run(&whole.run_id()).await.unwrap().unwrap();
    assert_eq!(run.final_text.as_deref(), Some("Hello there."));

    let mut streamed = body("keel", &[("user", "and streamed?")]);
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let answer = daemon.chat(&key, streamed, &[]).await;
    assert_eq!(answer.status, 200);
    let chunks = answer.body.as_array().unwrap();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(answer.streamed(), "Streamed answer.");
    assert_eq!(answer.deltas("reasoning_content"), "Think first.");
    assert_eq!(chunks.last().unwrap(), &json!("[DONE]"));
    let usage = &chunks[chunks.len() - 2];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 12);
    let finish = &chunks[chunks.len() - 3];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(
        chunks
            .iter()
            .take(chunks.len() - 1)
            .all(|c| c["object"] == "chat.completion.chunk")
    );
}

#[tokio::test]
async fn three_turns_continue_one_conversation_by_their_history() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let system = ("system", "You are a pirate.");
    let first = daemon
        .chat(&key, body("keel", &[system, ("user", "a")]), &[])
        .await;
    let second = daemon
        .chat(
            &key,
            body(
                "keel",
                &[system, ("user", "a"), ("assistant", "one"), ("user", "b")],
            ),
            &[],
        )
        .await;
    let third = daemon
        .chat(
            &key,
            body(
                "keel",
                &[
                    system,
                    ("user", "a"),
                    ("assistant", "one"),
                    ("user", "b"),
                    ("assistant", "two"),
                    ("user", "c"),
                ],
            ),
            &[],
        )
        .await;
    assert_eq!(
        [first.content(), second.content(), third.content()],
        ["one", "two", "three"]
    );
    let session = |answer: &Answer| {
        let store = daemon.store.clone();
        let run = answer.run_id();
        async move { store.run(&run).await.unwrap().unwrap().session_id }
    };
    let conversation = session(&first).await;
    assert_eq!(session(&second).await, conversation);
    assert_eq!(session(&third).await, conversation);
    // keel's own history: the model saw the earlier turns; the client's system text is not
    // keel's prompt.
    let requests = daemon.provider.requests();
    let last = serde_json::to_string(&requests.last().unwrap().messages).unwrap();
    assert!(
        last.contains("\"one\"") && last.contains("\"two\""),
        "{last}"
    );
    assert!(!last.contains("pirate"), "{last}");

    // Another user sending the very same history starts a conversation of their own.
    let bob = daemon.key("bob").await;
    let theirs = daemon
        .chat(
            &bob,
            body(
                "keel",
                &[system, ("user", "a"), ("assistant", "one"), ("user", "b")],
            ),
            &[],
        )
        .await;
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    assert_ne!(session(&theirs).await, conversation);
}

#[tokio::test]
async fn a_repeated_request_is_answered_from_its_one_run_within_the_window() {
    let daemon = Daemon::start(Script::new(vec![Step::text("first"), Step::text("second")])).await;
    let key = daemon.key("ann").await;
    let request = body("keel", &[("user", "same words")]);
    let one = daemon.chat(&key, request.clone(), &[]).await;
    let again = daemon.chat(&key, request.clone(), &[]).await;
    assert_eq!(one.run_id(), again.run_id());
    assert_eq!(again.content(), "first");
    assert_eq!(
        daemon.provider.requests().len(),
        1,
        "one run, one model call"
    );

    // With no window, the same words after the run ended are a new turn (a new chat).
    let daemon = Daemon::start_with(
        Script::new(vec![Step::text("first"), Step::text("second")]),
        OpenAiOptions {
            redelivery_window: chrono::Duration::zero(),
        },
        64 * 1024,
    )
    .await;
    let key = daemon.key("ann").await;
    let one = daemon.chat(&key, request.clone(), &[]).await;
    let two = daemon.chat(&key, request.clone(), &[]).await;
    assert_ne!(one.run_id(), two.run_id());
    assert_eq!(two.content(), "second");
    let conversation = |run: String| {
        let store = daemon.store.clone();
        async move { store.run(&run).await.unwrap().unwrap().session_id }
    };
    let (first_chat, second_chat) = (
        conversation(one.run_id()).await,
        conversation(two.run_id()).await,
    );
    assert_ne!(first_chat, second_chat, "two chats that began alike");
    // Each chat's next turn goes on in its own conversation: the answer it shows tells them
    // apart.
    let next = |answer: &str| {
        body(
            "keel",
            &[
                ("user", "same words"),
                ("assistant", answer),
                ("user", "more"),
            ],
        )
    };
    let daemon_script_left = daemon.chat(&key, next("first"), &[]).await;
    assert_eq!(conversation(daemon_script_left.run_id()).await, first_chat);
}

#[tokio::test]
async fn a_named_conversation_is_the_callers_own_and_another_users_id_is_only_a_name() {
    let daemon = Daemon::start(Script::new(vec![Step::text("ok")]).with_per_turn()).await;
    let ann = daemon.key("ann").await;
    let bob = daemon.key("bob").await;
    let named = [("x-keel-conversation", "project-x")];
    let one = daemon
        .chat(&ann, body("keel", &[("user", "first")]), &named)
        .await;
    let two = daemon
        .chat(&ann, body("keel", &[("user", "second")]), &named)
        .await;
    let session = |answer: &Answer| {
        let store = daemon.store.clone();
        let run = answer.run_id();
        async move { store.run(&run).await.unwrap().unwrap().session_id }
    };
    let anns = session(&one).await;
    assert_eq!(session(&two).await, anns);
    // The same name in metadata is the same conversation.
    let mut by_metadata = body("keel", &[("user", "third")]);
    by_metadata["metadata"] = json!({"keel_conversation": "project-x"});
    let three = daemon.chat(&ann, by_metadata, &[]).await;
    assert_eq!(session(&three).await, anns);
    // Ann's conversation id sent by bob: a new conversation of bob's, ann's untouched.
    let before = daemon.store.messages(&anns).await.unwrap().len();
    let hostile = [("x-keel-conversation", anns.as_str())];
    let bobs = daemon
        .chat(&bob, body("keel", &[("user", "let me in")]), &hostile)
        .await;
    assert_eq!(bobs.status, 200, "{}", bobs.body);
    let bobs_session = session(&bobs).await;
    assert_ne!(bobs_session, anns);
    let owner = daemon
        .store
        .session(&bobs_session)
        .await
        .unwrap()
        .unwrap()
        .owner;
    assert_eq!(owner.as_deref(), Some("bob"));
    assert_eq!(daemon.store.messages(&anns).await.unwrap().len(), before);
    // Ann may name her conversation by its id.
    let by_id = daemon
        .chat(&ann, body("keel", &[("user", "by id")]), &hostile)
        .await;
    assert_eq!(session(&by_id).await, anns);
    // A name keel cannot keep is refused.
    let bad = daemon
        .chat(
            &ann,
            body("keel", &[("user", "x")]),
            &[("x-keel-conversation", "a b")],
        )
        .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn a_dropped_stream_leaves_the_run_going_and_the_same_request_gets_the_answer() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("a long answer in many small pieces").with_chunk_delay_ms(20),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let mut request = body("keel", &[("user", "tell me")]);
    request["stream"] = json!(true);
    let response = daemon
        .request(reqwest::Method::POST, "/v1/chat/completions", Some(&key))
        .json(&request)
        .send()
        .await
        .unwrap();
    let mut bytes = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\"content\":\"a") {
        seen.push_str(&String::from_utf8_lossy(
            &bytes.next().await.unwrap().unwrap(),
        ));
    }
    drop(bytes);
    let again = daemon.chat(&key, request, &[]).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.streamed(), "a long answer in many small pieces");
    assert_eq!(
        daemon.provider.requests().len(),
        1,
        "the run went on; none was started again"
    );
    let run = daemon.store.run(&again.run_id()).await.unwrap().unwrap();
    assert_eq!(run.state.as_str(), "completed");
    let _: Value = again.body;
}

#[tokio::test]
async fn the_same_request_twice_at_once_is_one_run() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("only one").with_delay_ms(50),
        Step::text("a second run"),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let request = body("keel", &[("user", "at once")]);
    let (one, two) = tokio::join!(
        daemon.chat(&key, request.clone(), &[]),
        daemon.chat(&key, request.clone(), &[])
    );
    assert_eq!(one.run_id(), two.run_id());
    assert_eq!(
        (one.content(), two.content()),
        ("only one".into(), "only one".into())
    );
    assert_eq!(daemon.provider.requests().len(), 1);
}

#[tokio::test]
async fn a_message_to_an_untrusted_conversation_named_by_id_stays_untrusted() {
    let daemon = Daemon::start(Script::new(vec![
        Step::tool_call("shell", json!({"command": "ls"})),
        Step::text("done"),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let untrusted = keel_platform::ConversationStore::create_conversation(
        daemon.store.as_ref(),
        &keel_platform::NewConversation {
            id: "mail-1".into(),
            owner: Some("ann".into()),
            lane_policy: keel_core::LanePolicy::Queue,
            at: chrono::Utc::now(),
            place: None,
            trusted: false,
        },
    )
    .await
    .unwrap()
    .unwrap();
    let answer = daemon
        .chat(
            &key,
            body("keel", &[("user", "go")]),
            &[("x-keel-conversation", &untrusted.id)],
        )
        .await;
    let run = daemon.store.run(&answer.run_id()).await.unwrap().unwrap();
    assert_eq!(run.session_id, "mail-1");
    assert!(answer.content().contains("`shell`"), "{}", answer.content());
    let approved = daemon
        .chat(
            &key,
            body(
                "keel",
                &[
                    ("user", "go"),
                    ("assistant", &answer.content()),
                    ("user", "approve"),
                ],
            ),
            &[("x-keel-conversation", &untrusted.id)],
        )
        .await;
    assert_eq!(approved.content(), "done");
    assert_eq!(*daemon.shell.untrusted.lock().unwrap(), [true]);
}
