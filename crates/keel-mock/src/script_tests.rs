use super::*;
use serde_json::json;

#[test]
fn parses_every_field() {
    let script = Script::from_json(
        r#"{"steps": [
            {"text": "hi", "reasoning": "think", "finish_reason": "length",
             "usage": {"input_tokens": 3, "output_tokens": 4}, "model": "m-1",
             "delay_ms": 5, "chunk_delay_ms": 6, "cut_after_chunks": 2, "cut_mode": "eof",
             "times": 2},
            {"tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "x"},
                            {"name": "g", "arguments": "{bad"}]},
            {"error": {"status": 429, "headers": {"retry-after": "1"}, "body": "slow down",
                       "kind": "rate_limit"}, "forever": true}
        ]}"#,
    )
    .unwrap();
    let [first, second, third] = &script.steps[..] else {
        panic!("three steps")
    };
    assert_eq!(first.text.as_deref(), Some("hi"));
    assert_eq!(first.finish_reason, Some(FinishReason::Length));
    assert_eq!(first.cut_mode, Some(CutMode::Eof));
    assert_eq!(first.times, Some(2));
    assert_eq!(second.tool_calls[0].arguments.to_wire(), r#"{"a":1}"#);
    assert_eq!(second.tool_calls[1].arguments.to_wire(), "{bad");
    let error = third.error.as_ref().unwrap();
    assert_eq!(error.kind, Some(ProviderErrorKind::RateLimit));
    assert_eq!(error.body, Some(json!("slow down")));
    assert!(third.forever);
}

