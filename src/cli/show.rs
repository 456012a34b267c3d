//! `rewind show`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::output::{change_json, color, unified};
use super::{CliResult, Failure};
use crate::history::time;

/// Show one change: who made it, when, and what it did to the content.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The change id.
    pub id: u64,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cwd: &Path, args: ShowArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let store = ctx.read_store()?;
    let c = store.change(args.id)?.ok_or_else(|| {
        Failure::usage(format!("there is no change {}; see `rewind log`", args.id))
    })?;
    if args.json {
        println!("{}", change_json(&c));
        return Ok(ExitCode::SUCCESS);
    }
    let path = String::from_utf8_lossy(&c.path).into_owned();
    println!("change {}  {}", c.id, c.kind);
    println!("path:    {path}");
    if let Some(from) = &c.from {
        println!("from:    {}", String::from_utf8_lossy(from));
    }
    println!("time:    {}", time::rfc3339(c.time_ns));
    println!(
        "by:      agent {}, session {}, {}[{}]",
        c.agent, c.session, c.process, c.pid
    );
    let content = |s: &Option<crate::store::FileState>| -> Result<Option<Vec<u8>>, Failure> {
        match s.as_ref().and_then(|s| s.hash) {
            Some(h) => Ok(Some(store.read_blob(&h)?)),
            None => Ok(s.as_ref().map(|_| Vec::new())),
        }
    };
    let (old, new) = (content(&c.before)?, content(&c.after)?);
    if let (Some(b), Some(a)) = (&c.before, &c.after)
        && b.mode != a.mode
    {
        println!("mode:    {:o} -> {:o}", b.mode, a.mode);
    }
    if old != new {
        println!();
        print!(
            "{}",
            unified(&path, old.as_deref(), new.as_deref(), color())
        );
    }
    Ok(ExitCode::SUCCESS)
}
