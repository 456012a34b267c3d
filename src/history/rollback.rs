//! Rollback: put every path a selection of changes touched back to its state just before the
//! earliest selected change to it.
//!
//! Planning only reads (the history, and the workspace through a [`Source`]). Carrying a plan
//! out goes through [`Apply`], which the filesystem implements on the directory underneath the
//! mount with the same code as its own operations, so every step is recorded like any other
//! change (kind `restore`, agent `rewind`, in a session of its own) and nothing follows a
//! symlink out of the workspace.
//!
//! A path is skipped (unless forced) when someone outside the selection changed it between the
//! selection's first and last change to it, when it is no longer as the selection left it, or
//! when a process holds it open for writing. What the tree would make fail (a folder that still
//! holds entries the rollback leaves, content that cannot be read, a device node a plain user
//! cannot make) is a skip in
//! the plan too, so the dry run is exactly what the run does.
//! So a rollback that was itself undone does not stand in the way of rolling back the same
//! selection again: the path is back to what the selection left.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};

use super::change::{Change, ChangeKind, FileKind, FileState, Node};
use super::selection::Selection;
use super::view::{Then, View};
use super::{Error, History, Result, show_path};
use crate::store::Query;

/// One path to put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub path: Vec<u8>,
    /// What it should become (`None`: it should not exist).
    pub target: Option<FileState>,
    /// What it is now.
    pub now: Option<FileState>,
    /// Where the target state is now, if it was never recorded (unchanged since before the
    /// first mount) and a folder rename has moved it: its content is kept from there before
    /// anything is touched ([`keep_moved_content`]).
    pub moved_to: Option<Vec<u8>>,
    /// Processes that hold the file open for writing (a forced rollback only: otherwise the
    /// path is skipped).
    pub open_by: Vec<Writer>,
    /// Another name of the file this path was a name of (a hard link), which it becomes a name
    /// of again instead of being written: a name restored before it, or left as it is.
    pub link_to: Option<Vec<u8>>,
    /// The path's file has names it did not have just before the selection, and the path was
    /// made anew since: it is made again as a file of its own (its other names keep the file),
    /// not changed in place.
    pub separate: bool,
}

/// A process that holds a file open for writing through the mount (an open write episode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub path: Vec<u8>,
    pub pid: u32,
    pub process: String,
    pub session: String,
    /// What the file held when this edit began (`None`: the edit made it), as stored.
    pub before: Option<FileState>,
    /// What is at its path now, its content unknown (`hash: None`: it is being written).
    pub now: Option<FileState>,
}

/// A file being written that a rollback takes in ([`open_writes_selected`]).
#[derive(Clone, Debug)]
pub struct Writing {
    pub path: Vec<u8>,
    pub before: Option<FileState>,
    pub now: Option<FileState>,
}

impl std::fmt::Display for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} ({}) of session {}",
            self.pid, self.process, self.session
        )
    }
}

/// The files processes hold open for writing now, and what the data path lets a rollback do
/// with them (the filesystem knows; the plan must, so that the dry run is the run).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenFiles {
    pub writers: Vec<Writer>,
    /// The kernel keeps its own size of a file open for writing (FUSE's writeback cache: a
    /// mount without passthrough). Rewritten in place, the writer would go on past a hole of
    /// zeros, so such a file is not restored, even with `--force`.
    pub cached: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Paths left alone, and why.
    pub skipped: Vec<(Vec<u8>, String)>,
    /// Every file rewritten in place, whatever other names it has: a hunk revert changes the
    /// file as it is now, seen through every name, as an editor's save would.
    pub in_place: bool,
}

/// The changes a rollback of `selection` undoes, oldest first. A rollback names one thing:
/// a change, a session, an agent, a turn, a session from a turn on, everything since a point,
/// or one file (its newest change, or its changes since a point). A session, agent or turn gc
/// cut is refused: undoing the rest would pass it off as the whole.
pub fn select(history: &History, selection: &Selection) -> Result<Vec<Change>> {
    let s = selection;
    let things = [
        s.change.is_some(),
        s.session.is_some(),
        s.agent.is_some(),
        s.turn.is_some(),
        s.to_turn.is_some(),
        s.since.is_some() || s.from.is_some() || s.path.is_some(),
    ];
    if things.iter().filter(|x| **x).count() > 1 || s.until.is_some() {
        return Err(Error::Usage(
            "say one thing to roll back: --session, --agent, --turn, --to-turn, --since, \
             --to, or --file (with --to)"
                .into(),
        ));
    }
    if !things.contains(&true) {
        return Err(Error::Usage("say what to roll back".into()));
    }
    let r = s.resolve(history)?;
    r.check_whole(history)?;
    // One file is the path as given (a folder's own changes), and alone, its newest change.
    match (&r.path, r.after) {
        (Some(path), None) => Ok(history
            .last_change_until(path, u64::MAX)?
            .into_iter()
            .collect()),
        (Some(path), Some(after)) => history.query(&Query {
            path: Some(path.clone()),
            after_id: Some(after),
            ..Query::default()
        }),
        (None, _) => r.changes(history),
    }
}

