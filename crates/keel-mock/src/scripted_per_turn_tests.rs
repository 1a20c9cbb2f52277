//! Per-turn scripts against the in-process provider: conversations walk the script from its
//! start on their own, however they interleave.

use std::collections::HashSet;
use std::sync::Arc;

use keel_core::{
    ChatRequest, ChatResponse, InternalReason, Message, NoDeltas, Provider, ProviderError,
    ProviderErrorKind, ToolChoice,
};
use serde_json::json;

use super::ScriptedProvider;
use crate::script::{Script, Step};

/// One conversation as keel's loop holds it: every answer is appended, every tool call answered.
struct Conversation {
    messages: Vec<Message>,
}

impl Conversation {
    fn new(question: &str) -> Conversation {
        Conversation {
            messages: vec![Message::system("Be brief."), Message::user(question)],
        }
    }

    async fn call(&mut self, provider: &ScriptedProvider) -> Result<ChatResponse, ProviderError> {
        let request = ChatRequest {
            model: "gpt-test".into(),
            messages: self
                .messages
                .iter()
                .cloned()
                .map(std::sync::Arc::new)
                .collect(),
            tools: Vec::new().into(),
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            temperature: None,
            stream: false,
        };
        let response = provider.chat(&request, &NoDeltas).await?;
        self.messages.push(response.message.clone());
        for call in &response.message.tool_calls {
            self.messages
                .push(Message::tool_result(call.id.clone(), "file contents"));
        }
        Ok(response)
    }

    /// The text of the next answer.
    async fn ask(&mut self, provider: &ScriptedProvider) -> String {
        self.call(provider).await.unwrap().message.content
    }

    /// Every tool-call id the model made so far.
    fn call_ids(&self) -> Vec<String> {
        self.messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
            .collect()
    }
}

/// Two tool-calling steps, then a final answer.
fn three_steps() -> Script {
    Script::new(vec![
        Step::text("step 0").with_tool_call("read_file", json!({"path": "a"})),
        Step::text("step 1").with_tool_call("read_file", json!({"path": "b"})),
        Step::text("step 2"),
    ])
    .with_per_turn()
}

#[tokio::test]
async fn interleaved_conversations_each_walk_the_script_from_its_start() {
    let provider = ScriptedProvider::new(three_steps());
    let (mut a, mut b) = (Conversation::new("a?"), Conversation::new("b?"));
    let mut seen = Vec::new();
    seen.push(("a", a.ask(&provider).await));
    seen.push(("b", b.ask(&provider).await));
    seen.push(("a", a.ask(&provider).await));
    seen.push(("a", a.ask(&provider).await));
    seen.push(("b", b.ask(&provider).await));
    seen.push(("b", b.ask(&provider).await));
    let of = |who: &str| -> Vec<&str> {
        seen.iter()
            .filter(|(w, _)| *w == who)
            .map(|(_, text)| text.as_str())
            .collect()
    };
    assert_eq!(of("a"), ["step 0", "step 1", "step 2"]);
    assert_eq!(of("b"), ["step 0", "step 1", "step 2"]);
    assert_eq!(
        provider.requests().len(),
        6,
        "requests are recorded by default"
    );
}

#[tokio::test]
async fn a_new_user_message_starts_over_with_fresh_call_ids() {
    let provider = ScriptedProvider::new(three_steps());
    let mut conversation = Conversation::new("first?");
    for _ in 0..3 {
        conversation.ask(&provider).await;
    }
    conversation.messages.push(Message::user("second?"));
    assert_eq!(conversation.ask(&provider).await, "step 0");
    assert_eq!(conversation.ask(&provider).await, "step 1");
    let ids = conversation.call_ids();
    assert_eq!(ids.len(), 4);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        4,
        "ids never repeat within a conversation: {ids:?}"
    );
}

#[tokio::test]
async fn internal_messages_do_not_start_a_turn() {
    let provider = ScriptedProvider::new(three_steps());
    let mut conversation = Conversation::new("q");
    conversation.ask(&provider).await;
    conversation.messages.push(Message::internal_user(
        "You are repeating yourself.",
        InternalReason::LoopNudge,
    ));
    assert_eq!(conversation.ask(&provider).await, "step 1");
}

#[tokio::test]
async fn times_and_forever_cover_positions() {
    let provider = ScriptedProvider::new(
        Script::new(vec![
            Step::text("twice").repeat(2),
            Step::text("always").repeat_forever(),
        ])
        .with_per_turn(),
    );
    for _ in 0..2 {
        let mut conversation = Conversation::new("q");
        let mut texts = Vec::new();
        for _ in 0..5 {
            texts.push(conversation.ask(&provider).await);
        }
        assert_eq!(texts, ["twice", "twice", "always", "always", "always"]);
    }
}

#[tokio::test]
async fn a_position_past_the_end_is_exhausted() {
    let provider = ScriptedProvider::new(
        Script::new(vec![Step::text("only").repeat(2)])
            .with_model("summary-model", vec![Step::text("summary")])
            .with_per_turn(),
    );
    let mut conversation = Conversation::new("q");
    conversation.ask(&provider).await;
    conversation.ask(&provider).await;
    let error = conversation.call(&provider).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(500));
    assert_eq!(
        error.message,
        "keel-mock: script exhausted after 2 responses"
    );

    // A model with its own list is read by position too.
    let mut summary = ChatRequest {
        model: "summary-model".into(),
        messages: vec![Message::user("summarize").into()],
        tools: Vec::new().into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: None,
        temperature: None,
        stream: false,
    };
    for _ in 0..2 {
        let answer = provider.chat(&summary, &NoDeltas).await.unwrap();
        assert_eq!(answer.message.content, "summary");
    }
    summary.messages.push(Message::assistant("summary").into());
    let error = provider.chat(&summary, &NoDeltas).await.unwrap_err();
    assert_eq!(
        error.message,
        "keel-mock: script for model `summary-model` exhausted after 1 responses"
    );
}

#[tokio::test]
async fn without_recording_records_nothing() {
    let provider = ScriptedProvider::new(three_steps()).without_recording();
    let mut conversation = Conversation::new("q");
    assert_eq!(conversation.ask(&provider).await, "step 0");
    assert_eq!(conversation.ask(&provider).await, "step 1");
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn many_concurrent_conversations_share_one_provider() {
    let provider = Arc::new(ScriptedProvider::new(three_steps()).without_recording());
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let provider = provider.clone();
            tokio::spawn(async move {
                let mut conversation = Conversation::new(&format!("question {i}"));
                let mut texts = Vec::new();
                for _ in 0..3 {
                    texts.push(conversation.ask(&provider).await);
                    tokio::task::yield_now().await;
                }
                texts
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), ["step 0", "step 1", "step 2"]);
    }
}
