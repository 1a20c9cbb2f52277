//! Test hooks of the assembled agent, read from the environment in debug builds only (the
//! builds tests run); a release build never reads them.

/// A test hook for crash tests: with `KEEL_TEST_PAUSE_IN_TOOL=NAME` set, a call of tool NAME
/// freezes after keel recorded it as started and before the tool acts, says so on stderr, and
/// waits to be killed — so a test can kill keel in the middle of a side effect. Debug builds
/// only.
pub struct PauseInTool {
    inner: std::sync::Arc<dyn keel_core::Tool>,
}

impl PauseInTool {
    /// `tools`, with the one the variable names wrapped in the hook.
    pub fn wrap(
        tools: Vec<std::sync::Arc<dyn keel_core::Tool>>,
    ) -> Vec<std::sync::Arc<dyn keel_core::Tool>> {
        let name = cfg!(debug_assertions)
            .then(|| std::env::var("KEEL_TEST_PAUSE_IN_TOOL").ok())
            .flatten();
        let Some(name) = name else { return tools };
        tools
            .into_iter()
            .map(|tool| -> std::sync::Arc<dyn keel_core::Tool> {
                if tool.spec().name == name {
                    std::sync::Arc::new(PauseInTool { inner: tool })
                } else {
                    tool
                }
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl keel_core::Tool for PauseInTool {
    fn spec(&self) -> &keel_core::ToolSpec {
        self.inner.spec()
    }

    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &keel_core::ToolContext,
    ) -> Result<keel_core::ToolOutput, keel_core::ToolError> {
        eprintln!("keel: test hook: paused in tool {}", self.inner.spec().name);
        std::future::pending().await
    }
}
