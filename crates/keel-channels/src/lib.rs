//! keel-channels: people reach keel where they already are (DESIGN.md section 14). `keel serve`
//! runs the channels its `keel.toml` configures: Telegram, Slack, Discord, email and signed
//! webhooks.
//!
//! Inbound, each platform event is handed to the [`intake::Intake`] with its own id: it runs
//! through the same pipeline as `POST /v1/messages` (user, persona, conversation, trust), and the
//! id is recorded in the transaction that queues its run, so a redelivery does nothing. Outbound,
//! the commit that ends a run (or makes it ask, or wait for an approval) writes an outbox row;
//! each channel's [`courier::Courier`] renders it ([`render`]), sends it through the platform's
//! [`outlet::Outlet`] with retries, and marks it delivered only with the platform's receipt.
//! Approvals and choices come back as button presses ([`decide::Decider`]), taken only from the
//! conversation's owner or an admin ([`access`]).
//!
//! It depends on keel-server (the engine, the store, the pipeline); the server does not depend
//! on it: the `keel` binary starts both.

#![warn(missing_docs)]

pub mod access;
pub mod config;
pub mod courier;
pub mod decide;
pub mod discord;
pub mod email;
pub mod format;
pub mod intake;
pub mod lane_policy;
pub mod outlet;
pub mod render;
pub mod runtime;
pub mod slack;
pub mod status;
pub mod telegram;
pub mod webhook;

pub use config::ChannelsConfig;
pub use intake::{Inbound, Intake, IntakeError, Received, label_untrusted};
pub use outlet::{Button, DeliveryError, Outlet, Reply, Target};
pub use runtime::{Context, Running, StartError, Started, start};
