//! The command grammar, shared by the `rewind` binary and `.rewind/ctl`: one set of clap
//! definitions, so a flag means the same wherever it is written and wherever it stands on the
//! line. Each verb's file holds its `XxxArgs` (whose doc comment is its `--help`) and, for
//! verbs that read or change history, a `run` that works wherever the history is: in the CLI
//! on a store it opened, or in the daemon for a line written to `.rewind/ctl`.
//!
//! Verbs that only make sense in a shell (mount, watch, export, hook, mcp, ...) run in `cli/`;
//! written to `.rewind/ctl` they are refused with a message saying so.

pub mod args;
pub mod cat;
pub mod checkpoint;
pub mod comment;
pub mod diff;
pub mod env;
pub mod gc;
pub mod hunk;
pub mod log;
pub mod plumbing;
pub mod rollback;
pub mod select;
pub mod sessions;
pub mod show;
pub mod turns;
pub mod words;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use args::*;
pub use env::{Actor, Env, Outcome};

/// rewind: every change to your project, recorded before it lands; history, diffs and rollback.
#[derive(Debug, Parser)]
#[command(name = "rewind", version, about, long_about = None)]
pub struct Cli {
    /// Run as if started in DIR (in .rewind/ctl: a folder of the workspace).
    // Its own id: `mount DIR` and `unmount DIR` have a positional named `dir`, and a global
    // of the same id would take its value.
    #[arg(short = 'C', global = true, value_name = "DIR", id = "chdir")]
    pub dir: Option<PathBuf>,
    /// Colour the output, and the width to fit it to: passed on by the CLI when a reading
    /// command runs in the daemon (its output goes to the CLI's terminal).
    #[arg(long, global = true, hide = true)]
    pub color_output: bool,
    #[arg(long, global = true, hide = true, value_name = "COLUMNS")]
    pub output_width: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Mount(MountArgs),
    Unmount(UnmountArgs),
    Run(RunArgs),
    Log(log::LogArgs),
    Show(show::ShowArgs),
    Diff(diff::DiffArgs),
    Cat(cat::CatArgs),
    Turns(turns::TurnsArgs),
    Export(ExportArgs),
    Agent(AgentArgs),
    Hook(HookArgs),
    Mcp(McpArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
    Undo(rollback::UndoArgs),
    Rollback(rollback::RollbackArgs),
    Checkpoint(checkpoint::CheckpointArgs),
    Comment(comment::CommentArgs),
    Sessions(sessions::SessionsArgs),
    Status(StatusArgs),
    Gc(gc::GcArgs),
    Watch(WatchArgs),
    Ui(UiArgs),
    /// Attribute a process and its children to a session (the writer of .rewind/ctl, or the
    /// shell a `rewind session` runs in).
    #[command(subcommand)]
    Session(plumbing::SessionCommand),
    /// Record now what is held back (new files wait half a second to see whether they are
    /// temporaries; deletes are written in batches).
    Sync {
        /// Only wait until what has happened is recorded, as a reading command does first:
        /// held-back new files are recorded when their time is up, not now.
        #[arg(long, hide = true)]
        for_reading: bool,
    },
    /// Agent turns, as an agent's hooks report them (`rewind hook` writes these).
    #[command(subcommand, hide = true)]
    Turn(plumbing::TurnCommand),
    /// Agent tool calls, as an agent's hooks report them (`rewind hook` writes these).
    #[command(subcommand, hide = true)]
    Tool(plumbing::ToolCommand),
    /// Which session, agent and turn this process's changes are recorded under now: found
    /// from its process tree, as for the changes it makes (an agent's MCP server or shell
    /// tool asks on the agent's behalf).
    Whoami {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// Whether it is one of the commands an agent's hook sends (`session`, `turn`, `tool`):
    /// the daemon runs them at once, never queued behind other ctl commands.
    pub fn is_hook(&self) -> bool {
        matches!(
            self,
            Command::Session(_) | Command::Turn(_) | Command::Tool(_)
        )
    }

    /// Whether running this command would change the workspace or the history (and so must
    /// never run from a line that asked for a dry run).
    pub fn changes_something(&self) -> bool {
        match self {
            Command::Rollback(a) => !a.dry_run,
            Command::Undo(a) => !a.dry_run,
            Command::Checkpoint(a) => !a.dry_run,
            Command::Gc(a) => !a.dry_run,
            Command::Comment(a) => !matches!(a.action, comment::CommentAction::List(_)),
            Command::Session(_) | Command::Turn(_) | Command::Tool(_) => true,
            Command::Export(_) | Command::Agent(_) | Command::Mount(_) | Command::Unmount(_) => {
                true
            }
            Command::Run(_) | Command::Hook(_) | Command::Mcp(_) | Command::Ui(_) => true,
            _ => false,
        }
    }

    /// The verb's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Mount(_) => "mount",
            Command::Unmount(_) => "unmount",
            Command::Run(_) => "run",
            Command::Log(_) => "log",
            Command::Show(_) => "show",
            Command::Diff(_) => "diff",
            Command::Cat(_) => "cat",
            Command::Turns(_) => "turns",
            Command::Export(_) => "export",
            Command::Agent(_) => "agent",
            Command::Hook(_) => "hook",
            Command::Mcp(_) => "mcp",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
            Command::Undo(_) => "undo",
            Command::Rollback(_) => "rollback",
            Command::Checkpoint(_) => "checkpoint",
            Command::Comment(_) => "comment",
            Command::Sessions(_) => "sessions",
            Command::Status(_) => "status",
            Command::Gc(_) => "gc",
            Command::Watch(_) => "watch",
            Command::Ui(_) => "ui",
            Command::Session(_) => "session",
            Command::Sync { .. } => "sync",
            Command::Turn(_) => "turn",
            Command::Tool(_) => "tool",
            Command::Whoami { .. } => "whoami",
        }
    }
}

