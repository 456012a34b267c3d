//! Keeping regenerable trees out of the history when they become ignored after they were made.
//!
//! A cache tag or a `pyvenv.cfg` is written into a folder after the folder was made (`python3
//! -m venv` makes `.venv/`, `bin/`, `lib/`, then writes `pyvenv.cfg`), and cargo makes
//! `targetXXXX/`, tags it, then renames it to `target`. The folder's creation was recorded,
//! and what was written below it before the marker. When the folder becomes ignored, and the
//! recorded folder is new (its `mkdir` is the last change to its name, within [`BURST`]),
//! everything recorded at or below it since that `mkdir` is retracted: the burst that made the
//! folder leaves no history. The same happens when a new folder is renamed to a name that is
//! ignored (a temporary build folder moved into place), and when a `.gitignore` above it comes
//! to name it. A folder that existed before keeps its history; from then on it is ignored.

use std::time::Duration;

use super::pending::Pending;
use super::{Recorder, lock};
use crate::history::Result;
use crate::history::change::ChangeKind;
use crate::history::db::Retraction;
use crate::history::ignore::{RULE_FILES, at_or_under};
use crate::history::time::now_ns;
use crate::store::{Order, Query};

/// How recent a folder's creation must be for what was recorded of it to be taken back when
/// it turns out to be a regenerable tree.
pub const BURST: Duration = Duration::from_secs(60);

/// How many of the newest changes a changed `.gitignore` looks through for folders it makes
/// ignored ([`Recorder::quiet_newly_ignored`]).
const RECENT_CHANGES: usize = 20_000;

/// A folder made, and when.
type Made = (Vec<u8>, u64);

/// How many of the last minute's folders [`RecentMkdirs`] holds.
const RECENT_MKDIRS: usize = 4096;

/// The folders recorded as made in the last [`BURST`], newest last, so that a changed
/// `.gitignore` finds the ones it now names without reading the history (a write of a
/// `.gitignore` must cost what a write costs).
pub(super) struct RecentMkdirs {
    made: std::collections::VecDeque<Made>,
    /// Folders made at or after this time may be missing from `made` (they were made before
    /// the mount, or pushed out by newer ones).
    incomplete_until: u64,
}

impl RecentMkdirs {
    /// Empty, and incomplete for the last minute until [`load`](Recorder::load_recent_mkdirs)
    /// has read the history.
    pub(super) fn new() -> RecentMkdirs {
        RecentMkdirs {
            made: std::collections::VecDeque::new(),
            incomplete_until: now_ns(),
        }
    }

    pub(super) fn made(&mut self, path: &[u8]) {
        let now = now_ns();
        let since = now.saturating_sub(BURST.as_nanos() as u64);
        while self.made.front().is_some_and(|(_, t)| *t < since) {
            self.made.pop_front();
        }
        if self.made.len() >= RECENT_MKDIRS
            && let Some((_, t)) = self.made.pop_front()
        {
            self.incomplete_until = self.incomplete_until.max(t);
        }
        self.made.push_back((path.to_vec(), now));
    }

    /// The folders made at or after `since` strictly below `dir`, or `None` if some may be
    /// missing.
    pub(super) fn since(&self, since: u64, dir: &[u8]) -> Option<Vec<Vec<u8>>> {
        if self.incomplete_until >= since {
            return None;
        }
        Some(
            self.made
                .iter()
                .filter(|(p, t)| *t >= since && p != dir && at_or_under(p, dir))
                .map(|(p, _)| p.clone())
                .collect(),
        )
    }
}

fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

