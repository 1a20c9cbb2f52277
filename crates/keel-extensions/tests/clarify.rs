//! `clarify` through an agent: the `on_clarify` handler gets the question and its choices and
//! its answer reaches the model; with no one to answer, the run waits and `Agent::answer`
//! checks a choice number before going on.

use std::sync::{Arc, Mutex};

use keel_core::{Agent, AgentError, AgentState, Question, RunRequest};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;

fn script() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call(
            "clarify",
            json!({"question": "Which format?", "choices": ["CSV", "JSON", "YAML"]}),
        ),
        Step::text("exported"),
    ]))
}

#[tokio::test]
async fn on_clarify_gets_the_question_and_choices_and_its_answer_reaches_the_model() {
    let provider = script();
    let seen: Arc<Mutex<Vec<Question>>> = Arc::default();
    let agent = {
        let seen = seen.clone();
        Agent::builder()
            .extension(Arc::new(keel_extensions::clarify::Clarify))
            .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
            .provider(provider.clone())
            .model("m")
            .on_clarify(move |question| {
                seen.lock().unwrap().push(question);
                async { Some("2".to_string()) }
            })
            .build()
            .unwrap()
    };
    let report = agent.run(RunRequest::new("export it")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(
        *seen.lock().unwrap(),
        [Question {
            text: "Which format?".into(),
            choices: vec!["CSV".into(), "JSON".into(), "YAML".into()],
        }]
    );
    let sent = &provider.requests()[1].messages;
    assert!(
        sent.iter().any(|m| m.content == "The human chose: JSON"),
        "{sent:#?}"
    );
    assert_eq!(report.tool_calls[0].name, "clarify");
}

#[tokio::test]
async fn without_an_answer_the_run_waits_and_a_bad_choice_number_is_refused() {
    let provider = script();
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .extension(Arc::new(keel_extensions::clarify::Clarify))
        .provider(provider.clone())
        .model("m")
        .store(store)
        // The handler cannot answer now: the run waits for `keel answer`.
        .on_clarify(|_| async { None })
        .build()
        .unwrap();
    let waiting = agent.run(RunRequest::new("export it")).await.unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman);
    assert_eq!(waiting.question.as_deref(), Some("Which format?"));
    assert_eq!(waiting.choices, ["CSV", "JSON", "YAML"]);
    for bad in ["4", "0", "  "] {
        let error = agent.answer(&waiting.run_id, bad).await.unwrap_err();
        assert!(
            matches!(error, AgentError::InvalidAnswer(_)),
            "{bad}: {error}"
        );
    }
    // Nothing was lost: the run still waits, and a choice's text answers it.
    let done = agent.answer(&waiting.run_id, "yaml").await.unwrap();
    assert_eq!(done.state, AgentState::Completed);
    let sent = &provider.requests()[1].messages;
    assert!(
        sent.iter().any(|m| m.content == "The human chose: YAML"),
        "{sent:#?}"
    );
}
