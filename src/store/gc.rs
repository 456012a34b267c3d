//! Removing history: changes the caller's plan lets go, then every blob that nothing refers
//! to any more. Which changes must stay is the caller's rule (`history::retention`); this
//! module only counts references.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use rocksdb::{IteratorMode, WriteBatch};

use super::blobs::{self, Hash};
use super::{CF_BLOBS, ChangeRecord, Query, Result, Store, write::delete_change};

/// What a gc may remove.
pub struct GcPlan<'a> {
    /// Remove changes older than this time (ns since the epoch)...
    pub older_than_ns: Option<u64>,
    /// ...then the oldest changes until the content still referred to fits in this many bytes.
    pub max_bytes: Option<u64>,
    /// The ids that must stay whatever their age, chosen from every change (oldest first).
    pub protect: &'a dyn Fn(&[ChangeRecord]) -> HashSet<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub changes_removed: u64,
    pub blobs_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// The blobs a change refers to.
fn content_hashes(c: &ChangeRecord) -> impl Iterator<Item = Hash> + '_ {
    [&c.before, &c.after]
        .into_iter()
        .filter_map(|s| s.as_ref().and_then(|s| s.hash).map(Hash))
}

impl Store {
    /// Remove what `plan` lets go, then unreferenced blobs. Never a blob that a remaining
    /// change, an open-episode marker or a capture in flight refers to (through chunk
    /// manifests too).
    pub fn gc(&self, plan: &GcPlan<'_>) -> Result<GcReport> {
        self.check_writable()?;
        // Hold the writer lock so no change is recorded between planning and deleting.
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let all = self.query(&Query::default())?;
        let protected = (plan.protect)(&all);

        // Every blob's size, and the chunks of the chunked ones (only manifests are decoded).
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        let mut chunks_of: HashMap<Hash, Vec<Hash>> = HashMap::new();
        {
            let db = self.db()?;
            for item in db.iterator_cf(db.cf(CF_BLOBS), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
                let Ok(hash) = <[u8; 32]>::try_from(&key[..]).map(Hash) else {
                    continue;
                };
                if let Some(m) = blobs::manifest_of(&hash, &value)? {
                    chunks_of.insert(hash, m.chunks.into_iter().map(|(h, _)| Hash(h)).collect());
                }
                sizes.insert(hash, value.len() as u64);
            }
        }
        let with_chunks = |hash: Hash| {
            std::iter::once(hash).chain(chunks_of.get(&hash).into_iter().flatten().copied())
        };

        // Reference counts: from every change, and from write episodes still open (their
        // content from before is stored, and their change is not recorded yet).
        let mut refs: HashMap<Hash, u64> = HashMap::new();
        let open: Vec<Hash> = self
            .open_episodes()?
            .into_iter()
            .filter_map(|(_, e)| e.before.and_then(|b| b.hash).map(Hash))
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

        // Oldest first, so the size budget removes the oldest history.
        let mut doomed = Vec::new();
        for c in &all {
            let too_old = plan.older_than_ns.is_some_and(|t| c.time_ns < t);
            let too_big = plan.max_bytes.is_some_and(|max| live > max);
            if protected.contains(&c.id) || !(too_old || too_big) {
                continue;
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

        let mut batch = WriteBatch::default();
        {
            let db = self.db()?;
            for c in &doomed {
                delete_change(&db, &mut batch, c);
            }
        }
        // Blobs stored or reused lately may belong to a change not recorded yet: keep them.
        // The lock is held until the batch is written, so `keep_blob` either noted its hash
        // in time or finds the blob gone (and it is stored again).
        let recent = self.recent_blobs.lock().unwrap_or_else(|e| e.into_inner());
        let kept: HashSet<Hash> = recent.in_flight().flat_map(with_chunks).collect();
        unreferenced.retain(|h| !kept.contains(h));
        unreferenced.sort();
        unreferenced.dedup();
        {
            let db = self.db()?;
            for h in &unreferenced {
                batch.delete_cf(db.cf(CF_BLOBS), h.0);
            }
        }
        self.write("gc", batch)?;
        if !unreferenced.is_empty() {
            // Before the note table is unlocked: a capture that notes after this sees it.
            self.sweeps.fetch_add(1, Ordering::SeqCst);
        }
        drop(recent);
        self.rebuild_sessions()?;
        {
            let db = self.db()?;
            db.compact_range_cf(db.cf(CF_BLOBS), None::<&[u8]>, None::<&[u8]>);
        }
        Ok(GcReport {
            changes_removed: doomed.len() as u64,
            blobs_removed: unreferenced.len() as u64,
            bytes_before,
            bytes_after: bytes_before
                - unreferenced
                    .iter()
                    .filter_map(|h| sizes.get(h))
                    .sum::<u64>(),
        })
    }
}
