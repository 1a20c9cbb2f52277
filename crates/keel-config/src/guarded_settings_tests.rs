//! Tests of the fallback guard: what a broken file may differ in from its last good copy.

use super::*;

/// A last good copy with a bit of everything.
const GOOD: &str = "provider = \"mock\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n\
                    [retry]\nbase_delay_ms = 1\n\n[tools]\nretry_delays_ms = [1, 1]\n";

/// `GOOD` with a harmless breakage (`model` has no value), and `more`: top-level lines before
/// it, tables after it.
fn broken_with(more: &str) -> String {
    let broken = GOOD.replace("model = \"m\"", "model = ");
    if more.starts_with('[') {
        format!("{broken}\n{more}")
    } else {
        format!("{more}\n{broken}")
    }
}

#[test]
fn a_benign_breakage_does_not_count() {
    assert_eq!(first_difference(&broken_with(""), GOOD), None);
    // Reformatted, commented, and benign settings changed beside it.
    let reformatted = "stream = nope\nprovider = 'mock'   # the mock\n\
                       base_url = \"http://127.0.0.1:9/v1\"\nmodel = gpt 4\n[ retry ]\n\
                       base_delay_ms = 1_0\nmax_retries = 5\n[context]\nkeep_last = 3\n\
                       [context.windows]\n\"m.1\" = 1000\n\
                       [tools]\nretry_delays_ms = [\n  1, # first\n  1,\n]\n";
    assert_eq!(first_difference(reformatted, GOOD), None);
    // The same breakage under [tools] is a key keel does not know there.
    let misplaced = format!(
        "{}stream = nope\n",
        reformatted.replacen("stream = nope\n", "", 1)
    );
    assert_eq!(
        first_difference(&misplaced, GOOD).as_deref(),
        Some("tools.stream")
    );
}

#[test]
fn every_loosening_the_issue_found_refuses() {
    let hook = "[[hooks]]\nevent = \"pre_tool\"\nmatcher = \"write_file\"\ncommand = \"deny\"\n";
    for (more, path) in [
        (hook, "hooks[0].command"),
        (
            "[serve]\nmax_request_bytes = 1000\n",
            "serve.max_request_bytes",
        ),
        ("[serve]\nqueue_limit = 2\n", "serve.queue_limit"),
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
        ("[memory]\nfacts = false\n", "memory.facts"),
        ("[skills]\nenabled = false\n", "skills.enabled"),
        ("[routing]\nfast = \"other:m\"\n", "routing.fast"),
        ("[models]\nfallback = [\"other:m\"]\n", "models.fallback"),
        (
            "[providers.other]\napi = \"openai-chat\"\n",
            "providers.other.api",
        ),
        (
            "[prices.m]\ninput = 100.0\noutput = 100.0\n",
            "prices.m.input",
        ),
        ("[budgets]\ntoken_budget = 10\n", "budgets.token_budget"),
        (
            "[limits]\nhard_timeout_secs = 1\n",
            "limits.hard_timeout_secs",
        ),
        (
            "[guardrails]\niteration_cap = 9\n",
            "guardrails.iteration_cap",
        ),
        ("[tools.shell]\nenabled = false\n", "tools.shell.enabled"),
        ("max_iterations = 3\n", "max_iterations"),
        ("system_prompt = \"never delete\"\n", "system_prompt"),
        ("workspace = \"/tmp/w\"\n", "workspace"),
        (
            "tools.http_allowed_hosts = [\"docs.rs\"]\n",
            "tools.http_allowed_hosts",
        ),
        (
            "tools.approval_timeout_secs = 5\n",
            "tools.approval_timeout_secs",
        ),
        // A key keel does not know may be a misspelt guarded one.
        ("max_iteratons = 3\n", "max_iteratons"),
    ] {
        assert_eq!(
            first_difference(&broken_with(more), GOOD).as_deref(),
            Some(path),
            "{more}"
        );
    }
    for (broken, path) in [
        (GOOD.replace("\"mock\"", "\"openai\""), "provider"),
        (GOOD.replace(":9/v1", ":9/v2"), "base_url"),
        (GOOD.replace("provider = \"mock\"\n", ""), "provider"),
    ] {
        let broken = broken.replace("model = \"m\"", "model = ");
        assert_eq!(first_difference(&broken, GOOD).as_deref(), Some(path));
    }
}

