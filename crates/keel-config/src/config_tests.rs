//! Tests of the configuration file: parsing, validation, and the last known good copy.

use super::*;

#[test]
fn invalid_files_give_one_line_with_the_line_number() {
    let err = parse_file("model = \"x\"\nmodle = \"y\"\n").unwrap_err();
    assert!(err.starts_with("line 2:") && err.contains("modle"), "{err}");
    assert!(!err.contains('\n'));
    let err = parse_file("max_iterations = \"ten\"").unwrap_err();
    assert!(err.contains("line 1"), "{err}");
    let err = parse_file("[providers.x]\nbase_url = \"h\"\nkey = 1\n").unwrap_err();
    assert!(err.starts_with("line 3:") && err.contains("key"), "{err}");
}

#[test]
fn the_file_is_validated_beyond_its_syntax() {
    let bad = [
        ("[providers.x]\napi = \"grpc\"\n", "api = \"grpc\""),
        ("max_iterations = 0\n", "max_iterations"),
        (
            "[budgets]\nreserve_cost_fraction = 2.0\n",
            "reserve_cost_fraction",
        ),
        ("[limits]\nhard_timeout_secs = -1\n", "hard_timeout_secs"),
        ("[prices.\"m\"]\ninput = -1\noutput = 1\n", "prices"),
    ];
    for (text, needle) in bad {
        let err = parse_file(text).unwrap().validate().unwrap_err();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn a_broken_file_falls_back_to_its_last_good_copy() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("keel.toml");
    std::fs::write(&path, "model = \"good\"\n").unwrap();
    let loaded = load(None, home.path()).unwrap();
    assert_eq!(loaded.file.model.as_deref(), Some("good"));
    assert!(loaded.fallback.is_none());

    // A successful model call saves the file as its last good copy.
    let saver = LastGoodSaver::new(loaded.source);
    saver.emit(&response_event());
    assert_eq!(
        std::fs::read_to_string(lastgood_path(&path)).unwrap(),
        "model = \"good\"\n"
    );

    // The file breaks in a setting that bounds nothing: the copy stands in, with a notice
    // saying why.
    std::fs::write(&path, "model = \"bad\"\nstream = maybe\n").unwrap();
    let loaded = load(None, home.path()).unwrap();
    assert_eq!(loaded.file.model.as_deref(), Some("good"));
    assert!(loaded.source.is_none(), "the copy is not saved over itself");
    let notice = loaded.fallback.unwrap();
    assert!(notice.warning().contains("line 2") && notice.warning().contains("lastgood"));
    assert_eq!(notice.event("s").kind.name(), "agent.config.fallback");

    // Without a copy, the error stands.
    std::fs::remove_file(lastgood_path(&path)).unwrap();
    let err = load(None, home.path()).unwrap_err();
    assert!(
        err.0.contains("invalid config file") && err.0.contains("line 2"),
        "{err}"
    );
}

#[test]
fn a_missing_default_file_is_fine_and_a_missing_explicit_one_is_not() {
    let home = tempfile::tempdir().unwrap();
    assert!(load(None, home.path()).unwrap().source.is_none());
    let err = load(Some(&home.path().join("nope.toml")), home.path()).unwrap_err();
    assert!(err.0.contains("cannot read config file"), "{err}");
}

fn response_event() -> Event {
    Event {
        ts: chrono::Utc::now(),
        run_id: "r".into(),
        session_id: "s".into(),
        kind: EventKind::ModelResponse {
            iteration: 1,
            model: "m".into(),
            stop_reason: keel_core::StopReason::EndTurn,
            tool_calls: 0,
            usage: keel_core::Usage::default(),
            latency_ms: 1,
        },
    }
}

#[test]
fn context_settings_are_validated() {
    for (text, needle) in [
        ("[context]\ncompact_threshold = 1.5\n", "compact_threshold"),
        ("[context]\nkeep_last = 0\n", "keep_last"),
        ("[context.windows]\n\"m\" = 10\n", "at least 256"),
    ] {
        let err = parse_file(text).unwrap().validate().unwrap_err();
        assert!(err.contains(needle), "{text}: {err}");
    }
    let err = parse_file("[context]\nstrategy = \"fold\"\n").unwrap_err();
    assert!(err.contains("fold") && err.starts_with("line 2"), "{err}");
}

#[test]
fn a_fallback_that_would_loosen_a_guarded_setting_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("keel.toml");
    std::fs::write(lastgood_path(&path), "model = \"good\"\n").unwrap();
    // The user tightened the host list, and made a typo elsewhere.
    std::fs::write(
        &path,
        "model = \"good\"\nstream = maybe\n[tools]\nhttp_allowed_hosts = [\"docs.rs\"]\n",
    )
    .unwrap();
    let err = load(None, home.path()).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
    assert!(
        err.contains("not falling back to the last good configuration")
            && err.contains("`tools.http_allowed_hosts`")
            && err.contains("never loosen"),
        "{err}"
    );
    // A file that cannot be parsed at all is read leniently for the comparison.
    std::fs::write(&path, "model = \n[budgets]\ntoken_budget = 10\n").unwrap();
    let err = load(None, home.path()).unwrap_err().to_string();
    assert!(err.contains("`budgets.token_budget`"), "{err}");
}

#[test]
fn a_fallback_that_would_run_a_looser_policy_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("keel.toml");
    let good = "provider = \"mock\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
    std::fs::write(lastgood_path(&path), good).unwrap();
    // Each: what the broken file asks for beside a harmless breakage (`model = `), and the
    // setting the refusal names.
    for (asked, setting) in [
        (
            "[[hooks]]\nevent = \"pre_tool\"\nmatcher = \"write_file\"\ncommand = \"false\"\n",
            "hooks[0].command",
        ),
        (
            "[serve]\nmax_request_bytes = 1000\n",
            "serve.max_request_bytes",
        ),
        ("[serve]\nqueue_limit = 1\n", "serve.queue_limit"),
        (
            "[serve]\ndefault_modules = [\"files\"]\n",
            "serve.default_modules",
        ),
        (
            "[serve]\nguest_monthly_tokens = 10\n",
            "serve.guest_monthly_tokens",
        ),
        (
            "[mcp.servers.x]\ncommand = \"srv\"\n",
            "mcp.servers.x.command",
        ),
        ("[delegation]\nenabled = false\n", "delegation.enabled"),
        ("[memory]\nenabled = false\n", "memory.enabled"),
        ("[skills]\nenabled = false\n", "skills.enabled"),
    ] {
        std::fs::write(&path, format!("{}{asked}", good.replace("\"m\"", ""))).unwrap();
        let err = load(None, home.path()).unwrap_err().to_string();
        assert!(
            err.contains("not falling back") && err.contains(&format!("`{setting}`")),
            "{asked}: {err}"
        );
    }
    for (broken, setting) in [
        (good.replace("mock", "openai"), "provider"),
        (good.replace(":9/", ":10/"), "base_url"),
    ] {
        std::fs::write(&path, broken.replace("\"m\"", "")).unwrap();
        let err = load(None, home.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("`{setting}`")), "{err}");
    }
    // The harmless breakage alone still falls back.
    std::fs::write(&path, good.replace("\"m\"", "")).unwrap();
    let loaded = load(None, home.path()).unwrap();
    assert_eq!(loaded.file.model.as_deref(), Some("m"));
    assert!(loaded.fallback.is_some());
}