/// The files open for writing now whose unrecorded edits `selection` takes in: an edit in
/// progress is a change still to come, by its writer's session, after every recorded one. So
/// everything since a point, or a file since a point, takes in every such edit (of that file),
/// and a session, or a session from a turn on, its own writers'. A change, a turn, an agent or
/// a file's last change take in none. [`plan`] skips them as held open, or with `--force`
/// records what they wrote first and puts back what was there before.
pub fn open_writes_selected(
    history: &History,
    selection: &Selection,
    open: &OpenFiles,
) -> Result<Vec<Writing>> {
    if open.writers.is_empty() {
        return Ok(Vec::new());
    }
    let r = selection.resolve(history)?;
    let takes = |w: &Writer| {
        if r.change.is_some() || r.turn.is_some() || r.agent.is_some() {
            return false;
        }
        if let Some(t) = &r.to_turn {
            return w.session == t.session;
        }
        if let Some(s) = &r.session {
            return w.session == *s;
        }
        match (&r.path, r.after) {
            // As `select` takes one file's changes: the path's own.
            (Some(p), Some(_)) => w.path == *p,
            (None, Some(_)) => true,
            _ => false,
        }
    };
    let mut paths: Vec<Writing> = open
        .writers
        .iter()
        .filter(|w| takes(w))
        .map(|w| Writing {
            path: w.path.clone(),
            before: w.before.clone(),
            now: w.now.clone(),
        })
        .collect();
    paths.sort_by(|a, b| a.path.cmp(&b.path));
    paths.dedup_by(|a, b| a.path == b.path);
    Ok(paths)
}

/// Work out what a rollback of `selected` would do. The plan is the whole of it: the dry run
/// prints it and the run carries out exactly its steps, so everything known to stand in the
/// way (someone else's change, an open writer, content that cannot be read, a folder that
/// still holds entries the rollback leaves, a kind of file that is not restored) is a skip
/// here, not a failure later. `open` says which files are open for writing now.
/// `writing`: files whose edits in progress the selection takes in
/// ([`open_writes_selected`]), each with what it held when its edit began: put back, unless
/// a selected change to it came first.
pub fn plan(
    view: &View<'_>,
    selected: &[Change],
    writing: &[Writing],
    force: bool,
    open: &OpenFiles,
) -> Result<Plan> {
    let history = view.history;
    let ids: HashSet<u64> = selected.iter().map(|c| c.id).collect();
    // Every path touched, with the earliest and latest selected change to it. A folder renamed
    // within the selection brings everything below both of its names.
    let mut span: BTreeMap<Vec<u8>, (u64, u64)> = BTreeMap::new();
    let note = |p: &[u8], id: u64, span: &mut BTreeMap<Vec<u8>, (u64, u64)>| {
        let e = span.entry(p.to_vec()).or_insert((id, id));
        e.0 = e.0.min(id);
        e.1 = e.1.max(id);
    };
    for c in selected {
        note(&c.path, c.id, &mut span);
        for other in c.from.iter().chain(&c.links) {
            note(other, c.id, &mut span);
        }
        let is_dir = |s: &Option<FileState>| s.as_ref().is_some_and(|s| s.kind == FileKind::Dir);
        if c.kind == ChangeKind::Rename && (is_dir(&c.after) || is_dir(&c.before)) {
            for dir in [Some(&c.path), c.from.as_ref()].into_iter().flatten() {
                let mut below = BTreeSet::new();
                // What was below either name just before the rename and just after it (the
                // rename touched all of it, although a later change may have moved it on),
                // and what is below it now.
                for at in [c.id - 1, c.id, history.last_id()?] {
                    below.extend(view.below_at(dir, at)?.into_iter().map(|(p, _)| p));
                }
                for p in below {
                    note(&p, c.id, &mut span);
                }
            }
        }
    }
    // An edit in progress comes after every recorded change: the state it began from is the
    // target, where no selected change to the file came before it.
    let mut began_from: HashMap<&[u8], &Writing> = HashMap::new();
    let after_all = history.last_id()? + 1;
    for w in writing {
        if !span.contains_key(&w.path) {
            span.insert(w.path.clone(), (after_all, after_all));
            began_from.insert(&w.path, w);
        }
    }
    let mut plan = Plan::default();
    // Paths that hold what they should, whose file may still have to be linked again (or
    // made one of its own again): a name can be put back as a file of its own with the same
    // content, by the selection itself (`rm a; mkfifo a` of a FIFO `a` linked to `b`).
    let mut kept: Vec<(Vec<u8>, FileState)> = Vec::new();
    for (path, (first, last)) in &span {
        let (then, place) = view.located(path, first - 1)?;
        let writing = began_from.get(path.as_slice());
        let (target, moved_to) = match writing {
            Some(w) => (w.before.clone(), None),
            None => (
                then.state().cloned(),
                (matches!(then, Then::Current(_)) && place != *path).then_some(place),
            ),
        };
        let open_by: Vec<Writer> = open
            .writers
            .iter()
            .filter(|w| w.path == *path)
            .cloned()
            .collect();
        // A file being written holds what its writer has made of it so far, whatever a reading
        // view shows (the dry run's reads it as recorded, the run's as it is): its content is
        // unknown, so the dry run and the run plan alike.
        let (now, unrecorded) = match (writing, open_by.first()) {
            (Some(w), _) => (w.now.clone(), false),
            (None, Some(w)) => (w.now.clone(), false),
            (None, None) => view.now(path)?,
        };
        // Something the ignore rules left unrecorded is there now (a build made `out/x` again
        // once `.gitignore` named `out/`): putting the recorded file back would destroy what
        // no history holds, forced or not.
        if unrecorded && target.is_some() {
            plan.skipped.push((
                path.clone(),
                "something the ignore rules leave unrecorded is there now; move it away to \
                 restore the recorded one"
                    .into(),
            ));
            continue;
        }
        // Without passthrough, a file open for writing cannot be rewritten in place (see
        // `OpenFiles::cached`), forced or not: the writer is who to name.
        if open.cached
            && let Some(w) = open_by.first()
            && rewrites_in_place(&target, &now)
        {
            plan.skipped.push((
                path.clone(),
                format!(
                    "held open for writing by {w}, and without passthrough (a mount by a user \
                     other than root) the kernel would keep its old size for that process; stop \
                     it, or roll back once it has closed the file"
                ),
            ));
            continue;
        }
        // A file open for writing is someone else's work in progress (what it wrote so far is
        // not recorded yet): the writer is who to name.
        if !force
            && let Some(w) = open_by.first()
            && !same(&target, &now)
        {
            plan.skipped.push((
                path.clone(),
                format!("held open for writing by {w}; use --force"),
            ));
            continue;
        }
        if !force && let Some(why) = conflict(view, &ids, path, *first, *last, &now)? {
            plan.skipped.push((path.clone(), why));
            continue;
        }
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
            if let Some(t) = target {
                kept.push((path.clone(), t));
            }
            continue;
        }
        if let Some(why) = cannot_restore(view, target.as_ref(), moved_to.as_deref()) {
            plan.skipped.push((path.clone(), why));
            continue;
        }
        plan.steps.push(Step {
            path: path.clone(),
            target,
            now,
            moved_to,
            open_by,
            link_to: None,
            separate: false,
        });
    }
    keep_tree_whole(view, &mut plan, open);
    link_again(view, selected, &span, &kept, &mut plan)?;
    plan.skipped.sort();
    Ok(plan)
}

