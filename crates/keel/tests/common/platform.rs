//! Helpers of the end-to-end tests that send platform messages to `keel serve`.

use serde_json::{Value, json};

use super::daemon::{Daemon, daemon_config};
use super::{Mock, keel, run, temp};
/// A daemon on a mock answering `script`; its home, workspace and guards.
pub fn platform_daemon(script: &str) -> (Daemon, Mock, std::path::PathBuf, Vec<tempfile::TempDir>) {
    platform_daemon_with(script, "")
}

/// [`platform_daemon`] with more configuration.
pub fn platform_daemon_with(
    script: &str,
    extra: &str,
) -> (Daemon, Mock, std::path::PathBuf, Vec<tempfile::TempDir>) {
    let mock = Mock::start(script);
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    daemon_config(&home, &mock, &workspace, extra);
    (
        Daemon::start(&home),
        mock,
        workspace,
        vec![home_guard, workspace_guard],
    )
}

pub fn message(
    platform: &str,
    user: &str,
    server: Option<&str>,
    channel: &str,
    thread: Option<&str>,
) -> Value {
    json!({
        "platform": platform, "platform_user_id": user, "platform_server_id": server,
        "platform_channel_id": channel, "platform_thread_id": thread, "text": "hello"
    })
}

/// Makes `user` a user (permission `user`) linked to `slack_id` on Slack.
pub fn slack_user(home: &std::path::Path, user: &str, slack_id: &str) {
    for args in [
        vec!["users", "set", user, "--permission", "user"],
        vec![
            "users",
            "link",
            user,
            "--platform",
            "slack",
            "--platform-user-id",
            slack_id,
        ],
    ] {
        let output = run(keel(home).args(&args));
        assert_eq!(output.status.code(), Some(0), "{}", super::stderr(&output));
    }
}

/// The system prompt and tool names of a request the mock received.
pub fn prompt_and_tools(request: &Value) -> (String, Vec<String>) {
    let body = request;
    let prompt = body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let tools = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| tool["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (prompt, tools)
}
