//! Write episodes: from the first open for writing of a file to its last release, recorded as
//! one change from the content before to the content after.
//!
//! Episodes are keyed by backing inode, so every handle of a file (and every name of a
//! hard-linked one) shares one. A chmod, unlink or rename of a file whose episode is still open
//! (RELEASE arrives after the writer's close) first *cuts* the episode: what it wrote so far is
//! recorded, and it goes on from there, so history stays a chain.

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::capture::{
    Found, Sig, fstat, hidden, key_of, kind_of, not_there, out_of_sight, seen_of,
};
use super::pending::Pending;
use super::{Key, Recorder, lock};
use crate::history::Result;
use crate::history::change::{ChangeKind, FileKind, FileState, Fsynced, OpenEpisode, Reserved};
use crate::history::db::Extra;
use crate::history::rollback::Writer;
use crate::history::time::now_ns;
use crate::history::who::{By, Who};

pub(super) struct Episode {
    pub(super) path: Vec<u8>,
    pub(super) before: Option<FileState>,
    pub(super) opens: u32,
    pub(super) who: Who,
    /// The file was created in this episode.
    pub(super) created: bool,
    /// The file lost its last name while open: nothing more to record.
    pub(super) orphaned: bool,
    /// The threads that opened it in this episode (at most [`MAX_OPENERS`]; more are not
    /// listed, and the episode is then never taken as abandoned).
    pub(super) openers: Vec<u32>,
    /// Reading the history already waited for this abandoned episode's RELEASE in vain (a
    /// child that inherited the handle holds it): it is not waited for again.
    pub(super) awaited: bool,
    /// A new file fsynced before its create was recorded: its marker is in the store, with
    /// the file as the last `fsync` left it ([`Recorder::sync_file`]).
    pub(super) fsynced: Option<Fsynced>,
    /// The file's stat signature when this episode of a file that was there began (`None`
    /// for a new file, or once cut): the same at its end, nothing was written.
    pub(super) begun: Option<Sig>,
    /// A handle to read the file from, kept from its last writer's when the daemon cannot
    /// open it by its name (a new file made unreadable: `open(O_CREAT|O_WRONLY, 0)`).
    pub(super) reader: Option<Arc<File>>,
    /// An edit of a file that was there whose marker is not written yet (see [`Unmarked`]).
    /// While it is `Some` the store holds no marker of this episode; whatever writes one (a
    /// cut, a move to another name, which the history does not name its content before under)
    /// sets it to `None`.
    pub(super) unmarked: Option<Unmarked>,
    /// A rollback began it (a file it rewrites in place or makes) and no one else has joined
    /// it: a write to the file waits for its end ([`Recorder::restoring`]). Not one the
    /// rollback joined or took over (a process had the file open, or its writer was gone with
    /// a child still holding the handle), which could outlast the rollback.
    pub(super) restoring: bool,
    /// Another writer joined and the edit became theirs ([`Recorder::hand_over`]): when their
    /// handles are released, what they wrote is cut as theirs and the edit goes back to
    /// the writers still holding the file.
    pub(super) hand_back: Option<HandBack>,
}

/// The writer an edit was handed over to, and the one it goes back to when that writer's
/// handles are released (see [`Recorder::hand_over`]).
pub(super) struct HandBack {
    /// The thread that joined, as its opens are counted (`By::pid`).
    pid: u32,
    /// Its handles of the file still open.
    opens: u32,
    /// Who had the edit before it joined.
    to: Who,
}

/// The marker of an edit of a file whose content the history names as its last version (the
/// capture cache read it at the end of a recorded change, and nothing wrote the file since)
/// is written only once the edit has been open for [`MARK_AFTER`] (by the pending thread,
/// [`Recorder::mark_open_episodes`]), or at an `fsync` of the file. Most edits end within a
/// millisecond of their open, and their change, written at the end, is all the store needs:
/// the marker was a RocksDB write on the way of every open for writing (a quarter of what
/// recording added to a small edit, on these VMs). A crash before it leaves the edit to the
/// next mount's scan, which records it as `external` from that last version to what the file
/// holds, as it does a new file's create held back: only who made it is lost. Any other edit
/// (the first since the mount, a file written outside the mount) has its marker at once: the
/// content before is named nowhere else.
pub(super) struct Unmarked {
    since: Instant,
    /// The content before, kept from gc (which counts what the markers name) until the
    /// marker or the change does.
    _before: crate::store::Pins,
}

/// How long an edit of a file that was there stays open before its marker is written.
pub const MARK_AFTER: Duration = Duration::from_millis(100);

/// The largest open file a turn's bound cuts ([`Recorder::cut_episodes_of`]): reading and
/// storing it must fit well within a hook's 800 ms (32 MiB took under that in a debug build
/// on 2 cores, 64 MiB did not).
pub const CUT_AT_BOUND_MAX: u64 = 16 << 20;

/// An edit of a file that was there whose last handle is released: its id is set aside (its
/// place in the history is the moment of the close), and its content is read and recorded by
/// the writer thread, gathered with others ([`Recorder::finish_closed`]), rather than by the
/// RELEASE. On these VMs, reading, hashing and storing a small file's content on the RELEASE's
/// thread, while the writer goes on with its next edit on the other core, made every round
/// trip of that edit to the daemon wait for a CPU (W2 back to back, 1.9-2.0x its time with
/// recording off); gathered, the work runs in a few bursts instead of beside every edit.
/// Anything that would change, move or look at the file first records it: a new open for
/// writing of the file ([`Recorder::begin_write`]), every other operation that may record
/// (`Core::in_order` in `fs`), a rename of a folder ([`Recorder::pause_endings`]), and every
/// settle (reading the history, a view, a hook, `fsync`, unmount). A crash before it is
/// recorded leaves the edit to its marker, or to the next mount's scan as for an edit without
/// one (see [`Unmarked`]).
pub(super) struct Closed {
    ep: Episode,
    id: u64,
    time_ns: u64,
    /// The last handle's backing file, to read the content through.
    file: Option<File>,
}

/// The handle an episode's end may read the new content through: lent by its caller, or given
/// (the last handle's own fd, at its RELEASE), which a closed edit then keeps without a `dup`.
pub enum Through<'a> {
    Lent(&'a File),
    Given(File),
}

impl Through<'_> {
    fn file(&self) -> &File {
        match self {
            Through::Lent(f) => f,
            Through::Given(f) => f,
        }
    }

    /// The handle to keep with a closed edit (a lent one is duplicated).
    fn keep(self) -> Option<File> {
        match self {
            Through::Lent(f) => f.try_clone().ok(),
            Through::Given(f) => Some(f),
        }
    }
}

/// How an episode of a file that was there begins: the file's signature, and whether its
/// marker is written at once (see [`Recorder::begin_restore`]).
#[derive(Clone, Copy)]
struct Begun {
    sig: Sig,
    mark_now: bool,
}

/// Ends of edits closer together than this are closed, for the writer thread to record
/// gathered (see [`Closed`]); one on its own is recorded by its RELEASE. W2's small edit with
/// 1 ms between edits gains nothing from the writer thread (two more wake-ups for each edit),
/// back to back it takes 1.05x its time with recording off instead of 1.5x.
const BURST: Duration = Duration::from_millis(1);

/// Tests only: `REWIND_TEST_BURST=1` takes every end of an edit for one in a burst: each is
/// closed, for the writer thread.
static TEST_BURST: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_BURST");

/// How many closed edits wait for the writer thread before a RELEASE records its own.
const CLOSED_AT_MOST: usize = 256;

