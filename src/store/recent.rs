//! The contents of the versions recorded last, kept in memory so that the next version of the
//! same file is delta-compressed against its base without reading it back: the base is
//! otherwise read through its own delta chain (a RocksDB read, a decompression and a BLAKE3
//! check per link), on every edit of a file edited again and again.
//!
//! Only for writing deltas: a content is found by its hash, which names one content forever,
//! and the caller still asks gc to keep the base (`keep_blob`) and reads its stored header
//! first, so a base gc removed is never used. Reading commands always read the store, so a
//! damaged blob is still found. Bounded in bytes; the oldest entry goes first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::Hash;

/// Bytes of content kept at most.
const BYTES_MAX: usize = 4 << 20;
/// A content larger than this is not kept: few would fit, and a large file's versions are
/// mostly chunked, not delta-compressed.
const ENTRY_MAX: usize = 256 << 10;
/// Paths whose newest version is remembered at most; all are forgotten when one more comes.
const PATHS_MAX: usize = 4096;

#[derive(Default)]
pub(crate) struct Recent {
    contents: HashMap<Hash, Arc<[u8]>>,
    /// Hashes in the order they were kept, oldest first.
    order: VecDeque<Hash>,
    bytes: usize,
    /// The newest version stored of each path lately: the base of its next version, found
    /// otherwise by a scan of the path's newest changes (an iterator and a read each, a tenth
    /// of what storing a small edit cost the daemon). Only a base: a stale one (a change that
    /// stored no new content came since) makes a delta no less right, and gc's keep is still
    /// asked for it.
    latest: HashMap<Vec<u8>, Hash>,
}

impl Recent {
    /// Keep `data`, whose hash is `hash`.
    pub(crate) fn keep(&mut self, hash: Hash, data: &[u8]) {
        if data.len() > ENTRY_MAX || self.contents.contains_key(&hash) {
            return;
        }
        while self.bytes + data.len() > BYTES_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.contents.remove(&old) {
                self.bytes -= gone.len();
            }
        }
        self.bytes += data.len();
        self.contents.insert(hash, data.into());
        self.order.push_back(hash);
    }

    /// The content of `hash`, if it is kept.
    pub(crate) fn get(&self, hash: &Hash) -> Option<Arc<[u8]>> {
        self.contents.get(hash).cloned()
    }

    /// `hash` is the newest version stored of `path`.
    pub(crate) fn stored_as(&mut self, path: &[u8], hash: Hash) {
        if self.latest.len() >= PATHS_MAX && !self.latest.contains_key(path) {
            self.latest.clear();
        }
        self.latest.insert(path.to_vec(), hash);
    }

    /// The newest version stored of `path` lately, if it is remembered.
    pub(crate) fn latest_of(&self, path: &[u8]) -> Option<Hash> {
        self.latest.get(path).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_fits_and_lets_the_oldest_go_first() {
        let mut recent = Recent::default();
        let big = vec![7u8; ENTRY_MAX];
        let hashes: Vec<Hash> = (0..=BYTES_MAX / ENTRY_MAX)
            .map(|i| {
                let mut data = big.clone();
                data[0] = i as u8;
                let hash = Hash::of(&data);
                recent.keep(hash, &data);
                hash
            })
            .collect();
        assert!(recent.bytes <= BYTES_MAX);
        assert!(recent.get(&hashes[0]).is_none(), "the oldest went first");
        let newest = hashes.last().unwrap();
        assert_eq!(Hash::of(&recent.get(newest).unwrap()), *newest);
        let too_big = vec![1u8; ENTRY_MAX + 1];
        recent.keep(Hash::of(&too_big), &too_big);
        assert!(recent.get(&Hash::of(&too_big)).is_none());
    }
}
