//! The workspace as it was at a point: reverse deltas from the present.
//!
//! Nothing is snapshotted. The state of a path right after change `at` is told by the first
//! later change that touched it — its *before* — or, if nothing touched it since, by the
//! workspace as it is now. A folder renamed after `at` moves the question: what was at
//! `old/x` is what was at `new/x` just after the rename. What was recorded is shown whatever
//! the ignore rules say now; a path that is not recorded (ignored, and not in the history)
//! has no past, and a path under a folder that is now a symlink is not followed: it is read
//! as absent now.

use std::collections::BTreeSet;
use std::io::Read;

use super::change::{Change, ChangeKind, FileKind, FileState, Hash, Owner};
use super::recorder::{Source, kind_of};
use super::{Error, History, IoResultExt, Result, show_path};

/// What a path held at a point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Then {
    /// It did not exist (or is not recorded).
    Absent,
    /// As recorded (content in the store, if the state has a hash).
    Recorded(FileState),
    /// As it is now in the workspace: nothing changed it since.
    Current(FileState),
}

impl Then {
    pub fn state(&self) -> Option<&FileState> {
        match self {
            Then::Absent => None,
            Then::Recorded(s) | Then::Current(s) => Some(s),
        }
    }
}

pub struct View<'a> {
    pub history: &'a History,
    pub source: &'a dyn Source,
    /// Whether a path (a folder, with `true`) is left unrecorded.
    pub ignored: &'a dyn Fn(&[u8], bool) -> bool,
}

fn parent_prefixes(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(|(i, _)| &path[..i])
}

pub use super::join;

/// Errors that mean "there is nothing at this path" when looking without following symlinks.
fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

