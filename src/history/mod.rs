//! What a change means: the domain types ([`change`]), names ([`name`]), who made a change
//! ([`who`]), which paths count ([`ignore`]), turning filesystem operations into recorded
//! changes ([`recorder`]), points in time ([`point`]), the tree at a past point ([`view`]),
//! which changes a command is about ([`selection`]), net diffs ([`netdiff`]), rollback
//! ([`rollback`]), agent turns ([`turns`]), and how changes and diffs are shown
//! ([`format`], [`diff`]).

pub mod change;
pub mod comment;
pub mod db;
pub mod diff;
pub mod format;
pub mod ignore;
pub mod name;
pub mod netdiff;
pub mod point;
pub mod recorder;
pub mod retention;
pub mod rollback;
pub mod selection;
pub mod time;
pub mod turns;
pub mod view;
pub mod who;

use std::io;
use std::path::PathBuf;

pub use crate::store::GcReport;
pub use change::{Change, ChangeKind, FileKind, FileState, Hash, Order};
pub use db::History;
pub use name::{BadName, Name};
pub use recorder::{AsRecorded, Recorder, Source};
pub use selection::{Resolved, Selection};
pub use who::{Attributor, Who};

/// What can go wrong in reading, recording or rolling back history.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    BadName(#[from] BadName),
    #[error(
        "{0:?} is not a point: give a change id, a checkpoint name, an RFC 3339 time or a duration ago like 15m"
    )]
    BadPoint(String),
    #[error("{point:?} is not a point: {why}")]
    NotAPoint { point: String, why: &'static str },
    #[error("there is no change {id} (the newest is {newest})")]
    NoChange { id: u64, newest: u64 },
    #[error(
        "change {0} was taken back (its operation failed, it was folded into an editor's save, or it was made in a folder that came to be ignored moments later, such as a venv or a build folder)"
    )]
    Retracted(u64),
    #[error("change {0} was removed by retention (gc)")]
    Removed(u64),
    #[error(
        "point {point} is older than the history retention kept: the oldest point still kept is {oldest} ({time}); gc removed the changes before it"
    )]
    BeforeHorizon {
        point: String,
        oldest: u64,
        time: String,
    },
    #[error(
        "{what} {name} is incomplete: gc removed {removed} of its changes (the newest of them {newest}), so it can no longer be exported or undone as a whole"
    )]
    Cut {
        what: &'static str,
        name: String,
        removed: u64,
        newest: u64,
    },
    #[error(
        "there is no change {0}: its id was set aside for an operation that then recorded nothing"
    )]
    Unused(u64),
    #[error(
        "there is no checkpoint named {0:?} (a point is a change id, a checkpoint, an RFC 3339 time or a duration ago like 15m)"
    )]
    NoCheckpoint(String),
    #[error("a checkpoint named {0:?} exists; use --force to move it")]
    CheckpointExists(String),
    #[error("there is no turn {0}; see `rewind turns`")]
    NoTurn(String),
    #[error("there is no session {0:?}; see `rewind sessions`")]
    NoSession(String),
    #[error("no session has changes by agent {0:?}; see `rewind sessions`")]
    NoAgent(String),
    #[error("the content of {path} at that point was never recorded ({why})")]
    NotRecorded { path: String, why: &'static str },
    #[error("--{0}")]
    BadLimit(#[from] retention::BadLimit),
    #[error("{}: {source}", path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: crate::config::ConfigError,
    },
    #[error("{0} needs the workspace mounted (run `rewind mount` first)")]
    NeedsMount(String),
    #[error("process {0} is gone")]
    ProcessGone(u32),
    #[error("no session was started by this process or its parents")]
    NoSessionStarted,
    #[error("`{0}` is not a daemon command")]
    NotADaemonCommand(&'static str),
    /// A path of the past (`.rewind/at/`) that is not there, or not that kind of file.
    #[error("no such file at that point")]
    Gone,
    #[error("not a folder")]
    NotAFolder,
    #[error("not a symlink")]
    NotASymlink,
    /// Input that does not make sense, with what to do instead.
    #[error("{0}")]
    Usage(String),
    // Failures (exit status 1, `EIO`): what went wrong, not what was asked.
    #[error("cannot mount {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("git {what} failed: {stderr}")]
    Git { what: &'static str, stderr: String },
    /// A chain of renames longer than anything real (a loop in a damaged history).
    #[error("history too deep to follow")]
    TooDeep,
    #[error("{0} not restored")]
    NotRestored(&'static str),
    /// A special file recorded by an earlier version, which did not keep its type
    /// ([`Node::Unknown`](change::Node::Unknown)): the store cannot say what to make.
    #[error(
        "{path}: not restored: this special file was recorded by an earlier rewind, which did not keep its type (fifo, socket or device)"
    )]
    UnknownNodeType { path: String },
    /// Without passthrough the kernel keeps its own size of a file open for writing: a
    /// rewrite in place would leave the writer appending past a hole of zeros.
    #[error(
        "{path}: not restored: process {pid} ({process}) has it open for writing, and without passthrough (a mount by a user other than root) the kernel would keep its old size for that process; stop it, or roll back once it has closed the file"
    )]
    WrittenThroughCache {
        path: String,
        pid: u32,
        process: String,
    },
    /// The scan at a mount cannot look at a path (a folder its owner made unreadable, to a
    /// daemon that is not root): what changed there while nothing was watching cannot be
    /// told, and must not be taken for gone.
    #[error(
        "cannot scan {path}: {source}; what changed there while the workspace was not mounted cannot be recorded. {what_to_do}"
    )]
    Unscannable {
        path: String,
        #[source]
        source: io::Error,
        what_to_do: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this error is the user's input (exit status 2, `EINVAL` through ctl), rather
    /// than a failure (1, `EIO`). The one place that decides; no wildcard, so a new variant
    /// must be classified here.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Store(e) => e.is_usage(),
            Error::BadName(_)
            | Error::BadPoint(_)
            | Error::NotAPoint { .. }
            | Error::NoChange { .. }
            | Error::Retracted(_)
            | Error::Removed(_)
            | Error::BeforeHorizon { .. }
            | Error::Cut { .. }
            | Error::Unused(_)
            | Error::NoCheckpoint(_)
            | Error::CheckpointExists(_)
            | Error::NoTurn(_)
            | Error::NoSession(_)
            | Error::NoAgent(_)
            | Error::NotRecorded { .. }
            | Error::BadLimit(_)
            | Error::Config { .. }
            | Error::NeedsMount(_)
            | Error::ProcessGone(_)
            | Error::NoSessionStarted
            | Error::NotADaemonCommand(_)
            | Error::Gone
            | Error::NotAFolder
            | Error::NotASymlink
            | Error::Usage(_) => true,
            Error::Io { .. }
            | Error::WrittenThroughCache { .. }
            | Error::Mount { .. }
            | Error::Git { .. }
            | Error::TooDeep
            | Error::NotRestored(_)
            | Error::UnknownNodeType { .. }
            | Error::Unscannable { .. } => false,
        }
    }
}