impl Recorder {
    /// `path` was written: if it decides what is recorded (`.rewindignore`, or a marker or
    /// `.gitignore` in its folder), read the rules again, and quiet a new folder it marks.
    pub(super) fn note_rules(&self, path: &[u8]) -> Result<()> {
        if path == b".rewindignore" {
            let rules = match self.source.open_read(b".rewindignore") {
                Ok(f) => std::io::read_to_string(f).unwrap_or_default(),
                Err(_) => String::new(),
            };
            self.ignore
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .set_rewindignore(&rules);
            return self.quiet_newly_ignored(b"");
        }
        let (dir, name) = split(path);
        if !RULE_FILES.contains(&name) {
            return Ok(());
        }
        if name == b".gitignore" {
            self.ignore
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .forget(dir);
            self.quiet_newly_ignored(dir)?;
        }
        let marked = {
            let rules = self.ignore.read().unwrap_or_else(|e| e.into_inner());
            rules.forget(dir);
            !dir.is_empty() && rules.marker_now(&*self.source, dir).is_some()
        };
        if marked && !self.ignores(dir, true) {
            // `.rewindignore` records it anyway.
            return Ok(());
        }
        if marked {
            self.quiet_burst(dir)?;
        }
        Ok(())
    }

    /// The folders the history says were made since `since` (its newest `RECENT_CHANGES`
    /// changes at most), oldest first, and whether that is all of them: at most `max` are
    /// taken.
    fn mkdirs_recorded_since(&self, since: u64, max: usize) -> Result<(Vec<Made>, bool)> {
        let mut made = Vec::new();
        let mut complete = true;
        self.history.for_each(
            &Query {
                after_id: Some(self.history.id_at_time(since)?),
                since_ns: Some(since),
                order: Order::NewestFirst,
                limit: Some(RECENT_CHANGES),
                ..Query::default()
            },
            |c| {
                if c.kind == ChangeKind::Mkdir {
                    if made.len() == max {
                        complete = false;
                        return false;
                    }
                    made.push((c.path, c.time_ns));
                }
                true
            },
        )?;
        made.reverse();
        Ok((made, complete))
    }

    /// At the mount: the folders the history says were made in the last minute.
    pub(super) fn load_recent_mkdirs(&self) -> Result<()> {
        let now = now_ns();
        let (made, complete) =
            self.mkdirs_recorded_since(now.saturating_sub(BURST.as_nanos() as u64), RECENT_MKDIRS)?;
        let mut recent = lock(&self.recent_mkdirs);
        recent.made = made.into();
        // Past `RECENT_CHANGES` changes, or `RECENT_MKDIRS` folders, the history is asked.
        recent.incomplete_until = if complete { 0 } else { now };
        Ok(())
    }

    /// The rules about what is below `dir` changed (its `.gitignore`, or `.rewindignore` for
    /// the whole workspace): every folder below it made moments ago that they now ignore, and
    /// that is not inside one taken back already, has its burst taken back, as when a marker
    /// is written into it (`mkdir gen`, files in it, then `gen/` added to `.gitignore`).
    fn quiet_newly_ignored(&self, dir: &[u8]) -> Result<()> {
        let since = now_ns().saturating_sub(BURST.as_nanos() as u64);
        let known = lock(&self.recent_mkdirs).since(since, dir);
        let mut made: Vec<Vec<u8>> = match known {
            Some(made) => made,
            // Not all of the last minute's folders are at hand (more than the list holds, or
            // the history could not be read at the mount): the history has them; a folder
            // made further back than `RECENT_CHANGES` changes ago (a minute of heavy load)
            // keeps its history.
            None => self
                .mkdirs_recorded_since(since, usize::MAX)?
                .0
                .into_iter()
                .map(|(path, _)| path)
                .filter(|path| path != dir && at_or_under(path, dir))
                .collect(),
        };
        made.sort();
        made.dedup();
        let mut quieted: Vec<Vec<u8>> = Vec::new();
        for path in made {
            if quieted.iter().any(|q| at_or_under(&path, q)) {
                continue;
            }
            // Not only a folder whose own folder is not ignored: below a folder the rules
            // name that keeps its history (made earlier, or shown by a checkpoint), a
            // subfolder made moments ago is taken back alone.
            if !self.ignores(&path, true) {
                continue;
            }
            if self.quiet_burst(&path)? {
                quieted.push(path);
            }
        }
        Ok(())
    }