/// The other names `path`'s file had just before change `c` (which touches it), as far as the
/// history knows: the groups of a change that took a name from a linked file, or the names a
/// change to a linked file lists.
fn names_before(c: &Change, path: &[u8]) -> Vec<Vec<u8>> {
    let others = |names: &mut dyn Iterator<Item = &Vec<u8>>| -> Vec<Vec<u8>> {
        names.filter(|n| n.as_slice() != path).cloned().collect()
    };
    if let Some(group) = c.groups.iter().find(|g| g.iter().any(|n| n == path)) {
        return others(&mut group.iter());
    }
    if !c.links.is_empty() && (c.path == path || c.links.iter().any(|l| l == path)) {
        return others(&mut std::iter::once(&c.path).chain(&c.links));
    }
    Vec::new()
}

/// Names that were one file (hard links) just before the selection are made one file again,
/// not separate copies, and a name that was a file of its own is made one again.
///
/// Of the names the plan puts back as a file (a symlink, a special file) and those that hold
/// what they should already (`kept`), those whose names were linked, with the same type,
/// content and mode, become links to one of them (the anchor): a name left out of the plan
/// that still holds that state, else a kept one, else the first, which is put back normally.
/// A kept name that is the anchor's file already needs nothing. An anchor the selection made
/// anew whose file now has names beyond its group (or any at all, for a group of one) is made
/// a file of its own first.
fn link_again(
    view: &View<'_>,
    selected: &[Change],
    span: &BTreeMap<Vec<u8>, (u64, u64)>,
    kept: &[(Vec<u8>, FileState)],
    plan: &mut Plan,
) -> Result<()> {
    let by_id: HashMap<u64, &Change> = selected.iter().map(|c| (c.id, c)).collect();
    // The first selected change (they are oldest first) that took each name from the file it
    // named (see `taken_by`): the file a name has after it is not the one it had before.
    let mut taken: HashMap<&[u8], u64> = HashMap::new();
    for c in selected {
        for path in taken_by(c) {
            taken.entry(path).or_insert(c.id);
        }
    }
    // What can have several names: anything but a folder (a symlink and a device too, as
    // `link(2)` does not follow).
    let file = |st: Option<&FileState>| {
        st.filter(|f| match f.kind {
            FileKind::Dir => false,
            FileKind::File | FileKind::Symlink => f.hash.is_some(),
            FileKind::Special(_) => true,
        })
        .cloned()
    };
    let alike =
        |a: &FileState, b: &FileState| a.kind == b.kind && a.hash == b.hash && a.mode == b.mode;
    // Every name that can be linked again: its path, what it should be, and its step if the
    // plan puts it back (`None`: it holds that already). By path.
    let mut names: Vec<(Vec<u8>, FileState, Option<usize>)> = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((s.path.clone(), file(s.target.as_ref())?, Some(i))))
        .chain(
            kept.iter()
                .filter_map(|(p, t)| Some((p.clone(), file(Some(t))?, None))),
        )
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let index: HashMap<&[u8], usize> = names
        .iter()
        .enumerate()
        .map(|(n, (p, ..))| (p.as_slice(), n))
        .collect();
    let stepped: HashSet<&[u8]> = plan.steps.iter().map(|s| s.path.as_slice()).collect();
    let skipped: HashSet<&[u8]> = plan.skipped.iter().map(|(p, _)| p.as_slice()).collect();
    // Names linked to each other (union-find by index), and names outside the plan to link to.
    let mut root: Vec<usize> = (0..names.len()).collect();
    fn find(root: &mut [usize], i: usize) -> usize {
        let mut i = i;
        while root[i] != i {
            root[i] = root[root[i]];
            i = root[i];
        }
        i
    }
    let mut outside: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    for (n, (path, target, _)) in names.iter().enumerate() {
        let Some((first, c)) = span
            .get(path)
            .and_then(|(first, _)| Some((*first, *by_id.get(first)?)))
        else {
            continue;
        };
        for other in names_before(c, path) {
            if let Some(&m) = index.get(other.as_slice()) {
                // The other name was this file when `c` was made; it is what it goes back to
                // only if no earlier selected change took that name from the file it had
                // before the selection.
                if alike(&names[m].1, target)
                    && taken.get(other.as_slice()).is_none_or(|id| *id > first)
                {
                    let (a, b) = (find(&mut root, n), find(&mut root, m));
                    root[a.max(b)] = a.min(b);
                }
            } else if !stepped.contains(other.as_slice())
                && !skipped.contains(other.as_slice())
                && !outside.contains_key(&n)
                && file(view.state_at(&other, u64::MAX)?.state())
                    .is_some_and(|now| alike(&now, target))
            {
                outside.insert(n, other);
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for n in 0..names.len() {
        groups.entry(find(&mut root, n)).or_default().push(n);
    }
    let step = |path: &[u8], t: &FileState, link_to: Option<Vec<u8>>| Step {
        path: path.to_vec(),
        target: Some(t.clone()),
        now: Some(t.clone()),
        moved_to: None,
        open_by: Vec::new(),
        link_to,
        separate: false,
    };
    let mut added: Vec<Step> = Vec::new();
    for members in groups.into_values() {
        let outside_anchor = members.iter().find_map(|n| outside.get(n).cloned());
        // Members are by path: the first is put back normally when nothing holds the state.
        let anchor = outside_anchor.clone().unwrap_or_else(|| {
            let first = members
                .iter()
                .find(|n| names[**n].2.is_none())
                .unwrap_or(&members[0]);
            names[*first].0.clone()
        });
        // The anchor is made a file of its own if its file has names it should not have: more
        // than the group's names that are that file now. Only a name the selection made anew
        // (a name of another file before it): a name given to a file by a change outside the
        // selection stays.
        let mut separate = false;
        if outside_anchor.is_none() && taken.contains_key(anchor.as_slice()) {
            let a = index[anchor.as_slice()];
            let (path, target, step_of) = &names[a];
            let sharing = members
                .iter()
                .filter(|m| **m == a || one_file(view, &names[**m].0, path))
                .count() as libc::nlink_t;
            if view
                .source
                .lstat(path)
                .is_ok_and(|st| st.st_nlink > sharing)
            {
                match cannot_restore(view, Some(target), None) {
                    Some(why) => plan.skipped.push((
                        path.clone(),
                        format!("cannot make it a file of its own again: {why}"),
                    )),
                    None => {
                        separate = true;
                        match step_of {
                            // A put of another type makes a new file anyway.
                            Some(i) => {
                                let s = &mut plan.steps[*i];
                                s.separate = s.now.as_ref().is_some_and(|n| n.kind == target.kind);
                            }
                            None => added.push(Step {
                                separate: true,
                                ..step(path, target, None)
                            }),
                        }
                    }
                }
            }
        }
        let anchor_put = separate
            || index
                .get(anchor.as_slice())
                .is_some_and(|a| names[*a].2.is_some());
        for n in members {
            let (path, target, step_of) = &names[n];
            if *path == anchor {
                continue;
            }
            match step_of {
                Some(i) => plan.steps[*i].link_to = Some(anchor.clone()),
                // Linked after the anchor is put back (a new file, maybe), or now if it is not.
                None if anchor_put || !one_file(view, path, &anchor) => {
                    added.push(step(path, target, Some(anchor.clone())));
                }
                None => {}
            }
        }
    }
    if !added.is_empty() {
        plan.steps.extend(added);
        plan.steps.sort_by(|a, b| a.path.cmp(&b.path));
    }
    Ok(())
}

/// The names `c` takes from the files they name: a name removed, renamed away, or given
/// another file (created, linked or renamed over).
fn taken_by(c: &Change) -> impl Iterator<Item = &[u8]> {
    let replaced = c.before.is_none() || c.after.is_none() || c.from.is_some();
    c.from
        .as_deref()
        .into_iter()
        .chain(replaced.then_some(c.path.as_slice()))
}

/// Whether two paths are names of one file now.
fn one_file(view: &View<'_>, a: &[u8], b: &[u8]) -> bool {
    match (view.source.lstat(a), view.source.lstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// Why a target state cannot be put back, if it cannot: a special file whose type was not
/// recorded, a device node where the daemon may not make one (only root may), and content
/// that is not readable whole (from the store, or from the later name of a folder that
/// moved, for content never recorded).
fn cannot_restore(
    view: &View<'_>,
    target: Option<&FileState>,
    moved_to: Option<&[u8]>,
) -> Option<String> {
    let t = target?;
    match t.kind {
        FileKind::Special(Node::Unknown) => {
            return Some(
                "its type was not recorded (an earlier rewind kept only \"special file\")".into(),
            );
        }
        FileKind::Special(Node::Char(_) | Node::Block(_))
            if !rustix::process::geteuid().is_root() =>
        {
            return Some("only root may make a device node".into());
        }
        _ => {}
    }
    if !matches!(t.kind, FileKind::File | FileKind::Symlink) {
        return None;
    }
    let Some(hash) = t.hash else {
        return Some("its earlier content was never recorded".into());
    };
    let store = view.history.store();
    if let Some(at) = moved_to
        && !store.has_blob(&hash).unwrap_or(false)
    {
        // Kept from there just before the run (`keep_moved_content`).
        return (hash_now(view, t.kind, at).as_ref() != Some(&hash))
            .then(|| "its earlier content, under the folder's new name, has changed".into());
    }
    store
        .verify_blob(&hash)
        .err()
        .map(|e| format!("cannot read its earlier content: {e}"))
}

/// The content hash of a file or symlink in the workspace now, as the store would hash it.
fn hash_now(view: &View<'_>, kind: FileKind, path: &[u8]) -> Option<crate::store::Hash> {
    match kind {
        FileKind::File => {
            let mut f = view.source.open_read(path).ok()?;
            let mut hasher = blake3::Hasher::new();
            std::io::copy(&mut f, &mut hasher).ok()?;
            Some(crate::store::Hash(*hasher.finalize().as_bytes()))
        }
        FileKind::Symlink => Some(crate::store::Hash::of(&view.source.readlink(path).ok()?)),
        _ => None,
    }
}

/// Turn into skips the steps the tree around them would make fail: the removal (or
/// replacement) of a folder that still holds entries the plan leaves there, and anything to
/// put in a folder that will not be there. Repeated until nothing changes, since one skip can
/// leave a folder above it full, or a path below it without its folder.
fn keep_tree_whole(view: &View<'_>, plan: &mut Plan, open: &OpenFiles) {
    let removes = |s: &Step| {
        s.now.is_some()
            && s.target
                .as_ref()
                .is_none_or(|t| Some(t.kind) != s.now.as_ref().map(|n| n.kind))
    };
    loop {
        let by_path: HashMap<&[u8], &Step> = plan.steps.iter().map(|s| (&s.path[..], s)).collect();
        let mut skip: Vec<(usize, String)> = Vec::new();
        for (i, s) in plan.steps.iter().enumerate() {
            if s.now.as_ref().is_some_and(|n| n.kind == FileKind::Dir) && removes(s) {
                let names = match view.source.read_dir(&s.path) {
                    Ok(names) => names,
                    Err(e) => {
                        skip.push((i, format!("cannot list what it holds: {e}")));
                        continue;
                    }
                };
                let mut left: Vec<Vec<u8>> = Vec::new();
                for name in names {
                    let child = join(&s.path, &name);
                    if !by_path.get(&child[..]).is_some_and(|c| removes(c)) {
                        left.push(child);
                    }
                }
                // And a file being written below it that the plan skips: a reading view (a dry
                // run's) may not list it, its create not recorded yet.
                for (skipped, _) in &plan.skipped {
                    if skipped.starts_with(&s.path)
                        && skipped.get(s.path.len()) == Some(&b'/')
                        && open.writers.iter().any(|w| w.path == *skipped)
                    {
                        left.push(skipped.clone());
                    }
                }
                if !left.is_empty() {
                    left.sort();
                    left.dedup();
                    skip.push((i, holds(&left)));
                    continue;
                }
            }
            if s.target.is_some()
                && let Some(slash) = s.path.iter().rposition(|b| *b == b'/')
            {
                let parent = &s.path[..slash];
                let dir_then = match by_path.get(parent) {
                    Some(p) => p.target.as_ref().is_some_and(|t| t.kind == FileKind::Dir),
                    None => view
                        .source
                        .lstat(parent)
                        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
                };
                if !dir_then {
                    skip.push((
                        i,
                        format!(
                            "its folder {} is not restored",
                            super::format::escape_path(parent)
                        ),
                    ));
                }
            }
        }
        if skip.is_empty() {
            return;
        }
        for (i, why) in skip.into_iter().rev() {
            let s = plan.steps.remove(i);
            plan.skipped.push((s.path, why));
        }
    }
}

/// "still holds a, b and 3 more, which the rollback leaves": the entries that keep a folder.
fn holds(left: &[Vec<u8>]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = left
        .iter()
        .take(SHOWN)
        .map(|p| super::format::escape_path(p))
        .collect();
    if left.len() > SHOWN {
        names.push(format!("{} more", left.len() - SHOWN));
    }
    format!(
        "still holds {}, which the rollback leaves; it is kept",
        names.join(", ")
    )
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// Why rolling back `path` would undo someone else's work, if it would: a change outside the
/// selection between its first and last selected change, or a present state that is not what
/// the selection left.
fn conflict(
    view: &View<'_>,
    ids: &HashSet<u64>,
    path: &[u8],
    first: u64,
    last: u64,
    now: &Option<FileState>,
) -> Result<Option<String>> {
    let describe = |c: &Change| {
        format!(
            "changed by change {} ({}@{}) in between; use --force",
            c.id, c.agent, c.session
        )
    };
    let between = view.history.query(&Query {
        path: Some(path.to_vec()),
        after_id: Some(first),
        until_id: Some(last),
        ..Query::default()
    })?;
    if let Some(c) = between.iter().find(|c| !ids.contains(&c.id)) {
        return Ok(Some(describe(c)));
    }
    let left = view.state_at(path, last)?.state().cloned();
    if same(&left, now) {
        return Ok(None);
    }
    let later = view.history.query(&Query {
        path: Some(path.to_vec()),
        after_id: Some(last),
        ..Query::default()
    })?;
    // Changed since only by rollbacks that put it back to where the selection had it at some
    // step (`rollback --turn S:2`, then `rollback --session S`): nobody's work is in the way.
    let by_rollbacks_only = later
        .iter()
        .filter(|c| !ids.contains(&c.id))
        .all(|c| c.kind == ChangeKind::Restore && c.session.starts_with("rollback-"));
    if by_rollbacks_only {
        let within = view.history.query(&Query {
            path: Some(path.to_vec()),
            after_id: Some(first.saturating_sub(1)),
            until_id: Some(last),
            ..Query::default()
        })?;
        let as_the_selection_had_it = within.iter().filter(|c| ids.contains(&c.id)).any(|c| {
            let (before, after) = c.states_of(path);
            same(&before.cloned(), now) || same(&after.cloned(), now)
        });
        if as_the_selection_had_it {
            return Ok(None);
        }
    }
    Ok(Some(
        match later.iter().rev().find(|c| !ids.contains(&c.id)) {
            Some(c) => format!(
                "changed later by change {} ({}@{}); use --force",
                c.id, c.agent, c.session
            ),
            None => match view.place_now(path, last)? {
                // Not changed: moved, with a folder above it, by a change outside the
                // selection (no change names the path itself).
                Some(moved) if moved != path => format!(
                    "moved since to {} with a folder above it, a rename the selection does not \
                     take in; use --force to put it back here",
                    super::format::escape_path(&moved)
                ),
                _ => "changed since, outside the history; use --force".into(),
            },
        },
    ))
}

/// Whether putting back `target` over `now` writes new content into the file that is there
/// (a regular file that stays one), rather than changing its mode or replacing it.
fn rewrites_in_place(target: &Option<FileState>, now: &Option<FileState>) -> bool {
    match (target, now) {
        (Some(t), Some(n)) => {
            t.kind == FileKind::File && n.kind == FileKind::File && t.hash != n.hash
        }
        _ => false,
    }
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

/// What a step does, for `--dry-run` and reports (the same line in both).
pub fn describe(step: &Step) -> String {
    let mut line = what(step);
    for w in &step.open_by {
        let replaced = step.separate
            || step.target.as_ref().is_none_or(|t| {
                t.kind != FileKind::File || step.now.as_ref().is_none_or(|n| n.kind != t.kind)
            });
        line += &if replaced {
            format!(
                " [{w} holds it open for writing: what it writes from now on goes to the removed file]"
            )
        } else {
            format!(
                " [{w} holds it open for writing: what it wrote so far is recorded first, and it goes on writing to the restored file]"
            )
        };
    }
    line
}

fn what(step: &Step) -> String {
    let path = super::format::escape_path(&step.path);
    if let Some(to) = &step.link_to {
        return format!("link     {path} (to {})", super::format::escape_path(to));
    }
    if step.separate {
        return format!("separate {path} (a file of its own again)");
    }
    match (&step.now, &step.target) {
        (_, None) => format!("remove   {path}"),
        (None, Some(t)) => format!("restore  {path} ({})", t.kind.as_str()),
        (Some(n), Some(t)) if n.kind == t.kind && n.hash == t.hash => {
            format!("chmod    {path} ({:o} -> {:o})", n.mode, t.mode)
        }
        (Some(_), Some(t)) => format!("revert   {path} ({})", t.kind.as_str()),
    }
}

/// How [`Apply::write_file`] puts a file's content at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Written in place, so other names of it see it.
    InPlace,
    /// The path gets a file of its own, and its other names keep theirs.
    Detach,
    /// The plan found nothing at the path: a file there now was made since (a process's
    /// create racing the rollback), and it is not overwritten (`File exists`). Rewritten in
    /// place, what the process was writing through it landed inside the rollback's rewrite,
    /// and was recorded as part of the restore.
    New,
}

/// Which files have several names now, as the daemon knows them: what decides which files a
/// rollback makes files of their own ([`detached`]).
pub trait Names {
    /// Which file a path is now (device, inode), if it is not a folder and has other names.
    fn shared_file(&self, path: &[u8]) -> Option<(u64, u64)>;
    /// The other names the file at a path has now.
    fn other_names(&self, path: &[u8]) -> Vec<Vec<u8>>;
}

/// How a plan is carried out: on the workspace underneath the mount, recorded. Every method
/// acts on exactly the path given, relative to the workspace, following no symlink on the way.
pub trait Apply: Names {
    /// Remove a file, symlink or empty folder.
    fn remove(&self, path: &[u8], dir: bool) -> Result<()>;
    /// Make a folder (or keep the one there) with this mode.
    fn make_dir(&self, path: &[u8], mode: u32) -> Result<()>;
    /// Give a file its content and mode, as `how` says.
    fn write_file(
        &self,
        path: &[u8],
        mode: u32,
        how: Put,
        content: &mut dyn FnMut(&mut dyn Write) -> Result<u64>,
    ) -> Result<()>;
    /// Make a symlink, replacing what is at the path.
    fn make_symlink(&self, path: &[u8], target: &[u8]) -> Result<()>;
    /// Make a FIFO, socket or device node with this mode, replacing what is at the path.
    fn make_node(&self, path: &[u8], node: Node, mode: u32) -> Result<()>;
    /// Change a file's or folder's mode.
    fn set_mode(&self, path: &[u8], mode: u32) -> Result<()>;
    /// Make the path another name of what is at `target` (a hard link: a file, a symlink or a
    /// special file, never a folder), replacing what is at the path.
    fn link(&self, target: &[u8], path: &[u8]) -> Result<()>;
}

/// Store the content of every target that is only in the workspace, under a folder's later
/// name (see [`Step::moved_to`]), so that the rollback can put it back at its old path after
/// removing the new one. Content that no longer matches is left out (the step then fails as
/// unreadable, and nothing of it is touched).
pub fn keep_moved_content(view: &View<'_>, plan: &Plan) -> Result<()> {
    let store = view.history.store();
    for s in &plan.steps {
        let (Some(t), Some(at)) = (&s.target, &s.moved_to) else {
            continue;
        };
        let Some(hash) = t.hash else {
            continue;
        };
        if store.has_blob(&hash)? {
            continue;
        }
        let kept = match t.kind {
            // Up to the size it has as the read begins (see `Recorder::capture`).
            FileKind::File => match view.source.open_read(at).and_then(|f| {
                let size = f.metadata()?.len();
                Ok(f.take(size))
            }) {
                Ok(f) => store.put_blob_reader(f)?.0,
                Err(_) => continue,
            },
            FileKind::Symlink => match view.source.readlink(at) {
                Ok(target) => store.put_blob(&target)?,
                Err(_) => continue,
            },
            _ => continue,
        };
        if kept != hash {
            tracing::warn!(
                "{} changed while a rollback was planned; its content is not restored",
                show_path(at)
            );
        }
    }
    Ok(())
}

/// What a rollback is doing, for its progress: reading back every content it will restore,
/// then changing paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Checking,
    Restoring,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Checking => "checking",
            Phase::Restoring => "restoring",
        }
    }
}

/// Told after each piece of work of a phase: how many are done of how many.
pub type Progress<'a> = &'a dyn Fn(Phase, usize, usize);

/// Why a step was not done once the rollback stopped (see [`execute`]).
pub const STOPPED: &str = "not done: the rollback stopped, as whoever asked for it is gone";

/// Stops a rollback between steps once `stopped` says so.
struct Halt<'a> {
    stopped: &'a dyn Fn() -> bool,
    halted: bool,
    /// The paths reported as not done (a path can have a removal and a put).
    left: HashSet<Vec<u8>>,
}

impl Halt<'_> {
    /// Whether to leave `path`'s step undone (then reported in `failed`).
    fn here(&mut self, path: &[u8], failed: &mut Vec<(Vec<u8>, String)>) -> bool {
        self.halted = self.halted || (self.stopped)();
        if self.halted && self.left.insert(path.to_vec()) {
            failed.push((path.to_vec(), STOPPED.into()));
        }
        self.halted
    }
}

