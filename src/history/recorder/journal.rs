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
use crate::history::Who;
use crate::history::change::{Change, ChangeKind, Seen, Tool};
use crate::history::db::{Extra, Retraction};

/// How many changes a watcher's queue holds before further ones are counted as missed.
pub const QUEUE: usize = 10_000;

/// A change ready to be recorded once its operation has succeeded.
#[derive(Debug)]
pub struct Prepared {
    pub(super) change: Change,
    pub(super) manifest: Vec<(Vec<u8>, Option<Seen>)>,
    /// The content it names, kept from gc until it is written (or dropped).
    pub(super) _pins: crate::store::Pins,
}

/// A retraction the store refused (see [`Recorder::retract_or_owe`]): changes recorded before
/// an operation that then failed, with what goes back in the manifest.
pub(super) struct Owed {
    pub(super) changes: Vec<Change>,
    pub(super) manifest: Vec<(Vec<u8>, Option<Seen>)>,
    /// A folder rename's manifest entries to swap back.
    pub(super) swap_under: Option<(Vec<u8>, Vec<u8>)>,
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
    /// Retractions the store refused, oldest first: written before the queued deletes and
    /// before anything else is recorded. Taken with `deferred` held.
    owed: Mutex<Vec<Owed>>,
    /// Changes are published in id order: one recorded while a smaller id is set aside for a
    /// held-back create waits here until that id is recorded or given back.
    order: Mutex<Order>,
    /// The time of the change given the last id ([`Recorder::stamp`]). Changed only with
    /// `deferred` held.
    last_time: AtomicU64,
    /// Ids set aside for changes whose session was in another turn by then than when they
    /// were made (an edit opened before a turn's bound and closed after it), with the turn and
    /// tool call they are recorded in ([`Recorder::label_now`]). Written with `deferred` held.
    relabeled: Mutex<std::collections::HashMap<u64, Label>>,
}

/// A change's turn and tool call.
type Label = (Option<u32>, Option<Tool>);

thread_local! {
    /// What to run once this thread has set aside the id of what it records: a RELEASE lets
    /// the requests the kernel sent after it go on (`fs::order`).
    static AFTER_ID: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

thread_local! {
    /// Set while this thread records what a crash cut short (`Recorder::recover`): each such
    /// change keeps the turn its marker says it was made in ([`Recorder::label_now`]).
    static KEEP_LABELS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every change this thread records keeping the label it was made with.
pub(super) fn keeping_labels<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            KEEP_LABELS.set(false);
        }
    }
    KEEP_LABELS.set(true);
    let _reset = Reset;
    f()
}

/// Run `then` once this thread sets an id aside ([`Recorder::reserve_id`]), or at
/// [`id_taken`], whichever comes first.
pub fn after_id(then: Box<dyn FnOnce()>) {
    AFTER_ID.set(Some(then));
}

/// This thread's id is set aside (or it will record nothing): run what [`after_id`] gave.
pub fn id_taken() {
    if let Some(then) = AFTER_ID.take() {
        then();
    }
}

/// How long a change may wait for a smaller id set aside before it is published anyway (a
/// held-back create is recorded or given up within a second).
const RESERVED_FOR_AT_MOST: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Default)]
struct Order {
    /// Ids set aside and not yet recorded or given back, and when.
    reserved: std::collections::BTreeMap<u64, std::time::Instant>,
    /// Recorded changes waiting for a smaller reserved id.
    held: std::collections::BTreeMap<u64, Change>,
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

    /// Tell the watchers about recorded changes, in id order: a change waits while a smaller
    /// id is set aside for a held-back create (at most until that create is recorded or given
    /// up, half a second or so).
    fn publish(&self, changes: &[Change]) {
        let mut order = lock(&self.journal.order);
        for c in changes {
            order.reserved.remove(&c.id);
            order.held.insert(c.id, c.clone());
        }
        self.publish_due(&mut order);
    }

