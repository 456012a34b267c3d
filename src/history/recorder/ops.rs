//! Single operations on names: unlink, rmdir, mkdir, symlink, link, mknod, chmod, rename.
//! Destructive ones are recorded before they happen, with the content they destroy stored, and
//! taken back ([`Recorder::retract`]) if they then fail; the others after they succeed.

use std::time::Instant;

use super::capture::{key_of, kind_of, seen_of};
use super::journal::{Owed, Prepared};
use super::links::moved_below;
use super::saves::RenamedAway;
use super::{Recorder, lock};
use crate::history::Result;
use crate::history::change::{Change, ChangeKind, FileKind, FileState, Fsynced};
use crate::history::db::Extra;
use crate::history::who::By;

/// An episode moved below a renamed folder, or with its file by an exchange: its file, its
/// path before and after, and what its marker holds.
struct Moved {
    key: super::Key,
    old: Vec<u8>,
    new: Vec<u8>,
    before: Option<FileState>,
    who: crate::history::Who,
    created: bool,
    fsynced: Option<Fsynced>,
}

/// The episode open on a renamed file: what it was (to put back if the rename is refused) and
/// what its marker holds now.
struct EpisodeMoved {
    created: bool,
    before: Option<FileState>,
    fsynced: Option<Fsynced>,
    who: crate::history::Who,
    before_now: Option<FileState>,
    fsynced_now: Option<Fsynced>,
}

/// What a rename's bookkeeping changed, to put back if the rename is refused.
#[derive(Default)]
struct RenameUndo {
    /// The replaced target's file and the names it had.
    replaced_names: Option<(super::Key, Option<std::collections::BTreeSet<Vec<u8>>>)>,
    /// The replaced target's episode, taken as having nothing more to record.
    orphaned: Option<super::Key>,
    /// Episodes below a renamed folder.
    moved_under: Vec<Moved>,
    /// Episodes of the files an exchange swapped.
    swapped: Vec<Moved>,
    /// The episode of a replaced target that keeps another name, moved there.
    kept: Vec<Moved>,
    /// The episode open on the renamed file.
    src_episode: Option<EpisodeMoved>,
}

impl Recorder {
    /// `path` (described by `st`) is about to be unlinked: its content is stored now. Returns
    /// the delete to hand to [`defer`](Recorder::defer) once the unlink has succeeded. The
    /// caller holds the file until the unlink is done.
    pub fn before_unlink(&self, path: &[u8], st: &libc::stat, by: By) -> Result<Option<Prepared>> {
        let _pins = self.pin_scope();
        let key = key_of(st);
        // An edit of it closed but not recorded yet comes first (a FUSE request has recorded
        // it already, `Core::in_order`; a rollback's delete has not): found gone later, it
        // would give its id back, and its writes would be in no change. The caller holds the
        // file.
        self.finish_closed_held(key)?;
        let temporary = lock(&self.episodes)
            .get(&key)
            .is_some_and(|ep| ep.created && ep.path == path && st.st_nlink <= 1);
        if temporary {
            // A file created and deleted while still open: a temporary file. If the store
            // refuses even dropping its marker, the unlink fails and the episode goes on, so
            // its end records the file it leaves.
            self.history.drop_open_episode(path)?;
            if let Some(ep) = lock(&self.episodes).get_mut(&key) {
                ep.orphaned = true;
            }
            return Ok(None);
        }
        // What the file's open episode wrote so far comes before its deletion, which takes
        // that content away.
        let cut = if self.records(path, false) {
            self.cut_episode(key, path)?
        } else {
            None
        };
        // Asked before this name is dropped: a file left with one name is no longer kept.
        let others = self.other_names(key, path);
        let other = others.first().cloned();
        let names = {
            let mut links = lock(&self.links);
            let names = links.names_of(key);
            links.remove(key, path);
            names
        };
        // Where the file's episode went, to put it back if the unlink is refused (the store
        // refuses writes): otherwise its end would record nothing of the file that stays.
        let mut episode_moved = false;
        let mut orphaned = false;
        let prepared = (|| {
            {
                let mut episodes = lock(&self.episodes);
                if let Some(ep) = episodes.get_mut(&key)
                    && ep.path == path
                {
                    // The episode goes on under another name of the file, if it has one.
                    match other {
                        Some(other) if st.st_nlink > 1 => {
                            drop(episodes);
                            episode_moved = true;
                            self.move_marker(key, path, &other)?;
                        }
                        _ => {
                            orphaned = !ep.orphaned;
                            ep.orphaned = true;
                            // Nothing more to record, and its marker (the cut above wrote one)
                            // goes now, under the table's lock as every marker of an open
                            // episode: left at the name until the last handle's RELEASE, a
                            // crash would leave the next mount reading a file that takes the
                            // name meanwhile as this edit going on (`recovery.rs`).
                            if orphaned {
                                self.history.drop_open_episode(path)?;
                            }
                        }
                    }
                }
            }
            self.prepare_delete(path, st, by, others, cut)
        })();
        if prepared.is_err() {
            lock(&self.links).set(key, names);
            if let Some(ep) = lock(&self.episodes).get_mut(&key) {
                if episode_moved {
                    ep.path = path.to_vec();
                }
                if orphaned {
                    ep.orphaned = false;
                }
            }
        }
        prepared
    }

