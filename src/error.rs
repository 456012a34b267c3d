//! The crate's error type, and the one place where errors become errno values.
//!
//! Library code returns [`Error`]; the FUSE layer turns it into an errno with [`Error::errno`],
//! the binary turns it into a message and an exit code.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong below the CLI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RocksDB refused an operation. `context` says which.
    #[error("store: {context}: {source}")]
    Db {
        context: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    /// A stored value could not be decoded. Names the column family and key so it can be found.
    #[error("store: corrupt value in {cf} at key {key}: {reason}")]
    Corrupt {
        cf: &'static str,
        key: String,
        reason: String,
    },
    /// An earlier write failed, so the store refuses further writes until it is reopened.
    #[error("store: an earlier write failed ({0}); refusing further writes until reopened")]
    Poisoned(String),
    /// The store was written by a newer rewind.
    #[error("store: format version {found} is newer than this rewind understands ({supported})")]
    Format { found: u8, supported: u8 },
    /// An I/O error on a named path.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Something the user asked for does not exist or does not make sense.
    #[error("{0}")]
    Invalid(String),
    /// Something the user named was not found.
    #[error("{0}")]
    NotFound(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The errno a filesystem operation reports when this error stops it.
    ///
    /// A store that cannot be written makes the operation fail rather than go ahead unrecorded;
    /// a full disk is `ENOSPC`, anything else `EIO`.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Invalid(_) => libc::EINVAL,
            Error::NotFound(_) => libc::ENOENT,
            Error::Db { source, .. } if is_no_space(source.as_ref()) => libc::ENOSPC,
            Error::Poisoned(why) if is_no_space(why) => libc::ENOSPC,
            Error::Db { .. }
            | Error::Corrupt { .. }
            | Error::Poisoned(_)
            | Error::Format { .. } => libc::EIO,
        }
    }
}

fn is_no_space(message: &str) -> bool {
    message.contains("No space left") || message.contains("ENOSPC")
}

/// Attach a path to an `io::Error`, as every I/O error in this crate must carry one.
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