    /// Publish the held changes no reserved id comes before.
    fn publish_due(&self, order: &mut Order) {
        // A reservation that neither came nor went for this long is a bug somewhere: say so,
        // and never let it hold the watchers back for good. Ids are set aside in order, each
        // with the time it was (`reserve_id`), so the oldest come first: only those are looked
        // at (a big rollback holds back thousands of creates, and this runs for every change).
        while let Some((&id, at)) = order.reserved.first_key_value()
            && at.elapsed() > RESERVED_FOR_AT_MOST
        {
            tracing::warn!("id {id} was set aside and never used; publishing past it");
            order.reserved.remove(&id);
        }
        let mut due = Vec::new();
        while let Some(entry) = order.held.first_entry() {
            if order
                .reserved
                .first_key_value()
                .is_some_and(|(r, _)| r < entry.key())
            {
                break;
            }
            due.push(entry.remove());
        }
        if due.is_empty() {
            return;
        }
        {
            let subs = lock(&self.journal.subscribers);
            for c in &due {
                let shared = Arc::new(c.clone());
                for sub in subs.iter().filter_map(Weak::upgrade) {
                    sub.push(&shared);
                }
            }
        }
        self.journal
            .published
            .fetch_add(due.len() as u64, Ordering::SeqCst);
        for wake in lock(&self.journal.wakers).iter() {
            wake();
        }
    }

