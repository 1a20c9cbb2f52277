//! End to end: `clarify` with choices in `keel chat` on a pseudo-terminal (a numbered menu; a
//! number that is no choice is refused and asked again), and `keel answer` for a run that
//! waits on one. Through the `keel` binary against `keel mock-provider`.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Mock, keel, run, stderr, temp};
use serde_json::json;

fn clarify_script() -> String {
    json!({"steps": [
        {"tool_calls": [{"name": "clarify", "arguments": {
            "question": "Which format should the export use?",
            "choices": ["CSV", "JSON", "YAML"]
        }}]},
        {"text": "Exported.", "forever": true}
    ]})
    .to_string()
}

/// The tool result the model got for the clarify call, from the mock's second request.
fn clarify_result(mock: &Mock) -> String {
    let requests = mock.requests();
    let second = requests.get(1).expect("the model was called again");
    second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
fn keel_chat_offers_the_choices_as_a_menu_on_a_terminal() {
    let mock = Mock::start(&clarify_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let line = format!(
        "'{}' chat --provider mock --base-url '{}' --workspace '{}'",
        common::keel_bin(),
        mock.url,
        workspace.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("KEEL_HOME", &home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("KEEL_PROVIDER")
        .env_remove("KEEL_MODEL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs");
    // The line editor takes whatever is typed ahead, so each line is typed once the screen
    // shows what it answers, as a person would.
    let screen = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let screen = screen.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                screen
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        })
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut type_after = |shown: &str, typed: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !screen.lock().unwrap().contains(shown) {
            assert!(
                Instant::now() < deadline,
                "never shown: {shown}\n{}",
                screen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        stdin.write_all(typed.as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    type_after("/exit leaves", "export the data\r");
    // A number that is no choice first: refused, asked again; then the second choice.
    type_after("choose 1-3", "9\r");
    type_after("there is no choice 9", "2\r");
    type_after("Exported.", "/exit\r");
    let status = child.wait().unwrap();
    drop(stdin);
    reader.join().unwrap();
    let screen = screen.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(
        screen.contains("? Which format should the export use?"),
        "{screen}"
    );
    for item in ["1. CSV", "2. JSON", "3. YAML", "choose 1-3"] {
        assert!(screen.contains(item), "{item}: {screen}");
    }
    assert!(screen.contains("there is no choice 9"), "{screen}");
    assert!(screen.contains("Exported."), "{screen}");
    assert_eq!(clarify_result(&mock), "The human chose: JSON");
}

#[test]
fn without_a_terminal_the_run_waits_and_keel_answer_checks_the_choice() {
    let mock = Mock::start(&clarify_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let base = ["--provider", "mock", "--base-url", &mock.url, "--workspace"];
    let output = run(keel(&home)
        .args(["run", "--json"])
        .args(base)
        .arg(&workspace)
        .arg("export the data"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let waiting: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(waiting["state"], "waiting_on_human", "{waiting}");
    assert_eq!(
        waiting["choices"],
        json!(["CSV", "JSON", "YAML"]),
        "{waiting}"
    );
    let run_id = waiting["run_id"].as_str().unwrap();

    // No such choice: a usage error; the run still waits.
    let bad = run(keel(&home)
        .args(["answer", run_id])
        .args(base)
        .arg(&workspace)
        .arg("4"));
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("no choice 4"), "{}", stderr(&bad));

    let good = run(keel(&home)
        .args(["answer", run_id])
        .args(base)
        .arg(&workspace)
        .arg("yaml"));
    assert_eq!(good.status.code(), Some(0), "{}", stderr(&good));
    assert_eq!(clarify_result(&mock), "The human chose: YAML");
}
