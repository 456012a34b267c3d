//! The counts `status` shows (changes, blobs and their stored bytes), kept in `meta` `counts`
//! so that asking costs one read however big the history is.
//!
//! Every batch that adds or removes a change or a blob carries the new counts: a change's
//! batch ([`Store::record_with_ids`], [`Store::retract`]), a blob's (`blobs.rs`) and gc's. The
//! counts in memory are what the last such batch wrote; they are taken under their own lock
//! from making the batch until it is written, so batches carry them in the order they land.
//! A store of format 3 or older has none: they are counted once when it is opened for writing
//! (a reader of such a store counts on every `stats`).

use std::sync::{MutexGuard, PoisonError};

use rocksdb::{IteratorMode, WriteBatch};

use super::{CF_BLOBS, CF_CHANGES, CF_META, Result, Stats, Store};

/// The `meta` key of the counts.
pub(super) const COUNTS_KEY: &[u8] = b"counts";

/// What the `meta` `counts` value holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub changes: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

impl Counts {
    /// Version 1, then each count as a u64, big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(25);
        v.push(1);
        for n in [self.changes, self.blobs, self.blob_bytes] {
            v.extend_from_slice(&n.to_be_bytes());
        }
        v
    }

    /// `None` for a value of another version or length (counted again, then).
    pub fn decode(v: &[u8]) -> Option<Counts> {
        if v.len() != 25 || v[0] != 1 {
            return None;
        }
        let at = |i: usize| u64::from_be_bytes(v[i..i + 8].try_into().expect("8 bytes"));
        Some(Counts {
            changes: at(1),
            blobs: at(9),
            blob_bytes: at(17),
        })
    }
}

impl Store {
    /// The counts, for a batch that will change them. Taken after `writer` and `pins`, before
    /// `db`.
    pub(super) fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write `batch` with `new` as the counts; on success they are the counts in memory too.
    pub(super) fn write_counted(
        &self,
        context: &'static str,
        batch: WriteBatch,
        counts: &mut MutexGuard<'_, Counts>,
        new: Counts,
    ) -> Result<()> {
        self.write_counted_as(context, batch, counts, new, false)
    }

    /// [`write_counted`](Store::write_counted); with `to_free`, a write that gives space back
    /// (gc), made also while writes are refused because the disk is full
    /// ([`write_to_free`](Store::write_to_free)).
    pub(super) fn write_counted_as(
        &self,
        context: &'static str,
        mut batch: WriteBatch,
        counts: &mut MutexGuard<'_, Counts>,
        new: Counts,
        to_free: bool,
    ) -> Result<()> {
        {
            let db = self.db()?;
            batch.put_cf(db.cf(CF_META), COUNTS_KEY, new.encode());
        }
        if to_free {
            self.write_to_free(context, batch)?;
        } else {
            self.write(context, batch)?;
        }
        **counts = new;
        Ok(())
    }

    /// The counts as stored, `None` in a store that has none yet.
    fn stored_counts(&self) -> Result<Option<Counts>> {
        Ok(self.meta(COUNTS_KEY)?.as_deref().and_then(Counts::decode))
    }

    /// At open for writing, and after a reopen: the counts from the store, counted (and
    /// written) first if it has none.
    pub(super) fn load_counts(&self) -> Result<()> {
        let mut counts = self.counts();
        match self.stored_counts()? {
            Some(stored) => *counts = stored,
            None => {
                let found = self.recount()?;
                tracing::info!("counted the store for status: {found:?}");
                self.write_counted("counts", WriteBatch::default(), &mut counts, found)?;
            }
        }
        Ok(())
    }

    /// Count every change and blob (reading every blob's value): for a store without counts.
    pub fn recount(&self) -> Result<Counts> {
        let mut counts = Counts::default();
        let db = self.db()?;
        for item in db.iterator_cf(db.cf(CF_CHANGES), IteratorMode::Start) {
            item.map_err(Store::db_error("scan"))?;
            counts.changes += 1;
        }
        for item in db.iterator_cf(db.cf(CF_BLOBS), IteratorMode::Start) {
            let (_, value) = item.map_err(Store::db_error("scan"))?;
            counts.blobs += 1;
            counts.blob_bytes += value.len() as u64;
        }
        Ok(counts)
    }

    /// Counts for `status`: one read, or a count of everything in a store of an older format
    /// opened read-only.
    pub fn stats(&self) -> Result<Stats> {
        let counts = match self.stored_counts()? {
            Some(c) => c,
            None => self.recount()?,
        };
        Ok(Stats {
            changes: counts.changes,
            last_id: self.last_id()?,
            blobs: counts.blobs,
            blob_bytes: counts.blob_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_and_golden_bytes() {
        let c = Counts {
            changes: 3,
            blobs: 2,
            blob_bytes: 0x0102,
        };
        let mut golden = vec![1u8];
        golden.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]);
        golden.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
        golden.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(c.encode(), golden);
        assert_eq!(Counts::decode(&golden), Some(c));
        assert_eq!(Counts::decode(&golden[..24]), None);
        golden[0] = 2;
        assert_eq!(Counts::decode(&golden), None);
    }
}
