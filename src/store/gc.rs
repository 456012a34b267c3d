//! Removing history: changes the caller's plan lets go, then every blob that nothing refers
//! to any more. Which changes must stay is the caller's rule (`history::retention`); this
//! module only counts references.
//!
//! A dry run and a run are one computation: [`Store::gc`] plans (recording goes on meanwhile,
//! and what it records is taken into account under the writer lock) and, unless it is a dry
//! run, carries out exactly that plan before letting go of the lock. What
//! a run removed is remembered (the *horizon*: the newest change removed, and per session and
//! agent how many of theirs), so that no question about the past is answered from incomplete
//! history.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;

use rocksdb::{BottommostLevelCompaction, CompactOptions, IteratorMode, LiveFile, WriteBatch};

use super::blobs::{self, Hash};
use super::write::{Room, delete_change, mib};
use super::{
    ALL_CFS, CF_BLOBS, CF_META, CF_SESSIONS, ChangeRecord, Query, Result, SessionRecord, Store,
};

/// For the tests: how long a gc pauses between its deletes and their compaction, the writer
/// lock let go (`REWIND_TEST_SLOW_COMPACT`, milliseconds).
static SLOW_COMPACT: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_COMPACT");

/// For the tests: how long a gc pauses once its plan is made, before it takes the writer lock
/// to correct it and write its batch (`REWIND_TEST_SLOW_GC_PLAN`, milliseconds).
static SLOW_PLAN: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_GC_PLAN");

/// What a gc may remove.
pub struct GcPlan<'a> {
    /// Remove changes older than this time (ns since the epoch)...
    pub older_than_ns: Option<u64>,
    /// ...then the oldest changes until the content still referred to fits in this many bytes.
    pub max_bytes: Option<u64>,
    /// The ids that must stay whatever their age, chosen from every change (oldest first).
    pub protect: &'a dyn Fn(&[ChangeRecord]) -> HashSet<u64>,
    /// Only say what would be removed.
    pub dry_run: bool,
    /// Then re-encode older versions as deltas on newer ones where that is smaller
    /// (`repack.rs`), and free the bases that no longer need to stay. Not in a dry run.
    pub repack: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this was a dry run (nothing was removed).
    pub dry_run: bool,
    pub changes_removed: u64,
    pub blobs_removed: u64,
    /// Stored content (compressed blobs) before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The store's files on disk, as `du` counts them, before and after (a dry run: both the
    /// size now).
    pub disk_before: u64,
    pub disk_after: u64,
    /// `max_bytes` could not be reached: what must stay (the newest change of every path)
    /// holds more.
    pub over_target: bool,
    /// The history's horizon after this gc, if any was ever removed.
    pub horizon: Option<Horizon>,
    /// Sessions that lost changes in this gc, with how many.
    pub sessions_cut: BTreeMap<String, u64>,
    /// Blobs the repack re-encoded (as deltas on newer versions, or whole), and the bases
    /// it left unneeded, which were then removed (not in `blobs_removed`: that is the plan a
    /// dry run shows).
    pub repacked: u64,
    pub repack_freed: u64,
    /// Of the blobs re-encoded, how many are now deltas (the rest are stored whole, or only
    /// had their chain's depth written again).
    pub repacked_deltas: u64,
    /// A repack was asked for and not made: the store holds this many contents, more than
    /// the most a repack takes on (the second number, [`REPACK_MAX_BLOBS`](super::REPACK_MAX_BLOBS)).
    pub repack_refused: Option<(u64, u64)>,
    /// A repack was asked for and not made, or stopped before the end: why (what it
    /// rewrote stays, and the next one goes on).
    pub repack_stopped: Option<String>,
    /// Contents the repack could not read (damaged, or stored on a damaged base), left as
    /// they are.
    pub repack_unreadable: Option<Unreadable>,
    /// The store was not compacted after removing (all of it, or some families): the disk
    /// lacks the room a compaction writes before it frees, beside the reserve. Why; what was
    /// removed stays removed, and a later gc compacts.
    pub not_compacted: Option<String>,
}

/// Contents a repack could not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unreadable {
    /// How many.
    pub contents: u64,
    /// The paths whose recorded content is one of them, sorted.
    pub paths: Vec<String>,
    /// Why the first could not be read.
    pub first: String,
}

/// The newest change gc ever removed: the state right after it is the oldest point still
/// answered exactly (every later change is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Horizon {
    pub id: u64,
    pub time_ns: u64,
}