    /// The rest of [`before_unlink`](Recorder::before_unlink), once the name is dropped from
    /// the bookkeeping: a held-back create or a save taken care of, the content stored, the
    /// delete made ready. `cut`: the content an open episode was just cut at, which is what the
    /// delete takes away.
    fn prepare_delete(
        &self,
        path: &[u8],
        st: &libc::stat,
        by: By,
        others: Vec<Vec<u8>>,
        cut: Option<FileState>,
    ) -> Result<Option<Prepared>> {
        let key = key_of(st);
        self.flush_saved(path)?;
        let held = lock(&self.pending).remove(path);
        if let Some(p) = held {
            // Created and deleted before anyone saw it: a temporary file. Nothing to record.
            // If the store refuses even that (a full disk), the unlink fails and the file
            // stays held back, so no view of the past shows it as if recorded.
            if let Err(e) = self.history.drop_open_episode(path) {
                lock(&self.pending).insert(path.to_vec(), p);
                return Err(e);
            }
            self.release_id(p.id);
            return Ok(None);
        }
        if !self.records(path, false) {
            return Ok(None);
        }
        // The delete itself is written later (`defer`): it must be writable now.
        self.check_writable()?;
        if self.saved_by_renaming_away(path, st, by.pid)? {
            return Ok(None);
        }
        let before = match cut {
            Some(cut) => cut,
            None => self.capture(path, st)?,
        };
        if st.st_nlink <= 1 {
            // The inode number may be reused by the next file created.
            self.forget_known(key);
        }
        let who = self.who(by);
        let mut change = self.change(ChangeKind::Delete, path, &who);
        change.before = Some(before);
        if !others.is_empty() {
            // The names it leaves: a rollback links it to them again.
            let mut group = others;
            group.push(path.to_vec());
            group.sort();
            change.groups = vec![group];
        }
        // Written by the writer thread, after this operation's pin scope ends.
        let pins = self
            .history
            .store()
            .pin(change.before.as_ref().and_then(|b| b.hash));
        Ok(Some(Prepared {
            change,
            manifest: vec![(path.to_vec(), None)],
            _pins: pins,
        }))
    }

    /// An open episode of `key` now goes on under `to` (its file's name `from` went away).
    fn move_marker(&self, key: super::Key, from: &[u8], to: &[u8]) -> Result<()> {
        let moved = {
            let mut episodes = lock(&self.episodes);
            match episodes.get_mut(&key) {
                Some(ep) if ep.path == from => {
                    ep.path = to.to_vec();
                    // Its marker is written below, even if it had none yet: the history names
                    // its content before under the old name only (see `Unmarked`).
                    ep.unmarked = None;
                    Some((ep.before.clone(), ep.who.clone(), ep.created, ep.fsynced))
                }
                _ => None,
            }
        };
        if let Some((before, who, created, fsynced)) = moved {
            self.history.drop_open_episode(from)?;
            // A new file has a marker only once fsynced.
            if (!created || fsynced.is_some()) && self.records(to, false) {
                self.put_marker(to, before, &who, fsynced)?;
            }
        }
        Ok(())
    }

    /// `path` was removed by `rmdir`; `st` is how it was. Its record is queued as a delete's
    /// is (`defer`), behind the deletes of what was in it, and written by the writer thread
    /// with them: an `rm -rf` does not wait on an index write per folder (written here, each
    /// rmdir first wrote every delete queued before it, one batch per folder: a quarter of
    /// what recording added to `rm -rf` of W1's tree). Anything recorded next writes the
    /// queue first, so the ids keep the order of the operations. If the store cannot take
    /// it, it waits in the queue until the store takes writes again: the folder is gone
    /// already, and a refusal would leave it gone with nothing to record it.
    pub fn after_rmdir(&self, path: &[u8], st: &libc::stat, by: By) -> Result<()> {
        let _pins = self.pin_scope();
        if !self.records(path, true) {
            return Ok(());
        }
        let who = self.who(by);
        let mut change = self.change(ChangeKind::Rmdir, path, &who);
        // A folder's state holds no content: nothing to store.
        change.before = Some(self.capture(path, st)?);
        self.defer(Prepared {
            change,
            manifest: vec![(path.to_vec(), None)],
            _pins: self.history.store().pin(None),
        });
        Ok(())
    }

