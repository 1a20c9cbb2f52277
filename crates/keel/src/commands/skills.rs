//! `keel skills list`: the skills keel reads (from `$KEEL_HOME/skills` and the workspace's
//! `.keel/skills`), each with its description and triggers, and the ones it skipped and why.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_tools::SkillSet;

use crate::config::{self, ConfigError, keel_home};
use crate::terminal_text::terminal_safe;

/// `keel skills`.
#[derive(Debug, Args)]
pub struct SkillsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SkillsCommand,
}

/// The `keel skills` subcommands.
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Print every skill (name, where it is, description, triggers) and every skill directory
    /// that was skipped, with why. Exits 1 when one was skipped.
    List {
        /// The workspace whose `.keel/skills` is read (default: the configured one).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

/// Runs `keel skills`.
pub fn skills(config_file: Option<&Path>, args: SkillsArgs) -> anyhow::Result<ExitCode> {
    let SkillsCommand::List { workspace } = args.command;
    let home = keel_home()?;
    // Only the file: listing skills needs no provider key.
    let file = config::load(config_file, &home)?.file;
    let mut settings = file.skills.settings().map_err(ConfigError)?;
    if !settings.enabled {
        return Err(ConfigError("skills are off: [skills] enabled = false".into()).into());
    }
    let workspace = workspace
        .or(file.workspace)
        .unwrap_or_else(|| PathBuf::from("."));
    settings.roots = keel_tools::skill_roots(&home, &workspace);
    let (skills, problems) = SkillSet::load(&settings.roots);
    if skills.all().is_empty() {
        let roots: Vec<String> = settings
            .roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        println!(
            "no skills: add DIR/SKILL.md under {}",
            terminal_safe(&roots.join(" or "))
        );
    }
    for skill in skills.all() {
        println!(
            "{}  {}",
            skill.name,
            terminal_safe(&skill.dir.display().to_string())
        );
        println!("  {}", terminal_safe(&skill.description));
        if !skill.triggers.is_empty() {
            println!("  triggers: {}", terminal_safe(&skill.triggers.join(", ")));
        }
    }
    for problem in &problems {
        eprintln!(
            "skipped {}: {}",
            terminal_safe(&problem.path.display().to_string()),
            terminal_safe(&problem.reason)
        );
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