    /// An id set aside will not be used: give it back, and publish what waited for it.
    pub(super) fn release_id(&self, id: u64) {
        lock(&self.journal.relabeled).remove(&id);
        self.history.release_id(id);
        let mut order = lock(&self.journal.order);
        order.reserved.remove(&id);
        self.publish_due(&mut order);
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
                content: None,
                marker: None,
            },
        )
    }

    /// The time of the change given the next id: `time_ns`, or the last one's if that is
    /// later. A change's time is taken when it is prepared and its id when it is written, so
    /// two made at once on two threads (a delete waits in the queue, a mkdir does not) could
    /// otherwise have ids in one order and times in the other, and a point given as a time
    /// would name a state that never was. Called with `deferred` held, as every id is given.
    fn stamp(&self, time_ns: u64) -> u64 {
        let t = time_ns.max(self.journal.last_time.load(Ordering::Relaxed));
        self.journal.last_time.store(t, Ordering::Relaxed);
        t
    }

    /// Where [`stamp`](Self::stamp) starts: the latest time the history holds (a clock set
    /// back while unmounted must not put new changes before old ones).
    pub(super) fn stamp_after(&self, time_ns: u64) {
        let _deferred = lock(&self.journal.deferred);
        self.journal.last_time.fetch_max(time_ns, Ordering::Relaxed);
    }

    /// Label `change` with the turn its id puts it in: the one its session is in as the id is
    /// handed out (with `deferred` held, as every id is, and as a turn's bound is taken and
    /// the turn switched, [`at_point`](Self::at_point)), if that is not the one it was made
    /// in. An operation under way as the agent stops (a background writer's edit, a rename)
    /// is labelled when it begins and given its id when it is recorded: without this, one
    /// that took its id after the bound kept the turn before, past that turn's end.
    fn label_now(&self, change: &mut Change) {
        // A change recovered after a crash was made in the turn its marker names; the turn
        // open at the next mount is another moment.
        if change.kind == ChangeKind::Restore || KEEP_LABELS.get() {
            return;
        }
        if let Some((turn, tool)) = self.turns.current_unless(&change.session, change.turn) {
            change.turn = turn;
            change.tool = tool;
        }
    }

    /// [`label_now`](Self::label_now) for a change whose id was set aside: the label it had
    /// to be given then, if it differs from the one it was made with.
    pub(super) fn take_label(&self, id: u64) -> Option<Label> {
        lock(&self.journal.relabeled).remove(&id)
    }

    /// The label [`take_label`](Self::take_label) will give the change of the id `id` set
    /// aside, if any, left in place.
    pub(super) fn label_of_reserved(&self, id: u64) -> Option<Label> {
        lock(&self.journal.relabeled).get(&id).cloned()
    }

    /// Note the label a change made by `who` is to have with the id `id` set aside now (with
    /// `deferred` held), if its session has gone on to another turn since it was made.
    fn note_label(&self, id: u64, who: &Who) {
        if who.restore {
            return;
        }
        if let Some(label) = self.turns.current_unless(&who.session, who.turn) {
            lock(&self.journal.relabeled).insert(id, label);
        }
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
        let mut change = change;
        match id {
            // One set aside has the time and label it was set aside with.
            Some(id) => {
                if let Some((turn, tool)) = self.take_label(id) {
                    change.turn = turn;
                    change.tool = tool;
                }
            }
            None => {
                change.time_ns = self.stamp(change.time_ns);
                self.label_now(&mut change);
            }
        }
        let mut out = self.history.record_with_ids(vec![(change, extra, id)])?;
        let recorded = out.pop().expect("one change in, one out");
        drop(deferred);
        self.publish(std::slice::from_ref(&recorded));
        Ok(recorded)
    }

    /// The two halves of a `RENAME_EXCHANGE`, in one batch (both or neither), the second with
    /// the first's time: that marks them as one exchange (`history::view`).
    pub(super) fn record_exchange(
        &self,
        first: Change,
        extra: &Extra<'_>,
        mut back: Change,
    ) -> Result<Vec<Change>> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)?;
        let mut first = first;
        first.time_ns = self.stamp(first.time_ns);
        back.time_ns = first.time_ns;
        self.label_now(&mut first);
        self.label_now(&mut back);
        let none = Extra::default();
        let out = self
            .history
            .record_with_ids(vec![(first, extra, None), (back, &none, None)])?;
        drop(deferred);
        self.publish(&out);
        Ok(out)
    }

    /// The id and time of an operation that happens now but is recorded later (a held-back
    /// create): after every delete queued before it, before everything that comes after.
    pub(super) fn reserve_id(&self, who: &Who) -> Result<(u64, u64)> {
        let reserved = self.reserve_id_unannounced(who)?;
        id_taken();
        Ok(reserved)
    }

    /// [`reserve_id`](Recorder::reserve_id) without telling the requests that wait for this
    /// thread's id ([`after_id`]): for a closed edit, which must be in its table first, where
    /// they look for it (`finish_closed`). The caller calls [`id_taken`] then.
    pub(super) fn reserve_id_unannounced(&self, who: &Who) -> Result<(u64, u64)> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)?;
        let id = self.history.reserve_id();
        let time_ns = self.stamp(crate::history::time::now_ns());
        self.note_label(id, who);
        // Before the deferred lock is let go: no larger id is handed out before this one is
        // known to hold publication back.
        lock(&self.journal.order)
            .reserved
            .insert(id, std::time::Instant::now());
        drop(deferred);
        Ok((id, time_ns))
    }

    /// [`reserve_id`](Recorder::reserve_id) for a held-back create put back after a refused
    /// operation (`hold_back_again`): without writing the queued deletes first, which the
    /// store may be refusing too. They came after its file was made.
    pub(super) fn reserve_id_again(&self, who: &Who) -> (u64, u64) {
        let _deferred = lock(&self.journal.deferred);
        let id = self.history.reserve_id();
        let time_ns = self.stamp(crate::history::time::now_ns());
        self.note_label(id, who);
        lock(&self.journal.order)
            .reserved
            .insert(id, std::time::Instant::now());
        (id, time_ns)
    }

    /// Record `prepared` soon, on the writer thread, batched with others. For changes whose
    /// content is already stored and whose operation has already happened (a delete): if the
    /// daemon dies first, the next mount finds the path gone and records the delete, content
    /// and all, as `external`; only who did it is lost.
    pub fn defer(&self, prepared: Prepared) {
        lock(&self.journal.deferred).push(prepared);
        self.wake_writer();
    }

    /// Wake the writer thread: there are deferred changes or closed edits to record.
    pub(super) fn wake_writer(&self) {
        let _ = self.wake.0.try_send(());
    }

    /// Wakes when there are deferred changes to write or closed edits to record: for the
    /// writer thread.
    pub fn wakeups(&self) -> Receiver<()> {
        self.wake.1.clone()
    }

    /// Take the end of the history as of now, for a turn's bounds, and give it to `switch`:
    /// every change made before this call has an id at most this one, every change after it
    /// a larger one, even while the first are still being recorded. An edit closed and a create held back had their ids
    /// set aside when they ended (the RELEASEs the kernel sent before the caller's request
    /// have been waited for, `Core::in_turn`); a queued delete takes its id here. Recording
    /// them (a settle) may take long, a hook's budget and more, and the agent goes on
    /// meanwhile: its next prompt's changes must not fall before the bound (see
    /// [`Store::mark_point`](crate::store::Store::mark_point)). Files still open are the
    /// caller's (`cut_episodes_of`).
    ///
    /// `switch` runs before any other id is handed out: it switches the turn, so that every
    /// change given an id after the bound is labelled with the turn after it
    /// ([`label_now`](Self::label_now)).
    ///
    /// Queued deletes the store refuses (a full disk) stay queued, and the turn is switched
    /// anyway: they are recorded once the store takes writes, after the bound.
    pub fn at_point<T>(&self, switch: impl FnOnce(u64) -> Result<T>) -> Result<T> {
        let mut deferred = lock(&self.journal.deferred);
        if let Err(e) = self.write_deferred(&mut deferred) {
            tracing::error!("a turn's bound is taken before the deletes queued: {e}");
        }
        switch(self.history.store().mark_point())
    }

    /// Write every deferred change now, in one batch.
    pub fn drain(&self) -> Result<()> {
        let mut deferred = lock(&self.journal.deferred);
        self.write_deferred(&mut deferred)
    }

    /// Take back what an operation that failed had recorded (`owed`), in one batch. If the
    /// store refuses it (a full disk), it is owed: the change stays in the store until then,
    /// and is taken back before anything else is recorded, by the next record, `drain` or the
    /// pending thread's round once the store takes writes again. (If the daemon dies first,
    /// the next mount's scan finds the names as the failed operation left them, and records
    /// the difference as `external`.)
    pub(super) fn retract_or_owe(&self, owed: Owed) {
        let _deferred = lock(&self.journal.deferred);
        let mut all = lock(&self.journal.owed);
        all.push(owed);
        if let Err(e) = self.write_owed(&mut all) {
            tracing::error!(
                "cannot take back {} changes of operations that failed (taken back once the \
                 store takes writes; until then they show in the history): {e}",
                all.iter().map(|o| o.changes.len()).sum::<usize>()
            );
        }
    }

    /// Write the owed retractions, oldest first; those the store refuses stay owed.
    fn write_owed(&self, all: &mut Vec<Owed>) -> Result<()> {
        while let Some(owed) = all.first() {
            self.history.retract_with(
                &owed.changes,
                &Retraction {
                    manifest: &owed.manifest,
                    markers: &[],
                    swap_under: owed
                        .swap_under
                        .as_ref()
                        .map(|(a, b)| (a.as_slice(), b.as_slice())),
                },
            )?;
            all.remove(0);
        }
        Ok(())
    }

    /// Write the queued changes in one batch, after the owed retractions. If the store cannot
    /// take them (a full disk), they stay queued, first, to be written once it can.
    fn write_deferred(&self, queue: &mut Vec<Prepared>) -> Result<()> {
        self.write_owed(&mut lock(&self.journal.owed))?;
        if queue.is_empty() {
            return Ok(());
        }
        let mut items = std::mem::take(queue);
        for p in &mut items {
            p.change.time_ns = self.stamp(p.change.time_ns);
            self.label_now(&mut p.change);
        }
        let extras: Vec<Extra<'_>> = items
            .iter()
            .map(|p| Extra {
                finish_episode: None,
                manifest: &p.manifest,
                move_under: None,
                content: None,
                marker: None,
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
