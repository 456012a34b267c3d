//! `rewind comment add|list|resolve`: a reviewer's notes on what an agent did, kept in the
//! history and read by agents from `.rewind/comments` or over MCP.
//!
//! A comment is on a change, an agent turn or a session (the session it belongs to is the
//! change's or the turn's), optionally on one file of it and a line of that file as the target
//! left it, or a hunk of the file in the target's diff (as `rewind diff` numbers them). Listing
//! shows each comment as a block with the line or the hunk's `@@` header it is about.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::env::{Env, Outcome};
use crate::history::Selection;
use crate::history::comment::{Comment, Target, check_text};
use crate::history::diff::hunk;
use crate::history::format::{escape_path, escape_text};
use crate::history::netdiff;
use crate::history::rollback;
use crate::history::turns::TurnRef;
use crate::history::{Error, Result, time, who};

/// Review comments on a change, an agent turn or a session, kept in the history.
///
/// The open ones are in `.rewind/comments` (and `.rewind/sessions/NAME/comments`), and agents get theirs
/// over MCP (`comments`), so a reviewer's notes reach the agent that made the change.
#[derive(Debug, Args)]
pub struct CommentArgs {
    #[command(subcommand)]
    pub action: CommentAction,
}

#[derive(Debug, Subcommand)]
pub enum CommentAction {
    Add(CommentAddArgs),
    List(CommentListArgs),
    Resolve(CommentResolveArgs),
}

/// Add a comment: on a change, a turn or a session, optionally on a file and a line (as the
/// target left the file) or a hunk (of the file in the target's diff).
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("on").required(true).args(["change", "turn", "session"])))]
pub struct CommentAddArgs {
    /// On one change, by id.
    #[arg(long, value_name = "ID")]
    pub change: Option<u64>,
    /// On an agent turn: SESSION:N, N, or the agent's prompt id.
    #[arg(long, value_name = "TURN")]
    pub turn: Option<String>,
    /// On a whole session.
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// On this file of it.
    #[arg(long, value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// On this line of the file (1-based), as the change, turn or session left it.
    #[arg(long, value_name = "L", requires = "path", conflicts_with = "hunk")]
    pub line: Option<u32>,
    /// On this hunk of the file (1-based), as `rewind diff` of the same selection numbers them.
    #[arg(long, value_name = "K", requires = "path")]
    pub hunk: Option<u32>,
    /// The comment (several words are joined with spaces).
    #[arg(required = true, num_args = 1.., value_name = "TEXT")]
    pub text: Vec<String>,
}

/// List comments: the open ones of every session, newest last.
#[derive(Debug, Args)]
pub struct CommentListArgs {
    /// Only this session's (comments on its changes and turns included).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Resolved ones too.
    #[arg(long)]
    pub all: bool,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
    /// Only the comments for the session of the process that asks (MCP's `comments`).
    #[arg(long, hide = true, conflicts_with = "session")]
    pub mine: bool,
}

/// Mark a comment resolved: it leaves the open list (and `.rewind/comments`).
#[derive(Debug, Args)]
pub struct CommentResolveArgs {
    pub id: u64,
}

pub fn run(args: &CommentArgs, env: &mut Env<'_>) -> Result<Outcome> {
    match &args.action {
        CommentAction::Add(a) => add(a, env),
        CommentAction::List(a) => list(a, env),
        CommentAction::Resolve(a) => {
            let c = env.history.resolve_comment(a.id, author_uid(env))?;
            env.println(&format!(
                "comment {} on {} resolved",
                c.id,
                escape_text(&c.target_name())
            ))?;
            Ok(Outcome::Done)
        }
    }
}

/// Who is writing: the process that asked (through ctl, the writer of the line).
fn author_uid(env: &Env<'_>) -> u32 {
    who::fs_uid(env.caller).unwrap_or_else(|| rustix::process::geteuid().as_raw())
}

fn add(a: &CommentAddArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let history = env.history;
    let text = a.text.join(" ");
    check_text(&text)?;
    if a.line == Some(0) || a.hunk == Some(0) {
        return Err(Error::Usage("lines and hunks are numbered from 1".into()));
    }
    let (session, target) = if let Some(id) = a.change {
        (history.get(id)?.session, Target::Change(id))
    } else if let Some(t) = &a.turn {
        let turn = TurnRef::parse(t).resolve(history, None)?;
        (turn.session, Target::Turn(turn.number))
    } else if let Some(s) = &a.session {
        let name = history.session_named(s)?;
        if history.session(&name)?.is_none() && history.turns(Some(&name))?.is_empty() {
            return Err(Error::Usage(format!(
                "there is no session {}; see `rewind sessions`",
                escape_text(&name)
            )));
        }
        (name, Target::Session)
    } else {
        return Err(Error::Usage(
            "say what the comment is on: --change, --turn or --session".into(),
        ));
    };
    let path = a.path.as_deref().map(|p| env.rel_path(p)).transpose()?;
    let uid = author_uid(env);
    let comment = Comment {
        id: 0,
        time_ns: 0,
        uid,
        author: who::user_name(uid),
        session,
        target,
        path,
        line: a.line,
        hunk: a.hunk,
        text,
        resolved: None,
    };
    if let Some(p) = &comment.path {
        let selected = rollback::select(history, &selector(&comment))?;
        if !selected.iter().any(|c| c.touches(p)) {
            return Err(Error::Usage(format!(
                "{} did not change {}",
                escape_text(&comment.target_name()),
                escape_path(p)
            )));
        }
    }
    if (comment.line.is_some() || comment.hunk.is_some()) && context(env, &comment).is_none() {
        let what = match (comment.line, comment.hunk) {
            (Some(l), _) => format!("line {l}"),
            (_, Some(k)) => format!("hunk {k}"),
            _ => unreachable!("checked"),
        };
        return Err(Error::Usage(format!(
            "{} has no {what} in {} (see `rewind diff`)",
            comment.path.as_deref().map(escape_path).unwrap_or_default(),
            escape_text(&comment.target_name())
        )));
    }
    let comment = history.add_comment(comment)?;
    env.println(&format!(
        "comment {} added on {}",
        comment.id,
        escape_text(&comment.target_name())
    ))?;
    Ok(Outcome::Done)
}

