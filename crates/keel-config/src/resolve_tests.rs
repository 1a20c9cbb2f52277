//! Tests of resolving file, environment and flags into settings.

use super::*;
use crate::config::FileConfig;

fn flags() -> Overrides {
    Overrides::default()
}

fn parse_file(text: &str) -> Result<FileConfig, String> {
    crate::config::parse_file(text)
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |key| {
        pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    }
}

fn with_provider(name: &str) -> Overrides {
    let mut f = flags();
    f.provider = Some(name.into());
    f
}

#[test]
fn a_missing_key_names_the_variable() {
    let err = resolve(FileConfig::default(), &no_env, &flags()).unwrap_err();
    assert!(err.0.starts_with("OPENAI_API_KEY is not set"), "{err}");
    let err = resolve(FileConfig::default(), &no_env, &with_provider("anthropic")).unwrap_err();
    assert!(err.0.starts_with("ANTHROPIC_API_KEY is not set"), "{err}");
}

#[test]
fn built_in_providers_speak_their_api_at_their_official_url() {
    let env = env_of(&[("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "sk-a")]);
    let openai = resolve(FileConfig::default(), &env, &flags()).unwrap();
    assert_eq!(openai.provider.api, Api::OpenAiChat);
    assert_eq!(openai.provider.base_url, "https://api.openai.com/v1");
    assert_eq!(openai.provider.api_key.as_deref(), Some("sk-o"));
    assert_eq!(openai.model, "gpt-4o-mini");
    let responses = resolve(
        FileConfig::default(),
        &env,
        &with_provider("openai-responses"),
    )
    .unwrap();
    assert_eq!(responses.provider.api, Api::OpenAiResponses);
    let anthropic = resolve(FileConfig::default(), &env, &with_provider("anthropic")).unwrap();
    assert_eq!(anthropic.provider.api, Api::AnthropicMessages);
    assert_eq!(anthropic.provider.base_url, "https://api.anthropic.com/v1");
    assert_eq!(anthropic.provider.api_key.as_deref(), Some("sk-a"));
    assert!(anthropic.model.starts_with("claude"));
}

#[test]
fn flags_beat_environment_beat_file() {
    let file =
        parse_file("model = \"from-file\"\nmax_iterations = 7\nbase_url = \"http://f:1/v1\"")
            .unwrap();
    let env = env_of(&[("KEEL_MODEL", "from-env")]);
    let settings = resolve(file, &env, &flags()).unwrap();
    assert_eq!(settings.model, "from-env");
    assert_eq!(settings.max_iterations, Some(7));
    assert_eq!(settings.provider.base_url, "http://f:1/v1");
    let mut f = flags();
    f.model = Some("from-flag".into());
    f.base_url = Some("http://flag:2".into());
    let file = parse_file("model = \"from-file\"\nbase_url = \"http://f:1/v1\"").unwrap();
    let env = env_of(&[
        ("KEEL_MODEL", "from-env"),
        ("OPENAI_BASE_URL", "http://env:3/v1"),
    ]);
    let settings = resolve(file, &env, &f).unwrap();
    assert_eq!(settings.model, "from-flag");
    assert_eq!(settings.provider.base_url, "http://flag:2/v1");
}

#[test]
fn named_providers_resolve_api_url_key_and_models() {
    let file = parse_file(
        r#"
provider = "local"
[providers.local]
base_url = "http://localhost:11434"
models = ["llama3.1", "qwen3"]

[providers.claude]
api_key_env = "WORK_CLAUDE_KEY"
models = ["claude-haiku-4-5"]

[providers.proxy]
api = "openai-responses"
base_url = "http://proxy:8080/v1"
"#,
    )
    .unwrap();
    let local = resolve(file, &no_env, &flags()).unwrap();
    assert_eq!(local.provider.name, "local");
    assert_eq!(
        local.provider.api,
        Api::OpenAiChat,
        "no hint: chat-completions"
    );
    assert_eq!(local.provider.base_url, "http://localhost:11434/v1");
    assert_eq!(local.provider.api_key, None, "a local server needs no key");
    assert_eq!(local.model, "llama3.1", "first listed model");

    let reparse = |text: &str| parse_file(text).unwrap();
    let text = "[providers.claude]\napi_key_env = \"WORK_CLAUDE_KEY\"\nmodels = [\"claude-haiku-4-5\"]\n[providers.proxy]\napi = \"openai-responses\"\nbase_url = \"http://proxy:8080/v1\"\n";
    // The name implies the API; its own key variable is required and named when missing.
    let err = resolve(reparse(text), &no_env, &with_provider("claude")).unwrap_err();
    assert!(err.0.starts_with("WORK_CLAUDE_KEY is not set"), "{err}");
    let env = env_of(&[("WORK_CLAUDE_KEY", "k")]);
    let claude = resolve(reparse(text), &env, &with_provider("claude")).unwrap();
    assert_eq!(claude.provider.api, Api::AnthropicMessages);
    assert_eq!(claude.provider.base_url, "https://api.anthropic.com/v1");
    // A model listed by one provider picks it.
    let mut f = flags();
    f.model = Some("claude-haiku-4-5".into());
    assert_eq!(
        resolve(reparse(text), &env, &f).unwrap().provider.name,
        "claude"
    );
    // An explicit api wins; OPENAI_BASE_URL does not redirect a configured provider.
    let env = env_of(&[("OPENAI_BASE_URL", "http://elsewhere/v1")]);
    let proxy = resolve(reparse(text), &env, &with_provider("proxy")).unwrap();
    assert_eq!(proxy.provider.api, Api::OpenAiResponses);
    assert_eq!(proxy.provider.base_url, "http://proxy:8080/v1");
    // --api beats the configuration.
    let mut f = with_provider("proxy");
    f.api = Some("anthropic-messages".into());
    assert_eq!(
        resolve(reparse(text), &no_env, &f).unwrap().provider.api,
        Api::AnthropicMessages
    );
}

#[test]
fn the_mock_speaks_any_api_and_needs_no_key() {
    let mut f = with_provider("mock");
    f.base_url = Some("http://127.0.0.1:5000".into());
    f.api = Some("anthropic".into());
    let mock = resolve(
        FileConfig::default(),
        &env_of(&[("ANTHROPIC_API_KEY", "k")]),
        &f,
    )
    .unwrap();
    assert_eq!(mock.provider.api, Api::AnthropicMessages);
    assert_eq!(mock.provider.api_key, None);
    assert_eq!(mock.model, "mock-model");
    assert!(
        resolve(FileConfig::default(), &no_env, &with_provider("mock"))
            .unwrap_err()
            .0
            .contains("--base-url")
    );
}

#[test]
fn unknown_names_are_refused_with_the_choices() {
    let err = resolve(FileConfig::default(), &no_env, &with_provider("gemini")).unwrap_err();
    assert!(
        err.0.contains("unknown provider `gemini`") && err.0.contains("anthropic"),
        "{err}"
    );
    let mut f = with_provider("mock");
    f.base_url = Some("http://h:1".into());
    f.api = Some("grpc".into());
    let err = resolve(FileConfig::default(), &no_env, &f).unwrap_err();
    assert!(err.0.contains("unknown api `grpc`"), "{err}");
}

#[test]
fn bare_host_urls_get_v1_and_bad_urls_are_refused() {
    assert_eq!(
        normalize_base_url("http://127.0.0.1:8080").unwrap(),
        "http://127.0.0.1:8080/v1"
    );
    assert_eq!(
        normalize_base_url("http://h/api/v1/").unwrap(),
        "http://h/api/v1"
    );
    assert!(normalize_base_url("localhost:8080").is_err());
}

#[test]
fn fallbacks_name_a_provider_or_a_model_of_the_primary() {
    let file = parse_file(
        "[models]\nfallback = [\"anthropic:claude-haiku-4-5\", \"gpt-4o\", \"llama3.1:8b\"]\n",
    )
    .unwrap();
    let env = env_of(&[("OPENAI_API_KEY", "o"), ("ANTHROPIC_API_KEY", "a")]);
    let mut f = flags();
    f.fallback_models = vec!["openai:gpt-4.1".into()];
    let settings = resolve(file, &env, &f).unwrap();
    let chain: Vec<(Option<&str>, &str)> = settings
        .fallbacks
        .iter()
        .map(|fb| {
            (
                fb.provider.as_ref().map(|p| p.name.as_str()),
                fb.model.as_str(),
            )
        })
        .collect();
    // Flags first, then the file; the primary's own name means "same provider".
    assert_eq!(
        chain,
        [
            (None, "gpt-4.1"),
            (Some("anthropic"), "claude-haiku-4-5"),
            (None, "gpt-4o"),
            (None, "llama3.1:8b"),
        ]
    );
    assert_eq!(
        settings.fallbacks[1].provider.as_ref().unwrap().api,
        Api::AnthropicMessages
    );
    // A fallback provider without its key is named.
    let file = parse_file("[models]\nfallback = [\"anthropic:claude-haiku-4-5\"]\n").unwrap();
    let err = resolve(file, &env_of(&[("OPENAI_API_KEY", "o")]), &flags()).unwrap_err();
    assert!(err.0.contains("ANTHROPIC_API_KEY is not set"), "{err}");
}

#[test]
fn recovery_guardrail_budget_and_limit_settings_come_from_file_and_flags() {
    let file = parse_file(
        r#"
base_url = "http://local:1/v1"
[retry]
max_retries = 5
base_delay_ms = 10
[guardrails]
identical_calls = 4
iteration_cap = 80
max_tokens_recoveries = 1
[budgets]
token_budget = 5000
cost_limit = 0.25
[prices."my-model"]
input = 1.0
output = 2.0
[limits]
soft_timeout_secs = 600
[tools]
retry_delays_ms = [1, 2]
approval_timeout_secs = 30
"#,
    )
    .unwrap();
    let mut f = flags();
    f.token_budget = Some(100);
    f.hard_timeout = Some(1.5);
    f.user = Some("ada".into());
    let s = resolve(file, &no_env, &f).unwrap();
    assert_eq!(s.retry.max_retries, 5);
    assert_eq!(s.retry.base_delay, std::time::Duration::from_millis(10));
    assert_eq!(s.guard.identical_calls, 4);
    assert_eq!(s.guard.window, 6, "unset keys keep their defaults");
    assert_eq!(s.iteration_cap, Some(80));
    assert_eq!(s.max_tokens_recoveries, Some(1));
    assert_eq!(s.budgets.token_budget, Some(100), "the flag wins");
    assert_eq!(s.budgets.cost_limit, Some(0.25));
    assert_eq!(s.prices.price("my-model").unwrap().output, 2.0);
    assert!(s.prices.price("gpt-4o").is_some(), "built-in prices stay");
    assert_eq!(s.soft_timeout, Some(std::time::Duration::from_secs(600)));
    assert_eq!(s.hard_timeout, Some(std::time::Duration::from_millis(1500)));
    assert_eq!(s.tool_retry_delays.len(), 2);
    assert_eq!(s.approval_timeout, std::time::Duration::from_secs(30));
    assert_eq!(s.user.as_deref(), Some("ada"));
    let mut f = flags();
    f.base_url = Some("http://h:1".into());
    f.soft_timeout = Some(0.0);
    assert!(
        resolve(FileConfig::default(), &no_env, &f)
            .unwrap_err()
            .0
            .contains("--soft-timeout")
    );
}

#[test]
fn cost_limit_inf_is_no_limit_and_nan_or_negative_is_refused() {
    let mut f = flags();
    f.base_url = Some("http://h:1".into());
    f.cost_limit = Some("inf".parse().unwrap());
    let s = resolve(FileConfig::default(), &no_env, &f).unwrap();
    assert_eq!(s.budgets.cost_limit, None);
    for bad in ["NaN", "-1", "0"] {
        f.cost_limit = Some(bad.parse().unwrap());
        let err = resolve(FileConfig::default(), &no_env, &f).unwrap_err();
        assert!(err.0.contains("--cost-limit must be"), "{bad}: {err}");
    }
}

#[test]
fn context_settings_and_the_summary_model_come_from_file_and_flags() {
    let file = parse_file(
        r#"
base_url = "http://local:1/v1"
[models]
summary = "anthropic:claude-haiku-4-5"
[context]
strategy = "sliding_window"
compact_threshold = 0.5
keep_last = 6
[context.windows]
"llama3.1" = 131072
"#,
    )
    .unwrap();
    let mut f = flags();
    f.model = Some("llama3.1:8b".into());
    let env = env_of(&[("ANTHROPIC_API_KEY", "a")]);
    let s = resolve(file, &env, &f).unwrap();
    assert_eq!(
        s.context.strategy,
        keel_core::context::Strategy::SlidingWindow
    );
    assert_eq!(s.context.compact_threshold, 0.5);
    assert_eq!(s.context.keep_last, 6);
    assert_eq!(s.context.deep_keep, 4, "unset keys keep their defaults");
    assert_eq!(s.context.window_for("llama3.1:8b"), 131_072);
    assert_eq!(
        s.context.window_for("gpt-4o"),
        128_000,
        "the built-in table stays"
    );
    let summary = s.summary.unwrap();
    assert_eq!(summary.model, "claude-haiku-4-5");
    assert_eq!(summary.provider.unwrap().api, Api::AnthropicMessages);

    let mut f = flags();
    f.base_url = Some("http://h:1".into());
    f.context_window = Some(4000);
    let s = resolve(FileConfig::default(), &no_env, &f).unwrap();
    assert_eq!(
        s.context.window_for("gpt-4o"),
        4000,
        "--context-window overrides the table"
    );
    assert!(s.summary.is_none());
    f.context_window = Some(100);
    assert!(
        resolve(FileConfig::default(), &no_env, &f)
            .unwrap_err()
            .0
            .contains("--context-window")
    );
}

#[test]
fn embeddings_fallbacks_are_other_providers_serving_the_same_model() {
    let file = parse_file(
        "[memory]\nfacts = true\nembeddings_model = \"text-embedding-3-small\"\n\
         embeddings_fallback = [\"backup\"]\n\n\
         [providers.backup]\napi = \"openai_chat\"\nbase_url = \"http://backup.example/v1\"\n",
    )
    .unwrap();
    let env = env_of(&[("OPENAI_API_KEY", "o")]);
    let settings = resolve(file, &env, &flags()).unwrap();
    let names: Vec<&str> = settings
        .memory
        .embeddings_fallbacks
        .iter()
        .map(|p| p.base_url.as_str())
        .collect();
    assert_eq!(names, ["http://backup.example/v1"]);

    for (text, expected) in [
        (
            "[memory]\nfacts = true\nembeddings_fallback = [\"openai\"]\n",
            "needs embeddings_model",
        ),
        (
            "[memory]\nfacts = true\nembeddings_model = \"e\"\nembeddings_fallback = [\"openai\"]\n",
            "is the primary provider",
        ),
        (
            "[memory]\nfacts = true\nembeddings_model = \"e\"\nembeddings_fallback = [\"nowhere\"]\n",
            "`nowhere` is not a provider",
        ),
    ] {
        let file = parse_file(text).unwrap();
        let error = resolve(file, &env, &flags()).unwrap_err();
        assert!(error.0.contains(expected), "{text}: {error}");
    }
}
