//! Version 2: a change also names the other paths of a hard-linked file, the agent's turn and
//! the tool call that made it; an open-episode marker carries the same attribution. Turns are
//! new records (their own version 1).

use serde::{Deserialize, Serialize};

use super::v1::{self, StateRecord};

/// The tool call that made a change, as the agent reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRecord {
    pub name: String,
    pub id: Option<String>,
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
    /// Other names of the same (hard-linked) file when the change was made.
    pub links: Vec<Vec<u8>>,
    /// The number of the session's turn that was open, if any.
    pub turn: Option<u32>,
    pub tool: Option<ToolRecord>,
}

impl From<v1::ChangeRecord> for ChangeRecord {
    fn from(c: v1::ChangeRecord) -> ChangeRecord {
        ChangeRecord {
            id: c.id,
            time_ns: c.time_ns,
            kind: c.kind,
            path: c.path,
            from: c.from,
            before: c.before,
            after: c.after,
            session: c.session,
            agent: c.agent,
            pid: c.pid,
            process: c.process,
            links: Vec::new(),
            turn: None,
            tool: None,
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
}

impl From<v1::EpisodeRecord> for EpisodeRecord {
    fn from(e: v1::EpisodeRecord) -> EpisodeRecord {
        EpisodeRecord {
            before: e.before,
            time_ns: e.time_ns,
            session: e.session,
            agent: e.agent,
            pid: e.pid,
            process: e.process,
            turn: None,
            tool: None,
        }
    }
}

/// One prompt of an agent session: from the prompt to the agent's stop (or the next prompt).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub session: String,
    /// 1, 2, ... within the session.
    pub number: u32,
    /// The prompt's first line (at most a few hundred bytes).
    pub prompt: String,
    /// The agent's own id for the prompt or turn, where it has one.
    pub prompt_id: Option<String>,
    pub agent: String,
    pub start_time_ns: u64,
    /// The last change id when the turn began: its changes have larger ids.
    pub start_id: u64,
    pub end_time_ns: Option<u64>,
    /// The last change id when the turn ended (`None` while it is open).
    pub end_id: Option<u64>,
    /// The hash of the turn's conversation (a blob), where the agent provides a transcript.
    /// Not part of the postcard body: a trailer after it (see `TurnRecord::encode`), so
    /// records without one read as before and readers that do not know it ignore it.
    #[serde(skip)]
    pub conversation: Option<[u8; 32]>,
}
