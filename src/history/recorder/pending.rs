//! Held-back creates. A new file's create is recorded [`PENDING_FOR`] after its last close,
//! by the daemon's pending thread, so that a temporary file renamed over its target
//! (save-by-rename) becomes one `modify` of the target, and one deleted before anyone saw it
//! never shows. Its content is captured when the create is recorded (the file cannot change
//! meanwhile without flushing it first).

use std::time::{Duration, Instant};

use super::capture::seen_of;
use super::{Key, Recorder, lock};
use crate::history::Result;
use crate::history::change::{ChangeKind, FileState, Seen};
use crate::history::db::Extra;
use crate::history::who::Who;

/// How long a new file's creation is held back, waiting to see whether it is a temporary file
/// renamed over its target (save-by-rename) or deleted.
pub const PENDING_FOR: Duration = Duration::from_millis(500);

/// A created file whose creation is not recorded yet.
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) key: Key,
    pub(super) who: Who,
    pub(super) time_ns: u64,
    pub(super) since: Instant,
    /// The file this one replaces in a rename-away save (see `saves`): its state before, so
    /// the create is recorded as a `modify`.
    pub(super) replaces: Option<FileState>,
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
        self.record_create(path, p)
    }

    /// The content of a held-back new file, captured now, and the stat it was captured under
    /// (for the manifest: times may have moved since the create); `None` if it is gone.
    pub(super) fn pending_content(
        &self,
        path: &[u8],
        p: &Pending,
    ) -> Result<Option<(FileState, Seen)>> {
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
            self.history.put_manifest(&[(path.to_vec(), Some(seen))])?;
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

    /// Record held-back creates older than [`PENDING_FOR`] (all of them with `all`, and then
    /// the queued deletes too).
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
    pub(super) fn flush_pending_under(&self, dir: &[u8]) -> Result<()> {
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
}
