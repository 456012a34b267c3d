//! The history store: one RocksDB database per workspace, and the only API through which history
//! is written and read.
//!
//! Column families (keys in [`keys`], values in [`codec`] and [`blob`]):
//!
//! | cf            | key                 | value                          |
//! |---------------|---------------------|--------------------------------|
//! | `blobs`       | BLAKE3 hash (32)    | zstd content or chunk manifest |
//! | `changes`     | id (u64 BE)         | [`Change`]                     |
//! | `by_path`     | path NUL id         | empty                          |
//! | `by_session`  | session NUL id      | empty                          |
//! | `by_agent`    | agent NUL id        | empty                          |
//! | `by_time`     | time_ns id          | empty                          |
//! | `sessions`    | name                | [`SessionInfo`]                |
//! | `checkpoints` | name                | [`Checkpoint`]                 |
//! | `meta`        | `format`, `workspace` | raw bytes                    |
//! | `open_episodes` | path              | [`OpenEpisode`]: a write episode in progress |
//! | `manifest`    | path                | [`Seen`]: the tree as the mount last left it |
//!
//! Invariants: a change, its index entries and its session's summary are written in one
//! `WriteBatch`; a blob a change refers to is written before (or with) the change; after any
//! failed write the store is poisoned and refuses writes until reopened. Writes go to the WAL
//! without fsync, so they survive the death of the process; [`Store::sync`] makes them survive
//! the machine's.

mod blob;
pub mod codec;
pub mod keys;
pub mod record;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, WriteBatch,
    WriteOptions,
};

pub use blob::CHUNK;
use blob::{Blob, Manifest};
pub use record::{
    Change, ChangeKind, Checkpoint, FileKind, FileState, Hash, NewChange, OpenEpisode, Seen,
    SessionInfo,
};

use crate::error::{Error, Result};

/// The store format this build writes; a store with a newer one is refused.
pub const FORMAT_VERSION: u8 = 1;

const CF_BLOBS: &str = "blobs";
const CF_CHANGES: &str = "changes";
const CF_BY_PATH: &str = "by_path";
const CF_BY_SESSION: &str = "by_session";
const CF_BY_AGENT: &str = "by_agent";
const CF_BY_TIME: &str = "by_time";
const CF_SESSIONS: &str = "sessions";
const CF_CHECKPOINTS: &str = "checkpoints";
const CF_META: &str = "meta";
const CF_EPISODES: &str = "open_episodes";
const CF_MANIFEST: &str = "manifest";
/// Every column family, for tools (and tests) that open the database directly.
pub const ALL_CFS: [&str; 11] = [
    CF_BLOBS,
    CF_CHANGES,
    CF_BY_PATH,
    CF_BY_SESSION,
    CF_BY_AGENT,
    CF_BY_TIME,
    CF_SESSIONS,
    CF_CHECKPOINTS,
    CF_META,
    CF_EPISODES,
    CF_MANIFEST,
];

/// Which end of the history a query starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    #[default]
    OldestFirst,
    NewestFirst,
}

/// A selection of changes. Every field narrows it; the default selects everything.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub path: Option<Vec<u8>>,
    pub session: Option<String>,
    pub agent: Option<String>,
    /// Only changes with `id > after_id`.
    pub after_id: Option<u64>,
    /// Only changes with `id <= until_id`.
    pub until_id: Option<u64>,
    /// Only changes with `time_ns >= since_ns`.
    pub since_ns: Option<u64>,
    /// Only changes with `time_ns <= until_ns`.
    pub until_ns: Option<u64>,
    pub order: Order,
    pub limit: Option<usize>,
}

impl Query {
    fn admits(&self, c: &Change) -> bool {
        self.path.as_ref().is_none_or(|p| touches(c, p))
            && self.session.as_ref().is_none_or(|s| *s == c.session)
            && self.agent.as_ref().is_none_or(|a| *a == c.agent)
            && self.after_id.is_none_or(|id| c.id > id)
            && self.until_id.is_none_or(|id| c.id <= id)
            && self.since_ns.is_none_or(|t| c.time_ns >= t)
            && self.until_ns.is_none_or(|t| c.time_ns <= t)
    }
}

/// Whether a change is indexed under `path`: its path, or a rename's old path.
fn touches(c: &Change, path: &[u8]) -> bool {
    c.path == path || c.from.as_deref() == Some(path)
}

/// Bookkeeping written in the same batch as a change.
#[derive(Default)]
pub struct Extra<'a> {
    /// The open-episode marker this change completes.
    pub finish_episode: Option<&'a [u8]>,
    /// Manifest entries to set (or, with `None`, remove).
    pub manifest: &'a [(Vec<u8>, Option<Seen>)],
    /// A directory renamed: move the manifest entries below the first path under the second.
    pub move_under: Option<(&'a [u8], &'a [u8])>,
}

