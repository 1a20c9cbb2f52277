//! End to end: `keel run` exports its run as OpenTelemetry spans over OTLP/HTTP to a local
//! receiver (decoding the protobuf): a tool-using run with a retry, a fallback and a
//! sub-agent arrives as one span tree with the GenAI conventions' names and attributes;
//! content only with `record_content = true`; with no endpoint nothing is ever sent; a run
//! continued by another process is a linked span of the same trace; `keel serve` exports its
//! runs and flushes at its stop.

mod common;
mod traces;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, report, run, stderr, stdout, temp, write_config};
use serde_json::json;
use traces::{Receiver, all_attributes, by_name, hex, int, string, strings};

/// `keel run` in `home` against `mock`, in a workspace holding `a.txt`.
fn keel_run(
    home: &std::path::Path,
    mock: &Mock,
    workspace: &std::path::Path,
) -> std::process::Command {
    std::fs::write(workspace.join("a.txt"), "alpha-secret").unwrap();
    let mut command = keel(home);
    command
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(workspace);
    command
}

fn tool_run_script() -> String {
    json!({
        "steps": [
            {"error": {"status": 500}},
            {"error": {"status": 404}},
            {"tool_calls": [
                {"id": "r1", "name": "read_file", "arguments": {"path": "a.txt"}},
                {"id": "d1", "name": "delegate_task", "arguments": {"goal": "look around"}}
            ]},
            {"text": "all done"}
        ],
        "models": {"child-model": {"steps": [{"text": "child: ", "echo_user": true}]}}
    })
    .to_string()
}

fn telemetry(receiver: &Receiver, record_content: bool) -> String {
    format!(
        "[delegation]\nenabled = true\nmodel = \"child-model\"\n\n[telemetry]\notlp_endpoint = \
         \"{}\"\nrecord_content = {record_content}\n",
        receiver.url
    )
}