/// Carry out a plan. Returns the paths that failed, and why; the others are done. A path whose
/// earlier content cannot be read whole from the store is not touched. `stopped` is asked
/// before each step; once it says so, no other step is done (each is reported as not done), so
/// a rollback whose caller is gone stops instead of going on for nobody. `progress` is told
/// how far it is.
pub fn execute(
    history: &History,
    plan: &Plan,
    apply: &dyn Apply,
    progress: Progress<'_>,
    stopped: &dyn Fn() -> bool,
) -> Vec<(Vec<u8>, String)> {
    let store = history.store();
    let mut failed: Vec<(Vec<u8>, String)> = Vec::new();
    let mut halt = Halt {
        stopped,
        halted: false,
        left: HashSet::new(),
    };
    // Read and check every content first: a path whose content is damaged is left as it is.
    let mut unreadable: HashSet<Vec<u8>> = HashSet::new();
    let steps = plan.steps.len();
    for (i, s) in plan.steps.iter().enumerate() {
        progress(Phase::Checking, i, steps);
        if let Some(t) = &s.target
            && matches!(t.kind, FileKind::File | FileKind::Symlink)
        {
            let checked = match t.hash {
                Some(h) => store.verify_blob(&h).map(drop).map_err(Error::from),
                None => Err(Error::NotRecorded {
                    path: show_path(&s.path),
                    why: "no content was stored",
                }),
            };
            if let Err(e) = checked {
                failed.push((
                    s.path.clone(),
                    format!("cannot read its earlier content: {e}"),
                ));
                unreadable.insert(s.path.clone());
            }
        }
    }
    let failed_under = |failed: &[(Vec<u8>, String)], path: &[u8]| {
        failed.iter().any(|(f, _)| {
            path.starts_with(f) && (path.len() == f.len() || path.get(f.len()) == Some(&b'/'))
        })
    };
    // Removals first, deepest first, so folders are empty when their turn comes.
    let mut removals: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| !unreadable.contains(&s.path))
        .filter(|s| {
            s.now.is_some()
                && s.target
                    .as_ref()
                    .is_none_or(|t| Some(t.kind) != s.now.as_ref().map(|n| n.kind))
        })
        .collect();
    removals.sort_by(|a, b| b.path.cmp(&a.path));
    // Every removal, put and link counts one.
    let work = removals.len()
        + plan
            .steps
            .iter()
            .filter(|s| !unreadable.contains(&s.path))
            .filter(|s| s.target.is_some() || s.link_to.is_some())
            .count();
    let mut done = 0;
    let mut step_done = || {
        progress(Phase::Restoring, done, work);
        done += 1;
    };
    for s in removals {
        step_done();
        if halt.here(&s.path, &mut failed) {
            continue;
        }
        let dir = s.now.as_ref().is_some_and(|n| n.kind == FileKind::Dir);
        if let Err(e) = apply.remove(&s.path, dir) {
            failed.push((s.path.clone(), e.to_string()));
        }
    }
    // Then what should exist, parents first.
    let mut puts: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| s.target.is_some() && s.link_to.is_none() && !unreadable.contains(&s.path))
        .collect();
    puts.sort_by(|a, b| a.path.cmp(&b.path));
    for s in puts {
        step_done();
        if halt.here(&s.path, &mut failed) {
            continue;
        }
        if failed_under(&failed, &s.path) {
            // Its own removal failed, or its folder could not be made.
            if !failed.iter().any(|(f, _)| *f == s.path) {
                failed.push((s.path.clone(), "its folder could not be restored".into()));
            }
            continue;
        }
        let t = s.target.as_ref().expect("filtered");
        // A name made a file of its own again is made anew whatever it holds.
        let same_content = !s.separate
            && s.now
                .as_ref()
                .is_some_and(|n| n.kind == t.kind && n.hash == t.hash);
        let result = match t.kind {
            FileKind::Dir => apply.make_dir(&s.path, t.mode),
            FileKind::File if same_content => apply.set_mode(&s.path, t.mode),
            FileKind::File => {
                let hash = t.hash.expect("checked above");
                // A file linked since is separated as its plan says (`detached`).
                let how = if s.now.is_none() {
                    Put::New
                } else if s.separate {
                    Put::Detach
                } else {
                    Put::InPlace
                };
                apply.write_file(&s.path, t.mode, how, &mut |out| {
                    let mut out = out;
                    Ok(store.read_blob_to(&hash, &mut out)?)
                })
            }
            FileKind::Symlink => match t.hash.map(|h| store.read_blob(&h)) {
                Some(Ok(target)) => apply.make_symlink(&s.path, &target),
                Some(Err(e)) => Err(e.into()),
                None => Err(Error::NotRecorded {
                    path: show_path(&s.path),
                    why: "no target was stored",
                }),
            },
            FileKind::Special(_)
                if !s.separate && s.now.as_ref().is_some_and(|n| n.kind == t.kind) =>
            {
                apply.set_mode(&s.path, t.mode)
            }
            FileKind::Special(node) => apply.make_node(&s.path, node, t.mode),
        };
        if let Err(e) = result {
            failed.push((s.path.clone(), e.to_string()));
        }
    }
    // Last, the names linked again to a file now restored (or left as it was).
    let mut links: Vec<(&Step, &Vec<u8>)> = plan
        .steps
        .iter()
        .filter(|s| !unreadable.contains(&s.path))
        .filter_map(|s| Some((s, s.link_to.as_ref()?)))
        .collect();
    links.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    for (s, to) in links {
        step_done();
        if halt.here(&s.path, &mut failed) {
            continue;
        }
        if failed_under(&failed, &s.path) {
            if !failed.iter().any(|(f, _)| *f == s.path) {
                failed.push((s.path.clone(), "its folder could not be restored".into()));
            }
            continue;
        }
        if failed.iter().any(|(f, _)| f == to) {
            failed.push((
                s.path.clone(),
                format!(
                    "its other name {} could not be restored",
                    super::format::escape_path(to)
                ),
            ));
            continue;
        }
        // Already a name of that file (the file was written in place through its other name).
        let one_file = apply
            .shared_file(&s.path)
            .is_some_and(|f| apply.shared_file(to) == Some(f));
        if !one_file && let Err(e) = apply.link(to, &s.path) {
            failed.push((s.path.clone(), e.to_string()));
        }
    }
    progress(Phase::Restoring, work, work);
    failed
}

