//! Pins: content stored (or reused) for a record not written yet, kept from gc until it is.
//!
//! gc removes blobs no record refers to. Between storing a file's content and writing the
//! change (or open-episode marker) that names it, the blob is referred to by nothing; a gc in
//! that window must leave it alone. Every blob stored or reused through
//! [`Store::keep_blob`] is pinned by the operation doing it, and unpinned when that operation
//! is over, that is once its record is written (or it gave up):
//!
//! - An operation opens a [`PinScope`] ([`Store::pin_scope`]) before it captures anything and
//!   drops it after its record is written. Everything the thread stores or reuses meanwhile is
//!   pinned by the scope. Scopes nest: an inner scope's pins stay until the outermost one of
//!   the same store ends, so a helper that captures for its caller's record never unpins early.
//! - A record written later by another thread (a delete, written by the journal's writer)
//!   carries [`Pins`] of its own ([`Store::pin`]), taken while the scope still holds them, and
//!   dropped once it is written.
//! - Content stored with no scope open is pinned until the store is dropped (a debug log
//!   line says which): safe, but it is a leak, so every writer in the daemon opens a scope.
//!
//! The table holds a count per hash, so it is as large as the captures in flight, whatever
//! the history's size. gc plans without holding the writer lock (recording goes on), so it
//! also asks the table to remember every hash unpinned while it plans ([`PinTable::watch`]):
//! such a hash belongs to a record written meanwhile, which the plan did not see. gc keeps
//! both what is pinned and what was unpinned, read together under the table's lock when it
//! writes its batch (see `gc.rs`).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Hash, Store};

/// How many pins each hash has.
#[derive(Default)]
pub(super) struct PinTable {
    counts: Mutex<HashMap<Hash, u32>>,
    /// While a gc plans: every hash unpinned since it began. Changed only with `counts`
    /// held, so that a hash is always either pinned or here.
    released: Mutex<Option<HashSet<Hash>>>,
}

impl PinTable {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<Hash, u32>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn released(&self) -> MutexGuard<'_, Option<HashSet<Hash>>> {
        self.released.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember the hashes unpinned from now on, until [`unwatch`](Self::unwatch).
    pub(super) fn watch(&self) {
        let _counts = self.lock();
        *self.released() = Some(HashSet::new());
    }

    /// Stop remembering; what was unpinned since [`watch`](Self::watch). Call with the
    /// table's lock held (`counts`), so that nothing is unpinned between reading the pins and
    /// this.
    pub(super) fn unwatch(&self, _counts: &MutexGuard<'_, HashMap<Hash, u32>>) -> HashSet<Hash> {
        self.released().take().unwrap_or_default()
    }

    fn add(counts: &mut HashMap<Hash, u32>, hash: Hash) {
        *counts.entry(hash).or_insert(0) += 1;
    }

    fn release(&self, hashes: &[Hash]) {
        if hashes.is_empty() {
            return;
        }
        let mut counts = self.lock();
        for h in hashes {
            if let Some(n) = counts.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(h);
                }
            }
        }
        if let Some(released) = &mut *self.released() {
            released.extend(hashes.iter().copied());
        }
        // A burst of captures (a large tree) leaves the map's capacity behind: give it back.
        if counts.capacity() > 4096 && counts.len() < counts.capacity() / 4 {
            let keep = counts.len() * 2;
            counts.shrink_to(keep);
        }
    }
}

/// The scopes open on this thread, innermost last: per store, how deep and what they pinned.
struct Frame {
    table: Arc<PinTable>,
    depth: usize,
    pinned: Vec<Hash>,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// An operation in progress that may store content for a record it writes before it ends.
/// Dropping it unpins what it stored (see the module's comment).
#[must_use = "content is pinned only while the scope lives"]
pub struct PinScope {
    table: Arc<PinTable>,
    /// Not `Send`: the scope belongs to the thread whose captures it collects.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for PinScope {
    fn drop(&mut self) {
        let done = FRAMES.with_borrow_mut(|frames| {
            let i = frames
                .iter()
                .rposition(|f| Arc::ptr_eq(&f.table, &self.table))?;
            frames[i].depth -= 1;
            (frames[i].depth == 0).then(|| frames.remove(i).pinned)
        });
        if let Some(pinned) = done {
            self.table.release(&pinned);
        }
    }
}

/// Pins held by a value, for a record written by another thread; released on drop.
#[derive(Default)]
pub struct Pins {
    table: Option<Arc<PinTable>>,
    pinned: Vec<Hash>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            table.release(&self.pinned);
        }
    }
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pins({})", self.pinned.len())
    }
}

