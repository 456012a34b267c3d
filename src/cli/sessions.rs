//! `rewind sessions`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::CliResult;
use super::context::Ctx;
use crate::history::time;

/// List the sessions with how many changes each made, when, and by which agents.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cwd: &Path, args: SessionsArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let store = ctx.read_store()?;
    let mut sessions = store.sessions()?;
    sessions.sort_by_key(|s| s.first_id);
    for s in sessions {
        if args.json {
            println!(
                "{}",
                json!({
                    "name": s.name, "changes": s.count, "first_id": s.first_id, "last_id": s.last_id,
                    "first_time": time::rfc3339(s.first_time_ns), "last_time": time::rfc3339(s.last_time_ns),
                    "agents": s.agents,
                })
            );
        } else {
            println!(
                "{:<32} {:>6} changes  {} .. {}  {}",
                s.name,
                s.count,
                time::short(s.first_time_ns),
                time::short(s.last_time_ns),
                s.agents.join(",")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
