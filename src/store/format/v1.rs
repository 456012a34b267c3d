//! Version 1 of the persisted records: the layout of the first releases. Field order and types
//! are the format; do not change them (add a new version instead).

use serde::{Deserialize, Serialize};

/// A file's state: kind (see [`super::kind`]), size, permission bits, content hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    pub kind: u8,
    pub size: u64,
    pub mode: u32,
    pub hash: Option<[u8; 32]>,
}

/// A change as version 1 stored it (no links, turn or tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub id: u64,
    pub time_ns: u64,
    /// See [`super::change_kind`].
    pub kind: u8,
    pub path: Vec<u8>,
    pub from: Option<Vec<u8>>,
    pub before: Option<StateRecord>,
    pub after: Option<StateRecord>,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
}

/// A session's summary, kept up to date in the batch of each of its changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub name: String,
    pub count: u64,
    pub first_id: u64,
    pub last_id: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    pub agents: Vec<String>,
}

/// A named point: the last change id when it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub name: String,
    pub id: u64,
    pub time_ns: u64,
}

/// A write episode in progress, as version 1 stored it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    pub before: Option<StateRecord>,
    pub time_ns: u64,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
}

/// What the mount last saw at a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenRecord {
    pub kind: u8,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i128,
}

/// The files whose content the store held when the mount ended (`meta` `known`), so that the
/// next mount can capture one again without reading it while its inode, size, mtime and ctime
/// are still these (nothing can set a ctime back, so nothing outside the mount changed it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownRecord {
    pub files: Vec<KnownFileRecord>,
}

/// One file of a [`KnownRecord`]: its backing identity and stat fields, and its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownFileRecord {
    pub dev: u64,
    pub ino: u64,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub hash: [u8; 32],
}

/// The chunk list of content stored in chunks (the value of its whole hash in `blobs`, after
/// the blob version byte and the manifest tag).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRecord {
    pub size: u64,
    pub chunks: Vec<([u8; 32], u32)>,
}
