//! End to end: `keel serve` driven by async-openai, an OpenAI client no one here wrote, on
//! `keel mock-provider`: whole and streamed answers, a tool-using run, a conversation continued
//! by its history over three turns, the models, an unknown model (404), no key (401), a stream
//! dropped mid-answer then asked for again (one run, the whole answer), and an approval asked
//! as an answer and given by the next turn. Hostile: another user's conversation id, forged and
//! oversized bodies, a redelivered request.

mod common;

use std::path::PathBuf;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestUserMessageArgs,
    ChatCompletionStreamOptions, CreateChatCompletionRequest, CreateChatCompletionRequestArgs,
};
use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, run, stderr, temp};
use futures::StreamExt;
use serde_json::{Value, json};

/// An async-openai client of `daemon` with `key` (and more headers).
fn client(daemon: &Daemon, key: &str, headers: &[(&str, &str)]) -> Client<OpenAIConfig> {
    keel_providers::install_crypto_provider();
    let mut config = OpenAIConfig::new()
        .with_api_base(format!("{}/v1", daemon.url))
        .with_api_key(key);
    for (name, value) in headers {
        config = config
            .with_header(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.to_string(),
            )
            .unwrap();
    }
    let http = reqwest::Client::builder()
        .timeout(common::bound::REQUEST_TIMEOUT)
        .build()
        .unwrap();
    Client::with_config(config).with_http_client(http)
}

fn user(text: &str) -> ChatCompletionRequestMessage {
    ChatCompletionRequestUserMessageArgs::default()
        .content(text)
        .build()
        .unwrap()
        .into()
}

fn assistant(text: &str) -> ChatCompletionRequestMessage {
    ChatCompletionRequestAssistantMessageArgs::default()
        .content(text)
        .build()
        .unwrap()
        .into()
}

fn system(text: &str) -> ChatCompletionRequestMessage {
    ChatCompletionRequestSystemMessageArgs::default()
        .content(text)
        .build()
        .unwrap()
        .into()
}

fn request(
    model: &str,
    messages: Vec<ChatCompletionRequestMessage>,
) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model(model)
        .messages(messages)
        .build()
        .unwrap()
}

/// The answer's text, whole.
async fn ask(
    client: &Client<OpenAIConfig>,
    request: CreateChatCompletionRequest,
) -> (String, String) {
    let answer = client.chat().create(request).await.unwrap();
    let text = answer.choices[0]
        .message
        .content
        .clone()
        .unwrap_or_default();
    (answer.id, text)
}

/// The answer's text, streamed: its id, the content joined, the finish reason and the usage
/// total (when sent).
async fn ask_streamed(
    client: &Client<OpenAIConfig>,
    mut request: CreateChatCompletionRequest,
) -> (String, String, String, Option<u32>) {
    request.stream = Some(true);
    request.stream_options = Some(ChatCompletionStreamOptions {
        include_usage: Some(true),
        include_obfuscation: None,
    });
    let mut stream = client.chat().create_stream(request).await.unwrap();
    let (mut id, mut text, mut finish, mut total) =
        (String::new(), String::new(), String::new(), None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        id = chunk.id.clone();
        if let Some(usage) = chunk.usage {
            total = Some(usage.total_tokens);
        }
        for choice in chunk.choices {
            text.push_str(choice.delta.content.as_deref().unwrap_or_default());
            if let Some(reason) = choice.finish_reason {
                finish = serde_json::to_value(reason)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string();
            }
        }
    }
    (id, text, finish, total)
}

/// The status and OpenAI error of a refused request.
fn refusal(error: OpenAIError) -> (u16, async_openai::error::ApiError) {
    match error {
        OpenAIError::ApiError(response) => (response.status_code.as_u16(), response.api_error),
        other => panic!("not an API error: {other:?}"),
    }
}

fn run_of(completion_id: &str) -> String {
    completion_id.strip_prefix("chatcmpl-").unwrap().to_string()
}

/// A daemon on `script` in a fresh home and workspace (HOME for commands a directory in the
/// workspace with a canary), with users ann and bob; their keys.
struct Setup {
    daemon: Daemon,
    mock: Mock,
    ann: String,
    bob: String,
    fake_home: PathBuf,
    _dirs: Vec<tempfile::TempDir>,
}

