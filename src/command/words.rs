//! A command back into the words that parse to it, for a command built in code that travels
//! as words: the MCP server's tools (run as `rewind WORDS...` in a process of its own) and the
//! review page's (a `.rewind/ctl` line): the command is typed once, as the structs clap fills,
//! and the words are only how it travels.
//!
//! Every option's value is written `--flag=VALUE` and every positional after `--`, so a value
//! that starts with `-` is never taken for a flag. Each arguments struct is taken apart field
//! by field, so a field added to one without a word here does not compile.

use std::ffi::OsString;
use std::path::Path;

use super::Command;
use super::cat::CatArgs;
use super::checkpoint::CheckpointArgs;
use super::comment::{CommentAction, CommentAddArgs, CommentListArgs};
use super::diff::DiffArgs;
use super::log::LogArgs;
use super::rollback::{RollbackArgs, UndoArgs};
use super::select::SelectArgs;
use super::sessions::SessionsArgs;
use super::show::ShowArgs;
use super::turns::TurnsArgs;

/// A command that has no words here: only the verbs the MCP server and the review page run
/// have them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`rewind {0}` cannot be run from words built in code")]
pub struct NoWords(pub &'static str);

/// Why a command cannot travel as one line of text (a `.rewind/ctl` line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoLine {
    #[error(transparent)]
    NoWords(#[from] NoWords),
    #[error("a command line is text: {} is not UTF-8", .0.to_string_lossy())]
    NotText(OsString),
    #[error(transparent)]
    Quote(#[from] shlex::QuoteError),
}

/// The words of one command line, without the leading `rewind`.
#[derive(Default)]
struct Words {
    options: Vec<OsString>,
    positionals: Vec<OsString>,
}

impl Words {
    fn new(verb: &str) -> Words {
        Words {
            options: vec![verb.into()],
            positionals: Vec::new(),
        }
    }

    fn value(&mut self, flag: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.options.push(format!("--{flag}={v}").into());
        }
    }

    fn path(&mut self, flag: &str, value: Option<&Path>) {
        if let Some(p) = value {
            let mut word = OsString::from(format!("--{flag}="));
            word.push(p.as_os_str());
            self.options.push(word);
        }
    }

    fn number(&mut self, flag: &str, value: Option<impl ToString>) {
        self.value(flag, value.map(|v| v.to_string()).as_deref());
    }

    fn flag(&mut self, flag: &str, on: bool) {
        if on {
            self.options.push(format!("--{flag}").into());
        }
    }

    fn select(&mut self, select: &SelectArgs) {
        let SelectArgs {
            session,
            agent,
            turn,
            since,
        } = select;
        self.value("session", session.as_deref());
        self.value("agent", agent.as_deref());
        self.value("turn", turn.as_deref());
        self.value("since", since.as_deref());
    }

    fn positional(&mut self, word: impl Into<OsString>) {
        self.positionals.push(word.into());
    }

    fn done(mut self) -> Vec<OsString> {
        if !self.positionals.is_empty() {
            self.options.push("--".into());
            self.options.append(&mut self.positionals);
        }
        self.options
    }
}

impl Command {
    /// The line of text `.rewind/ctl` parses back into this command: its [`words`], each
    /// quoted as a POSIX shell would read it. An option's value is quoted apart from its name
    /// (`--turn=s1:1`, `--session='my work'`), so that the line a user is shown reads as one
    /// they would type.
    ///
    /// [`words`]: Command::words
    pub fn line(&self) -> Result<String, NoLine> {
        let words = self.words()?;
        let mut quoted = Vec::with_capacity(words.len());
        for w in &words {
            let text = w.to_str().ok_or_else(|| NoLine::NotText(w.clone()))?;
            let option = text
                .strip_prefix("--")
                .and_then(|rest| rest.split_once('='))
                .filter(|(name, _)| {
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            quoted.push(match option {
                Some((name, value)) => format!("--{name}={}", shlex::try_quote(value)?),
                None => shlex::try_quote(text)?.into_owned(),
            });
        }
        Ok(quoted.join(" "))
    }

    /// The words `rewind` parses back into this command (without `rewind` itself).
    pub fn words(&self) -> Result<Vec<OsString>, NoWords> {
        let words = match self {
            Command::Log(a) => log(a),
            Command::Show(ShowArgs { id, json }) => {
                let mut w = Words::new("show");
                w.flag("json", *json);
                w.positional(id.to_string());
                w
            }
            Command::Diff(a) => diff(a)?,
            Command::Cat(CatArgs { path, at }) => {
                let mut w = Words::new("cat");
                w.value("at", at.as_deref());
                w.positional(path);
                w
            }
            Command::Turns(TurnsArgs {
                session,
                json,
                show,
            }) => {
                let mut w = Words::new("turns");
                w.value("session", session.as_deref());
                w.flag("json", *json);
                w.value("show", show.as_deref());
                w
            }
            Command::Checkpoint(CheckpointArgs {
                name,
                force,
                dry_run,
            }) => {
                let mut w = Words::new("checkpoint");
                w.flag("force", *force);
                w.flag("dry-run", *dry_run);
                w.positional(name.as_str());
                w
            }
            Command::Rollback(a) => rollback(a),
            Command::Undo(UndoArgs { id, dry_run, force }) => {
                let mut w = Words::new("undo");
                w.flag("dry-run", *dry_run);
                w.flag("force", *force);
                w.positional(id.to_string());
                w
            }
            Command::Comment(a) => match &a.action {
                CommentAction::List(CommentListArgs {
                    session,
                    all,
                    json,
                    mine,
                }) => {
                    let mut w = Words::new("comment");
                    w.options.push("list".into());
                    w.value("session", session.as_deref());
                    w.flag("all", *all);
                    w.flag("json", *json);
                    w.flag("mine", *mine);
                    w
                }
                CommentAction::Add(CommentAddArgs {
                    change,
                    turn,
                    session,
                    path,
                    line,
                    hunk,
                    text,
                }) => {
                    let mut w = Words::new("comment");
                    w.options.push("add".into());
                    w.number("change", *change);
                    w.value("turn", turn.as_deref());
                    w.value("session", session.as_deref());
                    w.path("path", path.as_deref());
                    w.number("line", *line);
                    w.number("hunk", *hunk);
                    for t in text {
                        w.positional(t);
                    }
                    w
                }
                CommentAction::Resolve(_) => return Err(NoWords("comment")),
            },
            Command::Sessions(SessionsArgs { json }) => {
                let mut w = Words::new("sessions");
                w.flag("json", *json);
                w
            }
            Command::Whoami { json } => {
                let mut w = Words::new("whoami");
                w.flag("json", *json);
                w
            }
            other => return Err(NoWords(other.name())),
        };
        Ok(words.done())
    }
}

fn log(a: &LogArgs) -> Words {
    let LogArgs {
        path,
        select,
        until,
        limit,
        json,
    } = a;
    let mut w = Words::new("log");
    w.select(select);
    w.value("until", until.as_deref());
    if let Some(n) = limit {
        w.options.push(format!("-n{n}").into());
    }
    w.flag("json", *json);
    if let Some(p) = path {
        w.positional(p);
    }
    w
}

fn diff(a: &DiffArgs) -> Result<Words, NoWords> {
    let DiffArgs {
        words,
        select,
        from,
        to,
        stat,
        paths,
    } = a;
    // Positional words before `--` could be read as flags, and after it they would be taken
    // for paths: only a change id may stand there.
    if words
        .iter()
        .any(|w| w.to_str().and_then(|w| w.parse::<u64>().ok()).is_none())
    {
        return Err(NoWords("diff"));
    }
    let mut w = Words::new("diff");
    w.select(select);
    w.value("from", from.as_deref());
    w.value("to", to.as_deref());
    w.flag("stat", *stat);
    w.options.extend(words.iter().map(|id| id.into()));
    for p in paths {
        w.positional(p);
    }
    Ok(w)
}

fn rollback(a: &RollbackArgs) -> Words {
    let RollbackArgs {
        select,
        to_turn,
        to,
        file,
        change,
        hunk,
        path,
        dry_run,
        force,
        verbose,
    } = a;
    let mut w = Words::new("rollback");
    w.select(select);
    w.value("to-turn", to_turn.as_deref());
    w.value("to", to.as_deref());
    w.path("file", file.as_deref());
    w.number("change", *change);
    w.number("hunk", *hunk);
    w.path("path", path.as_deref());
    w.flag("dry-run", *dry_run);
    w.flag("force", *force);
    w.flag("verbose", *verbose);
    w
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::command::Cli;
    use crate::history::Name;

    /// The words parse back into the very command they came from.
    fn round_trip(command: Command) {
        let words = command.words().unwrap();
        let cli = Cli::try_parse_from(std::iter::once(OsString::from("rewind")).chain(words))
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        assert_eq!(format!("{:?}", cli.command), format!("{command:?}"));
        // And as one `.rewind/ctl` line.
        let line = command.line().unwrap();
        let options = line.split(" -- ").next().unwrap();
        assert!(
            !options.contains("'--"),
            "an option's name is not quoted: {line}"
        );
        let cli = crate::command::parse_line(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(format!("{:?}", cli.command), format!("{command:?}"));
    }

    fn select(session: &str) -> SelectArgs {
        SelectArgs {
            session: Some(session.into()),
            agent: Some("-agent with spaces".into()),
            turn: Some("s:1".into()),
            since: Some("a=b".into()),
        }
    }

    #[test]
    fn every_verb_the_mcp_server_and_the_page_run_round_trips() {
        round_trip(Command::Log(LogArgs {
            path: Some(PathBuf::from("-odd/name with space")),
            select: select("--dry-run"),
            until: Some("10m".into()),
            limit: Some(20),
            json: true,
        }));
        round_trip(Command::Log(LogArgs {
            path: None,
            select: SelectArgs::default(),
            until: None,
            limit: None,
            json: false,
        }));
        round_trip(Command::Show(ShowArgs { id: 7, json: true }));
        round_trip(Command::Diff(DiffArgs {
            words: vec![PathBuf::from("12")],
            select: SelectArgs::default(),
            from: None,
            to: None,
            stat: true,
            paths: vec![PathBuf::from("--"), PathBuf::from("-x")],
        }));
        round_trip(Command::Diff(DiffArgs {
            words: Vec::new(),
            select: SelectArgs::default(),
            from: Some("-1".into()),
            to: Some("now".into()),
            stat: false,
            paths: Vec::new(),
        }));
        round_trip(Command::Cat(CatArgs {
            path: PathBuf::from("-rf"),
            at: Some("3".into()),
        }));
        round_trip(Command::Turns(TurnsArgs {
            session: Some("s".into()),
            json: true,
            show: Some("s:2".into()),
        }));
        round_trip(Command::Checkpoint(CheckpointArgs {
            name: Name::parse("checkpoint", "before lunch").unwrap(),
            force: true,
            dry_run: false,
        }));
        round_trip(Command::Rollback(RollbackArgs {
            select: SelectArgs::default(),
            to_turn: None,
            to: Some("3".into()),
            file: Some(PathBuf::from("--force")),
            change: None,
            hunk: None,
            path: None,
            dry_run: true,
            force: false,
            verbose: false,
        }));
        round_trip(Command::Rollback(RollbackArgs {
            select: SelectArgs::default(),
            to_turn: None,
            to: None,
            file: None,
            change: Some(7),
            hunk: Some(2),
            path: Some(PathBuf::from("-odd name")),
            dry_run: false,
            force: true,
            verbose: true,
        }));
        round_trip(Command::Undo(UndoArgs {
            id: 9,
            dry_run: true,
            force: true,
        }));
        round_trip(Command::Comment(crate::command::comment::CommentArgs {
            action: CommentAction::List(CommentListArgs {
                session: None,
                all: true,
                json: false,
                mine: true,
            }),
        }));
        round_trip(Command::Comment(crate::command::comment::CommentArgs {
            action: CommentAction::Add(CommentAddArgs {
                change: None,
                turn: Some("s1:2".into()),
                session: None,
                path: Some(PathBuf::from("-src/a b.rs")),
                line: None,
                hunk: Some(3),
                text: vec!["--force; keep it".into(), "-- lower".into()],
            }),
        }));
        round_trip(Command::Sessions(SessionsArgs { json: true }));
        round_trip(Command::Whoami { json: true });
    }

    #[test]
    fn words_that_would_read_as_something_else_are_refused() {
        let diff = Command::Diff(DiffArgs {
            words: vec![PathBuf::from("--session=x")],
            select: SelectArgs::default(),
            from: None,
            to: None,
            stat: false,
            paths: Vec::new(),
        });
        assert_eq!(diff.words(), Err(NoWords("diff")));
        assert_eq!(
            Command::Sync { for_reading: false }.words(),
            Err(NoWords("sync"))
        );
        use std::os::unix::ffi::OsStrExt;
        let not_text = Command::Cat(CatArgs {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(b"a\xff")),
            at: None,
        });
        assert!(not_text.words().is_ok());
        assert!(matches!(not_text.line(), Err(NoLine::NotText(_))));
    }
}
