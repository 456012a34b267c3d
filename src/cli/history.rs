//! Where history commands run. While the workspace is mounted every command goes to the
//! daemon through `.rewind/ctl`, with the same words: it is the store's one writer (a rollback
//! must be recorded), and it has the store open, so a reading command costs the same however
//! much history is not yet flushed from RocksDB's log (opening the store beside it replays all
//! of that log). Unmounted, commands open the store themselves, and a rollback mounts the
//! workspace for the occasion.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::command::env::Applied;
use crate::command::{self, Actor, Command, Env, HistoryVerb, Outcome};
use crate::history::GcReport;
use crate::history::change::Checkpoint;
use crate::history::db::GcPolicy;
use crate::history::recorder::Source;
use crate::history::rollback::{OpenFiles, Plan};
use crate::history::view::AsLastMounted;
use crate::history::{Error, History, Name, Result, time};

fn exit(outcome: Outcome) -> ExitCode {
    match outcome {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::Partial | Outcome::Skipped => ExitCode::from(1),
    }
}

/// Where a command must run.
enum Place {
    /// Reading: in the daemon when mounted; here, on the store, otherwise.
    Read,
    /// Changing: in the daemon when mounted; here, on the store, otherwise.
    Write,
    /// Changing the workspace: always in the daemon (mounted for the occasion if need be).
    Daemon,
    /// Talking to the daemon about processes: only while mounted.
    Plumbing,
    /// A rollback's dry run: in the daemon when mounted, where the run would plan it (it knows
    /// which files are open for writing), so the preview is that plan; here otherwise.
    Preview,
}

fn place(command: &Command) -> Place {
    match command {
        Command::Rollback(a) if a.dry_run => Place::Preview,
        Command::Undo(a) if a.dry_run => Place::Preview,
        Command::Rollback(_) | Command::Undo(_) => Place::Daemon,
        Command::Checkpoint(_) | Command::Gc(_) => Place::Write,
        Command::Comment(a) if !matches!(a.action, command::comment::CommentAction::List(_)) => {
            Place::Write
        }
        Command::Session(_)
        | Command::Sync { .. }
        | Command::Turn(_)
        | Command::Tool(_)
        | Command::Whoami { .. } => Place::Plumbing,
        _ => Place::Read,
    }
}

pub fn run(cwd: &Path, command: &Command, verb: HistoryVerb<'_>) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    match place(command) {
        Place::Read if ctx.mounted => read_in_daemon(&ctx, verb),
        Place::Read => local(&ctx, verb, &ctx.read_history()?, None),
        Place::Write if !ctx.mounted => {
            let history = ctx.write_history()?;
            local(
                &ctx,
                verb,
                &history,
                Some(&LocalActor { history: &history }),
            )
        }
        Place::Write => forward(&ctx, command),
        Place::Daemon => {
            if !ctx.mounted {
                preview_here(&ctx, verb)?;
            }
            ctx.with_mount(|ctx| forward(ctx, command))
        }
        Place::Plumbing | Place::Preview if ctx.mounted => forward(&ctx, command),
        Place::Preview => local(&ctx, verb, &ctx.read_history()?, None),
        Place::Plumbing => Err(Failure::usage(format!(
            "`rewind {}` talks to the daemon: mount {} first",
            command.name(),
            ctx.workspace.display()
        ))),
    }
}

/// Before a rollback mounts the workspace for the occasion: its dry run here, as `--dry-run`
/// would give it, whose refusal it gives too. The mount records first what changed while the
/// workspace was not mounted (as `external`), and the run then rolled back a plan no preview
/// had shown, where the dry run refused: `f changed while the workspace was not mounted`.
fn preview_here(ctx: &Ctx, verb: HistoryVerb<'_>) -> Result<(), Failure> {
    let (rollback, undo);
    let dry = match verb {
        HistoryVerb::Rollback(a) => {
            rollback = command::rollback::RollbackArgs {
                dry_run: true,
                ..a.clone()
            };
            HistoryVerb::Rollback(&rollback)
        }
        HistoryVerb::Undo(a) => {
            undo = command::rollback::UndoArgs {
                dry_run: true,
                ..a.clone()
            };
            HistoryVerb::Undo(&undo)
        }
        _ => return Ok(()),
    };
    run_here(ctx, dry, &ctx.read_history()?, None, &mut std::io::sink())?;
    Ok(())
}

/// Run the command here, on the store.
fn local(
    ctx: &Ctx,
    verb: HistoryVerb<'_>,
    history: &History,
    actor: Option<&dyn Actor>,
) -> CliResult {
    let mut out = std::io::stdout().lock();
    let outcome = run_here(ctx, verb, history, actor, &mut out)?;
    let _ = out.flush();
    Ok(exit(outcome))
}

