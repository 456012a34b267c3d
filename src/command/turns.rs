//! `rewind turns`.

use std::collections::{BTreeMap, BTreeSet};

use clap::Args;
use serde_json::json;

use super::env::{Env, Outcome};
use crate::history::change::{Change, FileKind, FileState, Turn};
use crate::history::diff;
use crate::history::format::escape_text;
use crate::history::{Resolved, Result, Selection, time};

/// List agent turns (one per prompt): number, when, the prompt, how many files it changed and
/// how many lines it added and removed, and whether a rollback has put it back. Roll one back
/// with `rewind rollback --turn SESSION:N`.
#[derive(Debug, Args)]
pub struct TurnsArgs {
    /// Only this session's turns.
    #[arg(long)]
    pub session: Option<String>,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// A turn's changes, oldest first.
fn changes_of(env: &Env<'_>, turn: &Turn) -> Result<Vec<Change>> {
    Resolved::of_turn(turn).changes(env.history)
}

/// Files changed, lines added and removed by a turn's changes.
pub fn summary(env: &Env<'_>, turn: &Turn) -> Result<(usize, usize, usize)> {
    stats(env, &changes_of(env, turn)?)
}

fn stats(env: &Env<'_>, changes: &[Change]) -> Result<(usize, usize, usize)> {
    let mut files = BTreeSet::new();
    let (mut added, mut removed) = (0, 0);
    let content = |s: Option<&FileState>| -> Vec<u8> {
        s.filter(|s| s.kind == FileKind::File)
            .and_then(|s| s.hash)
            .and_then(|h| env.history.store().read_blob(&h).ok())
            .unwrap_or_default()
    };
    for c in changes {
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

/// Whether two states are the same file as far as a rollback restores one: type, mode and
/// content (content never recorded matches any).
fn same(a: Option<&FileState>, b: Option<&FileState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.kind == b.kind
                && a.mode == b.mode
                && (a.hash.is_none() || b.hash.is_none() || a.hash == b.hash)
        }
        _ => false,
    }
}

/// How far rollbacks put back what a turn did.
struct RolledBack {
    /// The rollback sessions that did, in order.
    by: Vec<String>,
    /// Whether every path the turn changed was put back.
    whole: bool,
}

/// Which rollbacks undid a turn, read from the history: a path the turn changed counts as put
/// back when a change of a `rollback-N` session after the turn's last change to it left it as
/// it was before the turn's first. (What a later rollback of that rollback did is its own
/// story.) `restores`: every rollback change, by path.
fn rolled_back(turn: &[Change], restores: &BTreeMap<&[u8], Vec<&Change>>) -> Option<RolledBack> {
    // Each path the turn changed: its state before the turn, and the turn's last change to it.
    let mut paths: BTreeMap<&[u8], (Option<&FileState>, u64)> = BTreeMap::new();
    for c in turn {
        for p in std::iter::once(&c.path).chain(&c.from) {
            let entry = paths
                .entry(p.as_slice())
                .or_insert((c.states_of(p).0, c.id));
            entry.1 = c.id;
        }
    }
    let mut by: Vec<String> = Vec::new();
    let mut put_back = 0;
    for (path, (before, last)) in &paths {
        let undo = restores.get(path).and_then(|rs| {
            rs.iter()
                .find(|r| r.id > *last && same(r.states_of(path).1, *before))
        });
        if let Some(r) = undo {
            put_back += 1;
            if !by.contains(&r.session) {
                by.push(r.session.clone());
            }
        }
    }
    (put_back > 0).then_some(RolledBack {
        by,
        whole: put_back == paths.len(),
    })
}

pub fn run(args: &TurnsArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let selection = Selection {
        session: args.session.clone(),
        ..Selection::default()
    };
    let session = selection.resolve(env.history)?.session;
    let turns = env.history.turns(session.as_deref())?;
    if turns.is_empty() && !args.json {
        env.println(&match &session {
            Some(s) => format!("no turns in session {}", escape_text(s)),
            None => "no turns: they come from an agent's hooks; set them up with `rewind agent \
                     install AGENT` (claude, codex, gemini, cursor or opencode)"
                .to_string(),
        })?;
        return Ok(Outcome::Done);
    }
    // Every change a rollback made since the first turn began, by path.
    let rollback_changes = match turns.iter().map(|t| t.start_id).min() {
        Some(first) => Resolved {
            agent: Some("rewind".into()),
            after: Some(first),
            ..Resolved::default()
        }
        .changes(env.history)?,
        None => Vec::new(),
    };
    let mut restores: BTreeMap<&[u8], Vec<&Change>> = BTreeMap::new();
    for r in rollback_changes
        .iter()
        .filter(|r| r.session.starts_with("rollback-"))
    {
        for p in std::iter::once(&r.path).chain(&r.from) {
            restores.entry(p.as_slice()).or_default().push(r);
        }
    }
    // A session gc cut says so first, as `log` and `diff` of it do; its turns that lost
    // changes say so on their line.
    if !args.json {
        let mut noted = BTreeSet::new();
        for t in &turns {
            if noted.insert(t.session.as_str())
                && let Some(note) = env.history.cut_note(Some(&t.session), None, None)?
            {
                env.println(&note)?;
            }
        }
    }
    for t in &turns {
        let changes = changes_of(env, t)?;
        let cut = matches!(
            env.history.check_whole_turn(&t.session, t.number),
            Err(crate::history::Error::Cut { .. })
        );
        let (files, added, removed) = stats(env, &changes)?;
        let undone = rolled_back(&changes, &restores);
        let line = if args.json {
            json!({
                "session": t.session, "turn": t.number, "prompt": t.prompt, "prompt_id": t.prompt_id,
                "agent": t.agent, "time": time::rfc3339(t.start_time_ns),
                "end_time": t.end_time_ns.map(time::rfc3339),
                "start_id": t.start_id, "end_id": t.end_id,
                "files": files, "added": added, "removed": removed,
                "rolled_back_by": undone.as_ref().map_or(Vec::new(), |u| u.by.clone()),
                "rolled_back": undone.as_ref().map(|u| if u.whole { "whole" } else { "part" }),
                "cut": cut,
            })
            .to_string()
        } else {
            format!(
                "{}:{:<3} {}  {:>3} {:<6}  +{:<5} -{:<5} {}{}{}{}",
                escape_text(&t.session),
                t.number,
                time::short(t.start_time_ns),
                files,
                if files == 1 { "file" } else { "files" },
                added,
                removed,
                escape_text(&t.prompt),
                if t.end_id.is_none() { "  (open)" } else { "" },
                if cut { "  (gc removed part of it)" } else { "" },
                match &undone {
                    Some(u) => format!(
                        "  ({}rolled back by {})",
                        if u.whole { "" } else { "partly " },
                        u.by.join(", ")
                    ),
                    None => String::new(),
                }
            )
        };
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
