//! The journal: how recorded changes reach the store, in id order, and then everyone watching.
//!
//! Most changes are written as they happen ([`Recorder::record`]). Deletes are queued
//! ([`Recorder::defer`]) and written by the daemon's writer thread many to a batch, so `rm -rf`
//! waits on no index write per file; every other record writes the queue first, so ids stay in
//! the order things happened.
//!
//! Watchers ([`Recorder::subscribe`]) each get a bounded queue: a reader that stops reading
//! costs at most [`QUEUE`] changes of memory, and is told how many it missed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crossbeam_channel::Receiver;

use super::{Recorder, lock};
use crate::history::Result;
use crate::history::change::{Change, Seen};
use crate::history::db::Extra;

/// How many changes a watcher's queue holds before further ones are counted as missed.
pub const QUEUE: usize = 10_000;

/// A change ready to be recorded once its operation has succeeded.
#[derive(Debug)]
pub struct Prepared {
    pub(super) change: Change,
    pub(super) manifest: Vec<(Vec<u8>, Option<Seen>)>,
}

/// One watcher's queue.
#[derive(Default)]
pub struct Subscription {
    queue: Mutex<VecDeque<Arc<Change>>>,
    missed: AtomicU64,
}

/// What a watcher reads next.
pub enum Next {
    Change(Arc<Change>),
    /// This many changes were dropped because the queue was full.
    Missed(u64),
}

impl Subscription {
    fn push(&self, c: &Arc<Change>) {
        let mut q = lock(&self.queue);
        if q.len() >= QUEUE {
            self.missed.fetch_add(1, Ordering::Relaxed);
        } else {
            q.push_back(c.clone());
        }
    }

    /// The next thing to read, if any: a note of missed changes comes once the queue is empty.
    pub fn next(&self) -> Option<Next> {
        if let Some(c) = lock(&self.queue).pop_front() {
            return Some(Next::Change(c));
        }
        match self.missed.swap(0, Ordering::Relaxed) {
            0 => None,
            n => Some(Next::Missed(n)),
        }
    }

    pub fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty() && self.missed.load(Ordering::Relaxed) == 0
    }
}

type Wake = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
pub(super) struct Journal {
    subscribers: Mutex<Vec<Weak<Subscription>>>,
    /// Called after every publish (the control directory's events dispatcher).
    wakers: Mutex<Vec<Wake>>,
    /// Changes whose operation has happened and whose content is stored, waiting for the
    /// writer thread. Taken after the file stripes and before the store's writer lock.
    deferred: Mutex<Vec<Prepared>>,
    /// How many changes were published: lets a waiter see that something new came.
    published: AtomicU64,
}

impl Recorder {
    /// A queue that receives every change recorded from now on; dropping it unsubscribes.
    pub fn subscribe(&self) -> Arc<Subscription> {
        let sub = Arc::new(Subscription::default());
        let mut subs = lock(&self.journal.subscribers);
        subs.retain(|w| w.strong_count() > 0);
        subs.push(Arc::downgrade(&sub));
        sub
    }

    /// Call `wake` after every change is published.
    pub fn on_publish(&self, wake: impl Fn() + Send + Sync + 'static) {
        lock(&self.journal.wakers).push(Box::new(wake));
    }

    /// How many changes have been published so far.
    pub fn published(&self) -> u64 {
        self.journal.published.load(Ordering::SeqCst)
    }

    fn publish(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        {
            let subs = lock(&self.journal.subscribers);
            for c in changes {
                let shared = Arc::new(c.clone());
                for sub in subs.iter().filter_map(Weak::upgrade) {
                    sub.push(&shared);
                }
            }
        }
        self.journal
            .published
            .fetch_add(changes.len() as u64, Ordering::SeqCst);
        for wake in lock(&self.journal.wakers).iter() {
            wake();
        }
    }

    /// Record `change` with its manifest entries and nothing else in the batch.
    pub(super) fn record_one(
        &self,
        change: Change,
        manifest: &[(Vec<u8>, Option<Seen>)],
    ) -> Result<Change> {
        self.record(
            change,
            &Extra {
                finish_episode: None,
                manifest,
                move_under: None,
            },
        )
    }

    /// Record `change` now (after any queued deletes), and tell the watchers.
    pub(super) fn record(&self, change: Change, extra: &Extra<'_>) -> Result<Change> {
        self.record_as(change, extra, None)
    }

    /// [`record`](Recorder::record), with an id set aside by
    /// [`reserve_id`](Recorder::reserve_id) when the operation happened (`None`: the next).
    pub(super) fn record_as(
        &self,
        change: Change,
        extra: &Extra<'_>,
        id: Option<u64>,
    ) -> Result<Change> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)?;
        let mut out = self.history.record_with_ids(vec![(change, extra, id)])?;
        let recorded = out.pop().expect("one change in, one out");
        drop(deferred);
        self.publish(std::slice::from_ref(&recorded));
        Ok(recorded)
    }

    /// The id of an operation that happens now but is recorded later (a held-back create):
    /// after every delete queued before it, before everything that comes after.
    pub(super) fn reserve_id(&self) -> Result<u64> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)?;
        Ok(self.history.reserve_id())
    }

    /// Record `prepared` soon, on the writer thread, batched with others. For changes whose
    /// content is already stored and whose operation has already happened (a delete): if the
    /// daemon dies first, the next mount finds the path gone and records the delete, content
    /// and all, as `external`; only who did it is lost.
    pub fn defer(&self, prepared: Prepared) {
        lock(&self.journal.deferred).push(prepared);
        let _ = self.wake.0.try_send(());
    }

    /// Wakes when there are deferred changes to write: for the writer thread.
    pub fn wakeups(&self) -> Receiver<()> {
        self.wake.1.clone()
    }

    /// Write every deferred change now, in one batch.
    pub fn drain(&self) -> Result<()> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)
    }

    /// Write the queued changes in one batch. If the store cannot take them (a full disk),
    /// they stay queued, first, to be written once it can.
    fn write_deferred(&self, queue: &mut Vec<Prepared>) -> Result<()> {
        if queue.is_empty() {
            return Ok(());
        }
        let items = std::mem::take(queue);
        let extras: Vec<Extra<'_>> = items
            .iter()
            .map(|p| Extra {
                finish_episode: None,
                manifest: &p.manifest,
                move_under: None,
            })
            .collect();
        let result = self.history.record_many(
            items
                .iter()
                .map(|p| p.change.clone())
                .zip(&extras)
                .collect(),
        );
        drop(extras);
        match result {
            Ok(recorded) => {
                self.publish(&recorded);
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    "{} deletes could not be recorded yet (kept until the store takes writes; \
                     if the daemon dies first, the next mount records them as external): {e}",
                    items.len()
                );
                *queue = items;
                Err(e)
            }
        }
    }
}