/// A verb that reads or changes history: it runs wherever the history is ([`run`]).
#[derive(Clone, Copy, Debug)]
pub enum HistoryVerb<'a> {
    Log(&'a log::LogArgs),
    Show(&'a show::ShowArgs),
    Diff(&'a diff::DiffArgs),
    Cat(&'a cat::CatArgs),
    Turns(&'a turns::TurnsArgs),
    Sessions(&'a sessions::SessionsArgs),
    Checkpoint(&'a checkpoint::CheckpointArgs),
    Comment(&'a comment::CommentArgs),
    Gc(&'a gc::GcArgs),
    Rollback(&'a rollback::RollbackArgs),
    Undo(&'a rollback::UndoArgs),
    /// Sessions, turns, tool calls, sync, whoami: the daemon's own answer ([`Actor::plumbing`]).
    Plumbing(&'a Command),
}

/// Where a verb runs: on history (anywhere), or only in a shell (its `run` is in `cli/`).
#[derive(Clone, Copy, Debug)]
pub enum Verb<'a> {
    History(HistoryVerb<'a>),
    Shell(ShellVerb<'a>),
}

#[derive(Clone, Copy, Debug)]
pub enum ShellVerb<'a> {
    Mount(&'a MountArgs),
    Unmount(&'a UnmountArgs),
    Run(&'a RunArgs),
    Status(&'a StatusArgs),
    Watch(&'a WatchArgs),
    Export(&'a ExportArgs),
    Agent(&'a AgentArgs),
    Hook(&'a HookArgs),
    Mcp(&'a McpArgs),
    Completions(&'a CompletionsArgs),
    Man(&'a ManArgs),
    Ui(&'a UiArgs),
}

impl Command {
    /// Which kind of verb this is. No wildcard: a new verb must say where it runs, and then
    /// the CLI and `.rewind/ctl` cannot disagree about it.
    pub fn verb(&self) -> Verb<'_> {
        let history = |v| Verb::History(v);
        let shell = |v| Verb::Shell(v);
        match self {
            Command::Log(a) => history(HistoryVerb::Log(a)),
            Command::Show(a) => history(HistoryVerb::Show(a)),
            Command::Diff(a) => history(HistoryVerb::Diff(a)),
            Command::Cat(a) => history(HistoryVerb::Cat(a)),
            Command::Turns(a) => history(HistoryVerb::Turns(a)),
            Command::Sessions(a) => history(HistoryVerb::Sessions(a)),
            Command::Checkpoint(a) => history(HistoryVerb::Checkpoint(a)),
            Command::Comment(a) => history(HistoryVerb::Comment(a)),
            Command::Gc(a) => history(HistoryVerb::Gc(a)),
            Command::Rollback(a) => history(HistoryVerb::Rollback(a)),
            Command::Undo(a) => history(HistoryVerb::Undo(a)),
            Command::Session(_)
            | Command::Turn(_)
            | Command::Tool(_)
            | Command::Sync { .. }
            | Command::Whoami { .. } => history(HistoryVerb::Plumbing(self)),
            Command::Mount(a) => shell(ShellVerb::Mount(a)),
            Command::Unmount(a) => shell(ShellVerb::Unmount(a)),
            Command::Run(a) => shell(ShellVerb::Run(a)),
            Command::Status(a) => shell(ShellVerb::Status(a)),
            Command::Watch(a) => shell(ShellVerb::Watch(a)),
            Command::Export(a) => shell(ShellVerb::Export(a)),
            Command::Agent(a) => shell(ShellVerb::Agent(a)),
            Command::Hook(a) => shell(ShellVerb::Hook(a)),
            Command::Mcp(a) => shell(ShellVerb::Mcp(a)),
            Command::Completions(a) => shell(ShellVerb::Completions(a)),
            Command::Man(a) => shell(ShellVerb::Man(a)),
            Command::Ui(a) => shell(ShellVerb::Ui(a)),
        }
    }
}

/// Run a verb that reads or changes history, wherever `env` says the history is.
pub fn run(verb: HistoryVerb<'_>, env: &mut Env<'_>) -> crate::history::Result<Outcome> {
    match verb {
        HistoryVerb::Log(a) => log::run(a, env),
        HistoryVerb::Show(a) => show::run(a, env),
        HistoryVerb::Diff(a) => diff::run(a, env),
        HistoryVerb::Cat(a) => cat::run(a, env),
        HistoryVerb::Turns(a) => turns::run(a, env),
        HistoryVerb::Sessions(a) => sessions::run(a, env),
        HistoryVerb::Checkpoint(a) => checkpoint::run(a, env),
        HistoryVerb::Comment(a) => comment::run(a, env),
        HistoryVerb::Gc(a) => gc::run(a, env),
        HistoryVerb::Rollback(a) => rollback::run(a, env),
        HistoryVerb::Undo(a) => rollback::undo(a, env),
        HistoryVerb::Plumbing(command) => {
            let caller = env.caller;
            env.actor(command.name())
                .and_then(|actor| actor.plumbing(command, caller))
                .and_then(|text| env.print(&text))
                .map(|()| Outcome::Done)
        }
    }
}

/// Why a `.rewind/ctl` line is not a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("unbalanced quotes in the command")]
    Unbalanced,
    #[error("an empty command; see .rewind/README")]
    Empty,
    /// What the grammar says is wrong (clap's message, without its `error: `).
    #[error("{0}")]
    Grammar(String),
    #[error("`{0}` with --dry-run would still change something here; refused")]
    DryRunWouldAct(&'static str),
}

/// A `.rewind/ctl` line: the words after `rewind`, split as a shell would (quotes work).
pub fn parse_line(line: &str) -> Result<Cli, LineError> {
    let words = shlex::split(line).ok_or(LineError::Unbalanced)?;
    if words.is_empty() {
        return Err(LineError::Empty);
    }
    let asks_dry_run = asks_for_dry_run(&words);
    let parsed =
        Cli::try_parse_from(std::iter::once("rewind".to_string()).chain(words)).map_err(|e| {
            // clap begins its message with `error: `; whoever shows it adds its own.
            let text = e.render().to_string();
            let text = text.trim_end();
            LineError::Grammar(text.strip_prefix("error: ").unwrap_or(text).to_string())
        })?;
    // Whatever the parser made of it, a line with the word --dry-run never changes anything
    // (a verb without the flag might have taken it as a value). Turn, tool and comment lines
    // have no dry-run mode and carry free text: a prompt or a comment that is --dry-run is a
    // value there, and must still be taken.
    if asks_dry_run
        && parsed.command.changes_something()
        && !matches!(
            parsed.command,
            Command::Turn(_) | Command::Tool(_) | Command::Comment(_)
        )
    {
        return Err(LineError::DryRunWouldAct(parsed.command.name()));
    }
    Ok(parsed)
}

/// Whether the words (split as a shell would) include the flag `--dry-run` before any `--`:
/// a quoted argument that merely mentions it is not asking for one.
fn asks_for_dry_run(words: &[String]) -> bool {
    words
        .iter()
        .take_while(|w| *w != "--")
        .any(|w| w == "--dry-run" || w.starts_with("--dry-run="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_means_the_same_wherever_it_stands() {
        for line in [
            "rollback --session fix-1 --dry-run --force",
            "rollback --dry-run --session fix-1",
            "rollback --force --dry-run --session fix-1",
        ] {
            let cli = parse_line(line).unwrap();
            let Command::Rollback(a) = cli.command else {
                panic!("{line}")
            };
            assert!(a.dry_run, "{line}");
        }
        let cli = parse_line("undo --dry-run 12").unwrap();
        assert!(matches!(cli.command, Command::Undo(ref a) if a.dry_run && a.id == 12));
    }

    #[test]
    fn dry_run_anywhere_never_changes_anything() {
        for line in [
            "checkpoint x --dry-run",
            "rollback --session \"--dry-run\"",
            "session start --dry-run",
            "gc --keep 1d --dry-run",
            "rollback --since 3 -- --dry-run",
        ] {
            if let Ok(cli) = parse_line(line) {
                assert!(!cli.command.changes_something(), "{line} would act");
            }
        }
    }

    #[test]
    fn a_dry_run_mentioned_in_a_value_is_not_asked_for() {
        for line in [
            "rollback --file \"notes on --dry-run.txt\"",
            "rollback --file=--dry-run",
            "rollback --session 'fix --dry-run'",
        ] {
            let cli = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(cli.command.changes_something(), "{line}");
        }
        // The flag itself, where the verb has none: refused by the grammar.
        assert!(matches!(
            parse_line("session start x --dry-run"),
            Err(LineError::Grammar(_))
        ));
        assert!(matches!(parse_line("\"x"), Err(LineError::Unbalanced)));
        assert!(matches!(parse_line("  "), Err(LineError::Empty)));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_dry_runs_never_act() {
        let words = [
            "rollback",
            "undo",
            "checkpoint",
            "gc",
            "--dry-run",
            "--force",
            "--session",
            "--to",
            "--since",
            "--file",
            "--turn",
            "x",
            "1",
            "\"",
            "'",
            "--",
            "-C",
            "..",
            "log",
            "session",
            "start",
            "--keep",
            "1d",
            "diff",
        ];
        let mut seed = 0x2545F4914F6CDD1Du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 6) as usize;
            let mut line = String::new();
            for i in 0..n {
                let w = words[((seed >> (i * 5)) % words.len() as u64) as usize];
                line.push_str(w);
                line.push(if (seed >> i) & 1 == 0 { ' ' } else { '\t' });
            }
            if let Ok(cli) = parse_line(&line)
                && asks_for_dry_run(&shlex::split(&line).unwrap_or_default())
            {
                assert!(!cli.command.changes_something(), "{line:?} would act");
            }
        }
    }
}
