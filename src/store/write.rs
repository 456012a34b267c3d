//! Writing: every write goes through [`Store::write`], which refuses to write on top of a
//! failed one, and a change with all its bookkeeping is one batch.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions};

use super::{
    CF_BLOBS, CF_BY_AGENT, CF_BY_PATH, CF_BY_SESSION, CF_BY_TIME, CF_CHANGES, CF_CHECKPOINTS,
    CF_EPISODES, CF_MANIFEST, CF_META, CF_SESSIONS, CF_TURNS, ChangeRecord, CheckpointRecord, Db,
    EpisodeRecord, Error, NewContent, Result, SeenRecord, SessionRecord, Store, TurnRecord,
    check_key_name, keys,
};

/// The reserve rewind keeps on the store's disk: a tenth of its size, at least 2 MiB and at
/// most 128 MiB. New recorded operations are refused below it, so that what has started can
/// still be written: the end of a write, a queued delete, and RocksDB's flush of what its
/// write buffers hold, which are kept to half the reserve (see `open::options`).
pub(super) fn reserve_for(disk_size: u64) -> u64 {
    (disk_size / 10).clamp(2 << 20, 128 << 20)
}

/// The size of the file system holding `dir`, and what an unprivileged writer may still use
/// of it (root may dip into ext4's reserved blocks, but counting on them would hide a full
/// disk); `None` if it cannot be asked.
pub(super) fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some((
        st.f_blocks.saturating_mul(st.f_frsize),
        st.f_bavail.saturating_mul(st.f_frsize),
    ))
}

/// What a retraction ([`Store::retract_with`]) writes in its batch besides taking the changes
/// back.
#[derive(Default)]
pub struct Retraction<'a> {
    /// Manifest entries to put (`None`: to remove).
    pub manifest: &'a [(Vec<u8>, Option<SeenRecord>)],
    /// Open-episode markers to put (`None`: to drop).
    pub markers: &'a [(Vec<u8>, Option<EpisodeRecord>)],
    /// Swap the manifest entries below these two folders (a folder rename taken back).
    pub swap_under: Option<(&'a [u8], &'a [u8])>,
}

/// Tests only: `REWIND_TEST_REFUSE_AFTER=CONTEXT` (a write's context, as the log names it:
/// `retract change`, `record change`, ...) makes the store refuse writes, as after a failed
/// one, right after the first write of that context succeeds: a disk that fills between two
/// writes, at a place a test chooses. The store-recovery thread's test write lets writes in
/// again a second or so later. Read once; unset, it costs a load per write.
static REFUSE_AFTER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
static REFUSED_FOR_TESTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Free space on the store's disk, and the reserve kept there.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    pub free: u64,
    pub reserve: u64,
}

/// How long [`Store::check_room`] goes by the free space it last saw, when that was more than
/// [`ROOM_MARGIN`] above the reserve (writing that much in that time would take 10 GB/s).
const ROOM_FRESH: Duration = Duration::from_millis(100);
const ROOM_MARGIN: u64 = 1 << 30;

/// How long a write waits out a write stall (see [`Store::write`]).
const STALL_LIMIT: Duration = Duration::from_secs(5);

/// How every write is made: to the WAL without fsync, and never waiting in a write stall.
pub(super) fn write_options() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(false);
    opts.set_no_slowdown(true);
    opts
}

/// Bytes as MiB, for messages.
pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Bookkeeping written in the same batch as a change.
#[derive(Default)]
pub struct Extra<'a> {
    /// The open-episode marker this change completes.
    pub finish_episode: Option<&'a [u8]>,
    /// Manifest entries to set (or, with `None`, remove).
    pub manifest: &'a [(Vec<u8>, Option<SeenRecord>)],
    /// A directory renamed: move the manifest entries below the first path under the second
    /// (and, for an exchange of two directories, those below the second under the first).
    pub move_under: Option<(&'a [u8], &'a [u8])>,
    /// The content the change records, if not stored yet: written in the same batch.
    pub content: Option<&'a NewContent>,
    /// An open-episode marker to write (after `finish_episode`'s drop): that of an episode
    /// going on from this change (a cut).
    pub marker: Option<(&'a [u8], &'a EpisodeRecord)>,
}

