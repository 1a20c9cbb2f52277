//! keel-acp: `keel acp`, keel as an Agent Client Protocol agent over stdio. An editor (Zed,
//! JetBrains, Neovim) starts it, opens sessions and sends prompts; each prompt is a durable keel
//! run whose events stream back as session updates and whose approvals are the editor's
//! permission requests.
