//! `rewind watch`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::{CliResult, Failure};

/// Print each change as it happens (from `.rewind/events`), until interrupted.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cwd: &Path, args: WatchArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    if !ctx.mounted {
        return Err(Failure::usage(format!(
            "{} is not mounted; nothing is happening",
            ctx.workspace.display()
        )));
    }
    let path = ctx.workspace.join(".rewind/events");
    let f = std::fs::File::open(&path)
        .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))?;
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(f).lines() {
        let Ok(line) = line else { break };
        let text = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(v) if !args.json => {
                let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
                let path = match v["from"].as_str() {
                    Some(from) => format!("{} <- {from}", s("path")),
                    None => s("path"),
                };
                format!(
                    "{:>6}  {}  {:<7}  {}  {}@{}",
                    v["id"],
                    s("time"),
                    s("kind"),
                    path,
                    s("agent"),
                    s("session")
                )
            }
            _ => line,
        };
        if super::write_line(&mut out, &text).is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
