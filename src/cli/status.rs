//! `rewind status`.

use std::path::Path;
use std::process::ExitCode;

use super::context::Ctx;
use super::{CliResult, Registration};

fn health(workspace: &Path) -> &'static str {
    match std::fs::metadata(workspace.join(".rewind/status")) {
        _ if !crate::fs::is_rewind_mount(workspace) => "not mounted",
        Ok(_) => "mounted",
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            "stale: the daemon died; `rewind mount` on it recovers (it clears the dead mount and records what changed meanwhile)"
        }
        Err(_) => "mounted (not answering)",
    }
}

pub fn run(cwd: &Path) -> CliResult {
    let Ok(ctx) = Ctx::locate(cwd) else {
        let all = Registration::all();
        if all.is_empty() {
            println!("no workspaces; mount one with `rewind mount DIR`");
        }
        for r in all {
            println!(
                "{}  {}  (store {})",
                r.workspace.display(),
                health(&r.workspace),
                r.store.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    println!("workspace: {}", ctx.workspace.display());
    println!("state: {}", health(&ctx.workspace));
    println!("store: {}", ctx.store_dir.display());
    // The daemon's own view: its pid, whether it records, how data moves, retention.
    if let Ok(text) = std::fs::read_to_string(ctx.workspace.join(".rewind/status")) {
        for line in text.lines().filter(|l| {
            [
                "state:",
                "daemon:",
                "data path:",
                "retention:",
                "last gc:",
                "unrecorded:",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        }) {
            if let Some(rest) = line.strip_prefix("state: mounted, ") {
                println!("recording: {rest}");
            } else if !line.starts_with("state:") {
                println!("{line}");
            }
        }
    }
    let history = ctx.read_history()?;
    let stats = history.store().stats()?;
    println!("changes: {} (last id {})", stats.changes, stats.last_id);
    if let Some(h) = history.horizon()? {
        println!(
            "oldest point still kept: {} ({}); gc removed what came before",
            h.id,
            crate::history::time::rfc3339(h.time_ns)
        );
    }
    println!("stored: {} blobs, {} bytes", stats.blobs, stats.blob_bytes);
    println!("sessions: {}", history.sessions()?.len());
    let checkpoints = history.checkpoints()?;
    if checkpoints.is_empty() {
        println!("checkpoints: none (make one with `rewind checkpoint NAME`)");
    } else {
        println!(
            "checkpoints: {}",
            checkpoints
                .iter()
                .map(|c| format!("{}@{}", c.name, c.id))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
