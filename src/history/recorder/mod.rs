//! Recording: turning what the filesystem sees into changes, with the content they destroy
//! stored first.
//!
//! The filesystem calls in at the edges of a write episode and around every destructive
//! operation:
//!
//! - [`episodes`]: `begin_write` (open for writing, `O_TRUNC`, truncate) stores the file's
//!   current content before the kernel can touch it and notes an open episode in the store;
//!   `end_write` (last release) stores the new content and records one `modify`, or nothing.
//! - [`pending`]: a new file's create is held back for a moment, to see whether it is a
//!   temporary renamed over its target or deleted ([`saves`] has the save heuristics).
//! - [`ops`]: unlink, rename and chmod are recorded *before* they happen (their before content
//!   already stored) and retracted if they then fail; mkdir, rmdir, symlink and link after.
//! - [`owners`]: a session belongs to the uid that opened it.
//! - [`capture`] stores content; [`journal`] writes changes in id order and tells watchers;
//!   [`links`] keeps the names of hard-linked files; [`recovery`] runs at mount.
//!
//! Lock order: docs/design.md, "Lock order". In short: `ending` (shared), then the file
//! stripes ([`Recorder::hold`]), then `pending`, `episodes`, `known`; `links`,
//! `renamed_away`, `session_owners` and the journal's subscriber lists are leaves; the
//! journal's `deferred` is taken after the stripes and held across the store write that
//! records a change (that is what keeps ids in order).

mod capture;
mod episodes;
mod journal;
mod links;
mod ops;
mod owners;
mod pending;
mod quiet;
mod recovery;
mod saves;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, RwLock};

use crossbeam_channel::{Receiver, Sender};

pub use capture::{Source, key_of, kind_of, seen_of};
pub use episodes::{Named, Through};
pub use journal::{Next, Prepared, Subscription, after_id, id_taken};
pub use pending::{AsRecorded, PENDING_FOR};
pub use recovery::Recovery;

use super::change::{Change, ChangeKind};
use super::ignore::{IgnoreRules, Reason};
use super::turns::Turns;
use super::who::{Attributor, By, Who};
use super::{History, Result, time};

/// A backing file's identity: `(st_dev, st_ino)`.
pub type Key = (u64, u64);

