//! Tests of the loop guard's detectors and ladder.

use super::*;

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

fn result(id: &str, ok: bool, content: &str) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        ok,
        content: content.into(),
    }
}

#[test]
fn the_same_call_three_times_is_identical_thrash() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    for i in 0..2 {
        let id = i.to_string();
        let c = call(&id, "search", r#"{"q": "rust"}"#);
        assert_eq!(
            guard.observe_batch(&[c], &[result(&id, true, "hits")]),
            None
        );
    }
    // Key order and spacing do not make a call different.
    let c = call("2", "search", r#"{ "q":"rust" }"#);
    let detection = guard.observe_batch(&[c], &[result("2", true, "hits")]);
    assert_eq!(
        detection,
        Some(Detection::IdenticalThrash {
            tool: "search".into(),
            count: 3
        })
    );
}

#[test]
fn reading_different_files_is_progress_not_thrash() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    for i in 0..10 {
        let id = i.to_string();
        let c = call(&id, "read_file", &format!(r#"{{"path": "f{i}.txt"}}"#));
        let r = result(&id, true, &format!("contents of file {i}"));
        assert_eq!(guard.observe_batch(&[c], &[r]), None, "call {i}");
    }
}

#[test]
fn variations_that_learn_nothing_are_pattern_thrash() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    // A first answer is something learned; errors, blanks and repeats of it are not.
    let c = call("0", "search", r#"{"q": "a"}"#);
    assert_eq!(
        guard.observe_batch(&[c], &[result("0", true, "no results")]),
        None
    );
    let mut detection = None;
    for (i, q) in ["b", "c", "d", "e"].iter().enumerate() {
        let id = (i + 1).to_string();
        let c = call(&id, "search", &format!(r#"{{"q": "{q}"}}"#));
        let r = match i {
            0 => result(&id, false, "Error: timeout"),
            1 => result(&id, true, "   "),
            _ => result(&id, true, "no results"),
        };
        detection = guard.observe_batch(&[c], &[r]);
    }
    // The window of six still holds the first, informative call: the rule needs every
    // same-tool call in the window to have taught nothing.
    assert_eq!(detection, None);
    let c = call("8", "search", r#"{"q": "f"}"#);
    let detection = guard.observe_batch(&[c], &[result("8", false, "Error: timeout")]);
    assert_eq!(
        detection, None,
        "six calls: the first is still in the window"
    );
    let c = call("9", "search", r#"{"q": "g"}"#);
    let detection = guard.observe_batch(&[c], &[result("9", false, "Error: timeout")]);
    assert_eq!(
        detection,
        Some(Detection::PatternThrash {
            tool: "search".into(),
            count: 6
        })
    );
}

#[test]
fn one_new_finding_in_the_window_is_progress() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    for i in 0..5 {
        let id = i.to_string();
        let c = call(&id, "search", &format!(r#"{{"q": "{i}"}}"#));
        let content = if i == 2 { "found it: 42" } else { "" };
        assert_eq!(
            guard.observe_batch(&[c], &[result(&id, true, content)]),
            None
        );
    }
}

#[test]
fn the_same_batch_three_turns_in_a_row_is_detected() {
    let config = GuardConfig {
        identical_calls: 99,
        ..GuardConfig::default()
    };
    let mut guard = LoopGuard::new(config);
    let batch = |n: usize| {
        vec![
            call(&format!("a{n}"), "ls", "{}"),
            call(&format!("b{n}"), "cat", r#"{"p": 1}"#),
        ]
    };
    assert_eq!(guard.observe_batch(&batch(0), &[]), None);
    assert_eq!(guard.observe_batch(&batch(1), &[]), None);
    assert_eq!(
        guard.observe_batch(&batch(2), &[]),
        Some(Detection::RepeatedBatch { count: 3 })
    );
}

#[test]
fn repeated_text_is_detected_and_blank_text_ignored() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    assert_eq!(guard.observe_text("I will check."), None);
    assert_eq!(guard.observe_text("  "), None);
    assert_eq!(guard.observe_text("I will check."), None);
    assert_eq!(
        guard.observe_text("I will check. "),
        Some(Detection::RepeatedText { count: 3 })
    );
}

#[test]
fn the_ladder_goes_nudge_directive_then_stuck_or_ask_human() {
    let detection = Detection::RepeatedBatch { count: 3 };
    let mut guard = LoopGuard::new(GuardConfig::default());
    assert!(matches!(
        guard.escalate(&detection, false),
        Escalation::Nudge(_)
    ));
    assert!(matches!(
        guard.escalate(&detection, false),
        Escalation::Directive(_)
    ));
    let last = guard.escalate(&detection, false);
    assert!(matches!(last, Escalation::Stuck(_)));
    assert_eq!(last.level(), 3);
    let mut guard = LoopGuard::new(GuardConfig::default());
    guard.escalate(&detection, true);
    guard.escalate(&detection, true);
    assert!(matches!(
        guard.escalate(&detection, true),
        Escalation::AskHuman(_)
    ));
}

#[test]
fn long_argument_values_are_compared_on_their_first_200_characters() {
    let long_a = format!(r#"{{"text": "{}A"}}"#, "x".repeat(300));
    let long_b = format!(r#"{{"text": "{}B"}}"#, "x".repeat(300));
    assert_eq!(
        signature(&call("1", "w", &long_a)),
        signature(&call("2", "w", &long_b))
    );
}

/// Observes one single-call batch and returns what the guard says.
fn observe(
    guard: &mut LoopGuard,
    id: usize,
    name: &str,
    args: &str,
    ok: bool,
    content: &str,
) -> Option<Detection> {
    let id = id.to_string();
    guard.observe_batch(&[call(&id, name, args)], &[result(&id, ok, content)])
}

#[test]
fn pattern_thrash_fires_at_exactly_four_fruitless_calls_in_the_last_six() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    // Three fruitless searches among reads that each learn something: not yet thrash.
    for i in 0..3 {
        let read = format!(r#"{{"path": "f{i}"}}"#);
        assert_eq!(
            observe(
                &mut guard,
                2 * i,
                "read_file",
                &read,
                true,
                &format!("text {i}")
            ),
            None
        );
        let search = format!(r#"{{"q": "{i}"}}"#);
        assert_eq!(
            observe(
                &mut guard,
                2 * i + 1,
                "search",
                &search,
                false,
                "Error: timeout"
            ),
            None,
            "{} fruitless searches in the window",
            i + 1
        );
    }
    // The fourth in the last six is.
    assert_eq!(
        observe(
            &mut guard,
            6,
            "search",
            r#"{"q": "3"}"#,
            false,
            "Error: timeout"
        ),
        Some(Detection::PatternThrash {
            tool: "search".into(),
            count: 4
        })
    );
}

#[test]
fn identical_thrash_fires_at_exactly_the_third_identical_call_in_the_last_six() {
    let mut guard = LoopGuard::new(GuardConfig::default());
    let same = r#"{"q": "rust"}"#;
    for i in 0..2 {
        assert_eq!(
            observe(&mut guard, 2 * i, "search", same, true, "hits"),
            None
        );
        let read = format!(r#"{{"path": "f{i}"}}"#);
        assert_eq!(
            observe(
                &mut guard,
                2 * i + 1,
                "read_file",
                &read,
                true,
                &format!("text {i}")
            ),
            None
        );
    }
    assert_eq!(
        observe(&mut guard, 4, "search", same, true, "hits"),
        Some(Detection::IdenticalThrash {
            tool: "search".into(),
            count: 3
        })
    );
}
