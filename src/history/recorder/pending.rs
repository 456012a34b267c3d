//! Held-back creates. A new file's create is recorded [`PENDING_FOR`] after its last close,
//! by the daemon's pending thread, so that a temporary file renamed over its target
//! (save-by-rename) becomes one `modify` of the target, and one deleted before anyone saw it
//! never shows. Its content is captured when the create is recorded (the file cannot change
//! meanwhile without flushing it first).

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::capture::{Found, Source, hidden, key_of, out_of_sight, seen_of};
use super::{Key, Recorder, lock};
use crate::history::Result;
use crate::history::change::{ChangeKind, FileState, Fsynced, OpenEpisode, Reserved, Seen};
use crate::history::db::Extra;
use crate::history::who::Who;
use crate::history::{join, show_path};

/// How long a new file's creation is held back, waiting to see whether it is a temporary file
/// renamed over its target (save-by-rename) or deleted.
pub const PENDING_FOR: Duration = Duration::from_millis(500);

/// Held-back creates below a folder renamed from `.0` to `.1` that wait for their paths to be
/// looked up again (`.2`): see [`Recorder::move_hidden_creates`].
pub(super) type HiddenMove<'a> = (&'a [u8], &'a [u8], Vec<Vec<u8>>);

/// A created file whose creation is not recorded yet.
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) key: Key,
    pub(super) who: Who,
    pub(super) time_ns: u64,
    /// The id set aside when the file's episode ended, so that its create keeps its place
    /// among changes recorded meanwhile; released if nothing is recorded.
    pub(super) id: u64,
    pub(super) since: Instant,
    /// The file this one replaces in a rename-away save (see `saves`): its state before, so
    /// the create is recorded as a `modify`.
    pub(super) replaces: Option<FileState>,
    /// Fsynced: its marker is in the store ([`Recorder::sync_file`]).
    pub(super) fsynced: Option<Fsynced>,
    /// The file as its episode's end left it: the marker of a create that waits for its path
    /// to be looked up again says so, so that a crash or an unmount leaves it to the next mount
    /// as its writer's only if nothing changed it since ([`Recorder::mark_waiting`]).
    pub(super) ended: Fsynced,
    /// A handle to read it from when the daemon cannot open it by its name (see
    /// `Episode::reader`).
    pub(super) reader: Option<Arc<File>>,
}

impl Recorder {
    /// A held-back file at `path` that replaces an earlier one (a rename-away save) is a
    /// `modify`, not a temporary: record it before anything treats it as one.
    pub(super) fn flush_saved(&self, path: &[u8]) -> Result<()> {
        if lock(&self.pending)
            .get(path)
            .is_some_and(|p| p.replaces.is_some())
        {
            self.flush_pending(path)?;
        }
        Ok(())
    }

    /// Record the creation of `path` now if it is held back.
    pub(super) fn flush_pending(&self, path: &[u8]) -> Result<()> {
        let Some(p) = lock(&self.pending).remove(path) else {
            return Ok(());
        };
        self.record_create_or_keep(path, p)
    }

    /// Record a held-back create; if the store cannot take it (a full disk), it stays held
    /// back, to be recorded once the store takes writes again.
    pub(super) fn record_create_or_keep(&self, path: &[u8], p: Pending) -> Result<()> {
        let kept = p.clone();
        let result = self.record_create(path, p);
        match &result {
            Err(crate::history::Error::Store(_)) => {
                lock(&self.pending).entry(path.to_vec()).or_insert(kept);
            }
            Err(e) if out_of_sight(e) => {
                if self.note_out_of_sight(path, e) {
                    // It may wait long: a crash meanwhile leaves it to the next mount.
                    self.mark_waiting(path, &kept);
                }
                lock(&self.pending).entry(path.to_vec()).or_insert(kept);
            }
            // Not recorded, and not to be tried again: its id is given back.
            Err(_) => self.release_id(kept.id),
            Ok(()) => {}
        }
        result
    }

    /// A held-back create taken out of the table (its id given back) for an operation that was
    /// then refused goes back in, with an id set aside again: the same one if nothing came
    /// after it. Its file is still there, and is recorded as if never taken out.
    pub(super) fn hold_back_again(&self, path: &[u8], p: Pending) {
        let (id, time_ns) = self.reserve_id_again(&p.who);
        lock(&self.pending).insert(path.to_vec(), Pending { id, time_ns, ..p });
    }

