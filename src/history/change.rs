//! The domain's nouns: a change, the state of a path, a session, a checkpoint, a turn. Paths are
//! workspace-relative byte strings (no leading `/`, empty only for the root), because a file
//! name may be any bytes but `/` and NUL.
//!
//! This is the one place that maps them to and from the store's records (`store::format`),
//! so a change of shape here never changes what an old store means.

use std::fmt;

use crate::store::format::{change_kind as ck, kind as fk};
use crate::store::{
    ChangeRecord, CheckpointRecord, EpisodeRecord, FsyncedRecord, ReservedRecord, SeenRecord,
    SessionRecord, StateRecord, ToolRecord, TurnRecord,
};
pub use crate::store::{Hash, Order};

/// What one change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

    fn code(self) -> u8 {
        match self {
            ChangeKind::Create => ck::CREATE,
            ChangeKind::Modify => ck::MODIFY,
            ChangeKind::Delete => ck::DELETE,
            ChangeKind::Rename => ck::RENAME,
            ChangeKind::Mkdir => ck::MKDIR,
            ChangeKind::Rmdir => ck::RMDIR,
            ChangeKind::Symlink => ck::SYMLINK,
            ChangeKind::Link => ck::LINK,
            ChangeKind::Chmod => ck::CHMOD,
            ChangeKind::Restore => ck::RESTORE,
        }
    }

    fn from_code(code: u8) -> Option<ChangeKind> {
        ChangeKind::ALL.into_iter().find(|k| k.code() == code)
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of a file, as far as history cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// FIFOs, sockets and devices: recorded with their type (and a device's number), with no
    /// content.
    Special(Node),
}

/// What kind of special file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Fifo,
    Socket,
    /// A character device and its number (`st_rdev`).
    Char(u64),
    Block(u64),
    /// Recorded by an earlier version, which did not keep the type: never restored.
    Unknown,
}

impl Node {
    /// The `S_IF*` type bits, where known.
    pub fn type_bits(self) -> Option<u32> {
        match self {
            Node::Fifo => Some(libc::S_IFIFO),
            Node::Socket => Some(libc::S_IFSOCK),
            Node::Char(_) => Some(libc::S_IFCHR),
            Node::Block(_) => Some(libc::S_IFBLK),
            Node::Unknown => None,
        }
    }

    /// The device number (0 for what is not a device).
    pub fn rdev(self) -> u64 {
        match self {
            Node::Char(d) | Node::Block(d) => d,
            _ => 0,
        }
    }
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Special(Node::Fifo) => "fifo",
            FileKind::Special(Node::Socket) => "socket",
            FileKind::Special(Node::Char(_)) => "char",
            FileKind::Special(Node::Block(_)) => "block",
            FileKind::Special(Node::Unknown) => "special",
        }
    }

    /// The kind of what `st` describes.
    pub fn of(st: &libc::stat) -> FileKind {
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Special(Node::Fifo),
            libc::S_IFSOCK => FileKind::Special(Node::Socket),
            libc::S_IFCHR => FileKind::Special(Node::Char(st.st_rdev)),
            libc::S_IFBLK => FileKind::Special(Node::Block(st.st_rdev)),
            _ => FileKind::Special(Node::Unknown),
        }
    }

    pub fn is_special(self) -> bool {
        matches!(self, FileKind::Special(_))
    }

    /// The stored code and size of a state of this kind with `size`: a device keeps its
    /// number where its size would be (a device node's size is always 0), so the record
    /// layout stays as it was.
    fn record(self, size: u64) -> (u8, u64) {
        match self {
            FileKind::File => (fk::FILE, size),
            FileKind::Dir => (fk::DIR, size),
            FileKind::Symlink => (fk::SYMLINK, size),
            FileKind::Special(Node::Fifo) => (fk::FIFO, size),
            FileKind::Special(Node::Socket) => (fk::SOCKET, size),
            FileKind::Special(Node::Char(rdev)) => (fk::CHAR_DEVICE, rdev),
            FileKind::Special(Node::Block(rdev)) => (fk::BLOCK_DEVICE, rdev),
            FileKind::Special(Node::Unknown) => (fk::SPECIAL, size),
        }
    }

    /// Back from a stored code and size. An unknown code (a store written by a newer rewind)
    /// reads as a special file of unknown type: it is then shown and never restored.
    fn from_record(code: u8, size: u64) -> (FileKind, u64) {
        match code {
            fk::FILE => (FileKind::File, size),
            fk::DIR => (FileKind::Dir, size),
            fk::SYMLINK => (FileKind::Symlink, size),
            fk::FIFO => (FileKind::Special(Node::Fifo), size),
            fk::SOCKET => (FileKind::Special(Node::Socket), size),
            fk::CHAR_DEVICE => (FileKind::Special(Node::Char(size)), 0),
            fk::BLOCK_DEVICE => (FileKind::Special(Node::Block(size)), 0),
            _ => (FileKind::Special(Node::Unknown), size),
        }
    }
}

