//! A RELEASE comes before what the kernel sent after it.
//!
//! The kernel does not wait for a RELEASE: `close()` returns once it is queued, and the
//! writer's next requests may be handled on other FUSE threads before it. The end of a write is
//! recorded at its RELEASE with the id of that moment, so an operation sent after the close but
//! handled first got the smaller id: `printf a > A && printf b > B` could record B's create
//! before A's, and a point between the two showed a state that never was.
//!
//! The kernel numbers the requests it sends (`unique`), in the order it queues them, two apart
//! (the odd numbers mark INTERRUPTs), from INIT's. Every request is made known as it is read
//! ([`ReleaseOrder::read`], fuser's `received` hook), a RELEASE of a handle that holds a write
//! episode with it. A request that may record (one that changes the tree, and such a RELEASE
//! itself) first waits, before it takes any lock, until every request numbered before it has
//! been read and every such RELEASE among them has set its id aside or found nothing to record
//! ([`ReleaseOrder::wait_before`]). Ids then follow the order in which the kernel sent the
//! requests. Worker threads still read in parallel: taking turns to read cost W2's small edit
//! 0.7× of its time with recording off.
//!
//! The wait is short (an editor's next open waits for its last close's RELEASE to set its id
//! aside, a few microseconds), so a waiter first spins for up to [`SPIN`], watching a counter
//! of changes, and sleeps only then. On these VMs a futex sleep and its wake cost more than the
//! wait itself: a Python loop of W2's small edit took 157–169 µs (p50) sleeping at once,
//! 125–135 µs spinning first (README, W2 section).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::lock;
use crate::history::recorder;

/// A number missing for this long was never sent (the kernel drops a queued request whose
/// process is killed before it is read): the requests after it stop waiting for it.
const GAP_AFTER: Duration = Duration::from_millis(50);

/// Requests read past a missing number before it is taken for a gap at once.
const AHEAD_AT_MOST: usize = 1024;

/// How long a waiter spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// A RELEASE that has not reached its id for this long is a bug somewhere (or a store that
/// hangs): the requests behind it go on, and the log says so.
const WAIT_AT_MOST: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(super) struct ReleaseOrder {
    state: Mutex<State>,
    changed: Condvar,
    /// Counts the changes a waiter may be waiting for (a number read in turn, a RELEASE past
    /// its id), each made with `state` held: a spinning waiter watches it without the lock.
    epoch: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The smallest number not read yet: every request numbered below it has been. 0 until
    /// INIT is known (and for good if the kernel does not number two apart: not ordered).
    next: u64,
    /// Read above a number not read yet.
    ahead: BTreeSet<u64>,
    /// The RELEASEs read, holding a write episode, and not yet past their id.
    releases: BTreeSet<u64>,
    /// Requests asleep in [`ReleaseOrder::wait_before`] (not those spinning).
    waiters: usize,
}

impl State {
    fn advance(&mut self) {
        while self.ahead.remove(&self.next) {
            self.next += 2;
        }
    }

    /// Take the first missing number for one never sent. False if none is missing below a
    /// number read.
    fn skip_gap(&mut self) -> bool {
        let Some(&first) = self.ahead.first() else {
            return false;
        };
        {
            tracing::debug!(
                from = self.next,
                to = first,
                "request numbers never read; not waiting for them"
            );
            self.next = first;
            self.advance();
        }
        true
    }
}

impl ReleaseOrder {
    /// The kernel's INIT was numbered `init`; the requests after it follow.
    pub(super) fn start(&self, init: u64) {
        if !init.is_multiple_of(2) {
            tracing::warn!(
                init,
                "the kernel numbers requests one apart: RELEASEs not ordered"
            );
            return;
        }
        lock(&self.state).next = init + 2;
    }

    /// Request `unique` was read; `release`: a RELEASE that may record an episode's end.
    pub(super) fn read(&self, unique: u64, release: bool) {
        if !unique.is_multiple_of(2) {
            // An INTERRUPT: the number of the request it interrupts, plus one.
            return;
        }
        let mut state = lock(&self.state);
        if state.next == 0 {
            return;
        }
        if release {
            state.releases.insert(unique);
        }
        if unique == state.next {
            state.next += 2;
            state.advance();
            self.note_change(&state);
        } else if unique > state.next {
            state.ahead.insert(unique);
            if state.ahead.len() > AHEAD_AT_MOST && state.skip_gap() {
                self.note_change(&state);
            }
        }
    }

    /// Wait until every request the kernel sent before request `unique` has been read, and
    /// every RELEASE among them is past its id. Call with no lock held: the RELEASEs waited
    /// for take the recorder's locks.
    pub(super) fn wait_before(&self, unique: u64) {
        let mut state = lock(&self.state);
        let since = Instant::now();
        loop {
            if state.next == 0 {
                return;
            }
            let all_read = state.next > unique;
            let release = state.releases.first().copied().filter(|&r| r < unique);
            if all_read && release.is_none() {
                return;
            }
            let waited = since.elapsed();
            if !all_read && waited >= GAP_AFTER && state.skip_gap() {
                continue;
            }
            if !all_read && waited >= GAP_AFTER && release.is_none() {
                // Nothing read after the missing numbers: not a request of the kernel's.
                return;
            }
            if waited >= WAIT_AT_MOST {
                tracing::warn!(
                    request = unique,
                    release,
                    "a RELEASE has not recorded its end for {WAIT_AT_MOST:?}; going on without it"
                );
                return;
            }
            let until = if all_read || waited >= GAP_AFTER {
                WAIT_AT_MOST
            } else {
                GAP_AFTER
            };
            if waited < SPIN {
                let seen = self.epoch.load(Ordering::Acquire);
                drop(state);
                self.spin(seen, since);
                state = lock(&self.state);
                continue;
            }
            let left = until.saturating_sub(waited);
            state.waiters += 1;
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.waiters -= 1;
        }
    }

