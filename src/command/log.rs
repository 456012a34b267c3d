//! `rewind log`.

use std::path::PathBuf;

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::change::Change;
use crate::history::format::{change_json, change_line};
use crate::history::turns::TurnRef;
use crate::history::{History, Result, point};
use crate::store::{Order, Query};

/// A session as the user wrote it (a unique beginning of its name will do).
pub fn session_arg(history: &History, given: Option<&str>) -> Result<Option<String>> {
    given.map(|s| history.session_named(s)).transpose()
}

/// Whether change `c` touches folder `dir` or anything below it, under any of its names.
fn touches(c: &Change, dir: &[u8]) -> bool {
    std::iter::once(&c.path)
        .chain(&c.from)
        .chain(&c.links)
        .any(|n| n.starts_with(dir) && matches!(n.get(dir.len()), None | Some(b'/')))
}

/// Show the history, newest last: one change a line, or one JSON object a line with --json.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only changes to this path (or, for renames, from it; or to another name of its file); for
    /// a folder, also to everything below it.
    pub path: Option<PathBuf>,
    /// Only changes of this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only changes by this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only changes of this agent turn (SESSION:N, N, or the agent's prompt id).
    #[arg(long, value_name = "TURN")]
    pub turn: Option<String>,
    /// Only changes after this point (a change id, checkpoint, time, or duration ago).
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
    /// Only changes up to this point.
    #[arg(long, value_name = "POINT")]
    pub until: Option<String>,
    /// At most N changes (the newest N).
    #[arg(short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &LogArgs, env: &mut Env<'_>) -> Result<Outcome> {
    if args.limit == Some(0) {
        return Ok(Outcome::Done);
    }
    let history = env.history;
    let mut q = Query {
        session: session_arg(history, args.session.as_deref())?,
        agent: args.agent.clone(),
        order: Order::NewestFirst,
        ..Query::default()
    };
    let mut turn = None;
    if let Some(t) = &args.turn {
        let found = TurnRef::parse(t).resolve(history, q.session.as_deref())?;
        q.session = Some(found.session.clone());
        q.after_id = Some(found.start_id);
        turn = Some(found.number);
    }
    // A folder's log is everything below it too (and the whole workspace's, everything).
    let mut below: Option<Vec<u8>> = None;
    if let Some(p) = &args.path {
        let rel = env.rel_path(p)?;
        let mut prefix = rel.clone();
        prefix.push(b'/');
        if !rel.is_empty() && history.paths_with_prefix(&prefix)?.is_empty() {
            q.path = Some(rel);
        } else if !rel.is_empty() {
            below = Some(rel);
        }
    }
    if let Some(p) = &args.since {
        let id = point::resolve_since(p, history)?;
        q.after_id = Some(q.after_id.map_or(id, |a| a.max(id)));
    }
    if let Some(p) = &args.until {
        q.until_id = Some(point::resolve(p, history)?);
    }
    let limit = args.limit.unwrap_or(usize::MAX);
    let mut changes = Vec::new();
    history.for_each(&q, |c| {
        if turn.is_none_or(|n| c.turn == Some(n)) && below.as_ref().is_none_or(|d| touches(&c, d)) {
            changes.push(c);
        }
        changes.len() < limit
    })?;
    changes.reverse();
    let mut note = history.cut_note(q.session.as_deref(), q.agent.as_deref(), turn)?;
    // The whole history (or a path's): say where what gc removed ends, unless the log starts
    // after it.
    if q.session.is_none()
        && q.agent.is_none()
        && let Some(h) = history.horizon()?
        && q.after_id.is_none_or(|a| a < h.id)
    {
        note = Some(format!(
            "note: {}",
            crate::history::format::horizon_line(&h)
        ));
    }
    if let Some(note) = note.filter(|_| !args.json) {
        env.println(&note)?;
    }
    for c in &changes {
        let line = if args.json {
            change_json(c).to_string()
        } else {
            change_line(c)
        };
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