/// The paths of `plan` that its run must make files of their own, as the workspace stands now
/// (see [`must_detach`]): the plan marks them `separate`, and the run does what it says. Worked
/// out again at the run, a dry run said `revert a.txt` of a file linked since the point, and
/// the run separated it.
pub fn detached(plan: &Plan, names: &dyn Names) -> HashSet<Vec<u8>> {
    if plan.in_place {
        return HashSet::new();
    }
    let puts: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| s.target.is_some() && s.link_to.is_none())
        .collect();
    let in_plan: HashSet<&[u8]> = plan.steps.iter().map(|s| s.path.as_slice()).collect();
    must_detach(&puts, &in_plan, names)
}

/// The files to restore as files of their own: those that are now hard links of another file
/// the plan gives different content. Written in place, the last write would win for every
/// name (`a` and `c` were two files, are now two names of one, and each goes back to its own
/// content). So are files being rewritten that have a name the plan does not touch: that name
/// keeps what it has (a selected change to a linked file lists every name it had, so each
/// of those is in the plan). Names that go back to the same content stay linked: a rollback
/// of one name of a linked file gives every name its earlier content.
fn must_detach(puts: &[&Step], in_plan: &HashSet<&[u8]>, apply: &dyn Names) -> HashSet<Vec<u8>> {
    let files = |st: &Option<FileState>| st.as_ref().is_some_and(|f| f.kind == FileKind::File);
    let hash = |st: &Option<FileState>| st.as_ref().and_then(|f| f.hash);
    let mut by_file: HashMap<(u64, u64), Vec<&Step>> = HashMap::new();
    let mut out = HashSet::new();
    for s in puts {
        if files(&s.target)
            && files(&s.now)
            && let Some(id) = apply.shared_file(&s.path)
        {
            by_file.entry(id).or_default().push(s);
            // A name the plan leaves alone keeps what it has now; written in place, this
            // path's earlier content would reach it too (`ln a d0/b; mv d0 d1`, then
            // `d0/b` exchanged with `a`: `d1/b` is a's file, not the one `d0/b` goes back to).
            if hash(&s.target) != hash(&s.now)
                && apply
                    .other_names(&s.path)
                    .iter()
                    .any(|n| !in_plan.contains(n.as_slice()))
            {
                out.insert(s.path.clone());
            }
        }
    }
    for names in by_file.values() {
        for s in names {
            let rewritten = hash(&s.target) != hash(&s.now);
            if rewritten && names.iter().any(|o| hash(&o.target) != hash(&s.target)) {
                out.insert(s.path.clone());
            }
        }
    }
    out
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
                owner: None,
            })
        };
        assert!(same(&dir(0o755), &dir(0o755)));
        assert!(!same(&dir(0o755), &dir(0o700)));
        assert!(!same(&dir(0o755), &None));
    }
}
