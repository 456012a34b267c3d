//! How editors save, recognised so that a save is one `modify` of the file saved.
//!
//! - Save-by-rename (`sed -i`, most editors and tools): write a temporary file, rename it over
//!   the target. The temporary's create is held back ([`super::pending`]), and a held-back
//!   file renamed over another becomes a `modify` of the target (`ops::before_rename`).
//! - Rename-away (vim's default through this mount): rename the original `a` to `a~`, write a
//!   new `a`, delete `a~`. A rename of a regular file to a new name is remembered for
//!   [`SAVE_WINDOW`]. If the same process then deletes the renamed file while its new file
//!   under the old name is not recorded yet (held back, or still open), and neither name has
//!   changed since, the rename is retracted, the delete is not recorded, and the new file's
//!   create becomes a `modify` from the original content (nothing at all if it is the same).
//!   Costs: a gap in the ids (the retracted rename, which `.rewind/events` readers have seen),
//!   and a crash mid-save gives an `external` create at the next mount.
//! - Rename-away keeping a backup (vim with `set backup`): as above, but the backup stays. When
//!   the new file's create is about to be recorded and the renamed file still stands unchanged
//!   under its new name, the rename is retracted and the save is recorded as what the user
//!   sees: a `create` of the backup (with the original content) and a `modify` of the file.

use std::time::{Duration, Instant};

use super::capture::{key_of, seen_of};
use super::episodes::marker;
use super::pending::{Pending, pending_marker};
use super::{Key, Recorder, lock};
use crate::history::Result;
use crate::history::change::{Change, ChangeKind, FileState};
use crate::history::db::Retraction;

/// How long a rename-away save may take from the rename to the delete.
pub(super) const SAVE_WINDOW: Duration = Duration::from_secs(5);

/// How long a rename-away save waits for its new file's end to be recorded (it is on its way).
const END_WAIT: Duration = Duration::from_secs(2);

/// A regular file renamed to a new name, remembered for a moment.
pub(super) struct RenamedAway {
    pub(super) from: Vec<u8>,
    pub(super) key: Key,
    pub(super) change: Change,
    pub(super) pid: u32,
    pub(super) at: Instant,
}

impl Recorder {
    /// Remember a rename to a new name: perhaps the first step of a rename-away save.
    pub(super) fn remember_renamed_away(&self, to: &[u8], away: RenamedAway) {
        let mut all = lock(&self.renamed_away);
        if all.len() >= 64 {
            all.retain(|_, a| a.at.elapsed() <= SAVE_WINDOW);
        }
        all.insert(to.to_vec(), away);
    }

    /// The folders `dirs` are being renamed: the renames away below them are forgotten. They
    /// are remembered by their paths, and whether nothing else happened to either name since
    /// is asked of the history by path: with the folder under another name meanwhile, what was
    /// made and renamed there was not seen, and a new file at the old path once the folder had
    /// its name back was taken for the save, its rename retracted while the history went on
    /// from it (`a_rename_away_across_folder_renames_is_not_taken_for_a_save`). A save that
    /// spans a folder's rename is recorded as the rename, create and delete it was made of.
    pub(super) fn forget_renamed_away_under(&self, dirs: &[&[u8]]) {
        let under = |p: &[u8], dir: &[u8]| {
            p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
        };
        lock(&self.renamed_away)
            .retain(|to, a| !dirs.iter().any(|d| under(to, d) || under(&a.from, d)));
    }

