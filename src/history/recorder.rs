//! Recording: turning what the filesystem sees into changes, with the content they destroy
//! stored first.
//!
//! The filesystem calls in at the edges of a write episode and around every destructive
//! operation:
//!
//! - `begin_write` (open for writing, `O_TRUNC`, truncate) stores the file's current content
//!   before the kernel can touch it and notes an open episode in the store; `end_write` (last
//!   release) stores the new content and records one `modify` — or nothing if it is unchanged.
//! - `begin_create` starts an episode with no before. At its end the create is held back for a
//!   moment (`PENDING_FOR`): if the new file is renamed over another before it is recorded, that
//!   is a save-by-rename and is recorded as one `modify` of the target; if it is deleted, it
//!   never shows at all.
//! - Unlink, rename and chmod are recorded *before* they happen (their before content already
//!   stored) and retracted if they then fail; mkdir, rmdir, symlink and link after they succeed.
//!
//! Lock order: `pending`, then `episodes`, then `known`; none is held across I/O or a store
//! write.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::ignore::IgnoreRules;
use super::who::{Attributor, Who};
use crate::error::{Error, Result};
use crate::store::{
    Change, ChangeKind, Extra, FileKind, FileState, NewChange, OpenEpisode, Seen, Store,
};

/// How long a new file's creation is held back, waiting to see whether it is a temporary file
/// renamed over its target (save-by-rename) or deleted.
pub const PENDING_FOR: Duration = Duration::from_millis(500);

/// A backing file's identity: `(st_dev, st_ino)`.
pub type Key = (u64, u64);

const STRIPES: usize = 64;

/// Read access to the workspace underneath the mount.
pub trait Source: Send + Sync {
    fn open_read(&self, path: &[u8]) -> io::Result<File>;
    /// Names in a directory (without `.` and `..`).
    fn read_dir(&self, path: &[u8]) -> io::Result<Vec<Vec<u8>>>;
    fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>>;
    fn lstat(&self, path: &[u8]) -> io::Result<libc::stat>;
}

pub fn key_of(st: &libc::stat) -> Key {
    (st.st_dev, st.st_ino)
}

pub fn kind_of(st: &libc::stat) -> FileKind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        _ => FileKind::Special,
    }
}

pub fn seen_of(st: &libc::stat) -> Seen {
    Seen {
        kind: kind_of(st),
        size: if kind_of(st) == FileKind::Dir {
            0
        } else {
            st.st_size as u64
        },
        mode: st.st_mode & 0o7777,
        mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
    }
}

pub use super::time::now_ns;

