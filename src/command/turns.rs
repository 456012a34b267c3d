//! `rewind turns`.

use std::collections::BTreeSet;

use clap::Args;
use serde_json::json;

use super::env::{Env, Outcome};
use crate::history::change::{FileKind, FileState, Turn};
use crate::history::diff;
use crate::history::format::escape_text;
use crate::history::{Result, time};
use crate::store::Query;

/// List agent turns (one per prompt): number, when, the prompt, how many files it changed and
/// how many lines it added and removed. Roll one back with `rewind rollback --turn SESSION:N`.
#[derive(Debug, Args)]
pub struct TurnsArgs {
    /// Only this session's turns.
    #[arg(long)]
    pub session: Option<String>,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// Files changed, lines added and removed by a turn's changes.
pub fn summary(env: &Env<'_>, turn: &Turn) -> Result<(usize, usize, usize)> {
    let changes: Vec<_> = env
        .history
        .query(&Query {
            session: Some(turn.session.clone()),
            after_id: Some(turn.start_id),
            until_id: turn.end_id,
            ..Query::default()
        })?
        .into_iter()
        .filter(|c| c.turn == Some(turn.number))
        .collect();
    let mut files = BTreeSet::new();
    let (mut added, mut removed) = (0, 0);
    let content = |s: Option<&FileState>| -> Vec<u8> {
        s.filter(|s| s.kind == FileKind::File)
            .and_then(|s| s.hash)
            .and_then(|h| env.history.store().read_blob(&h).ok())
            .unwrap_or_default()
    };
    for c in &changes {
        // Files, as `diff --stat` counts them: a folder made or removed is not one.
        let is_dir = |s: Option<&FileState>| s.is_none_or(|s| s.kind == FileKind::Dir);
        if is_dir(c.before.as_ref()) && is_dir(c.after.as_ref()) {
            continue;
        }
        files.insert(c.path.clone());
        if c.from.is_some() {
            continue;
        }
        let (old, new) = (content(c.before.as_ref()), content(c.after.as_ref()));
        let side = |content| diff::Side {
            path: &c.path,
            mode: 0o100644,
            content,
        };
        let s = diff::Stat::from_sides(
            Some(side(&old)),
            Some(side(&new)),
            &diff::Options::default(),
        );
        if !s.binary {
            added += s.added as usize;
            removed += s.deleted as usize;
        }
    }
    Ok((files.len(), added, removed))
}

pub fn run(args: &TurnsArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let turns = env.history.turns(args.session.as_deref())?;
    for t in &turns {
        let (files, added, removed) = summary(env, t)?;
        let line = if args.json {
            json!({
                "session": t.session, "turn": t.number, "prompt": t.prompt, "prompt_id": t.prompt_id,
                "agent": t.agent, "time": time::rfc3339(t.start_time_ns),
                "end_time": t.end_time_ns.map(time::rfc3339),
                "start_id": t.start_id, "end_id": t.end_id,
                "files": files, "added": added, "removed": removed,
            })
            .to_string()
        } else {
            format!(
                "{}:{:<3} {}  {:>3} files  +{:<5} -{:<5} {}{}",
                escape_text(&t.session),
                t.number,
                time::short(t.start_time_ns),
                files,
                added,
                removed,
                escape_text(&t.prompt),
                if t.end_id.is_none() { "  (open)" } else { "" }
            )
        };
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