/// The state of a path before or after a change. A path that does not exist has no state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileState {
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Content hash: a regular file's bytes or a symlink's target. `None` for directories and
    /// special files, and for content that was never recorded.
    pub hash: Option<Hash>,
    /// Owner and group: with `mode`, who could read this version. `None` where a store of an
    /// earlier version did not record them.
    pub owner: Option<Owner>,
}

/// A file's owner and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    pub fn of(st: &libc::stat) -> Owner {
        Owner {
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }
}

/// The tool call of an agent that made a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub id: Option<String>,
}

/// One recorded modification of one path.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// The other names of a hard-linked file: the change is theirs too.
    pub links: Vec<Vec<u8>>,
    /// The hard-linked files this change took a name from (a delete, a rename from or over a
    /// name, a folder's rename), each as every name it had just before: what a rollback links
    /// again. Not the change of those names (unlike `links`).
    pub groups: Vec<Vec<Vec<u8>>>,
    /// The session's turn (agent prompt) that was open.
    pub turn: Option<u32>,
    pub tool: Option<Tool>,
    /// The (filesystem) uid of the process that made it; `None` in stores of earlier versions.
    pub uid: Option<u32>,
}

impl Change {
    /// Whether this change is one of `path`'s: to it, from it (a rename), or to another name
    /// of the same file.
    pub fn touches(&self, path: &[u8]) -> bool {
        self.path == path
            || self.from.as_deref() == Some(path)
            || self.links.iter().any(|l| l == path)
    }

    /// What `path` held before and after this change, for a path it [`touches`](Self::touches).
    pub fn states_of(&self, path: &[u8]) -> (Option<&FileState>, Option<&FileState>) {
        if self.from.as_deref() == Some(path) && self.path != path {
            // The old name of a rename: what it held went to the new name.
            (self.after.as_ref(), None)
        } else {
            (self.before.as_ref(), self.after.as_ref())
        }
    }
}

/// A change as the recorder hands it over, before it has an id.
pub type NewChange = Change;

/// What the store knows of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A named point in the history: the last change id at the time it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub name: String,
    pub id: u64,
    pub time_ns: u64,
}

/// A write episode in progress: its before state (content already stored) and who began it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenEpisode {
    pub before: Option<FileState>,
    pub time_ns: u64,
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
    pub turn: Option<u32>,
    pub tool: Option<Tool>,
    pub uid: Option<u32>,
    /// For a new file whose create is not recorded yet: the file as an `fsync` left it (the
    /// marker was written then, so that the create survives a crash with who made it).
    pub fsynced: Option<Fsynced>,
    /// For a new file whose create is held back: the id set aside for it and when the create
    /// happened, so that a crash before it is recorded still records it in its place.
    pub reserved: Option<Reserved>,
}

/// The id set aside for a held-back create ([`Recorder`](super::Recorder)'s `reserve_id`)
/// and the time of the create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub id: u64,
    pub time_ns: u64,
}

/// A file as an `fsync` left it: which file (device and inode) and its size and modification
/// time, which a later write would change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fsynced {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl Fsynced {
    pub fn of(st: &libc::stat) -> Fsynced {
        Fsynced {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
        }
    }
}

/// What the mount last saw at a path: enough to tell, at the next mount, whether the path was
/// changed while nothing was watching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i128,
}

/// One prompt of an agent session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub session: String,
    pub number: u32,
    pub prompt: String,
    pub prompt_id: Option<String>,
    pub agent: String,
    pub start_time_ns: u64,
    /// Its changes have ids above this.
    pub start_id: u64,
    pub end_time_ns: Option<u64>,
    /// ... and at most this, once it ended.
    pub end_id: Option<u64>,
    /// The agent's transcript as of the turn's end (a blob), where the agent provides one.
    pub conversation: Option<Hash>,
}

impl Turn {
    /// Whether change `id` (of this turn's session) falls in this turn.
    pub fn contains(&self, id: u64) -> bool {
        id > self.start_id && self.end_id.is_none_or(|end| id <= end)
    }
}

