//! One module per subcommand.

pub mod acp;
pub mod bench;
pub mod channels;
pub mod chat;
pub mod demo;
pub mod facts;
pub mod keys;
pub mod lane;
pub mod mcp;
pub mod mock_provider;
pub mod personas;
pub mod resume;
pub mod run;
pub mod runs;
pub mod runs_watch;
pub mod schedules;
pub mod serve;
pub mod serve_metrics;
pub mod sessions;
pub mod skills;
pub mod usage;
pub mod users;