/// [`local`], its output to `out`.
fn run_here(
    ctx: &Ctx,
    verb: HistoryVerb<'_>,
    history: &History,
    actor: Option<&dyn Actor>,
    out: &mut dyn Write,
) -> Result<Outcome, Failure> {
    let source = ctx.source()?;
    let rules = ctx.ignore_rules(&source);
    let ignored = |path: &[u8], dir: bool| rules.ignored(&source, path, dir).is_some();
    // Unmounted, the workspace is read only as far as it is what the mount last saw.
    let last_mounted = AsLastMounted {
        source: &source,
        history,
    };
    let now: &dyn Source = if ctx.mounted { &source } else { &last_mounted };
    let mut env = Env {
        history,
        source: now,
        ignored: &ignored,
        workspace: ctx.workspace.clone(),
        base: ctx.base.clone(),
        actor,
        caller: std::os::unix::process::parent_id(),
        color: color(),
        width: terminal_width(),
        out,
    };
    Ok(command::run(verb, &mut env)?)
}

/// Run a reading command in the daemon, its output shaped for this terminal. Read beside it
/// instead when its words cannot go through `.rewind/ctl` (a name that is not UTF-8), or when
/// the daemon does not answer at all (it died: the store is readable as it was left).
fn read_in_daemon(ctx: &Ctx, verb: HistoryVerb<'_>) -> CliResult {
    let Ok(line) = ctx.forwarded_line() else {
        return local(ctx, verb, &ctx.read_history()?, None);
    };
    if std::fs::metadata(ctx.workspace.join(".rewind/ctl")).is_err() {
        return local(ctx, verb, &ctx.read_history()?, None);
    }
    let color = if color() { "--color-output " } else { "" };
    let line = format!("--output-width {} {color}{line}", terminal_width());
    let answer = ctx.ctl(&line)?;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&answer.output);
    let _ = out.flush();
    // A dry run of a rollback that would skip paths.
    Ok(if answer.partial {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Run the command in the daemon, with the words it was given.
fn forward(ctx: &Ctx, command: &Command) -> CliResult {
    let mut line = ctx.forwarded_line()?;
    // `rewind session start/end` in a shell means the shell (the writer of ctl would be this
    // short-lived process).
    if let Command::Session(
        command::plumbing::SessionCommand::Start { pid: None, .. }
        | command::plumbing::SessionCommand::End { pid: None, .. },
    ) = command
    {
        line += &format!(" --pid {}", std::os::unix::process::parent_id());
    }
    let long = matches!(
        command,
        Command::Rollback(_) | Command::Undo(_) | Command::Gc(_)
    );
    // Progress only for a person watching: not when the output goes to a file or a program.
    let watched = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
    let answer = if long && watched {
        with_progress(ctx, &line, command.name())?
    } else {
        ctx.ctl(&line)?
    };
    let _ = std::io::stdout().write_all(&answer.output);
    Ok(if answer.partial {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Run a long command showing on stderr that it is working, and for a rollback a bar of how
/// far it has got: the daemon's `.rewind/progress` names the thread that wrote the command.
fn with_progress(ctx: &Ctx, line: &str, what: &str) -> Result<super::context::Answer, Failure> {
    use indicatif::{ProgressBar, ProgressStyle};
    let progress_file = ctx.workspace.join(".rewind/progress");
    let bar = ProgressBar::new_spinner().with_message(format!("{what}: working"));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let (tx, rx) = std::sync::mpsc::channel();
    let answer = std::thread::scope(|s| {
        let run = s.spawn(move || {
            let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get().to_string());
            ctx.ctl(line)
        });
        let writer = rx.recv().unwrap_or_default();
        let mut shown = String::new();
        while !run.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let text = std::fs::read_to_string(&progress_file).unwrap_or_default();
            let Some((phase, done, total)) = text.lines().find_map(|l| {
                let [tid, phase, done, total] = l.split(' ').collect::<Vec<_>>()[..] else {
                    return None;
                };
                (tid == writer).then_some((phase, done.parse().ok()?, total.parse().ok()?))
            }) else {
                continue;
            };
            bar.set_length(total);
            bar.set_position(done);
            if shown != phase {
                let style = ProgressStyle::with_template(
                    "{msg} [{bar:30}] {human_pos}/{human_len} paths ({elapsed})",
                )
                .expect("a valid template")
                .progress_chars("=> ");
                bar.set_style(style);
                bar.set_message(format!("{what}: {phase}"));
                shown = phase.to_string();
            }
        }
        run.join()
            .unwrap_or_else(|_| Err(Failure::failed("the command thread failed")))
    });
    bar.finish_and_clear();
    answer
}

/// Whether to colour the output, as git decides: a terminal that is not "dumb" (an unset TERM
/// counts as dumb), unless NO_COLOR is set.
fn color() -> bool {
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
}

fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(80)
}

/// What an unmounted workspace's commands may change: the store, opened here.
struct LocalActor<'a> {
    history: &'a History,
}

impl Actor for LocalActor<'_> {
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    fn checkpoint(&self, name: &Name, force: bool) -> Result<Checkpoint> {
        self.history.put_checkpoint(name, time::now_ns(), force)
    }

    fn gc(&self, policy: &GcPolicy) -> Result<GcReport> {
        self.history.gc(policy)
    }

    fn rollback(&self, _plan: &Plan) -> Result<Applied> {
        Err(Error::NeedsMount("a rollback".into()))
    }

    fn open_files(&self) -> OpenFiles {
        // Unmounted: nothing is open through the mount.
        OpenFiles::default()
    }

    fn plumbing(&self, command: &Command, _caller: u32) -> Result<String> {
        Err(Error::NeedsMount(format!("`rewind {}`", command.name())))
    }
}