/// What gc removed of one session's or agent's changes, over all gcs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    pub removed: u64,
    /// The newest of them.
    pub newest_id: u64,
    /// The turns (of a session) that lost changes.
    pub turns: BTreeSet<u32>,
}

const HORIZON_KEY: &[u8] = b"horizon";
/// Meta keys `cut NUL s NUL session` and `cut NUL a NUL agent`.
fn cut_key(kind: u8, name: &str) -> Vec<u8> {
    let mut k = b"cut\0".to_vec();
    k.push(kind);
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

impl Cut {
    fn encode(&self) -> Vec<u8> {
        let mut v = vec![1u8];
        v.extend_from_slice(&self.removed.to_be_bytes());
        v.extend_from_slice(&self.newest_id.to_be_bytes());
        for t in &self.turns {
            v.extend_from_slice(&t.to_be_bytes());
        }
        v
    }

    fn decode(v: &[u8]) -> Option<Cut> {
        if v.first() != Some(&1) || v.len() < 17 || !(v.len() - 17).is_multiple_of(4) {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(v[i..i + 8].try_into().expect("8 bytes"));
        Some(Cut {
            removed: u64_at(1),
            newest_id: u64_at(9),
            turns: v[17..]
                .chunks(4)
                .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        })
    }
}

impl Horizon {
    fn encode(&self) -> Vec<u8> {
        let mut v = vec![1u8];
        v.extend_from_slice(&self.id.to_be_bytes());
        v.extend_from_slice(&self.time_ns.to_be_bytes());
        v
    }

    fn decode(v: &[u8]) -> Option<Horizon> {
        if v.len() != 17 || v[0] != 1 {
            return None;
        }
        Some(Horizon {
            id: u64::from_be_bytes(v[1..9].try_into().expect("8 bytes")),
            time_ns: u64::from_be_bytes(v[9..17].try_into().expect("8 bytes")),
        })
    }
}

/// The blobs a change refers to.
fn content_hashes(c: &ChangeRecord) -> impl Iterator<Item = Hash> + '_ {
    [&c.before, &c.after]
        .into_iter()
        .filter_map(|s| s.as_ref().and_then(|s| s.hash).map(Hash))
}

/// What reading the blob `hash` (stored as `value`) needs besides it: the chunks of a chunked
/// one, the base of a delta.
fn needs_of(hash: &Hash, value: &[u8]) -> Result<Vec<Hash>> {
    Ok(if let Some(m) = blobs::manifest_of(hash, value)? {
        m.chunks.into_iter().map(|(h, _)| Hash(h)).collect()
    } else if let Some((base, _)) = blobs::delta_base(value) {
        vec![base]
    } else {
        Vec::new()
    })
}

/// Session summaries made from `changes`.
fn summaries<'a>(
    changes: impl Iterator<Item = &'a ChangeRecord>,
) -> HashMap<String, SessionRecord> {
    let mut out = HashMap::new();
    for c in changes {
        count_in(&mut out, c);
    }
    out
}

fn count_in(sessions: &mut HashMap<String, SessionRecord>, c: &ChangeRecord) {
    match sessions.get_mut(&c.session) {
        Some(s) => s.count_in(c),
        None => {
            let mut s = SessionRecord::started_by(c);
            s.count_in(c);
            sessions.insert(c.session.clone(), s);
        }
    }
}

/// What was recorded and taken back while a gc planned ([`Store::sweep`]).
#[derive(Default)]
pub(super) struct Watch {
    pub(super) recorded: Vec<ChangeRecord>,
    pub(super) retracted: Vec<ChangeRecord>,
}

/// A gc's plan being made: what is recorded, taken back and unpinned meanwhile is watched
/// until [`finish`](Watching::finish), or until it is dropped (a plan cut short by an error).
struct Watching<'a> {
    store: &'a Store,
    done: bool,
}

impl<'a> Watching<'a> {
    /// `writer_held`: the caller holds the writer lock.
    fn start(store: &'a Store, writer_held: bool) -> Watching<'a> {
        // With the writer lock: a change is written either before (and the plan reads it) or
        // after (and is watched).
        let _writer =
            (!writer_held).then(|| store.writer.lock().unwrap_or_else(|e| e.into_inner()));
        *store.gc_watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Watch::default());
        store.pins.watch();
        Watching { store, done: false }
    }