/// What [`Store::gc`] may remove.
#[derive(Clone, Debug, Default)]
pub struct GcPolicy {
    /// Remove changes older than this time (ns since the epoch).
    pub older_than_ns: Option<u64>,
    /// Then remove the oldest changes until the stored content is at most this many bytes.
    pub max_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub changes_removed: u64,
    pub blobs_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Counts for `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub changes: u64,
    pub last_id: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

pub struct Store {
    db: DB,
    dir: PathBuf,
    read_only: bool,
    /// Set by the first failed write; every later write returns [`Error::Poisoned`].
    poisoned: Mutex<Option<String>>,
    /// Serializes id allocation with the batch that uses the id, so ids land in order.
    writer: Mutex<u64>,
    /// A reader's own scratch directory, removed on drop.
    secondary: Option<PathBuf>,
    /// Session summaries as last written, so recording a change does not read them back.
    sessions_cache: Mutex<HashMap<String, SessionInfo>>,
    /// Blobs stored or reused lately: a change about to be recorded may refer to them, so gc
    /// must not sweep them even when no recorded change does yet.
    recent_blobs: Mutex<RecentBlobs>,
    /// How many gcs have deleted blobs: content known to be stored before the last one still is.
    sweeps: AtomicU64,
}

/// How long content stored or reused stays safe from gc without a recorded change using it.
/// Long enough for any capture to reach its record (chunks of a huge file are written one by
/// one before the change that names them), short enough that gc frees space the same day.
const IN_FLIGHT: Duration = Duration::from_secs(3600);

/// Hashes noted by [`Store::keep_blob`], with when; pruned as it grows.
struct RecentBlobs {
    noted: HashMap<Hash, Instant>,
    prune_at: usize,
}

impl RecentBlobs {
    fn note(&mut self, hash: Hash) {
        self.noted.insert(hash, Instant::now());
        if self.noted.len() >= self.prune_at {
            self.noted.retain(|_, t| t.elapsed() < IN_FLIGHT);
            self.prune_at = (self.noted.len() * 2).max(4096);
        }
    }

    fn in_flight(&self) -> impl Iterator<Item = Hash> + '_ {
        self.noted
            .iter()
            .filter(|(_, t)| t.elapsed() < IN_FLIGHT)
            .map(|(h, _)| *h)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(dir) = &self.secondary {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Store {
    /// Open (creating if needed) the store in `dir` for reading and writing.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        // Blobs are compressed by us; records and index keys are tiny.
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        opts.set_keep_log_file_num(3);
        opts.set_max_total_wal_size(64 << 20);
        let cfs = ALL_CFS
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
        let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(|source| Error::Db {
            context: "open",
            source,
        })?;
        Self::finish_open(db, dir, false)
    }

    /// Open an existing store for reading only, alongside a running writer if there is one: a
    /// RocksDB secondary instance, which sees everything the writer had written when it opened.
    pub fn open_read_only(dir: &Path) -> Result<Store> {
        if !dir.join("CURRENT").exists() {
            return Err(Error::NotFound(format!("no store at {}", dir.display())));
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let secondary =
            std::env::temp_dir().join(format!("rewind-reader-{}-{n}", std::process::id()));
        let mut opts = Options::default();
        opts.set_max_open_files(-1);
        let cfs = ALL_CFS
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
        let db = DB::open_cf_descriptors_as_secondary(&opts, dir, &secondary, cfs).map_err(
            |source| Error::Db {
                context: "open for reading",
                source,
            },
        )?;
        let mut store = Self::finish_open(db, dir, true)?;
        store.secondary = Some(secondary);
        Ok(store)
    }

    fn finish_open(db: DB, dir: &Path, read_only: bool) -> Result<Store> {
        let mut store = Store {
            db,
            dir: dir.to_owned(),
            read_only,
            poisoned: Mutex::new(None),
            writer: Mutex::new(0),
            secondary: None,
            sessions_cache: Mutex::new(HashMap::new()),
            sweeps: AtomicU64::new(0),
            recent_blobs: Mutex::new(RecentBlobs {
                noted: HashMap::new(),
                prune_at: 4096,
            }),
        };
        match store.meta(b"format")? {
            Some(v) if v.first().copied().unwrap_or(0) > FORMAT_VERSION => {
                return Err(Error::Format {
                    found: v[0],
                    supported: FORMAT_VERSION,
                });
            }
            Some(_) => {}
            None if !read_only => store.put_meta(b"format", &[FORMAT_VERSION])?,
            None => {}
        }
        *store.writer.get_mut().expect("fresh mutex") = store.last_id()?;
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        // Every family in ALL_CFS is created at open, so a missing one is a bug in this file.
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    // ---- writing -------------------------------------------------------------------------

    /// `Ok` if writes are accepted: not read-only, and no earlier write failed.
    pub fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::Invalid("store is open read-only".into()));
        }
        match &*self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Run a write; on failure poison the store so nothing is written on top of an unknown state.
    fn write(&self, context: &'static str, batch: WriteBatch) -> Result<()> {
        self.check_writable()?;
        let mut opts = WriteOptions::default();
        opts.set_sync(false);
        self.db.write_opt(batch, &opts).map_err(|source| {
            let why = source.to_string();
            tracing::error!("store write failed ({context}): {why}; refusing further writes");
            *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            Error::Db { context, source }
        })
    }

    pub fn put_meta(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), key, value);
        self.write("meta", batch)
    }

    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db
            .get_cf(self.cf(CF_META), key)
            .map_err(|source| Error::Db {
                context: "read meta",
                source,
            })
    }

    /// Store `data` as a blob (once: identical content is not stored again) and return its hash.
    pub fn put_blob(&self, data: &[u8]) -> Result<Hash> {
        if data.len() > CHUNK {
            return self.put_blob_reader(data).map(|(hash, _)| hash);
        }
        let hash = Hash::of(data);
        self.put_inline(&hash, data)?;
        Ok(hash)
    }

    fn put_inline(&self, hash: &Hash, data: &[u8]) -> Result<()> {
        if self.keep_blob(hash)? {
            return self.check_writable();
        }
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_BLOBS), hash.0, blob::encode_inline(data));
        self.write("put blob", batch)
    }

    /// Store everything `reader` yields, one chunk in memory at a time. Returns hash and size.
    pub fn put_blob_reader(&self, reader: impl Read) -> Result<(Hash, u64)> {
        // Most content is small: read it into a buffer of its own size, not a chunk's.
        let mut reader = reader;
        let mut buf = Vec::new();
        let first = (&mut reader)
            .take(CHUNK as u64)
            .read_to_end(&mut buf)
            .map_err(|source| Error::Io {
                path: PathBuf::from("<content being stored>"),
                source,
            })?;
        if first < CHUNK {
            let hash = self.put_blob(&buf)?;
            return Ok((hash, first as u64));
        }
        let mut whole = blake3::Hasher::new();
        let mut manifest = Manifest {
            size: 0,
            chunks: Vec::new(),
        };
        let mut len = first;
        while len > 0 {
            let chunk = &buf[..len];
            whole.update(chunk);
            let hash = Hash::of(chunk);
            self.put_inline(&hash, chunk)?;
            manifest.chunks.push((hash, len as u32));
            manifest.size += len as u64;
            len = read_full(&mut reader, &mut buf)?;
        }
        let hash = Hash(*whole.finalize().as_bytes());
        if !self.keep_blob(&hash)? {
            let mut batch = WriteBatch::default();
            batch.put_cf(self.cf(CF_BLOBS), hash.0, blob::encode_manifest(&manifest));
            self.write("put manifest", batch)?;
        }
        Ok((hash, manifest.size))
    }

    /// Record a change: allocate its id and write it with its index entries in one batch.
    /// The blobs it refers to must already be stored.
    pub fn record(&self, change: NewChange) -> Result<Change> {
        self.record_with(change, &Extra::default())
    }

    /// [`record`](Store::record), with bookkeeping that must land in the same batch.
    pub fn record_with(&self, change: NewChange, extra: &Extra<'_>) -> Result<Change> {
        let mut recorded = self.record_many(vec![(change, extra)])?;
        Ok(recorded.pop().expect("one change in, one out"))
    }

    /// Record several changes in one batch, with consecutive ids in the order given: one write
    /// for many, as a burst of deletes (`rm -rf`) is recorded.
    pub fn record_many(&self, items: Vec<(NewChange, &Extra<'_>)>) -> Result<Vec<Change>> {
        self.check_writable()?;
        for (change, _) in &items {
            validate_name("session", &change.session)?;
            validate_name("agent", &change.agent)?;
        }
        let mut last_id = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = WriteBatch::default();
        let mut sessions: HashMap<String, SessionInfo> = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for (i, (change, extra)) in items.into_iter().enumerate() {
            let change = change.with_id(*last_id + 1 + i as u64);
            batch.put_cf(
                self.cf(CF_CHANGES),
                keys::change(change.id),
                codec::encode(&change),
            );
            batch.put_cf(
                self.cf(CF_BY_PATH),
                keys::named(&change.path, change.id),
                b"",
            );
            if let Some(from) = &change.from {
                batch.put_cf(self.cf(CF_BY_PATH), keys::named(from, change.id), b"");
            }
            let session_key = keys::named(change.session.as_bytes(), change.id);
            batch.put_cf(self.cf(CF_BY_SESSION), session_key, b"");
            let agent_key = keys::named(change.agent.as_bytes(), change.id);
            batch.put_cf(self.cf(CF_BY_AGENT), agent_key, b"");
            batch.put_cf(
                self.cf(CF_BY_TIME),
                keys::time(change.time_ns, change.id),
                b"",
            );
            let session = match sessions.get_mut(&change.session) {
                Some(info) => {
                    info.count_in(&change);
                    info.clone()
                }
                None => self.updated_session(&change)?,
            };
            batch.put_cf(
                self.cf(CF_SESSIONS),
                change.session.as_bytes(),
                codec::encode(&session),
            );
            sessions.insert(session.name.clone(), session);
            if let Some(path) = extra.finish_episode {
                batch.delete_cf(self.cf(CF_EPISODES), path);
            }
            if let Some((from, to)) = extra.move_under {
                self.move_manifest_under(&mut batch, from, to)?;
            }
            for (path, seen) in extra.manifest {
                match seen {
                    Some(seen) => batch.put_cf(self.cf(CF_MANIFEST), path, codec::encode(seen)),
                    None => batch.delete_cf(self.cf(CF_MANIFEST), path),
                }
            }
            out.push(change);
        }
        self.write("record change", batch)?;
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sessions);
        *last_id += out.len() as u64;
        Ok(out)
    }

    fn move_manifest_under(&self, batch: &mut WriteBatch, from: &[u8], to: &[u8]) -> Result<()> {
        let mut prefix = from.to_vec();
        prefix.push(b'/');
        let cf = self.cf(CF_MANIFEST);
        for item in self
            .db
            .iterator_cf(cf, IteratorMode::From(&prefix, Direction::Forward))
        {
            let (key, value) = item.map_err(|source| Error::Db {
                context: "scan manifest",
                source,
            })?;
            if !key.starts_with(&prefix) {
                break;
            }
            let mut moved = to.to_vec();
            moved.extend_from_slice(&key[from.len()..]);
            batch.delete_cf(cf, &key);
            batch.put_cf(cf, moved, value);
        }
        Ok(())
    }

    /// Replace the whole manifest (after the scan at mount).
    pub fn replace_manifest(&self, entries: &[(Vec<u8>, Seen)]) -> Result<()> {
        let cf = self.cf(CF_MANIFEST);
        let mut batch = WriteBatch::default();
        for item in self.db.iterator_cf(cf, IteratorMode::Start) {
            let (key, _) = item.map_err(|source| Error::Db {
                context: "scan manifest",
                source,
            })?;
            batch.delete_cf(cf, key);
        }
        for (path, seen) in entries {
            batch.put_cf(cf, path, codec::encode(seen));
        }
        batch.put_cf(self.cf(CF_META), b"manifest", [1u8]);
        self.write("replace manifest", batch)
    }

    /// Take back the newest change, recorded before an operation that then failed.
    pub fn retract(&self, change: &Change) -> Result<()> {
        let last_id = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = WriteBatch::default();
        self.delete_change(&mut batch, change);
        match self.session(&change.session)? {
            Some(mut info) if info.count > 1 => {
                info.count -= 1;
                let key = change.session.as_bytes();
                batch.put_cf(self.cf(CF_SESSIONS), key, codec::encode(&info));
            }
            _ => batch.delete_cf(self.cf(CF_SESSIONS), change.session.as_bytes()),
        }
        self.write("retract change", batch)?;
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Ids stay strictly increasing: a retracted id is not handed out again.
        drop(last_id);
        Ok(())
    }

    fn delete_change(&self, batch: &mut WriteBatch, c: &Change) {
        batch.delete_cf(self.cf(CF_CHANGES), keys::change(c.id));
        batch.delete_cf(self.cf(CF_BY_PATH), keys::named(&c.path, c.id));
        if let Some(from) = &c.from {
            batch.delete_cf(self.cf(CF_BY_PATH), keys::named(from, c.id));
        }
        batch.delete_cf(
            self.cf(CF_BY_SESSION),
            keys::named(c.session.as_bytes(), c.id),
        );
        batch.delete_cf(self.cf(CF_BY_AGENT), keys::named(c.agent.as_bytes(), c.id));
        batch.delete_cf(self.cf(CF_BY_TIME), keys::time(c.time_ns, c.id));
    }

    /// Note that a write episode on `path` has begun (its before content is already stored), so
    /// a crash before it ends can still be recorded at the next mount.
    pub fn put_open_episode(&self, path: &[u8], episode: &OpenEpisode) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_EPISODES), path, codec::encode(episode));
        self.write("open episode", batch)
    }

    pub fn drop_open_episode(&self, path: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(CF_EPISODES), path);
        self.write("drop episode", batch)
    }

    pub fn open_episodes(&self) -> Result<Vec<(Vec<u8>, OpenEpisode)>> {
        self.decode_all_keyed(CF_EPISODES)
    }

    /// The manifest: what the mount last saw at each path.
    pub fn manifest(&self) -> Result<Vec<(Vec<u8>, Seen)>> {
        self.decode_all_keyed(CF_MANIFEST)
    }

    /// Update manifest entries outside of a change (metadata-only updates, the scan at mount).
    pub fn put_manifest(&self, entries: &[(Vec<u8>, Option<Seen>)]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (path, seen) in entries {
            match seen {
                Some(seen) => batch.put_cf(self.cf(CF_MANIFEST), path, codec::encode(seen)),
                None => batch.delete_cf(self.cf(CF_MANIFEST), path),
            }
        }
        self.write("manifest", batch)
    }

    fn updated_session(&self, change: &Change) -> Result<SessionInfo> {
        let cached = self
            .sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&change.session)
            .cloned();
        let stored = match cached {
            Some(info) => Some(info),
            None => self.session(&change.session)?,
        };
        let mut info = stored.unwrap_or_else(|| SessionInfo::started_by(change));
        info.count_in(change);
        Ok(info)
    }

    /// Name the current end of the history.
    pub fn put_checkpoint(&self, name: &str, time_ns: u64) -> Result<Checkpoint> {
        validate_name("checkpoint", name)?;
        let id = *self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let checkpoint = Checkpoint {
            name: name.to_owned(),
            id,
            time_ns,
        };
        let mut batch = WriteBatch::default();
        batch.put_cf(
            self.cf(CF_CHECKPOINTS),
            name.as_bytes(),
            codec::encode(&checkpoint),
        );
        self.write("checkpoint", batch)?;
        Ok(checkpoint)
    }

    /// Make everything written so far durable against a machine crash.
    pub fn sync(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.check_writable()?;
        self.db.flush_wal(true).map_err(|source| {
            *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(source.to_string());
            Error::Db {
                context: "sync",
                source,
            }
        })
    }

    // ---- reading -------------------------------------------------------------------------

    /// Whether the blob `hash` is stored, and if so keep it from the next gc: for a change about
    /// to refer to content stored earlier (gc removes blobs no recorded change refers to).
    /// A chunked blob's chunks are kept through it.
    pub fn keep_blob(&self, hash: &Hash) -> Result<bool> {
        // Noted before looking, so a gc either sees the note or has already deleted the blob
        // (and we store it again).
        self.recent_blobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(*hash);
        self.has_blob(hash)
    }

    /// [`keep_blob`](Store::keep_blob) for content known to be stored when
    /// [`sweeps`](Store::sweeps) was `sweeps`: unless a gc has deleted blobs since, it still is,
    /// and there is nothing to look up.
    pub fn keep_blob_since(&self, hash: &Hash, sweeps: u64) -> Result<bool> {
        self.recent_blobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(*hash);
        if self.sweeps() == sweeps {
            return Ok(true);
        }
        self.has_blob(hash)
    }

    /// How many gcs so far have deleted blobs.
    pub fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::SeqCst)
    }

    pub fn has_blob(&self, hash: &Hash) -> Result<bool> {
        let cf = self.cf(CF_BLOBS);
        if !self.db.key_may_exist_cf(cf, hash.0) {
            return Ok(false);
        }
        Ok(self
            .db
            .get_pinned_cf(cf, hash.0)
            .map_err(|source| Error::Db {
                context: "read blob",
                source,
            })?
            .is_some())
    }

    fn blob(&self, hash: &Hash) -> Result<Blob> {
        let value = self
            .db
            .get_pinned_cf(self.cf(CF_BLOBS), hash.0)
            .map_err(|source| Error::Db {
                context: "read blob",
                source,
            })?
            .ok_or_else(|| Error::Corrupt {
                cf: CF_BLOBS,
                key: hash.to_hex(),
                reason: "blob is missing".into(),
            })?;
        blob::decode(hash, &value)
    }

    /// Write a blob's content to `out`, one chunk at a time. Returns the number of bytes.
    pub fn read_blob_to(&self, hash: &Hash, out: &mut impl Write) -> Result<u64> {
        let io = |source| Error::Io {
            path: PathBuf::from(format!("<blob {}>", hash.to_hex())),
            source,
        };
        match self.blob(hash)? {
            Blob::Inline(data) => {
                out.write_all(&data).map_err(io)?;
                Ok(data.len() as u64)
            }
            Blob::Chunked(manifest) => {
                let mut whole = blake3::Hasher::new();
                for (chunk_hash, _) in &manifest.chunks {
                    let Blob::Inline(data) = self.blob(chunk_hash)? else {
                        return Err(corrupt_blob(hash, "a chunk is itself a manifest"));
                    };
                    whole.update(&data);
                    out.write_all(&data).map_err(io)?;
                }
                if whole.finalize().as_bytes() != &hash.0 {
                    return Err(corrupt_blob(hash, "chunks do not add up to the hash"));
                }
                Ok(manifest.size)
            }
        }
    }

    /// A blob's whole content in memory. For content that may be large use [`read_blob_to`].
    ///
    /// [`read_blob_to`]: Store::read_blob_to
    pub fn read_blob(&self, hash: &Hash) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_blob_to(hash, &mut out)?;
        Ok(out)
    }

    pub fn change(&self, id: u64) -> Result<Option<Change>> {
        let key = keys::change(id);
        let value = self
            .db
            .get_pinned_cf(self.cf(CF_CHANGES), key)
            .map_err(|source| Error::Db {
                context: "read change",
                source,
            })?;
        value
            .map(|v| codec::decode(CF_CHANGES, &key, &v))
            .transpose()
    }

    /// The id of the newest change, 0 for an empty store.
    pub fn last_id(&self) -> Result<u64> {
        let mut iter = self.db.iterator_cf(self.cf(CF_CHANGES), IteratorMode::End);
        match iter.next() {
            None => Ok(0),
            Some(item) => {
                let (key, _) = item.map_err(|source| Error::Db {
                    context: "scan changes",
                    source,
                })?;
                keys::change_id(&key).ok_or_else(|| Error::Corrupt {
                    cf: CF_CHANGES,
                    key: keys::hex(&key),
                    reason: "key is not an id".into(),
                })
            }
        }
    }

    /// The changes a query selects, in its order, up to its limit.
    pub fn query(&self, q: &Query) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        self.for_each(q, |c| {
            out.push(c);
            true
        })?;
        Ok(out)
    }

    /// Visit the changes a query selects until `visit` returns false or the limit is reached.
    pub fn for_each(&self, q: &Query, mut visit: impl FnMut(Change) -> bool) -> Result<()> {
        let limit = q.limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(());
        }
        let mut seen = 0;
        let mut take = |c: Change| -> bool {
            if !q.admits(&c) {
                return true;
            }
            seen += 1;
            visit(c) && seen < limit
        };
        // Pick the narrowest index; every other condition is a filter.
        let (cf, name) = if let Some(p) = &q.path {
            (CF_BY_PATH, Some(p.as_slice()))
        } else if let Some(s) = &q.session {
            (CF_BY_SESSION, Some(s.as_bytes()))
        } else if let Some(a) = &q.agent {
            (CF_BY_AGENT, Some(a.as_bytes()))
        } else {
            (CF_CHANGES, None)
        };
        let lo_id = q.after_id.map_or(0, |id| id.saturating_add(1));
        let hi_id = q.until_id.unwrap_or(u64::MAX);
        let (prefix, start) = match (name, q.order) {
            (Some(n), Order::OldestFirst) => (keys::named_prefix(n), keys::named(n, lo_id)),
            (Some(n), Order::NewestFirst) => (keys::named_prefix(n), keys::named(n, hi_id)),
            (None, Order::OldestFirst) => (Vec::new(), keys::change(lo_id).to_vec()),
            (None, Order::NewestFirst) => (Vec::new(), keys::change(hi_id).to_vec()),
        };
        let direction = match q.order {
            Order::OldestFirst => Direction::Forward,
            Order::NewestFirst => Direction::Reverse,
        };
        let iter = self
            .db
            .iterator_cf(self.cf(cf), IteratorMode::From(&start, direction));
        for item in iter {
            let (key, value) = item.map_err(|source| Error::Db {
                context: "scan",
                source,
            })?;
            if !key.starts_with(&prefix) {
                break;
            }
            let change = if name.is_some() {
                let id = keys::trailing_id(&key).ok_or_else(|| Error::Corrupt {
                    cf,
                    key: keys::hex(&key),
                    reason: "index key without an id".into(),
                })?;
                match self.change(id)? {
                    Some(c) => c,
                    // An index entry whose change gc removed in another batch: skip it.
                    None => continue,
                }
            } else {
                codec::decode(CF_CHANGES, &key, &value)?
            };
            if !take(change) {
                break;
            }
        }
        Ok(())
    }

    /// The first change to `path` (directly, or as a rename's source) with an id above `id`.
    pub fn first_change_after(&self, path: &[u8], id: u64) -> Result<Option<Change>> {
        let q = Query {
            path: Some(path.to_vec()),
            after_id: Some(id),
            limit: Some(1),
            ..Query::default()
        };
        Ok(self.query(&q)?.pop())
    }

    /// The newest change to `path` with an id at most `id`.
    pub fn last_change_until(&self, path: &[u8], id: u64) -> Result<Option<Change>> {
        let q = Query {
            path: Some(path.to_vec()),
            until_id: Some(id),
            order: Order::NewestFirst,
            limit: Some(1),
            ..Query::default()
        };
        Ok(self.query(&q)?.pop())
    }

    /// Every distinct path with history whose bytes start with `prefix`, in byte order.
    pub fn paths_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let iter = self.db.iterator_cf(
            self.cf(CF_BY_PATH),
            IteratorMode::From(prefix, Direction::Forward),
        );
        for item in iter {
            let (key, _) = item.map_err(|source| Error::Db {
                context: "scan paths",
                source,
            })?;
            if !key.starts_with(prefix) {
                break;
            }
            let Some(name) = keys::name_of(&key) else {
                continue;
            };
            if out.last().map(Vec::as_slice) != Some(name) {
                out.push(name.to_vec());
            }
        }
        Ok(out)
    }

    /// The id of the last change at or before `time_ns` (0 if there is none).
    pub fn id_at_time(&self, time_ns: u64) -> Result<u64> {
        let start = keys::time(time_ns, u64::MAX);
        let mut iter = self.db.iterator_cf(
            self.cf(CF_BY_TIME),
            IteratorMode::From(&start, Direction::Reverse),
        );
        match iter.next() {
            None => Ok(0),
            Some(item) => {
                let (key, _) = item.map_err(|source| Error::Db {
                    context: "scan time",
                    source,
                })?;
                Ok(keys::trailing_id(&key).unwrap_or(0))
            }
        }
    }

    pub fn session(&self, name: &str) -> Result<Option<SessionInfo>> {
        let value = self
            .db
            .get_pinned_cf(self.cf(CF_SESSIONS), name.as_bytes())
            .map_err(|source| Error::Db {
                context: "read session",
                source,
            })?;
        value
            .map(|v| codec::decode(CF_SESSIONS, name.as_bytes(), &v))
            .transpose()
    }

    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        self.decode_all(CF_SESSIONS)
    }

    pub fn checkpoint(&self, name: &str) -> Result<Option<Checkpoint>> {
        let value = self
            .db
            .get_pinned_cf(self.cf(CF_CHECKPOINTS), name.as_bytes())
            .map_err(|source| Error::Db {
                context: "read checkpoint",
                source,
            })?;
        value
            .map(|v| codec::decode(CF_CHECKPOINTS, name.as_bytes(), &v))
            .transpose()
    }

    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        self.decode_all(CF_CHECKPOINTS)
    }

    fn decode_all_keyed<T: serde::de::DeserializeOwned>(
        &self,
        cf: &'static str,
    ) -> Result<Vec<(Vec<u8>, T)>> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(cf), IteratorMode::Start) {
            let (key, value) = item.map_err(|source| Error::Db {
                context: "scan",
                source,
            })?;
            out.push((key.to_vec(), codec::decode(cf, &key, &value)?));
        }
        Ok(out)
    }

    fn decode_all<T: serde::de::DeserializeOwned>(&self, cf: &'static str) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(cf), IteratorMode::Start) {
            let (key, value) = item.map_err(|source| Error::Db {
                context: "scan",
                source,
            })?;
            out.push(codec::decode(cf, &key, &value)?);
        }
        Ok(out)
    }

    pub fn stats(&self) -> Result<Stats> {
        let mut stats = Stats {
            last_id: self.last_id()?,
            ..Stats::default()
        };
        for item in self
            .db
            .iterator_cf(self.cf(CF_CHANGES), IteratorMode::Start)
        {
            item.map_err(|source| Error::Db {
                context: "scan",
                source,
            })?;
            stats.changes += 1;
        }
        for item in self.db.iterator_cf(self.cf(CF_BLOBS), IteratorMode::Start) {
            let (_, value) = item.map_err(|source| Error::Db {
                context: "scan",
                source,
            })?;
            stats.blobs += 1;
            stats.blob_bytes += value.len() as u64;
        }
        Ok(stats)
    }

    // ---- retention -----------------------------------------------------------------------

    /// Remove old changes, then unreferenced blobs. Never removes the newest change of a path
    /// and never a blob that a remaining change (or a chunk of one) refers to.
    pub fn gc(&self, policy: &GcPolicy) -> Result<GcReport> {
        self.check_writable()?;
        // Hold the writer lock so no change is recorded between planning and deleting.
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let all = self.query(&Query::default())?;
        let mut newest_of_path: HashMap<&[u8], u64> = HashMap::new();
        for c in &all {
            newest_of_path.insert(&c.path, c.id);
            if let Some(from) = &c.from {
                newest_of_path.insert(from, c.id);
            }
        }
        let is_newest = |c: &Change| {
            newest_of_path.get(c.path.as_slice()) == Some(&c.id)
                || c.from
                    .as_ref()
                    .and_then(|f| newest_of_path.get(f.as_slice()))
                    == Some(&c.id)
        };

        // Every blob's size, and the chunks of the chunked ones (only manifests are decoded).
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        let mut chunks_of: HashMap<Hash, Vec<Hash>> = HashMap::new();
        for item in self.db.iterator_cf(self.cf(CF_BLOBS), IteratorMode::Start) {
            let (key, value) = item.map_err(|source| Error::Db {
                context: "scan blobs",
                source,
            })?;
            let Ok(hash) = <[u8; 32]>::try_from(&key[..]).map(Hash) else {
                continue;
            };
            if let Some(m) = blob::manifest_of(&hash, &value)? {
                chunks_of.insert(hash, m.chunks.into_iter().map(|(h, _)| h).collect());
            }
            sizes.insert(hash, value.len() as u64);
        }
        let with_chunks = |hash: Hash| {
            std::iter::once(hash).chain(chunks_of.get(&hash).into_iter().flatten().copied())
        };

        // Reference counts: from every change, and from write episodes still open (their
        // content from before is stored, and their change is not recorded yet).
        let mut refs: HashMap<Hash, u64> = HashMap::new();
        let open: Vec<Hash> = self
            .open_episodes()?
            .into_iter()
            .filter_map(|(_, e)| e.before.and_then(|b| b.hash))
            .collect();
        for hash in all.iter().flat_map(content_hashes).chain(open) {
            for h in with_chunks(hash) {
                *refs.entry(h).or_insert(0) += 1;
            }
        }
        let mut unreferenced: Vec<Hash> = sizes
            .keys()
            .filter(|h| !refs.contains_key(h))
            .copied()
            .collect();
        let bytes_before: u64 = sizes.values().sum();
        let mut live: u64 = refs.keys().filter_map(|h| sizes.get(h)).sum();

        // Oldest first, so the size budget removes the oldest history.
        let mut doomed = Vec::new();
        for c in &all {
            let too_old = policy.older_than_ns.is_some_and(|t| c.time_ns < t);
            let too_big = policy.max_bytes.is_some_and(|max| live > max);
            if is_newest(c) || !(too_old || too_big) {
                continue;
            }
            for hash in content_hashes(c) {
                for h in with_chunks(hash) {
                    let n = refs.get_mut(&h).expect("counted above");
                    *n -= 1;
                    if *n == 0 {
                        live = live.saturating_sub(sizes.get(&h).copied().unwrap_or(0));
                        unreferenced.push(h);
                    }
                }
            }
            doomed.push(c);
        }

        let mut batch = WriteBatch::default();
        for c in &doomed {
            self.delete_change(&mut batch, c);
        }
        // Blobs stored or reused lately may belong to a change not recorded yet: keep them.
        // The lock is held until the batch is written, so `keep_blob` either noted its hash
        // in time or finds the blob gone (and it is stored again).
        let recent = self.recent_blobs.lock().unwrap_or_else(|e| e.into_inner());
        let kept: HashSet<Hash> = recent.in_flight().flat_map(with_chunks).collect();
        unreferenced.retain(|h| !kept.contains(h));
        unreferenced.sort();
        unreferenced.dedup();
        for h in &unreferenced {
            batch.delete_cf(self.cf(CF_BLOBS), h.0);
        }
        self.write("gc", batch)?;
        if !unreferenced.is_empty() {
            // Before the note table is unlocked: a capture that notes after this sees it.
            self.sweeps.fetch_add(1, Ordering::SeqCst);
        }
        drop(recent);
        self.rebuild_sessions()?;
        self.db
            .compact_range_cf(self.cf(CF_BLOBS), None::<&[u8]>, None::<&[u8]>);
        Ok(GcReport {
            changes_removed: doomed.len() as u64,
            blobs_removed: unreferenced.len() as u64,
            bytes_before,
            bytes_after: bytes_before
                - unreferenced
                    .iter()
                    .filter_map(|h| sizes.get(h))
                    .sum::<u64>(),
        })
    }

    /// Recompute session summaries from the remaining changes (after gc removed some).
    fn rebuild_sessions(&self) -> Result<()> {
        let mut sessions: HashMap<String, SessionInfo> = HashMap::new();
        for c in self.query(&Query::default())? {
            sessions
                .entry(c.session.clone())
                .or_insert_with(|| SessionInfo::started_by(&c))
                .count_in(&c);
        }
        let mut batch = WriteBatch::default();
        for old in self.sessions()? {
            if !sessions.contains_key(&old.name) {
                batch.delete_cf(self.cf(CF_SESSIONS), old.name.as_bytes());
            }
        }
        for info in sessions.values() {
            batch.put_cf(
                self.cf(CF_SESSIONS),
                info.name.as_bytes(),
                codec::encode(info),
            );
        }
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.write("gc sessions", batch)
    }
}

/// The blobs a change refers to.
fn content_hashes(c: &Change) -> impl Iterator<Item = Hash> + '_ {
    [&c.before, &c.after]
        .into_iter()
        .filter_map(|s| s.as_ref().and_then(|s| s.hash))
}

fn corrupt_blob(hash: &Hash, reason: &str) -> Error {
    Error::Corrupt {
        cf: CF_BLOBS,
        key: hash.to_hex(),
        reason: reason.into(),
    }
}

/// Names (sessions, agents, checkpoints) become key prefixes, so NUL is not allowed in them.
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 200 || name.contains('\0') || name.contains('\n') {
        return Err(Error::Invalid(format!(
            "{what} name {name:?} must be 1 to 200 bytes without NUL or newline"
        )));
    }
    Ok(())
}

/// Fill `buf` as far as the reader allows; fewer bytes than its length means end of input.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::Io {
                    path: PathBuf::from("<content being stored>"),
                    source,
                });
            }
        }
    }
    Ok(filled)
}
