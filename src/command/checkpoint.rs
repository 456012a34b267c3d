//! `rewind checkpoint`.

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::{Name, Result};

/// Name the current end of the history, to look at or roll back to later. Everything whose
/// syscall returned before is included (a large file still being stored is waited for).
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// The name: not a number, a duration or a time (those are points already), no `/`.
    #[arg(value_parser = |s: &str| Name::parse("checkpoint", s))]
    pub name: Name,
    /// Move an existing checkpoint of this name to now.
    #[arg(long)]
    pub force: bool,
    /// Say what would be done and do nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: &CheckpointArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let actor = env.actor("checkpoint")?;
    // A dry run reads, and (in the daemon) has waited for what has happened already.
    if !args.dry_run {
        actor.settle()?;
    }
    if args.dry_run {
        let exists = env.history.checkpoint(args.name.as_str())?.is_some();
        let line = match (exists, args.force) {
            (true, false) => format!(
                "would refuse: checkpoint {} exists (use --force to move it)",
                args.name
            ),
            _ => format!(
                "would {} checkpoint {} at change {}",
                if exists { "move" } else { "create" },
                args.name,
                env.history.last_id()?
            ),
        };
        env.println(&line)?;
        return Ok(Outcome::Done);
    }
    let c = actor.checkpoint(&args.name, args.force)?;
    env.println(&format!("checkpoint {} at change {}", c.name, c.id))?;
    Ok(Outcome::Done)
}
