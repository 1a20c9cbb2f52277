//! Tests of message fixup, including a property test over random histories.

use proptest::prelude::*;

use super::*;
use crate::message::ToolCall;

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "t".into(),
        arguments: "{}".into(),
    }
}

fn calls(ids: &[&str]) -> Message {
    Message::assistant_with_calls("", ids.iter().map(|id| call(id)).collect())
}

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(|m| m.role).collect()
}

#[test]
fn a_well_formed_history_is_returned_untouched() {
    let history = vec![
        Message::system("s"),
        Message::user("hi"),
        calls(&["a", "b"]),
        Message::tool_result("b", "B"),
        Message::tool_result("a", "A"),
        Message::assistant("done"),
    ];
    assert!(is_well_formed(&history));
    assert_eq!(fixup(history.clone()), history);
}

#[test]
fn consecutive_user_messages_are_merged_without_losing_text() {
    let fixed = fixup(vec![Message::user("one"), Message::user("two")]);
    assert_eq!(fixed.len(), 1);
    assert_eq!(fixed[0].content, "one\n\ntwo");
}

#[test]
fn a_call_whose_result_never_came_is_stripped() {
    // A worker died after the model asked for `b` but before it ran.
    let fixed = fixup(vec![
        Message::user("hi"),
        calls(&["a", "b"]),
        Message::tool_result("a", "A"),
        Message::user("still there?"),
    ]);
    assert_eq!(
        roles(&fixed),
        [Role::User, Role::Assistant, Role::Tool, Role::User]
    );
    assert_eq!(fixed[1].tool_calls.len(), 1);
    assert_eq!(fixed[1].tool_calls[0].id, "a");
}

#[test]
fn an_assistant_left_empty_by_stripping_is_dropped_and_users_merge_again() {
    let fixed = fixup(vec![
        Message::user("one"),
        calls(&["x"]),
        Message::user("two"),
    ]);
    assert_eq!(roles(&fixed), [Role::User]);
    assert_eq!(fixed[0].content, "one\n\ntwo");
}

#[test]
fn orphan_and_duplicate_results_are_dropped() {
    let fixed = fixup(vec![
        Message::tool_result("ghost", "?"),
        Message::user("hi"),
        calls(&["a"]),
        Message::tool_result("a", "first"),
        Message::tool_result("a", "again"),
        Message::tool_result("zzz", "stray"),
        Message::assistant("ok"),
    ]);
    assert_eq!(
        roles(&fixed),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(fixed[2].content, "first");
}

#[test]
fn consecutive_assistants_merge_their_calls() {
    let fixed = fixup(vec![
        Message::user("hi"),
        calls(&["a"]),
        calls(&["b"]),
        Message::tool_result("a", "A"),
        Message::tool_result("b", "B"),
    ]);
    assert_eq!(
        roles(&fixed),
        [Role::User, Role::Assistant, Role::Tool, Role::Tool]
    );
    assert_eq!(fixed[1].tool_calls.len(), 2);
}

#[test]
fn a_call_id_reused_by_a_later_turn_is_renamed_with_its_result() {
    let fixed = fixup(vec![
        Message::user("hi"),
        calls(&["a"]),
        Message::tool_result("a", "first"),
        calls(&["a"]),
        Message::tool_result("a", "second"),
    ]);
    assert!(is_well_formed(&fixed));
    assert_eq!(fixed[1].tool_calls[0].id, "a");
    assert_eq!(fixed[3].tool_calls[0].id, "a_2");
    assert_eq!(fixed[4].tool_call_id.as_deref(), Some("a_2"));
    assert_eq!(fixed[4].content, "second");
}

#[test]
fn a_repeated_call_id_is_not_well_formed_wherever_it_repeats() {
    let across_turns = [
        Message::user("hi"),
        calls(&["a"]),
        Message::tool_result("a", "first"),
        calls(&["b", "a"]),
        Message::tool_result("b", "second"),
        Message::tool_result("a", "third"),
    ];
    assert!(!is_well_formed(&across_turns));
    let within_one_answer = [
        Message::user("hi"),
        calls(&["a", "a"]),
        Message::tool_result("a", "first"),
        Message::tool_result("a", "second"),
    ];
    assert!(!is_well_formed(&within_one_answer));
    let distinct = [
        Message::user("hi"),
        calls(&["a", "b"]),
        Message::tool_result("b", "first"),
        Message::tool_result("a", "second"),
    ];
    assert!(is_well_formed(&distinct));
}

#[test]
fn shared_messages_pass_through_when_well_formed_and_are_fixed_when_not() {
    let good: Vec<Arc<Message>> =
        vec![Message::user("hi").into(), Message::assistant("yes").into()];
    let kept = fixup_shared(good.clone());
    assert_eq!(kept.len(), 2);
    assert!(kept.iter().zip(&good).all(|(a, b)| Arc::ptr_eq(a, b)));

    let bad: Vec<Arc<Message>> = vec![
        Message::user("first").into(),
        Message::user("second").into(),
        calls(&["x"]).into(),
    ];
    let fixed = fixup_shared(bad);
    assert!(is_well_formed(&fixed));
    assert_eq!(fixed[0].role, Role::User);
    assert!(fixed[0].content.contains("first") && fixed[0].content.contains("second"));
}

fn message_strategy() -> impl Strategy<Value = Message> {
    let id = prop::sample::select(vec!["a", "b", "c", "d"]);
    prop_oneof![
        "[a-z]{0,6}".prop_map(Message::user),
        "[a-z]{0,6}".prop_map(Message::assistant),
        prop::collection::vec(id.clone(), 1..3)
            .prop_map(|ids| Message::assistant_with_calls("", ids.into_iter().map(call).collect())),
        (id, "[a-z]{0,6}").prop_map(|(id, text)| Message::tool_result(id, text)),
        Just(Message::system("sys")),
    ]
}

fn user_text(messages: &[Message]) -> String {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

proptest! {
    #[test]
    fn fixup_always_yields_a_well_formed_history_and_keeps_user_text(
        history in prop::collection::vec(message_strategy(), 0..24)
    ) {
        let fixed = fixup(history.clone());
        prop_assert!(is_well_formed(&fixed), "not well formed: {:?}", fixed);
        // User text is never lost: merged users keep every piece, in order.
        prop_assert_eq!(user_text(&fixed), user_text(&history));
        // Fixing twice changes nothing.
        prop_assert_eq!(fixup(fixed.clone()), fixed);
    }
}

#[test]
fn calls_sharing_an_id_get_free_ones_and_the_models_own_ids_are_kept() {
    let mut calls = vec![call("a"), call("a"), call("a_2"), call("b")];
    let mut used: HashSet<String> = ["b".to_string()].into();
    make_call_ids_unique(&mut calls, &mut used);
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "a_3", "a_2", "b_2"]);
    assert_eq!(used.len(), 5);
}
