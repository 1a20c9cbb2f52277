//! A run's report as OpenAI's answer: the `chat.completion` object, its chunks, the usage and
//! the finish reason.
//!
//! The content is the run's final text. A run waiting on a person answers what is pending and
//! how to answer it ([`crate::pending`]); a run that stopped on a budget (`max_steps`,
//! `budget_exceeded`) finishes with `length` and the loop's note; one that failed, was
//! cancelled or timed out says so as its content and finishes with `stop`.

use keel_core::{AgentState, RunReport, Usage};
use serde_json::{Value, json};

use crate::pending::pending_text;

/// What a run answers: its content and finish reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The assistant message's text.
    pub content: String,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
}

/// The answer of a run that ended or waits on a person.
pub fn of(report: &RunReport) -> Answer {
    let finish_reason = match report.state {
        AgentState::MaxSteps | AgentState::BudgetExceeded => "length",
        _ => "stop",
    };
    let content = match report.state {
        AgentState::WaitingOnHuman if report.reason.is_none() => pending_text(report),
        AgentState::Completed | AgentState::MaxSteps | AgentState::BudgetExceeded => {
            report.final_text.clone().unwrap_or_default()
        }
        state => {
            let why = report
                .error
                .clone()
                .or_else(|| report.final_text.clone())
                .unwrap_or_default();
            format!("keel's run `{}` ended {state}: {why}", report.run_id)
                .trim_end_matches([':', ' '])
                .to_string()
        }
    };
    Answer {
        content,
        finish_reason,
    }
}

/// One progress line: a tool call starting.
pub fn progress_line(tool: &str) -> String {
    format!("_running `{tool}`…_\n")
}

/// The progress lines of a whole answer: one per tool call of the run, then a blank line.
pub fn progress_of(report: &RunReport) -> String {
    if report.tool_calls.is_empty() {
        return String::new();
    }
    let mut lines: String = report
        .tool_calls
        .iter()
        .map(|call| progress_line(&call.name))
        .collect();
    lines.push('\n');
    lines
}

/// The completion id of a run.
pub fn completion_id(run_id: &str) -> String {
    format!("chatcmpl-{run_id}")
}

/// OpenAI's usage object.
pub fn usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total(),
    })
}

/// The whole `chat.completion` object.
pub fn completion(
    run_id: &str,
    model: &str,
    created: i64,
    answer: &Answer,
    run_usage: &Usage,
) -> Value {
    json!({
        "id": completion_id(run_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer.content, "refusal": null},
            "finish_reason": answer.finish_reason,
            "logprobs": null,
        }],
        "usage": usage(run_usage),
        "system_fingerprint": null,
    })
}

/// One `chat.completion.chunk` with `delta` (and a finish reason on the last one).
pub fn chunk(
    run_id: &str,
    model: &str,
    created: i64,
    delta: Value,
    finish_reason: Option<&str>,
) -> Value {
    json!({
        "id": completion_id(run_id),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
            "logprobs": null}],
        "usage": null,
        "system_fingerprint": null,
    })
}

/// The last chunk of a stream asked to include the usage: no choices, the usage.
pub fn usage_chunk(run_id: &str, model: &str, created: i64, run_usage: &Usage) -> Value {
    json!({
        "id": completion_id(run_id),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(run_usage),
        "system_fingerprint": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(state: &str, final_text: Option<&str>) -> RunReport {
        serde_json::from_value(json!({
            "run_id": "r1", "session_id": "s", "state": state, "final_text": final_text,
            "error": "boom", "iterations": 1, "model": "m", "tool_calls": [],
            "usage": {"input_tokens": 3, "output_tokens": 4}}))
        .unwrap()
    }

    #[test]
    fn the_finish_reason_says_whether_a_budget_ended_the_run() {
        assert_eq!(of(&report("completed", Some("hi"))).finish_reason, "stop");
        assert_eq!(of(&report("completed", Some("hi"))).content, "hi");
        assert_eq!(
            of(&report("max_steps", Some("note"))).finish_reason,
            "length"
        );
        assert_eq!(of(&report("budget_exceeded", None)).finish_reason, "length");
        let failed = of(&report("error", None));
        assert_eq!(failed.finish_reason, "stop");
        assert!(
            failed.content.contains("ended error: boom"),
            "{}",
            failed.content
        );
    }

    #[test]
    fn usage_is_in_openai_fields() {
        let body = completion(
            "r1",
            "keel",
            1,
            &of(&report("completed", Some("x"))),
            &Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
        );
        assert_eq!(body["id"], "chatcmpl-r1");
        assert_eq!(body["usage"]["total_tokens"], 7);
        assert_eq!(body["choices"][0]["message"]["content"], "x");
    }
}