    /// A file was renamed to `path`: a rule file saved by rename (`sed -i .gitignore`, an
    /// editor's save) decides as one written in place.
    pub fn renamed_to(&self, path: &[u8]) {
        self.made_rule_file(path);
    }

    /// `path` was made by a rename, `mknod` or `link`: if it is a rule file, it decides as
    /// one written in place.
    pub(super) fn made_rule_file(&self, path: &[u8]) {
        let (_, name) = split(path);
        if path != b".rewindignore" && !RULE_FILES.contains(&name) {
            return;
        }
        if let Err(e) = self.note_rules(path) {
            tracing::warn!("{} made: {e}", String::from_utf8_lossy(path));
        }
    }

    /// A name changed (unlink, rmdir, rename, to or from `path`): forget what was read of it.
    /// A `.rewindignore` removed or renamed away says nothing any more: read again (one
    /// renamed into place is, by [`renamed_to`](Self::renamed_to)).
    pub fn names_changed(&self, path: &[u8], is_dir: bool) {
        {
            let rules = self.ignore.read().unwrap_or_else(|e| e.into_inner());
            if is_dir {
                rules.forget_under(path);
            }
            let (dir, name) = split(path);
            if RULE_FILES.contains(&name) {
                rules.forget(dir);
            }
        }
        if path == b".rewindignore"
            && self.source.lstat(path).is_err()
            && let Err(e) = self.note_rules(path)
        {
            tracing::warn!(".rewindignore gone: {e}");
        }
    }

    /// Folder `src` is about to be renamed to `dst`. Returns whether the folder is recorded
    /// under each name: a folder that holds a marker is ignored under both (the marker moves
    /// with it). A new folder that is ignored now (its marker written moments ago) or is moving
    /// to an ignored name has its burst retracted.
    pub(super) fn quiet_moved_dir(&self, src: &[u8], dst: &[u8]) -> Result<(bool, bool)> {
        let marker = self
            .ignore
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .marker_now(&*self.source, src);
        let src_recorded = self.records(src, true);
        let dst_recorded = self.records(dst, true) && (marker.is_none() || !self.ignores_as(dst));
        if marker.is_some() && !src_recorded {
            // A folder the history has, tagged too late to be taken back: its move is real.
            if !self.quiet_burst(src)? && self.present_in_history(src)? {
                return Ok((true, dst_recorded));
            }
        } else if src_recorded && !dst_recorded && self.quiet_burst(src)? {
            return Ok((false, false));
        }
        Ok((src_recorded, dst_recorded))
    }

    /// Whether a folder with a marker would be ignored at `dst` (`.rewindignore` may say no).
    fn ignores_as(&self, dst: &[u8]) -> bool {
        let rules = self.ignore.read().unwrap_or_else(|e| e.into_inner());
        !rules.whitelisted(dst, true)
    }

    /// Whether the history has `path` as present now (its last change left something there).
    fn present_in_history(&self, path: &[u8]) -> Result<bool> {
        Ok(self
            .history
            .last_change_until(path, u64::MAX)?
            .is_some_and(|c| c.path == path && c.after.is_some()))
    }

