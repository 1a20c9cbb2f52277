//! What the OpenAI routes refuse, each in OpenAI's error shape with its status: no key or a
//! bad one (401), a model the caller may not use (404), a body that is no chat request (400),
//! one too large (413); and the models a caller may name.

mod common;

use chrono::Utc;
use common::{Daemon, body};
use keel_mock::{Script, Step};
use keel_openai::OpenAiOptions;
use keel_platform::{Persona, PlatformStore};
use serde_json::{Value, json};

fn assert_openai_error(body: &Value, kind: &str, code: &str) {
    let error = &body["error"];
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error.get("param").is_some(), "{body}");
}

fn persona(name: &str, platform: Option<&str>) -> Persona {
    Persona {
        name: name.into(),
        system_prompt: format!("You are {name}."),
        platform: platform.map(str::to_string),
        platform_server_id: None,
        model: None,
        max_tokens: None,
        allowed_modules: None,
        temperature: None,
        is_default: false,
        created_at: Utc::now(),
        updated_at: Utc::now(),
    }
}

#[tokio::test]
async fn keys_models_and_bodies_are_refused_in_openai_shape() {
    let daemon = Daemon::start_with(
        Script::new(vec![Step::text("ok")]).with_per_turn(),
        OpenAiOptions::default(),
        4096,
    )
    .await;
    let key = daemon.key("ann").await;
    let chat = "/v1/chat/completions";
    let send = |key: Option<&str>, body: String| {
        daemon
            .request(reqwest::Method::POST, chat, key)
            .header("content-type", "application/json")
            .body(body)
    };
    let ok_body = body("keel", &[("user", "hi")]).to_string();
    for key in [None, Some("keel_not-a-key")] {
        let answer = common::Answer::read(send(key, ok_body.clone()).send().await.unwrap()).await;
        assert_eq!(answer.status, 401);
        assert_openai_error(&answer.body, "invalid_request_error", "invalid_api_key");
    }
    let unknown = daemon
        .chat(&key, body("gpt-9", &[("user", "hi")]), &[])
        .await;
    assert_eq!(unknown.status, 404);
    assert_openai_error(&unknown.body, "invalid_request_error", "model_not_found");
    assert_eq!(unknown.body["error"]["param"], "model");
    for bad in [
        "{not json".to_string(),
        json!({"model": "keel"}).to_string(),
        json!({"model": "keel", "messages": [{"role": "assistant", "content": "x"}]}).to_string(),
        json!({"model": "keel", "messages": [{"role": "system", "content": "x"}]}).to_string(),
        json!({"model": "keel", "n": 3, "messages": [{"role": "user", "content": "x"}]})
            .to_string(),
        json!({"model": "keel", "messages": [{"role": "user", "content": [{"type": "image_url",
            "image_url": {"url": "https://example.com/a.png"}}]}]})
        .to_string(),
        json!({"model": "keel", "messages": [{"role": "user", "content": 5}]}).to_string(),
    ] {
        let answer =
            common::Answer::read(send(Some(&key), bad.clone()).send().await.unwrap()).await;
        assert_eq!(answer.status, 400, "{bad}");
        assert_openai_error(
            &answer.body,
            "invalid_request_error",
            "invalid_request_error",
        );
    }
    let huge = body("keel", &[("user", &"x".repeat(8192))]).to_string();
    let answer = common::Answer::read(send(Some(&key), huge).send().await.unwrap()).await;
    assert_eq!(answer.status, 413);
    assert_openai_error(&answer.body, "invalid_request_error", "request_too_large");
    // A channel's key (no user of its own) may not start conversations here.
    let made =
        keel_server::keys::new_key(None, false, vec!["telegram".into()], Utc::now()).unwrap();
    daemon.store.save_api_key(&made.record).await.unwrap();
    let channel = daemon
        .chat(&made.key, body("keel", &[("user", "hi")]), &[])
        .await;
    assert_eq!(channel.status, 403, "{}", channel.body);
    assert_openai_error(&channel.body, "invalid_request_error", "forbidden");
    // A wrong method is refused in the same shape.
    for (method, path) in [
        (reqwest::Method::GET, chat),
        (reqwest::Method::DELETE, "/v1/models"),
        (reqwest::Method::GET, "/v1/responses"),
    ] {
        let answer = common::Answer::read(
            daemon
                .request(method, path, Some(&key))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(answer.status, 405, "{path}");
        assert_openai_error(&answer.body, "invalid_request_error", "method_not_allowed");
    }
    // Nothing of the refused requests became a run.
    assert!(daemon.provider.requests().is_empty());
}

#[tokio::test]
async fn the_models_are_keel_the_configured_model_and_the_personas_offered() {
    let daemon = Daemon::start(Script::new(vec![Step::text("ok")]).with_per_turn()).await;
    daemon
        .store
        .save_persona(&persona("writer", None))
        .await
        .unwrap();
    daemon
        .store
        .save_persona(&persona("slacker", Some("slack")))
        .await
        .unwrap();
    let key = daemon.key("ann").await;
    let list = common::Answer::read(
        daemon
            .request(reqwest::Method::GET, "/v1/models", Some(&key))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["object"], "list");
    let ids: Vec<&str> = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model");
            assert_eq!(m["owned_by"], "keel");
            m["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, ["keel", "m", "writer"]);
    let one = common::Answer::read(
        daemon
            .request(reqwest::Method::GET, "/v1/models/writer", Some(&key))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(one.body["id"], "writer");
    let hidden = common::Answer::read(
        daemon
            .request(reqwest::Method::GET, "/v1/models/slacker", Some(&key))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(hidden.status, 404);
    assert_openai_error(&hidden.body, "invalid_request_error", "model_not_found");
    let anonymous = common::Answer::read(
        daemon
            .request(reqwest::Method::GET, "/v1/models", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(anonymous.status, 401);

    // A persona named as the model is the run's persona: its prompt is keel's system prompt.
    let answer = daemon
        .chat(&key, body("writer", &[("user", "write")]), &[])
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = serde_json::to_string(&daemon.provider.requests()[0].messages).unwrap();
    assert!(sent.contains("You are writer."), "{sent}");
    let refused = daemon
        .chat(&key, body("slacker", &[("user", "x")]), &[])
        .await;
    assert_eq!(refused.status, 404);
}

#[tokio::test]
async fn a_daemon_shutting_down_answers_503_with_retry_after() {
    let daemon = Daemon::start(Script::new(vec![Step::text("ok")]).with_per_turn()).await;
    let key = daemon.key("ann").await;
    daemon.state.engine.shutdown().await;
    let answer = daemon
        .chat(&key, body("keel", &[("user", "hi")]), &[])
        .await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.retry_after.as_deref(), Some("5"));
    assert_openai_error(&answer.body, "server_error", "shutting_down");
}
