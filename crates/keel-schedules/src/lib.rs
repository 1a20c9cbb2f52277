//! keel-schedules: what a schedule is and when it fires (DESIGN.md section 14).
//!
//! [`spec`] parses the three kinds of "when" (`once`, `every`, `cron` with a time zone) and
//! says which slot follows an instant.
//!
//! It depends on no other keel crate, so that the API, the CLI and the tools can all read a
//! schedule the same way.

#![warn(missing_docs)]

pub mod spec;

pub use spec::{Kind, Spec, SpecError};