    /// The turn of the RELEASE `unique`, if it was read as one that may record: after the
    /// requests sent before it, and until this thread sets an id aside (the end's), or the
    /// turn is dropped.
    pub(super) fn turn(self: &Arc<Self>, unique: u64) -> Option<Turn> {
        if !lock(&self.state).releases.contains(&unique) {
            return None;
        }
        self.wait_before(unique);
        let order = self.clone();
        recorder::after_id(Box::new(move || order.pass(unique)));
        Some(Turn)
    }

    /// The RELEASE `unique` records nothing after all (see [`Core::leave_shared_episode`]):
    /// the requests after it need not wait for it.
    ///
    /// [`Core::leave_shared_episode`]: super::Core::leave_shared_episode
    pub(super) fn pass(&self, unique: u64) {
        let mut state = lock(&self.state);
        if state.releases.remove(&unique) {
            self.note_change(&state);
        }
    }

    /// Something a waiter may be waiting for happened (called with `state` held): tell the
    /// spinning ones, and wake the sleeping ones.
    fn note_change(&self, state: &State) {
        self.epoch.fetch_add(1, Ordering::Release);
        if state.waiters > 0 {
            self.changed.notify_all();
        }
    }

    /// Spin until the epoch moves on from `seen` or [`SPIN`] has passed since `since`,
    /// yielding the CPU now and then to the thread that may be about to move it (on two cores
    /// it may be waiting for this one's).
    fn spin(&self, seen: u64, since: Instant) {
        loop {
            for _ in 0..64 {
                if self.epoch.load(Ordering::Acquire) != seen {
                    return;
                }
                std::hint::spin_loop();
            }
            if since.elapsed() >= SPIN {
                return;
            }
            std::thread::yield_now();
        }
    }
}

/// A RELEASE being handled: dropped at the end of the request at the latest.
pub(super) struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        recorder::id_taken();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(order: &Arc<ReleaseOrder>, unique: u64) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        let order = order.clone();
        std::thread::spawn(move || {
            order.wait_before(unique);
            tx.send(()).unwrap();
        });
        rx
    }

    fn still_waiting(rx: &std::sync::mpsc::Receiver<()>) -> bool {
        std::thread::sleep(Duration::from_millis(20));
        rx.try_recv().is_err()
    }

    #[test]
    fn a_request_waits_for_the_releases_sent_before_it() {
        let order = Arc::new(ReleaseOrder::default());
        order.start(2);
        order.read(4, true);
        order.read(6, false);
        order.read(8, true);
        // Before both: no wait.
        order.wait_before(4);
        let rx = waits(&order, 6);
        assert!(still_waiting(&rx), "6 went before the RELEASE 4");
        {
            let _turn = order.turn(4).unwrap();
            assert!(still_waiting(&rx));
            // The end's id is set aside: 6 goes on, 8 is still waited for.
            recorder::id_taken();
        }
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(lock(&order.state).releases, BTreeSet::from([8]));
        // A turn dropped without an id passes too; a RELEASE not read as one has none.
        drop(order.turn(8));
        assert!(lock(&order.state).releases.is_empty());
        assert!(order.turn(6).is_none());
    }

    #[test]
    fn a_request_waits_for_a_release_read_late_on_another_thread() {
        let order = Arc::new(ReleaseOrder::default());
        order.start(2);
        // 6 is read first; 4, a RELEASE, is still between its read and this call.
        order.read(6, false);
        let rx = waits(&order, 6);
        assert!(still_waiting(&rx), "6 went on before 4 was known");
        order.read(4, true);
        assert!(
            still_waiting(&rx),
            "6 went before the RELEASE 4 took its id"
        );
        drop(order.turn(4));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(lock(&order.state).next, 8);
    }

    #[test]
    fn a_number_never_sent_holds_the_requests_after_it_only_briefly() {
        let order = Arc::new(ReleaseOrder::default());
        order.start(2);
        // 4 was dropped by the kernel (its process killed before it was read).
        order.read(6, false);
        let start = Instant::now();
        order.wait_before(6);
        assert!(start.elapsed() >= GAP_AFTER);
        assert_eq!(lock(&order.state).next, 8);
        // INTERRUPTs (odd) are not counted, and a request read late after the gap is taken
        // for one changes nothing.
        order.read(9, false);
        order.read(4, false);
        assert_eq!(lock(&order.state).next, 8);
        order.read(8, false);
        order.wait_before(8);
        // Never stuck on a number nothing was read after.
        let start = Instant::now();
        order.wait_before(12);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
