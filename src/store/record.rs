//! The records the store persists: changes, file states, sessions and checkpoints.
//!
//! These are the domain's nouns as they are written down; `history` builds on them. Paths are
//! workspace-relative byte strings (no leading `/`, never empty except for the root itself),
//! because a file name may be any bytes but `/` and NUL.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A BLAKE3 content hash: the key of a blob.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    pub fn of(data: &[u8]) -> Hash {
        Hash(*blake3::hash(data).as_bytes())
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(s: &str) -> Option<Hash> {
        blake3::Hash::from_hex(s).ok().map(|h| Hash(*h.as_bytes()))
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// What one change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChangeKind {
    Create,
    Modify,
    Delete,
    Rename,
    Mkdir,
    Rmdir,
    Symlink,
    Link,
    Chmod,
    Restore,
}

impl ChangeKind {
    pub const ALL: [ChangeKind; 10] = [
        ChangeKind::Create,
        ChangeKind::Modify,
        ChangeKind::Delete,
        ChangeKind::Rename,
        ChangeKind::Mkdir,
        ChangeKind::Rmdir,
        ChangeKind::Symlink,
        ChangeKind::Link,
        ChangeKind::Chmod,
        ChangeKind::Restore,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Create => "create",
            ChangeKind::Modify => "modify",
            ChangeKind::Delete => "delete",
            ChangeKind::Rename => "rename",
            ChangeKind::Mkdir => "mkdir",
            ChangeKind::Rmdir => "rmdir",
            ChangeKind::Symlink => "symlink",
            ChangeKind::Link => "link",
            ChangeKind::Chmod => "chmod",
            ChangeKind::Restore => "restore",
        }
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of a file, as far as history cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// FIFOs, sockets and devices: recorded as existing, with no content.
    Special,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Special => "special",
        }
    }
}

/// The state of a path before or after a change. A path that does not exist has no state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Content hash: a regular file's bytes or a symlink's target. `None` for directories and
    /// special files.
    pub hash: Option<Hash>,
}

/// One recorded modification of one path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub id: u64,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    pub kind: ChangeKind,
    pub path: Vec<u8>,
    /// For a rename, the old path.
    pub from: Option<Vec<u8>>,
    pub before: Option<FileState>,
    pub after: Option<FileState>,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
}

/// A change as the recorder hands it to the store, before it has an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewChange {
    pub time_ns: u64,
    pub kind: ChangeKind,
    pub path: Vec<u8>,
    pub from: Option<Vec<u8>>,
    pub before: Option<FileState>,
    pub after: Option<FileState>,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
}

impl NewChange {
    pub(crate) fn with_id(self, id: u64) -> Change {
        Change {
            id,
            time_ns: self.time_ns,
            kind: self.kind,
            path: self.path,
            from: self.from,
            before: self.before,
            after: self.after,
            session: self.session,
            agent: self.agent,
            pid: self.pid,
            process: self.process,
        }
    }
}

/// What the store knows of a session: kept up to date in the same batch as each change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub name: String,
    pub count: u64,
    pub first_id: u64,
    pub last_id: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// Every agent seen in the session, in order of first appearance.
    pub agents: Vec<String>,
}

impl SessionInfo {
    /// A session that `change` is the first of (counted by [`count_in`](Self::count_in)).
    pub fn started_by(change: &Change) -> SessionInfo {
        SessionInfo {
            name: change.session.clone(),
            count: 0,
            first_id: change.id,
            last_id: change.id,
            first_time_ns: change.time_ns,
            last_time_ns: change.time_ns,
            agents: Vec::new(),
        }
    }

    /// Count `change` (the newest so far) in the session.
    pub fn count_in(&mut self, change: &Change) {
        self.count += 1;
        self.last_id = change.id;
        self.last_time_ns = change.time_ns;
        if !self.agents.contains(&change.agent) {
            self.agents.push(change.agent.clone());
        }
    }
}

/// A named point in the history: the last change id at the time it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub name: String,
    pub id: u64,
    pub time_ns: u64,
}

/// A write episode in progress: its before state (content already stored) and who began it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenEpisode {
    pub before: Option<FileState>,
    pub time_ns: u64,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
}

/// What the mount last saw at a path: enough to tell, at the next mount, whether the path was
/// changed while nothing was watching.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i128,
}
