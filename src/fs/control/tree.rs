//! The control directory as a small typed tree, resolved here and nowhere else:
//!
//! ```text
//! .rewind/README  status  log  log.json  ctl  events
//! .rewind/at/POINT/...                the whole workspace at POINT, read-only
//! .rewind/versions/PATH/ID            every recorded version of PATH
//! .rewind/sessions/NAME/log           the changes of one session
//! .rewind/comments                    open review comments (`rewind comment list`)
//! .rewind/sessions/NAME/comments      the open comments for one session
//! .rewind/turns/SESSION/N/log, diff   one agent turn
//! ```

use clap::CommandFactory;

use super::Control;
use crate::command::Command;
use crate::command::comment::{CommentAction, CommentArgs, CommentListArgs};
use crate::command::diff::DiffArgs;
use crate::history::Source;
use crate::history::change::{FileKind, FileState};
use crate::history::format::{change_json, change_line};
use crate::history::view::join;
use crate::history::{Error, Order, Resolved, Result, Selection, point, time};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Dir,
    Readme,
    Status,
    /// How far the long commands running now have got.
    Progress,
    Log,
    LogJson,
    Ctl,
    Events,
    At,
    /// A path in the past tree right after change `at` (`path` empty: its root).
    AtPath {
        at: u64,
        path: Vec<u8>,
    },
    Versions,
    /// `.rewind/versions/PATH`: PATH's versions, and the versions of paths below it.
    VersionsOf(Vec<u8>),
    Version(Vec<u8>, u64),
    Sessions,
    Session(String),
    SessionLog(String),
    /// Open review comments: all of them, or one session's.
    Comments,
    SessionComments(String),
    Turns,
    TurnsOf(String),
    Turn(String, u32),
    TurnLog(String, u32),
    TurnDiff(String, u32),
    TurnConversation(String, u32),
}

/// What a node is to `stat`.
pub enum Kind {
    Dir,
    File {
        size: u64,
        writable: bool,
    },
    Symlink {
        size: u64,
    },
    /// A FIFO, socket or device as it was (one recorded before its type was kept shows as an
    /// empty file).
    Special(crate::history::change::Node),
}

impl Node {
    /// Only the mounting user and root may see these (they name every path in the workspace,
    /// or act on it).
    pub fn is_private(&self) -> bool {
        matches!(
            self,
            Node::Status
                | Node::Log
                | Node::LogJson
                | Node::Ctl
                | Node::Events
                | Node::Sessions
                | Node::Session(_)
                | Node::SessionLog(_)
                | Node::Comments
                | Node::SessionComments(_)
                | Node::Turns
                | Node::TurnsOf(_)
                | Node::Turn(..)
                | Node::TurnLog(..)
                | Node::TurnDiff(..)
                | Node::TurnConversation(..)
        )
    }

    /// The workspace path whose readers may read this node, for nodes of the past.
    pub fn workspace_path(&self) -> Option<&[u8]> {
        match self {
            Node::AtPath { path, .. } => Some(path),
            Node::VersionsOf(p) | Node::Version(p, _) => Some(p),
            _ => None,
        }
    }
}

