//! `rewind watch`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::command::WatchArgs;
use crate::history::format::{change_from_json, change_line};

pub fn run(cwd: &Path, args: &WatchArgs) -> CliResult {
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
        // The same line as `rewind log` prints; a note of missed changes as it came.
        let text = match serde_json::from_str(&line)
            .ok()
            .and_then(|v| change_from_json(&v))
        {
            Some(c) if !args.json => change_line(&c),
            _ => line,
        };
        if std::io::Write::write_all(&mut out, format!("{text}\n").as_bytes()).is_err() {
            break;
        }
        let _ = std::io::Write::flush(&mut out);
    }
    Ok(ExitCode::SUCCESS)
}