impl Store {
    /// Whether writes are accepted now.
    pub fn writable(&self) -> bool {
        self.check_writable().is_ok()
    }

    /// `Ok` if writes are accepted: not read-only, and no write has failed since the last
    /// successful [`recover`](Store::recover).
    pub fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(why) = self.halted.get() {
            return Err(Error::Halted(why.clone()));
        }
        match &*self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((reason, no_space)) => Err(Error::Unwritable {
                reason: reason.clone(),
                no_space: *no_space,
            }),
            None => Ok(()),
        }
    }

    /// [`check_writable`](Store::check_writable), and the store's disk has more room than the
    /// reserve ([`Store::room`]). For starting something that will have to be recorded (a new
    /// file, an open for writing): it must not happen when the record could not be written,
    /// and a full disk does not fail a write until one is tried. What has started is finished
    /// from the reserve. Recording resumes by itself once there is room again.
    pub fn check_room(&self) -> Result<()> {
        self.check_writable()?;
        if let Some(room) = self.room_lately()
            && room.free < room.reserve
        {
            return Err(Error::Unwritable {
                reason: format!(
                    "the disk of {} is full ({} free, rewind keeps {} in reserve)",
                    self.dir.display(),
                    mib(room.free),
                    mib(room.reserve)
                ),
                no_space: true,
            });
        }
        Ok(())
    }

    /// [`room`](Store::room), or what it said less than [`ROOM_FRESH`] ago when the disk then
    /// had more than [`ROOM_MARGIN`] above the reserve: no disk fills that much that fast, and
    /// asking it (`statfs`) was a tenth of what an open for writing costs the daemon.
    fn room_lately(&self) -> Option<Room> {
        let mut seen = self.room_seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, room)) = *seen
            && at.elapsed() < ROOM_FRESH
            && room.free > room.reserve.saturating_add(ROOM_MARGIN)
        {
            return Some(room);
        }
        let room = self.room();
        *seen = room.map(|r| (Instant::now(), r));
        room
    }

    /// Before storing `bytes` more of one content (a chunk of a large file): refuse if that
    /// would take the store's disk into the reserve. Large content is stored chunk by chunk,
    /// each checked, so one file larger than the disk stops here instead of eating the reserve
    /// that gc, a reopen and what has started need. The chunks stored so far stay (a retry
    /// finds them stored and goes on from there; gc removes them if nothing comes to refer to
    /// them). Writes are refused from then on, like after a failed write, until the disk has
    /// room for the rest: `rest` bytes of content (at most; compression may need less) on top
    /// of the reserve, so that a retry does not start over for each MiB freed.
    pub(super) fn check_room_for(
        &self,
        bytes: u64,
        what: Option<&[u8]>,
        stored: u64,
        rest: impl FnOnce() -> u64,
    ) -> Result<()> {
        let Some(room) = self.room() else {
            return Ok(());
        };
        // What RocksDB's write buffers hold is in its log and will be written again when they
        // are flushed, before that log goes: count it as taken already.
        let unflushed = self.unflushed_bytes();
        if room.free >= room.reserve.saturating_add(bytes).saturating_add(unflushed) {
            return Ok(());
        }
        let rest = rest().max(bytes);
        let (what, way_out) = match what {
            Some(path) => {
                let path = String::from_utf8_lossy(path);
                (
                    format!("the content of {path}"),
                    format!(
                        "; free that much there, or move {path} out of the workspace while it \
                         is not mounted, run `rewind gc` and mount again"
                    ),
                )
            }
            None => ("a large content".to_string(), String::new()),
        };
        let reason = format!(
            "the disk of {} is too full to store {what}: {} stored, about {} more needed, \
             {} free and rewind keeps {} in reserve{way_out}",
            self.dir.display(),
            mib(stored),
            mib(rest),
            mib(room.free),
            mib(room.reserve)
        );
        tracing::error!("{reason}; refusing writes until the disk has room for it");
        self.wanted.store(rest, Ordering::SeqCst);
        *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = Some((reason.clone(), true));
        Err(Error::Unwritable {
            reason,
            no_space: true,
        })
    }

    /// The bytes RocksDB is about to write of what it holds already, over every family: its
    /// write buffers (not yet in table files, while the log still holds them), and what a
    /// compaction rewrites before the tables it replaces go: the tables in level 0, or
    /// RocksDB's estimate of what it is behind with if that is more.
    pub(super) fn unflushed_bytes(&self) -> u64 {
        let Ok(db) = self.db() else {
            return 0;
        };
        let (mut buffers, mut behind) = (0u64, 0u64);
        for name in super::ALL_CFS {
            let cf = db.cf(name);
            let n = |property| db.property_int_value_cf(cf, property).ok().flatten();
            buffers += n("rocksdb.cur-size-all-mem-tables").unwrap_or(0);
            behind += n("rocksdb.estimate-pending-compaction-bytes").unwrap_or(0);
        }
        let level0: u64 = db.live_files().map_or(0, |files| {
            files
                .iter()
                .filter(|f| f.level == 0)
                .map(|f| f.size as u64)
                .sum()
        });
        buffers.saturating_add(behind.max(level0))
    }

    /// Free space on the store's disk and the reserve rewind keeps there; `None` if the disk
    /// cannot be asked.
    pub fn room(&self) -> Option<Room> {
        let (size, free) = disk_space(&self.dir)?;
        Some(Room {
            free,
            reserve: reserve_for(size),
        })
    }

    /// Stop writes for good (until the store is opened again): a panic somewhere in the
    /// daemon may have left its state, and what it was about to record, half done. Unlike a
    /// failed write, nothing recovers from this but a remount. The first reason stays.
    pub fn halt(&self, why: String) {
        let _ = self.halted.set(why);
    }

    /// Why writes are refused, if they are: for `status`.
    pub fn unwritable_reason(&self) -> Option<String> {
        if let Some(why) = self.halted.get() {
            return Some(why.clone());
        }
        self.unwritable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(r, _)| r.clone())
    }

    /// Note a failed write: nothing more is written until [`recover`](Store::recover) works.
    pub(super) fn fail(&self, context: &'static str, source: &rocksdb::Error) {
        let no_space = super::error::is_no_space(source) || self.below_reserve();
        // A stall with room on the disk outlasted `STALL_LIMIT` (see `write`).
        let why = if source.kind() == rocksdb::ErrorKind::Incomplete && !no_space {
            format!(
                "RocksDB stalled writes for more than {} s ({source}): it is behind with \
                 compacting its files; recording resumes by itself once it catches up",
                STALL_LIMIT.as_secs()
            )
        } else {
            source.to_string()
        };
        tracing::error!("store write failed ({context}): {why}; refusing writes until one works");
        *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = Some((why, no_space));
    }

    /// Whether the store's disk has less room than the reserve (a write error on a full disk
    /// does not always say so: RocksDB may fail it as a write stall).
    pub(super) fn below_reserve(&self) -> bool {
        self.room().is_some_and(|r| r.free < r.reserve)
    }

    /// Run a write; on failure refuse further writes, so nothing is written on top of an
    /// unknown state. Never waits in RocksDB's write stall (`no_slowdown`): on a full disk a
    /// failed flush stops writes until RocksDB's own recovery sees a whole write buffer free,
    /// which may be never. A stall is waited out here, for at most [`STALL_LIMIT`] and only
    /// while the disk has room (a busy compaction slows writes for moments); then the write
    /// fails, and the caller's operation with it.
    pub(super) fn write(&self, context: &'static str, batch: WriteBatch) -> Result<()> {
        self.check_writable()?;
        self.write_now(context, batch)
    }

    /// [`write`](Store::write) for a write that gives space back (gc's deletes) or a small
    /// one that must not wait (a turn's bounds), also when writes are refused because the
    /// disk is full: that is what the reserve is kept for. Not after a panic, nor in a
    /// read-only store.
    pub(super) fn write_to_free(&self, context: &'static str, batch: WriteBatch) -> Result<()> {
        self.check_may_free()?;
        self.write_now(context, batch)
    }

    /// `Ok` if a write that gives space back may be made: writes are accepted, or refused
    /// only because the disk is full.
    pub(super) fn check_may_free(&self) -> Result<()> {
        match self.check_writable() {
            Err(Error::Unwritable { no_space: true, .. }) => Ok(()),
            other => other,
        }
    }

    fn write_now(&self, context: &'static str, batch: WriteBatch) -> Result<()> {
        let db = self.db()?;
        let started = Instant::now();
        let mut batch = batch;
        loop {
            // `write_opt` consumes the batch: keep its bytes for another try.
            let data = batch.data().to_vec();
            match db.write_opt(batch, &write_options()) {
                Ok(()) => {
                    self.refuse_after_for_tests(context);
                    return Ok(());
                }
                Err(source)
                    if source.kind() == rocksdb::ErrorKind::Incomplete
                        && started.elapsed() < STALL_LIMIT
                        && !self.below_reserve() =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                    batch = WriteBatch::from_data(&data);
                }
                Err(source) => {
                    self.fail(context, &source);
                    return Err(Error::Db { context, source });
                }
            }
        }
    }

    /// Tests only: see [`REFUSE_AFTER`].
    fn refuse_after_for_tests(&self, context: &'static str) {
        let Some(after) =
            REFUSE_AFTER.get_or_init(|| std::env::var("REWIND_TEST_REFUSE_AFTER").ok())
        else {
            return;
        };
        if after == context && !REFUSED_FOR_TESTS.swap(true, Ordering::SeqCst) {
            let why = format!("REWIND_TEST_REFUSE_AFTER: refusing writes after a {context}");
            tracing::error!("{why}");
            *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = Some((why, false));
        }
    }

    pub fn delete_meta(&self, key: &[u8]) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(db.cf(CF_META), key);
        drop(db);
        self.write("meta", batch)
    }

    pub fn put_meta(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(db.cf(CF_META), key, value);
        drop(db);
        self.write("meta", batch)
    }

    /// Record changes in one batch, with consecutive ids in the order given (the records' `id`
    /// fields are ignored). Their blobs must already be stored. Returns them with their ids.
    pub fn record_many(&self, items: Vec<(ChangeRecord, &Extra<'_>)>) -> Result<Vec<ChangeRecord>> {
        self.record_with_ids(items.into_iter().map(|(c, e)| (c, e, None)).collect())
    }

    /// Set an id aside for a change that happened now but is recorded later (a held-back
    /// create), so that ids follow the order operations happened in. Give it to
    /// [`record_with_ids`](Store::record_with_ids), or back with
    /// [`release_id`](Store::release_id).
    pub fn reserve_id(&self) -> u64 {
        let mut last = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        *last += 1;
        *last
    }

    /// An id set aside will not be used. Handed out again if nothing came after it (and no
    /// checkpoint named it), so the common case leaves no gap; otherwise it stays a gap.
    pub fn release_id(&self, id: u64) {
        let mut last = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if *last == id && id > self.pinned.load(Ordering::SeqCst) {
            *last -= 1;
        }
    }

    /// Whether `id`, handed out already (at most the last), is free for a change recorded
    /// late with it (a held-back create a crash cut short, with the id its marker says was set
    /// aside for it): no change has it, none was retracted with it, and gc's horizon is below
    /// it. An id past the last is not: nothing was recorded after it, and the next id is its
    /// place.
    pub fn id_unused(&self, id: u64) -> Result<bool> {
        let last = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if id == 0 || id > *last || self.horizon()?.is_some_and(|h| h.id >= id) {
            return Ok(false);
        }
        let db = self.db()?;
        let taken = |cf: &'static str, key: &[u8]| -> Result<bool> {
            Ok(db
                .get_pinned_cf(db.cf(cf), key)
                .map_err(Store::db_error("read id"))?
                .is_some())
        };
        Ok(!taken(CF_CHANGES, &keys::change(id))? && !taken(CF_META, &keys::retracted(id))?)
    }

    /// [`record_many`](Store::record_many), where an item may bring an id set aside with
    /// [`reserve_id`](Store::reserve_id).
    pub fn record_with_ids(
        &self,
        items: Vec<(ChangeRecord, &Extra<'_>, Option<u64>)>,
    ) -> Result<Vec<ChangeRecord>> {
        self.check_writable()?;
        for (c, _, _) in &items {
            check_key_name("session", c.session.as_bytes())?;
            check_key_name("agent", c.agent.as_bytes())?;
        }
        let mut last_id = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        // Ids and session summaries first (summaries may be read from the store), then the
        // batch: the database lock is never taken twice by one thread.
        let mut sessions: HashMap<String, SessionRecord> = HashMap::new();
        let mut changes = Vec::with_capacity(items.len());
        let mut fresh = 0u64;
        for (mut change, extra, reserved) in items {
            change.id = match reserved {
                Some(id) if id > 0 && id <= *last_id => id,
                Some(id) => {
                    return Err(Error::Corrupt {
                        cf: CF_CHANGES,
                        key: keys::hex(&keys::change(id)),
                        reason: format!("id {id} was never set aside (the last is {last_id})"),
                    });
                }
                None => {
                    fresh += 1;
                    *last_id + fresh
                }
            };
            let summary = match sessions.remove(&change.session) {
                Some(mut s) => {
                    s.count_in(&change);
                    s
                }
                None => self.updated_session(&change)?,
            };
            sessions.insert(change.session.clone(), summary);
            changes.push((change, extra));
        }
        let mut counts = self.counts();
        let mut new_counts = *counts;
        new_counts.changes += changes.len() as u64;
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        let mut out = Vec::with_capacity(changes.len());
        let mut contents = Vec::new();
        for (change, extra) in changes {
            if let Some(content) = extra.content {
                // Counted once, if another thread stored the same content meanwhile (as
                // `put_value` does).
                let cf = db.cf(CF_BLOBS);
                let key = content.hash().0;
                if super::blobs::stored_len(&db, content.hash())?.is_none() {
                    batch.put_cf(cf, key, content.value());
                    new_counts.blobs += 1;
                    new_counts.blob_bytes += content.value().len() as u64;
                }
                contents.push(content);
            }
            let id = change.id;
            batch.put_cf(db.cf(CF_CHANGES), keys::change(id), change.encode());
            for name in index_names(&change) {
                batch.put_cf(db.cf(CF_BY_PATH), keys::named(name, id), b"");
            }
            let session_key = keys::named(change.session.as_bytes(), id);
            batch.put_cf(db.cf(CF_BY_SESSION), session_key, b"");
            let agent_key = keys::named(change.agent.as_bytes(), id);
            batch.put_cf(db.cf(CF_BY_AGENT), agent_key, b"");
            batch.put_cf(db.cf(CF_BY_TIME), keys::time(change.time_ns, id), b"");
            if let Some(path) = extra.finish_episode {
                batch.delete_cf(db.cf(CF_EPISODES), path);
            }
            if let Some((path, marker)) = extra.marker {
                batch.put_cf(db.cf(CF_EPISODES), path, marker.encode());
            }
            if let Some((from, to)) = extra.move_under {
                move_manifest_under(&db, &mut batch, from, to)?;
            }
            put_manifest_entries(&db, &mut batch, extra.manifest);
            out.push(change);
        }
        // Each session's summary once, as the batch leaves it (a batch of queued deletes put
        // it once per change).
        for (name, summary) in &sessions {
            batch.put_cf(db.cf(CF_SESSIONS), name.as_bytes(), summary.encode());
        }
        drop(db);
        self.write_counted("record change", batch, &mut counts, new_counts)?;
        drop(counts);
        self.watched_by_gc(|w| w.recorded.extend(out.iter().cloned()));
        for content in contents {
            self.content_written(content);
        }
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sessions);
        *last_id += fresh;
        // A file's content, or what a delete or a move took away: a base for the first
        // version of a path with its name or extension (a checkout that moves a file deletes
        // it here and creates it there).
        for change in &out {
            let file = |s: &Option<super::StateRecord>| {
                s.as_ref()
                    .filter(|s| s.kind == super::format::kind::FILE)
                    .and_then(|s| Some((super::Hash(s.hash?), s.size)))
            };
            if let Some((hash, size)) = file(&change.after).or_else(|| file(&change.before)) {
                self.note_similar(&change.path, hash, size);
            }
        }
        Ok(out)
    }

    /// Take back a change recorded before an operation that then failed. Its id is not handed
    /// out again.
    pub fn retract(&self, change: &ChangeRecord) -> Result<()> {
        self.retract_with(std::slice::from_ref(change), &Retraction::default())
    }

    /// Take back `changes`, with what `with` says goes with them, in one batch: all of it is
    /// written or none (a sequence of writes that a full disk cuts short would leave the
    /// history half taken back).
    pub fn retract_with(&self, changes: &[ChangeRecord], with: &Retraction<'_>) -> Result<()> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut summaries: HashMap<&str, Option<SessionRecord>> = HashMap::new();
        for c in changes {
            if !summaries.contains_key(c.session.as_str()) {
                summaries.insert(&c.session, self.session(&c.session)?);
            }
        }
        let mut counts = self.counts();
        let mut new_counts = *counts;
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        for change in changes {
            let stored = db
                .get_pinned_cf(db.cf(CF_CHANGES), keys::change(change.id))
                .map_err(Store::db_error("read change"))?
                .is_some();
            new_counts.changes -= u64::from(stored && new_counts.changes > 0);
            delete_change(&db, &mut batch, change);
            // A tombstone, so that the id can be explained later.
            batch.put_cf(db.cf(CF_META), keys::retracted(change.id), b"");
            if let Some(summary) = summaries.get_mut(change.session.as_str()) {
                match summary {
                    Some(info) if info.count > 1 => info.count -= 1,
                    _ => *summary = None,
                }
            }
        }
        for (session, summary) in &summaries {
            match summary {
                Some(info) => batch.put_cf(db.cf(CF_SESSIONS), session.as_bytes(), info.encode()),
                None => batch.delete_cf(db.cf(CF_SESSIONS), session.as_bytes()),
            }
        }
        if let Some((a, b)) = with.swap_under {
            move_manifest_under(&db, &mut batch, a, b)?;
        }
        put_manifest_entries(&db, &mut batch, with.manifest);
        for (path, marker) in with.markers {
            match marker {
                Some(m) => batch.put_cf(db.cf(CF_EPISODES), path, m.encode()),
                None => batch.delete_cf(db.cf(CF_EPISODES), path),
            }
        }
        drop(db);
        self.write_counted("retract change", batch, &mut counts, new_counts)?;
        drop(counts);
        self.watched_by_gc(|w| w.retracted.extend(changes.iter().cloned()));
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// Note that a write episode on `path` has begun (its before content is already stored),
    /// so a crash before it ends can still be recorded at the next mount.
    pub fn put_open_episode(&self, path: &[u8], episode: &EpisodeRecord) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(db.cf(CF_EPISODES), path, episode.encode());
        drop(db);
        self.write("open episode", batch)
    }

    pub fn drop_open_episode(&self, path: &[u8]) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(db.cf(CF_EPISODES), path);
        drop(db);
        self.write("drop episode", batch)
    }

    /// Update manifest entries outside of a change (metadata-only updates).
    pub fn put_manifest(&self, entries: &[(Vec<u8>, Option<SeenRecord>)]) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        put_manifest_entries(&db, &mut batch, entries);
        drop(db);
        self.write("manifest", batch)
    }

    /// Swap the entries below two folders, as a recorded folder rename does (for taking one
    /// back).
    pub fn swap_manifest_under(&self, a: &[u8], b: &[u8]) -> Result<()> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        move_manifest_under(&db, &mut batch, a, b)?;
        drop(db);
        self.write("manifest", batch)
    }

    /// Replace the whole manifest (after the scan at mount).
    pub fn replace_manifest(&self, entries: &[(Vec<u8>, SeenRecord)]) -> Result<()> {
        let db = self.db()?;
        let cf = db.cf(CF_MANIFEST);
        let mut batch = WriteBatch::default();
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (key, _) = item.map_err(Store::db_error("scan manifest"))?;
            batch.delete_cf(cf, key);
        }
        for (path, seen) in entries {
            batch.put_cf(cf, path, seen.encode());
        }
        batch.put_cf(db.cf(CF_META), b"manifest", [1u8]);
        drop(db);
        self.write("replace manifest", batch)
    }

    /// Name the current end of the history. An existing checkpoint of that name is moved only
    /// with `replace`; otherwise nothing is written and the answer is `None`.
    pub fn put_checkpoint(
        &self,
        name: &str,
        time_ns: u64,
        replace: bool,
    ) -> Result<Option<CheckpointRecord>> {
        check_key_name("checkpoint", name.as_bytes())?;
        // Under the writer lock: the end of the history cannot move while it is named.
        let last = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if !replace && self.checkpoint(name)?.is_some() {
            return Ok(None);
        }
        let checkpoint = CheckpointRecord {
            name: name.to_owned(),
            id: *last,
            time_ns,
        };
        // An id set aside before this point stays below it, even if it is never used.
        self.pinned.store(*last, Ordering::SeqCst);
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(db.cf(CF_CHECKPOINTS), name.as_bytes(), checkpoint.encode());
        drop(db);
        self.write("checkpoint", batch)?;
        Ok(Some(checkpoint))
    }

    /// Write a turn (a new one, or one that ended). Also from the reserve when the store
    /// refuses writes for a full disk: a turn's record is a few hundred bytes, and an agent's
    /// prompt or Stop must still begin or end its turn, whose bounds say which changes are its
    /// (those refused meanwhile are not recorded at all).
    pub fn put_turn(&self, turn: &TurnRecord) -> Result<()> {
        check_key_name("session", turn.session.as_bytes())?;
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(
            db.cf(CF_TURNS),
            keys::named(turn.session.as_bytes(), u64::from(turn.number)),
            turn.encode(),
        );
        drop(db);
        self.write_to_free("turn", batch)
    }

    /// The last id handed out, as a point the history is cut at (a turn's bounds): pinned, so
    /// that an id set aside before it and given back is not handed out again below it.
    pub fn mark_point(&self) -> u64 {
        let last = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.pinned.store(*last, Ordering::SeqCst);
        *last
    }

    /// The id the next change will get, were it recorded now.
    pub fn next_id(&self) -> u64 {
        *self.writer.lock().unwrap_or_else(|e| e.into_inner()) + 1
    }

    /// Hand out the next number of a counter kept in `meta` (rollback session numbers), never
    /// the same twice.
    pub fn next_in_sequence(&self, name: &[u8]) -> Result<u64> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let n = match self.meta(name)? {
            Some(v) if v.len() == 8 => u64::from_be_bytes(v.try_into().expect("8 bytes")),
            _ => 0,
        } + 1;
        self.put_meta(name, &n.to_be_bytes())?;
        Ok(n)
    }

    /// Make everything written so far durable against a machine crash.
    pub fn sync(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.check_writable()?;
        let db = self.db()?;
        db.flush_wal(true).map_err(|source| {
            self.fail("sync", &source);
            Error::Db {
                context: "sync",
                source,
            }
        })
    }
}