    /// A new object exists at `path` (mkdir, symlink, mknod): record it.
    pub fn after_new(&self, kind: ChangeKind, path: &[u8], by: By) -> Result<()> {
        let _pins = self.pin_scope();
        // A rule file made by mknod decides as one written (before `quieting`, which the
        // take-back of its folder's burst takes exclusively); as one renamed into place, a
        // take-back the store refuses does not undo what is made.
        self.made_rule_file(path);
        let _quieting = self.quieting.read().unwrap_or_else(|e| e.into_inner());
        let Ok(st) = self.source.lstat(path) else {
            return Ok(());
        };
        if !self.records(path, kind_of(&st) == FileKind::Dir) {
            return Ok(());
        }
        let who = self.who(by);
        let mut change = self.change(kind, path, &who);
        change.after = Some(self.capture(path, &st)?);
        self.record_one(change, &[(path.to_vec(), Some(seen_of(&st)))])?;
        if kind == ChangeKind::Mkdir {
            lock(&self.recent_mkdirs).made(path);
        }
        Ok(())
    }

    /// A folder the history did not have (it was ignored where it was: a build output, a
    /// scratch folder) was renamed to `dir`, a name it records: the rename is recorded as the
    /// folder's arrival, and what is in it is new to the history too. Each entry below it is
    /// recorded as made there (`mkdir`, `create`, `symlink`), parents first, by whoever moved
    /// it; entries the rules ignore are left out, as a mount's scan leaves them. Without this
    /// the history had the folder alone: a session's diff and export missed the files an agent
    /// built elsewhere and moved in, and the next mount took them for made while unmounted.
    /// The caller holds the names exclusively (a folder's rename), so nothing below moves
    /// meanwhile.
    pub fn after_moved_in(&self, dir: &[u8], by: By) -> Result<()> {
        let _pins = self.pin_scope();
        let _quieting = self.quieting.read().unwrap_or_else(|e| e.into_inner());
        let who = self.who(by);
        let mut dirs = vec![dir.to_vec()];
        while let Some(parent) = dirs.pop() {
            let Ok(mut names) = self.source.read_dir(&parent) else {
                continue;
            };
            names.sort();
            for name in names {
                let path = crate::history::join(&parent, &name);
                let Ok(st) = self.source.lstat(&path) else {
                    continue;
                };
                let kind = match kind_of(&st) {
                    FileKind::Dir => ChangeKind::Mkdir,
                    FileKind::Symlink => ChangeKind::Symlink,
                    _ => ChangeKind::Create,
                };
                if !self.records(&path, kind == ChangeKind::Mkdir) {
                    continue;
                }
                let mut change = self.change(kind, &path, &who);
                change.after = Some(self.capture(&path, &st)?);
                self.record_one(change, &[(path.clone(), Some(seen_of(&st)))])?;
                if kind == ChangeKind::Mkdir {
                    dirs.push(path);
                }
            }
        }
        Ok(())
    }

    /// `path` is a new name of the file at `target` (a hard link): record it, and know the
    /// file by both names from now on. The caller holds the file ([`hold`](Recorder::hold)).
    pub fn after_link(&self, target: &[u8], path: &[u8], by: By) -> Result<()> {
        let _pins = self.pin_scope();
        let Ok(st) = self.source.lstat(path) else {
            return Ok(());
        };
        let key = key_of(&st);
        // A new file not recorded yet is recorded first: its create comes before its link. So
        // does a change being written to it, under the names it had then (the caller holds the
        // file, so no episode ends between here and the link's record).
        self.flush_pending(target)?;
        let cut = self.cut_episode(key, target)?;
        {
            let mut links = lock(&self.links);
            links.add(key, target);
            links.add(key, path);
        }
        // A rule file made by a link decides as one written.
        self.made_rule_file(path);
        if !self.records(path, false) {
            return Ok(());
        }
        let who = self.who(by);
        let mut change = self.change(ChangeKind::Link, path, &who);
        // The link changed the file's ctime, not its content.
        self.metadata_changed(&st);
        // The new name holds what the cut recorded. Read again, it could hold more: writes
        // the kernel flushes from its cache meanwhile, which are the edit's, recorded at its
        // end from the cut on (the new name's chain would skip them).
        let after = match cut {
            Some(cut) => Ok(cut),
            None => self.capture(path, &st),
        };
        let recorded = after.and_then(|after| {
            change.after = Some(after);
            self.record_one(change, &[(path.to_vec(), Some(seen_of(&st)))])
                .map(drop)
        });
        if recorded.is_err() {
            // The caller takes the name back.
            lock(&self.links).remove(key, path);
        }
        recorded
    }

