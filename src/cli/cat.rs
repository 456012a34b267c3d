//! `rewind cat`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::history::point;
use crate::history::view::View;

/// Print a file as it was at a point (a change id, checkpoint, time, or duration ago).
#[derive(Debug, Args)]
pub struct CatArgs {
    pub path: PathBuf,
    /// The point (default: now).
    #[arg(long, value_name = "POINT")]
    pub at: Option<String>,
}

pub fn run(cwd: &Path, args: CatArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let store = ctx.read_store()?;
    let rel = ctx.rel_path(&args.path)?;
    let at = match &args.at {
        Some(p) => point::resolve(p, &store)?,
        None => store.last_id()?,
    };
    let source = ctx.source()?;
    let view = View {
        store: &store,
        source: &source,
    };
    let content = view.content_at(&rel, at)?.ok_or_else(|| {
        Failure::usage(format!(
            "{} did not exist at that point",
            args.path.display()
        ))
    })?;
    let _ = std::io::stdout().write_all(&content);
    Ok(ExitCode::SUCCESS)
}