impl Store {
    /// Open a scope: until it is dropped, content this thread stores or reuses stays (see the
    /// module's comment).
    pub fn pin_scope(&self) -> PinScope {
        FRAMES.with_borrow_mut(|frames| {
            match frames
                .iter_mut()
                .rfind(|f| Arc::ptr_eq(&f.table, &self.pins))
            {
                Some(f) => f.depth += 1,
                None => frames.push(Frame {
                    table: self.pins.clone(),
                    depth: 1,
                    pinned: Vec::new(),
                }),
            }
        });
        PinScope {
            table: self.pins.clone(),
            _thread: std::marker::PhantomData,
        }
    }

    /// Pin `hashes` until the returned value is dropped, for a record another thread writes.
    pub fn pin(&self, hashes: impl IntoIterator<Item = Hash>) -> Pins {
        let pinned: Vec<Hash> = hashes.into_iter().collect();
        let mut counts = self.pins.lock();
        for h in &pinned {
            PinTable::add(&mut counts, *h);
        }
        Pins {
            table: Some(self.pins.clone()),
            pinned,
        }
    }

    /// Pin `hash` for the thread's open scope (see [`Store::keep_blob`]).
    pub(super) fn pin_for_scope(&self, hash: Hash) {
        let scoped = FRAMES.with_borrow_mut(|frames| {
            match frames
                .iter_mut()
                .rfind(|f| Arc::ptr_eq(&f.table, &self.pins))
            {
                Some(f) => {
                    f.pinned.push(hash);
                    true
                }
                None => false,
            }
        });
        if !scoped {
            tracing::debug!(
                "content {} stored outside a pin scope: kept from gc until the store closes",
                &hash.to_hex()[..12]
            );
        }
        PinTable::add(&mut self.pins.lock(), hash);
    }

    /// How many distinct hashes are pinned now.
    pub fn pinned_blobs(&self) -> usize {
        self.pins.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_pins_until_its_outermost_end_and_pins_travel() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = store.put_blob(b"a").unwrap();
        // Outside a scope: kept for the store's life.
        assert_eq!(store.pinned_blobs(), 1);
        {
            let _outer = store.pin_scope();
            {
                let _inner = store.pin_scope();
                store.put_blob(b"b").unwrap();
                // Reusing stored content pins it too.
                assert!(store.keep_blob(&a).unwrap());
            }
            // The inner scope's captures belong to its caller's record: still pinned.
            assert_eq!(store.pinned_blobs(), 2);
            assert_eq!(store.pins.lock()[&a], 2);
        }
        assert_eq!(store.pinned_blobs(), 1);
        let b = Hash::of(b"b");
        let carried = store.pin([b]);
        assert_eq!(store.pinned_blobs(), 2);
        let moved = std::thread::spawn(move || carried).join().unwrap();
        drop(moved);
        assert_eq!(store.pinned_blobs(), 1);
    }

    /// While a gc plans, every hash unpinned is remembered (its record was written meanwhile),
    /// from any scope or carried pins, and only then: a watch begun later or ended forgets.
    #[test]
    fn a_watch_remembers_what_was_unpinned_while_it_lasted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (a, b, c) = (Hash::of(b"a"), Hash::of(b"b"), Hash::of(b"c"));
        drop(store.pin([a]));
        store.pins.watch();
        {
            let _scope = store.pin_scope();
            store.put_blob(b"b").unwrap();
            let carried = store.pin([c]);
            std::thread::spawn(move || drop(carried)).join().unwrap();
            // Still pinned by the scope: not yet released.
            let pinned = store.pins.lock();
            assert!(pinned.contains_key(&b));
            assert_eq!(*store.pins.released(), Some(HashSet::from([c])));
        }
        let released = store.pins.unwatch(&store.pins.lock());
        assert_eq!(released, HashSet::from([b, c]));
        // Not watching: nothing is remembered.
        drop(store.pin([a]));
        assert_eq!(*store.pins.released(), None);
        assert!(store.pins.unwatch(&store.pins.lock()).is_empty());
    }
}