/// What the end of an episode leaves to do.
enum Finished {
    /// Nothing: recorded, or nothing to record.
    Nothing,
    /// A new file's create, held back.
    Held(Box<Pending>),
    /// An edit of a file that was there, for the writer thread (see [`Closed`]).
    Closed { id: u64, time_ns: u64 },
}

/// How many openers an episode lists before it stops listing them.
const MAX_OPENERS: usize = 16;

/// For the tests: how long the end of an episode pauses between the table of episodes and the
/// record (`REWIND_TEST_SLOW_END`).
static SLOW_END: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_END");

/// How long reading the history waits for the RELEASE of a file whose writers are gone.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// How long a write waits for a rollback writing its file (see [`Recorder::restoring`])
/// before it goes on beside it: far longer than a rollback takes to write any one file, short
/// enough that a rollback stuck on a file (its store's disk hung) does not hang every writer.
const RESTORE_WAIT: Duration = Duration::from_secs(120);

impl Episode {
    /// Every thread that opened the file in this episode is gone: its handles are only waiting
    /// for the kernel's RELEASE, which comes after close() has returned, at a time of the
    /// kernel's choosing. A new writer then starts a change of its own instead of joining
    /// theirs, so that `printf 1 > f; printf 2 >> f` records two changes whatever the
    /// scheduler does. (A child that inherited a handle may still write through it; what it
    /// writes is then part of the new change, which is still a true chain.)
    fn abandoned(&self) -> bool {
        self.opens > 0
            && self.openers.len() < MAX_OPENERS
            && self.openers.iter().all(|&pid| !crate::procfs::running(pid))
    }

    fn opened_by(&mut self, pid: u32) {
        self.opens += 1;
        if let Some(back) = self.hand_back.as_mut().filter(|b| b.pid == pid) {
            back.opens += 1;
        }
        self.restoring = false;
        self.awaited = false;
        if self.openers.len() < MAX_OPENERS && !self.openers.contains(&pid) {
            self.openers.push(pid);
        }
    }
}

/// The marker of a file being written by `who` from `before` (see
/// [`Recorder::put_marker_with`]).
pub(super) fn marker(
    before: Option<FileState>,
    who: &Who,
    fsynced: Option<Fsynced>,
    reserved: Option<Reserved>,
) -> OpenEpisode {
    OpenEpisode {
        before,
        time_ns: now_ns(),
        session: who.session.clone(),
        agent: who.agent.clone(),
        pid: who.pid,
        process: who.process.clone(),
        turn: who.turn,
        tool: who.tool.clone(),
        uid: who.uid,
        fsynced,
        reserved,
    }
}

/// How many times [`Recorder::hold_named`] looks again at a name whose file changed before it
/// was held.
const NAMED_TRIES: u32 = 8;

/// Tests only: `REWIND_TEST_SLOW_NAMED=MS` makes [`Recorder::hold_at`] wait that long before it
/// holds the file (the inode's name was looked up before).
static SLOW_NAMED: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_NAMED");

/// Tests only: `REWIND_TEST_SLOW_LOOKED=MS` makes an open with `O_CREAT` of a file that is
/// there wait that long between taking its `stat` and holding the file (as renames and
/// unlinks do, `fs/namespace.rs`).
static SLOW_LOOKED: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_LOOKED");

/// Tests only: `REWIND_TEST_SLOW_CUT=MS` makes every cut of an open episode wait that long
/// once it has recorded what the episode wrote, before the operation that cut it goes on.
static SLOW_CUT: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_CUT");

/// Tests only: `REWIND_TEST_SLOW_CUT_RECORDED=MS` makes a cut that found the file changed wait
/// that long right after its change is in the store, before anything else (so that a test can
/// SIGKILL the daemon there).
static SLOW_CUT_RECORDED: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_CUT_RECORDED");

/// The file a name holds, held there (see [`Recorder::hold_at`]).
pub struct Named<'a> {
    st: libc::stat,
    _held: Vec<std::sync::MutexGuard<'a, ()>>,
}

impl Named<'_> {
    /// The file's `lstat`, taken with it held.
    pub fn stat(&self) -> &libc::stat {
        &self.st
    }
}

impl Recorder {
    /// A regular file is about to be opened for writing (or truncated): store its content.
    /// Returns the key to hand back to [`end_write`](Recorder::end_write), if recording.
    pub fn begin_write(&self, path: &[u8], st: &libc::stat, by: By) -> Result<Option<Key>> {
        self.begin_write_marked(path, st, by, false)
    }

    /// [`begin_write`](Recorder::begin_write) for a rollback about to rewrite a file in place:
    /// its marker is written at once (not after [`MARK_AFTER`]), so that a crash in the middle
    /// of a rollback leaves the file it was rewriting to the next mount as the rollback's
    /// restore, not as an `external` change.
    pub fn begin_restore(&self, path: &[u8], st: &libc::stat, by: By) -> Result<Option<Key>> {
        self.begin_write_marked(path, st, by, true)
    }

    fn begin_write_marked(
        &self,
        path: &[u8],
        st: &libc::stat,
        by: By,
        mark_now: bool,
    ) -> Result<Option<Key>> {
        let _pins = self.pin_scope();
        if kind_of(st) != FileKind::File || !self.records(path, false) {
            return Ok(None);
        }
        // A write whose end cannot be recorded must not begin (even when nothing needs storing
        // now).
        self.check_writable()?;
        let key = key_of(st);
        // The file's last edit, closed and not yet recorded, is recorded first: this one
        // begins from its content.
        self.finish_closed_of(key)?;
        SLOW_LOOKED.pause();
        let mut waited_out = false;
        loop {
            // Held until the episode is open: an episode of this file that is ending is
            // recorded first (a new file's held-back create included, flushed below), and none
            // can end between the check for one and the capture of the content before. Dropped
            // at once, an end of the last episode could slip in after the check, and this
            // write would be recorded as a modify before the file's create.
            let held = self.hold(&[key]);
            // A rollback writing the file: this write comes after it (see `restoring`).
            if !waited_out && self.restoring(key, by.pid) {
                drop(held);
                waited_out = !self.await_restored(key, by.pid);
                continue;
            }
            // The caller's `st` is from before the file was held: a chmod by name may have
            // been recorded in between, and the content before must have the mode it left (a
            // rollback's rewrite began from 644 after a chmod to 600 was recorded). Another
            // file at the name now (a save) is the caller's to look at again, as one the
            // capture finds gone.
            let st = match self.source.lstat(path) {
                Ok(now) if key_of(&now) == key => now,
                Ok(_) => return Err(hidden(path, std::io::ErrorKind::NotFound.into())),
                Err(e) => return Err(hidden(path, e)),
            };
            return self.begin_write_held(path, &st, by, mark_now, None);
        }
    }

    /// Whether a rollback is writing the file `key` now: an episode it began (of a file it
    /// rewrites in place, or makes), which `pid` is not part of. A write that joined it (an
    /// open for writing, a truncate) landed in the middle of the rollback's: an append was
    /// written over by the rest of the content, a truncate tore the file, and a write made
    /// after the content was folded into the restore. Such a write waits for the end of the
    /// rollback's episode ([`await_restored`](Self::await_restored)) and comes after it, as
    /// it would after a program's rewrite that had the file to itself. Asked with the file
    /// held: a rollback begins its episode with the file held too. One the rollback has left
    /// (its end kept for the store to take, `keep_unended`) is written by no one, and one
    /// another opener joined is not the rollback's alone (`Episode::restoring`).
    pub fn restoring(&self, key: Key, pid: u32) -> bool {
        lock(&self.episodes).get(&key).is_some_and(|ep| {
            ep.restoring && ep.opens > 0 && !ep.orphaned && !ep.openers.contains(&pid)
        })
    }

