//! A RELEASE comes before what the kernel sent after it.
//!
//! The kernel does not wait for a RELEASE: `close()` returns once it is queued, and the
//! writer's next requests may be handled on other FUSE threads before it. The end of a write is
//! recorded at its RELEASE with the id of that moment, so an operation sent after the close but
//! handled first got the smaller id: `printf a > A && printf b > B` could record B's create
//! before A's, and a point between the two showed a state that never was.
//!
//! So requests are read one thread at a time (fuser's `read_in_turn`), and a RELEASE of a
//! handle that holds a write episode is noted as it is read, before the next request is
//! ([`ReleaseOrder::noted`]). A request that may record (one that changes the tree, and such a
//! RELEASE itself) first waits, before it takes any lock, until every RELEASE noted before it
//! has set its id aside or found nothing to record ([`ReleaseOrder::turn`]). Ids then follow
//! the order in which the kernel sent the requests.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::lock;
use crate::history::recorder;

/// A RELEASE that has not reached its id for this long is a bug somewhere (or a store that
/// hangs): the requests behind it go on, and the log says so.
const WAIT_AT_MOST: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(super) struct ReleaseOrder {
    /// The kernel's ids (`unique`) of the RELEASEs noted and not yet past their id.
    waiting: Mutex<BTreeSet<u64>>,
    passed: Condvar,
}

impl ReleaseOrder {
    /// The RELEASE `unique` was read; nothing the kernel sent after it has been read yet.
    pub(super) fn noted(&self, unique: u64) {
        lock(&self.waiting).insert(unique);
    }

    /// Wait until every RELEASE noted before request `unique` is past its id. Call with no
    /// lock held: the RELEASEs waited for take the recorder's locks.
    pub(super) fn wait_before(&self, unique: u64) {
        let mut waiting = lock(&self.waiting);
        let give_up = Instant::now() + WAIT_AT_MOST;
        while let Some(&first) = waiting.first()
            && first < unique
        {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    request = unique,
                    release = first,
                    "a RELEASE has not recorded its end for {WAIT_AT_MOST:?}; going on without it"
                );
                return;
            }
            waiting = self
                .passed
                .wait_timeout(waiting, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The turn of the RELEASE `unique`, if it was noted: after the RELEASEs noted before it,
    /// and until this thread sets an id aside (the end's), or the turn is dropped.
    pub(super) fn turn(self: &Arc<Self>, unique: u64) -> Option<Turn> {
        if !lock(&self.waiting).contains(&unique) {
            return None;
        }
        self.wait_before(unique);
        let order = self.clone();
        recorder::after_id(Box::new(move || order.pass(unique)));
        Some(Turn)
    }

    fn pass(&self, unique: u64) {
        if lock(&self.waiting).remove(&unique) {
            self.passed.notify_all();
        }
    }
}

/// A noted RELEASE being handled: dropped at the end of the request at the latest.
pub(super) struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        recorder::id_taken();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_waits_only_for_the_releases_noted_before_it() {
        let order = Arc::new(ReleaseOrder::default());
        order.noted(10);
        order.noted(14);
        // Before both: no wait.
        order.wait_before(8);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let order = order.clone();
            std::thread::spawn(move || {
                order.wait_before(12);
                tx.send(()).unwrap();
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "12 went before the RELEASE 10");
        {
            let _turn = order.turn(10).unwrap();
            assert!(rx.try_recv().is_err());
            // The end's id is set aside: 12 goes on, 14 is still noted.
            recorder::id_taken();
        }
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        waiter.join().unwrap();
        assert_eq!(*lock(&order.waiting), BTreeSet::from([14]));
        // A turn dropped without an id passes too; a RELEASE never noted has none.
        drop(order.turn(14));
        assert!(lock(&order.waiting).is_empty());
        assert!(order.turn(16).is_none());
    }
}