    /// What was recorded and taken back, and the content unpinned: call with `writer` and
    /// the pin table's lock held.
    fn finish(
        mut self,
        pinned: &std::sync::MutexGuard<'_, HashMap<Hash, u32>>,
    ) -> (Watch, HashSet<Hash>) {
        self.done = true;
        let watch = self
            .store
            .gc_watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        (watch, self.store.pins.unwatch(pinned))
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        *self
            .store
            .gc_watch
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let pinned = self.store.pins.lock();
        self.store.pins.unwatch(&pinned);
    }
}

/// Bytes the files below `dir` take on disk (allocated blocks, as `du` counts them).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // Like `du -s`: the folder's own blocks too, and each folder below with its files.
    let own = std::fs::symlink_metadata(dir).map_or(0, |md| md.blocks() * 512);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return own;
    };
    own + entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(md) if md.is_dir() => disk_usage(&e.path()),
            Ok(md) => md.blocks() * 512,
            Err(_) => 0,
        })
        .sum::<u64>()
}

impl Store {
    /// The oldest point still answered exactly, if gc ever removed a change.
    pub fn horizon(&self) -> Result<Option<Horizon>> {
        Ok(self.meta(HORIZON_KEY)?.as_deref().and_then(Horizon::decode))
    }

    /// What gc removed of a session's changes (`agent`: of an agent's).
    pub fn cut(&self, agent: bool, name: &str) -> Result<Option<Cut>> {
        let kind = if agent { b'a' } else { b's' };
        Ok(self
            .meta(&cut_key(kind, name))?
            .as_deref()
            .and_then(Cut::decode))
    }

    /// Remove what `plan` lets go, then unreferenced blobs. Never a blob that a remaining
    /// change, an open-episode marker or a capture in flight refers to (through chunk
    /// manifests too). A dry run computes the same and removes nothing.
    pub fn gc(&self, plan: &GcPlan<'_>) -> Result<GcReport> {
        // On a full disk too: giving space back is what the reserve is kept for.
        if !plan.dry_run {
            self.check_may_free()?;
        }
        let _gc = self.gc_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut report = self.sweep(plan)?;
        if plan.dry_run || !plan.repack {
            return Ok(report);
        }
        // No repack on a full disk: it writes before it frees.
        if let Err(e) = self.check_writable() {
            report.repack_stopped = Some(format!("the store refuses writes: {e}"));
            return Ok(report);
        }
        // The repack holds what it knows of every stored content in memory (under 1 KB
        // each, measured): bounded by refusing a bigger store.
        let contents = self.counts().blobs;
        let most = super::repack::most_blobs();
        if contents > most {
            tracing::warn!("gc: not repacked: {contents} contents stored");
            report.repack_refused = Some((contents, most));
            return Ok(report);
        }
        // What was removed stays removed: a repack cut short by an error (a full disk, say)
        // leaves every blob readable, and the next gc takes it up again.
        let repacked = match self.repack() {
            Ok(repacked) => repacked,
            Err(e) => {
                tracing::warn!("gc: the repack stopped: {e}");
                report.repack_stopped = Some(e.to_string());
                return Ok(report);
            }
        };
        if let Some(why) = &repacked.stopped {
            tracing::warn!("gc: the repack {why}");
        }
        report.repack_stopped = repacked.stopped;
        if let Some((_, first)) = repacked.unreadable.first() {
            let contents: HashSet<Hash> = repacked.unreadable.iter().map(|(h, _)| *h).collect();
            let paths = self.paths_naming(&contents).unwrap_or_default();
            report.repack_unreadable = Some(Unreadable {
                contents: contents.len() as u64,
                paths: paths
                    .iter()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect(),
                first: first.clone(),
            });
        }
        report.repacked = repacked.rewritten;
        report.repacked_deltas = repacked.deltas;
        if repacked.rewritten > 0 {
            tracing::info!(
                rewritten = repacked.rewritten,
                deltas = repacked.deltas,
                before = repacked.bytes_before,
                after = repacked.bytes_after,
                "repacked older versions as deltas on newer ones"
            );
        }
        let mut freed = false;
        if repacked.freed_bases {
            // Bases kept only for the deltas that were on them go now: the same sweep, with
            // no change to remove.
            let nothing = |_: &[ChangeRecord]| HashSet::new();
            let again = self.sweep(&GcPlan {
                older_than_ns: None,
                max_bytes: None,
                protect: &nothing,
                dry_run: false,
                repack: false,
            })?;
            report.repack_freed = again.blobs_removed;
            freed = again.blobs_removed > 0;
            if freed {
                report.not_compacted = again.not_compacted;
            }
        }
        if repacked.rewritten > 0 {
            if !freed {
                // The old values are still in RocksDB's files until they are compacted.
                report.not_compacted = self.give_back_space()?;
            }
            report.bytes_after = self.stats()?.blob_bytes;
            report.disk_after = disk_usage(&self.dir);
        }
        Ok(report)
    }

