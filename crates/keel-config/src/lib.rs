//! keel-config owns keel's configuration and the assembly of an agent from it: `keel.toml`
//! (its sections, the last good copy, strict mode), the environment, and what a caller
//! overrides, resolved into [`resolve::Settings`]; `[serve]` for the daemon; the launch spec a
//! run records; the probe that tells a run's worker process is gone; and [`assembly::agent`],
//! which builds the providers, tools and policies into a [`keel_core::Agent`]. The `keel` binary
//! and `keel serve` share it.
//!
//! It depends on keel-core, keel-providers and keel-tools, never on the binary, the store or
//! the server; it never prints (warnings are values the caller shows).

pub mod assembly;
pub mod config;
pub mod delegation_settings;
pub mod guarded_settings;
pub mod hooks_settings;
pub mod launch;
pub mod mcp_settings;
pub mod memory_settings;
pub mod overrides;
pub mod resolve;
pub mod sandbox_settings;
pub mod schedules_settings;
pub mod serve_settings;
pub mod shell_settings;
pub mod skills_routing;
pub mod store_settings;
pub mod telemetry_settings;
pub mod test_hooks;
pub mod worker;

pub use assembly::load_settings;
pub use config::ConfigError;
pub use overrides::Overrides;