/// Attach a path to an `io::Error`, as every I/O error must carry one.
pub trait IoResultExt<T> {
    fn with_path(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn with_path(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| Error::Io {
            path: path.into(),
            source,
        })
    }
}

/// A name in a workspace folder (`""`: the workspace itself), as a workspace path.
pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// A workspace path as people read it in messages.
pub fn show_path(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_not_the_users_mistakes() {
        let io = || io::Error::from(io::ErrorKind::PermissionDenied);
        for failure in [
            Error::Mount {
                path: "/w".into(),
                source: io(),
            },
            Error::Git {
                what: "fast-import",
                stderr: "fatal".into(),
            },
            Error::TooDeep,
            Error::NotRestored("special files are"),
            Error::UnknownNodeType {
                path: "dev/fifo".into(),
            },
            Error::Io {
                path: "/w/a".into(),
                source: io(),
            },
        ] {
            assert!(!failure.is_usage(), "{failure}");
        }
        for mistake in [
            Error::BadLimit(retention::BadLimit::Keep("a month".into())),
            Error::NeedsMount("rollback".into()),
            Error::NoTurn("s:9".into()),
            Error::Usage("say what to roll back".into()),
        ] {
            assert!(mistake.is_usage(), "{mistake}");
        }
        assert_eq!(
            Error::BadLimit(retention::BadLimit::Keep("1 month".into())).to_string(),
            "--keep \"1 month\": use a duration like 30d, 12h or 90m"
        );
    }
}
