//! Recovery at mount: finish the write episodes a crash cut short, and record what changed in
//! the workspace while nothing was mounted, by comparing it with the manifest (what the mount
//! last saw at every path).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::capture::{key_of, kind_of, seen_of};
use super::{Key, Recorder};
use crate::history::Result;
use crate::history::change::{
    Change, ChangeKind, FileKind, FileState, Fsynced, Hash, Reserved, Seen,
};
use crate::history::db::Extra;
use crate::history::ignore::at_or_under;
use crate::history::name::{EXTERNAL_AGENT, ROLLBACK_AGENT};
use crate::history::who::Who;

/// What the scan at mount found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Write episodes cut short by a crash, now recorded.
    pub episodes: usize,
    /// Changes made while nothing was mounted, recorded as agent `external`.
    pub external: usize,
}

type Tree = BTreeMap<Vec<u8>, (libc::stat, Seen)>;

/// How many renames away from a path [`Recorder::known_before`] passes over, at most.
const MOVED_AWAY_AT_MOST: usize = 4;

impl Recorder {
    /// Before mounting: finish episodes a crash cut short, and record what changed in the
    /// workspace while it was not mounted (compared with the manifest the mount left).
    pub fn recover(&self) -> Result<Recovery> {
        super::journal::keeping_labels(|| self.recover_labelled())
    }

    fn recover_labelled(&self) -> Result<Recovery> {
        let _pins = self.pin_scope();
        let mut report = Recovery::default();
        // Held-back creates first, in the order of the ids set aside for them (they ended
        // before the crash); then the episodes the crash cut short, which went on until it.
        let mut episodes = self.history.open_episodes()?;
        episodes.sort_by_key(|(_, ep)| ep.reserved.map_or(u64::MAX, |r| r.id));
        // The tree as it is (nothing below changes it), and the names of each file that has
        // more than one: a file changed through one name is one change, with its other names
        // as its links, whether a marker or the scan finds it.
        let current = self.walk()?;
        let names = names_of_linked(&current);
        let first_mount = self.history.store().meta(b"manifest")?.is_none();
        // The manifest the last mount left, for the links of a file with several names.
        let left: HashMap<Vec<u8>, Seen> = if names.is_empty() || episodes.is_empty() {
            HashMap::new()
        } else {
            self.history.manifest()?.into_iter().collect()
        };
        let mut linked: HashSet<Vec<u8>> = HashSet::new();
        for (path, ep) in episodes {
            // A rollback's write cut short is still the rollback's (a restore).
            let restore = ep.agent == ROLLBACK_AGENT;
            // A new file fsynced before its create was recorded is theirs only if the file at
            // the path is the one fsynced, as the fsync left it; otherwise (replaced, written
            // to since, or renamed away) nothing says who made what is there.
            let fsynced_as_left = ep.fsynced.is_none_or(|f| {
                self.source
                    .lstat(&path)
                    .is_ok_and(|st| Fsynced::of(&st) == f)
            });
            let who = if fsynced_as_left {
                Who {
                    session: ep.session,
                    agent: ep.agent,
                    pid: ep.pid,
                    process: ep.process,
                    restore,
                    turn: ep.turn,
                    tool: ep.tool,
                    uid: ep.uid,
                }
            } else {
                tracing::info!(
                    "recovery: {} is not the file an fsync left there; its change is external",
                    String::from_utf8_lossy(&path)
                );
                self.external()
            };
            if !self.records(&path, false) {
                self.history.drop_open_episode(&path)?;
                continue;
            }
            let now = match self.source.lstat(&path) {
                Ok(st) => Some(st).filter(|st| kind_of(st) == FileKind::File),
                Err(e) if gone(&e) => None,
                // Not known to be gone: the episode would be recorded as a delete.
                Err(e) => return Err(self.unscannable(&path, e)),
            };
            let after = now.as_ref().map(|st| self.capture(&path, st)).transpose()?;
            // A marker left by an earlier version has no owner: the owner alone is no change.
            let unchanged = match (&after, &ep.before) {
                (Some(a), Some(b)) if b.owner.is_none() => {
                    FileState {
                        owner: None,
                        ..a.clone()
                    } == *b
                }
                _ => after == ep.before,
            };
            if !unchanged {
                let kind = match (&ep.before, &after) {
                    (None, _) => ChangeKind::Create,
                    (_, None) => ChangeKind::Delete,
                    _ => ChangeKind::Modify,
                };
                let mut change = self.change(kind, &path, &who);
                change.before = ep.before;
                change.after = after;
                if let Some(st) = &now {
                    change.links = self.links_of(
                        &names,
                        (&path, st),
                        change.before.as_ref(),
                        &left,
                        &current,
                    )?;
                    linked.extend(change.links.iter().cloned());
                }
                // (A file changed since the fsync was changed after the crash, by nobody
                // known: that change goes last.)
                let id = match ep.reserved {
                    Some(r) if fsynced_as_left => self.place(&path, r, &mut change)?,
                    _ => None,
                };
                let seen = now.as_ref().map(seen_of);
                let manifest: Vec<_> = std::iter::once(&path)
                    .chain(&change.links)
                    .map(|p| (p.clone(), seen.clone()))
                    .collect();
                let extra = Extra {
                    finish_episode: Some(&path),
                    manifest: &manifest,
                    move_under: None,
                    content: None,
                    marker: None,
                };
                self.record_as(change, &extra, id)?;
                report.episodes += 1;
            } else {
                self.history.drop_open_episode(&path)?;
            }
        }

        if !first_mount {
            let old: HashMap<Vec<u8>, Seen> = self.history.manifest()?.into_iter().collect();
            report.external = self.record_external(&old, &current, &names, linked)?;
        }
        let entries: Vec<(Vec<u8>, Seen)> = current
            .iter()
            .map(|(p, (_, seen))| (p.clone(), seen.clone()))
            .collect();
        self.history.replace_manifest(&entries)?;
        Ok(report)
    }