fn list(a: &CommentListArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let history = env.history;
    let mut note = None;
    let session = if a.mine {
        match env.actor.and_then(|actor| actor.session_of(env.caller)) {
            Some(s) => Some(s),
            None => match std::env::var("REWIND_SESSION") {
                Ok(s) if env.actor.is_none() => Some(s),
                _ => {
                    note = Some(
                        "(which session is yours is known while the workspace is mounted; \
                         these are the open comments of every session)",
                    );
                    None
                }
            },
        }
    } else {
        a.session
            .as_deref()
            .map(|s| history.session_named(s))
            .transpose()?
    };
    let comments: Vec<Comment> = history
        .comments()?
        .into_iter()
        .filter(|c| a.all || c.resolved.is_none())
        .filter(|c| session.as_ref().is_none_or(|s| c.session == *s))
        .collect();
    if let Some(note) = note
        && !a.json
    {
        env.println(note)?;
    }
    if a.mine && comments.is_empty() && !a.json {
        env.println(&format!(
            "no open comments{}",
            session
                .map(|s| format!(" for session {}", escape_text(&s)))
                .unwrap_or_default()
        ))?;
    }
    for c in &comments {
        let context = context(env, c);
        let out = if a.json {
            format!("{}\n", comment_json(c, context.as_deref()))
        } else {
            block(c, context.as_deref())
        };
        env.print(&out)?;
    }
    Ok(Outcome::Done)
}

/// The changes a comment's target selects.
fn selector(c: &Comment) -> Selection {
    match c.target {
        Target::Change(id) => Selection {
            change: Some(id),
            ..Selection::default()
        },
        Target::Turn(n) => Selection {
            turn: Some(format!("{}:{n}", c.session)),
            ..Selection::default()
        },
        Target::Session => Selection {
            session: Some(c.session.clone()),
            ..Selection::default()
        },
    }
}

/// The line a comment is about (`L: text`, as the target left the file), or its hunk's `@@`
/// header. None when there is none, or it cannot be read any more (gc, a binary file).
fn context(env: &Env<'_>, c: &Comment) -> Option<String> {
    let path = c.path.as_ref()?;
    let selected = rollback::select(env.history, &selector(c)).ok()?;
    if let Some(k) = c.hunk {
        let sections = netdiff::sections_of(&env.view(), &selected, path).ok()?;
        let hunks: Vec<hunk::Hunk> = sections.iter().flat_map(|s| hunk::parse(&s.text)).collect();
        let h = hunks.get((k as usize).checked_sub(1)?)?;
        return Some(escape_text(&String::from_utf8_lossy(&h.header)));
    }
    let l = c.line?;
    let last = selected.iter().rev().find(|ch| ch.touches(path))?;
    let content = env.view().content_at(path, last.id).ok()??;
    let line = *hunk::lines(&content).get((l as usize).checked_sub(1)?)?;
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    Some(format!(
        "{l}: {}",
        escape_text(&String::from_utf8_lossy(line))
    ))
}

/// What the comment is on, with its file and line or hunk.
fn on(c: &Comment) -> String {
    let mut out = escape_text(&c.target_name());
    if let Some(p) = &c.path {
        out += &format!(", {}", escape_path(p));
        if let Some(l) = c.line {
            out += &format!(" line {l}");
        }
        if let Some(k) = c.hunk {
            out += &format!(" hunk {k}");
        }
    }
    out
}

/// A comment for people (and agents reading `.rewind/comments`): a header, who and when, the
/// line it is about, then its text, each line indented; a blank line after.
pub fn block(c: &Comment, context: Option<&str>) -> String {
    let state = if c.resolved.is_some() {
        "resolved"
    } else {
        "open"
    };
    let mut out = format!(
        "comment {} ({state}) on {} (session {})\n  by {} (uid {}), {}\n",
        c.id,
        on(c),
        escape_text(&c.session),
        escape_text(&c.author),
        c.uid,
        time::short(c.time_ns)
    );
    if let Some(line) = context {
        out += &format!("  > {line}\n");
    }
    for line in c.text.lines() {
        out += &format!("    {line}\n");
    }
    out.push('\n');
    out
}

/// A comment as one JSON object.
pub fn comment_json(c: &Comment, context: Option<&str>) -> Value {
    let (change, turn) = match c.target {
        Target::Change(id) => (Some(id), None),
        Target::Turn(n) => (None, Some(format!("{}:{n}", c.session))),
        Target::Session => (None, None),
    };
    json!({
        "id": c.id,
        "time": time::rfc3339(c.time_ns),
        "author": c.author,
        "uid": c.uid,
        "session": c.session,
        "change": change,
        "turn": turn,
        "path": c.path.as_ref().map(|p| String::from_utf8_lossy(p).into_owned()),
        "line": c.line,
        "hunk": c.hunk,
        "context": context,
        "text": c.text,
        "state": if c.resolved.is_some() { "resolved" } else { "open" },
        "resolved_time": c.resolved.map(|(t, _)| time::rfc3339(t)),
    })
}
