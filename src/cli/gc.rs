//! `rewind gc`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::history::retention::Retention;
use crate::store::Store;

/// Remove old history: changes older than --keep, then the oldest until the store fits
/// --max-size. The newest change of every path is always kept.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep this much history (e.g. 30d, 12h).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep the stored content under this size (e.g. 2G, 500M).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
}

pub fn run(cwd: &Path, args: GcArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    if args.keep.is_none() && args.max_size.is_none() {
        return Err(Failure::usage(
            "say what to keep: --keep DURATION and/or --max-size SIZE",
        ));
    }
    let policy = Retention::parse(args.keep.as_deref(), args.max_size.as_deref(), None)
        .map_err(|e| Failure::usage(format!("--{e}")))?
        .policy();
    if ctx.mounted {
        // The daemon is the only writer of the store: it runs the gc.
        let mut line = String::from("gc");
        if let Some(k) = &args.keep {
            line += &format!(" keep {k}");
        }
        if let Some(m) = policy.max_bytes {
            line += &format!(" max-size {m}");
        }
        let out = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            // gc can take a while on a large store: show that it is working.
            std::thread::scope(|s| {
                let run = s.spawn(|| ctx.ctl(&line));
                let started = std::time::Instant::now();
                while !run.is_finished() {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    eprint!("\rgc: working ({}s)", started.elapsed().as_secs());
                }
                eprint!("\r\x1b[K");
                run.join()
                    .unwrap_or_else(|_| Err(Failure::failed("gc failed")))
            })?
        } else {
            ctx.ctl(&line)?
        };
        print!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let store = Store::open(&ctx.store_dir)?;
    let r = store.gc(&policy)?;
    println!(
        "removed {} changes and {} blobs; stored content {} -> {} bytes",
        r.changes_removed, r.blobs_removed, r.bytes_before, r.bytes_after
    );
    Ok(ExitCode::SUCCESS)
}
