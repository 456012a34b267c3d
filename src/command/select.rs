//! The selection flags `log`, `diff`, `rollback` and `export` share (flattened into each), read
//! into a [`Selection`]; what they mean is decided in `history::selection`, for every caller.
//!
//! A caller that holds a [`Selection`] (the review page) goes the other way: each verb's
//! `XxxArgs::of` makes the arguments that read back into that selection (`LogArgs::of`,
//! `DiffArgs::of`, `RollbackArgs::of`), or says which part of it the verb has no flag for.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use clap::Args;

use crate::history::Selection;

/// A part of a selection that a verb's flags cannot say (a log of one change, a diff from a
/// turn on): the selection is refused rather than run as something else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`rewind {verb}` has no way to select {what}")]
pub struct Unsayable {
    pub verb: &'static str,
    pub what: &'static str,
}

/// The parts of a [`Selection`] that are not [`SelectArgs`]: each verb's own.
pub struct Rest {
    pub change: Option<u64>,
    pub to_turn: Option<String>,
    pub path: Option<Vec<u8>>,
    pub from: Option<String>,
    pub until: Option<String>,
}

/// Refuse `verb` when `given`, a part of the selection it has no flag for, is set.
pub(crate) fn unsayable<T>(
    verb: &'static str,
    what: &'static str,
    given: &Option<T>,
) -> Result<(), Unsayable> {
    match given {
        Some(_) => Err(Unsayable { verb, what }),
        None => Ok(()),
    }
}

/// A workspace-relative path of a selection as the path argument that names it.
pub(crate) fn path_arg(path: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(path))
}

/// Which changes.
#[derive(Clone, Debug, Default, Args)]
pub struct SelectArgs {
    /// The changes of this session (its name, or a unique beginning of it).
    #[arg(long)]
    pub session: Option<String>,
    /// The changes by this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// The changes of one agent turn (prompt), shell commands included: SESSION:N, N, or the
    /// agent's prompt id.
    #[arg(long, value_name = "TURN")]
    pub turn: Option<String>,
    /// The changes after this point (a change id, checkpoint, time, or duration ago).
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
}

impl SelectArgs {
    /// The shared flags of `sel`, and the rest of it, which each verb places in flags of
    /// its own or refuses (see the module's doc). Taken apart field by field: a field added
    /// to `Selection` goes to one side here, and then to every verb, or does not compile.
    pub fn of(sel: &Selection) -> (SelectArgs, Rest) {
        let Selection {
            change,
            session,
            agent,
            turn,
            to_turn,
            path,
            since,
            from,
            until,
        } = sel.clone();
        (
            SelectArgs {
                session,
                agent,
                turn,
                since,
            },
            Rest {
                change,
                to_turn,
                path,
                from,
                until,
            },
        )
    }