    /// The content of a held-back new file, captured now as the next version of `version_of`
    /// (its own path, or the one it is saved over), and the stat it was captured under (for
    /// the manifest: times may have moved since the create); `None` if it is gone.
    pub(super) fn pending_content(
        &self,
        path: &[u8],
        p: &Pending,
        version_of: &[u8],
    ) -> Result<Option<(FileState, Seen)>> {
        match self.stat_if_same(path, p.key) {
            Some(st) => Ok(Some((
                self.capture_fresh_as(path, &st, version_of, p.reader.as_deref())?,
                seen_of(&st),
            ))),
            None => Ok(None),
        }
    }

    fn record_create(&self, path: &[u8], mut p: Pending) -> Result<()> {
        let _quieting = self.quieting.read().unwrap_or_else(|e| e.into_inner());
        // Its id is given back only once nothing can fail any more: a failure keeps the create
        // held back with its id (`record_create_or_keep`), and an id given back twice could
        // take another's, set aside meanwhile, so that two changes get one id.
        if !self.records(path, false) {
            // Its folder became ignored while it was held back.
            self.history.drop_open_episode(path)?;
            self.release_id(p.id);
            return Ok(());
        }
        if p.replaces.is_none()
            && let Some(original) = self.saved_keeping_backup(path, &p)?
        {
            p.replaces = Some(original);
        }
        let st = match self.find_same(path, p.key, p.reader.as_deref()) {
            Found::Same(st) => st,
            Found::Gone => {
                self.history.drop_open_episode(path)?;
                self.release_id(p.id);
                return Ok(());
            }
            // Kept held back with its id, and recorded once it can be looked up.
            Found::Hidden(source) => return Err(hidden(path, source)),
        };
        // Its content goes in the create's batch (as an episode's end's does).
        let captured = self.capture_end(path, &st, path, p.reader.as_deref())?;
        let (after, seen) = (captured.state.clone(), seen_of(&st));
        if p.replaces.as_ref() == Some(&after) {
            // Saved unchanged.
            self.history.put_manifest(&[(path.to_vec(), Some(seen))])?;
            self.history.drop_open_episode(path)?;
            self.release_id(p.id);
            self.captured(captured, false);
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
        change.links = self.other_names(p.key, path);
        let manifest = self.manifest_of_names(path, &change.links, seen);
        self.record_as(
            change,
            &Extra {
                finish_episode: Some(path),
                manifest: &manifest,
                move_under: None,
                content: captured.content.as_ref(),
                marker: None,
            },
            Some(p.id),
        )?;
        self.captured(captured, true);
        Ok(())
    }

    /// `fsync` of the file `st` (the handle's own `fstat`): what the history has of it is made
    /// durable. A new file whose create is not recorded yet (still being written, or held
    /// back) is not recorded now, as that would end it too early: an editor fsyncs the
    /// temporary file it then renames over its target, which must stay one `modify`. Its
    /// marker is written instead (an open-episode marker with no before state, or the saved
    /// file's in a rename-away save), with who made it and the file as this fsync left it, so
    /// that after a crash the next mount records its create as theirs (`recovery.rs`). The
    /// marker goes with the batch that records the create, or when the file goes first.
    /// Other files' held-back creates stay held back.
    pub fn sync_file(&self, st: &libc::stat) -> Result<()> {
        let _pins = self.pin_scope();
        {
            // As an episode's end holds them: the file's episode and held-back create stay
            // where they are (not ended, recorded, renamed or moved with a folder) meanwhile.
            let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
            let _held = self.hold(&[key_of(st)]);
            self.mark_fsynced(st)?;
        }
        self.drain()?;
        Ok(self.history.store().sync()?)
    }

    /// Write (or write again, with the file as it is now) the marker of the new file `st` if
    /// its create is not recorded yet. Written under the table's lock that holds it, so a
    /// rename-away save that makes it a `modify` (`saves.rs`) writes its marker before or
    /// after this one, never in between.
    fn mark_fsynced(&self, st: &libc::stat) -> Result<()> {
        let key = key_of(st);
        let fsynced = Some(Fsynced::of(st));
        {
            let mut episodes = lock(&self.episodes);
            if let Some(ep) = episodes.get_mut(&key) {
                if !ep.orphaned && (ep.created || ep.fsynced.is_some()) {
                    self.put_marker(&ep.path, ep.before.clone(), &ep.who, fsynced)?;
                    ep.fsynced = fsynced;
                } else if !ep.orphaned {
                    // An edit of a file that was there: its marker, if it has none yet.
                    self.mark(ep)?;
                }
                return Ok(());
            }
        }
        let mut pending = lock(&self.pending);
        if let Some((path, p)) = pending.iter_mut().find(|(_, p)| p.key == key) {
            self.put_pending_marker(
                path,
                &Pending {
                    fsynced,
                    ..p.clone()
                },
            )?;
            p.fsynced = fsynced;
        }
        Ok(())
    }

    /// Write the marker of the held-back create `p` of `path`, with the id set aside for it
    /// and its time: a crash before it is recorded leaves it to the next mount, which records
    /// it with them if that id is still free (`recovery.rs`).
    pub(super) fn put_pending_marker(&self, path: &[u8], p: &Pending) -> Result<()> {
        self.history.put_open_episode(path, &pending_marker(p))
    }

    /// Record held-back creates older than [`PENDING_FOR`] (all of them with `all`), after the
    /// queued deletes and episode ends the store could not take before.
    pub fn flush_pending_older(&self, all: bool) -> Result<()> {
        let _pins = self.pin_scope();
        // What the store could not take before (a full disk) comes first: queued deletes and
        // the ends of episodes.
        self.drain()?;
        self.retry_ends()?;
        self.flush_pending_where(|p| all || p.since.elapsed() >= PENDING_FOR)
    }

    /// Record the held-back creates of `session` now, and the queued deletes. Other sessions'
    /// stay held back: one of them may be a temporary file about to be renamed over its target.
    pub fn flush_pending_of(&self, session: &str) -> Result<()> {
        let _pins = self.pin_scope();
        self.drain()?;
        self.flush_pending_where(|p| p.who.session == session)
    }

    fn flush_pending_where(&self, due: impl Fn(&Pending) -> bool) -> Result<()> {
        let mut due: Vec<(u64, Vec<u8>, Key)> = lock(&self.pending)
            .iter()
            .filter(|(_, p)| due(p))
            .map(|(path, p)| (p.time_ns, path.clone(), p.key))
            .collect();
        due.sort();
        for (_, path, key) in due {
            // Under the file's lock, so an unlink or rename of it waits for the create to be
            // recorded (or finds it still held back and deals with it itself); and as an
            // episode's end, so a settle waits for a create taken out of the table before it
            // looked until it is recorded.
            let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
            let _held = self.hold(&[key]);
            let Some(p) = lock(&self.pending).remove(&path) else {
                continue;
            };
            SLOW_PENDING.pause();
            match self.record_create_or_keep(&path, p) {
                // Still out of sight, and held back: the others go on.
                Err(e) if out_of_sight(&e) => {}
                Err(e) => return Err(e),
                Ok(()) => self.back_in_sight(&path),
            }
        }
        // A burst of creates (an untar: a table of tens of thousands) would leave its capacity
        // behind for the daemon's life; an empty table gives it back.
        let mut pending = lock(&self.pending);
        if pending.is_empty() {
            pending.shrink_to_fit();
        }
        Ok(())
    }

    /// Flush held-back creates at or below `dir` (before the directory is renamed). Returns
    /// those that stay held back because their path cannot be looked up now (`out_of_sight`),
    /// for [`move_hidden_creates`](Self::move_hidden_creates).
    pub(super) fn flush_pending_under(&self, dir: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        let paths: Vec<Vec<u8>> = lock(&self.pending)
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .cloned()
            .collect();
        let mut hidden = Vec::new();
        for p in paths {
            match self.flush_pending(&p) {
                Err(e) if out_of_sight(&e) => hidden.push(p),
                r => r?,
            }
        }
        Ok(hidden)
    }

    /// The folders `from` were renamed (recorded; two for an exchange): the held-back creates
    /// below them that could not be recorded before (each `(from, to, paths)`) follow, each
    /// with an id set aside again, after the rename's, so that the history never has them
    /// under a folder that is not there, and its marker moved. All are taken out before any
    /// goes back, so an exchange never puts one over another. Each is recorded once its new
    /// path can be looked up.
    pub(super) fn move_hidden_creates(&self, moves: Vec<HiddenMove<'_>>) {
        let mut taken = Vec::new();
        for (from, to, paths) in moves {
            for path in paths {
                let Some(p) = lock(&self.pending).remove(&path) else {
                    continue;
                };
                self.release_id(p.id);
                lock(&self.out_of_sight).remove(&path);
                if let Err(e) = self.history.drop_open_episode(&path) {
                    tracing::warn!("{}: its marker stays: {e}", show_path(&path));
                }
                let mut new = to.to_vec();
                new.extend_from_slice(&path[from.len()..]);
                taken.push((new, p));
            }
        }
        for (path, p) in taken {
            lock(&self.out_of_sight).insert(path.clone());
            self.hold_back_again(&path, p);
            if let Some(p) = lock(&self.pending).get(&path).cloned() {
                self.mark_waiting(&path, &p);
            }
        }
    }

    /// Write the marker of the held-back create `p` of `path` that waits for its path to be
    /// looked up again: with the file as its end left it (unless an fsync's is there), so the
    /// next mount records it as its writer's, in its place, only if nothing changed it since.
    pub(super) fn mark_waiting(&self, path: &[u8], p: &Pending) {
        let marked = Pending {
            fsynced: p.fsynced.or(Some(p.ended)),
            ..p.clone()
        };
        if let Err(e) = self.put_pending_marker(path, &marked) {
            tracing::warn!("{}: no marker for its create: {e}", show_path(path));
        }
    }
}

/// The marker of the held-back create `p` (see [`Recorder::put_pending_marker`]).
pub(super) fn pending_marker(p: &Pending) -> OpenEpisode {
    super::episodes::marker(
        p.replaces.clone(),
        &p.who,
        p.fsynced,
        Some(Reserved {
            id: p.id,
            time_ns: p.time_ns,
        }),
    )
}

/// The live tree as the history has it so far: a new file whose create is still held back (or
/// that is still being written) is not in it yet, and a file being edited (its edit open, or
/// closed and not yet recorded: see `episodes::Closed`) is as it was before the edit. Views of the past read paths unchanged
/// since their point from it, so a file made after a point is never shown at that point, not
/// even in the moment before its create is recorded (the create gets an id after every point
/// there is now), and an edit is never shown at a point before it is recorded (it gets an id
/// after every point there is now, or has one after the point looked at).
pub struct AsRecorded {
    pub recorder: Arc<Recorder>,
    pub source: Arc<dyn Source>,
}

impl AsRecorded {
    fn check(&self, path: &[u8]) -> io::Result<()> {
        let held_back = lock(&self.recorder.pending).contains_key(path);
        if held_back || self.being_made(path) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(())
    }

