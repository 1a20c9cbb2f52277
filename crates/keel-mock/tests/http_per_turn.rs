//! Per-turn scripts over real HTTP: each conversation walks the script from its start, on every
//! API, however the conversations interleave. The requests are shaped as keel's adapters write
//! them: the whole conversation every time, each answer appended as the adapter stores and
//! replays it, each tool call answered.

mod common;

use std::collections::HashSet;

use common::post_to;
use keel_mock::{MockServer, Script, Step};
use serde_json::{Value, json};

/// The three APIs, by path under `/v1`.
const APIS: [&str; 3] = ["chat/completions", "messages", "responses"];

/// One conversation on one API, holding the request body it sends next.
struct Conversation {
    api: &'static str,
    body: Value,
}

impl Conversation {
    fn new(api: &'static str, question: &str) -> Conversation {
        let body = match api {
            "messages" => json!({
                "model": "claude-test",
                "max_tokens": 1024,
                "system": [{"type": "text", "text": "Be brief."}],
                "messages": [],
            }),
            "responses" => json!({
                "model": "gpt-test",
                "instructions": "Be brief.",
                "input": [],
                "store": false,
                "include": ["reasoning.encrypted_content"],
            }),
            _ => json!({
                "model": "gpt-test",
                "messages": [{"role": "system", "content": "Be brief."}],
            }),
        };
        let mut conversation = Conversation { api, body };
        conversation.say(question);
        conversation
    }

    /// The list of the conversation's messages (input items on Responses).
    fn entries(&mut self) -> &mut Vec<Value> {
        let key = if self.api == "responses" {
            "input"
        } else {
            "messages"
        };
        self.body[key].as_array_mut().expect("a list")
    }

    /// Appends a user message.
    fn say(&mut self, text: &str) {
        let message = match self.api {
            "messages" => json!({"role": "user", "content": [{"type": "text", "text": text}]}),
            "responses" => {
                json!({"role": "user", "content": [{"type": "input_text", "text": text}]})
            }
            _ => json!({"role": "user", "content": text}),
        };
        self.entries().push(message);
    }