#[test]
fn a_tool_run_with_a_retry_and_a_fallback_arrives_as_one_span_tree() {
    let receiver = Receiver::start();
    let mock = Mock::start(&tool_run_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(&home, "", &telemetry(&receiver, false));
    let output = run(keel_run(&home, &mock, &workspace)
        .args(["--fallback-model", "backup-model"])
        .arg("read a.txt and delegate"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["final_text"], "all done", "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_string();

    let spans = receiver.spans();
    let named = by_name(&spans);
    let mut names: Vec<&String> = named.keys().collect();
    names.sort();
    assert!(spans.iter().all(|(service, _)| service == "keel"));
    // Every span is in the run's trace, whose id is the run id.
    assert!(
        spans
            .iter()
            .all(|(_, s)| hex(&s.trace_id) == run_id.replace('-', "")),
        "{names:?}"
    );

    let roots = &named["invoke_agent keel"];
    assert_eq!(roots.len(), 2, "the run and its child: {names:?}");
    let root = roots
        .iter()
        .find(|s| string(&s.attributes, "keel.run.id").as_deref() == Some(&run_id))
        .unwrap();
    assert!(root.parent_span_id.is_empty(), "the run's span is the root");
    assert_eq!(
        string(&root.attributes, "gen_ai.operation.name").unwrap(),
        "invoke_agent"
    );
    assert_eq!(
        string(&root.attributes, "gen_ai.provider.name").unwrap(),
        "mock"
    );
    assert_eq!(
        string(&root.attributes, "keel.run.state").unwrap(),
        "completed"
    );
    let events: Vec<&str> = root.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(events, ["agent.provider.retry", "agent.provider.fallback"]);

    // Two failed calls on the primary model, then two on the fallback.
    let failed = &named["chat mock-model"];
    assert_eq!(failed.len(), 2, "{names:?}");
    let mut errors: Vec<String> = failed
        .iter()
        .map(|s| {
            assert_eq!(s.parent_span_id, root.span_id);
            assert_eq!(s.status.as_ref().unwrap().code, 2, "status error");
            string(&s.attributes, "error.type").unwrap()
        })
        .collect();
    errors.sort();
    assert_eq!(errors, ["model_not_found", "server"]);
    let answered = &named["chat backup-model"];
    assert_eq!(answered.len(), 2, "{names:?}");
    for chat in answered {
        let attributes = &chat.attributes;
        assert_eq!(chat.parent_span_id, root.span_id);
        assert_eq!(string(attributes, "gen_ai.operation.name").unwrap(), "chat");
        assert_eq!(string(attributes, "gen_ai.provider.name").unwrap(), "mock");
        assert_eq!(
            string(attributes, "gen_ai.request.model").unwrap(),
            "backup-model"
        );
        assert_eq!(
            string(attributes, "gen_ai.response.model").unwrap(),
            "backup-model"
        );
        assert!(int(attributes, "gen_ai.usage.input_tokens").unwrap() > 0);
        assert!(int(attributes, "gen_ai.usage.output_tokens").unwrap() > 0);
        assert!(chat.start_time_unix_nano <= chat.end_time_unix_nano);
    }
    let mut finish: Vec<Vec<String>> = answered
        .iter()
        .map(|s| strings(&s.attributes, "gen_ai.response.finish_reasons").unwrap())
        .collect();
    finish.sort();
    assert_eq!(finish, [vec!["stop"], vec!["tool_calls"]]);

    let read = &named["execute_tool read_file"][0];
    assert_eq!(read.parent_span_id, root.span_id);
    assert_eq!(
        string(&read.attributes, "gen_ai.tool.name").unwrap(),
        "read_file"
    );
    assert_eq!(
        string(&read.attributes, "gen_ai.tool.call.id").unwrap(),
        "r1"
    );
    let delegate = &named["execute_tool delegate_task"][0];
    assert_eq!(
        string(&delegate.attributes, "gen_ai.tool.call.id").unwrap(),
        "d1"
    );

    // The sub-agent's run hangs under the parent's delegate_task call.
    let child = roots.iter().find(|s| s.span_id != root.span_id).unwrap();
    assert_eq!(child.parent_span_id, delegate.span_id);
    assert_eq!(int(&child.attributes, "keel.delegate.depth"), Some(1));
    let child_chat = &named["chat child-model"][0];
    assert_eq!(child_chat.parent_span_id, child.span_id);

    // No content without record_content.
    let everything = all_attributes(&spans);
    for content in [
        "alpha-secret",
        "look around",
        "all done",
        "gen_ai.tool.call.arguments",
    ] {
        assert!(!everything.contains(content), "{content} in {everything}");
    }
}

#[test]
fn record_content_puts_tool_arguments_results_and_answers_in_the_spans() {
    let receiver = Receiver::start();
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"text": "it says alpha"}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(&home, "", &telemetry(&receiver, true));
    let output = run(keel_run(&home, &mock, &workspace).arg("read a.txt"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let spans = receiver.spans();
    let named = by_name(&spans);
    let read = &named["execute_tool read_file"][0];
    assert_eq!(
        string(&read.attributes, "gen_ai.tool.call.arguments").unwrap(),
        r#"{"path":"a.txt"}"#
    );
    assert_eq!(
        string(&read.attributes, "gen_ai.tool.call.result").unwrap(),
        "alpha-secret"
    );
    let answers: Vec<String> = named["chat mock-model"]
        .iter()
        .filter_map(|s| string(&s.attributes, "gen_ai.output.messages"))
        .collect();
    assert!(
        answers.iter().any(|a| a.contains("it says alpha")),
        "{answers:?}"
    );
}

#[test]
fn with_no_endpoint_nothing_is_sent_and_the_environment_can_name_one() {
    let receiver = Receiver::start();
    let script = json!({"steps": [{"text": "hello", "forever": true}]}).to_string();
    let mock = Mock::start(&script);
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(&home, "", "[telemetry]\nrecord_content = true\n");
    let output = run(keel_run(&home, &mock, &workspace).arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(receiver.requests(), 0, "no endpoint: nothing is ever sent");

    let output = run(keel_run(&home, &mock, &workspace)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let spans = receiver.spans();
    assert_eq!(by_name(&spans)["invoke_agent keel"].len(), 1);

    let help = stdout(&run(keel(&home).arg("--help")));
    assert!(
        help.contains("[telemetry] otlp_endpoint") && help.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{help}"
    );
}

#[test]
fn keel_bench_traces_exports_every_run_of_the_bench() {
    let (_h, home) = temp();
    let output = run(keel(&home)
        .args(["bench", "--conversations", "20", "--iterations", "3"])
        .args(["--latency-ms", "0", "--json", "--traces"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["completed"], 20, "{report}");
    // 21 runs (the warm-up too), each: invoke_agent, 3 chats, 2 tool calls.
    assert!(
        stderr(&output).contains("traces: 126 span(s) exported"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("0 dropped, 0 failed"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_run_continued_in_another_process_is_a_linked_span_of_the_same_trace() {
    let receiver = Receiver::start();
    let script = json!({"steps": [
        {"tool_calls": [{"id": "s1", "name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Nothing deleted.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    write_config(&home, "", &telemetry(&receiver, false));
    // No terminal: the run stops to wait for approval (exit 3)...
    let output = run(keel_run(&home, &mock, &workspace).arg("clean my home"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let waiting = report(&output);
    let run_id = waiting["run_id"].as_str().unwrap().to_string();
    let call = waiting["approval"]["call_id"].as_str().unwrap().to_string();
    // ...and `keel approve`, another process, goes on with it.
    let output = run(keel(&home).env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").args([
        "approve",
        &run_id,
        "deny",
        "--call-id",
        &call,
        "--json",
    ]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let spans = receiver.spans();
    let roots = &by_name(&spans)["invoke_agent keel"];
    assert_eq!(roots.len(), 2);
    let (first, second) = (&roots[0], &roots[1]);
    for root in [first, second] {
        assert_eq!(hex(&root.trace_id), run_id.replace('-', ""));
        assert!(root.parent_span_id.is_empty());
    }
    assert_eq!(
        string(&first.attributes, "keel.run.waiting").as_deref(),
        Some("waiting_for_approval")
    );
    assert_eq!(first.events[0].name, "agent.approval.requested");
    assert_eq!(
        string(&second.attributes, "keel.run.continued").as_deref(),
        Some("approval_decided")
    );
    assert_eq!(second.links.len(), 1);
    assert_eq!(second.links[0].span_id, first.span_id);
    assert_eq!(second.events[0].name, "agent.approval.decided");
    assert_eq!(
        string(&second.events[0].attributes, "keel.approval.decision").as_deref(),
        Some("deny")
    );
    assert_eq!(
        string(&second.attributes, "keel.run.state").as_deref(),
        Some("completed")
    );
    assert!(second.start_time_unix_nano >= first.end_time_unix_nano);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_exports_its_runs_and_flushes_at_its_stop() {
    let receiver = Receiver::start();
    let script = json!({"steps": [{"text": "hello there", "forever": true}]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"keel-daemon\"\n",
        receiver.url
    );
    daemon_config(&home, &mock, &workspace, &telemetry);
    let mut daemon = Daemon::start(&home);
    let key = make_key(&home, &["--user", "ann"]);
    let ann = daemon.client(&key);
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "hello").await;
    ann.until_state(&run_id, &["completed"]).await;
    assert_eq!(daemon.terminate(), Some(0), "{}", daemon.log());

    let spans = receiver.spans();
    assert!(spans.iter().all(|(service, _)| service == "keel-daemon"));
    let named = by_name(&spans);
    let root = &named["invoke_agent keel-daemon"][0];
    assert_eq!(string(&root.attributes, "keel.run.id").unwrap(), run_id);
    assert_eq!(
        string(&root.attributes, "gen_ai.conversation.id").unwrap(),
        conversation
    );
    assert_eq!(
        string(&root.attributes, "keel.run.state").unwrap(),
        "completed"
    );
    assert_eq!(named["chat mock-model"][0].parent_span_id, root.span_id);
}