impl View<'_> {
    /// The first change after `at` that decides what `path` was at `at`: one to the path itself
    /// (or another name of its file), or a rename of a folder above it.
    fn deciding_change(&self, path: &[u8], at: u64) -> Result<Option<Change>> {
        let mut best = self.history.first_change_after(path, at)?;
        for ancestor in parent_prefixes(path) {
            // Renames of an ancestor, to or from its name.
            let mut after = at;
            while let Some(c) = self.history.first_change_after(ancestor, after)? {
                if best.as_ref().is_some_and(|b| b.id < c.id) {
                    break;
                }
                // A rollback's changes are all `restore`s; only one that moved a folder (has a
                // `from`) moves what is below it. Restoring a folder's mode, or making it
                // again, leaves its contents to their own changes.
                if c.kind == ChangeKind::Rename
                    || (c.kind == ChangeKind::Restore && c.from.is_some())
                {
                    best = Some(c);
                    break;
                }
                after = c.id;
            }
        }
        Ok(best)
    }

    /// What `path` held right after change `at` (0: before any recorded change).
    pub fn state_at(&self, path: &[u8], at: u64) -> Result<Then> {
        Ok(self.located(path, at)?.0)
    }

    /// [`state_at`](Self::state_at), and where a state still current is now.
    pub fn located(&self, path: &[u8], at: u64) -> Result<(Then, Vec<u8>)> {
        self.located_with(path, at, true)
    }

    /// What `path` holds now as the history sees it (as [`state_at`](Self::state_at) the
    /// latest point), and whether something it does not know is there instead: a file or
    /// folder the ignore rules leave unrecorded, which the history reads as absent.
    pub fn now(&self, path: &[u8]) -> Result<(Option<FileState>, bool)> {
        let (then, now) = self.locate(path, u64::MAX, true)?;
        if let Then::Current(s) = &then
            && (self.ignored)(&now, s.kind == FileKind::Dir)
            && !self
                .history
                .in_manifest_at_or_under(&now, s.kind == FileKind::Dir)?
        {
            return Ok((None, true));
        }
        Ok((then.state().cloned(), false))
    }

    /// What decides who could read `path` right after change `at`: its state's kind, mode and
    /// owner. A state still current is not read for its hash (which is `None` here).
    pub fn access_at(&self, path: &[u8], at: u64) -> Result<Option<FileState>> {
        Ok(self.located_with(path, at, false)?.0.state().cloned())
    }

    fn located_with(&self, path: &[u8], at: u64, hash: bool) -> Result<(Then, Vec<u8>)> {
        let (then, now) = self.locate(path, at, hash)?;
        // What the history recorded is what was, whatever the rules say now. A state still
        // current is shown if it is recorded: the rules record it, or the history has it (a
        // path recorded before the rules came to ignore it stays recorded).
        if let Then::Current(s) = &then
            && (self.ignored)(&now, s.kind == FileKind::Dir)
            && !self
                .history
                .in_manifest_at_or_under(&now, s.kind == FileKind::Dir)?
        {
            return Ok((Then::Absent, now));
        }
        Ok((then, now))
    }

    /// The second half of a `RENAME_EXCHANGE` whose first half is `c`. The recorder writes an
    /// exchange as one rename each way, the second with the first's time, so that the pair is
    /// not taken for two renames one after the other (which would move a folder's contents
    /// there and back).
    fn exchanged_with(&self, c: &Change) -> Result<Option<Change>> {
        let Some(from) = c.from.as_deref() else {
            return Ok(None);
        };
        if !matches!(c.kind, ChangeKind::Rename | ChangeKind::Restore) {
            return Ok(None);
        }
        let Some(next) = self.history.first_change_after(from, c.id)? else {
            return Ok(None);
        };
        Ok((next.time_ns == c.time_ns
            && next.path == from
            && next.from.as_deref() == Some(c.path.as_slice()))
        .then_some(next))
    }

    /// Where what was at `path`, below a folder that change `c` renamed (from or to its
    /// name), is right after `c` (and after its other half, for an exchange): the path, and the
    /// change to go on from. `None` if `path` is below the rename's new name, where nothing was
    /// before it.
    fn moved_by(&self, c: &Change, path: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let below = |dir: &[u8]| path.starts_with(dir) && path.get(dir.len()) == Some(&b'/');
        let rebase = |old: &[u8], new: &[u8]| {
            let mut moved = new.to_vec();
            moved.extend_from_slice(&path[old.len()..]);
            moved
        };
        let Some(from) = c.from.as_deref() else {
            return Ok(None);
        };
        let moved = if below(from) {
            rebase(from, &c.path)
        } else if below(&c.path) {
            // Only an exchange takes what was under the new name the other way.
            match self.exchanged_with(c)? {
                Some(back) => return Ok(Some((rebase(&c.path, from), back.id))),
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        let next = self.exchanged_with(c)?.map_or(c.id, |back| back.id);
        Ok(Some((moved, next)))
    }

    /// What `path` held right after change `at`, and, for a state that is still current, the
    /// path it is at now (a folder renamed since moved it).
    fn locate(&self, path: &[u8], at: u64, hash: bool) -> Result<(Then, Vec<u8>)> {
        let mut path = path.to_vec();
        let mut at = at;
        // Each step follows a folder rename forward; a path can only be renamed so many times.
        for _ in 0..10_000 {
            let Some(c) = self.deciding_change(&path, at)? else {
                return Ok((self.current(&path, hash)?, path));
            };
            if c.touches(&path) {
                let then = c
                    .states_of(&path)
                    .0
                    .cloned()
                    .map_or(Then::Absent, Then::Recorded);
                return Ok((then, path));
            }
            // A folder above `path` was renamed.
            if let Some((moved, next)) = self.moved_by(&c, &path)? {
                path = moved;
                at = next;
                continue;
            }
            // Under the folder's new name: nothing was there before the rename.
            return Ok((Then::Absent, path));
        }
        Err(Error::TooDeep)
    }

    /// Where what was at `path` right after change `at` is now: its path, following renames
    /// of it and of folders above it, or `None` if a later change took it away (a delete, or
    /// what was under a folder's new name before the rename).
    pub fn place_now(&self, path: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        let mut path = path.to_vec();
        let mut at = at;
        for _ in 0..10_000 {
            let Some(c) = self.deciding_change(&path, at)? else {
                return Ok(Some(path));
            };
            if c.touches(&path) {
                let renamed_away = c.from.as_deref() == Some(path.as_slice()) && c.path != path;
                if renamed_away {
                    path = c.path.clone();
                } else if c.states_of(&path).1.is_none() {
                    return Ok(None);
                }
                at = self.exchanged_with(&c)?.map_or(c.id, |back| back.id);
                continue;
            }
            match self.moved_by(&c, &path)? {
                Some((moved, next)) => (path, at) = (moved, next),
                None => return Ok(None),
            }
        }
        Err(Error::TooDeep)
    }

    /// The change that gave `path` the state it had at `at` (the last one at or before it),
    /// for the time a past file shows as its modification time.
    pub fn made_by(&self, path: &[u8], at: u64) -> Result<Option<Change>> {
        self.history.last_change_until(path, at)
    }

    fn current(&self, path: &[u8], hash: bool) -> Result<Then> {
        let st = match self.source.lstat(path) {
            Ok(st) => st,
            Err(e) if is_absent(&e) => return Ok(Then::Absent),
            Err(e) => return Err(e).with_path(show_path(path)),
        };
        let kind = kind_of(&st);
        let hash = match kind {
            _ if !hash => None,
            FileKind::File => {
                let mut f = match self.source.open_read(path) {
                    Ok(f) => f,
                    Err(e) if is_absent(&e) => return Ok(Then::Absent),
                    Err(e) => return Err(e).with_path(show_path(path)),
                };
                let mut hasher = blake3::Hasher::new();
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = f.read(&mut buf).with_path(show_path(path))?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                Some(Hash(*hasher.finalize().as_bytes()))
            }
            FileKind::Symlink => {
                let target = self.source.readlink(path).with_path(show_path(path))?;
                Some(Hash::of(&target))
            }
            _ => None,
        };
        Ok(Then::Current(FileState {
            kind,
            size: if kind == FileKind::Dir {
                0
            } else {
                st.st_size as u64
            },
            mode: if kind == FileKind::Symlink {
                0o777
            } else {
                st.st_mode & 0o7777
            },
            hash,
            owner: Some(Owner::of(&st)),
        }))
    }

    /// Everything below folder `dir` right after change `at`, recursively: each path (`dir`,
    /// `/`, the rest) with its state, a folder's before what is below it.
    pub fn below_at(&self, dir: &[u8], at: u64) -> Result<Vec<(Vec<u8>, FileState)>> {
        let mut out = Vec::new();
        let mut folders = vec![dir.to_vec()];
        while let Some(folder) = folders.pop() {
            for (name, state) in self.list_at(&folder, at)? {
                let path = [folder.as_slice(), b"/", name.as_slice()].concat();
                if state.kind == FileKind::Dir {
                    folders.push(path.clone());
                }
                out.push((path, state));
            }
        }
        Ok(out)
    }

    /// The names in folder `dir` right after change `at`, sorted.
    pub fn list_at(&self, dir: &[u8], at: u64) -> Result<Vec<(Vec<u8>, FileState)>> {
        let mut candidates: BTreeSet<Vec<u8>> = BTreeSet::new();
        // Children now, wherever the folder's path leads.
        if let Ok(names) = self.source.read_dir(dir) {
            candidates.extend(names);
        }
        // Children with history under this name.
        let prefix = if dir.is_empty() {
            Vec::new()
        } else {
            join(dir, b"")
        };
        for p in self.history.paths_with_prefix(&prefix)? {
            let rest = &p[prefix.len()..];
            if rest.is_empty() {
                continue;
            }
            let name = rest.split(|b| *b == b'/').next().unwrap_or(rest);
            if !name.is_empty() {
                candidates.insert(name.to_vec());
            }
        }
        // Children that moved away with the folder: they live under its later name.
        let mut path = dir.to_vec();
        let mut after = at;
        for _ in 0..1000 {
            // A child name no file can have: what decides it is only a rename of a folder
            // above it, which includes `path` itself.
            let probe = join(&path, b"\0");
            let Some(c) = self.deciding_change(&probe, after)? else {
                break;
            };
            match self.moved_by(&c, &probe)? {
                Some((moved, next)) => {
                    // (Without the probe's "/\0".)
                    path = moved[..moved.len() - 2].to_vec();
                    after = next;
                    if let Ok(names) = self.source.read_dir(&path) {
                        candidates.extend(names);
                    }
                    let prefix = join(&path, b"");
                    for p in self.history.paths_with_prefix(&prefix)? {
                        if let Some(name) = p[prefix.len()..].split(|b| *b == b'/').next() {
                            candidates.insert(name.to_vec());
                        }
                    }
                }
                None => break,
            }
        }
        let mut out = Vec::new();
        for name in candidates {
            if name == b".rewind" && dir.is_empty() {
                continue;
            }
            if let Some(state) = self.state_at(&join(dir, &name), at)?.state() {
                out.push((name, state.clone()));
            }
        }
        Ok(out)
    }

    /// The content of `path` right after change `at`, or `None` if it did not exist then.
    pub fn content_at(&self, path: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        let (then, now) = self.located(path, at)?;
        // A state still current is read where it is now: under a folder's later name, if it
        // was renamed since.
        let path = now.as_slice();
        match then {
            Then::Absent => Ok(None),
            Then::Current(s) => match s.kind {
                FileKind::File => {
                    let mut f = self.source.open_read(path).with_path(show_path(path))?;
                    let mut out = Vec::new();
                    f.read_to_end(&mut out).with_path(show_path(path))?;
                    Ok(Some(out))
                }
                FileKind::Symlink => {
                    Ok(Some(self.source.readlink(path).with_path(show_path(path))?))
                }
                _ => Ok(Some(Vec::new())),
            },
            Then::Recorded(s) => match s.hash {
                Some(h) => Ok(Some(self.history.store().read_blob(&h)?)),
                None if s.kind == FileKind::File => Err(Error::NotRecorded {
                    path: show_path(path),
                    why: "it changed while rewind was not mounted",
                }),
                None => Ok(Some(Vec::new())),
            },
        }
    }
}

/// The workspace read while it is not mounted, as far as it is still what the mount last
/// saw: a path changed since (its content not the last recorded, or, where no content was
/// recorded, its kind, size, mode or mtime not what the manifest says), or gone, is an error
/// that says so, and a file the history does not have (made since) is absent. So a view of
/// an unmounted workspace answers exactly or refuses; the next mount records what changed.
pub struct AsLastMounted<'a> {
    pub source: &'a dyn Source,
    pub history: &'a History,
}