fn setup(script: Value, extra: &str) -> Setup {
    let mock = Mock::start(&script.to_string());
    let (h, home) = temp();
    let (w, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "hello").unwrap();
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    daemon_config(&home, &mock, &workspace, extra);
    for name in ["ann", "bob"] {
        let output = run(keel(&home).args(["users", "set", name, "--permission", "admin"]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    let ann = make_key(&home, &["--user", "ann"]);
    let bob = make_key(&home, &["--user", "bob"]);
    let daemon = Daemon::start_with(&home, &[("HOME", fake_home.to_str().unwrap())]);
    Setup {
        daemon,
        mock,
        ann,
        bob,
        fake_home,
        _dirs: vec![h, w],
    }
}

/// The conversation of a run, as keel's own API reports it to `key`.
async fn conversation_of(daemon: &Daemon, key: &str, run_id: &str) -> String {
    let (status, report) = daemon
        .client(key)
        .get(&format!("/v1/runs/{run_id}/report"))
        .await;
    assert_eq!(status, 200, "{report}");
    report["session_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_openai_client_gets_answers_tools_three_turns_models_and_refusals() {
    let script = json!({"steps": [
        {"text": "Hello from keel.", "usage": {"input_tokens": 20, "output_tokens": 4}},
        {"text": "Streamed hello.", "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"text": "The file says hello."},
        {"text": "Second turn."},
        {"text": "Third turn."}
    ]});
    let s = setup(script, "");
    let ann = client(&s.daemon, &s.ann, &[]);

    let (id, text) = ask(&ann, request("keel", vec![user("hi")])).await;
    assert_eq!(text, "Hello from keel.");
    assert!(id.starts_with("chatcmpl-"), "{id}");
    let (_, text, finish, total) =
        ask_streamed(&ann, request("keel", vec![user("stream it")])).await;
    assert_eq!(
        (text.as_str(), finish.as_str(), total),
        ("Streamed hello.", "stop", Some(12))
    );

    // A tool-using run, then two more turns continued by the client's history.
    let first = vec![system("Be brief."), user("what does a.txt say?")];
    let (one, text) = ask(&ann, request("keel", first.clone())).await;
    assert_eq!(text, "The file says hello.");
    let mut second = first.clone();
    second.extend([assistant(&text), user("and then?")]);
    let (two, text) = ask(&ann, request("keel", second.clone())).await;
    assert_eq!(text, "Second turn.");
    let mut third = second.clone();
    third.extend([assistant(&text), user("and finally?")]);
    let (_, text, _, _) = ask_streamed(&ann, request("keel", third)).await;
    assert_eq!(text, "Third turn.");
    let conversation = conversation_of(&s.daemon, &s.ann, &run_of(&one)).await;
    assert_eq!(
        conversation_of(&s.daemon, &s.ann, &run_of(&two)).await,
        conversation
    );
    let sent = s.mock.requests();
    let last = sent.last().unwrap()["messages"].to_string();
    assert!(
        last.contains("The file says hello.") && last.contains("Second turn."),
        "{last}"
    );
    assert!(
        last.contains("hello"),
        "the tool's result is in keel's history: {last}"
    );

    // The models: keel and the configured one; an unknown one is 404; no key is 401.
    let models = ann.models().list().await.unwrap();
    let ids: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids[0], "keel", "{ids:?}");
    assert!(models.data.iter().all(|m| m.owned_by == "keel"));
    let error = ann
        .chat()
        .create(request("gpt-9", vec![user("hi")]))
        .await
        .unwrap_err();
    let (status, error) = refusal(error);
    assert_eq!(
        (status, error.code.as_deref()),
        (404, Some("model_not_found"))
    );
    let nobody = client(&s.daemon, "", &[]);
    let error = nobody
        .chat()
        .create(request("keel", vec![user("hi")]))
        .await
        .unwrap_err();
    let (status, error) = refusal(error);
    assert_eq!(
        (status, error.code.as_deref()),
        (401, Some("invalid_api_key"))
    );
    let forged = client(&s.daemon, "keel_0000", &[]);
    let error = forged.models().list().await.unwrap_err();
    assert_eq!(refusal(error).0, 401);
    assert_eq!(s.mock.requests().len(), 6, "refused requests ran nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dropped_mid_answer_is_answered_whole_when_asked_again() {
    let words = "one two three four five six seven eight nine ten eleven twelve";
    let script = json!({"steps": [{"text": words, "chunk_delay_ms": 40}]});
    let s = setup(script, "");
    let ann = client(&s.daemon, &s.ann, &[]);
    let mut asked = request("keel", vec![user("count slowly")]);
    asked.stream = Some(true);
    let mut stream = ann.chat().create_stream(asked.clone()).await.unwrap();
    let mut got = String::new();
    while got.is_empty() {
        let chunk = stream.next().await.unwrap().unwrap();
        got.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
    }
    assert!(words.starts_with(&got) && got.len() < words.len(), "{got}");
    drop(stream);
    // The reconnect: the same request again.
    let (id, text, finish, _) = ask_streamed(&ann, asked).await;
    assert_eq!((text.as_str(), finish.as_str()), (words, "stop"));
    assert_eq!(
        s.mock.requests().len(),
        1,
        "the run went on alone; none was started again"
    );
    let (status, run) = s
        .daemon
        .client(&s.ann)
        .get(&format!("/v1/runs/{}", run_of(&id)))
        .await;
    assert_eq!(
        (status, run["state"].as_str()),
        (200, Some("completed")),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_answered_by_the_next_turn_and_hostile_requests_change_nothing() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Cleaned."},
        {"text": "Bob's own."},
        {"text": "Once."}
    ]});
    let s = setup(script, "");
    let ann = client(&s.daemon, &s.ann, &[]);
    let first = vec![user("clean my home")];
    let (id, asked) = ask(&ann, request("keel", first.clone())).await;
    assert!(
        asked.contains("`shell`") && asked.contains("rm -rf ~"),
        "{asked}"
    );
    assert!(
        asked.contains("`approve`") && asked.contains("`deny`"),
        "{asked}"
    );
    assert!(s.fake_home.join("canary").exists(), "ran before approval");
    let mut reply = first.clone();
    reply.extend([assistant(&asked), user("approve")]);
    let (again, text, finish, _) = ask_streamed(&ann, request("keel", reply)).await;
    assert_eq!((text.as_str(), finish.as_str()), ("Cleaned.", "stop"));
    assert_eq!(again, id, "the answer is the rest of the same run");
    assert!(!s.fake_home.exists(), "the approved command did not run");
    let anns = conversation_of(&s.daemon, &s.ann, &run_of(&id)).await;

    // Bob naming ann's conversation by its id gets a conversation of his own.
    let bob = client(&s.daemon, &s.bob, &[("X-Keel-Conversation", &anns)]);
    let (bobs, text) = ask(&bob, request("keel", vec![user("read ann's chat")])).await;
    assert_eq!(text, "Bob's own.");
    let bobs_conversation = conversation_of(&s.daemon, &s.bob, &run_of(&bobs)).await;
    assert_ne!(bobs_conversation, anns);
    let (status, _) = s
        .daemon
        .client(&s.bob)
        .get(&format!("/v1/runs/{}", run_of(&id)))
        .await;
    assert_eq!(status, 404, "bob sees nothing of ann's");

    // A redelivered request is one run.
    let (one, _) = ask(&ann, request("keel", vec![user("only once")])).await;
    let (two, text) = ask(&ann, request("keel", vec![user("only once")])).await;
    assert_eq!((one.as_str(), text.as_str()), (two.as_str(), "Once."));
    assert_eq!(s.mock.requests().len(), 4);

    // Forged and oversized bodies: OpenAI's error shape, nothing run.
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(format!("{}/v1/chat/completions", s.daemon.url))
            .bearer_auth(&s.ann)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for (body, status) in [
        ("{\"model\": \"keel\", \"messages\": [{\"role\": \"user\"".to_string(), 400),
        (json!({"model": "keel", "messages": "hi"}).to_string(), 400),
        (json!({"model": ["keel"], "messages": [{"role": "user", "content": "x"}]}).to_string(), 400),
        (json!({"model": "keel", "messages": [{"role": "user", "content": "x".repeat(3 << 20)}]})
            .to_string(), 413),
    ] {
        let response = post(body).await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        let error: Value = response.json().await.unwrap();
        assert!(error["error"]["message"].is_string() && error["error"]["type"].is_string(), "{error}");
    }
    assert_eq!(s.mock.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_mid_stream_resumes_the_run_and_the_same_request_gets_the_answer() {
    let words = "one two three four five six seven eight nine ten eleven twelve";
    let script = json!({"steps": [{"text": words, "chunk_delay_ms": 40, "forever": true}]});
    let mut s = setup(script, "");
    let ann = client(&s.daemon, &s.ann, &[]);
    let mut asked = request("keel", vec![user("count slowly")]);
    asked.stream = Some(true);
    let mut stream = ann.chat().create_stream(asked.clone()).await.unwrap();
    let mut got = String::new();
    while got.is_empty() {
        let chunk = stream.next().await.unwrap().unwrap();
        got.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
    }
    s.daemon.kill();
    drop(stream);
    let home = s.daemon.home.clone();
    s.daemon = Daemon::start_with(&home, &[("HOME", s.fake_home.to_str().unwrap())]);
    let ann = client(&s.daemon, &s.ann, &[]);
    let (id, text, finish, _) = ask_streamed(&ann, asked).await;
    assert_eq!((text.as_str(), finish.as_str()), (words, "stop"));
    let (status, runs) = s.daemon.client(&s.ann).get("/v1/runs").await;
    assert_eq!(status, 200, "{runs}");
    let items = runs["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one run for the one turn: {runs}");
    assert_eq!(items[0]["id"].as_str(), Some(run_of(&id).as_str()));
}

/// `POST /v1/responses` through async-openai's Responses API: a whole response, a streamed one
/// (the event sequence, numbered, ending `response.completed`), a turn continued by
/// `previous_response_id`, and another user's response id refused (404).
#[tokio::test(flavor = "multi_thread")]
async fn an_openai_client_gets_responses_whole_streamed_and_continued() {
    use async_openai::types::responses::{
        CreateResponse, CreateResponseArgs, InputParam, ResponseStreamEvent, Status,
    };
    let script = json!({"steps": [
        {"text": "Hello from keel.", "usage": {"input_tokens": 20, "output_tokens": 4}},
        {"text": "Streamed hello.", "usage": {"input_tokens": 10, "output_tokens": 2}}
    ]});
    let s = setup(script, "");
    let ann = client(&s.daemon, &s.ann, &[]);
    let bob = client(&s.daemon, &s.bob, &[]);
    let create = |input: &str, previous: Option<&str>| -> CreateResponse {
        let mut args = CreateResponseArgs::default();
        args.model("keel")
            .input(InputParam::Text(input.to_string()));
        if let Some(previous) = previous {
            args.previous_response_id(previous);
        }
        args.build().unwrap()
    };

    let whole = ann.responses().create(create("hi", None)).await.unwrap();
    assert!(whole.id.starts_with("resp_"), "{}", whole.id);
    assert_eq!(whole.status, Status::Completed);
    assert_eq!(whole.output_text().as_deref(), Some("Hello from keel."));
    assert_eq!(whole.usage.as_ref().unwrap().total_tokens, 24);

    let mut stream = ann
        .responses()
        .create_stream(create("and streamed?", Some(&whole.id)))
        .await
        .unwrap();
    let (mut kinds, mut text, mut completed) = (Vec::new(), String::new(), None);
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(value["sequence_number"], kinds.len(), "{value}");
        kinds.push(value["type"].as_str().unwrap().to_string());
        match event {
            ResponseStreamEvent::ResponseOutputTextDelta(delta) => text.push_str(&delta.delta),
            ResponseStreamEvent::ResponseCompleted(done) => completed = Some(done.response),
            _ => {}
        }
    }
    assert_eq!(text, "Streamed hello.");
    assert_eq!(kinds.first().unwrap(), "response.created");
    assert_eq!(kinds.last().unwrap(), "response.completed");
    let completed = completed.unwrap();
    assert_eq!(completed.output_text().as_deref(), Some("Streamed hello."));
    assert_eq!(completed.usage.as_ref().unwrap().total_tokens, 12);
    assert_eq!(completed.previous_response_id.as_deref(), Some(&*whole.id));
    // The streamed turn continued the first one's conversation.
    let run = |id: &str| id.strip_prefix("resp_").unwrap().to_string();
    assert_eq!(
        conversation_of(&s.daemon, &s.ann, &run(&completed.id)).await,
        conversation_of(&s.daemon, &s.ann, &run(&whole.id)).await
    );

    // Another user's response id is not found, as one that never was.
    let refused = bob
        .responses()
        .create(create("and?", Some(&whole.id)))
        .await
        .unwrap_err();
    let (status, error) = refusal(refused);
    assert_eq!(status, 404);
    assert_eq!(error.code.as_deref(), Some("previous_response_not_found"));
    assert_eq!(s.mock.requests().len(), 2);
}
