//! `rewind rollback` and `rewind undo`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgGroup, Args};

use super::context::Ctx;
use super::{CliResult, Failure};

/// Put back what a selection of changes did: every path it touched returns to its state just
/// before the earliest selected change to it. Paths changed later by someone outside the
/// selection are skipped (exit status 1) unless --force. The rollback is itself recorded, in a
/// session of its own whose name it prints.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["session", "agent", "since", "file", "to"])))]
pub struct RollbackArgs {
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    /// Everything after this point.
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
    /// Back to this point (with --file: that file only).
    #[arg(long, value_name = "POINT")]
    pub to: Option<String>,
    /// One file (its last change, or back to --to).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Print exactly what would happen and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also put back paths changed later by others.
    #[arg(long)]
    pub force: bool,
}

/// Undo one change.
#[derive(Debug, Args)]
pub struct UndoArgs {
    pub id: u64,
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub force: bool,
}

fn word(s: &str, what: &str) -> Result<String, Failure> {
    if s.is_empty() || s.contains(char::is_whitespace) {
        return Err(Failure::usage(format!("{what} {s:?} must be one word")));
    }
    Ok(s.to_string())
}

pub fn run(cwd: &Path, args: RollbackArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let mut line = match (
        &args.session,
        &args.agent,
        &args.since,
        &args.file,
        &args.to,
    ) {
        (Some(s), ..) => format!("rollback session {}", word(s, "session")?),
        (_, Some(a), ..) => format!("rollback agent {}", word(a, "agent")?),
        (_, _, Some(p), ..) => format!("rollback since {}", word(p, "point")?),
        (_, _, _, Some(f), to) => {
            let rel = ctx.rel_path(f)?;
            let rel =
                String::from_utf8(rel).map_err(|_| Failure::usage("the path is not UTF-8"))?;
            let rel = word(&rel, "path")?;
            match to {
                Some(p) => format!("rollback file {rel} to {}", word(p, "point")?),
                None => format!("rollback file {rel}"),
            }
        }
        (_, _, _, None, Some(p)) => format!("rollback to {}", word(p, "point")?),
        _ => return Err(Failure::usage("say what to roll back")),
    };
    finish(&ctx, &mut line, args.dry_run, args.force)
}

pub fn undo(cwd: &Path, args: UndoArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    finish(
        &ctx,
        &mut format!("undo {}", args.id),
        args.dry_run,
        args.force,
    )
}

fn finish(ctx: &Ctx, line: &mut String, dry_run: bool, force: bool) -> CliResult {
    if force {
        line.push_str(" --force");
    }
    if dry_run {
        line.push_str(" --dry-run");
    }
    let progress = !dry_run && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let out = ctx.mounted(|ctx| {
        if progress {
            with_progress(ctx, line)
        } else {
            ctx.ctl(line)
        }
    })?;
    print!("{out}");
    let partial = out
        .lines()
        .any(|l| l.starts_with("skip ") || l.starts_with("failed "));
    Ok(if partial {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Run a rollback showing, on stderr, how many of its paths are done: the plan's size from a
/// dry run, then the restore changes recorded in its session as the daemon works.
fn with_progress(ctx: &Ctx, line: &str) -> Result<String, Failure> {
    let plan = ctx.ctl(&format!("{line} --dry-run"))?;
    let total = plan
        .lines()
        .filter(|l| !l.starts_with("skip ") && !l.starts_with("dry run"))
        .count();
    let session = crate::history::rollback::next_session(&ctx.read_store()?)?;
    std::thread::scope(|s| {
        let run = s.spawn(|| ctx.ctl(line));
        let started = std::time::Instant::now();
        while !run.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let done = ctx
                .read_store()
                .ok()
                .and_then(|store| store.session(&session).ok().flatten())
                .map_or(0, |info| info.count);
            eprint!(
                "\r{session}: {done}/{total} paths ({}s)",
                started.elapsed().as_secs()
            );
        }
        eprint!("\r\x1b[K");
        run.join()
            .unwrap_or_else(|_| Err(Failure::failed("the rollback thread failed")))
    })
}