    pub fn selection(&self) -> Selection {
        Selection {
            session: self.session.clone(),
            agent: self.agent.clone(),
            turn: self.turn.clone(),
            since: self.since.clone(),
            ..Selection::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use clap::Parser;

    use super::*;
    use crate::command::diff::DiffArgs;
    use crate::command::env::rel_path;
    use crate::command::log::LogArgs;
    use crate::command::rollback::RollbackArgs;
    use crate::command::{Cli, Command};

    /// `command` as words, parsed back by the CLI's grammar.
    fn parsed(command: Command) -> Command {
        let words = command.words().unwrap();
        let argv = std::iter::once(OsString::from("rewind")).chain(words);
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{command:?}: {e}"))
            .command
    }

    fn sel(f: impl FnOnce(&mut Selection)) -> Selection {
        let mut s = Selection::default();
        f(&mut s);
        s
    }

    /// What the review page asks for, made into each verb's arguments, travels as words and
    /// reads back into the very selection it came from: the page, the CLI and MCP cannot
    /// disagree on what a selection means.
    #[test]
    fn a_selection_made_into_arguments_reads_back_the_same() {
        let rel = |p: &Path| rel_path(Path::new("/w"), Path::new("/w"), p);
        let path = |p: &str| Some(p.as_bytes().to_vec());
        let logs = [
            Selection::default(),
            sel(|s| s.turn = Some("s1:2".into())),
            sel(|s| {
                s.session = Some("-fix login".into());
                s.agent = Some("claude".into());
                s.since = Some("before-refactor".into());
                s.until = Some("9".into());
                s.path = path("src/a b.rs");
            }),
            sel(|s| s.path = path("-rf")),
        ];
        for s in &logs {
            let Command::Log(a) = parsed(Command::Log(LogArgs::of(s).unwrap())) else {
                panic!()
            };
            assert_eq!(&a.selection(rel).unwrap(), s);
        }
        let diffs = [
            (
                sel(|s| s.change = Some(7)),
                vec![b"--".to_vec(), b"12".to_vec()],
            ),
            (sel(|s| s.turn = Some("s1:2".into())), Vec::new()),
            (
                sel(|s| s.agent = Some("codex".into())),
                vec![b"src".to_vec()],
            ),
            (sel(|s| s.since = Some("10m".into())), Vec::new()),
            (
                sel(|s| {
                    s.from = Some("3".into());
                    s.until = Some("9".into());
                }),
                vec![b"a".to_vec()],
            ),
        ];
        for (s, filter) in &diffs {
            let diff = DiffArgs::of(s, filter).unwrap();
            let Command::Diff(a) = parsed(Command::Diff(diff)) else {
                panic!()
            };
            assert_eq!(&a.selection(rel).unwrap(), &(s.clone(), filter.clone()));
        }
        let rollbacks = [
            sel(|s| s.change = Some(7)),
            sel(|s| s.turn = Some("s1:2".into())),
            sel(|s| s.to_turn = Some("s1:2".into())),
            sel(|s| s.session = Some("rollback-3".into())),
            sel(|s| s.since = Some("before-refactor".into())),
            sel(|s| {
                s.path = path("src/a b.rs");
                s.from = Some("before-refactor".into());
            }),
        ];
        for s in &rollbacks {
            let rollback = RollbackArgs {
                dry_run: true,
                ..RollbackArgs::of(s).unwrap()
            };
            let Command::Rollback(a) = parsed(Command::Rollback(rollback)) else {
                panic!()
            };
            assert!(a.dry_run);
            assert_eq!(&a.selection(rel).unwrap(), s);
        }
    }

    /// A part a verb has no flag for is refused, never dropped or run as something else.
    #[test]
    fn a_selection_a_verb_cannot_say_is_refused() {
        let unsayable = |verb| move |e: Unsayable| assert_eq!(e.verb, verb);
        LogArgs::of(&sel(|s| s.change = Some(7)))
            .map(|_| panic!())
            .unwrap_or_else(unsayable("log"));
        LogArgs::of(&sel(|s| s.to_turn = Some("1".into())))
            .map(|_| panic!())
            .unwrap_or_else(unsayable("log"));
        // With a flag beside it, `diff 7` would read 7 as a path.
        DiffArgs::of(
            &sel(|s| {
                s.change = Some(7);
                s.session = Some("s".into());
            }),
            &[],
        )
        .map(|_| panic!())
        .unwrap_or_else(unsayable("diff"));
        DiffArgs::of(&sel(|s| s.until = Some("9".into())), &[])
            .map(|_| panic!())
            .unwrap_or_else(unsayable("diff"));
        DiffArgs::of(&sel(|s| s.path = Some(b"a".to_vec())), &[])
            .map(|_| panic!())
            .unwrap_or_else(unsayable("diff"));
        RollbackArgs::of(&sel(|s| s.until = Some("9".into())))
            .map(|_| panic!())
            .unwrap_or_else(unsayable("rollback"));
    }
}