// ---- records --------------------------------------------------------------------------------

impl From<&FileState> for StateRecord {
    fn from(s: &FileState) -> StateRecord {
        let (kind, size) = s.kind.record(s.size);
        StateRecord {
            kind,
            size,
            mode: s.mode,
            hash: s.hash.map(|h| h.0),
            owner: s.owner.map(|o| (o.uid, o.gid)),
        }
    }
}

impl From<StateRecord> for FileState {
    fn from(s: StateRecord) -> FileState {
        let (kind, size) = FileKind::from_record(s.kind, s.size);
        FileState {
            kind,
            size,
            mode: s.mode,
            hash: s.hash.map(Hash),
            owner: s.owner.map(|(uid, gid)| Owner { uid, gid }),
        }
    }
}

impl From<&Tool> for ToolRecord {
    fn from(t: &Tool) -> ToolRecord {
        ToolRecord {
            name: t.name.clone(),
            id: t.id.clone(),
        }
    }
}

impl From<ToolRecord> for Tool {
    fn from(t: ToolRecord) -> Tool {
        Tool {
            name: t.name,
            id: t.id,
        }
    }
}

impl From<&Change> for ChangeRecord {
    fn from(c: &Change) -> ChangeRecord {
        ChangeRecord {
            id: c.id,
            time_ns: c.time_ns,
            kind: c.kind.code(),
            path: c.path.clone(),
            from: c.from.clone(),
            before: c.before.as_ref().map(StateRecord::from),
            after: c.after.as_ref().map(StateRecord::from),
            session: c.session.clone(),
            agent: c.agent.clone(),
            pid: c.pid,
            process: c.process.clone(),
            links: c.links.clone(),
            groups: c.groups.clone(),
            turn: c.turn,
            tool: c.tool.as_ref().map(ToolRecord::from),
            uid: c.uid,
        }
    }
}

impl TryFrom<ChangeRecord> for Change {
    type Error = crate::store::Error;

    fn try_from(c: ChangeRecord) -> Result<Change, Self::Error> {
        let kind = ChangeKind::from_code(c.kind).ok_or_else(|| crate::store::Error::Corrupt {
            cf: "changes",
            key: crate::store::keys::hex(&crate::store::keys::change(c.id)),
            reason: format!("unknown change kind {}", c.kind),
        })?;
        Ok(Change {
            id: c.id,
            time_ns: c.time_ns,
            kind,
            path: c.path,
            from: c.from,
            before: c.before.map(FileState::from),
            after: c.after.map(FileState::from),
            session: c.session,
            agent: c.agent,
            pid: c.pid,
            process: c.process,
            links: c.links,
            groups: c.groups,
            turn: c.turn,
            tool: c.tool.map(Tool::from),
            uid: c.uid,
        })
    }
}

impl From<SessionRecord> for SessionInfo {
    fn from(s: SessionRecord) -> SessionInfo {
        SessionInfo {
            name: s.name,
            count: s.count,
            first_id: s.first_id,
            last_id: s.last_id,
            first_time_ns: s.first_time_ns,
            last_time_ns: s.last_time_ns,
            agents: s.agents,
        }
    }
}

impl From<CheckpointRecord> for Checkpoint {
    fn from(c: CheckpointRecord) -> Checkpoint {
        Checkpoint {
            name: c.name,
            id: c.id,
            time_ns: c.time_ns,
        }
    }
}

impl From<&OpenEpisode> for EpisodeRecord {
    fn from(e: &OpenEpisode) -> EpisodeRecord {
        EpisodeRecord {
            before: e.before.as_ref().map(StateRecord::from),
            time_ns: e.time_ns,
            session: e.session.clone(),
            agent: e.agent.clone(),
            pid: e.pid,
            process: e.process.clone(),
            turn: e.turn,
            tool: e.tool.as_ref().map(ToolRecord::from),
            uid: e.uid,
            fsynced: e.fsynced.map(|f| FsyncedRecord {
                dev: f.dev,
                ino: f.ino,
                size: f.size,
                mtime_ns: f.mtime_ns,
            }),
            reserved: e.reserved.map(|r| ReservedRecord {
                id: r.id,
                time_ns: r.time_ns,
            }),
        }
    }
}

