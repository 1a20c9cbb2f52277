//! `keel facts list|rm`: the known facts keel remembers about a user (see `keel-memory`):
//! list them (with the ones newer facts replaced, on request) and delete one.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_core::store::OWNER;

use crate::config::keel_home;
use crate::setup;
use crate::terminal_text::terminal_safe;

/// `keel facts`.
#[derive(Debug, Args)]
pub struct FactsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: FactsCommand,
}

/// The `keel facts` subcommands.
#[derive(Debug, Subcommand)]
pub enum FactsCommand {
    /// List a user's known facts, oldest first: id, key, importance, text.
    List {
        /// The user (default: the machine's owner, whose facts `keel run` and `keel chat` keep).
        #[arg(long, default_value = OWNER)]
        user: String,
        /// Also the facts newer ones replaced.
        #[arg(long)]
        all: bool,
    },
    /// Delete one of a user's facts (and the older ones it replaced). Exits 1 when that user
    /// has no such fact.
    Rm {
        /// The fact's id, as `keel facts list` shows it.
        id: String,
        /// The user (default: the machine's owner).
        #[arg(long, default_value = OWNER)]
        user: String,
    },
}

/// Runs `keel facts`.
pub async fn facts(args: FactsArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let code = match args.command {
        FactsCommand::List { user, all } => {
            let facts = store.facts(&user, all).await?;
            if facts.is_empty() {
                println!("no known facts about `{}`", terminal_safe(&user));
            }
            for fact in facts {
                let replaced = fact
                    .superseded_by
                    .map(|by| format!("  (replaced by {by})"))
                    .unwrap_or_default();
                println!(
                    "{}  [{}]  {:.2}  {}{replaced}",
                    fact.id,
                    terminal_safe(fact.key.as_deref().unwrap_or("-")),
                    fact.importance,
                    terminal_safe(&fact.text.replace('\n', " ")),
                );
            }
            ExitCode::SUCCESS
        }
        FactsCommand::Rm { id, user } => {
            if store.forget_fact(&user, &id).await? {
                println!("forgot {}", terminal_safe(&id));
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "keel: `{}` has no fact `{}`",
                    terminal_safe(&user),
                    terminal_safe(&id)
                );
                ExitCode::FAILURE
            }
        }
    };
    store.close().await;
    Ok(code)
}
