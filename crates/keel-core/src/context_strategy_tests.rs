use super::*;

struct Named(&'static str);

impl ContextStrategy for Named {
    fn name(&self) -> &str {
        self.0
    }

    fn decide(&self, _view: &ContextView<'_>) -> Decision {
        Decision::nothing()
    }
}

fn with_custom(name: &'static str) -> ContextSettings {
    ContextSettings {
        custom: Some(CustomStrategy::new(Arc::new(Named(name)))),
        ..ContextSettings::default()
    }
}

#[test]
fn the_built_ins_are_chosen_by_the_strategy_setting() {
    let mut settings = ContextSettings::default();
    assert_eq!(settings.context_strategy().name(), "compact");
    assert!(!settings.context_strategy().keeps_first_user());
    settings.strategy = Strategy::SlidingWindow;
    assert_eq!(settings.context_strategy().name(), "sliding_window");
    assert!(settings.context_strategy().keeps_first_user());
}

#[test]
fn settings_without_a_registered_strategy_are_written_as_before() {
    let json = serde_json::to_value(ContextSettings::default()).unwrap();
    assert!(json.get("custom").is_none(), "{json}");
}

#[test]
fn a_registered_strategy_is_written_as_its_name_and_read_back_unattached() {
    let settings = with_custom("last_n");
    assert_eq!(settings.context_strategy().name(), "last_n");
    let json = serde_json::to_value(&settings).unwrap();
    assert_eq!(json["custom"], "last_n");
    let mut back: ContextSettings = serde_json::from_value(json).unwrap();
    assert_eq!(back, settings);
    let custom = back.custom.as_ref().unwrap();
    assert_eq!(custom.name(), "last_n");
    assert!(custom.strategy().is_none());
    // Unattached, the built-in decides.
    assert_eq!(back.context_strategy().name(), "compact");
    // Another name is not taken for it.
    back.reattach(&with_custom("other"));
    assert_eq!(back.context_strategy().name(), "compact");
    back.reattach(&ContextSettings::default());
    assert_eq!(back.context_strategy().name(), "compact");
    // The same name is.
    back.reattach(&with_custom("last_n"));
    assert_eq!(back.context_strategy().name(), "last_n");
}

#[test]
fn a_run_without_a_registered_strategy_takes_none_on_resume() {
    let mut settings = ContextSettings::default();
    settings.reattach(&with_custom("last_n"));
    assert!(settings.custom.is_none());
    assert_eq!(settings.context_strategy().name(), "compact");
}

#[test]
fn next_start_drops_a_call_with_its_results_and_never_the_last_message() {
    use crate::message::ToolCall;
    let call = |id: &str| ToolCall {
        id: id.into(),
        name: "read".into(),
        arguments: "{}".into(),
    };
    let messages = vec![
        Message::user("task"),
        Message::assistant_with_calls("", vec![call("a"), call("b")]),
        Message::tool_result("a", "x"),
        Message::tool_result("b", "y"),
        Message::assistant("done"),
        Message::tool_result("z", "stray"),
    ];
    assert_eq!(next_start(&messages, 0), 1);
    assert_eq!(next_start(&messages, 1), 4);
    assert_eq!(next_start(&messages, 4), 5);
    assert_eq!(next_start(&messages[..4], 1), 3);
}

#[test]
fn decisions_carry_their_action_and_state() {
    let decision = Decision::drop_until(3).with_state(serde_json::json!({"n": 1}));
    assert_eq!(decision.action, Action::Drop { until: 3 });
    assert_eq!(decision.state, Some(serde_json::json!({"n": 1})));
    assert_eq!(
        Decision::summarize(2).action,
        Action::Summarize { until: 2 }
    );
    assert_eq!(Decision::ask_human().action, Action::AskHuman);
    assert_eq!(Decision::nothing().state, None);
}
