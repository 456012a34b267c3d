//! Reviewer comments (their own family, `comments`; version 1 of its record). Field order and
//! types are the format; do not change them (add a new version instead).

use serde::{Deserialize, Serialize};

/// What a comment is on, as stored.
pub mod target {
    pub const SESSION: u8 = 0;
    pub const CHANGE: u8 = 1;
    pub const TURN: u8 = 2;
}

/// A reviewer's comment on a change, an agent turn or a session, with the session it is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentRecord {
    pub id: u64,
    pub time_ns: u64,
    /// Who wrote it: the uid, and the user name it had then.
    pub uid: u32,
    pub author: String,
    /// The session it is for: the change's, the turn's, or the session commented on.
    pub session: String,
    /// See [`target`].
    pub target: u8,
    /// The change id (a change) or the turn number (a turn); 0 for a session.
    pub number: u64,
    pub path: Option<Vec<u8>>,
    /// A line of the file as the target left it (1-based), or a hunk of its diff (1-based).
    pub line: Option<u32>,
    pub hunk: Option<u32>,
    pub text: String,
    /// When it was resolved, and by which uid (`None`: open).
    pub resolved: Option<(u64, u32)>,
}