    /// Wait until the rollback writing the file `key` has ended its episode (see
    /// [`restoring`](Self::restoring)), the file not held. False if it was still going after
    /// [`RESTORE_WAIT`]: the write then goes on beside it rather than hang.
    pub fn await_restored(&self, key: Key, pid: u32) -> bool {
        let give_up = Instant::now() + RESTORE_WAIT;
        while self.restoring(key, pid) {
            if Instant::now() >= give_up {
                tracing::warn!(
                    "a rollback has been writing a file for {} s; a write to it goes on beside it",
                    RESTORE_WAIT.as_secs()
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Hold the file `key` at its name `path`, so that no rename, link or unlink through the
    /// mount moves it away or puts another file at the name until the guard is dropped: `None`
    /// if `path` does not name it (one `lstat`, with the file held). An open that writes the
    /// file begins its episode ([`begin_write_named`](Self::begin_write_named)) and opens it
    /// meanwhile, so the episode is of the file it opened, at the name it has.
    ///
    /// FUSE names a file by its inode, which the daemon turns into a path with its table of
    /// names; a rename of files updates the table once it is done. An open racing an exchange
    /// of `a` and `b` may so look for `a`'s inode at `a` just after `b` took that name. Begun
    /// there, the episode was `b`'s file held as `a`'s, or `a`'s under a name it had lost (its
    /// end then found another file there and recorded nothing), and the process wrote into
    /// `b`'s file, which is wrong on a plain disk too when it opened `a` by another name (a
    /// hard link). The caller looks the inode's name up again instead (`Core::begin_and_open`).
    pub fn hold_at(&self, path: &[u8], key: Key) -> std::io::Result<Option<Named<'_>>> {
        SLOW_NAMED.pause();
        let held = self.hold(&[key]);
        match self.source.lstat(path) {
            Ok(st) if key_of(&st) == key => Ok(Some(Named { st, _held: held })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Hold the file the name `path` holds now (see [`hold_at`](Self::hold_at)), whichever it
    /// is: for a file whose inode is not known, or one moved from outside the mount.
    pub fn hold_named(&self, path: &[u8]) -> std::io::Result<Named<'_>> {
        self.hold_stat(|| self.source.lstat(path))
    }

    /// Hold the file `stat` finds (by its name, or through an fd), with its `stat` taken again
    /// once held. A `stat` from before the hold may miss a change recorded in between: a chmod
    /// recorded from it, racing another chmod (a rollback's, another process's), said the file
    /// went from the mode it had before that one, and broke its chain.
    pub fn hold_stat<E>(&self, stat: impl Fn() -> Result<libc::stat, E>) -> Result<Named<'_>, E> {
        let mut tries = 0;
        loop {
            let key = key_of(&stat()?);
            let held = self.hold(&[key]);
            let st = stat()?;
            // Replaced over and over from outside the mount: held as it is now, with what
            // the table of episodes says of it.
            if key_of(&st) == key || tries == NAMED_TRIES {
                return Ok(Named { st, _held: held });
            }
            tries += 1;
        }
    }

    /// [`begin_write`](Self::begin_write) of the file held at its name, `named` (`st`: its
    /// `lstat` or `fstat`). `through`: the file opened already (open for reading), to read
    /// its content before through, so that a file that took its name meanwhile from outside
    /// the mount is not read for it.
    pub fn begin_write_named(
        &self,
        named: &Named<'_>,
        path: &[u8],
        st: &libc::stat,
        by: By,
        through: Option<&File>,
    ) -> Result<Option<Key>> {
        let _pins = self.pin_scope();
        // Only the file held may begin an episode here: its stripe is the one held. (Another,
        // put at the name from outside the mount, is its caller's to look at again.)
        let (st, through) = if key_of(st) == key_of(&named.st) {
            (st, through)
        } else {
            (&named.st, None)
        };
        if kind_of(st) != FileKind::File || !self.records(path, false) {
            return Ok(None);
        }
        self.check_writable()?;
        self.begin_write_held(path, st, by, false, through)
    }

    /// The rest of [`begin_write_marked`](Self::begin_write_marked), with the file held.
    fn begin_write_held(
        &self,
        path: &[u8],
        st: &libc::stat,
        by: By,
        mark_now: bool,
        through: Option<&File>,
    ) -> Result<Option<Key>> {
        let key = key_of(st);
        // One closed meanwhile (by a RELEASE of another handle of the file).
        self.finish_closed_held(key)?;
        self.flush_pending(path)?;
        // A thread that opened the episode and opens the file again is running: no need to ask
        // /proc about the others (a read of `/proc/PID/stat` each, the costliest part of a
        // small edit's second open).
        let joined = lock(&self.episodes)
            .get(&key)
            .filter(|ep| !ep.openers.contains(&by.pid))
            .map(|ep| {
                (
                    ep.abandoned(),
                    (ep.who.session.clone(), ep.who.agent.clone()),
                )
            });
        if let Some((abandoned, (session, agent))) = joined {
            let who = self.who(by);
            if abandoned {
                // What the gone writers wrote is their change; this writer's begins here.
                self.cut_episode(key, path)?;
                if let Some(ep) = lock(&self.episodes).get_mut(&key) {
                    ep.who = who;
                    ep.openers.clear();
                }
            } else if !who.restore && (who.session != session || who.agent != agent) {
                self.hand_over(key, path, st, who, by.pid);
            }
        }
        if let Some(ep) = lock(&self.episodes).get_mut(&key) {
            if mark_now {
                self.mark(ep)?;
            }
            ep.opened_by(by.pid);
            return Ok(Some(key));
        }
        let before = self.capture_cached(path, st, through)?;
        let who = self.who(by);
        // Content the history does not name as the file's last version (read now, or by an
        // open before) has only the marker to say what the file held before the edit.
        let begun = Begun {
            sig: Sig::of(st),
            mark_now: mark_now || !before.recorded,
        };
        let before = before.state;
        self.open_episode(key, path, Some(before), who, Some(begun), by.pid)?;
        Ok(Some(key))
    }

    /// A regular file was just created (and opened).
    pub fn begin_create(&self, path: &[u8], st: &libc::stat, by: By) -> Result<Option<Key>> {
        let _pins = self.pin_scope();
        if !self.records(path, false) {
            return Ok(None);
        }
        // No check that the store takes writes: the file is made already (its caller asked
        // `ready_for` before), a create writes nothing until its end, and a refusal here would
        // leave the file in the workspace with nothing to record it.
        if let Some(name) = &self.panic_on
            && path.rsplit(|b| *b == b'/').next() == Some(name.as_slice())
        {
            let _held = lock(&self.episodes);
            panic!(
                "REWIND_TEST_PANIC: provoked while recording the create of {}",
                super::super::show_path(path)
            );
        }
        let who = self.who(by);
        self.open_episode(key_of(st), path, None, who, None, by.pid)?;
        Ok(Some(key_of(st)))
    }

    /// Open the episode of `key`: of a new file if `begun` is `None`, else of a file that was
    /// there, with its signature then.
    fn open_episode(
        &self,
        key: Key,
        path: &[u8],
        before: Option<FileState>,
        who: Who,
        begun: Option<Begun>,
        pid: u32,
    ) -> Result<()> {
        // A file that was there has a before state and a signature; a new file neither.
        let created = begun.is_none();
        // A new file needs no marker: if the daemon dies before its end, the scan at the next
        // mount finds it anyway. A marker keeps the before state of a file being changed and
        // who changes it, once the edit lasts (see `Unmarked`).
        let mark_now = begun.is_some_and(|b| b.mark_now);
        let unmarked = (!created && !mark_now).then(|| self.unmarked(&before));
        let begun = begun.map(|b| b.sig);
        let mut episodes = lock(&self.episodes);
        let ep = match episodes.entry(key) {
            // Another open of the same file may have won the race while we captured: join it.
            std::collections::hash_map::Entry::Occupied(e) => {
                let ep = e.into_mut();
                if mark_now {
                    self.mark(ep)?;
                }
                ep.opened_by(pid);
                return Ok(());
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Episode {
                restoring: who.restore,
                path: path.to_vec(),
                before,
                opens: 1,
                who,
                created,
                orphaned: false,
                openers: vec![pid],
                awaited: false,
                fsynced: None,
                begun,
                reader: None,
                unmarked,
                hand_back: None,
            }),
        };
        // Written with the episode in the table, under its lock, as every marker of an open
        // episode is: an end that drops the marker at this path finds it there and leaves it
        // (`drop_marker_of`).
        if mark_now && let Err(e) = self.put_marker(&ep.path, ep.before.clone(), &ep.who, None) {
            // The open is refused: no RELEASE will end it.
            episodes.remove(&key);
            return Err(e);
        }
        Ok(())
    }

    /// The state of an episode of a file that was there whose marker is not written yet, from
    /// `before` on.
    pub(super) fn unmarked(&self, before: &Option<FileState>) -> Unmarked {
        Unmarked {
            since: Instant::now(),
            _before: self
                .history
                .store()
                .pin(before.as_ref().and_then(|b| b.hash)),
        }
    }

    /// Times are about to be set on the file `st`: an edit of it without its marker gets it
    /// now. After a crash the scan tells a changed file by its size and mtime, and a tool that
    /// puts the mtime back (`touch -r`, `cp -p`, `rsync -t` into the file) would leave only
    /// the marker to say it changed.
    pub fn before_times(&self, st: &libc::stat) -> Result<()> {
        let mut episodes = lock(&self.episodes);
        match episodes.get_mut(&key_of(st)) {
            Some(ep) if !ep.orphaned => self.mark(ep),
            _ => Ok(()),
        }
    }

    /// The content before the edit of the file `key` that is open, or closed and not yet
    /// recorded (see [`Closed`]): what the history has of the file until the edit is recorded.
    /// `None` for a new file's first episode, or when its content before is not known.
    pub fn unrecorded_edit_of(&self, key: Key) -> Option<FileState> {
        if let Some(c) = lock(&self.closed).get(&key) {
            return c.ep.before.clone();
        }
        match lock(&self.episodes).get(&key) {
            Some(ep) if !ep.orphaned && !ep.created => ep.before.clone(),
            _ => None,
        }
    }

    /// Whether an edit is open without its marker (see [`Unmarked`]).
    pub fn any_unmarked(&self) -> bool {
        lock(&self.episodes)
            .values()
            .any(|ep| ep.unmarked.is_some())
    }

    /// Drop the marker at `path` of the episode of `key`, which lost that name (orphaned, or
    /// the name is another file's now): unless the marker there is now another file's, an
    /// edit open on the file that took the name or its held-back create.
    fn drop_marker_of(&self, key: Key, path: &[u8]) -> Result<()> {
        if lock(&self.pending).get(path).is_some_and(|p| p.key != key) {
            return Ok(());
        }
        // Under the table's lock, as markers of open episodes are written.
        let episodes = lock(&self.episodes);
        if episodes
            .iter()
            .any(|(k, ep)| *k != key && !ep.orphaned && ep.path == path)
        {
            return Ok(());
        }
        self.history.drop_open_episode(path)
    }

    /// Write the marker of every edit open for [`MARK_AFTER`] or longer that has none yet (by
    /// the pending thread).
    pub fn mark_open_episodes(&self) -> Result<()> {
        let due: Vec<(Key, Vec<u8>)> = lock(&self.episodes)
            .iter()
            .filter(|(_, ep)| {
                !ep.orphaned
                    && ep
                        .unmarked
                        .as_ref()
                        .is_some_and(|u| u.since.elapsed() >= MARK_AFTER)
            })
            .map(|(key, ep)| (*key, ep.path.clone()))
            .collect();
        for (key, path) in due {
            // One moved under an ignored folder meanwhile gets none (its end records nothing).
            if !self.records(&path, false) {
                continue;
            }
            // Under the table's lock: an end, cut or rename of the episode writes or removes
            // its marker after this one, never before.
            let mut episodes = lock(&self.episodes);
            if let Some(ep) = episodes.get_mut(&key)
                && ep.path == path
                && !ep.orphaned
            {
                self.mark(ep)?;
            }
        }
        Ok(())
    }

    /// Write the marker of the episode `ep` if it has none yet (see [`Unmarked`]). Called with
    /// the table of episodes locked.
    pub(super) fn mark(&self, ep: &mut Episode) -> Result<()> {
        if ep.unmarked.is_some() {
            self.put_marker(&ep.path, ep.before.clone(), &ep.who, ep.fsynced)?;
            ep.unmarked = None;
        }
        Ok(())
    }

    /// Note in the store that `path` is being written by `who` from `before` (`None`: a new
    /// file), so that a crash leaves its change to be recorded at the next mount; `fsynced`
    /// for a new file an `fsync` made durable (see [`Recorder::sync_file`]).
    pub(super) fn put_marker(
        &self,
        path: &[u8],
        before: Option<FileState>,
        who: &Who,
        fsynced: Option<Fsynced>,
    ) -> Result<()> {
        self.put_marker_with(path, before, who, fsynced, None)
    }

    /// [`put_marker`](Recorder::put_marker), for a held-back create with the id set aside for
    /// it and its time (`reserved`), which the next mount records it with if a crash comes
    /// first (`recovery.rs`).
    pub(super) fn put_marker_with(
        &self,
        path: &[u8],
        before: Option<FileState>,
        who: &Who,
        fsynced: Option<Fsynced>,
        reserved: Option<Reserved>,
    ) -> Result<()> {
        let marker = marker(before, who, fsynced, reserved);
        self.history.put_open_episode(path, &marker)
    }

    /// Wait a moment for the RELEASE of every episode whose writers are all gone. The kernel
    /// queues it before the writer's close() returns, but another FUSE thread may take it after
    /// a request that came later (`rewind log` right after the editor exits), and the history
    /// read then would lack the change the writer has finished. An episode still open after
    /// [`RELEASE_WAIT`] (a child inherited the handle and keeps it) is not waited for again.
    pub(super) fn await_releases(&self) {
        let give_up = Instant::now() + RELEASE_WAIT;
        loop {
            let waiting: Vec<Key> = lock(&self.episodes)
                .iter()
                .filter(|(_, ep)| !ep.awaited && !ep.orphaned && ep.abandoned())
                .map(|(key, _)| *key)
                .collect();
            if waiting.is_empty() {
                return;
            }
            if Instant::now() >= give_up {
                let mut episodes = lock(&self.episodes);
                for key in waiting {
                    if let Some(ep) = episodes.get_mut(&key) {
                        ep.awaited = true;
                    }
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A handle that began an episode was released. At the last one, record what changed,
    /// read through `file` if given (the released handle's fd, open for reading: no need to
    /// open the file again by its path), else from the path. `reader`, given when the daemon
    /// cannot open a new file by its name, is kept with the episode: its create's content is
    /// read from it when the create is recorded, after the hold-back. `opener`: the thread
    /// that opened the handle, if known (see [`hand_back`](Self::hand_back)).
    pub fn end_write(
        &self,
        key: Key,
        file: Option<Through>,
        reader: Option<File>,
        opener: Option<u32>,
    ) -> Result<()> {
        let _pins = self.pin_scope();
        let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
        let _held = self.hold(&[key]);
        let ep = {
            let mut episodes = lock(&self.episodes);
            let Some(ep) = episodes.get_mut(&key) else {
                return Ok(());
            };
            if let Some(reader) = reader {
                ep.reader = Some(Arc::new(reader));
            }
            ep.opens -= 1;
            if ep.opens > 0 {
                drop(episodes);
                if let Some(pid) = opener {
                    self.hand_back(key, pid);
                }
                return Ok(());
            }
            episodes.remove(&key).expect("present above")
        };
        self.end_in_flight(key, ep, file)
    }

    /// A handle to read the file of the open episode `key` through, kept with it (by a daemon
    /// that is not root, which may not open the file by its name once its owner makes it
    /// unreadable): a cut, for a rename, link or unlink while it is open, reads it from there.
    pub fn keep_reader(&self, key: Key, reader: File) {
        if let Some(ep) = lock(&self.episodes).get_mut(&key)
            && !ep.created
            && ep.reader.is_none()
        {
            ep.reader = Some(Arc::new(reader));
        }
    }

    /// A handle of the episode of `key` is released while others still hold it: one opener
    /// less, nothing ends. False (and nothing done) if it is the last handle, if there is no
    /// such episode, or if `opener` (the thread that opened the handle) is the writer the edit
    /// was handed over to: then [`end_write`](Self::end_write) it.
    pub fn leave_if_shared(&self, key: Key, opener: u32) -> bool {
        // As `end_write` counts the handles.
        let _held = self.hold(&[key]);
        match lock(&self.episodes).get_mut(&key) {
            // The writer the edit was handed to: its release records its part
            // (`hand_back`), in its turn.
            Some(ep) if ep.hand_back.as_ref().is_some_and(|b| b.pid == opener) => false,
            Some(ep) if ep.opens > 1 => {
                ep.opens -= 1;
                true
            }
            _ => false,
        }
    }

    /// [`end_or_keep`](Self::end_or_keep), with the episode's path listed in `ends_in_flight`
    /// meanwhile: between the table of episodes and the table of held-back creates, a new
    /// file is in neither, and a rename-away save must not take it for absent.
    fn end_in_flight(&self, key: Key, ep: Episode, file: Option<Through>) -> Result<()> {
        let path = ep.path.clone();
        lock(&self.ends_in_flight).push(path.clone());
        let result = self.end_or_keep(key, ep, file);
        let mut in_flight = lock(&self.ends_in_flight);
        if let Some(i) = in_flight.iter().position(|p| *p == path) {
            in_flight.swap_remove(i);
        }
        result
    }

    /// Record the end of an episode with no handle left. If the store cannot take it (a full
    /// disk), the episode is kept, with no handle open, and [`retry_ends`](Self::retry_ends)
    /// records it once the store takes writes again; an open for writing meanwhile joins it.
    /// Called with the file's stripe held.
    fn end_or_keep(&self, key: Key, ep: Episode, file: Option<Through>) -> Result<()> {
        match self.finish_episode(key, &ep, file.as_ref().map(Through::file)) {
            // A rollback's new file is recorded at once, not held back: held back, what a
            // process did to it before the create was recorded was folded into it (a rename
            // recorded as the rollback's making of the new name, a chmod as the mode it made
            // the file with, an unlink as neither having happened). A rollback makes no
            // temporary file to save over another, which is what holding back is for.
            Ok(Finished::Held(p)) if p.who.restore => {
                match self.record_create_or_keep(&ep.path, *p) {
                    // Kept held back, for the pending thread to try again.
                    Err(e) if out_of_sight(&e) => Ok(()),
                    Err(e) => Err(e),
                    Ok(()) => {
                        self.back_in_sight(&ep.path);
                        Ok(())
                    }
                }
            }
            Ok(Finished::Held(p)) => {
                let replaced = lock(&self.pending).insert(ep.path, *p);
                if let Some(old) = replaced {
                    self.release_id(old.id);
                }
                Ok(())
            }
            Ok(Finished::Closed { id, time_ns }) => {
                let file = file.and_then(Through::keep);
                let closed = {
                    let mut closed = lock(&self.closed);
                    closed.insert(
                        key,
                        Closed {
                            ep,
                            id,
                            time_ns,
                            file,
                        },
                    );
                    closed.len()
                };
                super::journal::id_taken();
                if closed > CLOSED_AT_MOST {
                    // The writer thread is behind (many writers at once): this RELEASE records
                    // its own, as it would without the writer thread, rather than let the
                    // table (and its open handles) grow.
                    return self.finish_closed_held(key);
                }
                self.wake_writer();
                Ok(())
            }
            Ok(Finished::Nothing) => Ok(()),
            Err(e) => {
                // Not recorded (the store refused it, or the deletes queued before its id):
                // a retry sets an id aside again.
                self.keep_unended(key, ep, &e);
                Err(e)
            }
        }
    }

    /// An episode whose end the store could not take (`e`) stays in the table with no handle
    /// open, for [`retry_ends`](Self::retry_ends).
    fn keep_unended(&self, key: Key, ep: Episode, e: &crate::history::Error) {
        if out_of_sight(e) {
            self.note_out_of_sight(&ep.path, e);
        }
        if matches!(e, crate::history::Error::Store(_)) || out_of_sight(e) {
            lock(&self.episodes).entry(key).or_insert(Episode {
                opens: 0,
                openers: Vec::new(),
                awaited: false,
                ..ep
            });
        }
    }

    /// Record the ends of episodes the store could not take when their last handle went (see
    /// [`end_or_keep`](Self::end_or_keep)).
    pub(super) fn retry_ends(&self) -> Result<()> {
        let stalled: Vec<Key> = lock(&self.episodes)
            .iter()
            .filter(|(_, ep)| ep.opens == 0)
            .map(|(key, _)| *key)
            .collect();
        for key in stalled {
            // As `end_write` holds them.
            let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
            let _held = self.hold(&[key]);
            let ep = {
                let mut episodes = lock(&self.episodes);
                match episodes.get(&key) {
                    Some(ep) if ep.opens == 0 => episodes.remove(&key).expect("present above"),
                    _ => continue,
                }
            };
            let path = ep.path.clone();
            let ended = self
                .end_in_flight(key, ep, None)
                .and_then(|()| self.finish_closed_held(key));
            match ended {
                // Still out of sight: the others go on.
                Err(e) if out_of_sight(&e) => {}
                Err(e) => return Err(e),
                Ok(()) => self.back_in_sight(&path),
            }
        }
        Ok(())
    }

    /// Record the end of an episode, its content read through `file` if given; a created file
    /// is returned to be held back instead.
    fn finish_episode(&self, key: Key, ep: &Episode, file: Option<&File>) -> Result<Finished> {
        let path = &ep.path[..];
        if ep.orphaned {
            self.drop_marker_of(key, path)?;
            return Ok(Finished::Nothing);
        }
        let st = match self.find_same(path, key, file) {
            Found::Same(st) => st,
            // Gone, or the name now belongs to something else: what this file became is not
            // in the tree.
            Found::Gone => {
                self.drop_marker_of(key, path)?;
                return Ok(Finished::Nothing);
            }
            // Kept, and recorded once it can be looked up (`retry_ends`).
            Found::Hidden(source) => return Err(hidden(path, source)),
        };
        // Under every name: a `.gitignore` may be written through another name of its file.
        self.note_rules(path)?;
        for name in self.other_names(key, path) {
            self.note_rules(&name)?;
        }
        if !self.records(path, false) {
            // Its folder became ignored meanwhile (this file may be the marker).
            self.history.drop_open_episode(path)?;
            return Ok(Finished::Nothing);
        }
        if ep.begun.is_some_and(|begun| begun == Sig::of(&st)) {
            // Opened for writing, and nothing written: no id set aside, so none to give back
            // (which would leave a gap if something was recorded meanwhile). Nor a marker to
            // drop if it was never written.
            if ep.unmarked.is_none() {
                self.history.drop_open_episode(path)?;
            }
            return Ok(Finished::Nothing);
        }
        // The id of the moment the file was closed, set aside before anything slow (reading
        // and storing what was written): an operation the writer makes after its `close()`
        // may be handled meanwhile, and must come after it in the history.
        if !ep.created && file.is_some() && self.in_a_burst() {
            // Read and recorded by the writer thread (see `Closed`); the requests after the
            // RELEASE go on once it is in the table (`end_or_keep`). Only a RELEASE's (one
            // with the handle to read through): a rollback's rewrite, or a truncate by path,
            // is followed at once by what the daemon does next itself, which no request
            // orders after it.
            let (id, time_ns) = self.reserve_id_unannounced(&ep.who)?;
            self.note_reserved(ep, id, time_ns);
            return Ok(Finished::Closed { id, time_ns });
        }
        let (id, time_ns) = self.reserve_id(&ep.who)?;
        if !ep.created {
            self.note_reserved(ep, id, time_ns);
            // The writer's thread first: the wake-up of this RELEASE, which the writer's
            // close() queued, may have taken its CPU on the way back from close(). With the id
            // set aside the requests after it need not wait, and the writer goes on while what
            // it wrote is read and stored (W2's small edit with 1 ms between edits, p50: 152 ->
            // 140 µs, off 135).
            std::thread::yield_now();
        }
        SLOW_END.pause();
        let finished = self.finish_as(key, ep, &st, (id, time_ns), file);
        if finished.is_err() {
            self.release_id(id);
        }
        finished.map(|p| p.map_or(Finished::Nothing, |p| Finished::Held(Box::new(p))))
    }

    /// Note in the marker of the edit `ep` of a file that was there (one that has a marker:
    /// fsynced, or open long enough) the id set aside for its end, and its label then: a crash
    /// before the edit is recorded leaves it to the next mount, which records it with that id
    /// if it is still free (`recovery.rs`), inside the turn it was closed in rather than after
    /// every bound. Edits without a marker (most: short ones) cost nothing more.
    fn note_reserved(&self, ep: &Episode, id: u64, time_ns: u64) {
        if ep.created || ep.orphaned || ep.unmarked.is_some() {
            return;
        }
        let mut who = ep.who.clone();
        if let Some((turn, tool)) = self.label_of_reserved(id) {
            (who.turn, who.tool) = (turn, tool);
        }
        let reserved = Some(Reserved { id, time_ns });
        if let Err(e) =
            self.put_marker_with(&ep.path, ep.before.clone(), &who, ep.fsynced, reserved)
        {
            tracing::warn!(
                "{}: its marker does not say which id its edit has: {e}",
                super::super::show_path(&ep.path)
            );
        }
    }

    /// Whether this end of an edit comes within [`BURST`] of the last one (or others wait
    /// closed already): it is then closed, for the writer thread (see [`Closed`]). An edit on
    /// its own is recorded by its RELEASE at once, as the writer thread would need two
    /// wake-ups for it.
    fn in_a_burst(&self) -> bool {
        if TEST_BURST.get().is_some() {
            return true;
        }
        let now = Instant::now();
        let last = lock(&self.last_end).replace(now);
        last.is_some_and(|t| now.duration_since(t) < BURST) || !lock(&self.closed).is_empty()
    }

    /// Record every closed edit now, in the order of their ids (see [`Closed`]).
    pub fn finish_closed(&self) -> Result<()> {
        let mut keys: Vec<(u64, Key)> = lock(&self.closed)
            .iter()
            .map(|(key, c)| (c.id, *key))
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        keys.sort_unstable();
        let mut result = Ok(());
        for (_, key) in keys {
            let finished = self.finish_closed_of(key);
            if result.is_ok() {
                result = finished;
            }
        }
        result
    }

    /// Record the closed edit of the file `key`, if there is one.
    fn finish_closed_of(&self, key: Key) -> Result<()> {
        if !lock(&self.closed).contains_key(&key) {
            return Ok(());
        }
        let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
        let _held = self.hold(&[key]);
        self.finish_closed_held(key)
    }

    /// [`finish_closed_of`](Self::finish_closed_of) with the file's stripe held. If the store
    /// cannot take it, the edit is kept as one whose end waits (`retry_ends`), its id given
    /// back.
    pub(super) fn finish_closed_held(&self, key: Key) -> Result<()> {
        let Some(c) = lock(&self.closed).remove(&key) else {
            return Ok(());
        };
        let _pins = self.pin_scope();
        let Closed {
            ep,
            id,
            time_ns,
            file,
        } = c;
        let path = &ep.path[..];
        if !self.records(path, false) {
            // Its folder became ignored meanwhile (a `.gitignore` edited since).
            self.release_id(id);
            return self.history.drop_open_episode(path);
        }
        let through = file.as_ref().or(ep.reader.as_deref());
        let finished = match self.find_same(path, key, through) {
            Found::Same(st) => {
                SLOW_END.pause();
                self.finish_as(key, &ep, &st, (id, time_ns), file.as_ref())
                    .map(|_| ())
            }
            Found::Gone => {
                self.release_id(id);
                return self.drop_marker_of(key, path);
            }
            Found::Hidden(source) => Err(hidden(path, source)),
        };
        if let Err(e) = finished {
            self.release_id(id);
            self.keep_unended(key, ep, &e);
            return Err(e);
        }
        Ok(())
    }

    /// [`finish_episode`](Self::finish_episode) of a file that is there, as change `id` at
    /// `time_ns`; a created file is returned to be held back, with them. When the content is
    /// as it was, nothing is recorded and the id is given back; on an error, the caller gives
    /// it back.
    fn finish_as(
        &self,
        key: Key,
        ep: &Episode,
        st: &libc::stat,
        (id, time_ns): (u64, u64),
        file: Option<&File>,
    ) -> Result<Option<Pending>> {
        let path = &ep.path[..];
        if ep.created {
            let mut who = ep.who.clone();
            if let Some((turn, tool)) = self.take_label(id) {
                (who.turn, who.tool) = (turn, tool);
            }
            let p = Pending {
                replaces: None,
                fsynced: ep.fsynced,
                key,
                who,
                time_ns,
                id,
                since: Instant::now(),
                reader: ep.reader.clone(),
                ended: Fsynced::of(st),
            };
            // A new file fsynced has a marker: it now says which id and time the create has,
            // so that a crash before it is recorded leaves it in its place. Written before the
            // create is in the table of held-back ones, where the pending thread could record
            // it (and take the marker away) first.
            if p.fsynced.is_some() {
                self.put_pending_marker(path, &p)?;
            }
            return Ok(Some(p));
        }
        let captured = self.capture_end(path, st, path, file)?;
        let after = captured.state.clone();
        if ep.before.as_ref() == Some(&after) {
            // Stored already, as the content before (nothing to write with a change).
            if ep.unmarked.is_none() {
                self.history.drop_open_episode(path)?;
            }
            self.release_id(id);
            // Still the file's last recorded version if the edit began from it (an unmarked
            // one did): a formatter that rewrites a file unchanged leaves the next edit's
            // marker to wait as well.
            self.captured(captured, ep.unmarked.is_some());
            return Ok(None);
        }
        let mut change = self.change(ChangeKind::Modify, path, &ep.who);
        change.time_ns = time_ns;
        change.before = ep.before.clone();
        change.after = Some(after);
        change.links = self.other_names(key, path);
        let manifest = self.manifest_of_names(path, &change.links, seen_of(st));
        self.record_as(
            change,
            &Extra {
                // An episode without its marker has none to drop (see `Unmarked`).
                finish_episode: ep.unmarked.is_none().then_some(path),
                manifest: &manifest,
                move_under: None,
                content: captured.content.as_ref(),
                marker: None,
            },
            Some(id),
        )?;
        self.captured(captured, true);
        Ok(None)
    }

    /// The files open for writing now, under every name they have, and who writes them.
    pub fn open_writers(&self) -> Vec<Writer> {
        let episodes = lock(&self.episodes);
        let mut out = Vec::new();
        for (key, ep) in episodes.iter().filter(|(_, ep)| !ep.orphaned) {
            for path in std::iter::once(ep.path.clone()).chain(self.other_names(*key, &ep.path)) {
                let now = self.source.lstat(&path).ok().map(|st| FileState {
                    kind: kind_of(&st),
                    size: st.st_size as u64,
                    mode: st.st_mode & 0o7777,
                    hash: None,
                    owner: Some(crate::history::change::Owner::of(&st)),
                });
                out.push(Writer {
                    now,
                    path,
                    pid: ep.who.pid,
                    process: ep.who.process.clone(),
                    session: ep.who.session.clone(),
                    before: ep.before.clone(),
                });
            }
        }
        out
    }

    /// Whether a write episode is open on the file `st`.
    pub fn is_open(&self, st: &libc::stat) -> bool {
        self.has_episode(key_of(st))
    }

    /// Whether the table holds a write episode of the file `key` (open, or kept after the
    /// store refused its end).
    pub fn has_episode(&self, key: Key) -> bool {
        lock(&self.episodes).contains_key(&key)
    }

    /// A rollback is about to rewrite `path` in place while another process holds it open for
    /// writing: what that process wrote so far is recorded first, as its own change.
    pub fn cut_for_restore(&self, path: &[u8], st: &libc::stat) -> Result<()> {
        let _pins = self.pin_scope();
        let key = key_of(st);
        let _held = self.hold(&[key]);
        self.cut_episode_by(key, path, None).map(drop)
    }

    /// A rollback (as thread `by.pid`) has rewritten `path` in place, inside another process's
    /// open episode: the rewrite is recorded as the rollback's own change, never folded into
    /// the writer's, and the episode goes on from the restored content, so what the writer
    /// writes next is its own change again.
    pub fn restored_in_place(&self, path: &[u8], st: &libc::stat, by: By) -> Result<()> {
        let _pins = self.pin_scope();
        let key = key_of(st);
        let _held = self.hold(&[key]);
        let by = self.who(by);
        self.cut_episode_by(key, path, Some(by)).map(drop)
    }

    /// Cut every open episode (a new file included: its create is recorded now), so that a
    /// point named right after this (a checkpoint) answers with every file as it is, not as it
    /// was before a write still in progress began, nor without a new file still being written.
    pub fn cut_open_episodes(&self) -> Result<()> {
        self.cut_episodes_where(|_| true, None)
    }

    /// `session`'s turn is about to begin or end: record what each file it has open for
    /// writing holds so far, as a change of the turn (and tool call) that opened it, so that
    /// its id falls within that turn's bound. The file goes on being written as a change of
    /// the turn the session is in next ([`relabel_episodes_of`](Self::relabel_episodes_of)).
    ///
    /// A file larger than [`CUT_AT_BOUND_MAX`] is not cut: reading it would hold the bound
    /// past the hook's budget. Its whole edit is the next turn's.
    pub fn cut_episodes_of(&self, session: &str) -> Result<()> {
        self.cut_episodes_where(|ep| ep.who.session == session, Some(CUT_AT_BOUND_MAX))
    }

    /// After `session`'s turn began or ended: the files it still has open for writing go on
    /// as changes of the turn and tool call it is in now, and their markers say so (a crash
    /// leaves what is written after the bound to the next mount as the next turn's).
    pub fn relabel_episodes_of(&self, session: &str) {
        let (turn, tool) = self.turns.current(session);
        let mut episodes = lock(&self.episodes);
        for ep in episodes
            .values_mut()
            .filter(|ep| ep.who.session == session && !ep.who.restore && !ep.orphaned)
        {
            if ep.who.turn == turn && ep.who.tool == tool {
                continue;
            }
            ep.who.turn = turn;
            ep.who.tool = tool.clone();
            if ep.unmarked.is_none()
                && let Err(e) = self.put_marker(&ep.path, ep.before.clone(), &ep.who, ep.fsynced)
            {
                tracing::warn!(
                    "{}: cannot note its next turn in its marker: {e}",
                    super::super::show_path(&ep.path)
                );
            }
        }
    }

    fn cut_episodes_where(
        &self,
        which: impl Fn(&Episode) -> bool,
        size_max: Option<u64>,
    ) -> Result<()> {
        let _pins = self.pin_scope();
        let open: Vec<Key> = lock(&self.episodes)
            .iter()
            .filter(|(_, ep)| !ep.orphaned && ep.opens > 0 && which(ep))
            .map(|(key, _)| *key)
            .collect();
        for key in open {
            // As an episode's end holds them; the path is read again under them (a rename may
            // have moved the episode meanwhile).
            let _ending = self.ending.read().unwrap_or_else(|e| e.into_inner());
            let _held = self.hold(&[key]);
            let Some(path) = lock(&self.episodes).get(&key).map(|ep| ep.path.clone()) else {
                continue;
            };
            if size_max.is_some_and(|max| {
                self.stat_if_same(&path, key)
                    .is_some_and(|st| st.st_size as u64 > max)
            }) {
                continue;
            }
            if self.records(&path, false) {
                self.cut_episode(key, &path)?;
            }
        }
        Ok(())
    }

    /// A writer of another session or agent opens the file `key` (at `path`) while its
    /// episode's writer still has it open: what the first wrote so far is its change, and the
    /// rest of the edit is the newcomer's `who`, its marker saying so (both write through the
    /// one file, and which write is whose cannot be told apart: with passthrough the daemon
    /// sees opens, never writes). Credited whole to the first, the newcomer's write went with
    /// the first's rollback, unseen. A rollback's rewrite is no newcomer (it cuts the writer's
    /// edit itself, `cut_for_restore`). Not for a file larger than [`CUT_AT_BOUND_MAX`]
    /// (reading it would hold up the newcomer's open, as a turn's bound does not), nor if the
    /// first writer's part cannot be read: the edit stays the first's, as before.
    ///
    /// When the newcomer's handles are released, the edit is cut again and goes back to the
    /// first writer ([`hand_back`](Self::hand_back)): a newcomer that wrote nothing (`touch`)
    /// then has no change, and what the first writes after it is the first's.
    fn hand_over(&self, key: Key, path: &[u8], st: &libc::stat, who: Who, pid: u32) {
        if st.st_size as u64 > CUT_AT_BOUND_MAX {
            return;
        }
        if let Err(e) = self.cut_episode(key, path) {
            tracing::warn!(
                "{}: its writer's part is not cut from another writer's: {e}",
                super::super::show_path(path)
            );
            return;
        }
        let mut episodes = lock(&self.episodes);
        let Some(ep) = episodes.get_mut(&key).filter(|ep| !ep.orphaned) else {
            return;
        };
        let to = std::mem::replace(&mut ep.who, who);
        // A third writer joining takes the edit from the second, and gives it back to it.
        ep.hand_back = Some(HandBack { pid, opens: 0, to });
        if ep.unmarked.is_none()
            && let Err(e) = self.put_marker(&ep.path, ep.before.clone(), &ep.who, ep.fsynced)
        {
            tracing::warn!(
                "{}: cannot note its new writer in its marker: {e}",
                super::super::show_path(&ep.path)
            );
        }
    }

    /// A handle opened by thread `pid` of the open episode `key` is released, with other
    /// handles still open: if `pid` is the writer the edit was handed over to and this was its
    /// last handle, what it wrote is cut as its change, and the edit goes back to the writer
    /// it was handed over from (see [`hand_over`](Self::hand_over)). Called with the file
    /// held.
    fn hand_back(&self, key: Key, pid: u32) {
        let path = {
            let mut episodes = lock(&self.episodes);
            let Some(ep) = episodes.get_mut(&key) else {
                return;
            };
            let Some(back) = ep.hand_back.as_mut().filter(|b| b.pid == pid) else {
                return;
            };
            back.opens = back.opens.saturating_sub(1);
            if back.opens > 0 {
                return;
            }
            ep.path.clone()
        };
        if let Err(e) = self.cut_episode(key, &path) {
            tracing::warn!(
                "{}: the part of its edit written while another writer had it open is not \
                 cut: {e}",
                super::super::show_path(&path)
            );
        }
        let mut episodes = lock(&self.episodes);
        let Some(ep) = episodes.get_mut(&key) else {
            return;
        };
        let Some(back) = ep.hand_back.take() else {
            return;
        };
        if ep.orphaned {
            return;
        }
        ep.who = back.to;
        if ep.unmarked.is_none()
            && let Err(e) = self.put_marker(&ep.path, ep.before.clone(), &ep.who, ep.fsynced)
        {
            tracing::warn!(
                "{}: cannot note its writer in its marker again: {e}",
                super::super::show_path(&ep.path)
            );
        }
    }

    /// `path`'s stat, if it is still the file `key` (not gone, not replaced).
    pub(super) fn stat_if_same(&self, path: &[u8], key: Key) -> Option<libc::stat> {
        self.source.lstat(path).ok().filter(|st| key_of(st) == key)
    }

    /// Whether `path` is still the file `key`, telling a path that is gone from one that
    /// cannot be looked up; in that case the file is looked at through `through` if given (a
    /// handle on it: an episode and a held-back create follow every rename and unlink made
    /// through the mount, so while it has a name it is this one).
    pub(super) fn find_same(&self, path: &[u8], key: Key, through: Option<&File>) -> Found {
        match self.source.lstat(path) {
            Ok(st) if key_of(&st) == key => Found::Same(st),
            Ok(_) => Found::Gone,
            Err(e) if not_there(&e) => Found::Gone,
            Err(e) => match through.map(fstat) {
                Some(Ok(st)) if key_of(&st) == key && st.st_nlink > 0 => Found::Same(st),
                _ => Found::Hidden(e),
            },
        }
    }

    /// A change of `path` waits for it to be looked up again (see [`Found::Hidden`]): said
    /// once in the log.
    pub(super) fn note_out_of_sight(&self, path: &[u8], e: &crate::history::Error) -> bool {
        let new = lock(&self.out_of_sight).insert(path.to_vec());
        if new {
            tracing::warn!(
                "{e}: the daemon cannot look it up now (a folder above it is not readable to \
                 the user it runs as); its change is recorded once it can"
            );
        }
        new
    }

    /// `path`'s change, if it waited, is recorded.
    pub(super) fn back_in_sight(&self, path: &[u8]) {
        let mut waiting = lock(&self.out_of_sight);
        if !waiting.is_empty() && waiting.remove(path) {
            tracing::info!(
                "{}: its change is recorded",
                crate::history::show_path(path)
            );
        }
    }

    /// Record what an open episode on `key` (at `path`) has changed so far, and let it go on
    /// from the current content. A RELEASE reaches us after the writer's close, so a chmod,
    /// unlink or rename can come while the episode that just wrote the file is still open; it
    /// must be recorded first, or history would not be a chain.
    ///
    /// Returns the content the episode goes on from, if there was one to cut: what the
    /// operation that cut it finds there. The writer may write more before the operation is
    /// done; read again, the operation would carry writes that no change records.
    pub(super) fn cut_episode(&self, key: Key, path: &[u8]) -> Result<Option<FileState>> {
        self.cut_episode_by(key, path, None)
    }

    /// [`cut_episode`](Recorder::cut_episode), recording what changed so far as `by`'s change
    /// (`None`: the episode's own writer's).
    fn cut_episode_by(&self, key: Key, path: &[u8], by: Option<Who>) -> Result<Option<FileState>> {
        // An edit of the file closed but not recorded yet comes first. A RELEASE handled after
        // the request's `Core::in_order` may have closed it, under the name the file has now:
        // recorded after a rename, chmod or rewrite, it would read what these left.
        self.finish_closed_held(key)?;
        let (ep_path, before, who, created, reader) = match lock(&self.episodes).get(&key) {
            Some(ep)
                if !ep.orphaned && (ep.path == path || self.same_file(key, &ep.path, path)) =>
            {
                (
                    ep.path.clone(),
                    ep.before.clone(),
                    ep.who.clone(),
                    ep.created,
                    ep.reader.clone(),
                )
            }
            _ => return Ok(None),
        };
        // Looked at through the episode's own handle where the daemon keeps one: its owner may
        // have made the file, or a folder above it, unreadable meanwhile (see `keep_reader`).
        let st = match self.find_same(&ep_path, key, reader.as_deref()) {
            Found::Same(st) => st,
            Found::Gone => return Ok(None),
            // What it wrote so far cannot be read: the operation that needs it first is
            // refused (`EACCES`), rather than recorded out of order.
            Found::Hidden(source) => return Err(hidden(&ep_path, source)),
        };
        let now = self.capture_fresh_as(&ep_path, &st, &ep_path, reader.as_deref())?;
        // The marker of the episode going on from `now`.
        let goes_on = marker(Some(now.clone()), &who, None, None);
        let changed = before.as_ref() != Some(&now);
        if changed {
            let kind = if created {
                ChangeKind::Create
            } else {
                ChangeKind::Modify
            };
            let mut change = self.change(kind, &ep_path, by.as_ref().unwrap_or(&who));
            change.before = before;
            change.after = Some(now.clone());
            change.links = self.other_names(key, &ep_path);
            let manifest = self.manifest_of_names(&ep_path, &change.links, seen_of(&st));
            // Its marker goes in the change's batch: written after it, a crash between the two
            // left the old marker (the edit's before, its writer), and the next mount recorded
            // this change a second time from it (`hostile28::a_cut_sigkilled_right_after_its_
            // record_is_not_recorded_again`).
            self.record(
                change,
                &Extra {
                    finish_episode: None,
                    manifest: &manifest,
                    move_under: None,
                    content: None,
                    marker: Some((&ep_path, &goes_on)),
                },
            )?;
            SLOW_CUT_RECORDED.pause();
        }
        // The episode goes on from what was just recorded even if the store then refuses its
        // marker: its end must not record that part again (a second create of a new file).
        if let Some(ep) = lock(&self.episodes).get_mut(&key) {
            ep.before = Some(now.clone());
            ep.created = false;
            ep.begun = None;
            ep.fsynced = None;
            ep.unmarked = None;
        }
        if !changed {
            self.history.put_open_episode(&ep_path, &goes_on)?;
        }
        SLOW_CUT.pause();
        Ok(Some(now))
    }
}
