//! `rewind diff`.
//!
//! Two kinds of diff. A *range* (`--since`, `--from`/`--to`) compares the whole tree at two
//! points, like `git diff A B`. A *selection* (a change id, `--session`, `--agent`, `--turn`)
//! shows what those changes did and nothing else: a path's consecutive selected changes are one
//! section, and where someone outside the selection changed the path in between, the output
//! says so there and starts a new section from what that change left. Either way the output is
//! git's extended format, applied in order by `git apply`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::change::{Change, FileKind, FileState};
use crate::history::diff::{self, Side};
use crate::history::format::{escape_path, escape_text};
use crate::history::turns::TurnRef;
use crate::history::{Error, Result, point};
use crate::store::{Order, Query};

/// Show what changed, in git's diff format: one change (ID), what a session, agent or agent
/// turn did, everything since a point, or between two points. `git apply` takes it.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// A change id, then paths to limit the diff to (with no selection flag, a first word that
    /// is a number is a change id; write `--` before paths that are numbers).
    #[arg(value_name = "ID | PATH")]
    pub words: Vec<PathBuf>,
    /// What a session did.
    #[arg(long)]
    pub session: Option<String>,
    /// What an agent did.
    #[arg(long)]
    pub agent: Option<String>,
    /// What one agent turn did: SESSION:N, N, or the agent's prompt id.
    #[arg(long, value_name = "TURN")]
    pub turn: Option<String>,
    /// Everything after this point, up to now.
    #[arg(long, value_name = "POINT", conflicts_with_all = ["from", "session", "agent", "turn"])]
    pub since: Option<String>,
    /// From this point...
    #[arg(long, value_name = "POINT", conflicts_with_all = ["session", "agent", "turn"])]
    pub from: Option<String>,
    /// ...to this one (default: now).
    #[arg(long, value_name = "POINT", requires = "from")]
    pub to: Option<String>,
    /// Only a summary, as `git diff --stat` prints it.
    #[arg(long)]
    pub stat: bool,
    /// Paths given after `--` are always paths.
    #[arg(last = true, hide = true)]
    pub paths: Vec<PathBuf>,
}

/// One side of a file section.
#[derive(Clone)]
struct Version {
    path: Vec<u8>,
    state: FileState,
    content: Vec<u8>,
}

/// What the output is made of, in order.
enum Piece {
    Section {
        old: Option<Version>,
        new: Option<Version>,
        /// A rename found by comparing content, with git's score.
        score: Option<u32>,
    },
    Note(String),
}

pub fn run(args: &DiffArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let history = env.history;
    let selecting = args.session.is_some() || args.agent.is_some() || args.turn.is_some();
    let ranging = args.since.is_some() || args.from.is_some();
    let mut words = args.words.clone();
    let id = if !selecting && !ranging {
        let first = words.first().and_then(|w| w.to_str()).map(str::to_string);
        match first.and_then(|w| w.parse::<u64>().ok()) {
            Some(id) => {
                words.remove(0);
                Some(id)
            }
            None => {
                return Err(Error::Usage(
                    "say what to compare: a change id, --session, --agent, --turn, --since or \
                     --from"
                        .into(),
                ));
            }
        }
    } else {
        None
    };
    let filter: Vec<Vec<u8>> = words
        .iter()
        .chain(&args.paths)
        .map(|p| env.rel_path(p))
        .collect::<Result<_>>()?;
    let pieces = if ranging {
        let (from, to) = match (&args.since, &args.from, &args.to) {
            (Some(p), _, _) => (point::resolve(p, history)?, history.last_id()?),
            (_, Some(p), None) => (point::resolve(p, history)?, history.last_id()?),
            (_, Some(p), Some(t)) => (point::resolve(p, history)?, point::resolve(t, history)?),
            _ => unreachable!("ranging"),
        };
        range(env, from, to, &filter)?
    } else {
        let selected = match id {
            Some(id) => vec![history.get(id)?],
            None => select(env, args)?,
        };
        selection(env, &selected, &filter)?
    };
    emit(env, &pieces, args.stat)?;
    Ok(Outcome::Done)
}

