//! Reviewer comments: notes a person leaves on a change, an agent turn or a session (and
//! optionally on a file, a line or a hunk of it), kept in the store, so that the agent that
//! made the change reads them (`.rewind/comments`, MCP). A comment belongs to one session: the
//! change's, the turn's, or the one commented on.

use super::{Error, History, Result};
use crate::store::CommentRecord;
use crate::store::format::comment::target;

/// The longest comment text, in bytes.
pub const TEXT_MAX: usize = 16 * 1024;

/// What a comment is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Change(u64),
    Turn(u32),
    Session,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    pub time_ns: u64,
    pub uid: u32,
    pub author: String,
    /// The session it is for.
    pub session: String,
    pub target: Target,
    pub path: Option<Vec<u8>>,
    /// A line of the file as the target left it (1-based).
    pub line: Option<u32>,
    /// A hunk of the file in the target's diff (1-based).
    pub hunk: Option<u32>,
    pub text: String,
    /// When it was resolved, and by which uid.
    pub resolved: Option<(u64, u32)>,
}

impl Comment {
    /// `change 12`, `turn s1:3`, `session s1`.
    pub fn target_name(&self) -> String {
        match self.target {
            Target::Change(id) => format!("change {id}"),
            Target::Turn(n) => format!("turn {}:{n}", self.session),
            Target::Session => format!("session {}", self.session),
        }
    }

    fn to_record(&self) -> CommentRecord {
        let (kind, number) = match self.target {
            Target::Change(id) => (target::CHANGE, id),
            Target::Turn(n) => (target::TURN, u64::from(n)),
            Target::Session => (target::SESSION, 0),
        };
        CommentRecord {
            id: self.id,
            time_ns: self.time_ns,
            uid: self.uid,
            author: self.author.clone(),
            session: self.session.clone(),
            target: kind,
            number,
            path: self.path.clone(),
            line: self.line,
            hunk: self.hunk,
            text: self.text.clone(),
            resolved: self.resolved,
        }
    }

    fn from_record(r: CommentRecord) -> Result<Comment> {
        let target = match r.target {
            target::CHANGE => Target::Change(r.number),
            target::TURN => Target::Turn(u32::try_from(r.number).unwrap_or(u32::MAX)),
            target::SESSION => Target::Session,
            other => {
                return Err(crate::store::format::corrupt(
                    "comments",
                    &r.id.to_be_bytes(),
                    format!("unknown comment target {other}"),
                )
                .into());
            }
        };
        Ok(Comment {
            id: r.id,
            time_ns: r.time_ns,
            uid: r.uid,
            author: r.author,
            session: r.session,
            target,
            path: r.path,
            line: r.line,
            hunk: r.hunk,
            text: r.text,
            resolved: r.resolved,
        })
    }
}

/// Check a comment's text: not empty, not too long, no control characters but newlines and
/// tabs.
pub fn check_text(text: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(Error::Usage("a comment needs some text".into()));
    }
    if text.len() > TEXT_MAX {
        return Err(Error::Usage(format!(
            "a comment is at most {} KiB; this one is {} bytes",
            TEXT_MAX / 1024,
            text.len()
        )));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(Error::Usage(
            "a comment is text: no control characters but newlines and tabs".into(),
        ));
    }
    Ok(())
}

impl History {
    /// Keep a new comment (its id and time are given here).
    pub fn add_comment(&self, mut comment: Comment) -> Result<Comment> {
        check_text(&comment.text)?;
        let store = self.store();
        comment.id = store.next_comment_id()?;
        comment.time_ns = super::time::now_ns();
        store.put_comment(&comment.to_record())?;
        Ok(comment)
    }

    /// Every comment, oldest first.
    pub fn comments(&self) -> Result<Vec<Comment>> {
        self.store()
            .comments()?
            .into_iter()
            .map(Comment::from_record)
            .collect()
    }

    /// Mark a comment resolved (by `uid`, now).
    pub fn resolve_comment(&self, id: u64, uid: u32) -> Result<Comment> {
        let Some(record) = self.store().comment(id)? else {
            return Err(Error::Usage(format!(
                "there is no comment {id}; see `rewind comment list --all`"
            )));
        };
        let mut comment = Comment::from_record(record)?;
        if comment.resolved.is_some() {
            return Err(Error::Usage(format!("comment {id} is resolved already")));
        }
        comment.resolved = Some((super::time::now_ns(), uid));
        self.store().put_comment(&comment.to_record())?;
        Ok(comment)
    }
}
