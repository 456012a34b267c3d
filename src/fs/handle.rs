//! The handle table: FUSE file handles to open things. Generic over what is open, so it holds
//! no FUSE types; callers clone the `Arc` out and drop the lock before any I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub struct HandleTable<T> {
    map: Mutex<HashMap<u64, Arc<T>>>,
    next: AtomicU64,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        HandleTable {
            map: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }
}

impl<T> HandleTable<T> {
    /// A table whose handles start at `base`, so two tables never hand out the same number.
    pub fn starting_at(base: u64) -> Self {
        HandleTable {
            map: Mutex::new(HashMap::new()),
            next: AtomicU64::new(base),
        }
    }

    pub fn insert(&self, value: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, Arc::new(value));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().remove(&fh)
    }

    /// The first value for which `f` holds (a scan: for rare cases only).
    pub fn find(&self, f: impl Fn(&T) -> bool) -> Option<Arc<T>> {
        self.lock().values().find(|v| f(v)).cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_removed_once() {
        let t = HandleTable::default();
        let a = t.insert("a");
        let b = t.insert("b");
        assert_ne!(a, b);
        assert_eq!(*t.get(a).unwrap(), "a");
        assert_eq!(*t.remove(a).unwrap(), "a");
        assert!(t.remove(a).is_none());
        assert_eq!(t.len(), 1);
    }
}
