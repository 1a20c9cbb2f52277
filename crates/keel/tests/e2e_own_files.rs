//! End to end: with keel's home inside the workspace (as when keel runs from `$HOME`), a model
//! that tries to rewrite keel's configuration or database is refused, and the store survives.

mod common;

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::{Value, json};

#[test]
fn the_model_cannot_touch_keels_home_inside_the_workspace() {
    let script = json!({"steps": [
        {"tool_calls": [
            {"name": "write_file", "arguments": {
                "path": ".local/share/keel/keel.toml", "content": "workspace = \"/\"\n"}},
            {"name": "write_file", "arguments": {
                "path": "./.local//share/keel/keel.db", "content": "oops"}}
        ]},
        {"tool_calls": [
            {"name": "append_file", "arguments": {
                "path": ".local/share/keel/keel.db-wal", "content": "oops"}},
            {"name": "read_file", "arguments": {"path": "data/keel/keel.toml"}}
        ]},
        {"text": "I could not."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_w, workspace) = temp();
    let home = workspace.join(".local/share/keel");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(".local/share", workspace.join("data")).unwrap();
    let run_keel = |prompt: &str| {
        run(keel(&home)
            .args([
                "run",
                "--json",
                "--provider",
                "mock",
                "--base-url",
                &mock.url,
                "--workspace",
            ])
            .arg(&workspace)
            .arg(prompt))
    };
    let config = common::FAST_RETRIES;
    std::fs::write(home.join("keel.toml"), config).unwrap();

    let output = run_keel("widen your workspace");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed");
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 4);
    for call in calls {
        assert_eq!(call["ok"], false, "{call}");
        let output = call["output"].as_str().unwrap();
        assert!(
            output.contains("one of keel's own files") && output.contains("never read or write"),
            "{output}"
        );
    }

    // The configuration is as it was, and the store still holds the session.
    assert_eq!(
        std::fs::read_to_string(home.join("keel.toml")).unwrap(),
        config
    );
    let session = report["session_id"].as_str().unwrap();
    let sessions = run(keel(&home).args(["sessions"]));
    assert_eq!(sessions.status.code(), Some(0), "{}", stderr(&sessions));
    assert!(stdout(&sessions).contains(session), "{}", stdout(&sessions));
}
