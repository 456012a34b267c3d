//! Version 3: users are part of the record. A state also keeps its owner and group (with its
//! mode, who could read that version then), a change the uid that made it, and an open-episode
//! marker the uid that began it. Older records read with both unknown (`None`).

use serde::{Deserialize, Serialize};

use super::v1;
use super::v2::{self, ToolRecord};

/// A file's state: kind (see [`super::kind`]), size, permission bits, content hash, and its
/// owner and group (`None` when recorded by a version that did not keep them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    pub kind: u8,
    pub size: u64,
    pub mode: u32,
    pub hash: Option<[u8; 32]>,
    /// `(uid, gid)`.
    pub owner: Option<(u32, u32)>,
}

impl From<v1::StateRecord> for StateRecord {
    fn from(s: v1::StateRecord) -> StateRecord {
        StateRecord {
            kind: s.kind,
            size: s.size,
            mode: s.mode,
            hash: s.hash,
            owner: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub id: u64,
    pub time_ns: u64,
    pub kind: u8,
    pub path: Vec<u8>,
    pub from: Option<Vec<u8>>,
    pub before: Option<StateRecord>,
    pub after: Option<StateRecord>,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
    pub links: Vec<Vec<u8>>,
    pub turn: Option<u32>,
    pub tool: Option<ToolRecord>,
    /// The (filesystem) uid of the process that made the change.
    pub uid: Option<u32>,
    /// Every name of each hard-linked file the change took a name from. Kept in a trailer
    /// after the record (see [`ChangeRecord::encode`](super::ChangeRecord::encode)), not in it.
    #[serde(skip)]
    pub groups: Vec<Vec<Vec<u8>>>,
}

impl From<v2::ChangeRecord> for ChangeRecord {
    fn from(c: v2::ChangeRecord) -> ChangeRecord {
        ChangeRecord {
            id: c.id,
            time_ns: c.time_ns,
            kind: c.kind,
            path: c.path,
            from: c.from,
            before: c.before.map(StateRecord::from),
            after: c.after.map(StateRecord::from),
            session: c.session,
            agent: c.agent,
            pid: c.pid,
            process: c.process,
            links: c.links,
            turn: c.turn,
            tool: c.tool,
            uid: None,
            groups: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    pub before: Option<StateRecord>,
    pub time_ns: u64,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
    pub turn: Option<u32>,
    pub tool: Option<ToolRecord>,
    pub uid: Option<u32>,
    /// For a new file whose create was not recorded yet when it was fsynced: which file was
    /// fsynced, and how it was then. Kept in a trailer after the record (see
    /// [`EpisodeRecord::encode`](super::EpisodeRecord::encode)), not in it.
    #[serde(skip)]
    pub fsynced: Option<FsyncedRecord>,
    /// For a new file whose create is held back: the id set aside for it and when it
    /// happened, so that a crash before it is recorded still records it in its place. Kept in
    /// a second trailer (see [`EpisodeRecord::encode`](super::EpisodeRecord::encode)).
    #[serde(skip)]
    pub reserved: Option<ReservedRecord>,
}

/// The id set aside for a held-back create, and the time of the create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservedRecord {
    pub id: u64,
    pub time_ns: u64,
}

/// The file an `fsync` made durable: its device and inode, size and modification time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsyncedRecord {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl From<v2::EpisodeRecord> for EpisodeRecord {
    fn from(e: v2::EpisodeRecord) -> EpisodeRecord {
        EpisodeRecord {
            before: e.before.map(StateRecord::from),
            time_ns: e.time_ns,
            session: e.session,
            agent: e.agent,
            pid: e.pid,
            process: e.process,
            turn: e.turn,
            tool: e.tool,
            uid: None,
            fsynced: None,
            reserved: None,
        }
    }
}