fn select(env: &Env<'_>, args: &DiffArgs) -> Result<Vec<Change>> {
    let history = env.history;
    let mut q = Query {
        session: args.session.clone(),
        agent: args.agent.clone(),
        order: Order::OldestFirst,
        ..Query::default()
    };
    let mut turn = None;
    if let Some(t) = &args.turn {
        let found = TurnRef::parse(t).resolve(history, args.session.as_deref())?;
        q.session = Some(found.session.clone());
        q.after_id = Some(found.start_id);
        turn = Some(found.number);
    }
    Ok(history
        .query(&q)?
        .into_iter()
        .filter(|c| turn.is_none_or(|n| c.turn == Some(n)))
        .collect())
}

fn wanted(filter: &[Vec<u8>], path: &[u8]) -> bool {
    filter.is_empty()
        || filter.iter().any(|f| {
            f.is_empty()
                || path == f.as_slice()
                || (path.starts_with(f) && path.get(f.len()) == Some(&b'/'))
        })
}

/// A state with its content, unless it is not something git diffs (folders, special files).
fn version(env: &Env<'_>, path: &[u8], state: Option<&FileState>) -> Result<Option<Version>> {
    let Some(state) = state else {
        return Ok(None);
    };
    if !matches!(state.kind, FileKind::File | FileKind::Symlink) {
        return Ok(None);
    }
    let content = match state.hash {
        Some(h) => env.history.store().read_blob(&h)?,
        None if state.size == 0 => Vec::new(),
        None => {
            return Err(Error::NotRecorded {
                path: escape_path(path),
                why: "it changed while rewind was not mounted",
            });
        }
    };
    Ok(Some(Version {
        path: path.to_vec(),
        state: state.clone(),
        content,
    }))
}

/// The selection's own changes, path by path, with what others did in between said.
fn selection(env: &Env<'_>, selected: &[Change], filter: &[Vec<u8>]) -> Result<Vec<Piece>> {
    let ids: BTreeSet<u64> = selected.iter().map(|c| c.id).collect();
    // (first id, piece), sorted at the end so `git apply` meets them in the order they happened.
    let mut pieces: Vec<(u64, Piece)> = Vec::new();
    // Content changes, path by path: runs of consecutive selected changes.
    let mut by_path: BTreeMap<Vec<u8>, Vec<&Change>> = BTreeMap::new();
    for c in selected {
        if let (Some(from), Some(after)) = (&c.from, &c.after) {
            // A rename: its own section, content as it moved.
            if wanted(filter, &c.path) || wanted(filter, from) {
                let old = version(env, from, Some(after))?;
                let new = version(env, &c.path, Some(after))?;
                if old.is_some() || new.is_some() {
                    pieces.push((
                        c.id,
                        Piece::Section {
                            old,
                            new,
                            score: None,
                        },
                    ));
                }
            }
            continue;
        }
        if wanted(filter, &c.path) {
            by_path.entry(c.path.clone()).or_default().push(c);
        }
    }
    for (path, changes) in by_path {
        let mut run: Vec<&Change> = Vec::new();
        let flush = |run: &mut Vec<&Change>, pieces: &mut Vec<(u64, Piece)>| -> Result<()> {
            if let (Some(first), Some(last)) = (run.first(), run.last()) {
                let old = version(env, &path, first.states_of(&path).0)?;
                let new = version(env, &path, last.states_of(&path).1)?;
                pieces.push((
                    first.id,
                    Piece::Section {
                        old,
                        new,
                        score: None,
                    },
                ));
            }
            run.clear();
            Ok(())
        };
        for c in changes {
            if let Some(prev) = run.last() {
                let between: Vec<Change> = env
                    .history
                    .query(&Query {
                        path: Some(path.clone()),
                        after_id: Some(prev.id),
                        until_id: Some(c.id - 1),
                        ..Query::default()
                    })?
                    .into_iter()
                    .filter(|b| !ids.contains(&b.id))
                    .collect();
                if let (Some(first), Some(last)) = (between.first(), between.last()) {
                    flush(&mut run, &mut pieces)?;
                    let who: BTreeSet<String> = between
                        .iter()
                        .map(|b| format!("{}@{}", escape_text(&b.agent), escape_text(&b.session)))
                        .collect();
                    let span = if first.id == last.id {
                        format!("change {}", first.id)
                    } else {
                        format!("changes {}..{}", first.id, last.id)
                    };
                    pieces.push((
                        first.id,
                        Piece::Note(format!(
                            "# {} was changed in between by {} ({span}), not shown; what follows starts from there\n",
                            escape_path(&path),
                            who.into_iter().collect::<Vec<_>>().join(", ")
                        )),
                    ));
                }
            }
            run.push(c);
        }
        flush(&mut run, &mut pieces)?;
    }
    pieces.sort_by_key(|(id, _)| *id);
    Ok(pieces.into_iter().map(|(_, p)| p).collect())
}

