//! `rewind status`.

use std::path::Path;
use std::process::ExitCode;

use super::context::{Ctx, stopped_daemon};
use super::{CliResult, Registration};

fn health(workspace: &Path) -> &'static str {
    if crate::fs::is_rewind_mount(workspace) && stopped_daemon(workspace).is_some() {
        return "mounted, but its daemon is stopped (by SIGSTOP, ^Z or a debugger): the \
                workspace waits until it goes on (`kill -CONT PID`; `rewind status` in it says \
                the pid)";
    }
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
    let Ok(ctx) = Ctx::find(cwd) else {
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
    if ctx.mounted
        && let Some(stopped) = stopped_daemon(&ctx.workspace)
    {
        println!("state: mounted, NOT ANSWERING");
        return Err(stopped);
    }
    println!("state: {}", health(&ctx.workspace));
    // The daemon's own view: its pid, whether it records, how data moves, retention; and the
    // store it records into, whatever this user's registration says (`daemon_store`).
    let daemon_status = std::fs::read_to_string(ctx.workspace.join(".rewind/status"));
    let store_dir = match &daemon_status {
        Ok(s) if ctx.mounted => super::context::store_line(s),
        _ => None,
    }
    .unwrap_or_else(|| ctx.store_dir.clone());
    println!("store: {}", store_dir.display());
    match (&daemon_status, ctx.mounted) {
        // The line is always there: a daemon that cannot answer says so.
        (Err(e), true) => println!("recording: unknown (the daemon's .rewind/status: {e})"),
        (Err(_), false) => println!(
            "recording: no (not mounted: changes made now are recorded as `external` at the \
             next `rewind mount`)"
        ),
        _ => {}
    }
    if let Ok(text) = &daemon_status {
        for line in text.lines().filter(|l| {
            [
                "state:",
                "daemon:",
                "data path:",
                "retention:",
                "last gc:",
                "unrecorded:",
                "oldest point still kept:",
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
    // The counts from the daemon, which has the store open: opening it here would replay
    // everything RocksDB has not flushed from its log yet, slower the more there is.
    if let Some(counts) = daemon_status.as_deref().ok().and_then(Counts::parse) {
        println!("changes: {} (last id {})", counts.changes, counts.last_id);
        println!(
            "stored: {} blobs, {} bytes",
            counts.blobs, counts.blob_bytes
        );
        on_disk(&store_dir);
        println!("sessions: {}", counts.sessions);
        println!("checkpoints: {}", counts.checkpoints);
        return Ok(ExitCode::SUCCESS);
    }
    let history = ctx.read_history()?;
    let stats = history.store().stats()?;
    println!("changes: {} (last id {})", stats.changes, stats.last_id);
    if let Some(h) = history.horizon()? {
        println!("{}", crate::history::format::horizon_line(&h));
    }
    println!("stored: {} blobs, {} bytes", stats.blobs, stats.blob_bytes);
    on_disk(&store_dir);
    println!("sessions: {}", history.sessions()?.len());
    println!(
        "checkpoints: {}",
        crate::history::format::checkpoint_list(&history.checkpoints()?)
    );
    Ok(ExitCode::SUCCESS)
}

/// The store's size on disk as `du` counts it (allocated blocks of every file: tables, logs
/// and RocksDB's own files), beside the stored content above, which excludes them.
fn on_disk(store: &Path) {
    println!(
        "on disk: {} bytes (the store's folder, as du counts it)",
        crate::store::disk_usage(store)
    );
}

/// The counts in the daemon's `.rewind/status`.
struct Counts {
    changes: u64,
    last_id: u64,
    blobs: u64,
    blob_bytes: u64,
    sessions: usize,
    checkpoints: String,
}

impl Counts {
    fn parse(text: &str) -> Option<Counts> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        };
        let (blobs, bytes) = field("blobs")?.split_once(" (")?;
        let sessions = text
            .lines()
            .skip_while(|l| *l != "sessions:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .count();
        Some(Counts {
            changes: field("changes")?.parse().ok()?,
            last_id: field("last change")?.parse().ok()?,
            blobs: blobs.parse().ok()?,
            blob_bytes: bytes.strip_suffix(" bytes stored)")?.parse().ok()?,
            sessions,
            checkpoints: field("checkpoints")?.to_string(),
        })
    }
}
