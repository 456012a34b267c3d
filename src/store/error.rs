//! What can go wrong in the store. Every error names where: the store directory, the column
//! family and key of a bad value, or the path of a failed I/O.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RocksDB refused an operation; `context` says which.
    #[error("store: {context}: {source}")]
    Db {
        context: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    /// A stored value or file is damaged: it does not decode, or does not match its hash.
    #[error("store: corrupt value in {cf} at key {key}: {reason}")]
    Corrupt {
        cf: &'static str,
        key: String,
        reason: String,
    },
    /// The store's files are damaged or incomplete (a missing or truncated table file).
    #[error("store {}: {reason}", dir.display())]
    Damaged { dir: PathBuf, reason: String },
    /// The store may not be used where it is: inside the workspace it records (the daemon
    /// would write to its own mount), or readable by other users.
    #[error("store {}: {reason}", dir.display())]
    Refused { dir: PathBuf, reason: String },
    /// There is no store in this directory.
    #[error("no store at {}", .0.display())]
    Missing(PathBuf),
    /// A write failed and the store refuses writes until one succeeds again.
    #[error("store: cannot write ({reason}); changes that cannot be recorded are refused")]
    Unwritable { reason: String, no_space: bool },
    /// Writes stopped for good after a panic in the daemon (see `Store::halt`).
    #[error(
        "recording stopped after a panic in the daemon ({0}); writes are refused until the workspace is remounted"
    )]
    Halted(String),
    /// Opened for reading only.
    #[error("store: opened read-only")]
    ReadOnly,
    /// A name that cannot be a key (empty, or with a NUL byte).
    #[error("store: {what} name {name:?} cannot be stored (empty or with a NUL byte)")]
    BadName { what: &'static str, name: String },
    /// Written by a newer rewind.
    #[error(
        "store {}: written by a newer rewind (store format {found}; this rewind reads formats \
         up to {supported}); use a newer rewind to open it",
        dir.display()
    )]
    Format {
        dir: PathBuf,
        found: u8,
        supported: u8,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is (or was caused by) a full disk.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Db { source, .. } => is_no_space(source),
            Error::Unwritable { no_space, .. } => *no_space,
            Error::Io { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
            _ => false,
        }
    }

    /// Whether this is the user's to fix (a damaged store, or one that may not be used where it
    /// is), as opposed to a failure.
    pub fn is_usage(&self) -> bool {
        self.is_damaged() || matches!(self, Error::Refused { .. })
    }

    /// Whether the store itself is unreadable or inconsistent (as opposed to a failed write).
    pub fn is_damaged(&self) -> bool {
        matches!(
            self,
            Error::Corrupt { .. }
                | Error::Damaged { .. }
                | Error::Missing(_)
                | Error::Format { .. }
        ) || matches!(self, Error::Db { source, .. }
            if matches!(source.kind(), rocksdb::ErrorKind::Corruption | rocksdb::ErrorKind::NotFound))
    }
}

/// RocksDB reports a full disk only in its message ("IO error: No space left on device"); this
/// is the one place that reads it.
pub fn is_no_space(e: &rocksdb::Error) -> bool {
    let message = e.as_ref();
    message.contains("No space left") || message.contains("ENOSPC")
}