/// The stat fields that change whenever content may have.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Sig {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Sig {
    fn of(st: &libc::stat) -> Sig {
        Sig {
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

struct Episode {
    path: Vec<u8>,
    before: Option<FileState>,
    opens: u32,
    who: Who,
    /// The file was created in this episode.
    created: bool,
    /// The file lost its last name while open: nothing more to record.
    orphaned: bool,
}

/// A created file whose creation is not recorded yet.
#[derive(Clone)]
struct Pending {
    /// The new file: its content is captured when the create is recorded, not at its last
    /// close (it cannot change meanwhile without flushing this first).
    key: Key,
    who: Who,
    time_ns: u64,
    since: Instant,
    /// The file this one replaces in a rename-away save (see `saved_by_renaming_away`): its
    /// state before, so the create is recorded as a `modify`.
    replaces: Option<FileState>,
}

/// A regular file renamed to a new name, remembered for a moment: editors like vim save by
/// renaming the original away, writing a new file under its name, and deleting the original.
struct RenamedAway {
    from: Vec<u8>,
    key: Key,
    change: Change,
    pid: u32,
    at: Instant,
}

/// How long a rename-away save may take from the rename to the delete.
const SAVE_WINDOW: Duration = Duration::from_secs(5);

pub struct Recorder {
    store: Arc<Store>,
    source: Arc<dyn Source>,
    who: Attributor,
    ignore: RwLock<IgnoreRules>,
    pending: Mutex<HashMap<Vec<u8>, Pending>>,
    episodes: Mutex<HashMap<Key, Episode>>,
    /// Per-file locks (striped by backing key): the end of an episode, and a rename or unlink
    /// of the file with its bookkeeping, never interleave.
    stripes: Vec<Mutex<()>>,
    /// The last captured state of each backing file, valid while its `Sig` is unchanged.
    /// With each entry, the store's sweep count when its content was known to be stored.
    known: Mutex<HashMap<Key, (Sig, FileState, u64)>>,
    subscribers: Mutex<Vec<Sender<Arc<Change>>>>,
    /// Changes whose operation has happened and whose content is stored, waiting for the
    /// writer thread (see [`Recorder::defer`]). Every other record writes these first, so ids
    /// stay in the order things happened.
    deferred: Mutex<Vec<Prepared>>,
    /// Files renamed to new names lately, by their new name (see [`RenamedAway`]).
    renamed_away: Mutex<HashMap<Vec<u8>, RenamedAway>>,
    /// Wakes the writer thread: a token is sent when `deferred` gets something.
    wake: (Sender<()>, Receiver<()>),
}

/// A change ready to be recorded once its operation has succeeded.
#[derive(Debug)]
pub struct Prepared {
    change: NewChange,
    manifest: Vec<(Vec<u8>, Option<Seen>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    pub fn new(store: Arc<Store>, source: Arc<dyn Source>, default_session: String) -> Recorder {
        let rules = match source.open_read(b".rewindignore") {
            Ok(f) => io::read_to_string(f).unwrap_or_default(),
            Err(_) => String::new(),
        };
        Recorder {
            store,
            source,
            who: Attributor::new(default_session),
            ignore: RwLock::new(IgnoreRules::new(&rules)),
            pending: Mutex::new(HashMap::new()),
            episodes: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            known: Mutex::new(HashMap::new()),
            subscribers: Mutex::new(Vec::new()),
            deferred: Mutex::new(Vec::new()),
            renamed_away: Mutex::new(HashMap::new()),
            wake: crossbeam_channel::bounded(1),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn attributor(&self) -> &Attributor {
        &self.who
    }

    /// Refuse an operation that would have to be recorded after the fact when the store can no
    /// longer be written (it would otherwise happen unrecorded).
    pub fn ready_for(&self, path: &[u8], is_dir: bool) -> Result<()> {
        if self.records(path, is_dir) {
            self.store.check_writable()?;
        }
        Ok(())
    }

    /// Whether changes to `path` are recorded at all.
    pub fn records(&self, path: &[u8], is_dir: bool) -> bool {
        !self
            .ignore
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .ignored(path, is_dir)
    }

    /// Re-read `.rewindignore` after it changed.
    fn reload_ignore_if(&self, path: &[u8]) {
        if path == b".rewindignore" {
            let rules = match self.source.open_read(b".rewindignore") {
                Ok(f) => io::read_to_string(f).unwrap_or_default(),
                Err(_) => String::new(),
            };
            *self.ignore.write().unwrap_or_else(|e| e.into_inner()) = IgnoreRules::new(&rules);
        }
    }

    /// A channel that receives every change as it is recorded.
    pub fn subscribe(&self) -> Receiver<Arc<Change>> {
        let (tx, rx) = crossbeam_channel::unbounded();
        lock(&self.subscribers).push(tx);
        rx
    }

    fn publish(&self, change: Change) -> Change {
        let shared = Arc::new(change);
        lock(&self.subscribers).retain(|tx| tx.send(shared.clone()).is_ok());
        Arc::unwrap_or_clone(shared)
    }

    /// Record `change` with its manifest entries and nothing else in the batch.
    fn record_one(
        &self,
        change: NewChange,
        manifest: &[(Vec<u8>, Option<Seen>)],
    ) -> Result<Change> {
        self.record(
            change,
            &Extra {
                finish_episode: None,
                manifest,
                move_under: None,
            },
        )
    }

    fn record(&self, change: NewChange, extra: &Extra<'_>) -> Result<Change> {
        let mut deferred = lock(&self.deferred);
        self.write_deferred(&mut deferred)?;
        let recorded = self.store.record_with(change, extra)?;
        drop(deferred);
        Ok(self.publish(recorded))
    }

    /// Record `prepared` soon, on the writer thread, batched with others. For changes whose
    /// content is already stored and whose operation has already happened (a delete): if the
    /// daemon dies first, the next mount finds the path gone and records the delete, content
    /// and all, as `external`; only who did it is lost.
    pub fn defer(&self, prepared: Prepared) {
        lock(&self.deferred).push(prepared);
        let _ = self.wake.0.try_send(());
    }

    /// Wakes when there are deferred changes to write: for the writer thread.
    pub fn wakeups(&self) -> Receiver<()> {
        self.wake.1.clone()
    }

    /// Write every deferred change now, in one batch.
    pub fn drain(&self) -> Result<()> {
        let mut deferred = lock(&self.deferred);
        self.write_deferred(&mut deferred)
    }

    fn write_deferred(&self, queue: &mut Vec<Prepared>) -> Result<()> {
        if queue.is_empty() {
            return Ok(());
        }
        let count = queue.len();
        let (changes, manifests): (Vec<NewChange>, Vec<_>) = std::mem::take(queue)
            .into_iter()
            .map(|p| (p.change, p.manifest))
            .unzip();
        let extras: Vec<Extra<'_>> = manifests
            .iter()
            .map(|manifest| Extra {
                finish_episode: None,
                manifest,
                move_under: None,
            })
            .collect();
        match self
            .store
            .record_many(changes.into_iter().zip(&extras).collect())
        {
            Ok(recorded) => {
                for change in recorded {
                    self.publish(change);
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    "{count} deletes could not be recorded; the next mount records them as \
                     external: {e}"
                );
                Err(e)
            }
        }
    }

    /// The state of `path` as `st` describes it, with its content stored.
    fn capture(&self, path: &[u8], st: &libc::stat) -> Result<FileState> {
        self.capture_with(path, st, true)
    }

    /// Read a file's content now, whatever the cache says: after writes, whose timestamps are
    /// too coarse to tell two versions of the same size apart.
    fn capture_fresh(&self, path: &[u8], st: &libc::stat) -> Result<FileState> {
        self.capture_with(path, st, false)
    }

    /// The cache holds the content last read from a file with no write episode open, keyed by
    /// backing inode and (size, mtime, ctime). It answers only while no episode is open on the
    /// file: then nothing can have written to it since (every write needs an episode).
    fn capture_with(&self, path: &[u8], st: &libc::stat, use_cache: bool) -> Result<FileState> {
        let use_cache = use_cache && !lock(&self.episodes).contains_key(&key_of(st));
        let mode = st.st_mode & 0o7777;
        let io_err = |source| Error::Io {
            path: String::from_utf8_lossy(path).into_owned().into(),
            source,
        };
        match kind_of(st) {
            FileKind::File => {
                let key = key_of(st);
                let sig = Sig::of(st);
                let cached = lock(&self.known)
                    .get(&key)
                    .filter(|(s, ..)| use_cache && *s == sig)
                    .map(|(_, state, sweeps)| (state.clone(), *sweeps));
                // Reusing stored content: keep it from a gc running meanwhile (if one already
                // removed it, read the file again).
                if let Some((state, sweeps)) = cached
                    && state
                        .hash
                        .is_none_or(|h| self.store.keep_blob_since(&h, sweeps).unwrap_or(false))
                {
                    return Ok(FileState { mode, ..state });
                }
                let sweeps = self.store.sweeps();
                let file = self.source.open_read(path).map_err(io_err)?;
                let (hash, size) = self.store.put_blob_reader(file)?;
                let state = FileState {
                    kind: FileKind::File,
                    size,
                    mode,
                    hash: Some(hash),
                };
                let mut known = lock(&self.known);
                if known.len() > 100_000 {
                    known.clear();
                }
                known.insert(key, (sig, state.clone(), sweeps));
                Ok(state)
            }
            FileKind::Symlink => {
                let target = self.source.readlink(path).map_err(io_err)?;
                let hash = self.store.put_blob(&target)?;
                Ok(FileState {
                    kind: FileKind::Symlink,
                    size: target.len() as u64,
                    mode: 0o777,
                    hash: Some(hash),
                })
            }
            kind => Ok(FileState {
                kind,
                size: 0,
                mode,
                hash: None,
            }),
        }
    }

    fn change(&self, kind: ChangeKind, path: &[u8], who: &Who) -> NewChange {
        NewChange {
            time_ns: now_ns(),
            kind: if who.restore {
                ChangeKind::Restore
            } else {
                kind
            },
            path: path.to_vec(),
            from: None,
            before: None,
            after: None,
            session: who.session.clone(),
            agent: who.agent.clone(),
            pid: who.pid,
            process: who.process.clone(),
        }
    }

    fn stripe_of(key: Key) -> usize {
        (key.1 as usize ^ (key.0 as usize).rotate_left(17)) % STRIPES
    }

    /// Hold the locks of these files (in a fixed order, so two holders never deadlock) for an
    /// operation on them and its bookkeeping: a rename, an unlink, the end of an episode.
    pub fn hold(&self, keys: &[Key]) -> Vec<std::sync::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = keys.iter().map(|k| Self::stripe_of(*k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|i| lock(&self.stripes[i]))
            .collect()
    }

    // ---- write episodes ------------------------------------------------------------------

    /// A regular file is about to be opened for writing (or truncated): store its content.
    /// Returns the key to hand back to [`end_write`](Recorder::end_write), if recording.
    pub fn begin_write(&self, path: &[u8], st: &libc::stat, pid: u32) -> Result<Option<Key>> {
        if kind_of(st) != FileKind::File || !self.records(path, false) {
            return Ok(None);
        }
        // A write whose end cannot be recorded must not begin (even when nothing needs storing now).
        self.store.check_writable()?;
        let key = key_of(st);
        // Wait for an episode of this file that is ending to be recorded first.
        drop(self.hold(&[key]));
        self.flush_pending(path)?;
        if let Some(ep) = lock(&self.episodes).get_mut(&key) {
            ep.opens += 1;
            return Ok(Some(key));
        }
        let before = self.capture(path, st)?;
        let who = self.who.who(pid);
        self.open_episode(key, path, Some(before), who, false)?;
        Ok(Some(key))
    }

    /// A regular file was just created (and opened).
    pub fn begin_create(&self, path: &[u8], st: &libc::stat, pid: u32) -> Result<Option<Key>> {
        if !self.records(path, false) {
            return Ok(None);
        }
        self.store.check_writable()?;
        let who = self.who.who(pid);
        self.open_episode(key_of(st), path, None, who, true)?;
        Ok(Some(key_of(st)))
    }

    fn open_episode(
        &self,
        key: Key,
        path: &[u8],
        before: Option<FileState>,
        who: Who,
        created: bool,
    ) -> Result<()> {
        // A new file needs no marker: if the daemon dies before its end, the scan at the next
        // mount finds it anyway. A marker keeps the before state of a file being changed.
        if !created {
            self.put_marker(path, before.clone(), &who)?;
        }
        let mut episodes = lock(&self.episodes);
        // Another open of the same file may have won the race while we captured: join it.
        episodes
            .entry(key)
            .and_modify(|ep| ep.opens += 1)
            .or_insert(Episode {
                path: path.to_vec(),
                before,
                opens: 1,
                who,
                created,
                orphaned: false,
            });
        Ok(())
    }

    fn put_marker(&self, path: &[u8], before: Option<FileState>, who: &Who) -> Result<()> {
        let marker = OpenEpisode {
            before,
            time_ns: now_ns(),
            session: who.session.clone(),
            agent: who.agent.clone(),
            pid: who.pid,
            process: who.process.clone(),
        };
        self.store.put_open_episode(path, &marker)
    }

    /// A handle that began an episode was released. At the last one, record what changed.
    pub fn end_write(&self, key: Key) -> Result<()> {
        let _held = self.hold(&[key]);
        let (path, before, who, created, orphaned) = {
            let mut episodes = lock(&self.episodes);
            let Some(ep) = episodes.get_mut(&key) else {
                return Ok(());
            };
            ep.opens -= 1;
            if ep.opens > 0 {
                return Ok(());
            }
            let ep = episodes.remove(&key).expect("present above");
            (ep.path, ep.before, ep.who, ep.created, ep.orphaned)
        };
        if let Some(p) = self.finish_episode(key, &path, before, who, created, orphaned)? {
            lock(&self.pending).insert(path, p);
        }
        Ok(())
    }

    /// Record the end of an episode; a created file is returned to be held back instead.
    fn finish_episode(
        &self,
        key: Key,
        path: &[u8],
        before: Option<FileState>,
        who: Who,
        created: bool,
        orphaned: bool,
    ) -> Result<Option<Pending>> {
        if orphaned {
            self.store.drop_open_episode(path)?;
            return Ok(None);
        }
        // Gone, or the name now belongs to something else: what this file became is not in the
        // tree.
        let Some(st) = self.stat_if_same(path, key) else {
            self.store.drop_open_episode(path)?;
            return Ok(None);
        };
        self.reload_ignore_if(path);
        if created {
            return Ok(Some(Pending {
                replaces: None,
                key,
                who,
                time_ns: now_ns(),
                since: Instant::now(),
            }));
        }
        let after = self.capture_fresh(path, &st)?;
        if before.as_ref() == Some(&after) {
            self.store.drop_open_episode(path)?;
            return Ok(None);
        }
        let mut change = self.change(ChangeKind::Modify, path, &who);
        change.before = before;
        change.after = Some(after);
        let manifest = [(path.to_vec(), Some(seen_of(&st)))];
        self.record(
            change,
            &Extra {
                finish_episode: Some(path),
                manifest: &manifest,
                move_under: None,
            },
        )?;
        Ok(None)
    }

    /// `path`'s stat, if it is still the file `key` (not gone, not replaced).
    fn stat_if_same(&self, path: &[u8], key: Key) -> Option<libc::stat> {
        self.source.lstat(path).ok().filter(|st| key_of(st) == key)
    }

    /// Record what an open episode on `key` (at `path`) has changed so far, and let it go on
    /// from the current content. A RELEASE reaches us after the writer's close, so a chmod,
    /// unlink or rename can come while the episode that just wrote the file is still open; it
    /// must be recorded first, or history would not be a chain.
    fn cut_episode(&self, key: Key, path: &[u8]) -> Result<()> {
        let (before, who, created) = match lock(&self.episodes).get(&key) {
            Some(ep) if !ep.orphaned && ep.path == path => {
                (ep.before.clone(), ep.who.clone(), ep.created)
            }
            _ => return Ok(()),
        };
        let Some(st) = self.stat_if_same(path, key) else {
            return Ok(());
        };
        let now = self.capture_fresh(path, &st)?;
        if before.as_ref() != Some(&now) {
            let kind = if created {
                ChangeKind::Create
            } else {
                ChangeKind::Modify
            };
            let mut change = self.change(kind, path, &who);
            change.before = before;
            change.after = Some(now.clone());
            self.record_one(change, &[(path.to_vec(), Some(seen_of(&st)))])?;
        }
        self.put_marker(path, Some(now.clone()), &who)?;
        if let Some(ep) = lock(&self.episodes).get_mut(&key) {
            ep.before = Some(now);
            ep.created = false;
        }
        Ok(())
    }

    // ---- pending creates -----------------------------------------------------------------

    /// A held-back file at `path` that replaces an earlier one (a rename-away save) is a
    /// `modify`, not a temporary: record it before anything treats it as one.
    fn flush_saved(&self, path: &[u8]) -> Result<()> {
        if lock(&self.pending)
            .get(path)
            .is_some_and(|p| p.replaces.is_some())
        {
            self.flush_pending(path)?;
        }
        Ok(())
    }

    /// Record the creation of `path` now if it is held back.
    fn flush_pending(&self, path: &[u8]) -> Result<()> {
        let Some(p) = lock(&self.pending).remove(path) else {
            return Ok(());
        };
        self.record_create(path, p)
    }

    /// The content of a held-back new file, captured now, and the stat it was captured under
    /// (for the manifest: times may have moved since the create); `None` if it is gone.
    fn pending_content(&self, path: &[u8], p: &Pending) -> Result<Option<(FileState, Seen)>> {
        match self.stat_if_same(path, p.key) {
            Some(st) => Ok(Some((self.capture_fresh(path, &st)?, seen_of(&st)))),
            None => Ok(None),
        }
    }

    fn record_create(&self, path: &[u8], p: Pending) -> Result<()> {
        let Some((after, seen)) = self.pending_content(path, &p)? else {
            return Ok(());
        };
        if p.replaces.as_ref() == Some(&after) {
            // Saved unchanged.
            self.store.put_manifest(&[(path.to_vec(), Some(seen))])?;
            return Ok(());
        }
        let kind = match p.replaces {
            Some(_) => ChangeKind::Modify,
            None => ChangeKind::Create,
        };
        let mut change = self.change(kind, path, &p.who);
        change.time_ns = p.time_ns;
        change.before = p.replaces.clone();
        change.after = Some(after);
        let manifest = [(path.to_vec(), Some(seen))];
        self.record(
            change,
            &Extra {
                finish_episode: Some(path),
                manifest: &manifest,
                move_under: None,
            },
        )?;
        Ok(())
    }

    /// Record held-back creates older than [`PENDING_FOR`] (all of them with `all`).
    pub fn flush_pending_older(&self, all: bool) -> Result<()> {
        if all {
            self.drain()?;
        }
        let mut due: Vec<(u64, Vec<u8>, Key)> = lock(&self.pending)
            .iter()
            .filter(|(_, p)| all || p.since.elapsed() >= PENDING_FOR)
            .map(|(path, p)| (p.time_ns, path.clone(), p.key))
            .collect();
        due.sort();
        for (_, path, key) in due {
            // Under the file's lock, so an unlink or rename of it waits for the create to be
            // recorded (or finds it still held back and deals with it itself).
            let _held = self.hold(&[key]);
            let Some(p) = lock(&self.pending).remove(&path) else {
                continue;
            };
            self.record_create(&path, p)?;
        }
        Ok(())
    }

    /// Flush held-back creates at or below `dir` (before the directory is renamed).
    fn flush_pending_under(&self, dir: &[u8]) -> Result<()> {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        let paths: Vec<Vec<u8>> = lock(&self.pending)
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .cloned()
            .collect();
        for p in paths {
            self.flush_pending(&p)?;
        }
        Ok(())
    }

    // ---- single operations ---------------------------------------------------------------

    /// `path` (described by `st`) is about to be unlinked: its content is stored now. Returns the
    /// delete to hand to [`defer`](Recorder::defer) once the unlink has succeeded. The caller
    /// holds the file until the unlink is done.
    pub fn before_unlink(
        &self,
        path: &[u8],
        st: &libc::stat,
        pid: u32,
    ) -> Result<Option<Prepared>> {
        let key = key_of(st);
        {
            let mut episodes = lock(&self.episodes);
            if let Some(ep) = episodes.get_mut(&key)
                && ep.created
                && ep.path == path
            {
                // A file created and deleted while still open: a temporary file.
                ep.orphaned = true;
                drop(episodes);
                self.store.drop_open_episode(path)?;
                return Ok(None);
            }
        }
        // What the file's open episode wrote so far comes before its deletion.
        if self.records(path, false) {
            self.cut_episode(key, path)?;
        }
        if st.st_nlink <= 1
            && let Some(ep) = lock(&self.episodes).get_mut(&key)
        {
            ep.orphaned = true;
        }
        self.flush_saved(path)?;
        if lock(&self.pending).remove(path).is_some() {
            // Created and deleted before anyone saw it: a temporary file. Nothing to record.
            self.store.drop_open_episode(path)?;
            return Ok(None);
        }
        if !self.records(path, false) {
            return Ok(None);
        }
        // The delete itself is written later (`defer`): it must be writable now.
        self.store.check_writable()?;
        if self.saved_by_renaming_away(path, st, pid)? {
            return Ok(None);
        }
        let before = self.capture(path, st)?;
        if st.st_nlink <= 1 {
            // The inode number may be reused by the next file created.
            lock(&self.known).remove(&key);
        }
        let who = self.who.who(pid);
        let mut change = self.change(ChangeKind::Delete, path, &who);
        change.before = Some(before);
        Ok(Some(Prepared {
            change,
            manifest: vec![(path.to_vec(), None)],
        }))
    }

    /// `path`, a file that `pid` renamed away from its name moments ago, is being deleted while
    /// a new file by the same process stands under that name: an editor's save (vim renames
    /// the original to a backup, writes the new file, deletes the backup). It becomes one
    /// `modify` of the name: the rename is taken back, the delete is not recorded, and the new
    /// file's create is recorded as a modify from the original content. Whether it was one.
    fn saved_by_renaming_away(&self, path: &[u8], st: &libc::stat, pid: u32) -> Result<bool> {
        let Some(away) = lock(&self.renamed_away).remove(path) else {
            return Ok(false);
        };
        if away.pid != pid || away.key != key_of(st) || away.at.elapsed() > SAVE_WINDOW {
            return Ok(false);
        }
        // Nothing else may have happened to either name since the rename.
        self.drain()?;
        let last = |p: &[u8]| -> Result<Option<u64>> {
            Ok(self.store.last_change_until(p, u64::MAX)?.map(|c| c.id))
        };
        if last(path)? != Some(away.change.id) || last(&away.from)? != Some(away.change.id) {
            return Ok(false);
        }
        let original = away.change.after.clone();
        let converted = match lock(&self.pending).get_mut(&away.from) {
            Some(p) if p.who.pid == pid && p.replaces.is_none() => {
                p.replaces = original.clone();
                true
            }
            _ => false,
        } || match lock(&self.episodes)
            .values_mut()
            .find(|ep| ep.path == away.from && ep.created && ep.who.pid == pid)
        {
            // Still being written (RELEASE comes after close): its end records the modify.
            Some(ep) => {
                ep.created = false;
                ep.before = original.clone();
                true
            }
            None => false,
        };
        if !converted {
            return Ok(false);
        }
        self.store.retract(&away.change)?;
        self.store.put_manifest(&[(path.to_vec(), None)])?;
        if st.st_nlink <= 1 {
            lock(&self.known).remove(&key_of(st));
        }
        Ok(true)
    }

    /// `path` was removed by `rmdir`; `st` is how it was.
    pub fn after_rmdir(&self, path: &[u8], st: &libc::stat, pid: u32) -> Result<()> {
        if !self.records(path, true) {
            return Ok(());
        }
        let who = self.who.who(pid);
        let mut change = self.change(ChangeKind::Rmdir, path, &who);
        change.before = Some(self.capture(path, st)?);
        let manifest = [(path.to_vec(), None)];
        self.record_one(change, &manifest)?;
        Ok(())
    }

    /// A new object exists at `path` (mkdir, symlink, link, mknod): record it.
    pub fn after_new(&self, kind: ChangeKind, path: &[u8], pid: u32) -> Result<()> {
        let Ok(st) = self.source.lstat(path) else {
            return Ok(());
        };
        if !self.records(path, kind_of(&st) == FileKind::Dir) {
            return Ok(());
        }
        let who = self.who.who(pid);
        let mut change = self.change(kind, path, &who);
        change.after = Some(self.capture(path, &st)?);
        let manifest = [(path.to_vec(), Some(seen_of(&st)))];
        self.record_one(change, &manifest)?;
        Ok(())
    }

    /// `path` is about to get mode `mode`. Returns the change to retract if chmod fails. The
    /// caller holds the file until the chmod is done.
    pub fn before_chmod(
        &self,
        path: &[u8],
        st: &libc::stat,
        mode: u32,
        pid: u32,
    ) -> Result<Option<Change>> {
        let is_dir = kind_of(st) == FileKind::Dir;
        if st.st_mode & 0o7777 == mode & 0o7777 || !self.records(path, is_dir) {
            return Ok(None);
        }
        // A new file whose creation is not recorded yet (still open, or held back): its create
        // will carry the mode it has by then. `tar` and `cp` set the mode of every file they
        // make; that is part of making it, not a change of its own.
        let key = key_of(st);
        let new_file = lock(&self.pending).get(path).is_some_and(|p| p.key == key)
            || lock(&self.episodes).get(&key).is_some_and(|ep| ep.created);
        if new_file {
            return Ok(None);
        }
        self.flush_pending(path)?;
        self.cut_episode(key, path)?;
        let who = self.who.who(pid);
        let before = self.capture(path, st)?;
        let after = FileState {
            mode: mode & 0o7777,
            ..before.clone()
        };
        let mut seen = seen_of(st);
        seen.mode = after.mode;
        let mut change = self.change(ChangeKind::Chmod, path, &who);
        change.before = Some(before);
        change.after = Some(after);
        let manifest = [(path.to_vec(), Some(seen))];
        let recorded = self.record_one(change, &manifest)?;
        // An episode still open on the file goes on from the new mode.
        if let Some(ep) = lock(&self.episodes).get_mut(&key_of(st))
            && let Some(before) = &mut ep.before
        {
            before.mode = mode & 0o7777;
        }
        Ok(Some(recorded))
    }

    /// `src` is about to be renamed to `dst` (which may exist, as `dst_st`). Returns the
    /// changes to retract if the rename then fails. The caller holds both files (see
    /// [`hold`](Recorder::hold)) until the rename is done.
    pub fn before_rename(
        &self,
        src: &[u8],
        src_st: &libc::stat,
        dst: &[u8],
        dst_st: Option<&libc::stat>,
        exchange: bool,
        pid: u32,
    ) -> Result<Vec<Change>> {
        let src_dir = kind_of(src_st) == FileKind::Dir;
        if src_dir {
            self.flush_pending_under(src)?;
        }
        self.flush_pending(dst)?;
        // What open episodes wrote so far comes before the rename: the target's, which is about
        // to be replaced, and the source's unless it is a new file still being written (a
        // save-by-rename, handled below).
        if let Some(st) = dst_st
            && self.records(dst, false)
        {
            self.cut_episode(key_of(st), dst)?;
        }
        let src_created = lock(&self.episodes)
            .get(&key_of(src_st))
            .is_some_and(|ep| ep.created);
        if !src_dir && !src_created && self.records(src, false) {
            self.cut_episode(key_of(src_st), src)?;
        }
        let src_recorded = self.records(src, src_dir);
        let dst_recorded = self.records(dst, src_dir);
        let who = self.who.who(pid);
        let dst_before = match dst_st {
            Some(st) if dst_recorded => Some(self.capture(dst, st)?),
            _ => None,
        };
        if let Some(st) = dst_st
            && !exchange
            && st.st_nlink <= 1
        {
            // Replaced: its inode number may be reused by the next file created.
            lock(&self.known).remove(&key_of(st));
        }
        if let Some(st) = dst_st
            && !exchange
            && st.st_nlink <= 1
            && let Some(ep) = lock(&self.episodes).get_mut(&key_of(st))
        {
            ep.orphaned = true;
        }
        // An episode still open on the source moves with it. If it created the file, this is a
        // save-by-rename still being written: its end records one change of the target.
        let moved_creation = {
            let mut episodes = lock(&self.episodes);
            match episodes.get_mut(&key_of(src_st)) {
                Some(ep) if !exchange => {
                    ep.path = dst.to_vec();
                    let was_created = ep.created;
                    if ep.created && dst_before.is_some() {
                        ep.created = false;
                        ep.before = dst_before.clone();
                    }
                    Some((was_created, ep.before.clone(), ep.who.clone()))
                }
                _ => None,
            }
        };
        if let Some((was_created, before, ep_who)) = moved_creation {
            self.store.drop_open_episode(src)?;
            if dst_recorded {
                self.put_marker(dst, before, &ep_who)?;
            }
            if was_created {
                return Ok(Vec::new());
            }
        }
        let mut out = Vec::new();
        let src_seen = seen_of(src_st);
        self.flush_saved(src)?;
        if let Some(p) = lock(&self.pending).remove(src) {
            // Save-by-rename: a new file renamed into place. One change of the target.
            self.store.drop_open_episode(src)?;
            if !dst_recorded {
                return Ok(out);
            }
            let kind = if dst_before.is_some() {
                ChangeKind::Modify
            } else {
                ChangeKind::Create
            };
            let Some((after, seen)) = self.pending_content(src, &p)? else {
                return Ok(out);
            };
            let mut change = self.change(kind, dst, &p.who);
            change.before = dst_before;
            change.after = Some(after);
            let manifest = [(dst.to_vec(), Some(seen))];
            out.push(self.record_one(change, &manifest)?);
            return Ok(out);
        }
        if !src_recorded && !dst_recorded {
            return Ok(out);
        }
        let src_state = self.capture(src, src_st)?;
        let mut change = self.change(ChangeKind::Rename, dst, &who);
        change.from = src_recorded.then(|| src.to_vec());
        change.before = dst_before.clone();
        change.after = dst_recorded.then(|| src_state.clone());
        let mut manifest = vec![(dst.to_vec(), dst_recorded.then(|| src_seen.clone()))];
        if exchange {
            if let Some(st) = dst_st {
                manifest.push((src.to_vec(), Some(seen_of(st))));
            }
        } else {
            manifest.push((src.to_vec(), None));
        }
        let move_under = (src_dir && !exchange).then_some((src, dst));
        let extra = Extra {
            finish_episode: None,
            manifest: &manifest,
            move_under,
        };
        let recorded = self.record(change, &extra)?;
        if !src_dir
            && !exchange
            && dst_st.is_none()
            && src_recorded
            && dst_recorded
            && kind_of(src_st) == FileKind::File
        {
            // Perhaps the first step of a rename-away save (see `saved_by_renaming_away`).
            let mut away = lock(&self.renamed_away);
            if away.len() >= 64 {
                away.retain(|_, a| a.at.elapsed() <= SAVE_WINDOW);
            }
            away.insert(
                dst.to_vec(),
                RenamedAway {
                    from: src.to_vec(),
                    key: key_of(src_st),
                    change: recorded.clone(),
                    pid,
                    at: Instant::now(),
                },
            );
        }
        out.push(recorded);
        if exchange && let Some(dst_before) = dst_before {
            let mut back = self.change(ChangeKind::Rename, src, &who);
            back.from = Some(dst.to_vec());
            back.before = Some(src_state);
            back.after = Some(dst_before);
            out.push(self.record(back, &Extra::default())?);
        }
        Ok(out)
    }

    /// An operation recorded in advance failed: take its changes back.
    pub fn retract(&self, changes: &[Change]) {
        for c in changes.iter().rev() {
            if let Err(e) = self.store.retract(c) {
                tracing::error!(
                    "cannot retract change {} after a failed operation: {e}",
                    c.id
                );
            }
        }
    }

    /// Metadata of `path` changed without a recorded change (timestamps): keep the manifest
    /// in step so the next mount does not mistake it for an outside change.
    pub fn touched(&self, path: &[u8], st: &libc::stat) {
        // A file being written, or new and still held back, gets its manifest entry when that
        // is recorded. Until then it may not belong there at all: a temporary file renamed over
        // its target never does (with the writeback cache its times arrive while it is open).
        let key = key_of(st);
        if lock(&self.pending).contains_key(path) || lock(&self.episodes).contains_key(&key) {
            return;
        }
        // Only timestamps changed. With no write episode open the content cannot have changed
        // either (every write needs one), so the last capture stays valid under the new stat;
        // `tar` and `cp -p` set times right after writing, and would otherwise force a re-read.
        if let Some((sig, state, _)) = lock(&self.known).get_mut(&key)
            && sig.size == st.st_size
            && state.kind == FileKind::File
        {
            *sig = Sig::of(st);
        }
        if self.records(path, kind_of(st) == FileKind::Dir)
            && let Err(e) = self
                .store
                .put_manifest(&[(path.to_vec(), Some(seen_of(st)))])
        {
            tracing::warn!("manifest update failed: {e}");
        }
    }

    /// Make everything recorded so far durable (for `fsync` in the workspace, and unmount).
    pub fn sync(&self) -> Result<()> {
        self.flush_pending_older(true)?;
        self.drain()?;
        self.store.sync()
    }
}

/// What the scan at mount found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Write episodes cut short by a crash, now recorded.
    pub episodes: usize,
    /// Changes made while nothing was mounted, recorded as agent `external`.
    pub external: usize,
}

impl Recorder {
    /// Before mounting: finish episodes a crash cut short, and record what changed in the
    /// workspace while it was not mounted (compared with the manifest the mount left).
    pub fn recover(&self) -> Result<Recovery> {
        let mut report = Recovery::default();
        for (path, ep) in self.store.open_episodes()? {
            let who = Who {
                session: ep.session,
                agent: ep.agent,
                pid: ep.pid,
                process: ep.process,
                restore: false,
            };
            let now = self
                .source
                .lstat(&path)
                .ok()
                .filter(|st| kind_of(st) == FileKind::File);
            let after = now.as_ref().map(|st| self.capture(&path, st)).transpose()?;
            if after != ep.before {
                let kind = match (&ep.before, &after) {
                    (None, _) => ChangeKind::Create,
                    (_, None) => ChangeKind::Delete,
                    _ => ChangeKind::Modify,
                };
                let mut change = self.change(kind, &path, &who);
                change.before = ep.before;
                change.after = after;
                let manifest = [(path.clone(), now.as_ref().map(seen_of))];
                let extra = Extra {
                    finish_episode: Some(&path),
                    manifest: &manifest,
                    move_under: None,
                };
                self.record(change, &extra)?;
                report.episodes += 1;
            } else {
                self.store.drop_open_episode(&path)?;
            }
        }

        let current = self.walk()?;
        let first_mount = self.store.meta(b"manifest")?.is_none();
        if !first_mount {
            let old: HashMap<Vec<u8>, Seen> = self.store.manifest()?.into_iter().collect();
            report.external = self.record_external(&old, &current)?;
        }
        let entries: Vec<(Vec<u8>, Seen)> = current
            .iter()
            .map(|(p, (_, seen))| (p.clone(), seen.clone()))
            .collect();
        self.store.replace_manifest(&entries)?;
        Ok(report)
    }

    /// Every recorded path in the workspace, with its stat.
    fn walk(&self) -> Result<std::collections::BTreeMap<Vec<u8>, (libc::stat, Seen)>> {
        let mut out = std::collections::BTreeMap::new();
        let mut dirs = vec![Vec::new()];
        while let Some(dir) = dirs.pop() {
            let names = match self.source.read_dir(&dir) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("scan: cannot read {}: {e}", String::from_utf8_lossy(&dir));
                    continue;
                }
            };
            for name in names {
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                let Ok(st) = self.source.lstat(&path) else {
                    continue;
                };
                let is_dir = kind_of(&st) == FileKind::Dir;
                if !self.records(&path, is_dir) {
                    continue;
                }
                if is_dir {
                    dirs.push(path.clone());
                }
                out.insert(path, (st, seen_of(&st)));
            }
        }
        Ok(out)
    }

    fn record_external(
        &self,
        old: &HashMap<Vec<u8>, Seen>,
        current: &std::collections::BTreeMap<Vec<u8>, (libc::stat, Seen)>,
    ) -> Result<usize> {
        let who = Who {
            session: self.who.default_session().to_string(),
            agent: "external".into(),
            pid: 0,
            process: "external".into(),
            restore: false,
        };
        // What we knew of a path: its last recorded state if that matches the manifest.
        let known_before = |path: &[u8], seen: &Seen| -> Result<FileState> {
            let last = self.store.last_change_until(path, u64::MAX)?;
            let recorded = last.and_then(|c| if c.path == path { c.after } else { None });
            Ok(match recorded {
                Some(s) if s.kind == seen.kind && s.size == seen.size && s.mode == seen.mode => s,
                _ => FileState {
                    kind: seen.kind,
                    size: seen.size,
                    mode: seen.mode,
                    hash: None,
                },
            })
        };
        let mut count = 0;
        // Deletions, deepest first, so a folder's contents go before the folder.
        let mut gone: Vec<&Vec<u8>> = old.keys().filter(|p| !current.contains_key(*p)).collect();
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
            let manifest = [(path.clone(), None)];
            self.record_one(change, &manifest)?;
            count += 1;
        }
        // New and changed paths, parents first (BTreeMap order).
        for (path, (st, seen)) in current {
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
            let mut change = self.change(kind, path, &who);
            change.before = old.get(path).map(|s| known_before(path, s)).transpose()?;
            change.after = Some(self.capture(path, st)?);
            let manifest = [(path.clone(), Some(seen.clone()))];
            if change.before == change.after {
                // Only its times moved: remember them, so the next mount need not read it again.
                self.store.put_manifest(&manifest)?;
                continue;
            }
            self.record_one(change, &manifest)?;
            count += 1;
        }
        Ok(count)
    }
}
