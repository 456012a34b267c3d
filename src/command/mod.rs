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

/// Run a verb that reads or changes history, wherever `env` says the history is. `None` for
/// verbs that only run in a shell.
pub fn run(command: &Command, env: &mut Env<'_>) -> Option<crate::history::Result<Outcome>> {
    Some(match command {
        Command::Log(a) => log::run(a, env),
        Command::Show(a) => show::run(a, env),
        Command::Diff(a) => diff::run(a, env),
        Command::Cat(a) => cat::run(a, env),
        Command::Turns(a) => turns::run(a, env),
        Command::Sessions(a) => sessions::run(a, env),
        Command::Checkpoint(a) => checkpoint::run(a, env),
        Command::Comment(a) => comment::run(a, env),
        Command::Gc(a) => gc::run(a, env),
        Command::Rollback(a) => rollback::run(a, env),
        Command::Undo(a) => rollback::undo(a, env),
        Command::Session(_)
        | Command::Turn(_)
        | Command::Tool(_)
        | Command::Sync { .. }
        | Command::Whoami { .. } => {
            let caller = env.caller;
            env.actor(command.name())
                .and_then(|actor| actor.plumbing(command, caller))
                .and_then(|text| env.print(&text))
                .map(|()| Outcome::Done)
        }
        _ => return None,
    })
}

/// A `.rewind/ctl` line: the words after `rewind`, split as a shell would (quotes work).
pub fn parse_line(line: &str) -> Result<Cli, String> {
    let words = shlex::split(line).ok_or("unbalanced quotes in the command")?;
    if words.is_empty() {
        return Err("an empty command; see .rewind/README".into());
    }
    let parsed =
        Cli::try_parse_from(std::iter::once("rewind".to_string()).chain(words)).map_err(|e| {
            // clap begins its message with `error: `; whoever shows it adds its own.
            let text = e.render().to_string();
            let text = text.trim_end();
            text.strip_prefix("error: ").unwrap_or(text).to_string()
        })?;
    // Whatever the parser made of it, a line that says --dry-run never changes anything. Turn,
    // tool and comment lines have no dry-run mode and carry free text: a prompt or a comment
    // that mentions --dry-run is a value there, and must still be taken.
    if line.contains("--dry-run")
        && parsed.command.changes_something()
        && !matches!(
            parsed.command,
            Command::Turn(_) | Command::Tool(_) | Command::Comment(_)
        )
    {
        return Err(format!(
            "`{}` with --dry-run would still change something here; refused",
            parsed.command.name()
        ));
    }
    Ok(parsed)
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
            "rollback --file=--dry-run",
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
                && line.contains("--dry-run")
            {
                assert!(!cli.command.changes_something(), "{line:?} would act");
            }
        }
    }
}