    /// `path` is about to get mode `mode`. Returns the change to retract if chmod fails. The
    /// caller holds the file until the chmod is done.
    /// A held-back new file a chmod is about to make unreadable to a daemon that is not root
    /// (`echo x > f && chmod 200 f`, its RELEASE handled before the chmod): a handle to read
    /// it is kept now, while it may be opened, or its create, recorded later by its name, would
    /// wait for a read that never comes, and a delete would leave no history of it at all.
    fn keep_reader_of_pending(&self, path: &[u8], st: &libc::stat, mode: u32) {
        // Most chmods of a new file (`tar`, `cp`) leave it readable to all: no syscall then.
        if mode & 0o004 != 0 {
            return;
        }
        let uid = Self::mount_uid();
        let readable = |m: u32| m & 0o004 != 0 || (st.st_uid == uid && m & 0o400 != 0);
        if uid == 0 || !readable(st.st_mode) || readable(mode) {
            return;
        }
        let needs = lock(&self.pending)
            .get(path)
            .is_some_and(|p| p.key == key_of(st) && p.reader.is_none());
        if !needs {
            return;
        }
        let Ok(file) = self.source.open_read(path) else {
            return;
        };
        if super::capture::fstat(&file).map(|f| key_of(&f)).ok() != Some(key_of(st)) {
            return;
        }
        if let Some(p) = lock(&self.pending).get_mut(path)
            && p.key == key_of(st)
        {
            p.reader.get_or_insert_with(|| std::sync::Arc::new(file));
        }
    }