const STRIPES: usize = 64;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many unrecorded paths are told apart for each reason (a table of at most about 5 MB
/// each): past it the count `status` shows stops growing rather than the memory.
const UNRECORDED_MAX: usize = 250_000;

pub struct Recorder {
    history: History,
    source: Arc<dyn Source>,
    who: Attributor,
    turns: Turns,
    ignore: RwLock<IgnoreRules>,
    /// The paths passed through unrecorded since the mount, by reason (hashes of their names,
    /// at most [`UNRECORDED_MAX`] each; a leaf lock).
    unrecorded: Mutex<HashMap<Reason, HashSet<u64>>>,
    /// Held shared by an operation recorded after it happened (a new object, a held-back
    /// create) from its check of the ignore rules to its record, and exclusively while a
    /// folder that became ignored has its burst taken back (`quiet`): nothing made in the
    /// folder in between slips through.
    quieting: RwLock<()>,
    pending: Mutex<HashMap<Vec<u8>, pending::Pending>>,
    episodes: Mutex<HashMap<Key, episodes::Episode>>,
    /// Per-file locks (striped by backing key): the end of an episode, and a rename or unlink
    /// of the file with its bookkeeping, never interleave.
    stripes: Vec<Mutex<()>>,
    known: Mutex<capture::Known>,
    journal: journal::Journal,
    renamed_away: Mutex<HashMap<Vec<u8>, saves::RenamedAway>>,
    links: Mutex<links::Links>,
    /// Held shared by every episode end in progress; [`Recorder::settle`] takes it exclusively
    /// to wait for them.
    ending: RwLock<()>,
    /// The paths of episodes whose end is being recorded now (taken out of `episodes`, not yet
    /// held back in `pending` or recorded); a leaf lock. A rename-away save waits for its new
    /// file's end ([`saves`]).
    ends_in_flight: Mutex<Vec<Vec<u8>>>,
    /// Edits whose last handle is released, with their ids set aside, whose content is read
    /// and recorded by the writer thread, gathered ([`episodes::Closed`]); taken under
    /// `ending` (shared) and the file's stripe.
    closed: Mutex<HashMap<Key, episodes::Closed>>,
    /// When the last edit ended (its RELEASE), to tell a burst of edits ([`episodes`]); a
    /// leaf lock.
    last_end: Mutex<Option<std::time::Instant>>,
    /// The folders made in the last minute, for a changed `.gitignore` to look through
    /// ([`quiet`]); a leaf lock.
    recent_mkdirs: Mutex<quiet::RecentMkdirs>,
    /// Wakes the writer thread: a token is sent when `deferred` gets something.
    wake: (Sender<()>, Receiver<()>),
    /// The uid each session seen so far belongs to ([`owners`]); a leaf lock.
    session_owners: Mutex<HashMap<String, u32>>,
    /// Paths whose change waits for the daemon to be able to look them up again (a folder
    /// above made unreadable to a daemon that is not root), each told of once in the log; a
    /// leaf lock.
    out_of_sight: Mutex<HashSet<Vec<u8>>>,
    /// For the tests of the panic policy only: the file name whose create panics while it
    /// is recorded (`REWIND_TEST_PANIC`).
    panic_on: Option<Vec<u8>>,
}

impl Recorder {
    pub fn new(
        history: History,
        source: Arc<dyn Source>,
        default_session: String,
    ) -> Result<Recorder> {
        let rules = match source.open_read(b".rewindignore") {
            Ok(f) => io::read_to_string(f).unwrap_or_default(),
            Err(_) => String::new(),
        };
        let recorder = Recorder {
            turns: Turns::load(history.clone())?,
            history,
            source,
            who: Attributor::new(default_session),
            ignore: RwLock::new(IgnoreRules::new(&rules)),
            unrecorded: Mutex::new(HashMap::new()),
            quieting: RwLock::new(()),
            pending: Mutex::new(HashMap::new()),
            episodes: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            known: Mutex::new(HashMap::new()),
            journal: journal::Journal::default(),
            renamed_away: Mutex::new(HashMap::new()),
            links: Mutex::new(links::Links::default()),
            ending: RwLock::new(()),
            ends_in_flight: Mutex::new(Vec::new()),
            closed: Mutex::new(HashMap::new()),
            last_end: Mutex::new(None),
            out_of_sight: Mutex::new(HashSet::new()),
            recent_mkdirs: Mutex::new(quiet::RecentMkdirs::new()),
            wake: crossbeam_channel::bounded(1),
            session_owners: Mutex::new(HashMap::new()),
            panic_on: std::env::var_os("REWIND_TEST_PANIC")
                .map(|n| n.into_encoded_bytes())
                .filter(|n| !n.is_empty()),
        };
        recorder.load_known()?;
        match recorder.history.latest_time() {
            Ok(t) => recorder.stamp_after(t),
            Err(e) => tracing::warn!("the time of the last change is not known: {e}"),
        }
        // A damaged change does not stop the mount: a `.gitignore` write then asks the history.
        if let Err(e) = recorder.load_recent_mkdirs() {
            tracing::warn!("the last minute's folders are not known: {e}");
        }
        Ok(recorder)
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn attributor(&self) -> &Attributor {
        &self.who
    }

    pub fn turns(&self) -> &Turns {
        &self.turns
    }

    /// Who process (or thread) `pid` is, in a session of its own user's, with that session's
    /// open turn and tool call.
    pub fn who(&self, by: By) -> Who {
        let mut who = self.who.who(by);
        if !who.restore {
            self.own_session(&mut who);
            (who.turn, who.tool) = self.turns.current(&who.session);
        }
        who
    }

    /// Refuse an operation that would have to be recorded after the fact when the store can no
    /// longer be written (it would otherwise happen unrecorded).
    pub fn ready_for(&self, path: &[u8], is_dir: bool) -> Result<()> {
        if self.records(path, is_dir) {
            self.check_writable()?;
        }
        Ok(())
    }

    /// Keep what this operation stores from gc until its record is written: every public
    /// entry point that may capture content opens one (`store/pins.rs`).
    fn pin_scope(&self) -> crate::store::PinScope {
        self.history.store().pin_scope()
    }

    /// The store takes writes, and its disk has room for what is about to be recorded.
    fn check_writable(&self) -> Result<()> {
        Ok(self.history.store().check_room()?)
    }

    /// Whether changes to `path` are recorded at all. One that is not is counted for
    /// `rewind status`. A path the history has as present (in the manifest) stays recorded
    /// when the rules come to ignore it (a `.gitignore` names its folder, it is moved into
    /// one): otherwise what it held then would be lost, or read from what it holds now.
    pub fn records(&self, path: &[u8], is_dir: bool) -> bool {
        let Some(reason) = self.why_ignored(path, is_dir) else {
            return true;
        };
        if self.kept(path, is_dir) {
            return true;
        }
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(path, &mut h);
        let mut all = lock(&self.unrecorded);
        let seen = all.entry(reason).or_default();
        if seen.len() < UNRECORDED_MAX {
            seen.insert(std::hash::Hasher::finish(&h));
        }
        false
    }

    /// Whether the history has `path` as present (in the manifest), or, for a folder,
    /// something below it. A store that cannot be read answers no: the rules decide then.
    pub fn kept(&self, path: &[u8], is_dir: bool) -> bool {
        self.history
            .in_manifest_at_or_under(path, is_dir)
            .unwrap_or_else(|e| {
                tracing::warn!("manifest of {}: {e}", String::from_utf8_lossy(path));
                false
            })
    }

    /// Whether the rules leave `path` unrecorded (whatever the history has: not counted).
    pub fn ignores(&self, path: &[u8], is_dir: bool) -> bool {
        self.why_ignored(path, is_dir).is_some()
    }

    fn why_ignored(&self, path: &[u8], is_dir: bool) -> Option<Reason> {
        self.ignore
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .ignored(&*self.source, path, is_dir)
    }

    /// How many paths were passed through unrecorded since the mount, by reason.
    pub fn unrecorded(&self) -> Vec<(Reason, usize)> {
        let all = lock(&self.unrecorded);
        Reason::ALL
            .into_iter()
            .filter_map(|r| all.get(&r).map(|s| (r, s.len())))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// A change of `kind` to `path` by `who`, to be filled in and recorded.
    fn change(&self, kind: ChangeKind, path: &[u8], who: &Who) -> Change {
        Change {
            id: 0,
            time_ns: time::now_ns(),
            kind: if who.restore {
                ChangeKind::Restore
            } else {
                kind
            },
            path: path.to_vec(),
            from: None,
            before: None,
            after: None,
            session: who.session.clone(),
            agent: who.agent.clone(),
            pid: who.pid,
            process: who.process.clone(),
            links: Vec::new(),
            groups: Vec::new(),
            turn: who.turn,
            tool: who.tool.clone(),
            uid: who.uid,
        }
    }

    fn stripe_of(key: Key) -> usize {
        (key.1 as usize ^ (key.0 as usize).rotate_left(17)) % STRIPES
    }

    /// Hold the locks of these files (in a fixed order, so two holders never deadlock) for an
    /// operation on them and its bookkeeping: a rename, an unlink, the end of an episode.
    pub fn hold(&self, keys: &[Key]) -> Vec<std::sync::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = keys.iter().map(|k| Self::stripe_of(*k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|i| lock(&self.stripes[i]))
            .collect()
    }

    /// Keep episodes from ending while a folder is renamed: an end that had already taken its
    /// episode when the episodes below the folder were moved would record the file under its
    /// old path after the rename. Taken before [`hold`](Recorder::hold), and kept until the
    /// rename is done.
    pub fn pause_endings(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        loop {
            // Closed edits are recorded first, under their paths before the rename; none is
            // closed while this is held (an end closes one holding `ending` shared).
            if let Err(e) = self.finish_closed() {
                tracing::warn!("cannot record a file's last edit before a rename: {e}");
            }
            let paused = self.ending.write().unwrap_or_else(|e| e.into_inner());
            if lock(&self.closed).is_empty() {
                return paused;
            }
        }
    }

    /// Record everything that has happened: wait for episode ends in progress (a large file's
    /// content may take a while to store), record held-back creates and queued deletes. After
    /// this, every operation whose syscall returned before it was called is in the history
    /// (a close's RELEASE is queued by the kernel before the close returns, and is waited for
    /// when its writer is gone: [`await_releases`](Recorder::await_releases)).
    pub fn settle(&self) -> Result<()> {
        self.await_releases();
        self.await_ends();
        self.finish_closed()?;
        self.flush_pending_older(true)?;
        self.await_ends();
        Ok(())
    }

    /// Wait for every end of an edit, closed edit and held-back create being recorded now: an
    /// end holds `ending` shared while it runs, and the writer and pending threads from before
    /// they take one out of its table until it is written. Taken both before the tables are
    /// looked at (an end in progress may put its edit there) and after (what a thread took
    /// out before they were looked at is recorded by that thread, not by the caller).
    fn await_ends(&self) {
        drop(self.ending.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// [`settle`](Recorder::settle) for reading the past: episodes being ended are recorded and
    /// queued deletes written, but held-back creates stay held back (a view reads the live tree
    /// through [`AsRecorded`], which hides them), so that looking at `.rewind/at/` while an
    /// editor saves does not split its save-by-rename.
    pub fn settle_for_views(&self) -> Result<()> {
        self.await_releases();
        self.await_ends();
        self.finish_closed()?;
        self.await_ends();
        self.drain()
    }

    /// [`settle`](Recorder::settle) for reading the history (`log`, `cat`, `status`, `diff`,
    /// the control directory's files): episode ends in progress are recorded and queued deletes
    /// written, and the held-back creates there are now are waited for, never cut short: each
    /// is decided as it would have been with nobody looking (recorded when its time is up,
    /// folded into a save-by-rename, or dropped with its file). Looking at the history never
    /// changes it: a `sed -i` beside a `rewind log` loop is still one `modify`. Costs at most
    /// [`PENDING_FOR`] and a tick of the pending thread, only when something is held back.
    /// Never fails: reading goes on when the store takes no writes (the history as recorded).
    pub fn settle_for_reading(&self) {
        self.await_releases();
        self.await_ends();
        if let Err(e) = self.finish_closed() {
            tracing::warn!("reading without the last edits of some files: {e}");
        }
        self.await_ends();
        if let Err(e) = self.drain() {
            tracing::warn!("reading without the queued deletes: {e}");
        }
        // Not those waiting for their path to be looked up again (`out_of_sight`): nothing
        // the pending thread does will record them meanwhile.
        let held: Vec<(Vec<u8>, std::time::Instant, Key)> = {
            let pending = lock(&self.pending);
            let hidden = lock(&self.out_of_sight);
            pending
                .iter()
                .filter(|(path, _)| !hidden.contains(*path))
                .map(|(path, p)| (path.clone(), p.since, p.key))
                .collect()
        };
        if held.is_empty() {
            return;
        }
        // The pending thread records each one at most half a `PENDING_FOR` after it is due;
        // past this something is wrong with it (its store write failing), and reading goes on
        // without it.
        let give_up = std::time::Instant::now() + PENDING_FOR * 4;
        loop {
            let waiting = {
                let pending = lock(&self.pending);
                held.iter()
                    .any(|(path, since, _)| pending.get(path).is_some_and(|p| p.since == *since))
            };
            if !waiting {
                // A create is taken out of the table before it is recorded, under its file's
                // lock (`flush_pending_where`): wait for that record to be written too, or a
                // read could fall between a rename-away save's retracted rename and its
                // modify, and see neither.
                for (_, _, key) in &held {
                    drop(self.hold(&[*key]));
                }
                return;
            }
            if std::time::Instant::now() >= give_up {
                tracing::warn!("held-back new files are not being recorded; reading without them");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// [`settle`](Recorder::settle) for an agent's hook: everything `session` did is recorded
    /// (its turn or tool call ends with it), but other sessions' new files stay held back, so
    /// that another agent's save in progress (a temporary file written, not yet renamed over
    /// its target) is still seen as one `modify` of the target.
    pub fn settle_session(&self, session: &str) -> Result<()> {
        self.await_releases();
        self.await_ends();
        self.finish_closed()?;
        self.flush_pending_of(session)?;
        self.await_ends();
        Ok(())
    }

    /// Begin or end `session`'s turn at once, with `switch` given its bound: what the session
    /// has open for writing is recorded as far as it is written (a change of the turn that
    /// opened it), the bound is taken and the turn switched at once
    /// ([`at_point`](Self::at_point)), and the files still open go on as changes of the turn
    /// the session is in then. What the session did before is recorded after, by the caller's
    /// [`settle_session`](Self::settle_session).
    pub fn bound_turn<T>(&self, session: &str, switch: impl FnOnce(u64) -> Result<T>) -> Result<T> {
        // A cut the store refuses (a full disk) must not keep the turn from ending or
        // beginning: the file's edit goes on, as the next turn's.
        if let Err(e) = self.cut_episodes_of(session) {
            tracing::error!(
                "cannot record what {session}'s open files hold at its turn's bound: {e}"
            );
        }
        let out = self.at_point(switch)?;
        self.relabel_episodes_of(session);
        Ok(out)
    }

    /// Make everything recorded so far durable (for `fsync` in the workspace, and unmount).
    ///
    /// Tried once more if the store refused it and takes writes again at once: RocksDB can
    /// report a flush that ran out of space while the disk was full after recording resumed,
    /// and then refuses every write until it is reopened. `rewind sync` failed with `No space
    /// left on device` on a disk with room again; the recovery thread would have reopened
    /// the store within a second.
    pub fn sync(&self) -> Result<()> {
        let store = self.history.store();
        match self.sync_once() {
            Err(e) if !store.writable() && store.recover().is_ok() && store.writable() => {
                tracing::info!("sync again, now that the store takes writes again: {e}");
                self.sync_once()
            }
            synced => synced,
        }
    }

    fn sync_once(&self) -> Result<()> {
        // What still waits (a create whose path cannot be looked up now) has its marker from
        // when it began to wait (`mark_waiting`): the next mount records it in its place.
        // A settle, with its waits: without them, an unmount would end the daemon while the
        // writer thread still records an edit it took, and the next mount's scan would record
        // the change as `external`.
        self.settle()?;
        self.drain()?;
        Ok(self.history.store().sync()?)
    }
}
