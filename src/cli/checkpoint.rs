//! `rewind checkpoint`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::CliResult;
use super::context::Ctx;
use crate::history::time;
use crate::store::Store;

/// Name the current end of the history, to look at or roll back to later.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    pub name: String,
}

pub fn run(cwd: &Path, args: CheckpointArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    crate::store::validate_name("checkpoint", &args.name)?;
    if args.name.contains(char::is_whitespace) {
        return Err(super::Failure::usage("a checkpoint name has no spaces"));
    }
    if ctx.mounted {
        print!("{}", ctx.ctl(&format!("checkpoint {}", args.name))?);
    } else {
        let store = Store::open(&ctx.store_dir)?;
        let c = store.put_checkpoint(&args.name, time::now_ns())?;
        println!("checkpoint {} at change {}", c.name, c.id);
    }
    Ok(ExitCode::SUCCESS)
}