    /// `path`, a file that `pid` renamed away from its name moments ago, is being deleted while
    /// a new file by the same process stands under that name: an editor's save. Whether it was
    /// one (and was folded into one `modify`).
    pub(super) fn saved_by_renaming_away(
        &self,
        path: &[u8],
        st: &libc::stat,
        pid: u32,
    ) -> Result<bool> {
        let Some(away) = lock(&self.renamed_away).remove(path) else {
            return Ok(false);
        };
        if away.pid != pid || away.key != key_of(st) || away.at.elapsed() > SAVE_WINDOW {
            return Ok(false);
        }
        // Nothing else may have happened to either name since the rename.
        self.drain()?;
        let last = |p: &[u8]| -> Result<Option<u64>> {
            Ok(self.history.last_change_until(p, u64::MAX)?.map(|c| c.id))
        };
        if last(path)? != Some(away.change.id) || last(&away.from)? != Some(away.change.id) {
            return Ok(false);
        }
        if self.checkpointed_since(away.change.id)? {
            return Ok(false);
        }
        let original = away.change.after.clone();
        let convert = || self.convert_to_modify(&away.from, &original, pid, &away.change, path);
        let folded = (|| {
            let mut converted = convert()?;
            // The new file's end may be on its way from one table to the other: wait for it.
            let give_up = Instant::now() + END_WAIT;
            while !converted
                && lock(&self.ends_in_flight).contains(&away.from)
                && Instant::now() < give_up
            {
                std::thread::sleep(Duration::from_millis(1));
                converted = convert()?;
            }
            Ok(converted)
        })();
        match folded {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                // Refused (nothing written): the delete is refused, and may come again.
                self.remember_renamed_away(path, away);
                return Err(e);
            }
        }
        if st.st_nlink <= 1 {
            self.forget_known(key_of(st));
        }
        Ok(true)
    }

    /// The new file `pid` wrote at `path` (held back, or still being written) becomes a modify
    /// from `original`, `rename` (of the original, away from `path` to `away`) is taken back
    /// and `away` leaves the manifest: whether there was such a new file.
    fn convert_to_modify(
        &self,
        path: &[u8],
        original: &Option<FileState>,
        pid: u32,
        rename: &Change,
        away: &[u8],
    ) -> Result<bool> {
        // The new file's marker says from now on that it is a modify from the original (a
        // crash before it is recorded then gives that modify, by its process). One batch with
        // the rename's retraction: a store that refuses it (a full disk) leaves the history,
        // the marker and the table as they were, and the unlink is refused. Written under the
        // lock of the table that holds the new file, as an fsync writes its marker
        // (`pending.rs`).
        let fold = |marker| {
            self.history.retract_with(
                std::slice::from_ref(rename),
                &Retraction {
                    manifest: &[(away.to_vec(), None)],
                    markers: &[(path.to_vec(), Some(marker))],
                    swap_under: None,
                },
            )
        };
        if let Some(p) = lock(&self.pending).get_mut(path)
            && p.who.pid == pid
            && p.replaces.is_none()
        {
            fold(pending_marker(&Pending {
                replaces: original.clone(),
                ..p.clone()
            }))?;
            p.replaces = original.clone();
            return Ok(true);
        }
        if let Some(ep) = lock(&self.episodes)
            .values_mut()
            .find(|ep| ep.path == path && ep.created && ep.who.pid == pid)
        {
            // Still being written (RELEASE comes after close): its end records the modify.
            fold(marker(original.clone(), &ep.who, ep.fsynced, None))?;
            ep.created = false;
            ep.before = original.clone();
            return Ok(true);
        }
        Ok(false)
    }

    /// `path`, a new file that `p`'s process wrote under a name it renamed away moments ago,
    /// is about to be recorded while the renamed file still stands under its new name: a save
    /// that keeps a backup. Records the backup's create and returns the original state (the
    /// new file's create then becomes a `modify` from it), if it was one.
    pub(super) fn saved_keeping_backup(
        &self,
        path: &[u8],
        p: &Pending,
    ) -> Result<Option<FileState>> {
        let found = {
            let mut all = lock(&self.renamed_away);
            let backup = all
                .iter()
                .find(|(_, a)| {
                    a.from == path && a.pid == p.who.pid && a.at.elapsed() <= SAVE_WINDOW
                })
                .map(|(to, _)| to.clone());
            backup.and_then(|to| all.remove(&to).map(|a| (to, a)))
        };
        let Some((backup, away)) = found else {
            return Ok(None);
        };
        // Nothing else may have happened to either name since the rename, and the backup is
        // still the file renamed.
        self.drain()?;
        let last = |n: &[u8]| -> Result<Option<u64>> {
            Ok(self.history.last_change_until(n, u64::MAX)?.map(|c| c.id))
        };
        if last(path)? != Some(away.change.id) || last(&backup)? != Some(away.change.id) {
            return Ok(None);
        }
        let Some(st) = self.stat_if_same(&backup, away.key) else {
            return Ok(None);
        };
        // ... and it holds what was renamed: no one is writing it, and its content and mode are
        // the same. A write whose end is not in the history yet (its id is set aside, it is
        // on its way) is not in `last`, and folding over it would record the backup's create
        // after that write's modify.
        if lock(&self.episodes).contains_key(&away.key) {
            return Ok(None);
        }
        match self.capture(&backup, &st) {
            Ok(now) if Some(&now) == away.change.after.as_ref() => {}
            _ => return Ok(None),
        }
        if self.checkpointed_since(away.change.id)? {
            return Ok(None);
        }
        // The backup's create first: if the store refuses the retraction after it, the
        // history has the backup twice (renamed to, and made), never not at all.
        let mut create = self.change(ChangeKind::Create, &backup, &p.who);
        create.time_ns = away.change.time_ns;
        create.after = away.change.after.clone();
        self.record_one(create, &[(backup, Some(seen_of(&st)))])?;
        self.history.retract(&away.change)?;
        Ok(away.change.after)
    }

    /// Whether a checkpoint was taken at or after change `id`: taking `id` back (folding a
    /// rename into a save) would change what that checkpoint answers, so it stays.
    fn checkpointed_since(&self, id: u64) -> Result<bool> {
        Ok(self.history.checkpoints()?.iter().any(|c| c.id >= id))
    }
}
