//! Rollback: put every path a selection of changes touched back to its state just before the
//! earliest selected change to it.
//!
//! Planning only reads (the store, and the workspace through a [`Source`]). Executing acts on the
//! workspace *through the mount* with ordinary syscalls, so the daemon records each step like any
//! other change — as kind `restore`, agent `rewind`, in a session of its own (the attributor is
//! told which thread is restoring) — and the kernel's caches stay right.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::recorder::Source;
use super::view::View;
use crate::error::{Error, IoResultExt, Result};
use crate::store::{Change, ChangeKind, FileKind, FileState, Order, Query, Store};

/// Which changes to undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Change(u64),
    Session(String),
    Agent(String),
    /// Every change after this change id.
    Since(u64),
    /// One path's changes after this change id (`None`: its newest change only).
    File(Vec<u8>, Option<u64>),
}

/// One path to put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub path: Vec<u8>,
    /// What it should become (`None`: it should not exist).
    pub target: Option<FileState>,
    /// What it is now.
    pub now: Option<FileState>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Paths left alone, and why.
    pub skipped: Vec<(Vec<u8>, String)>,
}

/// The changes a selector picks, oldest first.
pub fn select(store: &Store, selector: &Selector) -> Result<Vec<Change>> {
    let q = |q: Query| {
        store.query(&Query {
            order: Order::OldestFirst,
            ..q
        })
    };
    Ok(match selector {
        Selector::Change(id) => vec![
            store
                .change(*id)?
                .ok_or_else(|| Error::NotFound(format!("there is no change {id}")))?,
        ],
        Selector::Session(s) => q(Query {
            session: Some(s.clone()),
            ..Query::default()
        })?,
        Selector::Agent(a) => q(Query {
            agent: Some(a.clone()),
            ..Query::default()
        })?,
        Selector::Since(id) => q(Query {
            after_id: Some(*id),
            ..Query::default()
        })?,
        Selector::File(path, Some(id)) => q(Query {
            path: Some(path.clone()),
            after_id: Some(*id),
            ..Query::default()
        })?,
        Selector::File(path, None) => store
            .last_change_until(path, u64::MAX)?
            .into_iter()
            .collect(),
    })
}

/// Work out what a rollback of `selected` would do.
pub fn plan(store: &Store, source: &dyn Source, selected: &[Change], force: bool) -> Result<Plan> {
    let view = View { store, source };
    let ids: HashSet<u64> = selected.iter().map(|c| c.id).collect();
    // Every path touched, with the earliest selected change to it. A folder renamed within the
    // selection brings everything below both of its names.
    let mut first: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let note = |p: &[u8], id: u64, first: &mut BTreeMap<Vec<u8>, u64>| {
        let e = first.entry(p.to_vec()).or_insert(id);
        *e = (*e).min(id);
    };
    for c in selected {
        note(&c.path, c.id, &mut first);
        if let Some(from) = &c.from {
            note(from, c.id, &mut first);
        }
        let is_dir = |s: &Option<FileState>| s.as_ref().is_some_and(|s| s.kind == FileKind::Dir);
        if c.kind == ChangeKind::Rename && (is_dir(&c.after) || is_dir(&c.before)) {
            for dir in [Some(&c.path), c.from.as_ref()].into_iter().flatten() {
                let mut below = BTreeSet::new();
                for at in [c.id - 1, store.last_id()?] {
                    collect_below(&view, dir, at, &mut below)?;
                }
                for p in below {
                    note(&p, c.id, &mut first);
                }
            }
        }
    }
    let mut plan = Plan::default();
    for (path, since) in &first {
        if !force {
            let later = store.query(&Query {
                path: Some(path.clone()),
                after_id: Some(*since),
                ..Query::default()
            })?;
            if let Some(c) = later.iter().find(|c| !ids.contains(&c.id)) {
                plan.skipped.push((
                    path.clone(),
                    format!(
                        "changed later by change {} ({}@{}); use --force",
                        c.id, c.agent, c.session
                    ),
                ));
                continue;
            }
        }
        let target = view.state_at(path, since - 1)?;
        let now = view.state_at(path, u64::MAX)?;
        let (target, now) = (target.state().cloned(), now.state().cloned());
        if let Some(t) = &target
            && t.kind == FileKind::File
            && t.hash.is_none()
        {
            plan.skipped.push((
                path.clone(),
                "its earlier content was never recorded".into(),
            ));
            continue;
        }
        if same(&target, &now) {
            continue;
        }
        plan.steps.push(Step {
            path: path.clone(),
            target,
            now,
        });
    }
    Ok(plan)
}