/// The `by_path` names of a change: its path, a rename's old path, the file's other names.
pub(super) fn index_names(c: &ChangeRecord) -> impl Iterator<Item = &[u8]> {
    std::iter::once(c.path.as_slice())
        .chain(c.from.as_deref())
        .chain(c.links.iter().map(Vec::as_slice))
}

pub(super) fn delete_change(db: &Db<'_>, batch: &mut WriteBatch, c: &ChangeRecord) {
    batch.delete_cf(db.cf(CF_CHANGES), keys::change(c.id));
    for name in index_names(c) {
        batch.delete_cf(db.cf(CF_BY_PATH), keys::named(name, c.id));
    }
    batch.delete_cf(
        db.cf(CF_BY_SESSION),
        keys::named(c.session.as_bytes(), c.id),
    );
    batch.delete_cf(db.cf(CF_BY_AGENT), keys::named(c.agent.as_bytes(), c.id));
    batch.delete_cf(db.cf(CF_BY_TIME), keys::time(c.time_ns, c.id));
}

fn put_manifest_entries(
    db: &Db<'_>,
    batch: &mut WriteBatch,
    entries: &[(Vec<u8>, Option<SeenRecord>)],
) {
    for (path, seen) in entries {
        match seen {
            Some(seen) => batch.put_cf(db.cf(CF_MANIFEST), path, seen.encode()),
            None => batch.delete_cf(db.cf(CF_MANIFEST), path),
        }
    }
}