    /// Where the held-back create (or save) of `path` that a crash cut short goes, by what its
    /// marker says of it (`r`): with the id set aside for it if that id is still free (the
    /// answer); next (`None`), if nothing was recorded after the id was set aside; both with
    /// the create's time, set in `change`. Otherwise (its id went to another change) it goes
    /// last at the time of the scan, as a marker without an id does.
    fn place(&self, path: &[u8], r: Reserved, change: &mut Change) -> Result<Option<u64>> {
        if self.history.id_unused(r.id)? {
            change.time_ns = r.time_ns;
            return Ok(Some(r.id));
        }
        if r.id >= self.history.next_id() {
            change.time_ns = r.time_ns;
        } else {
            tracing::info!(
                "recovery: the id {} set aside for {} is taken; it is recorded last",
                r.id,
                String::from_utf8_lossy(path)
            );
        }
        Ok(None)
    }

    /// Every recorded path in the workspace, with its stat. Notes the names of hard-linked
    /// files on the way.
    fn walk(&self) -> Result<Tree> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![Vec::new()];
        while let Some(dir) = dirs.pop() {
            let names = match self.source.read_dir(&dir) {
                Ok(n) => n,
                // Gone since its parent was read.
                Err(e) if gone(&e) => continue,
                // Everything below it would be taken for deleted.
                Err(e) => return Err(self.unscannable(&dir, e)),
            };
            for name in names {
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                if path == b".rewind" {
                    continue;
                }
                let st = match self.source.lstat(&path) {
                    Ok(st) => st,
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(self.unscannable(&path, e)),
                };
                let is_dir = kind_of(&st) == FileKind::Dir;
                if !self.records(&path, is_dir) {
                    continue;
                }
                if is_dir {
                    dirs.push(path.clone());
                }
                // An ignored folder walked only for what the history has below it is not
                // itself recorded.
                if self.ignores(&path, is_dir) && !self.history.in_manifest(&path)? {
                    continue;
                }
                self.note_name(&st, &path);
                out.insert(path, (st, seen_of(&st)));
            }
        }
        Ok(out)
    }

    /// The refusal of a mount whose scan cannot look at `path`, with what to do: a folder the
    /// history has below it cannot be ignored away (its files' past would lose its end).
    fn unscannable(&self, path: &[u8], source: std::io::Error) -> crate::history::Error {
        let what_to_do = if self.kept(path, true) {
            "The history has files there: make it readable to the user the daemon runs as, then mount again"
        } else {
            "Make it readable to the user the daemon runs as, or name it in .rewindignore, then mount again"
        };
        crate::history::Error::Unscannable {
            path: String::from_utf8_lossy(path).into_owned(),
            source,
            what_to_do,
        }
    }

    /// Who made what changed while nothing was watching.
    fn external(&self) -> Who {
        Who {
            session: self.who.default_session().to_string(),
            agent: EXTERNAL_AGENT.into(),
            pid: 0,
            process: "external".into(),
            restore: false,
            turn: None,
            tool: None,
            uid: None,
        }
    }

    /// What we knew of a path the manifest has as `seen`: its last recorded state if that
    /// matches.
    fn known_before(&self, path: &[u8], seen: &Seen) -> Result<FileState> {
        // The newest change that left something at `path`. One that only took a file away
        // from it (a rename's `from`) is passed over when the manifest still has the path: an
        // exchange of two names is recorded as two renames, the second taking from `path`
        // what the first had just put there.
        let mut until = u64::MAX;
        let mut recorded = None;
        for _ in 0..MOVED_AWAY_AT_MOST {
            let Some(c) = self.history.last_change_until(path, until)? else {
                break;
            };
            if c.path == path || c.links.iter().any(|l| l == path) {
                recorded = c.after;
                break;
            }
            if c.kind != ChangeKind::Rename || c.from.as_deref() != Some(path) || c.id == 0 {
                break;
            }
            until = c.id - 1;
        }
        Ok(match recorded {
            Some(s) if s.kind == seen.kind && s.size == seen.size && s.mode == seen.mode => s,
            _ => FileState {
                kind: seen.kind,
                size: seen.size,
                mode: seen.mode,
                hash: None,
                owner: None,
            },
        })
    }

    /// The names of the file `st` other than `path` that go with a change of it from
    /// `before` as its links: names the last mount knew (`old`) as this file, with the same
    /// state and the same recorded content before, that changed since. A name made since, one
    /// that was another file (`ln -f`), or one left as it was is not: it is recorded (or not)
    /// on its own.
    fn links_of(
        &self,
        names: &HashMap<Key, Vec<Vec<u8>>>,
        (path, st): (&[u8], &libc::stat),
        before: Option<&FileState>,
        old: &HashMap<Vec<u8>, Seen>,
        current: &Tree,
    ) -> Result<Vec<Vec<u8>>> {
        let (Some(was), Some(before)) = (old.get(path), before) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for name in other_names(names, st, path) {
            let (Some(name_was), Some((_, name_now))) = (old.get(&name), current.get(&name)) else {
                continue;
            };
            if name_was == was
                && name_now != name_was
                && self.known_before(&name, name_was)?.hash == before.hash
            {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// `names`: see [`names_of_linked`]; `linked`: names a marker's change recorded already,
    /// as its links.
    fn record_external(
        &self,
        old: &HashMap<Vec<u8>, Seen>,
        current: &Tree,
        names: &HashMap<Key, Vec<Vec<u8>>>,
        mut linked: HashSet<Vec<u8>>,
    ) -> Result<usize> {
        let who = self.external();
        let known_before = |path: &[u8], seen: &Seen| self.known_before(path, seen);
        let mut count = 0;
        // Gone: in the manifest, not in the tree now, and not there at all (an ignored path
        // is not in `current`). The manifest holds only what the history has, so a path the
        // rules ignore now but the history has is recorded as gone: its past stays whole.
        let mut gone: Vec<&Vec<u8>> = Vec::new();
        for (path, _) in old.iter().filter(|(p, _)| !current.contains_key(*p)) {
            match self.source.lstat(path) {
                Ok(_) => {}
                Err(e) if self::gone(&e) => gone.push(path),
                // Not known to be gone: it may be there, below a folder that cannot be read.
                Err(e) => return Err(self.unscannable(path, e)),
            }
        }
        let mut new: HashSet<&Vec<u8>> = current.keys().filter(|p| !old.contains_key(*p)).collect();
        // Renames made while unmounted: a folder gone whose whole content (names, kinds,
        // sizes, modes, mtimes: a rename keeps them) is now under one new folder, then a file
        // gone whose content (by hash) is now at one new path.
        for (from, to) in self.renamed_dirs(old, current, &gone, &new) {
            // Every file below holds what was recorded under the old name, or it is not a
            // rename (a folder deleted and another made with the same shape).
            let mut same = true;
            for (path, seen) in old.iter().filter(|(p, _)| at_or_under(p, &from)) {
                if seen.kind != FileKind::File {
                    continue;
                }
                let to_path = [&to[..], &path[from.len()..]].concat();
                let was = known_before(path, seen)?.hash;
                let now = match current.get(&to_path) {
                    Some((st, _)) => self.capture(&to_path, st)?.hash,
                    None => None,
                };
                if was.is_none() || was != now {
                    same = false;
                    break;
                }
            }
            if !same {
                continue;
            }
            let mut change = self.change(ChangeKind::Rename, &to, &who);
            change.from = Some(from.clone());
            change.after = Some(self.capture(&to, &current[&to].0)?);
            let manifest = [
                (from.clone(), None),
                (to.clone(), Some(current[&to].1.clone())),
            ];
            self.record(
                change,
                &Extra {
                    finish_episode: None,
                    manifest: &manifest,
                    move_under: Some((&from, &to)),
                    content: None,
                    marker: None,
                },
            )?;
            gone.retain(|p| !at_or_under(p, &from));
            new.retain(|p| !at_or_under(p, &to));
            count += 1;
        }
        let mut by_hash: HashMap<Hash, Vec<&Vec<u8>>> = HashMap::new();
        for path in &gone {
            let seen = &old[*path];
            if seen.kind == FileKind::File
                && let Some(h) = known_before(path, seen)?.hash
            {
                by_hash.entry(h).or_default().push(path);
            }
        }
        let mut renamed_from = HashSet::new();
        let mut new_sorted: Vec<&Vec<u8>> = new.iter().copied().collect();
        new_sorted.sort();
        for to in new_sorted {
            let (st, seen) = &current[to];
            if seen.kind != FileKind::File {
                continue;
            }
            let after = self.capture(to, st)?;
            let Some(from) = after
                .hash
                .and_then(|h| by_hash.get(&h))
                .filter(|f| f.len() == 1)
                .map(|f| f[0].clone())
            else {
                continue;
            };
            if !renamed_from.insert(from.clone()) {
                continue;
            }
            let mut change = self.change(ChangeKind::Rename, to, &who);
            change.from = Some(from.clone());
            change.after = Some(after);
            self.record_one(change, &[(from, None), (to.clone(), Some(seen.clone()))])?;
            new.remove(to);
            count += 1;
        }
        gone.retain(|p| !renamed_from.contains(*p));
        // Deletions, deepest first, so a folder's contents go before the folder.
        gone.sort_by(|a, b| b.cmp(a));
        for path in gone {
            let seen = &old[path];
            let kind = if seen.kind == FileKind::Dir {
                ChangeKind::Rmdir
            } else {
                ChangeKind::Delete
            };
            let mut change = self.change(kind, path, &who);
            change.before = Some(known_before(path, seen)?);
            self.record_one(change, &[(path.clone(), None)])?;
            count += 1;
        }
        // New and changed paths, parents first (BTreeMap order).
        for (path, (st, seen)) in current {
            if !new.contains(path) && !old.contains_key(path) {
                continue;
            }
            let kind = match old.get(path) {
                None => match seen.kind {
                    FileKind::Dir => ChangeKind::Mkdir,
                    FileKind::Symlink => ChangeKind::Symlink,
                    _ => ChangeKind::Create,
                },
                Some(was) if was == seen => continue,
                Some(was) if was.kind == FileKind::Dir && seen.kind == FileKind::Dir => {
                    if was.mode == seen.mode {
                        continue;
                    }
                    ChangeKind::Chmod
                }
                Some(was)
                    if was.kind == seen.kind
                        && was.size == seen.size
                        && was.mtime_ns == seen.mtime_ns =>
                {
                    ChangeKind::Chmod
                }
                Some(_) => ChangeKind::Modify,
            };
            // A file with several names changed through one of them: one change, under the
            // first name found, with the names that changed with it as its links.
            if linked.contains(path) {
                continue;
            }
            let mut change = self.change(kind, path, &who);
            change.before = old.get(path).map(|s| known_before(path, s)).transpose()?;
            change.after = Some(self.capture(path, st)?);
            let manifest = [(path.clone(), Some(seen.clone()))];
            if change.before == change.after {
                // Only its times moved: remember them, so the next mount need not read it again.
                self.history.put_manifest(&manifest)?;
                continue;
            }
            if kind != ChangeKind::Create && names.contains_key(&key_of(st)) {
                change.links =
                    self.links_of(names, (path, st), change.before.as_ref(), old, current)?;
                linked.extend(change.links.iter().cloned());
            }
            let manifest: Vec<_> = std::iter::once(path)
                .chain(&change.links)
                .map(|p| (p.clone(), current.get(p).map(|(_, seen)| seen.clone())))
                .collect();
            self.record_one(change, &manifest)?;
            count += 1;
        }
        Ok(count)
    }
}

impl Recorder {
    /// Folders renamed while unmounted: (old name, new name) of each folder gone (whose parent
    /// is not gone too) whose content is now, entry for entry, under exactly one new folder.
    fn renamed_dirs(
        &self,
        old: &HashMap<Vec<u8>, Seen>,
        current: &Tree,
        gone: &[&Vec<u8>],
        new: &HashSet<&Vec<u8>>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let parent = |p: &[u8]| p.iter().rposition(|b| *b == b'/').map(|i| p[..i].to_vec());
        let gone_set: HashSet<&Vec<u8>> = gone.iter().copied().collect();
        let tops = |set: &HashSet<&Vec<u8>>, seen: &dyn Fn(&Vec<u8>) -> Option<Seen>| {
            set.iter()
                .filter(|p| seen(p).is_some_and(|s| s.kind == FileKind::Dir))
                .filter(|p| parent(p.as_slice()).is_none_or(|q| !set.contains(&q)))
                .map(|p| (*p).clone())
                .collect::<Vec<_>>()
        };
        let from_dirs = tops(&gone_set, &|p: &Vec<u8>| old.get(p).cloned());
        let to_dirs = tops(new, &|p: &Vec<u8>| current.get(p).map(|(_, s)| s.clone()));
        if from_dirs.is_empty() || to_dirs.is_empty() {
            return Vec::new();
        }
        let to_content: Vec<(Vec<u8>, u32, Content)> = to_dirs
            .into_iter()
            .map(|d| {
                let c = content(&d, current.iter().map(|(p, (_, s))| (p, s)));
                let mode = current[&d].1.mode;
                (d, mode, c)
            })
            .collect();
        let mut out = Vec::new();
        for from in from_dirs {
            let c = content(&from, old.iter());
            let mode = old[&from].mode;
            let mut matches = to_content
                .iter()
                .filter(|(_, m, tc)| *m == mode && *tc == c && !c.is_empty());
            if let (Some((to, ..)), None) = (matches.next(), matches.next())
                && !out.iter().any(|(_, t)| t == to)
            {
                out.push((from, to.clone()));
            }
        }
        out
    }
}

/// A folder's content: each entry below it, by its name relative to the folder.
type Content = Vec<(Vec<u8>, FileKind, u64, u32)>;

fn content<'a>(dir: &[u8], entries: impl Iterator<Item = (&'a Vec<u8>, &'a Seen)>) -> Content {
    let mut c: Content = entries
        .filter(|(p, _)| p.len() > dir.len() && at_or_under(p, dir))
        // A folder's size and mtime change with what it holds; the manifest does not follow
        // them.
        .map(|(p, s)| {
            let size = if s.kind == FileKind::Dir { 0 } else { s.size };
            (p[dir.len() + 1..].to_vec(), s.kind, size, s.mode)
        })
        .collect();
    c.sort_by(|a, b| a.0.cmp(&b.0));
    c
}

/// An error that says a path is not there (rather than that it could not be looked at).
fn gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

/// The names of every file in `tree` that has more than one there, by file.
fn names_of_linked(tree: &Tree) -> HashMap<Key, Vec<Vec<u8>>> {
    let mut names: HashMap<Key, Vec<Vec<u8>>> = HashMap::new();
    for (path, (st, _)) in tree {
        if st.st_nlink > 1 && kind_of(st) == FileKind::File {
            names.entry(key_of(st)).or_default().push(path.clone());
        }
    }
    names.retain(|_, n| n.len() > 1);
    names
}

/// The names in `tree` of the file `st` other than `path` (see [`names_of_linked`]).
fn other_names(names: &HashMap<Key, Vec<Vec<u8>>>, st: &libc::stat, path: &[u8]) -> Vec<Vec<u8>> {
    names
        .get(&key_of(st))
        .into_iter()
        .flatten()
        .filter(|n| n.as_slice() != path)
        .cloned()
        .collect()
}