/// Paths below `dir` at point `at`, recursively.
fn collect_below(view: &View<'_>, dir: &[u8], at: u64, out: &mut BTreeSet<Vec<u8>>) -> Result<()> {
    for (name, state) in view.list_at(dir, at)? {
        let mut p = dir.to_vec();
        p.push(b'/');
        p.extend_from_slice(&name);
        if state.kind == FileKind::Dir {
            collect_below(view, &p, at, out)?;
        }
        out.insert(p);
    }
    Ok(())
}

fn same(a: &Option<FileState>, b: &Option<FileState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.kind == b.kind && a.mode == b.mode && (a.kind == FileKind::Dir || a.hash == b.hash)
        }
        _ => false,
    }
}

/// What a step does, for `--dry-run` and reports.
pub fn describe(step: &Step) -> String {
    let path = String::from_utf8_lossy(&step.path);
    match (&step.now, &step.target) {
        (_, None) => format!("remove   {path}"),
        (None, Some(t)) => format!("restore  {path} ({})", t.kind.as_str()),
        (Some(n), Some(t)) if n.kind == t.kind && n.hash == t.hash => {
            format!("chmod    {path} ({:o} -> {:o})", n.mode, t.mode)
        }
        (Some(_), Some(t)) => format!("revert   {path} ({})", t.kind.as_str()),
    }
}

/// Carry out a plan on the workspace mounted at `root`. Returns the paths that failed.
pub fn execute(store: &Store, root: &Path, plan: &Plan) -> Vec<(Vec<u8>, String)> {
    let abs = |p: &[u8]| root.join(std::ffi::OsStr::from_bytes(p));
    let mut failed = Vec::new();
    // Removals first, deepest first, so folders are empty when their turn comes.
    let mut removals: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| {
            s.now.is_some()
                && s.target
                    .as_ref()
                    .is_none_or(|t| Some(t.kind) != s.now.as_ref().map(|n| n.kind))
        })
        .collect();
    removals.sort_by(|a, b| b.path.cmp(&a.path));
    for s in removals {
        let p = abs(&s.path);
        let r = if s.now.as_ref().is_some_and(|n| n.kind == FileKind::Dir) {
            fs::remove_dir(&p)
        } else {
            fs::remove_file(&p)
        };
        if let Err(e) = r {
            failed.push((s.path.clone(), e.to_string()));
        }
    }
    // Then what should exist, parents first.
    let mut puts: Vec<&Step> = plan.steps.iter().filter(|s| s.target.is_some()).collect();
    puts.sort_by(|a, b| a.path.cmp(&b.path));
    for s in puts {
        let t = s.target.as_ref().expect("filtered");
        if let Err(e) = put(store, &abs(&s.path), t) {
            failed.push((s.path.clone(), e.to_string()));
        }
    }
    failed
}

fn put(store: &Store, p: &Path, t: &FileState) -> Result<()> {
    match t.kind {
        FileKind::Dir => {
            if !p.is_dir() {
                fs::create_dir(p).with_path(p)?;
            }
            fs::set_permissions(p, fs::Permissions::from_mode(t.mode)).with_path(p)
        }
        FileKind::File => {
            let hash = t
                .hash
                .ok_or_else(|| Error::NotFound("content never recorded".into()))?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(p)
                .with_path(p)?;
            store.read_blob_to(&hash, &mut f)?;
            f.flush().with_path(p)?;
            drop(f);
            fs::set_permissions(p, fs::Permissions::from_mode(t.mode)).with_path(p)
        }
        FileKind::Symlink => {
            let hash = t
                .hash
                .ok_or_else(|| Error::NotFound("target never recorded".into()))?;
            let target = store.read_blob(&hash)?;
            if fs::symlink_metadata(p).is_ok() {
                fs::remove_file(p).with_path(p)?;
            }
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), p).with_path(p)
        }
        FileKind::Special => Err(Error::Invalid("special files are not restored".into())),
    }
}

/// The name of the next rollback session: `rollback-N`.
pub fn next_session(store: &Store) -> Result<String> {
    let n = store
        .sessions()?
        .iter()
        .filter_map(|s| s.name.strip_prefix("rollback-")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    Ok(format!("rollback-{}", n + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sameness_ignores_directory_content_but_not_mode() {
        let dir = |mode| {
            Some(FileState {
                kind: FileKind::Dir,
                size: 0,
                mode,
                hash: None,
            })
        };
        assert!(same(&dir(0o755), &dir(0o755)));
        assert!(!same(&dir(0o755), &dir(0o700)));
        assert!(!same(&dir(0o755), &None));
    }
}
