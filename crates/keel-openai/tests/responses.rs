//! `POST /v1/responses` in process over a real socket: a whole answer and a streamed one (the
//! event sequence, numbered), a conversation continued by `previous_response_id` and by input
//! items, an approval answered by the next turn, a repeated request (one run), and the
//! refusals: another user's response id (404, as an unknown one), bad input (400), no key.

mod common;

use common::{Answer, Daemon};
use keel_core::Store;
use keel_mock::{Script, Step};
use keel_platform::ConversationStore;
use serde_json::{Value, json};

async fn respond(daemon: &Daemon, key: &str, body: Value) -> Answer {
    let request = daemon
        .request(reqwest::Method::POST, "/v1/responses", Some(key))
        .json(&body);
    Answer::read(request.send().await.unwrap()).await
}

/// The run id a response id names.
fn run_of(response: &Value) -> String {
    let id = response["id"].as_str().unwrap();
    id.strip_prefix("resp_").unwrap().to_string()
}

fn all() -> keel_platform::RunFilter {
    keel_platform::RunFilter {
        limit: 1000,
        ..Default::default()
    }
}

/// The `response` a stream ends with.
fn last_response(events: &Value) -> Value {
    events.as_array().unwrap().last().unwrap()["response"].clone()
}

#[tokio::test]
async fn a_whole_response_and_a_streamed_one() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("Hello there.").with_usage(11, 3),
        Step::text("Streamed answer.")
            .with_reasoning("Think first.")
            .with_usage(7, 5),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let whole = respond(&daemon, &key, json!({"model": "keel", "input": "hi"})).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    let body = &whole.body;
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output_text"], "Hello there.");
    assert_eq!(body["output"].as_array().unwrap().len(), 1);
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["role"], "assistant");
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(body["output"][0]["content"][0]["text"], "Hello there.");
    assert_eq!(body["usage"]["input_tokens"], 11);
    assert_eq!(body["usage"]["output_tokens"], 3);
    assert_eq!(body["usage"]["total_tokens"], 14);
    let run = daemon.store.run(&run_of(body)).await.unwrap().unwrap();
    assert_eq!(run.final_text.as_deref(), Some("Hello there."));

    let streamed = respond(
        &daemon,
        &key,
        json!({"model": "keel", "stream": true,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "more"}]}]}),
    )
    .await;
    assert_eq!(streamed.status, 200);
    let events = streamed.body.as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let deltas = kinds
        .iter()
        .filter(|k| **k == "response.output_text.delta")
        .count();
    assert!(deltas >= 1, "{kinds:?}");
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i, "{event}");
    }
    let text: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(text, "Streamed answer.");
    assert_eq!(events[0]["response"]["status"], "in_progress");
    let done = &events[events.len() - 4];
    assert_eq!(done["text"], "Streamed answer.");
    let last = last_response(&streamed.body);
    assert_eq!(last["status"], "completed");
    assert_eq!(last["output_text"], "Streamed answer.");
    assert_eq!(last["usage"]["total_tokens"], 12);
    assert_ne!(run_of(&last), run_of(body));
}

