//! Unit tests of the run's context management: the recovery ladder, summaries, the sliding
//! window, and resuming a compacted session. Decisions only; no runtime.

use chrono::DateTime;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::context::{self as ctx, ContextSettings};
use crate::message::SeqRange;
use crate::provider::{ChatResponse, StopReason};
use crate::provider_error::ProviderError;
use crate::provider_error::ProviderErrorKind;
use crate::run::context::CONTEXT_HELP_QUESTION;

/// Text of about `n` tokens (each " word" is one cl100k token), starting with `tag`.
fn words(n: usize, tag: &str) -> String {
    format!("{tag}:{}", " word".repeat(n))
}

fn settings(window: u32) -> RunSettings {
    let mut settings = RunSettings::new("primary", "m1");
    settings.context = ContextSettings {
        window: Some(window),
        keep_last: 4,
        deep_keep: 2,
        ..ContextSettings::default()
    };
    settings.max_iterations = 100;
    settings
}

fn run_with(settings: RunSettings, history: Vec<Message>) -> Run {
    let tools = vec![ToolSpec::new("read", "reads", json!({"type": "object"}))];
    Run::new(
        "r",
        "s",
        settings,
        tools,
        Run::history(history),
        Message::user("go on"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
}

/// A history of `turns` read calls, each returning about `size` tokens.
fn research(turns: usize, size: usize) -> Vec<Message> {
    let mut history = vec![Message::user("research the files")];
    for i in 0..turns {
        history.push(Message::assistant_with_calls(
            "",
            vec![ToolCall {
                id: format!("c{i}"),
                name: "read".into(),
                arguments: format!(r#"{{"path":"f{i}"}}"#),
            }],
        ));
        history.push(Message::tool_result(
            format!("c{i}"),
            words(size, &format!("f{i}w")),
        ));
    }
    history
}

fn summary_answer(text: &str) -> ChatResponse {
    ChatResponse {
        message: Message::assistant(text),
        stop_reason: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 50,
            output_tokens: 20,
            ..Usage::default()
        },
        model: "m1".into(),
    }
}

fn expect_summarize(step: Step) -> ModelCall {
    match step {
        Step::Summarize(call) => call,
        other => panic!("expected a summary call, got {other:?}"),
    }
}

fn expect_call(step: Step) -> ModelCall {
    match step {
        Step::CallModel(call) => call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

#[test]
fn under_the_threshold_nothing_happens() {
    let mut run = run_with(settings(100_000), research(3, 50));
    let call = expect_call(run.start());
    assert_eq!(call.request.messages.len(), 7 + 1);
    assert!(
        run.messages().iter().all(|m| m.meta.tokens.is_some()),
        "every count is cached"
    );
}

#[test]
fn r1_summarizes_all_but_the_last_messages_and_pins_the_latest_results() {
    // 8 reads of ~200 tokens: ~1700 tokens against a 2000-token window (threshold 1400).
    let mut run = run_with(settings(2000), research(8, 200));
    let before = run.context_tokens();
    let summary_call = expect_summarize(run.start());
    assert_eq!(
        summary_call.request.messages[0].content,
        ctx::SUMMARY_INSTRUCTIONS
    );
    let input = &summary_call.request.messages[1].content;
    assert!(input.contains("research the files"));
    // The latest successful result of `read` among the summarized messages is pinned.
    assert!(
        input.contains("Pinned results") && input.contains("f5w:"),
        "{input}"
    );
    assert!(!summary_call.request.stream);

    let call = expect_call(run.on_summary(Ok(summary_answer("Read f0..f5; found the words."))));
    let sent = &call.request.messages;
    let summary = &sent[0];
    assert_eq!(
        summary.meta.internal,
        Some(InternalReason::CompactionSummary)
    );
    assert!(summary.content.contains("Read f0..f5") && summary.content.contains("f5w:"));
    // Seqs 1..=13 are summarized; the last two reads (4 messages) and the input stay verbatim.
    assert_eq!(
        summary.meta.summary_of,
        Some(SeqRange { first: 1, last: 13 })
    );
    assert_eq!(sent.len(), 1 + 4 + 1);
    assert!(run.context_tokens() < before);
    // Nothing is lost: the transcript holds every message and the summary, to be stored.
    assert_eq!(run.messages().len(), 17 + 1 + 1);
    assert!(
        run.unpersisted()
            .iter()
            .any(|m| m.meta.summary_of.is_some())
    );
    let events = run.drain_events();
    let compaction = events
        .iter()
        .find_map(|e| match e {
            EventKind::CompactionRun {
                before_tokens,
                after_tokens,
                before_messages,
                after_messages,
                pinned,
                summary_failed,
                ..
            } => Some((
                *before_tokens,
                *after_tokens,
                *before_messages,
                *after_messages,
                *pinned,
                *summary_failed,
            )),
            _ => None,
        })
        .unwrap();
    assert_eq!(compaction.2, 18);
    assert_eq!(compaction.3, 6);
    assert!(compaction.1 < compaction.0);
    assert_eq!((compaction.4, compaction.5), (1, false));
    assert_eq!(run.usage().total(), 70, "the summary call is paid for");
}

#[test]
fn a_failed_summary_truncates_deterministically_and_keeps_the_pins() {
    let mut run = run_with(settings(2000), research(8, 200));
    expect_summarize(run.start());
    let failure = || ProviderError::new(ProviderErrorKind::Server, "summary model down");
    // Retried as the run's own calls are (twice), with no other model to go to.
    expect_summarize(run.on_summary(Err(failure())));
    expect_summarize(run.on_summary(Err(failure())));
    let call = expect_call(run.on_summary(Err(failure())));
    let summary = &call.request.messages[0].content;
    assert!(
        summary.contains("13 earlier messages were dropped")
            && summary.contains("summary model down")
    );
    assert!(
        summary.contains("f5w:"),
        "pinned results survive: {summary}"
    );
    assert!(run.drain_events().iter().any(|e| matches!(
        e,
        EventKind::CompactionRun {
            summary_failed: true,
            ..
        }
    )));
}

#[test]
fn still_over_after_r1_fires_r2_then_r3_ends_the_run_without_a_human() {
    // Each new read is big enough to cross the threshold again right away.
    let mut run = run_with(settings(2000), research(8, 200));
    expect_summarize(run.start());
    let mut step = run.on_summary(Ok(summary_answer("s1")));
    let mut tiers = Vec::new();
    // Reads until the ladder runs out (the run's fixed overhead, its tools, decides how many).
    for i in 0..12 {
        let id = format!("n{i}");
        step = match step {
            Step::CallModel(_) => {
                let read = ChatResponse {
                    message: Message::assistant_with_calls(
                        "",
                        vec![ToolCall {
                            id: id.clone(),
                            name: "read".into(),
                            arguments: format!(r#"{{"path":"{id}"}}"#),
                        }],
                    ),
                    stop_reason: StopReason::ToolUse,
                    usage: Usage::default(),
                    model: "m1".into(),
                };
                run.on_model_result(Ok(read));
                run.on_tool_results(vec![ToolResult {
                    call_id: id.clone(),
                    ok: true,
                    content: words(700, &id),
                }])
            }
            Step::Summarize(call) => {
                let deep = call.request.messages[1].content.len();
                tiers.push(deep);
                run.on_summary(Ok(summary_answer("s")))
            }
            Step::Finish => break,
            other => panic!("{other:?}"),
        };
    }
    assert_eq!(run.state(), AgentState::Error);
    assert_eq!(run.reason(), Some(ErrorReason::ContextExhausted));
    assert!(run.error().unwrap().contains(CONTEXT_HELP_QUESTION));
    let fired: Vec<String> = run
        .drain_events()
        .iter()
        .filter_map(|e| match e {
            EventKind::RecoveryFired { tier, .. } => Some(tier.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(fired, ["r2", "r3"]);
    let deep = run
        .messages()
        .iter()
        .filter(|m| m.content.starts_with("[deep pruned]"))
        .count();
    assert_eq!(deep, 1);
}

#[test]
fn r3_makes_the_model_ask_a_reachable_human() {
    let mut s = settings(2000);
    s.human_reachable = true;
    let mut run = Run::new(
        "r",
        "s",
        s,
        vec![ToolSpec::new(
            "ask_human",
            "asks",
            json!({"type": "object"}),
        )],
        Run::history(research(8, 200)),
        Message::user(words(1300, "big")),
        DateTime::from_timestamp(0, 0).unwrap(),
    );
    // R1 cannot bring a 900-token input plus its neighbours under 1400: R2, then R3.
    let mut step = run.start();
    while let Step::Summarize(_) = step {
        step = run.on_summary(Ok(summary_answer("s")));
    }
    let call = expect_call(step);
    assert_eq!(
        call.request.tool_choice,
        ToolChoice::Tool("ask_human".into())
    );
    assert!(
        call.request
            .messages
            .iter()
            .any(|m| m.content.contains(CONTEXT_HELP_QUESTION))
    );
}

#[test]
fn a_context_overflow_error_fires_r2_and_retries_once() {
    let mut run = run_with(settings(1_000_000), research(8, 200));
    let first = expect_call(run.start());
    let overflow = || {
        ProviderError::new(ProviderErrorKind::ContextOverflow, "prompt is too long")
            .with_status(400)
    };
    let summary = expect_summarize(run.on_model_result(Err(overflow())));
    assert!(
        summary.request.messages[1]
            .content
            .contains("research the files")
    );
    let retry = expect_call(run.on_summary(Ok(summary_answer("s"))));
    assert_eq!(run.iteration(), 1, "the retry is the same iteration");
    assert!(retry.request.messages.len() < first.request.messages.len());
    assert!(
        retry.request.messages[0]
            .content
            .starts_with("[deep pruned]")
    );
    assert_eq!(run.on_model_result(Err(overflow())), Step::Finish);
    assert_eq!(run.reason(), Some(ErrorReason::ContextExhausted));
}

#[test]
fn at_most_four_recoveries_fire_in_a_turn() {
    let mut s = settings(2000);
    s.context.max_recoveries = 1;
    let mut run = run_with(s, research(8, 200));
    expect_summarize(run.start());
    let call = expect_call(run.on_summary(Ok(summary_answer(&words(1300, "long")))));
    // Still over, but no recovery is left: the call goes out with a context notice, merged
    // into the last user turn of the request and never stored.
    let last = call.request.messages.last().unwrap();
    assert!(last.content.contains("Context notice"), "{}", last.content);
    assert!(
        run.messages()
            .iter()
            .all(|m| !m.content.contains("Context notice"))
    );
}

#[test]
fn the_sliding_window_drops_the_oldest_and_keeps_the_first_user_message() {
    let mut s = settings(2000);
    s.context.strategy = ctx::Strategy::SlidingWindow;
    let mut run = run_with(s, research(8, 200));
    let call = expect_call(run.start());
    let sent = &call.request.messages;
    assert_eq!(sent[0].content, "research the files");
    assert_eq!(
        sent[1].role,
        Role::Assistant,
        "a call starts the kept part, never a result"
    );
    assert!(run.context_tokens() <= 1400);
    assert!(run.drain_events().iter().any(
        |e| matches!(e, EventKind::CompactionRun { strategy, .. } if strategy == "sliding_window")
    ));
    assert_eq!(
        run.messages().len(),
        18,
        "nothing is removed from the transcript"
    );
}

#[test]
fn a_compacted_session_resumes_from_its_summary() {
    let mut history = research(3, 20);
    let mut summary = Message::internal_user(
        "Summary: read f0 and f1.",
        InternalReason::CompactionSummary,
    );
    summary.meta.summary_of = Some(SeqRange { first: 1, last: 5 });
    history.push(summary);
    let mut run = run_with(settings(100_000), history);
    let call = expect_call(run.start());
    let contents: Vec<&str> = call
        .request
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    // The summary first, then seqs 6 and 7 (the last read and its result), then the input.
    assert_eq!(contents[0], "Summary: read f0 and f1.");
    assert_eq!(call.request.messages[1].tool_calls[0].id, "c2");
    assert_eq!(contents.len(), 4);
}

/// Histories of user turns and read calls of random sizes.
fn random_history() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec((0usize..3, 10usize..300), 1..30).prop_map(|turns| {
        let mut messages = vec![Message::user("task")];
        for (i, (kind, size)) in turns.into_iter().enumerate() {
            match kind {
                0 => messages.push(Message::user(words(size / 4, "u"))),
                _ => {
                    let id = format!("c{i}");
                    messages.push(Message::assistant_with_calls(
                        "",
                        vec![ToolCall {
                            id: id.clone(),
                            name: "read".into(),
                            arguments: "{}".into(),
                        }],
                    ));
                    messages.push(Message::tool_result(id, words(size, "w")));
                }
            }
        }
        messages
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn compaction_never_separates_a_call_from_its_result(history in random_history()) {
        let mut run = run_with(settings(1500), history);
        let mut step = run.start();
        for _ in 0..6 {
            let call = match step {
                Step::Summarize(_) => {
                    step = run.on_summary(Ok(summary_answer("s")));
                    continue;
                }
                Step::CallModel(call) => call,
                _ => break,
            };
            let sent = &call.request.messages;
            let calls: Vec<&str> = sent.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str())).collect();
            let results: Vec<&str> = sent.iter().filter_map(|m| m.tool_call_id.as_deref()).collect();
            prop_assert!(results.iter().all(|r| calls.contains(r)), "a result without its call");
            prop_assert!(calls.iter().all(|c| results.contains(c)), "a call without its result");
            prop_assert!(crate::fixup::is_well_formed(sent));
            break;
        }
    }
}

#[test]
fn a_window_smaller_than_the_fixed_prompt_stops_at_once_naming_both() {
    let mut settings = settings(300);
    settings.system_prompt = Some(words(1_000, "rules"));
    let mut run = run_with(settings, Vec::new());
    let fixed = run.fixed_tokens;
    assert!(fixed > 1_000, "{fixed}");
    assert!(
        matches!(run.start(), Step::Finish),
        "no model call, no summary"
    );
    assert_eq!(run.state(), AgentState::Error);
    assert_eq!(run.reason(), Some(ErrorReason::ContextExhausted));
    let error = run.error().unwrap();
    assert!(error.contains("300 tokens"), "{error}");
    assert!(error.contains(&format!("{fixed} tokens")), "{error}");
}