    pub fn before_chmod(
        &self,
        path: &[u8],
        st: &libc::stat,
        mode: u32,
        by: By,
    ) -> Result<Option<Change>> {
        let _pins = self.pin_scope();
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
            self.keep_reader_of_pending(path, st, mode);
            return Ok(None);
        }
        self.flush_pending(path)?;
        let cut = self.cut_episode(key, path)?;
        let who = self.who(by);
        let before = match cut {
            Some(cut) => cut,
            None => self.capture(path, st)?,
        };
        let after = FileState {
            mode: mode & 0o7777,
            ..before.clone()
        };
        let mut seen = seen_of(st);
        seen.mode = after.mode;
        let mut change = self.change(ChangeKind::Chmod, path, &who);
        change.before = Some(before);
        change.after = Some(after);
        change.links = self.other_names(key, path);
        let manifest = self.manifest_of_names(path, &change.links, seen);
        let recorded = self.record_one(change, &manifest)?;
        // An episode still open on the file goes on from the new mode, and so does its marker
        // (the cut wrote it with the old one): after a crash, the next mount takes the edit's
        // before from the marker, and a modify from the old mode would break the chain after
        // this chmod.
        if let Some(ep) = lock(&self.episodes).get_mut(&key)
            && let Some(before) = &mut ep.before
        {
            before.mode = mode & 0o7777;
            if !ep.orphaned && ep.unmarked.is_none() {
                self.put_marker(&ep.path, ep.before.clone(), &ep.who, ep.fsynced)?;
            }
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
        by: By,
    ) -> Result<Vec<Change>> {
        let _pins = self.pin_scope();
        let src_dir = kind_of(src_st) == FileKind::Dir;
        // A folder exchanged for the source moves too.
        let dst_dir = exchange && dst_st.is_some_and(|st| kind_of(st) == FileKind::Dir);
        // Decided first: a new folder that turns out to be a regenerable tree has its held-back
        // creates dropped, not recorded.
        let (src_recorded, dst_recorded) = if src_dir && !exchange {
            self.quiet_moved_dir(src, dst)?
        } else {
            (self.records(src, src_dir), self.records(dst, src_dir))
        };
        // What the history has goes on being recorded where it moves, even to an ignored
        // name: its past stays whole, and what becomes of it is told (a save's temporary
        // file, held back, is not in the history yet and stays out of it).
        let dst_recorded = dst_recorded || (src_recorded && self.kept(src, src_dir));
        if src_dir || dst_dir {
            self.forget_renamed_away_under(&[src, dst]);
        }
        // A create below it that cannot be recorded now (its path cannot be looked up) moves
        // with the folder, recorded after the rename (below).
        let mut hidden = Vec::new();
        if src_dir {
            hidden.push((src, dst, self.flush_pending_under(src)?));
        }
        if dst_dir {
            hidden.push((dst, src, self.flush_pending_under(dst)?));
        }
        self.flush_pending(dst)?;
        if exchange {
            self.flush_pending(src)?;
        }
        // What open episodes wrote so far comes before the rename: the target's, which is about
        // to be replaced, and the source's unless it is a new file still being written (a
        // save-by-rename, handled below).
        let mut dst_cut = None;
        if let Some(st) = dst_st
            && self.records(dst, false)
        {
            dst_cut = self.cut_episode(key_of(st), dst)?;
        }
        let src_created = lock(&self.episodes)
            .get(&key_of(src_st))
            .is_some_and(|ep| ep.created && ep.path == src);
        let mut src_cut = None;
        if !src_dir && (exchange || !src_created) && self.records(src, false) {
            src_cut = self.cut_episode(key_of(src_st), src)?;
        }
        let who = self.who(by);
        let dst_before = match (dst_st, dst_cut) {
            (Some(_), Some(cut)) if dst_recorded => Some(cut),
            (Some(st), _) if dst_recorded => Some(self.capture(dst, st)?),
            _ => None,
        };
        let groups = self.groups_renamed(src, src_st, dst, dst_st, exchange);
        // Names, caches and open episodes follow the rename before it happens. If what comes
        // after fails (the store refuses writes), the rename is refused and they are put back:
        // a file left where it was must not be looked for where it never went (the end of its
        // episode would find nothing there, and record nothing).
        let mut undo = self.rename_bookkeeping(src, src_st, dst, dst_st, exchange);
        let recorded = (|| {
            // The replaced target's open episode has nothing more to record: its marker (the
            // cut above wrote it) goes before anything is recorded or noted at `dst`, or the
            // next mount would take the file that is there now for more of its writes.
            if undo.orphaned.is_some() {
                self.history.drop_open_episode(dst)?;
            }
            self.move_markers(&undo.moved_under)?;
            self.move_markers(&undo.swapped)?;
            self.move_markers(&undo.kept)?;
            // An episode still open on the source moves with it. If it created the file, this
            // is a save-by-rename still being written: its end records one change of the
            // target.
            if !exchange && let Some(moved) = self.move_episode(src_st, src, dst, &dst_before) {
                let (was_created, before, ep_who, fsynced) = {
                    let now = undo.src_episode.insert(moved);
                    (
                        now.created,
                        now.before_now.clone(),
                        now.who.clone(),
                        now.fsynced_now,
                    )
                };
                self.history.drop_open_episode(src)?;
                if dst_recorded {
                    self.put_marker(dst, before, &ep_who, fsynced)?;
                }
                if was_created {
                    return Ok(Vec::new());
                }
            }
            let mut out = Vec::new();
            let src_seen = seen_of(src_st);
            self.flush_saved(src)?;
            let held = if exchange {
                None
            } else {
                lock(&self.pending).remove(src)
            };
            if let Some(p) = held {
                // Save-by-rename: a new file renamed into place. One change of the target,
                // which happens now (the temporary file's id goes back unless something came
                // since). The temporary's marker (if it was fsynced) goes in the same batch.
                self.release_id(p.id);
                let saved = self.record_save(src, dst, &p, dst_recorded, dst_before, groups);
                if saved.is_err() {
                    // Refused: the temporary file stays where it is, still held back.
                    self.hold_back_again(src, p);
                }
                return saved;
            }
            if !src_recorded && !dst_recorded {
                return Ok(out);
            }
            let src_state = match src_cut {
                Some(cut) => cut,
                None => self.capture(src, src_st)?,
            };
            let mut change = self.change(ChangeKind::Rename, dst, &who);
            change.from = src_recorded.then(|| src.to_vec());
            change.before = dst_before.clone();
            change.after = dst_recorded.then(|| src_state.clone());
            change.groups = groups;
            let mut manifest = vec![(dst.to_vec(), dst_recorded.then(|| src_seen.clone()))];
            if exchange {
                if let Some(st) = dst_st {
                    manifest.push((src.to_vec(), Some(seen_of(st))));
                }
            } else {
                manifest.push((src.to_vec(), None));
            }
            // An exchange swaps what is below the two folders.
            let move_under = (src_dir || dst_dir).then_some((src, dst));
            let extra = Extra {
                finish_episode: None,
                manifest: &manifest,
                move_under,
                content: None,
                marker: None,
            };
            if exchange && let Some(dst_before) = dst_before {
                let mut back = self.change(ChangeKind::Rename, src, &who);
                back.from = Some(dst.to_vec());
                back.before = Some(src_state);
                back.after = Some(dst_before);
                return self.record_exchange(change, &extra, back);
            }
            let recorded = self.record(change, &extra)?;
            if !src_dir
                && !exchange
                && dst_st.is_none()
                && src_recorded
                && dst_recorded
                && kind_of(src_st) == FileKind::File
            {
                self.remember_renamed_away(
                    dst,
                    RenamedAway {
                        from: src.to_vec(),
                        key: key_of(src_st),
                        change: recorded.clone(),
                        pid: by.pid,
                        at: Instant::now(),
                    },
                );
            }
            out.push(recorded);
            Ok(out)
        })();
        if recorded.is_err() {
            self.undo_rename_bookkeeping(src, src_st, dst, dst_st, exchange, undo);
        } else {
            self.move_hidden_creates(hidden);
        }
        recorded
    }

