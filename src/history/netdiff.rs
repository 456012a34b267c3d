//! Net diffs: what a selection of changes did, or what changed between two points, as the file
//! sections of one git-format diff (`rewind diff`, and the review page). Beside the rollback
//! plan, as both start from a [`super::selection::Resolved`]'s changes.
//!
//! Two kinds. A *range* ([`range`]) compares the whole tree at two points, like `git diff A
//! B`. A *selection* ([`of_changes`]) shows what those changes did and nothing else, as one
//! tree diff from what they found to what they left (each file once, renames paired); where
//! someone outside the selection changed one of its paths between two of its changes, a
//! [`Piece::Note`] says so there and a new tree diff goes on from what that change left.
//! Either way the pieces, written in order, are applied by `git apply`.

use std::collections::{BTreeMap, BTreeSet};

use super::change::{Change, FileKind, FileState};
use super::diff::{self, Side};
use super::format::{escape_path, escape_text};
use super::view::View;
use super::{Error, Result};
use crate::store::Query;

/// One side of a file section.
#[derive(Clone)]
pub struct Version {
    pub path: Vec<u8>,
    pub state: FileState,
    pub content: Vec<u8>,
}

/// What the output is made of, in order.
pub enum Piece {
    Section {
        old: Option<Box<Version>>,
        new: Option<Box<Version>>,
        /// A rename found by comparing content, with git's score.
        score: Option<u32>,
    },
    Note(String),
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
fn version(view: &View<'_>, path: &[u8], state: Option<&FileState>) -> Result<Option<Version>> {
    let Some(state) = state else {
        return Ok(None);
    };
    if !matches!(state.kind, FileKind::File | FileKind::Symlink) {
        return Ok(None);
    }
    let content = match state.hash {
        Some(h) => view.history.store().read_blob(&h)?,
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

/// The selection's own changes, with what others did in between said. The selected changes
/// are cut where someone else changed one of their paths between two of them; each part is
/// shown as one tree diff (a file once, renames paired as git pairs them), from what the
/// selection found to what it left, so `git apply` takes the parts in order.
pub fn of_changes(view: &View<'_>, selected: &[Change], filter: &[Vec<u8>]) -> Result<Vec<Piece>> {
    let ids: BTreeSet<u64> = selected.iter().map(|c| c.id).collect();
    // Every path the selection touched, with the ids of the selected changes to it.
    let mut touched: BTreeMap<&[u8], Vec<u64>> = BTreeMap::new();
    for c in selected {
        for p in names_of(c) {
            touched.entry(p).or_default().push(c.id);
        }
    }
    // Where others changed a path between two selected changes to it: a cut, and a note.
    let mut cuts: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (path, path_ids) in &touched {
        for pair in path_ids.windows(2) {
            if pair[1] <= pair[0] + 1 {
                continue;
            }
            let between: Vec<Change> = view
                .history
                .query(&Query {
                    path: Some(path.to_vec()),
                    after_id: Some(pair[0]),
                    until_id: Some(pair[1] - 1),
                    ..Query::default()
                })?
                .into_iter()
                .filter(|b| !ids.contains(&b.id))
                .collect();
            let (Some(first), Some(last)) = (between.first(), between.last()) else {
                continue;
            };
            if !wanted(filter, path) {
                cuts.entry(first.id).or_default();
                continue;
            }
            let who: BTreeSet<String> = between
                .iter()
                .map(|b| format!("{}@{}", escape_text(&b.agent), escape_text(&b.session)))
                .collect();
            let span = if first.id == last.id {
                format!("change {}", first.id)
            } else {
                format!("changes {}..{}", first.id, last.id)
            };
            cuts.entry(first.id).or_default().push(format!(
                "# {} was changed in between by {} ({span}), not shown; what follows starts from there\n",
                escape_path(path),
                who.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let mut pieces = Vec::new();
    let mut rest = selected;
    let bounds = cuts.into_iter().map(Some).chain([None]);
    let mut notes: Vec<String> = Vec::new();
    for bound in bounds {
        let until = bound.as_ref().map_or(u64::MAX, |(id, _)| *id);
        let split = rest
            .iter()
            .position(|c| c.id >= until)
            .unwrap_or(rest.len());
        let (part, later) = rest.split_at(split);
        if !part.is_empty() {
            pieces.extend(notes.drain(..).map(Piece::Note));
            pieces.extend(net_diff(view, part, filter)?);
        }
        rest = later;
        if let Some((_, more)) = bound {
            notes.extend(more);
        }
    }
    Ok(pieces)
}

/// The paths a change touches: its own, the one it was renamed from, and the file's other
/// names.
fn names_of(c: &Change) -> impl Iterator<Item = &[u8]> {
    std::iter::once(c.path.as_slice())
        .chain(c.from.as_deref())
        .chain(c.links.iter().map(Vec::as_slice))
}

/// What `changes` (in order, no one else's between them on their paths) did, as one tree diff:
/// each path from the state the first of them found to the state the last left.
fn net_diff(view: &View<'_>, changes: &[Change], filter: &[Vec<u8>]) -> Result<Vec<Piece>> {
    let mut net = Net::default();
    let mut i = 0;
    while i < changes.len() {
        let c = &changes[i];
        i += 1;
        let Some(from) = c.from.as_deref().filter(|f| *f != c.path.as_slice()) else {
            for p in names_of(c) {
                let (was, now) = c.states_of(p);
                net.set(p, version(view, p, was)?, version(view, p, now)?);
            }
            continue;
        };
        // A rename: an exchange is recorded as two, one each way, with one time.
        let back = changes.get(i).filter(|b| {
            b.time_ns == c.time_ns
                && b.path.as_slice() == from
                && b.from.as_deref() == Some(c.path.as_slice())
        });
        if back.is_some() {
            i += 1;
        }
        let moved_dir = c.after.as_ref().is_some_and(|a| a.kind == FileKind::Dir);
        let back_dir =
            back.is_some_and(|b| b.after.as_ref().is_some_and(|a| a.kind == FileKind::Dir));
        // What was below a folder moved with it, each file as it was.
        let mut moves = Vec::new();
        if moved_dir {
            moves.push((from, c.path.as_slice()));
        }
        if let Some(b) = back.filter(|_| back_dir) {
            moves.push((c.path.as_slice(), b.path.as_slice()));
        }
        let mut moved = Vec::new();
        for (old_dir, new_dir) in moves {
            let mut below = BTreeSet::new();
            files_below(view, old_dir, c.id - 1, &mut below)?;
            for rel in below {
                let old = [old_dir, rel.as_slice()].concat();
                let new = [new_dir, rel.as_slice()].concat();
                let state = match net.after.get(&old) {
                    Some(v) => v.clone(),
                    None => version_at(view, &old, c.id - 1)?,
                };
                moved.push((old, new, state));
            }
        }
        for (old, _, state) in &moved {
            net.set(old, state.clone(), None);
        }
        for (_, new, state) in moved {
            let was = version_at(view, &new, c.id - 1)?;
            net.set(
                &new,
                was,
                state.map(|v| Version {
                    path: new.clone(),
                    ..v
                }),
            );
        }
        match back {
            Some(back) => {
                net.set(
                    &c.path,
                    version(view, &c.path, c.before.as_ref())?,
                    version(view, &c.path, c.after.as_ref())?,
                );
                net.set(
                    from,
                    version(view, from, back.before.as_ref())?,
                    version(view, from, back.after.as_ref())?,
                );
            }
            None => {
                net.set(from, version(view, from, c.after.as_ref())?, None);
                net.set(
                    &c.path,
                    version(view, &c.path, c.before.as_ref())?,
                    version(view, &c.path, c.after.as_ref())?,
                );
            }
        }
    }
    let mut olds = Vec::new();
    let mut news = Vec::new();
    for (path, was) in net.before {
        if wanted(filter, &path) {
            olds.extend(was);
            news.extend(net.after.remove(&path).flatten());
        }
    }
    Ok(tree_diff(olds, news))
}

/// Two lists of files (each path at most once per list) as git pairs and orders them.
fn tree_diff(olds: Vec<Version>, news: Vec<Version>) -> Vec<Piece> {
    let opts = diff::Options::default();
    let old_sides: Vec<Side<'_>> = olds.iter().map(as_side).collect();
    let new_sides: Vec<Side<'_>> = news.iter().map(as_side).collect();
    diff::plan_tree_diff(&old_sides, &new_sides, &opts)
        .into_iter()
        .map(|p| Piece::Section {
            old: p.old.map(|i| Box::new(olds[i].clone())),
            new: p.new.map(|i| Box::new(news[i].clone())),
            score: p.rename_score,
        })
        .collect()
}

/// What `path` was right after change `at`, with its content (read where it is now if it has
/// not changed since), unless it is not something git diffs.
fn version_at(view: &View<'_>, path: &[u8], at: u64) -> Result<Option<Version>> {
    let Some(state) = view.state_at(path, at)?.state().cloned() else {
        return Ok(None);
    };
    if !matches!(state.kind, FileKind::File | FileKind::Symlink) {
        return Ok(None);
    }
    let Some(content) = view.content_at(path, at)? else {
        return Ok(None);
    };
    Ok(Some(Version {
        path: path.to_vec(),
        state,
        content,
    }))
}

/// Each path's version before the first of some changes and after the last.
#[derive(Default)]
struct Net {
    before: BTreeMap<Vec<u8>, Option<Version>>,
    after: BTreeMap<Vec<u8>, Option<Version>>,
}

impl Net {
    fn set(&mut self, path: &[u8], was: Option<Version>, now: Option<Version>) {
        self.before.entry(path.to_vec()).or_insert(was);
        self.after.insert(path.to_vec(), now);
    }
}

/// The files and symlinks below folder `dir` right after change `at`, as paths relative to
/// it ("/name", "/sub/name").
fn files_below(view: &View<'_>, dir: &[u8], at: u64, out: &mut BTreeSet<Vec<u8>>) -> Result<()> {
    for (path, state) in view.below_at(dir, at)? {
        if state.kind != FileKind::Dir {
            out.insert(path[dir.len()..].to_vec());
        }
    }
    Ok(())
}

/// The whole tree at `from` against the tree at `to`, for the paths changed in between (and
/// what was below a folder renamed in between).
pub fn range(view: &View<'_>, from: u64, to: u64, filter: &[Vec<u8>]) -> Result<Vec<Piece>> {
    let (lo, hi) = (from.min(to), from.max(to));
    let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut folder_renames = Vec::new();
    view.history.for_each(
        &Query {
            after_id: Some(lo),
            until_id: Some(hi),
            ..Query::default()
        },
        |c| {
            paths.extend(names_of(&c).map(<[u8]>::to_vec));
            if let Some(from) = &c.from
                && c.after.as_ref().is_some_and(|a| a.kind == FileKind::Dir)
            {
                folder_renames.push((c.id, from.clone(), c.path.clone()));
            }
            true
        },
    )?;
    for (id, old_dir, new_dir) in folder_renames {
        let mut below = BTreeSet::new();
        files_below(view, &old_dir, id - 1, &mut below)?;
        // An exchange moves what was below the other name too.
        files_below(view, &new_dir, id - 1, &mut below)?;
        for rel in below {
            paths.insert([old_dir.as_slice(), rel.as_slice()].concat());
            paths.insert([new_dir.as_slice(), rel.as_slice()].concat());
        }
    }
    let mut olds = Vec::new();
    let mut news = Vec::new();
    for path in paths.into_iter().filter(|p| wanted(filter, p)) {
        olds.extend(version_at(view, &path, from)?);
        news.extend(version_at(view, &path, to)?);
    }
    Ok(tree_diff(olds, news))
}

/// A version as the diff code takes it.
pub fn as_side(v: &Version) -> Side<'_> {
    Side {
        path: &v.path,
        mode: diff::diff_mode(&v.state),
        content: &v.content,
    }
}

/// One file's part of a selection's diff, as `rewind diff` prints it (without colour).
pub struct FileSection {
    /// Its git text: headers and hunks.
    pub text: Vec<u8>,
    /// Either side is binary (git prints no hunks).
    pub binary: bool,
    /// Either side is a symlink (its hunks are a link's target, not a file's lines).
    pub symlink: bool,
    /// The file is gone after it (a deletion).
    pub deleted: bool,
}

/// The sections of `path` (its name after; a deleted file's name before) in the diff of
/// `selected`, in the order `rewind diff` of that selection prints them: hunk K of a file is
/// counted over these, as the user saw them.
pub fn sections_of(view: &View<'_>, selected: &[Change], path: &[u8]) -> Result<Vec<FileSection>> {
    let opts = diff::Options {
        binary: true,
        ..diff::Options::default()
    };
    let mut out = Vec::new();
    for piece in of_changes(view, selected, &[])? {
        let Piece::Section { old, new, score } = piece else {
            continue;
        };
        let named = new.as_deref().or(old.as_deref()).map(|v| v.path.as_slice());
        if named != Some(path) {
            continue;
        }
        let text = match (
            old.as_deref().map(as_side),
            new.as_deref().map(as_side),
            score,
        ) {
            (Some(o), Some(n), Some(score)) => diff::rename_diff(o, n, score, &opts),
            (o, n, _) => diff::file_diff(o, n, &opts),
        };
        let sides = || old.iter().chain(new.iter());
        out.push(FileSection {
            text,
            binary: sides().any(|v| diff::is_binary(&v.content)),
            symlink: sides().any(|v| v.state.kind == FileKind::Symlink),
            deleted: new.is_none(),
        });
    }
    Ok(out)
}

/// The paths the diff of `selected` shows (each file's name after; a deleted file's before).
pub fn paths_of(view: &View<'_>, selected: &[Change]) -> Result<BTreeSet<Vec<u8>>> {
    Ok(of_changes(view, selected, &[])?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Section { old, new, .. } => new.or(old).map(|v| v.path),
            Piece::Note(_) => None,
        })
        .collect())
}