/// The whole tree at `from` against the tree at `to`, for the paths changed in between.
fn range(env: &Env<'_>, from: u64, to: u64, filter: &[Vec<u8>]) -> Result<Vec<Piece>> {
    let (lo, hi) = (from.min(to), from.max(to));
    let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
    env.history.for_each(
        &Query {
            after_id: Some(lo),
            until_id: Some(hi),
            ..Query::default()
        },
        |c| {
            paths.insert(c.path.clone());
            paths.extend(c.from.clone());
            paths.extend(c.links.iter().cloned());
            true
        },
    )?;
    let view = env.view();
    let mut olds = Vec::new();
    let mut news = Vec::new();
    for path in paths.into_iter().filter(|p| wanted(filter, p)) {
        olds.extend(version(env, &path, view.state_at(&path, from)?.state())?);
        news.extend(version(env, &path, view.state_at(&path, to)?.state())?);
    }
    let opts = diff::Options::default();
    let old_sides: Vec<Side<'_>> = olds.iter().map(as_side).collect();
    let new_sides: Vec<Side<'_>> = news.iter().map(as_side).collect();
    // git's pairing (renames by content) and order.
    Ok(diff::plan_tree_diff(&old_sides, &new_sides, &opts)
        .into_iter()
        .map(|p| Piece::Section {
            old: p.old.map(|i| olds[i].clone()),
            new: p.new.map(|i| news[i].clone()),
            score: p.rename_score,
        })
        .collect())
}

fn as_side(v: &Version) -> Side<'_> {
    Side {
        path: &v.path,
        mode: diff::git_mode(&v.state),
        content: &v.content,
    }
}

fn side(v: &Option<Version>) -> Option<Side<'_>> {
    v.as_ref().map(as_side)
}

fn emit(env: &mut Env<'_>, pieces: &[Piece], stat: bool) -> Result<()> {
    let opts = diff::Options {
        color: env.color,
        ..diff::Options::default()
    };
    if stat {
        let stats: Vec<diff::Stat> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Section { old, new, .. } => {
                    Some(diff::Stat::from_sides(side(old), side(new), &opts))
                }
                Piece::Note(_) => None,
            })
            .collect();
        if stats.is_empty() {
            return Ok(());
        }
        let out = diff::stat(&stats, env.width, env.color);
        return env.write(&out);
    }
    for p in pieces {
        match p {
            Piece::Section {
                old,
                new,
                score: Some(score),
            } if old.is_some() && new.is_some() => {
                let (Some(o), Some(n)) = (side(old), side(new)) else {
                    continue;
                };
                env.write(&diff::rename_diff(o, n, *score, &opts))?;
            }
            Piece::Section { old, new, .. } => {
                let out = diff::file_diff(side(old), side(new), &opts);
                env.write(&out)?;
            }
            Piece::Note(n) => env.print(n)?,
        }
    }
    Ok(())
}
