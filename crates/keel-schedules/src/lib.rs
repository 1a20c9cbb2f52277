//! keel-schedules: what a schedule is and when it fires (DESIGN.md section 14).
//!
//! - [`spec`] parses the three kinds of "when" (`once`, `every`, `cron` with a time zone) and
//!   says which slot follows an instant;
//! - [`catch_up`] plans a schedule's due slots: which fire, which are recorded missed, where
//!   its next slot moves (pure);
//! - [`scheduler`] is the loop in `keel serve` that does what the plans say, through the
//!   server's [`scheduler::Fire`], and counts the fires' outcomes;
//! - [`tool`] is the `schedule` tool the model schedules with;
//! - [`message`] renders a fire's text, [`clock`] is the test clock of `keel serve`.
//!
//! It depends on keel-core and keel-platform (the store's schedule records); the server
//! implements [`scheduler::Fire`] and starts the loop; nothing here knows HTTP or a channel.

#![warn(missing_docs)]

pub mod catch_up;
pub mod clock;
pub mod message;
pub mod scheduler;
pub mod spec;
pub mod tool;

pub use scheduler::{Fire, FireError, Fired, ScheduleEvent, ScheduleEventKind, Scheduler};
pub use spec::{Kind, Spec, SpecError};
pub use tool::ScheduleTool;