    /// The removal part of [`gc`](Store::gc), under `gc_lock`.
    ///
    /// The plan reads every change and every blob's header: seconds for a large store.
    /// Recording goes on meanwhile (a gc used to hold the writer lock for all of it, and every
    /// write through the mount waited). What is recorded while it plans, and every content
    /// unpinned, is watched ([`Watching`]); under the writer lock, where the batch is
    /// written, the plan keeps that content and what reading it needs, and counts the new
    /// changes in the session summaries. A change the plan counted and that was taken back
    /// meanwhile (an operation that failed after its change was recorded) may have been the
    /// newest of its path, which the plan then let go of: the plan is made again, and after
    /// three such tries, with the writer lock held throughout.
    fn sweep(&self, plan: &GcPlan<'_>) -> Result<GcReport> {
        let mut tries = 0;
        loop {
            tries += 1;
            if let Some(report) = self.sweep_once(plan, tries > 3)? {
                return Ok(report);
            }
        }
    }

    /// One try of [`sweep`](Self::sweep): `None` if a change the plan counted was taken back
    /// while it planned (never with `locked`: the writer lock held from the start).
    fn sweep_once(&self, plan: &GcPlan<'_>, locked: bool) -> Result<Option<GcReport>> {
        let held = locked.then(|| self.writer.lock().unwrap_or_else(|e| e.into_inner()));
        let watching = Watching::start(self, held.is_some());
        let disk_before = disk_usage(&self.dir);
        let all = self.query(&Query::default())?;
        let protected = (plan.protect)(&all);

        // Every blob's size, and what reading it needs: the chunks of the chunked ones, the
        // base of a delta (only manifests and delta headers are decoded).
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        let mut chunks_of: HashMap<Hash, Vec<Hash>> = HashMap::new();
        {
            let db = self.db()?;
            for item in db.iterator_cf(db.cf(CF_BLOBS), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
                let Ok(hash) = <[u8; 32]>::try_from(&key[..]).map(Hash) else {
                    continue;
                };
                let needs = needs_of(&hash, &value)?;
                if !needs.is_empty() {
                    chunks_of.insert(hash, needs);
                }
                sizes.insert(hash, value.len() as u64);
            }
        }
        // A blob and every blob reading it needs: its chunks, its delta base, that base's base
        // (a base kept for a delta keeps its own), down to content stored whole.
        // Each counted once per reference, so that a damaged header naming a blob that needs
        // it cannot make this loop.
        let with_chunks = |hash: Hash| {
            let mut out = vec![hash];
            let mut seen = HashSet::from([hash]);
            let mut i = 0;
            while let Some(&h) = out.get(i) {
                for &next in chunks_of.get(&h).into_iter().flatten() {
                    if seen.insert(next) {
                        out.push(next);
                    }
                }
                i += 1;
            }
            out
        };

        // Reference counts: from every change, from write episodes still open (their content
        // from before is stored, and their change is not recorded yet), and from turns.
        let mut refs: HashMap<Hash, u64> = HashMap::new();
        let open: Vec<Hash> = self
            .open_episodes()?
            .into_iter()
            .filter_map(|(_, e)| e.before.and_then(|b| b.hash).map(Hash))
            // A turn's conversation stays as long as the turn.
            .chain(
                self.turns(None)?
                    .into_iter()
                    .filter_map(|t| t.conversation.map(Hash)),
            )
            .collect();
        for hash in all.iter().flat_map(content_hashes).chain(open) {
            for h in with_chunks(hash) {
                *refs.entry(h).or_insert(0) += 1;
            }
        }
        let mut unreferenced: Vec<Hash> = sizes
            .keys()
            .filter(|h| !refs.contains_key(h))
            .copied()
            .collect();
        let bytes_before: u64 = sizes.values().sum();
        let mut live: u64 = refs.keys().filter_map(|h| sizes.get(h)).sum();

        // Oldest first, so the size budget removes the oldest history. Once a change that may
        // go is kept, every later one is kept too: what is removed is always all the history
        // before a horizon (less the protected changes), never a hole in the middle of it.
        let mut doomed = Vec::new();
        for c in &all {
            if protected.contains(&c.id) {
                continue;
            }
            let too_old = plan.older_than_ns.is_some_and(|t| c.time_ns < t);
            let too_big = plan.max_bytes.is_some_and(|max| live > max);
            if !(too_old || too_big) {
                break;
            }
            for hash in content_hashes(c) {
                for h in with_chunks(hash) {
                    let n = refs.get_mut(&h).expect("counted above");
                    *n -= 1;
                    if *n == 0 {
                        live = live.saturating_sub(sizes.get(&h).copied().unwrap_or(0));
                        unreferenced.push(h);
                    }
                }
            }
            doomed.push(c);
        }
        // What stays of each session, as far as the plan knows.
        let mut sessions = if plan.dry_run {
            HashMap::new()
        } else {
            let gone: HashSet<u64> = doomed.iter().map(|c| c.id).collect();
            summaries(all.iter().filter(|c| !gone.contains(&c.id)))
        };
        // The batch's bulk, its deletes of changes, made before the lock is taken.
        let mut batch = WriteBatch::default();
        if !plan.dry_run {
            let db = self.db()?;
            for c in &doomed {
                delete_change(&db, &mut batch, c);
            }
        }
        SLOW_PLAN.pause();

        // Hold the writer lock so no change is recorded between the plan's last corrections
        // and the batch (and until the session summaries are written).
        let writer = match held {
            Some(writer) => writer,
            None => self.writer.lock().unwrap_or_else(|e| e.into_inner()),
        };
        // Blobs pinned by an operation in progress belong to a record not written yet: keep
        // them (`pins.rs`). The lock is held until the batch is written, so `keep_blob` either
        // pinned its hash in time or finds the blob gone (and it is stored again). Blobs
        // unpinned while the plan was made belong to records it did not see: keep them too.
        let pinned = self.pins.lock();
        let (watch, released) = watching.finish(&pinned);
        let seen = |id: u64| all.binary_search_by_key(&id, |c| c.id).is_ok();
        // A change taken back that the plan counted may have been the newest of its path.
        // One it did not (recorded meanwhile: an editor's rename-away save takes one back at
        // every save) changes nothing in it.
        if watch.retracted.iter().any(|c| seen(c.id)) && !locked {
            return Ok(None);
        }
        let taken_back: HashSet<u64> = watch.retracted.iter().map(|c| c.id).collect();
        let recorded: Vec<&ChangeRecord> = watch
            .recorded
            .iter()
            .filter(|c| !seen(c.id) && !taken_back.contains(&c.id))
            .collect();
        let kept = self.needed_by(
            pinned
                .keys()
                .copied()
                .chain(released)
                .chain(recorded.iter().flat_map(|c| content_hashes(c)))
                // What a change taken back named may be named again by the marker put back
                // with it.
                .chain(watch.retracted.iter().flat_map(content_hashes)),
            &sizes,
            &chunks_of,
        )?;
        unreferenced.retain(|h| !kept.contains(h));
        unreferenced.sort();
        unreferenced.dedup();
        let bytes_after = bytes_before
            - unreferenced
                .iter()
                .filter_map(|h| sizes.get(h))
                .sum::<u64>();
        // What stays: the newest change of every path, and content pinned by captures in flight.
        let over_target = plan.max_bytes.is_some_and(|max| bytes_after > max);

        // What this gc takes from each session and agent, and the new horizon.
        let mut sessions_cut: BTreeMap<String, u64> = BTreeMap::new();
        let mut cuts: BTreeMap<(u8, String), Cut> = BTreeMap::new();
        for c in &doomed {
            *sessions_cut.entry(c.session.clone()).or_default() += 1;
            for (kind, name) in [(b's', &c.session), (b'a', &c.agent)] {
                let cut = match cuts.entry((kind, name.clone())) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(self.cut(kind == b'a', name)?.unwrap_or_default())
                    }
                };
                cut.removed += 1;
                cut.newest_id = cut.newest_id.max(c.id);
                if kind == b's'
                    && let Some(t) = c.turn
                {
                    cut.turns.insert(t);
                }
            }
        }
        let old_horizon = self.horizon()?;
        let horizon = match (old_horizon, doomed.last()) {
            (Some(h), Some(c)) if h.id >= c.id => Some(h),
            (_, Some(c)) => Some(Horizon {
                id: c.id,
                time_ns: c.time_ns,
            }),
            (h, None) => h,
        };

        let mut report = GcReport {
            dry_run: plan.dry_run,
            changes_removed: doomed.len() as u64,
            blobs_removed: unreferenced.len() as u64,
            bytes_before,
            bytes_after,
            disk_before,
            disk_after: disk_before,
            over_target,
            horizon,
            sessions_cut,
            repacked: 0,
            repacked_deltas: 0,
            repack_freed: 0,
            repack_refused: None,
            repack_stopped: None,
            repack_unreadable: None,
            not_compacted: None,
        };
        if plan.dry_run {
            return Ok(Some(report));
        }

        // The session summaries: what the plan left of them, with what was recorded since.
        for c in &recorded {
            count_in(&mut sessions, c);
        }
        let old_sessions = self.sessions()?;

        // The counts lose what is deleted; content stored since the scan above is not in
        // `sizes` and never deleted here (and a hash only a change named is not stored).
        let mut counts = self.counts();
        let mut new_counts = *counts;
        new_counts.changes = new_counts.changes.saturating_sub(doomed.len() as u64);
        for size in unreferenced.iter().filter_map(|h| sizes.get(h)) {
            new_counts.blobs = new_counts.blobs.saturating_sub(1);
            new_counts.blob_bytes = new_counts.blob_bytes.saturating_sub(*size);
        }
        {
            let db = self.db()?;
            for h in &unreferenced {
                batch.delete_cf(db.cf(CF_BLOBS), h.0);
            }
            if !unreferenced.is_empty() {
                // What the last mount knew to be stored may not be any more.
                batch.delete_cf(db.cf(CF_META), super::KNOWN_KEY);
            }
            if horizon != old_horizon
                && let Some(h) = horizon
            {
                batch.put_cf(db.cf(CF_META), HORIZON_KEY, h.encode());
            }
            for ((kind, name), cut) in &cuts {
                batch.put_cf(db.cf(CF_META), cut_key(*kind, name), cut.encode());
            }
            for old in &old_sessions {
                if !sessions.contains_key(&old.name) {
                    batch.delete_cf(db.cf(CF_SESSIONS), old.name.as_bytes());
                }
            }
            for info in sessions.values() {
                batch.put_cf(db.cf(CF_SESSIONS), info.name.as_bytes(), info.encode());
            }
        }
        self.write_counted_as("gc", batch, &mut counts, new_counts, true)?;
        drop(counts);
        if !unreferenced.is_empty() {
            // Before the note table is unlocked: a capture that notes after this sees it.
            self.sweeps.fetch_add(1, Ordering::SeqCst);
        }
        drop(pinned);
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Recording goes on while RocksDB compacts: a compaction of a big store takes seconds,
        // and every operation that records waited for it (a `mkdir` took 0.7 s beside a gc of
        // 100k changes).
        drop(writer);
        SLOW_COMPACT.pause();
        // Also when an earlier gc left its deletes uncompacted, for lack of room.
        if !doomed.is_empty() || !unreferenced.is_empty() || self.deletes_left()? {
            report.not_compacted = self.give_back_space()?;
        }
        report.disk_after = disk_usage(&self.dir);
        Ok(Some(report))
    }

    /// `roots` and every blob reading them needs (chunks, delta bases, their bases). What the
    /// scan saw is in `chunks_of` (or, stored whole, in `sizes` only); a blob stored since is
    /// read.
    fn needed_by(
        &self,
        roots: impl IntoIterator<Item = Hash>,
        sizes: &HashMap<Hash, u64>,
        chunks_of: &HashMap<Hash, Vec<Hash>>,
    ) -> Result<HashSet<Hash>> {
        let mut out = HashSet::new();
        let mut todo: Vec<Hash> = roots.into_iter().collect();
        let db = self.db()?;
        while let Some(h) = todo.pop() {
            if !out.insert(h) {
                continue;
            }
            if let Some(needs) = chunks_of.get(&h) {
                todo.extend(needs);
            } else if !sizes.contains_key(&h)
                && let Some(value) = db
                    .get_pinned_cf(db.cf(CF_BLOBS), h.0)
                    .map_err(Store::db_error("read blob"))?
            {
                todo.extend(needs_of(&h, &value)?);
            }
        }
        Ok(out)
    }

    /// Tell a gc that is planning about a write: call with `writer` held, once it is written.
    pub(super) fn watched_by_gc(&self, note: impl FnOnce(&mut Watch)) {
        if let Some(w) = &mut *self.gc_watch.lock().unwrap_or_else(|e| e.into_inner()) {
            note(w);
        }
    }

    /// Whether deleted content still takes room in the store: only gc deletes in `blobs`, and
    /// a compaction to its last level leaves no delete behind there.
    fn deletes_left(&self) -> Result<bool> {
        let db = self.db()?;
        let cf = db.cf(CF_BLOBS);
        let in_buffers = [
            "rocksdb.num-deletes-active-mem-table",
            "rocksdb.num-deletes-imm-mem-tables",
        ]
        .iter()
        .any(|p| db.property_int_value_cf(cf, *p).ok().flatten().unwrap_or(0) > 0);
        let files = db
            .live_files()
            .map_err(Store::db_error("list store files"))?;
        Ok(in_buffers
            || files
                .iter()
                .any(|f| f.column_family_name == CF_BLOBS && f.num_deletions > 0))
    }

    /// Make RocksDB drop what was deleted: flush each family (so the write-ahead log that
    /// still holds the deleted values can go), then compact it down to its last level,
    /// rewriting even the bottom one, where deleted values would otherwise stay. A flush and a
    /// compaction write before the files they replace go, so each family is flushed and
    /// compacted only if the disk has room for what its biggest job writes
    /// ([`compaction_need`]) beside the reserve, smallest family first; one that does not fit
    /// is left as it is, for a later gc (or RocksDB's own compactions) to compact: why is the
    /// answer (`None`: every family was compacted).
    fn give_back_space(&self) -> Result<Option<String>> {
        let db = self.db()?;
        let mut opts = CompactOptions::default();
        opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        opts.set_exclusive_manual_compaction(true);
        let files = db
            .live_files()
            .map_err(Store::db_error("list store files"))?;
        let mut order: Vec<(&str, u64)> = ALL_CFS
            .iter()
            .map(|name| {
                let size = files
                    .iter()
                    .filter(|f| f.column_family_name == *name)
                    .map(|f| f.size as u64)
                    .sum();
                (*name, size)
            })
            .collect();
        order.sort_by_key(|(_, size)| *size);
        let mut left = Vec::new();
        let mut short: Option<(u64, Room)> = None;
        for (name, _) in order {
            let cf = db.cf(name);
            // Asked again before each: the last one gave some back, and recording goes on.
            let files = db
                .live_files()
                .map_err(Store::db_error("list store files"))?;
            let buffers = db
                .property_int_value_cf(cf, "rocksdb.cur-size-all-mem-tables")
                .ok()
                .flatten()
                .unwrap_or(0);
            // RocksDB's `max_compaction_bytes`: set for `blobs` (`open.rs`), its default (25
            // tables of 64 MiB) for the others, which are small.
            let limit = if name == CF_BLOBS {
                super::open::blob_compaction_limit(&self.dir)
            } else {
                u64::MAX
            };
            let mut need = compaction_need(&files, name, buffers, limit);
            if need == 0 {
                continue;
            }
            if name == CF_BLOBS {
                // RocksDB's own compactions (of what was recorded last) write too: measured
                // once they are done, and one of theirs may still start before this one.
                wait_for_compactions(&db);
                need = need.saturating_add(limit);
            }
            let room = self.room();
            tracing::debug!(
                family = name,
                need,
                free = room.map(|r| r.free),
                "gc: compacting what it deleted"
            );
            if let Some(room) = room
                && room.free < room.reserve.saturating_add(need)
            {
                left.push(name);
                if short.is_none_or(|(n, _)| need > n) {
                    short = Some((need, room));
                }
                continue;
            }
            db.flush_cf(cf).map_err(Store::db_error("flush after gc"))?;
            db.compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
        }
        Ok(short.map(|(need, room)| {
            let what = match (left.contains(&CF_BLOBS), left.len()) {
                (true, 1) => "the stored content",
                (true, _) => "the stored content and the records",
                (false, _) => "the records",
            };
            let why = format!(
                "the disk of {} has {} free, and compacting {what} writes up to {} before the \
                 files it replaces go, beside the {} rewind keeps in reserve for recording",
                self.dir.display(),
                mib(room.free),
                mib(need),
                mib(room.reserve)
            );
            tracing::warn!("gc: not compacted: {why}");
            why
        }))
    }
}

