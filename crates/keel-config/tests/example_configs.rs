//! The ready `keel.toml` files in `examples/config/` are real configurations: each is read the
//! way `keel` reads its configuration file ([`keel_config::load_settings`]: the file, then the
//! environment, then flags) and resolves to the provider, API, base URL, key and models its
//! comments promise, and its provider's adapter can be built. A file added to the directory
//! without an entry here fails the test, so every example stays checked.

use std::path::{Path, PathBuf};

use keel_config::Overrides;
use keel_providers::Api;

/// What one example file must resolve to.
struct Expected {
    /// The file's name in `examples/config/`.
    file: &'static str,
    /// The provider it selects.
    provider: &'static str,
    /// The wire API that provider speaks.
    api: Api,
    /// Where it sends requests.
    base_url: &'static str,
    /// The variable its key comes from, when it needs one.
    key_env: Option<&'static str>,
    /// The models it lists, the default first.
    models: &'static [&'static str],
}

const EXPECTED: &[Expected] = &[
    Expected {
        file: "openai.toml",
        provider: "openai",
        api: Api::OpenAiChat,
        base_url: "https://api.openai.com/v1",
        key_env: Some("OPENAI_API_KEY"),
        models: &["gpt-4o-mini", "gpt-4o"],
    },
    Expected {
        file: "anthropic.toml",
        provider: "anthropic",
        api: Api::AnthropicMessages,
        base_url: "https://api.anthropic.com/v1",
        key_env: Some("ANTHROPIC_API_KEY"),
        models: &["claude-sonnet-4-5", "claude-haiku-4-5"],
    },
    Expected {
        file: "openai-responses.toml",
        provider: "openai-responses",
        api: Api::OpenAiResponses,
        base_url: "https://api.openai.com/v1",
        key_env: Some("OPENAI_API_KEY"),
        models: &["gpt-5-mini", "gpt-5"],
    },
    Expected {
        file: "ollama.toml",
        provider: "ollama",
        api: Api::OpenAiChat,
        base_url: "http://localhost:11434/v1",
        key_env: None,
        models: &["llama3.1", "qwen2.5-coder"],
    },
    Expected {
        file: "vllm.toml",
        provider: "vllm",
        api: Api::OpenAiChat,
        base_url: "http://localhost:8000/v1",
        key_env: None,
        models: &["Qwen/Qwen2.5-7B-Instruct"],
    },
    Expected {
        file: "llama-cpp.toml",
        provider: "llama-cpp",
        api: Api::OpenAiChat,
        base_url: "http://localhost:8080/v1",
        key_env: None,
        models: &["local"],
    },
    Expected {
        file: "openrouter.toml",
        provider: "openrouter",
        api: Api::OpenAiChat,
        base_url: "https://openrouter.ai/api/v1",
        key_env: Some("OPENROUTER_API_KEY"),
        models: &["anthropic/claude-sonnet-4.5", "openai/gpt-4o-mini"],
    },
];

/// The dummy value each key variable holds in this test process: never sent anywhere.
fn dummy_key(var: &str) -> String {
    format!("test-key-for-{var}")
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/config")
}

/// The example files, sorted: every `*.toml` in `examples/config/`.
fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/config/ exists")
        .map(|entry| entry.expect("an examples/config/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// Makes the environment the examples are read in: each key variable an example names holds a
/// dummy value, and nothing of the caller's environment redirects a provider or picks another.
fn prepare_environment() {
    let keys = EXPECTED.iter().filter_map(|e| e.key_env);
    // SAFETY: this is the only test of this binary, so no other thread reads or writes the
    // environment while it changes.
    unsafe {
        for var in keys {
            std::env::set_var(var, dummy_key(var));
        }
        for var in [
            "KEEL_PROVIDER",
            "KEEL_MODEL",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
        ] {
            std::env::remove_var(var);
        }
    }
}

/// Checks one example against what it must resolve to; returns what is wrong.
fn check(path: &Path, expected: &Expected, home: &Path) -> Vec<String> {
    let name = expected.file;
    let mut wrong = Vec::new();
    let configured = match keel_config::load_settings(Some(path), home, &Overrides::default()) {
        Ok(configured) => configured,
        Err(e) => return vec![format!("{name}: does not load: {e}")],
    };
    if let Some(fallback) = &configured.fallback {
        wrong.push(format!(
            "{name}: loaded through a fallback: {}",
            fallback.error
        ));
    }
    let settings = &configured.settings;
    let provider = &settings.provider;
    let mut expect = |what: &str, got: String, want: String| {
        if got != want {
            wrong.push(format!("{name}: {what} is {got}, expected {want}"));
        }
    };
    expect(
        "the provider",
        provider.name.clone(),
        expected.provider.into(),
    );
    expect(
        "the API",
        provider.api.to_string(),
        expected.api.to_string(),
    );
    expect(
        "the base URL",
        provider.base_url.clone(),
        expected.base_url.into(),
    );
    expect(
        "the default model",
        settings.model.clone(),
        expected.models[0].into(),
    );
    if let Some(var) = expected.key_env {
        expect(
            "the key variable",
            format!("{:?}", provider.api_key_env),
            format!("{:?}", Some(var)),
        );
        expect(
            "the key",
            format!("{:?}", provider.api_key),
            format!("{:?}", Some(dummy_key(var))),
        );
    }
    // The provider's table lists exactly these models…
    let listed = keel_config::config::load(Some(path), home)
        .ok()
        .and_then(|loaded| loaded.file.providers.get(expected.provider).cloned())
        .map(|table| table.models)
        .unwrap_or_default();
    expect(
        "its models",
        format!("{listed:?}"),
        format!("{:?}", expected.models),
    );
    // …and `--model M` for each of them runs M on this provider.
    for model in expected.models {
        let flags = Overrides {
            model: Some(model.to_string()),
            ..Overrides::default()
        };
        match keel_config::load_settings(Some(path), home, &flags) {
            Ok(c)
                if c.settings.provider.name == expected.provider && c.settings.model == *model => {}
            Ok(c) => wrong.push(format!(
                "{name}: --model {model} runs {} on {}",
                c.settings.model, c.settings.provider.name
            )),
            Err(e) => wrong.push(format!("{name}: --model {model}: {e}")),
        }
    }
    // The adapter builds (no request is sent).
    if let Err(e) = keel_config::assembly::provider(provider) {
        wrong.push(format!("{name}: the provider cannot be set up: {e}"));
    }
    wrong
}

#[test]
fn every_example_config_resolves_to_its_provider_api_and_models() {
    prepare_environment();
    let home = tempfile::tempdir().expect("a temporary KEEL_HOME");
    let files = example_files();
    let mut wrong = Vec::new();
    for path in &files {
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match EXPECTED.iter().find(|e| e.file == file) {
            Some(expected) => wrong.extend(check(path, expected, home.path())),
            None => wrong.push(format!(
                "examples/config/{file} is not covered: add what it must resolve to to EXPECTED \
                 in {}",
                file!()
            )),
        }
    }
    for expected in EXPECTED {
        if !files.iter().any(|p| p.ends_with(expected.file)) {
            wrong.push(format!("examples/config/{} is missing", expected.file));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