impl From<EpisodeRecord> for OpenEpisode {
    fn from(e: EpisodeRecord) -> OpenEpisode {
        OpenEpisode {
            before: e.before.map(FileState::from),
            time_ns: e.time_ns,
            session: e.session,
            agent: e.agent,
            pid: e.pid,
            process: e.process,
            turn: e.turn,
            tool: e.tool.map(Tool::from),
            uid: e.uid,
            fsynced: e.fsynced.map(|f| Fsynced {
                dev: f.dev,
                ino: f.ino,
                size: f.size,
                mtime_ns: f.mtime_ns,
            }),
            reserved: e.reserved.map(|r| Reserved {
                id: r.id,
                time_ns: r.time_ns,
            }),
        }
    }
}

impl From<&Seen> for SeenRecord {
    fn from(s: &Seen) -> SeenRecord {
        let (kind, size) = s.kind.record(s.size);
        SeenRecord {
            kind,
            size,
            mode: s.mode,
            mtime_ns: s.mtime_ns,
        }
    }
}

impl From<SeenRecord> for Seen {
    fn from(s: SeenRecord) -> Seen {
        let (kind, size) = FileKind::from_record(s.kind, s.size);
        Seen {
            kind,
            size,
            mode: s.mode,
            mtime_ns: s.mtime_ns,
        }
    }
}

impl From<&Turn> for TurnRecord {
    fn from(t: &Turn) -> TurnRecord {
        TurnRecord {
            session: t.session.clone(),
            number: t.number,
            prompt: t.prompt.clone(),
            prompt_id: t.prompt_id.clone(),
            agent: t.agent.clone(),
            start_time_ns: t.start_time_ns,
            start_id: t.start_id,
            end_time_ns: t.end_time_ns,
            end_id: t.end_id,
            conversation: t.conversation.map(|h| h.0),
        }
    }
}

impl From<TurnRecord> for Turn {
    fn from(t: TurnRecord) -> Turn {
        Turn {
            session: t.session,
            number: t.number,
            prompt: t.prompt,
            prompt_id: t.prompt_id,
            agent: t.agent,
            start_time_ns: t.start_time_ns,
            start_id: t.start_id,
            end_time_ns: t.end_time_ns,
            end_id: t.end_id,
            conversation: t.conversation.map(Hash),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A special file's type is a kind code of its own and a device keeps its number in
    /// `size`, in the layout every version-3 record has (no new record version): kind `06`,
    /// size 0x103 (`83 02`), mode 0o600 (`80 03`), no hash (`00`), owner 0:0 (`01 00 00`).
    #[test]
    fn a_device_node_is_stored_in_the_version_3_layout() {
        let state = FileState {
            kind: FileKind::Special(Node::Char(0x103)),
            size: 0,
            mode: 0o600,
            hash: None,
            owner: Some(Owner { uid: 0, gid: 0 }),
        };
        let record = StateRecord::from(&state);
        let bytes = crate::store::format::encode(3, &record);
        assert_eq!(
            bytes,
            [3, 0x06, 0x83, 0x02, 0x80, 0x03, 0x00, 0x01, 0x00, 0x00]
        );
        assert_eq!(FileState::from(record), state);
        let fifo = StateRecord::from(&FileState {
            kind: FileKind::Special(Node::Fifo),
            ..state.clone()
        });
        assert_eq!((fifo.kind, fifo.size), (fk::FIFO, 0));
        // What an earlier version stored (kind 3, type unknown) still reads, as a special file
        // of unknown type.
        let old = StateRecord {
            kind: fk::SPECIAL,
            ..fifo
        };
        assert_eq!(FileState::from(old).kind, FileKind::Special(Node::Unknown));
    }

    #[test]
    fn kinds_round_trip_through_their_codes() {
        for k in ChangeKind::ALL {
            assert_eq!(ChangeKind::from_code(k.code()), Some(k));
        }
        assert_eq!(ChangeKind::from_code(200), None);
        for k in [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::Special(Node::Fifo),
            FileKind::Special(Node::Socket),
            FileKind::Special(Node::Char(0x0103)),
            FileKind::Special(Node::Block(0x0801)),
            FileKind::Special(Node::Unknown),
        ] {
            let size = if matches!(k, FileKind::Special(Node::Char(_) | Node::Block(_))) {
                0
            } else {
                12
            };
            let (code, stored) = k.record(size);
            assert_eq!(FileKind::from_record(code, stored), (k, size));
        }
        // A code this version does not know (a newer store's) is a special file never restored.
        assert_eq!(
            FileKind::from_record(200, 5),
            (FileKind::Special(Node::Unknown), 5)
        );
    }
}