/// The README's text: what is here, and the commands `ctl` takes (the CLI's own help).
pub fn readme() -> String {
    let mut help = crate::command::Cli::command()
        .override_usage("WORDS AFTER `rewind` (one command a line)")
        .render_help()
        .to_string();
    help = help.replace("Usage: rewind", "");
    format!(
        "\
This is rewind's control directory. Nothing here is part of your project.

  status              the mount, the store, counts, sessions
  progress            how far each rollback running now has got, a line each:
                        WRITER-THREAD PHASE DONE TOTAL (PHASE: checking, then restoring)
  log, log.json       the history, newest last (as `rewind log`, `rewind log --json`)
  at/POINT/...        the whole workspace at POINT (a change id, checkpoint, RFC 3339 time or
                      a duration ago like 15m), read-only: diff -r .rewind/at/NAME/src src
  versions/PATH/ID    every recorded version of PATH, named by change id
  sessions/NAME/log   the changes of one session
  comments            open review comments, one block each (`rewind comment list`);
                      one session's in sessions/NAME/comments
  turns/SESSION/N/    one agent turn (prompt): its log and its diff
  events              blocks; one JSON line per new change as it happens
  ctl                 write a command, read its output on the same open file:
                        exec 3<>.rewind/ctl; echo 'rollback --session fix-42 --dry-run' >&3; cat <&3
                      The words are the CLI's, after `rewind`; -C DIR and paths are read from
                      the workspace root. A bad command fails the write with EINVAL and the
                      reason is read back. A line with --dry-run in it never changes anything.
                      Also: session start NAME [--agent NAME], session end, sync.

The commands:
{help}"
    )
}

impl Control {
    /// Before a folder that names the history (a point, a path's versions, a session, a
    /// turn) is looked in: what has happened is recorded first (held-back creates aside, as
    /// for `.rewind/at/`), so that a point given as `now` or a time, or a version, session or
    /// turn made by an edit just closed, is resolved with it
    /// (`hostile20::the_views_of_the_past_right_after_a_closed_edit_show_it`).
    fn settle_for(&self, node: &Node) -> Result<()> {
        match node {
            Node::At
            | Node::Versions
            | Node::VersionsOf(_)
            | Node::Sessions
            | Node::Turns
            | Node::TurnsOf(_) => self.recorder.settle_for_views(),
            _ => Ok(()),
        }
    }

    /// The child `name` of `parent`, if there is one.
    pub(super) fn child(&self, parent: &Node, name: &[u8]) -> Result<Option<Node>> {
        self.settle_for(parent)?;
        let history = self.recorder.history();
        let s = String::from_utf8_lossy(name).into_owned();
        Ok(match parent {
            Node::Dir => match name {
                b"README" => Some(Node::Readme),
                b"status" => Some(Node::Status),
                b"progress" => Some(Node::Progress),
                b"log" => Some(Node::Log),
                b"log.json" => Some(Node::LogJson),
                b"ctl" => Some(Node::Ctl),
                b"events" => Some(Node::Events),
                b"at" => Some(Node::At),
                b"versions" => Some(Node::Versions),
                b"sessions" => Some(Node::Sessions),
                b"turns" => Some(Node::Turns),
                b"comments" => Some(Node::Comments),
                _ => None,
            },
            Node::At => match point::resolve(&s, history) {
                Ok(at) => Some(Node::AtPath {
                    at,
                    path: Vec::new(),
                }),
                Err(Error::Store(e)) => return Err(Error::Store(e)),
                Err(_) => None,
            },
            Node::AtPath { at, path } => {
                let child = join(path, name);
                self.recorder.settle_for_views()?;
                self.view()
                    .state_at(&child, *at)?
                    .state()
                    .map(|_| Node::AtPath {
                        at: *at,
                        path: child,
                    })
            }
            Node::Versions | Node::VersionsOf(_) => {
                let base = match parent {
                    Node::VersionsOf(p) => p.clone(),
                    _ => Vec::new(),
                };
                if let Node::VersionsOf(p) = parent
                    && let Ok(id) = s.parse::<u64>()
                    && let Some(c) = history.change(id)?
                    && c.touches(p)
                    && c.states_of(p).1.is_some_and(|a| a.kind == FileKind::File)
                {
                    return Ok(Some(Node::Version(p.clone(), id)));
                }
                let child = join(&base, name);
                // The path itself, or something below it, has history (not merely a longer
                // name that starts the same, like `main.rs.bak` for `main.rs`).
                let has_history = history
                    .paths_with_prefix(&child)?
                    .iter()
                    .any(|p| *p == child || p.get(child.len()) == Some(&b'/'));
                has_history.then_some(Node::VersionsOf(child))
            }
            // A session by its name or, as `--session` and `--turn` take it, a unique
            // beginning of it (listed under the whole name only).
            Node::Sessions => {
                let s = history.session_named(&s).unwrap_or(s);
                history.session(&s)?.map(|_| Node::Session(s))
            }
            Node::Session(n) if name == b"log" => Some(Node::SessionLog(n.clone())),
            Node::Session(n) if name == b"comments" => Some(Node::SessionComments(n.clone())),
            Node::Turns => {
                let s = history.session_named(&s).unwrap_or(s);
                (!history.turns(Some(&s))?.is_empty()).then_some(Node::TurnsOf(s))
            }
            Node::TurnsOf(session) => match s.parse::<u32>() {
                Ok(n) if history.turns(Some(session))?.iter().any(|t| t.number == n) => {
                    Some(Node::Turn(session.clone(), n))
                }
                _ => None,
            },
            Node::Turn(session, n) => match name {
                b"log" => Some(Node::TurnLog(session.clone(), *n)),
                b"diff" => Some(Node::TurnDiff(session.clone(), *n)),
                b"conversation" => Some(Node::TurnConversation(session.clone(), *n)),
                _ => None,
            },
            _ => None,
        })
    }