    /// Folder `dir` became ignored: drop its held-back creates, and if it was made moments
    /// ago, retract what was recorded of it since. Whether anything was retracted.
    pub(super) fn quiet_burst(&self, dir: &[u8]) -> Result<bool> {
        let _quieting = self.quieting.write().unwrap_or_else(|e| e.into_inner());
        let under = |p: &[u8]| at_or_under(p, dir);
        let mut dropped = Vec::new();
        lock(&self.pending).retain(|path, p| {
            let keep = !under(path.as_slice());
            if !keep {
                dropped.push((path.clone(), p.clone()));
            }
            keep
        });
        let quieted = self.take_back_burst(dir, &dropped);
        match quieted {
            Ok(_) => {
                for (_, p) in &dropped {
                    self.release_id(p.id);
                }
            }
            // The store refuses writes: nothing was written, and what it was doing (a rename
            // into an ignored name) is refused. The new files it dropped go back as they were,
            // with their ids, to be recorded.
            Err(_) => {
                let mut superseded = Vec::new();
                {
                    let mut pending = lock(&self.pending);
                    for (path, p) in dropped {
                        match pending.entry(path) {
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(p);
                            }
                            // A newer file came at its name meanwhile.
                            std::collections::hash_map::Entry::Occupied(_) => {
                                superseded.push(p.id);
                            }
                        }
                    }
                }
                for id in superseded {
                    self.release_id(id);
                }
            }
        }
        quieted
    }

    /// [`quiet_burst`](Recorder::quiet_burst) once the held-back creates below `dir` are out
    /// of the table (`dropped`): their markers dropped, and what was recorded of the folder
    /// since it was made taken back, in one batch (a store that refuses it leaves all as it
    /// was).
    fn take_back_burst(&self, dir: &[u8], dropped: &[(Vec<u8>, Pending)]) -> Result<bool> {
        self.drain()?;
        let burst = self.burst_of(dir)?;
        let markers: Vec<_> = dropped
            .iter()
            .filter(|(_, p)| p.fsynced.is_some())
            .map(|(path, _)| (path.clone(), None))
            .collect();
        let changes = burst.as_deref().unwrap_or_default();
        let manifest: Vec<_> = changes
            .iter()
            .flat_map(|c| std::iter::once(&c.path).chain(&c.from))
            .map(|p| (p.clone(), None))
            .collect();
        if !changes.is_empty() || !markers.is_empty() {
            self.history.retract_with(
                changes,
                &Retraction {
                    manifest: &manifest,
                    markers: &markers,
                    swap_under: None,
                },
            )?;
        }
        if burst.is_some() {
            tracing::debug!(
                "{} became ignored: {} changes taken back",
                String::from_utf8_lossy(dir),
                changes.len()
            );
        }
        Ok(burst.is_some())
    }

    /// What was recorded at or below `dir` since it was made, if it was made moments ago
    /// (within [`BURST`]) and nothing crossed its border since.
    fn burst_of(&self, dir: &[u8]) -> Result<Option<Vec<crate::history::change::Change>>> {
        let under = |p: &[u8]| at_or_under(p, dir);
        // The folder's making: its last change other than a chmod (pytest makes its cache
        // folder with `mkdtemp`, then chmods it).
        let made = self
            .history
            .query(&Query {
                path: Some(dir.to_vec()),
                order: Order::NewestFirst,
                limit: Some(16),
                ..Query::default()
            })?
            .into_iter()
            .find(|c| !(c.kind == ChangeKind::Chmod && c.path == dir));
        let Some(made) = made else {
            return Ok(None);
        };
        let age = now_ns().saturating_sub(made.time_ns);
        if made.path != dir
            || made.kind != ChangeKind::Mkdir
            || age > BURST.as_nanos() as u64
            || made.id == 0
        {
            return Ok(None);
        }
        // A checkpoint taken since the folder was made shows it: taking its making back would
        // change what that checkpoint answers. The history keeps it then.
        if self.history.checkpoints()?.iter().any(|c| c.id >= made.id) {
            return Ok(None);
        }
        let mut burst = Vec::new();
        let mut crossing = false;
        self.history.for_each(
            &Query {
                after_id: Some(made.id - 1),
                ..Query::default()
            },
            |c| {
                let names = std::iter::once(&c.path).chain(&c.from).chain(&c.links);
                let inside = names.clone().filter(|n| under(n.as_slice())).count();
                if inside == names.count() {
                    burst.push(c);
                } else if inside > 0 {
                    // Something moved in from outside, or out, or a file with names on both
                    // sides: that is not only the folder's own making.
                    crossing = true;
                }
                !crossing
            },
        )?;
        Ok((!crossing).then_some(burst))
    }
}