    /// Sends the conversation: the status and the JSON body.
    async fn send(&self, server: &MockServer) -> (u16, Value) {
        let response = post_to(server, self.api, &self.body).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// Sends the conversation and appends the answer and the results of its tool calls, as
    /// keel would; returns the answer's text.
    async fn ask(&mut self, server: &MockServer) -> String {
        let (status, answer) = self.send(server).await;
        assert_eq!(status, 200, "{}: {answer}", self.api);
        match self.api {
            "messages" => self.append_messages_answer(&answer),
            "responses" => self.append_responses_answer(&answer),
            _ => self.append_chat_answer(&answer),
        }
    }

    fn append_chat_answer(&mut self, answer: &Value) -> String {
        let message = &answer["choices"][0]["message"];
        let calls = message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut stored = json!({"role": "assistant", "content": message["content"]});
        if !calls.is_empty() {
            stored["tool_calls"] = Value::Array(calls.clone());
        }
        self.entries().push(stored);
        for call in &calls {
            self.entries().push(json!({
                "role": "tool", "tool_call_id": call["id"], "content": "file contents",
            }));
        }
        message["content"].as_str().unwrap_or_default().to_string()
    }

    fn append_messages_answer(&mut self, answer: &Value) -> String {
        let blocks = answer["content"].as_array().cloned().unwrap_or_default();
        let results: Vec<Value> = blocks
            .iter()
            .filter(|block| block["type"] == "tool_use")
            .map(|block| {
                json!({"type": "tool_result", "tool_use_id": block["id"],
                       "content": "file contents"})
            })
            .collect();
        let text = blocks
            .iter()
            .find(|block| block["type"] == "text")
            .and_then(|block| block["text"].as_str())
            .unwrap_or_default()
            .to_string();
        self.entries()
            .push(json!({"role": "assistant", "content": blocks}));
        if !results.is_empty() {
            self.entries()
                .push(json!({"role": "user", "content": results}));
        }
        text
    }

    fn append_responses_answer(&mut self, answer: &Value) -> String {
        let output = answer["output"].as_array().cloned().unwrap_or_default();
        let mut text = String::new();
        let mut outputs = Vec::new();
        for item in output {
            match item["type"].as_str() {
                // Replayed as a real server's encrypted reasoning would be.
                Some("reasoning") => {
                    let mut replay = item.clone();
                    replay["encrypted_content"] = json!("gAAAAB-opaque");
                    self.entries().push(replay);
                }
                Some("message") => {
                    text = item["content"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    self.entries().push(json!({
                        "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }));
                }
                Some("function_call") => {
                    self.entries().push(json!({
                        "type": "function_call", "call_id": item["call_id"],
                        "name": item["name"], "arguments": item["arguments"],
                    }));
                    outputs.push(json!({
                        "type": "function_call_output", "call_id": item["call_id"],
                        "output": "file contents",
                    }));
                }
                _ => {}
            }
        }
        self.entries().extend(outputs);
        text
    }

    /// Every tool-call id in the conversation.
    fn call_ids(&self) -> Vec<String> {
        let entries = self.body.get("input").or(self.body.get("messages"));
        let mut ids = Vec::new();
        for entry in entries.and_then(Value::as_array).into_iter().flatten() {
            let calls = entry["tool_calls"].as_array().into_iter().flatten();
            let blocks = entry["content"].as_array().into_iter().flatten();
            ids.extend(calls.map(|call| call["id"].clone()));
            ids.extend(
                blocks
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].clone()),
            );
            if entry["type"] == "function_call" {
                ids.push(entry["call_id"].clone());
            }
        }
        ids.iter()
            .map(|id| id.as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// Two replies with reasoning and two tool calls each, then a final answer.
fn three_steps() -> Script {
    let step = |n: usize| {
        Step::text(format!("step {n}"))
            .with_reasoning("Thinking it over.")
            .with_tool_call("read_file", json!({"path": "a"}))
            .with_tool_call("read_file", json!({"path": "b"}))
    };
    Script::new(vec![step(0), step(1), Step::text("step 2")]).with_per_turn()
}

async fn start(script: Script) -> MockServer {
    MockServer::start_local(script).await.unwrap()
}

#[tokio::test]
async fn interleaved_conversations_on_every_api_each_walk_the_script() {
    let server = start(three_steps()).await;
    // Two conversations per API, all interleaved on one server.
    let mut conversations: Vec<Conversation> = APIS
        .iter()
        .flat_map(|api| {
            [
                Conversation::new(api, "first?"),
                Conversation::new(api, "second?"),
            ]
        })
        .collect();
    let mut texts = vec![Vec::new(); conversations.len()];
    for _ in 0..3 {
        for (i, conversation) in conversations.iter_mut().enumerate() {
            texts[i].push(conversation.ask(&server).await);
        }
    }
    for (conversation, texts) in conversations.iter().zip(&texts) {
        assert_eq!(
            texts,
            &["step 0", "step 1", "step 2"],
            "{}",
            conversation.api
        );
    }
    assert_eq!(server.requests().len(), 18);
}

#[tokio::test]
async fn a_new_user_message_starts_the_script_over_with_fresh_call_ids() {
    let server = start(three_steps()).await;
    for api in APIS {
        let mut conversation = Conversation::new(api, "first?");
        for _ in 0..3 {
            conversation.ask(&server).await;
        }
        conversation.say("second?");
        assert_eq!(conversation.ask(&server).await, "step 0", "{api}");
        assert_eq!(conversation.ask(&server).await, "step 1", "{api}");
        assert_eq!(conversation.ask(&server).await, "step 2", "{api}");
        let ids = conversation.call_ids();
        assert_eq!(ids.len(), 8, "{api}: {ids:?}");
        assert_eq!(
            ids.iter().collect::<HashSet<_>>().len(),
            8,
            "{api}: {ids:?}"
        );
    }
}

#[tokio::test]
async fn the_loops_own_user_messages_after_tool_results_continue_the_turn() {
    let server = start(three_steps()).await;
    for api in APIS {
        let mut conversation = Conversation::new(api, "q");
        conversation.ask(&server).await;
        // keel sends a budget warning as a user message after the results; the Anthropic
        // adapter merges it into the tool-result turn.
        let warning = "Budget nearly spent.";
        if api == "messages" {
            let last = conversation.entries().last_mut().unwrap();
            last["content"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "text", "text": warning}));
        } else {
            conversation.say(warning);
        }
        assert_eq!(conversation.ask(&server).await, "step 1", "{api}");
    }
}

#[tokio::test]
async fn times_and_forever_cover_positions_on_every_api() {
    let server = start(
        Script::new(vec![
            Step::tool_call("f", json!({})).with_text("twice").repeat(2),
            Step::tool_call("f", json!({}))
                .with_text("always")
                .repeat_forever(),
        ])
        .with_per_turn(),
    )
    .await;
    for api in APIS {
        let mut conversation = Conversation::new(api, "q");
        let mut texts = Vec::new();
        for _ in 0..4 {
            texts.push(conversation.ask(&server).await);
        }
        assert_eq!(texts, ["twice", "twice", "always", "always"], "{api}");
    }
}

#[tokio::test]
async fn a_position_past_the_end_is_exhausted_on_every_api() {
    let server =
        start(Script::new(vec![Step::tool_call("f", json!({})).with_text("only")]).with_per_turn())
            .await;
    for api in APIS {
        let mut conversation = Conversation::new(api, "q");
        assert_eq!(conversation.ask(&server).await, "only");
        let (status, body) = conversation.send(&server).await;
        assert_eq!(status, 500, "{api}: {body}");
        assert_eq!(
            body["error"]["message"], "keel-mock: script exhausted after 1 responses",
            "{api}"
        );
        // Another conversation still starts at the top.
        assert_eq!(Conversation::new(api, "again").ask(&server).await, "only");
    }
}

#[tokio::test]
async fn a_server_that_does_not_record_still_answers() {
    let options = keel_mock::ServeOptions { record: false };
    let server = MockServer::start_with(([127, 0, 0, 1], 0).into(), three_steps(), options)
        .await
        .unwrap();
    let mut conversation = Conversation::new("chat/completions", "first?");
    for expected in ["step 0", "step 1", "step 2"] {
        assert_eq!(conversation.ask(&server).await, expected);
    }
    assert!(server.requests().is_empty(), "nothing kept");
}
