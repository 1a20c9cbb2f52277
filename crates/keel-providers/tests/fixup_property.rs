//! Random histories — orphans, duplicates, interleavings — go through keel-core's fixup and
//! each adapter's request mapping; keel-mock's independent reading of each API must accept the
//! request, and no user text may be lost.

use keel_core::{ChatRequest, Message, Role, ToolCall, ToolChoice, ToolSpec, fixup::fixup};
use keel_providers::{anthropic, openai_chat, openai_responses};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The shapes a history is made of; user texts are filled in with unique markers afterwards.
#[derive(Clone, Debug)]
enum Shape {
    User,
    EmptyUser,
    Assistant(String),
    Calls(Vec<&'static str>),
    Result(&'static str),
    System,
}

fn shape() -> impl Strategy<Value = Shape> {
    let id = prop::sample::select(vec!["a", "b", "c"]);
    prop_oneof![
        4 => Just(Shape::User),
        1 => Just(Shape::EmptyUser),
        2 => "[a-z ]{0,8}".prop_map(Shape::Assistant),
        3 => prop::collection::vec(id.clone(), 1..3).prop_map(Shape::Calls),
        3 => id.prop_map(Shape::Result),
        1 => Just(Shape::System),
    ]
}

/// Builds the history; the n-th user message says `user-text-n`.
fn history(shapes: &[Shape]) -> Vec<Message> {
    let mut users = 0;
    shapes
        .iter()
        .map(|shape| match shape {
            Shape::User => {
                users += 1;
                Message::user(format!("user-text-{users}"))
            }
            Shape::EmptyUser => Message::user(""),
            Shape::Assistant(text) => Message::assistant(text.clone()),
            Shape::Calls(ids) => Message::assistant_with_calls(
                "",
                ids.iter()
                    .map(|id| ToolCall {
                        id: (*id).into(),
                        name: "lookup".into(),
                        arguments: json!({"q": id}).to_string(),
                    })
                    .collect(),
            ),
            Shape::Result(id) => Message::tool_result(*id, format!("result of {id}")),
            Shape::System => Message::system("be brief"),
        })
        .collect()
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: messages.into_iter().map(std::sync::Arc::new).collect(),
        tools: vec![ToolSpec::new(
            "lookup",
            "looks things up",
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        )]
        .into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: Some(256),
        temperature: None,
        stream: false,
    }
}

/// Every user text of a request body, whatever the API's shape.
fn user_texts(body: &Value) -> String {
    let mut out = String::new();
    let items = body["messages"].as_array().or(body["input"].as_array());
    for item in items.into_iter().flatten() {
        if item["role"] != "user" {
            continue;
        }
        match &item["content"] {
            Value::String(text) => out.push_str(text),
            Value::Array(parts) => {
                for part in parts {
                    if let Some(text) = part["text"].as_str() {
                        out.push_str(text);
                        out.push('\n');
                    }
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    out
}

fn check(
    body: Value,
    validate: fn(&Value) -> Result<(), String>,
    original: &[Message],
) -> Result<(), TestCaseError> {
    if let Err(problem) = validate(&body) {
        return Err(TestCaseError::fail(format!("{problem}\nbody: {body:#}")));
    }
    let sent = user_texts(&body);
    for message in original
        .iter()
        .filter(|m| m.role == Role::User && !m.content.is_empty())
    {
        prop_assert!(
            sent.contains(&message.content),
            "user text {:?} lost; sent: {sent}",
            message.content
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_api_accepts_any_fixed_up_history(
        shapes in prop::collection::vec(shape(), 0..20)
    ) {
        // The loop always ends a request with the user's new message.
        let mut messages = history(&shapes);
        messages.push(Message::user("user-text-final"));
        let fixed = fixup(messages.clone());
        let request = request(fixed);

        let chat = openai_chat::build_request_body(&request, openai_chat::TokenLimitField::MaxTokens);
        check(chat, keel_mock::validate::chat_completions, &messages)?;

        let options = anthropic::BodyOptions { default_max_tokens: 1024, prompt_caching: true };
        let messages_body = anthropic::build_request_body(&request, options);
        check(messages_body, keel_mock::validate::messages, &messages)?;

        let responses = openai_responses::build_request_body(
            &request,
            openai_responses::EncryptedReasoning::On,
        );
        check(responses, keel_mock::validate::responses, &messages)?;
    }
}
