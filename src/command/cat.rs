//! `rewind cat`.

use std::path::PathBuf;

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::change::FileKind;
use crate::history::{Error, Result, point};

/// Print a file as it was at a point (a change id, checkpoint, time, or duration ago).
#[derive(Debug, Args)]
pub struct CatArgs {
    pub path: PathBuf,
    /// The point (default: now).
    #[arg(long, value_name = "POINT")]
    pub at: Option<String>,
}

pub fn run(args: &CatArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let rel = env.rel_path(&args.path)?;
    let at = match &args.at {
        Some(p) => point::resolve(p, env.history)?,
        None => env.history.last_id()?,
    };
    let kind = if rel.is_empty() {
        Some(FileKind::Dir)
    } else {
        env.view().state_at(&rel, at)?.state().map(|s| s.kind)
    };
    if let Some(kind @ (FileKind::Dir | FileKind::Special(_))) = kind {
        let shown = args.path.display();
        return Err(Error::Usage(if kind == FileKind::Dir {
            format!(
                "{shown} is a folder at that point, not a file; list it under .rewind/at/POINT/, \
                 or see what changed below it with `rewind log {shown}`"
            )
        } else {
            format!(
                "{shown} is a special file (a FIFO, socket or device) at that point: it has no content"
            )
        }));
    }
    let content = env.view().content_at(&rel, at)?.ok_or_else(|| {
        Error::Usage(format!(
            "{} did not exist at that point",
            args.path.display()
        ))
    })?;
    env.write(&content)?;
    Ok(Outcome::Done)
}