    /// Whether `path` is a new file still being written (its first episode open): its create
    /// is not recorded yet, as for one held back.
    fn being_made(&self, path: &[u8]) -> bool {
        lock(&self.recorder.episodes)
            .values()
            .any(|ep| ep.created && !ep.orphaned && ep.path == path)
    }

    /// The content before the edit of the file `st` that is open or closed and not recorded
    /// yet, if there is one and its content before is known.
    fn being_edited(&self, st: &libc::stat) -> Option<FileState> {
        if super::capture::kind_of(st) != crate::history::change::FileKind::File {
            return None;
        }
        self.recorder.unrecorded_edit_of(key_of(st))
    }
}

/// `content` as a file to read (an anonymous one, in memory).
fn in_memory(content: &[u8]) -> io::Result<File> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"rewind-as-recorded".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(content)?;
    f.rewind()?;
    Ok(f)
}

impl Source for AsRecorded {
    fn open_read(&self, path: &[u8]) -> io::Result<File> {
        self.check(path)?;
        let st = self.source.lstat(path)?;
        if let Some(before) = self.being_edited(&st)
            && let Some(hash) = before.hash
        {
            let content = self
                .recorder
                .history
                .store()
                .read_blob(&hash)
                .map_err(io::Error::other)?;
            return in_memory(&content);
        }
        self.source.open_read(path)
    }