    pub(super) fn kind(&self, node: &Node) -> Result<Kind> {
        Ok(match node {
            Node::Dir
            | Node::At
            | Node::Versions
            | Node::VersionsOf(_)
            | Node::Sessions
            | Node::Session(_)
            | Node::Turns
            | Node::TurnsOf(_)
            | Node::Turn(..) => Kind::Dir,
            // As long as the longest line: the kernel lets writes run in parallel
            // (`RewindFs::open`) only within a file's size, so a command line fits in it.
            Node::Ctl => Kind::File {
                size: super::ctl::LINE_MAX as u64,
                writable: true,
            },
            Node::AtPath { at, path } => match self.view().state_at(path, *at)?.state() {
                Some(s) if s.kind == FileKind::Dir => Kind::Dir,
                Some(s) if s.kind == FileKind::Symlink => Kind::Symlink { size: s.size },
                Some(s)
                    if let FileKind::Special(node) = s.kind
                        && node.type_bits().is_some() =>
                {
                    Kind::Special(node)
                }
                Some(s) => Kind::File {
                    size: s.size,
                    writable: false,
                },
                None => return Err(Error::Gone),
            },
            Node::Version(p, id) => {
                let size = self
                    .recorder
                    .history()
                    .change(*id)?
                    .and_then(|c| c.states_of(p).1.map(|a| a.size))
                    .unwrap_or(0);
                Kind::File {
                    size,
                    writable: false,
                }
            }
            _ => Kind::File {
                size: 0,
                writable: false,
            },
        })
    }

    /// The time a node shows: a version's change, a past file's last change at that point,
    /// the mount's start for everything else.
    pub(super) fn node_time(&self, node: &Node) -> Option<u64> {
        let history = self.recorder.history();
        match node {
            Node::Version(_, id) => history.change(*id).ok().flatten().map(|c| c.time_ns),
            Node::AtPath { at, path } => match self.view().made_by(path, *at).ok().flatten() {
                Some(c) => Some(c.time_ns),
                None => self.source_mtime(path),
            },
            _ => None,
        }
    }

    fn source_mtime(&self, path: &[u8]) -> Option<u64> {
        let st = self.source.lstat(path).ok()?;
        Some((st.st_mtime as u64).saturating_mul(1_000_000_000) + st.st_mtime_nsec as u64)
    }

