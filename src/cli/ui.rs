//! `rewind ui`: find the workspace, then serve the review page (`crate::ui`).

use std::path::Path;
use std::process::ExitCode;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::command::UiArgs;
use crate::ui::history::Backend;

pub fn run(cwd: &Path, args: &UiArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    // A server outlives its reader: a closed terminal or pipe, or a browser gone mid-answer,
    // is an error to handle, not a reason to die.
    // SAFETY: setting a signal disposition before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let backend = Backend::open(ctx)?;
    crate::ui::serve(backend, args.port, !args.no_open)
        .map_err(|e| Failure::failed(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