/// The most a flush and a forced compaction of the whole of family `cf` write at once, from
/// its tables (`files`: every live table of the store) and `buffers`, the bytes in its write
/// buffers: RocksDB runs the compaction as jobs, each writing its output before the tables it
/// merges go. The flush makes a table in level 0, and level 0's tables each span the whole key
/// space (a blob's key is its hash), so merging them takes in the whole next level too; below
/// that a job takes in tables up to `limit` bytes (at least one, with what it overlaps one
/// level down). A job writes at most what it takes in.
pub(super) fn compaction_need(files: &[LiveFile], cf: &str, buffers: u64, limit: u64) -> u64 {
    let files: Vec<&LiveFile> = files
        .iter()
        .filter(|f| f.column_family_name == cf)
        .collect();
    let whole: u64 = files.iter().map(|f| f.size as u64).sum();
    let at = |level: i32| files.iter().filter(move |f| f.level == level);
    let below = |level: i32| files.iter().map(|f| f.level).filter(|l| *l > level).min();
    let mut need = 0;
    if buffers > 0 || at(0).next().is_some() {
        let l0: u64 = at(0).map(|f| f.size as u64).sum();
        let next: u64 = below(0).map_or(0, |l| at(l).map(|f| f.size as u64).sum());
        need = buffers + l0 + next;
    }
    for f in files.iter().filter(|f| f.level > 0) {
        // What one table merges with one level down (the last level: itself only).
        let overlap: u64 = below(f.level).map_or(0, |l| {
            at(l)
                .filter(|g| overlaps(f, g))
                .map(|g| g.size as u64)
                .sum()
        });
        need = need.max(limit.max(f.size as u64 + overlap));
    }
    need.min(whole.saturating_add(buffers))
}