    /// The entries of a virtual folder: name and node.
    pub(super) fn list(&self, node: &Node) -> Result<Vec<(Vec<u8>, Node)>> {
        self.settle_for(node)?;
        let history = self.recorder.history();
        Ok(match node {
            Node::Dir => [
                ("README", Node::Readme),
                ("status", Node::Status),
                ("progress", Node::Progress),
                ("log", Node::Log),
                ("log.json", Node::LogJson),
                ("ctl", Node::Ctl),
                ("events", Node::Events),
                ("at", Node::At),
                ("versions", Node::Versions),
                ("sessions", Node::Sessions),
                ("turns", Node::Turns),
                ("comments", Node::Comments),
            ]
            .into_iter()
            .map(|(n, node)| (n.as_bytes().to_vec(), node))
            .collect(),
            // Any point can be looked up; the checkpoints are listed, but not those gc put out
            // of reach (their folder is not there: a listing names only what can be opened).
            Node::At => {
                let oldest = history.horizon()?.map_or(0, |h| h.id);
                history
                    .checkpoints()?
                    .into_iter()
                    .filter(|c| c.id >= oldest)
                    .map(|c| {
                        (
                            c.name.into_bytes(),
                            Node::AtPath {
                                at: c.id,
                                path: Vec::new(),
                            },
                        )
                    })
                    .collect()
            }
            Node::AtPath { at, path } => self
                .settled_view()?
                .list_at(path, *at)?
                .into_iter()
                .map(|(name, _)| {
                    let child = join(path, &name);
                    (
                        name,
                        Node::AtPath {
                            at: *at,
                            path: child,
                        },
                    )
                })
                .collect(),
            Node::Versions | Node::VersionsOf(_) => {
                let base = match node {
                    Node::VersionsOf(p) => p.clone(),
                    _ => Vec::new(),
                };
                let mut out = Vec::new();
                if !base.is_empty() {
                    let of_path = Resolved {
                        path: Some(base.clone()),
                        ..Resolved::default()
                    };
                    for c in of_path.changes(history)? {
                        if c.states_of(&base)
                            .1
                            .is_some_and(|a| a.kind == FileKind::File)
                        {
                            out.push((
                                c.id.to_string().into_bytes(),
                                Node::Version(base.clone(), c.id),
                            ));
                        }
                    }
                }
                let prefix = if base.is_empty() {
                    Vec::new()
                } else {
                    join(&base, b"")
                };
                let mut names: Vec<Vec<u8>> = history
                    .paths_with_prefix(&prefix)?
                    .into_iter()
                    .filter_map(|p| {
                        p[prefix.len()..]
                            .split(|b| *b == b'/')
                            .next()
                            .map(<[u8]>::to_vec)
                    })
                    .filter(|n| !n.is_empty())
                    .collect();
                names.dedup();
                out.extend(names.into_iter().map(|n| {
                    let child = join(&base, &n);
                    (n, Node::VersionsOf(child))
                }));
                out
            }
            Node::Sessions => history
                .sessions()?
                .into_iter()
                .map(|s| (s.name.clone().into_bytes(), Node::Session(s.name)))
                .collect(),
            Node::Session(n) => vec![
                (b"log".to_vec(), Node::SessionLog(n.clone())),
                (b"comments".to_vec(), Node::SessionComments(n.clone())),
            ],
            Node::Turns => {
                let mut sessions: Vec<String> = history
                    .turns(None)?
                    .into_iter()
                    .map(|t| t.session)
                    .collect();
                sessions.dedup();
                sessions
                    .into_iter()
                    .map(|s| (s.clone().into_bytes(), Node::TurnsOf(s)))
                    .collect()
            }
            Node::TurnsOf(s) => history
                .turns(Some(s))?
                .into_iter()
                .map(|t| {
                    (
                        t.number.to_string().into_bytes(),
                        Node::Turn(s.clone(), t.number),
                    )
                })
                .collect(),
            Node::Turn(s, n) => vec![
                (b"log".to_vec(), Node::TurnLog(s.clone(), *n)),
                (b"diff".to_vec(), Node::TurnDiff(s.clone(), *n)),
                (
                    b"conversation".to_vec(),
                    Node::TurnConversation(s.clone(), *n),
                ),
            ],
            _ => return Err(Error::NotAFolder),
        })
    }