    /// Record a save-by-rename: the held-back new file `p` at `src` renamed over `dst`, as one
    /// change of `dst` (nothing if saved as it was).
    fn record_save(
        &self,
        src: &[u8],
        dst: &[u8],
        p: &super::pending::Pending,
        dst_recorded: bool,
        dst_before: Option<FileState>,
        groups: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Change>> {
        if !dst_recorded {
            self.history.drop_open_episode(src)?;
            return Ok(Vec::new());
        }
        let kind = if dst_before.is_some() {
            ChangeKind::Modify
        } else {
            ChangeKind::Create
        };
        let Some((after, seen)) = self.pending_content(src, p, dst)? else {
            self.history.drop_open_episode(src)?;
            return Ok(Vec::new());
        };
        if dst_before.as_ref() == Some(&after) {
            // Saved as it was (`sed -i` that matched nothing): nothing happened.
            self.history.put_manifest(&[(dst.to_vec(), Some(seen))])?;
            self.history.drop_open_episode(src)?;
            return Ok(Vec::new());
        }
        // The save lands now, with its id: in the turn and tool call its session is in now,
        // which may have begun since the temporary file was written.
        let mut who = p.who.clone();
        if !who.restore {
            (who.turn, who.tool) = self.turns.current(&who.session);
        }
        let mut change = self.change(kind, dst, &who);
        change.before = dst_before;
        change.after = Some(after);
        // Saved by renaming over it: a linked file loses this name.
        change.groups = groups;
        let manifest = [(dst.to_vec(), Some(seen))];
        Ok(vec![self.record(
            change,
            &Extra {
                finish_episode: Some(src),
                manifest: &manifest,
                move_under: None,
                content: None,
                marker: None,
            },
        )?])
    }

    /// Names, caches and open episodes follow a rename (done before it, under the files'
    /// locks; a failed rename leaves them pointing at the new names, which the next access
    /// corrects). Only in memory: the markers of the episodes moved below a folder are moved
    /// by [`move_markers`](Recorder::move_markers). Returns how to put it all back
    /// ([`undo_rename_bookkeeping`](Recorder::undo_rename_bookkeeping)).
    fn rename_bookkeeping(
        &self,
        src: &[u8],
        src_st: &libc::stat,
        dst: &[u8],
        dst_st: Option<&libc::stat>,
        exchange: bool,
    ) -> RenameUndo {
        let mut undo = RenameUndo::default();
        let src_dir = kind_of(src_st) == FileKind::Dir;
        if let Some(st) = dst_st
            && !exchange
            && key_of(st) != key_of(src_st)
        {
            let mut links = lock(&self.links);
            undo.replaced_names = Some((key_of(st), links.names_of(key_of(st))));
            let other = links.others(key_of(st), dst).into_iter().next();
            links.remove(key_of(st), dst);
            drop(links);
            if st.st_nlink > 1
                && let Some(other) = other
            {
                // A hard-linked file loses one name and keeps the others: its open episode
                // goes on under one of them, as at the unlink of a name (what it wrote so far
                // was cut before). Left at `dst`, its end would find another file there and
                // record nothing of what was written after the rename.
                undo.kept = self.move_file_episodes(&[(key_of(st), dst.to_vec(), other)]);
            } else if st.st_nlink <= 1 {
                // Replaced: its inode number may be reused by the next file created, and its
                // open episode has nothing more to record.
                self.forget_known(key_of(st));
                if let Some(ep) = lock(&self.episodes).get_mut(&key_of(st))
                    && !ep.orphaned
                {
                    ep.orphaned = true;
                    undo.orphaned = Some(key_of(st));
                }
            }
        }
        let dst_dir = exchange && dst_st.is_some_and(|st| kind_of(st) == FileKind::Dir);
        if src_dir || dst_dir {
            lock(&self.links).moved_dir(src, dst, exchange);
            undo.moved_under = self.move_episodes_under(src, dst, exchange);
        }
        if !src_dir {
            lock(&self.links).moved(key_of(src_st), src, dst);
        }
        if exchange
            && !dst_dir
            && let Some(st) = dst_st
        {
            lock(&self.links).moved(key_of(st), dst, src);
        }
        if exchange {
            let mut files = Vec::new();
            if !src_dir {
                files.push((key_of(src_st), src.to_vec(), dst.to_vec()));
            }
            if let Some(st) = dst_st.filter(|_| !dst_dir) {
                files.push((key_of(st), dst.to_vec(), src.to_vec()));
            }
            undo.swapped = self.move_file_episodes(&files);
        }
        undo
    }

    /// The episodes open on files an exchange swapped follow them (in memory; their markers
    /// with [`move_markers`](Recorder::move_markers)): each of `files` is a file, the name it
    /// had and the name it has now. Two names of one file exchanged move nothing.
    fn move_file_episodes(&self, files: &[(super::Key, Vec<u8>, Vec<u8>)]) -> Vec<Moved> {
        if files.len() == 2 && files[0].0 == files[1].0 {
            return Vec::new();
        }
        let mut episodes = lock(&self.episodes);
        let mut out = Vec::new();
        for (key, from, to) in files {
            if let Some(ep) = episodes.get_mut(key)
                && ep.path == *from
                && !ep.orphaned
            {
                ep.path = to.clone();
                out.push(Moved {
                    key: *key,
                    old: from.clone(),
                    new: to.clone(),
                    before: ep.before.clone(),
                    who: ep.who.clone(),
                    created: ep.created,
                    fsynced: ep.fsynced,
                });
                // Its marker is written under the new name, even if it had none yet.
                ep.unmarked = None;
            }
        }
        out
    }

    /// The rename whose bookkeeping this was is refused: names and episodes go back where they
    /// were (in reverse order), and the markers moved with them, as far as the store takes it.
    fn undo_rename_bookkeeping(
        &self,
        src: &[u8],
        src_st: &libc::stat,
        dst: &[u8],
        dst_st: Option<&libc::stat>,
        exchange: bool,
        undo: RenameUndo,
    ) {
        let src_dir = kind_of(src_st) == FileKind::Dir;
        let dst_dir = exchange && dst_st.is_some_and(|st| kind_of(st) == FileKind::Dir);
        if !undo.swapped.is_empty() || !undo.kept.is_empty() {
            let back: Vec<_> = undo
                .swapped
                .iter()
                .chain(&undo.kept)
                .map(|m| (m.key, m.new.clone(), m.old.clone()))
                .collect();
            let back = self.move_file_episodes(&back);
            if let Err(e) = self.move_markers(&back) {
                tracing::warn!("markers of files whose rename was refused: {e}");
            }
        }
        if let Some(was) = undo.src_episode
            && let Some(ep) = lock(&self.episodes).get_mut(&key_of(src_st))
            && ep.path == dst
        {
            ep.path = src.to_vec();
            ep.created = was.created;
            ep.before = was.before;
            ep.fsynced = was.fsynced;
        }
        if exchange
            && !dst_dir
            && let Some(st) = dst_st
        {
            lock(&self.links).moved(key_of(st), src, dst);
        }
        if !src_dir {
            lock(&self.links).moved(key_of(src_st), dst, src);
        }
        if src_dir || dst_dir {
            lock(&self.links).moved_dir(dst, src, exchange);
            let back = self.move_episodes_under(dst, src, exchange);
            if let Err(e) = self.move_markers(&back) {
                tracing::warn!("markers of files below a folder whose rename was refused: {e}");
            }
        }
        if let Some(key) = undo.orphaned
            && let Some(ep) = lock(&self.episodes).get_mut(&key)
        {
            ep.orphaned = false;
            // Its marker may have been dropped: the pending thread writes it again.
            if !ep.created || ep.fsynced.is_some() {
                ep.unmarked = Some(self.unmarked(&ep.before));
            }
        }
        if let Some((key, names)) = undo.replaced_names {
            lock(&self.links).set(key, names);
        }
    }

    /// Episodes of files below a renamed folder go on under its new name (in memory; their
    /// markers with [`move_markers`](Recorder::move_markers)); with `exchange`, those below
    /// `to` go below `from` at the same time. Returns the episodes moved.
    fn move_episodes_under(&self, from: &[u8], to: &[u8], exchange: bool) -> Vec<Moved> {
        let mut episodes = lock(&self.episodes);
        episodes
            .iter_mut()
            .filter_map(|(key, ep)| {
                let new = moved_below(&ep.path, from, to)
                    .or_else(|| exchange.then(|| moved_below(&ep.path, to, from)).flatten())?;
                let old = std::mem::replace(&mut ep.path, new.clone());
                // Its marker is written under the new name (`move_markers`) even if it had
                // none yet: the history does not name its content before there (a folder's
                // rename is one change of the folder).
                ep.unmarked = None;
                Some(Moved {
                    key: *key,
                    old,
                    new,
                    before: ep.before.clone(),
                    who: ep.who.clone(),
                    created: ep.created,
                    fsynced: ep.fsynced,
                })
            })
            .collect()
    }

    /// The markers of episodes moved below a folder follow them.
    fn move_markers(&self, moved: &[Moved]) -> Result<()> {
        // All old markers go before any new one is written: in an exchange a new path may be
        // another episode's old one.
        for m in moved {
            self.history.drop_open_episode(&m.old)?;
        }
        for m in moved {
            if (!m.created || m.fsynced.is_some()) && self.records(&m.new, false) {
                self.put_marker(&m.new, m.before.clone(), &m.who, m.fsynced)?;
            }
        }
        Ok(())
    }

    /// Move the episode open on `src_st`'s file from `src` to `dst`. A created file renamed
    /// over an existing one becomes that file's modify (with a marker of an ordinary
    /// episode). Returns what it was and is now, if there was one.
    fn move_episode(
        &self,
        src_st: &libc::stat,
        src: &[u8],
        dst: &[u8],
        dst_before: &Option<FileState>,
    ) -> Option<EpisodeMoved> {
        let mut episodes = lock(&self.episodes);
        let ep = episodes.get_mut(&key_of(src_st))?;
        if ep.path != src {
            return None;
        }
        ep.path = dst.to_vec();
        // Its caller writes its marker under `dst`.
        ep.unmarked = None;
        let was = EpisodeMoved {
            created: ep.created,
            before: ep.before.clone(),
            fsynced: ep.fsynced,
            who: ep.who.clone(),
            before_now: None,
            fsynced_now: None,
        };
        if ep.created && dst_before.is_some() {
            ep.created = false;
            ep.before = dst_before.clone();
            ep.fsynced = None;
        }
        Some(EpisodeMoved {
            before_now: ep.before.clone(),
            fsynced_now: ep.fsynced,
            ..was
        })
    }

    /// An operation recorded in advance failed: take its changes back. If the store refuses
    /// that (a full disk), the retraction is owed: written before anything else is recorded,
    /// once the store takes writes again (`journal.rs`).
    pub fn retract(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        // The manifest was moved on as if the operation had happened: put it back as the tree
        // is, or the next mount would take the names involved for outside changes.
        let is_dir = |s: &Option<FileState>| s.as_ref().is_some_and(|s| s.kind == FileKind::Dir);
        let swap_under = changes
            .first()
            .filter(|c| c.kind == ChangeKind::Rename && (is_dir(&c.before) || is_dir(&c.after)))
            .and_then(|c| Some((c.from.clone()?, c.path.clone())));
        let mut manifest = Vec::new();
        for c in changes {
            for path in std::iter::once(&c.path).chain(&c.from) {
                let st = self.source.lstat(path).ok();
                if self.records(
                    path,
                    st.as_ref().is_some_and(|st| kind_of(st) == FileKind::Dir),
                ) {
                    manifest.push((path.clone(), st.as_ref().map(seen_of)));
                }
            }
        }
        self.retract_or_owe(Owed {
            changes: changes.iter().rev().cloned().collect(),
            manifest,
            swap_under,
        });
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
        self.refresh_known(st);
        if self.records(path, kind_of(st) == FileKind::Dir)
            && let Err(e) = self
                .history
                .put_manifest(&[(path.to_vec(), Some(seen_of(st)))])
        {
            tracing::warn!("manifest update failed: {e}");
        }
    }
}