fn move_manifest_under(db: &Db<'_>, batch: &mut WriteBatch, from: &[u8], to: &[u8]) -> Result<()> {
    // Entries below `from` go below `to`, and any below `to` (an exchange of two folders; a
    // plain rename replaces only an empty folder) below `from`. Every old key is deleted before
    // any new one is put, as one may be the other's.
    let cf = db.cf(CF_MANIFEST);
    let mut moved = Vec::new();
    for (old, new) in [(from, to), (to, from)] {
        let mut prefix = old.to_vec();
        prefix.push(b'/');
        for item in db.iterator_cf(cf, IteratorMode::From(&prefix, Direction::Forward)) {
            let (key, value) = item.map_err(Store::db_error("scan manifest"))?;
            if !key.starts_with(&prefix) {
                break;
            }
            let mut renamed = new.to_vec();
            renamed.extend_from_slice(&key[old.len()..]);
            moved.push((key, renamed, value));
        }
    }
    for (key, _, _) in &moved {
        batch.delete_cf(cf, key);
    }
    for (_, renamed, value) in moved {
        batch.put_cf(cf, renamed, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::format::{change_kind, kind};
    use crate::store::{ChangeRecord, StateRecord};

    fn delete(path: &str, session: &str, agent: &str, time_ns: u64) -> ChangeRecord {
        ChangeRecord {
            id: 0,
            time_ns,
            kind: change_kind::DELETE,
            path: path.as_bytes().to_vec(),
            from: None,
            before: Some(StateRecord {
                kind: kind::FILE,
                size: 0,
                mode: 0o644,
                hash: None,
                owner: None,
            }),
            after: None,
            session: session.into(),
            agent: agent.into(),
            pid: 1,
            process: "rm".into(),
            links: Vec::new(),
            groups: Vec::new(),
            turn: None,
            tool: None,
            uid: None,
        }
    }

    /// A batch puts each session's summary once, as the batch leaves it: what a reopened
    /// store reads back counts every change of the batch, first and last, and every agent.
    #[test]
    fn a_batch_of_changes_of_two_sessions_leaves_each_summary_whole() {
        let dir = tempfile::tempdir().unwrap();
        let extra = Extra::default();
        {
            let store = Store::open(dir.path()).unwrap();
            store
                .record_many(vec![(delete("before", "a", "x", 5), &extra)])
                .unwrap();
            let batch: Vec<(ChangeRecord, &Extra<'_>)> = (0..10)
                .map(|i| {
                    let (session, agent) = if i % 3 == 0 { ("b", "y") } else { ("a", "z") };
                    (delete(&format!("f{i}"), session, agent, 10 + i), &extra)
                })
                .collect();
            store.record_many(batch).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let a = store.session("a").unwrap().unwrap();
        assert_eq!((a.count, a.first_id, a.last_id), (7, 1, 10));
        assert_eq!((a.first_time_ns, a.last_time_ns), (5, 18));
        assert_eq!(a.agents, ["x", "z"]);
        let b = store.session("b").unwrap().unwrap();
        assert_eq!((b.count, b.first_id, b.last_id), (4, 2, 11));
        assert_eq!((b.first_time_ns, b.last_time_ns), (10, 19));
        assert_eq!(b.agents, ["y"]);
    }
}
