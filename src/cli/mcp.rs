//! `rewind mcp`: an MCP server on stdio for agents (see `crate::mcp`). Stdout is the protocol,
//! so nothing else is printed there.

use std::path::Path;
use std::process::ExitCode;

use super::{CliResult, Failure};
use crate::mcp::{ProcessBackend, serve_stdio};

pub fn run(cwd: &Path) -> CliResult {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find the rewind binary: {e}")))?;
    let dir = cwd
        .canonicalize()
        .map_err(|e| Failure::usage(format!("{}: {e}", cwd.display())))?;
    serve_stdio(ProcessBackend { exe, dir }).map_err(|e| Failure::failed(format!("mcp: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
