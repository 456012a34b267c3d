//! `rewind gc`.

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::format::count;
use crate::history::retention::Retention;
use crate::history::{Error, Result};

/// Remove old history: changes older than --keep, then the oldest until the store fits
/// --max-size. The newest change of every path is always kept.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep this much history (e.g. 30d, 12h).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep the stored content under this size (e.g. 2G, 500M).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Say what would be done and do nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: &GcArgs, env: &mut Env<'_>) -> Result<Outcome> {
    if args.keep.is_none() && args.max_size.is_none() {
        return Err(Error::Usage(
            "say what to keep: --keep DURATION and/or --max-size SIZE".into(),
        ));
    }
    let policy = Retention::parse(args.keep.as_deref(), args.max_size.as_deref(), None)
        .map_err(|e| Error::Usage(format!("--{e}")))?
        .policy();
    if args.dry_run {
        env.println("dry run: nothing removed")?;
        return Ok(Outcome::Done);
    }
    let r = env.actor("gc")?.gc(&policy)?;
    env.println(&format!(
        "removed {} and {}; stored content {} -> {} bytes",
        count(r.changes_removed as usize, "change"),
        count(r.blobs_removed as usize, "blob"),
        r.bytes_before,
        r.bytes_after
    ))?;
    Ok(Outcome::Done)
}
