//! End to end: attachments sent with platform messages through `keel serve`: kept once, read by
//! a tool, and the files a tool produced come back with the answer, to their own user alone.

mod common;

use common::daemon::make_key;
use common::platform::{message, platform_daemon, slack_user};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn attachments_are_kept_once_read_by_a_tool_and_produced_files_come_back() {
    let script = json!({"per_turn": true, "steps": [
        {"text": "Reading.", "tool_calls": [{"name": "read_attachment", "arguments": {"name": "notes.txt"}}]},
        {"text": "Writing.", "tool_calls": [{"name": "write_file", "arguments": {"path": "report.md", "content": "# Report"}}]},
        {"text": "Done."}
    ]})
    .to_string();
    let (daemon, mock, workspace, _guards) = platform_daemon(&script);
    slack_user(&daemon.home, "ann", "U3");
    let admin = daemon.client(&make_key(&daemon.home, &["--admin"]));
    let mut with_files = message("slack", "U3", None, "C5", None);
    with_files["attachments"] = json!([
        {"name": "notes.txt", "content": "the launch code is 4512"},
        {"name": "photo.png", "media_type": "image/png", "content_base64": "iVBORw0KGgo="}
    ]);
    let (status, report) = admin
        .post("/v1/messages?wait=true", with_files.clone())
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["state"], "completed", "{report}");

    // The model was told about the files, and the tool read one.
    let requests = mock.requests();
    let told = requests[0]["messages"].to_string();
    assert!(
        told.contains("[Attached files:]") && told.contains("notes.txt (file_id: file_"),
        "{told}"
    );
    assert!(told.contains("photo.png (file_id: file_") && told.contains("8 bytes, image/png"));
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("the launch code is 4512")
    );

    // The produced file came back with the answer, and its bytes can be fetched.
    let files = report["files"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(files.len(), 1, "{report}");
    assert_eq!(
        (files[0]["name"].as_str(), files[0]["size"].as_u64()),
        (Some("report.md"), Some(8))
    );
    assert_eq!(files[0]["origin"], "produced");
    assert_eq!(
        std::fs::read_to_string(workspace.join("report.md")).unwrap(),
        "# Report"
    );
    let produced = files[0]["id"].as_str().unwrap();
    let content = admin
        .request(
            reqwest::Method::GET,
            &format!("/v1/files/{produced}/content"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(content.status(), 200);
    assert_eq!(content.headers()["content-type"], "text/markdown");
    assert_eq!(content.text().await.unwrap(), "# Report");

    // The same bytes again: a second record over the same content.
    let (status, again) = admin.post("/v1/messages?wait=true", with_files).await;
    assert_eq!(status, 200, "{again}");
    let requests = mock.requests();
    let ids: Vec<String> = [0, 3]
        .iter()
        .map(|&i| {
            let text = requests[i]["messages"].to_string();
            // The latest message's attachment: the second request also carries the first.
            let at = text.rfind("notes.txt (file_id: ").unwrap() + "notes.txt (file_id: ".len();
            text[at..].split(',').next().unwrap().to_string()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    let (_, first) = admin.get(&format!("/v1/files/{}", ids[0])).await;
    let (_, second) = admin.get(&format!("/v1/files/{}", ids[1])).await;
    assert_eq!(first["sha256"], second["sha256"], "{first} {second}");
    assert_eq!(first["session_id"], "slack:C5");

    // Another user's key sees none of it.
    let stranger = daemon.client(&make_key(&daemon.home, &["--user", "bob"]));
    for path in [
        format!("/v1/files/{}", ids[0]),
        format!("/v1/files/{produced}/content"),
    ] {
        let (status, body) = stranger.get(&path).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
}
