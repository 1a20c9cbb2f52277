//! The web console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, driven over WebDriver) against a real `keel serve` and
//! `keel mock-provider`. A person signs in with an API key, watches a run's events arrive live,
//! approves one shell call and denies another, answers an `ask_human` and a `clarify` choice,
//! stops a running run and resumes a `resume_unsafe` one with "skip" from its failure panel;
//! another user's key sees a 404 for the run and no forged form (no token, a wrong one, one
//! posted from another origin) changes anything; a transcript holding `<script>` and
//! `<img onerror>` shows them as text. Screenshots of the pages are saved under
//! `target/console-screenshots/` for a person to look at.

mod common;
mod console;

use std::path::PathBuf;

use common::daemon::{Api, Daemon, daemon_config, make_key};
use common::{Mock, keel, run, stderr, temp};
use console::{Browser, sign_in};
use serde_json::{Value, json};

/// A daemon on a mock with `script`, its HOME (the shell's) a directory in the workspace.
struct Setup {
    mock: Mock,
    home: PathBuf,
    workspace: PathBuf,
    fake_home: PathBuf,
    _guards: Vec<tempfile::TempDir>,
}

fn setup(script: &Value) -> Setup {
    let mock = Mock::start(&script.to_string());
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    daemon_config(&home, &mock, &workspace, "");
    // The shell is an admin's tool.
    for name in ["ann", "bob"] {
        let output = run(keel(&home).args(["users", "set", name, "--permission", "admin"]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    let fake_home = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    Setup {
        mock,
        home,
        workspace,
        fake_home,
        _guards: vec![home_guard, workspace_guard],
    }
}

impl Setup {
    fn daemon(&self, env: &[(&str, &str)]) -> Daemon {
        let home = self.fake_home.display().to_string();
        let mut all = vec![("HOME", home.as_str())];
        all.extend_from_slice(env);
        Daemon::start_with(&self.home, &all)
    }

    /// The tool results the model was sent, in order.
    fn tool_results(&self) -> Vec<String> {
        let requests = self.mock.requests();
        let Some(last) = requests.last() else {
            return Vec::new();
        };
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// A user's key and a client with it.
fn user(daemon: &Daemon, name: &str) -> (String, Api) {
    let key = make_key(&daemon.home, &["--user", name]);
    let api = daemon.client(&key);
    (key, api)
}

/// The page of run `id`.
fn run_page(daemon: &Daemon, id: &str) -> String {
    format!("{}/runs/{id}", daemon.url)
}

/// Waits until the run page shows the run in `state`.
async fn until_page_state(browser: &Browser, state: &str) {
    browser
        .wait_for(&format!("#run-state[data-state=\"{state}\"]"))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_watches_a_run_live_then_approves_one_shell_call_and_denies_another() {
    let setup = setup(&json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo looking around"}}],
         "delay_ms": 3_000},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}],
         "delay_ms": 5_000},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "git clean -fdx"}}]},
        {"text": "Cleaned what I was allowed to.", "forever": true}
    ]}));
    let daemon = setup.daemon(&[]);
    let (key, api) = user(&daemon, "ann");
    let browser = Browser::start().await;
    sign_in(&browser, &daemon.url, &key).await;

    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "clean my home").await;
    browser.goto(&run_page(&daemon, &run_id)).await;
    // The model answers while the page is open (the mock takes 3 s, then 5 s): the events
    // arrive over the live stream and the page's script appends them.
    browser.wait_for("#events li.live").await;
    browser.screenshot("run-live-events").await;

    // When the run stops to ask, the page reloads itself with the approval panel.
    browser.wait_for("#approval-panel").await;
    let tool = browser
        .wait_for("#approval-tool")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(tool, "shell");
    let arguments = browser.wait_for("#approval-arguments").await;
    assert!(arguments.text().await.unwrap().contains("rm -rf ~"));
    let reason = browser.wait_for("#approval-reason").await;
    assert!(
        reason.text().await.unwrap().contains("home directory"),
        "{}",
        browser.text().await
    );
    assert!(
        setup.fake_home.join("canary").exists(),
        "ran before approval"
    );
    browser.screenshot("run-approval").await;
    browser
        .click("#approval-panel button[value=\"approve_once\"]")
        .await;

    // The next call waits too: deny it.
    browser
        .wait_for_text("#approval-arguments", "git clean -fdx")
        .await;
    assert!(
        !setup.fake_home.exists(),
        "the approved command did not run"
    );
    browser
        .click("#approval-panel button[value=\"deny\"]")
        .await;
    until_page_state(&browser, "completed").await;
    browser
        .wait_for_text("#final-text", "Cleaned what I was allowed to.")
        .await;
    browser.screenshot("run-completed").await;
    let results = setup.tool_results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[2].to_lowercase().contains("denied"),
        "the model is told: {results:?}"
    );
    // The transcript folds each call with its result.
    let folded = browser.wait_for("#transcript li.tool details").await;
    assert!(folded.text().await.unwrap().contains("shell"));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_and_a_clarify_choice_are_answered_from_the_run_page() {
    let setup = setup(&json!({"steps": [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which city?"}}]},
        {"tool_calls": [{"name": "clarify", "arguments": {
            "question": "Which format should the export use?",
            "choices": ["CSV", "JSON", "YAML"]
        }}]},
        {"text": "Exported.", "forever": true}
    ]}));
    let daemon = setup.daemon(&[]);
    let (key, api) = user(&daemon, "ann");
    let browser = Browser::start().await;
    sign_in(&browser, &daemon.url, &key).await;
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "export the data").await;
    api.until_state(&run_id, &["waiting_on_human"]).await;

    browser.goto(&run_page(&daemon, &run_id)).await;
    browser.wait_for_text("#question", "Which city?").await;
    browser.type_into("#answer-text", "Lisbon").await;
    browser.screenshot("run-question").await;
    browser.click("#answer-panel button[type=\"submit\"]").await;

    browser
        .wait_for_text("#question", "Which format should the export use?")
        .await;
    for choice in ["CSV", "JSON", "YAML"] {
        browser
            .wait_for(&format!("#answer-panel button[value=\"{choice}\"]"))
            .await;
    }
    browser.screenshot("run-clarify").await;
    browser.click("#answer-panel button[value=\"JSON\"]").await;
    until_page_state(&browser, "completed").await;
    let results = setup.tool_results();
    assert!(results[0].contains("Lisbon"), "{results:?}");
    assert_eq!(results[1], "The human chose: JSON", "{results:?}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_run_is_stopped_from_its_page() {
    let setup = setup(&json!({"steps": [
        {"text": "This takes a long while.", "delay_ms": 120_000}
    ]}));
    let daemon = setup.daemon(&[]);
    let (key, api) = user(&daemon, "ann");
    let browser = Browser::start().await;
    sign_in(&browser, &daemon.url, &key).await;
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "take your time").await;
    api.until_state(&run_id, &["running"]).await;

    browser.goto(&run_page(&daemon, &run_id)).await;
    browser.wait_for("#stop-panel").await;
    browser.screenshot("run-running").await;
    browser.click("#stop-panel button").await;
    until_page_state(&browser, "cancelled").await;
    assert!(
        browser
            .client
            .find(fantoccini::Locator::Css("#stop-panel"))
            .await
            .is_err()
    );
    let run = api.until_state(&run_id, &["cancelled"]).await;
    assert_eq!(run["state"], "cancelled", "{run}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_unsafe_run_shows_its_handoff_and_resumes_with_skip() {
    let setup = setup(&json!({"steps": [
        {"tool_calls": [{"name": "update_run_journal", "arguments": {
            "objective": "Append alpha to the log",
            "current_state": "The log is open",
            "handoff_next_action": "Append alpha, then report"
        }}]},
        {"tool_calls": [{"id": "a1", "name": "append_file",
                         "arguments": {"path": "log.txt", "content": "alpha\n"}}]},
        {"text": "Done.", "forever": true}
    ]}));
    let mut first = setup.daemon(&[("KEEL_TEST_PAUSE_IN_TOOL", "append_file")]);
    let (key, api) = user(&first, "ann");
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "append alpha to the log").await;
    first.until_logged("keel: test hook: paused in tool append_file");
    first.kill();

    let second = setup.daemon(&[]);
    let api = second.client(&key);
    let halted = api.until_state(&run_id, &["waiting_on_human"]).await;
    assert_eq!(halted["reason"], "resume_unsafe", "{halted}");
    let browser = Browser::start().await;
    sign_in(&browser, &second.url, &key).await;
    browser.goto(&run_page(&second, &run_id)).await;
    browser.wait_for("#failure-panel").await;
    let handoff = browser.wait_for("#handoff").await.text().await.unwrap();
    for part in [
        "Append alpha to the log",
        "The log is open",
        "Append alpha, then report",
    ] {
        assert!(handoff.contains(part), "{part}: {handoff}");
    }
    browser.screenshot("run-failure-panel").await;
    browser.click("#failure-panel button[value=\"skip\"]").await;
    until_page_state(&browser, "completed").await;
    let log = std::fs::read_to_string(setup.workspace.join("log.txt")).unwrap_or_default();
    assert_eq!(log, "", "a skipped call is never made");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_users_run_is_not_found_and_forged_forms_change_nothing() {
    let setup = setup(&json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Done.", "forever": true}
    ]}));
    let daemon = setup.daemon(&[]);
    let (ann_key, ann) = user(&daemon, "ann");
    let (bob_key, _) = user(&daemon, "bob");
    let conversation = ann.conversation(None).await;
    let run_id = ann.send(&conversation, "clean my home").await;
    ann.until_state(&run_id, &["waiting_on_human"]).await;
    let (_, report) = ann.get(&format!("/v1/runs/{run_id}/report")).await;
    let call_id = report["approval"]["call_id"].as_str().unwrap().to_string();

    // Bob sees no such run, and cannot act on it with his own session's token.
    let bob = Browser::start().await;
    sign_in(&bob, &daemon.url, &bob_key).await;
    bob.goto(&run_page(&daemon, &run_id)).await;
    bob.wait_for_page_text("not found").await;
    assert!(!bob.text().await.contains("rm -rf"));
    bob.screenshot("run-not-found").await;
    bob.goto(&format!("{}/", daemon.url)).await;
    let bob_csrf = console::csrf_token(&bob).await;
    assert!(!bob_csrf.is_empty());
    let status = console::post_from_page(
        &bob,
        &format!("/runs/{run_id}/approval"),
        &format!("csrf={bob_csrf}&decision=approve_once&call_id={call_id}"),
    )
    .await;
    assert_eq!(status, 404);
    bob.close().await;

    // Ann's own session: a form without her token, or with a wrong one, is refused.
    let browser = Browser::start().await;
    sign_in(&browser, &daemon.url, &ann_key).await;
    browser.goto(&run_page(&daemon, &run_id)).await;
    browser.wait_for("#approval-panel").await;
    let approval = format!("/runs/{run_id}/approval");
    let form = format!("decision=approve_once&call_id={call_id}");
    let status = console::post_from_page(&browser, &approval, &form).await;
    assert_eq!(status, 403, "no token");
    let status =
        console::post_from_page(&browser, &approval, &format!("csrf=not-the-token&{form}")).await;
    assert_eq!(status, 403, "a wrong token");
    // A page of another origin posting her real token (as if it had stolen it) is refused too.
    let csrf = console::csrf_token(&browser).await;
    let forged = console::ForeignPage::serve(&format!(
        "<form id=\"forged\" method=\"post\" action=\"{}{approval}\">\
         <input name=\"csrf\" value=\"{csrf}\"><input name=\"decision\" value=\"approve_once\">\
         <input name=\"call_id\" value=\"{call_id}\"></form>\
         <script>document.getElementById('forged').submit()</script>",
        daemon.url
    ));
    browser.goto(&forged.url).await;
    browser
        .wait_for_page_text("did not come from this console")
        .await;
    browser.screenshot("forged-form-refused").await;

    let (_, run) = ann.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["state"], "waiting_on_human", "{run}");
    assert!(
        setup.fake_home.join("canary").exists(),
        "nothing was approved"
    );
    // Her own form still works.
    browser.goto(&run_page(&daemon, &run_id)).await;
    browser
        .click("#approval-panel button[value=\"deny\"]")
        .await;
    until_page_state(&browser, "completed").await;
    assert!(setup.fake_home.join("canary").exists());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transcript_holding_markup_shows_it_as_text() {
    const SENT: &str =
        "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">";
    const ANSWER: &str = "You sent <script>window.__pwned = 3</script> and <img src=y onerror=\"window.__pwned = 4\">";
    let setup = setup(&json!({"steps": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "page.html"}}]},
        {"text": ANSWER, "forever": true}
    ]}));
    std::fs::write(
        setup.workspace.join("page.html"),
        "<img src=z onerror=\"window.__pwned = 5\"><b>bold</b>",
    )
    .unwrap();
    let daemon = setup.daemon(&[]);
    let (key, api) = user(&daemon, "ann");
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, SENT).await;
    api.until_state(&run_id, &["completed"]).await;

    let browser = Browser::start().await;
    sign_in(&browser, &daemon.url, &key).await;
    browser.goto(&run_page(&daemon, &run_id)).await;
    until_page_state(&browser, "completed").await;
    // Open every folded call, so what they hold is on show.
    browser
        .eval("document.querySelectorAll('details').forEach(d => d.open = true); return true;")
        .await;
    let text = browser.text().await;
    for shown in [
        SENT,
        ANSWER,
        "<img src=z onerror=\"window.__pwned = 5\"><b>bold</b>",
    ] {
        assert!(
            text.contains(shown),
            "{shown} is not shown as text:\n{text}"
        );
    }
    let found = browser
        .eval(
            "return [window.__pwned === undefined, \
             document.querySelectorAll('main img, main b, main script:not([src])').length];",
        )
        .await;
    assert_eq!(found, json!([true, 0]), "markup from the run became HTML");
    browser.screenshot("run-escaped-transcript").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_main_pages_are_saved_as_screenshots_at_desktop_and_phone_width() {
    let setup = setup(&json!({"steps": [{"text": "Hello.", "forever": true}]}));
    let daemon = setup.daemon(&[]);
    let (key, api) = user(&daemon, "ann");
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "say hello").await;
    api.until_state(&run_id, &["completed"]).await;
    let browser = Browser::start().await;
    browser.goto(&format!("{}/sign-in", daemon.url)).await;
    browser.wait_for("#key").await;
    browser.screenshot("sign-in").await;
    sign_in(&browser, &daemon.url, &key).await;
    let pages = [
        ("home", "/".to_string()),
        ("runs", "/runs".to_string()),
        ("conversations", "/conversations".to_string()),
        ("conversation", format!("/conversations/{conversation}")),
        ("usage", "/usage".to_string()),
        ("schedules", "/schedules".to_string()),
        ("channels", "/channels".to_string()),
        ("run", format!("/runs/{run_id}")),
    ];
    for (width, height, suffix) in [(1280, 1000, "desktop"), (390, 844, "phone")] {
        browser.client.set_window_size(width, height).await.unwrap();
        for (name, path) in &pages {
            browser.goto(&format!("{}{path}", daemon.url)).await;
            browser.wait_for("main h1").await;
            browser.screenshot(&format!("{name}-{suffix}")).await;
        }
    }
    // At phone width, the run page's panels and transcript fit the screen.
    let overflow = browser
        .eval("return document.documentElement.scrollWidth <= window.innerWidth + 1;")
        .await;
    assert_eq!(
        overflow,
        json!(true),
        "the run page scrolls sideways at phone width"
    );
    browser.close().await;
}