#[test]
fn parses_stream_errors_with_defaults() {
    let script = Script::from_json(
        r#"{"steps": [
            {"text": "a b c", "stream_error": {"after_chunks": 2, "kind": "overloaded"}},
            {"text": "a b c", "stream_error": {"after_chunks": 0, "message": "boom",
                                               "responses_event": "error"}},
            {"text": "a b c", "stream_error": {"after_chunks": 1,
                                               "responses_event": "response.failed"}}
        ]}"#,
    )
    .unwrap();
    let errors: Vec<_> = script
        .steps
        .iter()
        .map(|s| s.stream_error.clone().unwrap())
        .collect();
    assert_eq!(
        errors[0],
        StreamError::new(2, ProviderErrorKind::Overloaded)
    );
    assert_eq!(
        errors[1],
        StreamError::new(0, ProviderErrorKind::Server)
            .with_message("boom")
            .as_bare_error_event()
    );
    assert_eq!(
        errors[2].responses_event,
        ResponsesErrorEvent::ResponseFailed
    );
    assert!(
        problem(r#"{"steps": [{"stream_error": {"after_chunks": 1, "responses_event": "x"}}]}"#)
            .contains("unknown variant")
    );
    assert!(
        problem(r#"{"steps": [{"stream_error": {"kind": "server"}}]}"#)
            .contains("missing field `after_chunks`")
    );
}

/// The script examples of the crate documentation and the README load.
#[test]
fn documented_examples_load() {
    for doc in [include_str!("lib.rs"), include_str!("../README.md")] {
        let blocks: Vec<String> = doc
            .split("```json")
            .skip(1)
            .map(|rest| {
                let block = rest.split("```").next().unwrap();
                block
                    .lines()
                    .map(|line| line.trim_start().trim_start_matches("//!"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        assert_eq!(blocks.len(), 3);
        let scripts: Vec<Script> = blocks
            .iter()
            .map(|block| Script::from_json(block).unwrap())
            .collect();
        assert!(scripts[0].steps.iter().any(|s| s.stream_error.is_some()));
        assert!(scripts[1].models["summary-model"].steps[1].forever);
        assert_eq!(scripts[1].steps.len(), 2);
        assert!(scripts[2].per_turn);
    }
}

#[test]
fn round_trips_through_json() {
    let script = Script::new(vec![
        Step::text("a").with_reasoning("r").repeat(3),
        Step::tool_call("f", json!({"k": "v"})).with_tool_call("g", json!("raw")),
        Step::error(503).with_header("retry-after", "2"),
        Step::text("x").fail_stream_after(3, ProviderErrorKind::RateLimit),
        Step::text("y").with_stream_error(
            StreamError::new(1, ProviderErrorKind::Server).as_bare_error_event(),
        ),
    ]);
    let json = serde_json::to_string(&script).unwrap();
    assert_eq!(Script::from_json(&json).unwrap(), script);
}

#[test]
fn parses_model_scripts_beside_or_instead_of_steps() {
    let script = Script::from_json(
        r#"{"steps": [{"text": "agent"}],
            "models": {"summary-model": {"steps": [{"text": "s", "times": 2},
                                                   {"error": {"status": 529}}]},
                       "other": {"steps": []}}}"#,
    )
    .unwrap();
    assert_eq!(
        script,
        Script::new(vec![Step::text("agent")])
            .with_model(
                "summary-model",
                vec![Step::text("s").repeat(2), Step::error(529)]
            )
            .with_model("other", Vec::new())
    );

    let only_models =
        Script::from_json(r#"{"models": {"summary-model": {"steps": [{"text": "s"}]}}}"#).unwrap();
    assert!(only_models.steps.is_empty());
    assert_eq!(
        only_models.models["summary-model"],
        ModelScript::new(vec![Step::text("s")])
    );
    // Without `models`, a script serializes as before.
    assert_eq!(
        serde_json::to_value(Script::new(vec![Step::text("a")])).unwrap(),
        json!({"steps": [{"text": "a"}]})
    );
}

#[test]
fn model_scripts_round_trip_through_json() {
    let script = Script::new(vec![Step::text("a")]).with_model(
        "summary-model",
        vec![
            Step::text("s").fail_stream_after(1, ProviderErrorKind::Overloaded),
            Step::text("t").cut_after(2).repeat_forever(),
        ],
    );
    let json = serde_json::to_string(&script).unwrap();
    assert_eq!(Script::from_json(&json).unwrap(), script);
    assert!(script.validate().is_ok());
}

#[test]
fn parses_and_round_trips_per_turn_scripts() {
    let script = Script::from_json(
        r#"{"per_turn": true,
            "steps": [{"tool_calls": [{"name": "f"}]}, {"text": "done", "forever": true}],
            "models": {"summary-model": {"steps": [{"text": "s"}]}}}"#,
    )
    .unwrap();
    let built = Script::new(vec![
        Step::tool_call("f", json!({})),
        Step::text("done").repeat_forever(),
    ])
    .with_model("summary-model", vec![Step::text("s")])
    .with_per_turn();
    assert_eq!(script, built);
    assert!(built.validate().is_ok());
    let json = serde_json::to_value(&built).unwrap();
    assert_eq!(json["per_turn"], true);
    assert_eq!(Script::from_json(&json.to_string()).unwrap(), built);
    // Off by default, and then not written.
    assert!(
        !Script::from_json(r#"{"steps": [{"text": "a"}]}"#)
            .unwrap()
            .per_turn
    );
    let off = serde_json::to_value(Script::new(vec![Step::text("a")])).unwrap();
    assert!(off.get("per_turn").is_none(), "{off}");
}

#[test]
fn a_per_turn_script_needs_a_step() {
    for json in [
        r#"{"per_turn": true}"#,
        r#"{"per_turn": true, "steps": [], "models": {"m": {"steps": []}}}"#,
    ] {
        assert!(
            problem(json).contains("a `per_turn` script needs at least one step"),
            "{json}: {}",
            problem(json)
        );
    }
    assert!(Script::default().with_per_turn().validate().is_err());
    let only_models = Script::default()
        .with_model("m", vec![Step::text("s")])
        .with_per_turn();
    assert!(only_models.validate().is_ok());
    assert!(problem(r#"{"per_turn": "yes", "steps": []}"#).contains("invalid type"));
    // Steps are checked as in any script.
    assert!(
        problem(r#"{"per_turn": true, "steps": [{"text": "a", "times": 0}]}"#)
            .contains("steps[0]: `times` must be at least 1")
    );
}

#[test]
fn rejects_problems_of_model_scripts_naming_the_place() {
    let cases = [
        (
            r#"{"models": {"summary-model": {"steps": [{}, {}, {"times": 0}]}}}"#,
            "models.summary-model.steps[2]: `times` must be at least 1",
        ),
        (
            r#"{"steps": [], "models": {"s": {"steps": [{"forever": true}, {"text": "x"}]}}}"#,
            "models.s.steps[1] can never be reached: models.s.steps[0] repeats forever",
        ),
        (
            r#"{"models": {"s": {"steps": [{"error": {"status": 500}, "text": "x"}]}}}"#,
            "models.s.steps[0]: an `error` step cannot also have `text`",
        ),
        (
            r#"{"models": {"": {"steps": []}}}"#,
            "models: a model name cannot be empty",
        ),
        (
            r#"{"models": {"s": {"steps": [{"txt": "x"}]}}}"#,
            "unknown field `txt`",
        ),
        (r#"{"models": {"s": {"step": []}}}"#, "unknown field `step`"),
        (r#"{"models": {"s": {}}}"#, "missing field `steps`"),
        (
            r#"{"models": {"s": [{"text": "x"}]}}"#,
            "not a valid script",
        ),
    ];
    for (json, expected) in cases {
        let message = problem(json);
        assert!(message.contains(expected), "{json}: {message}");
    }
    let built = Script::default().with_model("s", vec![Step::text("x").repeat(0)]);
    let error = built.validate().unwrap_err();
    assert_eq!(error.origin, "(built in code)");
    assert!(error.problem.starts_with("models.s.steps[0]: "), "{error}");
}

fn problem(json: &str) -> String {
    Script::from_json(json).unwrap_err().to_string()
}

#[test]
fn rejects_unknown_fields_and_bad_types() {
    assert!(problem(r#"{"steps": [{"txt": "hi"}]}"#).contains("unknown field `txt`"));
    assert!(problem(r#"{"steps": [{"finish_reason": "done"}]}"#).contains("unknown variant"));
    assert!(
        problem(r#"{"steps": [{"tool_calls": [{"name": "f", "arguments": [1]}]}]}"#)
            .contains("JSON object or a raw string")
    );
    assert!(problem("{").contains("(inline JSON)"));
}

#[test]
fn rejects_contradictions_naming_the_step() {
    let cases = [
        (
            r#"{"steps": [{}, {"times": 0}]}"#,
            "steps[1]: `times` must be at least 1",
        ),
        (
            r#"{"steps": [{"times": 2, "forever": true}]}"#,
            "cannot be combined",
        ),
        (
            r#"{"steps": [{"forever": true}, {"text": "x"}]}"#,
            "steps[1] can never be reached",
        ),
        (
            r#"{"steps": [{"error": {"status": 500}, "text": "x"}]}"#,
            "steps[0]: an `error` step cannot also have `text`",
        ),
        (
            r#"{"steps": [{"error": {"status": 200}}]}"#,
            "not an HTTP error",
        ),
        (
            r#"{"steps": [{"error": {"status": 500, "headers": {"bad name": "x"}}}]}"#,
            "not a valid HTTP header",
        ),
        (
            r#"{"steps": [{"cut_mode": "eof"}]}"#,
            "needs `cut_after_chunks`",
        ),
        (
            r#"{"steps": [{"tool_calls": [{"name": "f", "id": "a"}, {"name": "g", "id": "a"}]}]}"#,
            "used twice",
        ),
        (
            r#"{"steps": [{"text": "x", "cut_after_chunks": 1, "stream_error": {"after_chunks": 1}}]}"#,
            "`stream_error` and `cut_after_chunks` cannot be combined",
        ),
        (
            r#"{"steps": [{"error": {"status": 500}, "stream_error": {"after_chunks": 1}}]}"#,
            "an `error` step cannot also have `stream_error`",
        ),
    ];
    for (json, expected) in cases {
        let message = problem(json);
        assert!(message.contains(expected), "{json}: {message}");
    }
}

#[test]
fn file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("keel-mock-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("script.json");
    let missing = Script::from_file(&path).unwrap_err();
    assert!(missing.origin.ends_with("script.json"), "{missing}");
    assert!(missing.problem.contains("cannot read"), "{missing}");

    std::fs::write(&path, r#"{"steps": [{"times": 0}]}"#).unwrap();
    let bad = Script::from_file(&path).unwrap_err();
    assert!(bad.to_string().contains("script.json"), "{bad}");
    assert!(bad.problem.contains("steps[0]"), "{bad}");

    std::fs::write(&path, r#"{"steps": [{"text": "ok"}]}"#).unwrap();
    assert_eq!(Script::from_file(&path).unwrap().steps.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn builders_only_touch_error_fields_of_error_steps() {
    let step = Step::text("x")
        .with_header("a", "b")
        .with_error_body(json!({}));
    assert_eq!(step, Step::text("x"));
    let error = Step::error(429)
        .with_header("retry-after", "3")
        .with_error_kind(ProviderErrorKind::Billing);
    let reply = error.error.unwrap();
    assert_eq!(reply.headers["retry-after"], "3");
    assert_eq!(reply.kind, Some(ProviderErrorKind::Billing));
}
