//! `rewind export`: a selection as commits on a new branch (see `crate::export`).

use std::path::Path;
use std::process::ExitCode;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::command::ExportArgs;
use crate::history::format::count;
use crate::history::recorder::Source;
use crate::history::view::{AsLastMounted, View};

pub fn run(cwd: &Path, args: &ExportArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let history = ctx.read_history()?;
    let source = ctx.source()?;
    let rules = ctx.ignore_rules(&source);
    let ignored = |path: &[u8], dir: bool| rules.ignored(&source, path, dir).is_some();
    // Unmounted, the workspace is read only as far as it is what the mount last saw.
    let last_mounted = AsLastMounted {
        source: &source,
        history: &history,
    };
    let now: &dyn Source = if ctx.mounted { &source } else { &last_mounted };
    let view = View {
        history: &history,
        source: now,
        ignored: &ignored,
    };
    // A session, agent or turn gc cut would be exported as part of itself, passed off as
    // the whole.
    let selection = args.select.selection().resolve(&history)?;
    selection.check_whole(&history)?;
    let selected = selection.changes(&history)?;
    if selected.is_empty() {
        return Err(Failure::usage("nothing to export: no change matches"));
    }
    let done = crate::export::export(&view, &ctx.workspace, &selected, &args.branch)?;
    println!(
        "branch {}: {} from {}{} (working tree, index and HEAD untouched; push it \
         with `git push -u origin {}`)",
        done.branch,
        count(done.commits, "commit"),
        count(selected.len(), "change"),
        if done.skipped > 0 {
            format!(", {} left out (folders, ignored paths)", done.skipped)
        } else {
            String::new()
        },
        done.branch
    );
    Ok(ExitCode::SUCCESS)
}