impl AsLastMounted<'_> {
    fn changed(path: &[u8]) -> std::io::Error {
        std::io::Error::other(format!(
            "{} changed while the workspace was not mounted; mount it (`rewind mount`) to \
             record the change, then ask again",
            show_path(path)
        ))
    }

    fn store_error(e: Error) -> std::io::Error {
        std::io::Error::other(e.to_string())
    }

    /// The newest recorded state of `path`, if its newest change left it there.
    fn last_recorded(&self, path: &[u8]) -> std::io::Result<Option<FileState>> {
        let last = self
            .history
            .last_change_until(path, u64::MAX)
            .map_err(Self::store_error)?;
        Ok(last.and_then(|c| c.states_of(path).1.cloned()))
    }

    fn check_content(&self, path: &[u8], hash: Hash) -> std::io::Result<()> {
        match self.last_recorded(path)?.and_then(|s| s.hash) {
            Some(h) if h != hash => Err(Self::changed(path)),
            _ => Ok(()),
        }
    }
}

impl Source for AsLastMounted<'_> {
    fn lstat(&self, path: &[u8]) -> std::io::Result<libc::stat> {
        let seen = self
            .history
            .manifest_entry(path)
            .map_err(Self::store_error)?;
        let st = match (self.source.lstat(path), &seen) {
            (Ok(st), _) => st,
            (Err(e), Some(_)) if is_absent(&e) => return Err(Self::changed(path)),
            (Err(e), _) => return Err(e),
        };
        let now = super::recorder::seen_of(&st);
        let Some(seen) = seen else {
            let kept_folder = now.kind == FileKind::Dir
                && (path.is_empty()
                    || self
                        .history
                        .in_manifest_at_or_under(path, true)
                        .map_err(Self::store_error)?);
            return if kept_folder {
                Ok(st)
            } else {
                Err(std::io::Error::from_raw_os_error(libc::ENOENT))
            };
        };
        let recorded = self.last_recorded(path)?;
        let same = now.kind == seen.kind
            && now.mode == seen.mode
            && match recorded.filter(|s| s.hash.is_some() && s.kind == now.kind) {
                // Content recorded: it decides (read when the content is).
                Some(s) => s.size == now.size || now.kind != FileKind::File,
                None => {
                    now.kind == FileKind::Dir
                        || (now.size == seen.size && now.mtime_ns == seen.mtime_ns)
                }
            };
        if same {
            Ok(st)
        } else {
            Err(Self::changed(path))
        }
    }

    fn open_read(&self, path: &[u8]) -> std::io::Result<std::fs::File> {
        self.lstat(path)?;
        let mut f = self.source.open_read(path)?;
        let mut hasher = blake3::Hasher::new();
        std::io::copy(&mut f, &mut hasher)?;
        self.check_content(path, Hash(*hasher.finalize().as_bytes()))?;
        self.source.open_read(path)
    }

    fn readlink(&self, path: &[u8]) -> std::io::Result<Vec<u8>> {
        self.lstat(path)?;
        let target = self.source.readlink(path)?;
        self.check_content(path, Hash::of(&target))?;
        Ok(target)
    }

    fn read_dir(&self, path: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        self.lstat(path)?;
        self.source.read_dir(path)
    }
}