#[test]
fn array_tables_are_compared_one_by_one() {
    let hook =
        |command: &str| format!("[[hooks]]\nevent = \"pre_tool\"\ncommand = \"{command}\"\n");
    let good = format!("{GOOD}{}{}", hook("a"), hook("b"));
    // The first hook dropped: the one left is now hooks[0], with another command.
    let broken = broken_with(&hook("b"));
    assert_eq!(
        first_difference(&broken, &good).as_deref(),
        Some("hooks[0].command")
    );
    let broken = broken_with(&format!("{}{}", hook("a"), hook("b")));
    assert_eq!(first_difference(&broken, &good), None);
}

#[test]
fn broken_guarded_lines_refuse_even_when_they_look_the_same() {
    let good = "max_iterations = 10\n[budgets]\ntoken_budget = 1000\n";
    for (broken, path) in [
        // Whitespace inside a value is not formatting.
        (
            "max_iterations = 1 0\n[budgets]\ntoken_budget = 1000\n",
            "max_iterations",
        ),
        // Said twice.
        (
            "max_iterations = 10\nmax_iterations = 10\n[budgets]\ntoken_budget = 1000\n",
            "max_iterations",
        ),
        // A line that is no assignment.
        (
            "max_iterations = 10\n[budgets]\ntoken_budget 1000\n",
            "budgets.token_budget",
        ),
        (
            "max_iterations = 10\n[budgets]\ntoken_budget = 1000\nx\n",
            "budgets.x",
        ),
        // A header that cannot be read hides what follows it.
        (
            "max_iterations = 10\n[budgets\ntoken_budget = 1000\n",
            "[budgets\ntoken_budget = 1000",
        ),
    ] {
        assert_eq!(
            first_difference(broken, good).as_deref(),
            Some(path),
            "{broken}"
        );
    }
    assert_eq!(
        first_difference(
            "max_iterations = 1_0\n[budgets]\n'token_budget' = 1000 # same\n",
            good
        ),
        None
    );
}

#[test]
fn a_benign_line_that_may_hide_a_setting_refuses() {
    // An open bracket swallows the tightened host list that follows it.
    let swallowing = "[tools]\nretry_delays_ms = [1, 1\nhttp_allowed_hosts = [\"docs.rs\"]\n";
    assert_eq!(
        first_difference(swallowing, "[tools]\nretry_delays_ms = [1, 1]\n").as_deref(),
        Some("tools.retry_delays_ms")
    );
    // An open multi-line string does too.
    let swallowing = "model = \"\"\"m\nmax_iterations = 3\n";
    assert_eq!(
        first_difference(swallowing, "model = \"m\"\n").as_deref(),
        Some("model")
    );
    // Two settings on one line.
    let two = "model = \"m\" max_iterations = 3\n";
    assert_eq!(
        first_difference(two, "model = \"m\"\n").as_deref(),
        Some("model")
    );
    // A one-line string left open ends with its line and hides nothing.
    assert_eq!(
        first_difference("model = \"m\nstream = true\n", "stream = true\n"),
        None
    );
}

#[test]
fn strings_and_comments_are_read_as_toml_reads_them() {
    let good = "system_prompt = \"\"\"\nsay # not a comment\nmax_iterations = 3\n\"\"\"\n";
    assert_eq!(first_difference(good, good), None);
    let other = good.replace("say", "do not say");
    assert_eq!(
        first_difference(&other, good).as_deref(),
        Some("system_prompt")
    );
    // The line inside the string is no setting: adding the real one counts.
    let added = format!("{good}max_iterations = 3\n");
    assert_eq!(
        first_difference(&added, good).as_deref(),
        Some("max_iterations")
    );
    // Quoted keys are not dotted ones.
    assert_eq!(
        first_difference(
            "\"tools.http_allow_private\" = true\n",
            "tools.http_allow_private = true\n"
        )
        .as_deref(),
        Some("\"tools.http_allow_private\"")
    );
}

#[test]
fn every_benign_path_names_a_real_setting() {
    for pattern in BENIGN {
        let path = pattern.replace('*', "m");
        let text = match path.rsplit_once('.') {
            _ if !path.contains('.') && ["retry", "runs", "context"].contains(&path.as_str()) => {
                format!("[{path}]\n")
            }
            Some((table, key)) => format!("[{table}]\n{key} = \"?\"\n"),
            None => format!("{path} = \"?\"\n"),
        };
        let error = crate::config::parse_file(&text).err().unwrap_or_default();
        assert!(!error.contains("unknown field"), "{pattern}: {error}");
    }
}