/// Wait (up to 10 s) until RocksDB runs no compaction or flush in the background.
fn wait_for_compactions(db: &super::Db<'_>) {
    let running = |p| db.property_int_value(p).ok().flatten().unwrap_or(0) > 0;
    for _ in 0..1000 {
        if !running("rocksdb.num-running-compactions") && !running("rocksdb.num-running-flushes") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether two tables' key ranges meet (a table with no keys known meets every other).
fn overlaps(a: &LiveFile, b: &LiveFile) -> bool {
    match (&a.start_key, &a.end_key, &b.start_key, &b.end_key) {
        (Some(a0), Some(a1), Some(b0), Some(b1)) => a0 <= b1 && b0 <= a1,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horizon_and_cut_round_trip() {
        let h = Horizon { id: 42, time_ns: 7 };
        assert_eq!(Horizon::decode(&h.encode()), Some(h));
        assert_eq!(Horizon::decode(&[2; 17]), None);
        let c = Cut {
            removed: 3,
            newest_id: 9,
            turns: [1, 4].into(),
        };
        assert_eq!(Cut::decode(&c.encode()), Some(c));
        assert_eq!(Cut::decode(&[1, 0, 0]), None);
        assert_eq!(cut_key(b's', "x"), b"cut\0s\0x");
    }

    fn table(cf: &str, level: i32, size: usize, keys: (u8, u8)) -> LiveFile {
        LiveFile {
            column_family_name: cf.into(),
            name: String::new(),
            size,
            level,
            start_key: Some(vec![keys.0]),
            end_key: Some(vec![keys.1]),
            num_entries: 1,
            num_deletions: 0,
        }
    }

    #[test]
    fn a_compaction_needs_room_for_its_biggest_job_not_the_whole_family() {
        const M: usize = 1 << 20;
        // Level 6: ten tables of 4 MiB over the key space; level 5: two of 1 MiB.
        let mut files: Vec<LiveFile> = (0..10u8)
            .map(|i| table("blobs", 6, 4 * M, (i * 20, i * 20 + 19)))
            .collect();
        files.push(table("blobs", 5, M, (0, 30)));
        files.push(table("blobs", 5, M, (100, 110)));
        files.push(table("meta", 6, 50 * M, (0, 255)));
        // Below level 0: the biggest job is one table of level 5 and the two it overlaps, or
        // the limit.
        assert_eq!(
            compaction_need(&files, "blobs", 0, 2 * M as u64),
            9 * M as u64
        );
        assert_eq!(
            compaction_need(&files, "blobs", 0, 20 * M as u64),
            20 * M as u64
        );
        // The write buffers (flushed to level 0) are merged with the whole level under it.
        assert_eq!(
            compaction_need(&files, "blobs", 3 * M as u64, 0),
            9 * M as u64
        );
        files.push(table("blobs", 0, 5 * M, (0, 255)));
        assert_eq!(
            compaction_need(&files, "blobs", 3 * M as u64, 0),
            10 * M as u64
        );
        // Never more than the family holds; nothing for an empty one.
        assert_eq!(compaction_need(&files, "meta", 0, u64::MAX), 50 * M as u64);
        assert_eq!(compaction_need(&files, "turns", 0, u64::MAX), 0);
    }
}