#[tokio::test]
async fn previous_response_id_and_input_items_continue_one_conversation() {
    let daemon = Daemon::start(Script::new(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let first = respond(&daemon, &key, json!({"model": "keel", "input": "a"})).await;
    let second = respond(
        &daemon,
        &key,
        json!({"model": "keel", "input": "b", "previous_response_id": first.body["id"]}),
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["output_text"], "two");
    assert_eq!(second.body["previous_response_id"], first.body["id"]);
    // A client keeping the history itself: the first turn's items, its output, a new message.
    let mut items = vec![json!({"role": "user", "content": "a"})];
    items.extend(first.body["output"].as_array().unwrap().iter().cloned());
    items.push(json!({"role": "user", "content": "c"}));
    let third = respond(&daemon, &key, json!({"model": "keel", "input": items})).await;
    assert_eq!(third.body["output_text"], "three");
    let session = |answer: &Answer| {
        let id = run_of(&answer.body);
        let store = daemon.store.clone();
        async move { store.run(&id).await.unwrap().unwrap().session_id }
    };
    let conversation = session(&first).await;
    assert_eq!(session(&second).await, conversation);
    assert_eq!(session(&third).await, conversation);
}

#[tokio::test]
async fn an_approval_is_answered_by_the_next_turn_and_a_repeat_is_one_run() {
    let daemon = Daemon::start(Script::new(vec![
        Step::tool_call("shell", json!({"command": "ls"})),
        Step::text("Listed."),
    ]))
    .await;
    let key = daemon.key("ann").await;
    let asked = respond(&daemon, &key, json!({"model": "keel", "input": "list"})).await;
    let text = asked.body["output_text"].as_str().unwrap().to_string();
    assert!(
        text.contains("`shell`") && text.contains("`approve`"),
        "{text}"
    );
    assert!(daemon.shell.ran.lock().unwrap().is_empty());
    let approve = json!({"model": "keel", "input": "approve", "stream": true,
        "previous_response_id": asked.body["id"]});
    let rest = respond(&daemon, &key, approve.clone()).await;
    let last = last_response(&rest.body);
    assert_eq!(last["status"], "completed", "{}", rest.body);
    assert!(
        last["output_text"].as_str().unwrap().ends_with("Listed."),
        "{last}"
    );
    assert_eq!(last["id"], asked.body["id"]);
    assert_eq!(*daemon.shell.ran.lock().unwrap(), vec!["ls".to_string()]);
    // The same request again (a retry): answered from the same run, nothing runs twice.
    let mut again = approve;
    again["stream"] = json!(false);
    let repeated = respond(&daemon, &key, again).await;
    assert_eq!(repeated.body["id"], asked.body["id"], "{}", repeated.body);
    assert!(
        repeated.body["output_text"]
            .as_str()
            .unwrap()
            .ends_with("Listed.")
    );
    assert_eq!(daemon.shell.ran.lock().unwrap().len(), 1);
    assert_eq!(daemon.provider.requests().len(), 2);
}

#[tokio::test]
async fn another_users_response_and_bad_input_are_refused_in_openai_shape() {
    let daemon = Daemon::start(Script::new(vec![Step::text("ann's secret")])).await;
    let ann = daemon.key("ann").await;
    let bob = daemon.key("bob").await;
    let first = respond(&daemon, &ann, json!({"model": "keel", "input": "hi"})).await;
    assert_eq!(first.status, 200);
    let runs = daemon.store.find_runs(&all()).await.unwrap().len();
    for previous in [
        first.body["id"].clone(),
        json!("resp_no-such-run"),
        json!("chatcmpl-x"),
        json!("resp_"),
    ] {
        let refused = respond(
            &daemon,
            &bob,
            json!({"model": "keel", "input": "and?", "previous_response_id": previous}),
        )
        .await;
        assert_eq!(refused.status, 404, "{previous}: {}", refused.body);
        assert_eq!(
            refused.body["error"]["code"], "previous_response_not_found",
            "{}",
            refused.body
        );
        assert_eq!(refused.body["error"]["param"], "previous_response_id");
        assert!(!refused.body.to_string().contains("secret"));
    }
    for bad in [
        json!({"model": "keel", "input": []}),
        json!({"model": "keel", "input": [{"role": "assistant", "content": "x"}]}),
        json!({"model": "keel", "input": {"role": "user"}}),
        json!({"model": "keel", "input": [{"role": "user", "content":
            [{"type": "input_image", "image_url": "data:"}]}]}),
        json!({"model": "keel", "input": "x", "background": true}),
        json!("not an object"),
    ] {
        let refused = respond(&daemon, &ann, bad.clone()).await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.body);
        assert_eq!(refused.body["error"]["type"], "invalid_request_error");
    }
    let unknown = respond(&daemon, &ann, json!({"model": "gpt-9", "input": "x"})).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body["error"]["code"], "model_not_found");
    let response = daemon
        .request(reqwest::Method::POST, "/v1/responses", None)
        .json(&json!({"model": "keel", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    // Nothing of a refused request ran.
    let after = daemon.store.find_runs(&all()).await.unwrap().len();
    assert_eq!(after, runs);
}
