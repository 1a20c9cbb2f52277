//! MCP end to end: `keel run` offers a stdio MCP server's tools to the model and returns their
//! results to it; `keel mcp list` shows the servers and their tools. The server is this test
//! binary itself, running only `serve_as_mcp_child` (the test MCP server of keel-mcp).

mod common;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, keel_run, report, run, stderr, stdout, temp, write_config};
use serde_json::{Value, json};

/// Set for the child that serves MCP.
const CHILD_ENV: &str = "KEEL_E2E_MCP_CHILD";

/// Not a test: the MCP server of these tests. With `CHILD_ENV` set (by the `[mcp.servers]`
/// table below) it serves the test MCP server on stdin and stdout (libtest's own lines on
/// stdout are not JSON, and MCP clients skip such lines); without it, it does nothing.
#[test]
fn serve_as_mcp_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(keel_mcp::test_server::serve_stdio())
        .unwrap();
}

/// `[mcp.servers.NAME]` running this binary as the test server.
fn server_table(name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let exe = Value::String(exe.to_string_lossy().into_owned());
    format!(
        "[mcp.servers.{name}]\ncommand = {exe}\n\
         args = [\"--quiet\", \"--exact\", \"serve_as_mcp_child\", \"--test-threads=1\"]\n\
         env = {{ {CHILD_ENV} = \"1\" }}\ntimeout_secs = 20\n"
    )
}

#[test]
fn the_model_calls_an_mcp_tool_and_sees_its_result() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "demo__echo", "arguments": {"text": "hello"}}]},
            {"tool_calls": [{"name": "demo__fail", "arguments": {}}]},
            {"text": "done"}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    write_config(&home, "", &server_table("demo"));
    let events = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &events).arg("use the tools"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(report(&output)["final_text"], "done");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    // The first request offers the server's tools, namespaced, with their schemas.
    let tools = requests[0]["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|tool| tool["function"]["name"] == "demo__echo")
        .unwrap_or_else(|| panic!("no demo__echo in {tools:?}"));
    assert_eq!(
        echo["function"]["parameters"]["required"],
        json!(["text"]),
        "{echo}"
    );
    // The tool's result reaches the next request; an `isError` result is an error it sees.
    let second = requests[1]["messages"].to_string();
    assert!(second.contains("echo: hello"), "{second}");
    let third = requests[2]["messages"].to_string();
    assert!(third.contains("the tool failed on purpose"), "{third}");
}

#[test]
fn keel_mcp_list_shows_servers_their_state_and_tools() {
    let (_h, home) = temp();
    let broken = "[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n";
    write_config(&home, "", &format!("{}\n{broken}", server_table("demo")));
    let output = run(keel(&home).args(["mcp", "list"]));
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "a server failed: {text}");
    assert!(text.contains("demo  running"), "{text}");
    let echo = text
        .lines()
        .find(|line| line.contains("demo__echo"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(echo.contains("idempotent"), "{echo}");
    let note = text
        .lines()
        .find(|line| line.contains("demo__write_note"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(note.contains("side-effecting"), "{note}");
    assert!(
        text.contains("broken  failed: cannot start `/nonexistent/mcp-server`"),
        "{text}"
    );
}

#[test]
fn keel_mcp_list_without_servers_says_how_to_add_one() {
    let (_h, home) = temp();
    let output = run(keel(&home).args(["mcp", "list"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("[mcp.servers.NAME]"));
}

#[test]
fn a_bad_mcp_table_is_a_configuration_error() {
    let (_h, home) = temp();
    write_config(
        &home,
        "",
        "[mcp.servers.x]\ncommand = \"a\"\nurl = \"http://h/mcp\"\n",
    );
    let output = run(keel(&home).args(["--strict-config", "mcp", "list"]));
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("[mcp.servers.x]"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_offers_mcp_tools_and_knows_their_module_at_startup() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "demo__echo", "arguments": {"text": "via daemon"}}]},
            {"text": "done"}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    // `[serve] default_modules` is checked at startup, before the server has answered: its
    // module must be known from the configuration.
    let extra = format!(
        "{}\n[serve]\ndefault_modules = [\"mcp:demo\"]\n",
        server_table("demo")
    );
    daemon_config(&home, &mock, &workspace, &extra);
    let daemon = Daemon::start(&home);
    let key = make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "echo something").await;
    let finished = api.until_state(&run_id, &["completed", "failed"]).await;
    assert_eq!(finished["state"], "completed", "{finished}");
    let requests = mock.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"demo__echo"), "{offered:?}");
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("echo: via daemon")
    );
}