    pub(super) fn past_link(&self, node: &Node) -> Result<Vec<u8>> {
        match node {
            Node::AtPath { at, path } => self.view().content_at(path, *at)?.ok_or(Error::Gone),
            _ => Err(Error::NotASymlink),
        }
    }

    /// The content of a file node, made now.
    pub(super) fn content(&self, node: &Node) -> Result<Vec<u8>> {
        let history = self.recorder.history();
        let settled = match node {
            Node::Readme | Node::Version(..) => Ok(()),
            // The past: new files not yet recorded are left out rather than recorded now.
            Node::AtPath { .. } => self.recorder.settle_for_views(),
            // What was done before the file was opened is in it (held-back new files waited
            // for, not recorded early: reading never changes the history).
            _ => {
                self.recorder.settle_for_reading();
                Ok(())
            }
        };
        // A store that cannot take writes (a full disk) still serves what it has.
        if let Err(e) = settled
            && history.store().writable()
        {
            return Err(e);
        }
        let lines = |r: Resolved, json: bool, turn: Option<u32>| -> Result<Vec<u8>> {
            let mut out = String::new();
            r.for_each(history, Order::OldestFirst, |c| {
                if turn.is_none_or(|n| c.turn == Some(n)) {
                    let line = if json {
                        change_json(&c).to_string()
                    } else {
                        change_line(&c)
                    };
                    out.push_str(&line);
                    out.push('\n');
                }
                true
            })?;
            Ok(out.into_bytes())
        };
        match node {
            Node::Readme => Ok(readme().into_bytes()),
            Node::Log => lines(Resolved::default(), false, None),
            Node::LogJson => lines(Resolved::default(), true, None),
            Node::SessionLog(s) => with_note(
                history.cut_note(Some(s), None, None)?,
                lines(
                    Resolved {
                        session: Some(s.clone()),
                        ..Resolved::default()
                    },
                    false,
                    None,
                )?,
            ),
            Node::TurnLog(s, n) => with_note(
                history.cut_note(Some(s), None, Some(*n))?,
                lines(
                    Resolved {
                        session: Some(s.clone()),
                        ..Resolved::default()
                    },
                    false,
                    Some(*n),
                )?,
            ),
            Node::TurnDiff(s, n) => {
                let turn = Selection {
                    turn: Some(format!("{s}:{n}")),
                    ..Selection::default()
                };
                match DiffArgs::of(&turn, &[]) {
                    Ok(diff) => self.run_for_content(&Command::Diff(diff)),
                    Err(e) => Ok(format!("error: {e}\n").into_bytes()),
                }
            }
            Node::Comments => self.run_for_content(&comment_list(None)),
            Node::SessionComments(s) => self.run_for_content(&comment_list(Some(s.clone()))),
            Node::TurnConversation(s, n) => {
                let turn = history
                    .turns(Some(s))?
                    .into_iter()
                    .find(|t| t.number == *n)
                    .ok_or_else(|| Error::NoTurn(format!("{s}:{n}")))?;
                Ok(crate::history::turns::conversation(history, &turn)?.unwrap_or_default())
            }
            Node::Status => self.status(),
            Node::Progress => Ok(self.progress.text()),
            Node::AtPath { at, path } => self.view().content_at(path, *at)?.ok_or(Error::Gone),
            Node::Version(p, id) => {
                let c = history.get(*id)?;
                match c.states_of(p).1.and_then(|a| a.hash) {
                    Some(h) => Ok(history.store().read_blob(&h)?),
                    None => Ok(Vec::new()),
                }
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The daemon's status (see [`tolerate`]). Its `state:` line (whether it records, and if not why and what to
    /// do) is always there: counts the store cannot give now (while it is being reopened) are
    /// left out, never the whole answer.
    fn status(&self) -> Result<Vec<u8>> {
        let history = self.recorder.history();
        let store = history.store();
        let recording = match store.check_room() {
            Ok(()) => "recording".to_string(),
            Err(e) if e.is_no_space() => format!(
                "NOT RECORDING: the store's disk is full ({e}). Free space on it: recording \
                 resumes by itself within seconds, no remount needed (meanwhile operations \
                 that would go unrecorded fail with ENOSPC; reads go on)"
            ),
            Err(crate::store::Error::Halted(why)) => format!(
                "NOT RECORDING: stopped after a panic in the daemon ({why}). Operations that \
                 would be recorded fail with EIO, reads go on; the daemon log says more. \
                 Remount the workspace to record again"
            ),
            Err(e) => format!("NOT RECORDING: {e} (operations that would go unrecorded fail)"),
        };
        let mut out = format!(
            "workspace: {}\nstore: {}\nstate: mounted, {recording}\n{}",
            self.workspace.display(),
            store.dir().display(),
            self.state.describe(),
        );
        match store.stats() {
            Ok(stats) => {
                out += &format!(
                    "changes: {}\nlast change: {}\nblobs: {} ({} bytes stored)\n",
                    stats.changes, stats.last_id, stats.blobs, stats.blob_bytes,
                );
            }
            // A damaged store is an error, as for every command; one being reopened is not.
            Err(e) if e.is_damaged() => return Err(e.into()),
            Err(e) => out += &format!("changes: unknown ({e})\n"),
        }
        if let Some(checkpoints) = tolerate(history.checkpoints())? {
            out += &format!(
                "checkpoints: {}\n",
                crate::history::format::checkpoint_list(&checkpoints)
            );
        }
        out += &format!(
            "default session: {}\n",
            self.recorder.attributor().default_session()
        );
        if let Some(Some(h)) = tolerate(history.horizon())? {
            out += &crate::history::format::horizon_line(&h);
            out.push('\n');
        }
        out += &format!("{}\n", unrecorded_line(&self.recorder.unrecorded()));
        if let Some(sessions) = tolerate(history.sessions())? {
            out += "sessions:\n";
            for s in sessions {
                out += &format!(
                    "  {} ({}, last {})\n",
                    crate::history::format::escape_text(&s.name),
                    crate::history::format::count(s.count as usize, "change"),
                    time::short(s.last_time_ns)
                );
            }
        }
        Ok(out.into_bytes())
    }

    /// A past state's attributes, for `stat` of `.rewind/at/...`.
    pub(super) fn past_state(&self, node: &Node) -> Option<FileState> {
        match node {
            Node::AtPath { at, path } => self.view().state_at(path, *at).ok()?.state().cloned(),
            _ => None,
        }
    }
}

/// `unrecorded: N paths passed through (venv 1890, cache tag 8)`, or `unrecorded: none`.
fn unrecorded_line(counts: &[(crate::history::ignore::Reason, usize)]) -> String {
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return "unrecorded: none".into();
    }
    let each: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{} {n}", r.describe()))
        .collect();
    format!(
        "unrecorded: {total} paths passed through ({})",
        each.join(", ")
    )
}

/// For the daemon's status: a damaged store fails it (as every command fails on one); any
/// other error (a store being reopened) leaves that part out.
fn tolerate<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Store(e)) if e.is_damaged() => Err(Error::Store(e)),
        Err(_) => Ok(None),
    }
}

/// A log's lines after gc's note about it, if any (as `rewind log` prints it).
fn with_note(note: Option<String>, lines: Vec<u8>) -> Result<Vec<u8>> {
    Ok(match note {
        Some(note) => [note.as_bytes(), b"\n", &lines].concat(),
        None => lines,
    })
}

/// `comment list`, of one session or every one.
fn comment_list(session: Option<String>) -> Command {
    Command::Comment(CommentArgs {
        action: CommentAction::List(CommentListArgs {
            session,
            all: false,
            json: false,
            mine: false,
        }),
    })
}