    fn read_dir(&self, path: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let mut names = self.source.read_dir(path)?;
        let pending = lock(&self.recorder.pending);
        if !pending.is_empty() {
            names.retain(|name| !pending.contains_key(&join(path, name)));
        }
        drop(pending);
        let made: Vec<Vec<u8>> = lock(&self.recorder.episodes)
            .values()
            .filter(|ep| ep.created && !ep.orphaned)
            .map(|ep| ep.path.clone())
            .collect();
        if !made.is_empty() {
            names.retain(|name| !made.contains(&join(path, name)));
        }
        Ok(names)
    }

    fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>> {
        self.check(path)?;
        self.source.readlink(path)
    }

    fn lstat(&self, path: &[u8]) -> io::Result<libc::stat> {
        self.check(path)?;
        let mut st = self.source.lstat(path)?;
        if let Some(before) = self.being_edited(&st)
            && before.hash.is_some()
        {
            st.st_size = before.size as libc::off_t;
            st.st_mode = (st.st_mode & !0o7777) | (before.mode & 0o7777);
        }
        Ok(st)
    }
}

/// Tests only: `REWIND_TEST_SLOW_PENDING=MS` makes the recording of each held-back create wait
/// that long after it is taken out of the table, so that a reader comes in between.
static SLOW_PENDING: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_PENDING");
