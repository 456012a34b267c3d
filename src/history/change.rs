//! The domain's nouns: a change, the state of a path, a session, a checkpoint, a turn. Paths are
//! workspace-relative byte strings (no leading `/`, empty only for the root), because a file
//! name may be any bytes but `/` and NUL.
//!
//! This is the one place that maps them to and from the store's records (`store::format`),
//! so a change of shape here never changes what an old store means.

use std::fmt;

use crate::store::format::{change_kind as ck, kind as fk};
use crate::store::{
    ChangeRecord, CheckpointRecord, EpisodeRecord, SeenRecord, SessionRecord, StateRecord,
    ToolRecord, TurnRecord,
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

    fn code(self) -> u8 {
        match self {
            FileKind::File => fk::FILE,
            FileKind::Dir => fk::DIR,
            FileKind::Symlink => fk::SYMLINK,
            FileKind::Special => fk::SPECIAL,
        }
    }

    /// An unknown code (a store written by a newer rewind) reads as a special file: it is then
    /// shown and never restored.
    fn from_code(code: u8) -> FileKind {
        match code {
            fk::FILE => FileKind::File,
            fk::DIR => FileKind::Dir,
            fk::SYMLINK => FileKind::Symlink,
            _ => FileKind::Special,
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
        StateRecord {
            kind: s.kind.code(),
            size: s.size,
            mode: s.mode,
            hash: s.hash.map(|h| h.0),
            owner: s.owner.map(|o| (o.uid, o.gid)),
        }
    }
}

impl From<StateRecord> for FileState {
    fn from(s: StateRecord) -> FileState {
        FileState {
            kind: FileKind::from_code(s.kind),
            size: s.size,
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
        }
    }
}

impl From<&Seen> for SeenRecord {
    fn from(s: &Seen) -> SeenRecord {
        SeenRecord {
            kind: s.kind.code(),
            size: s.size,
            mode: s.mode,
            mtime_ns: s.mtime_ns,
        }
    }
}

impl From<SeenRecord> for Seen {
    fn from(s: SeenRecord) -> Seen {
        Seen {
            kind: FileKind::from_code(s.kind),
            size: s.size,
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
            FileKind::Special,
        ] {
            assert_eq!(FileKind::from_code(k.code()), k);
        }
    }
}
