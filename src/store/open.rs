//! Opening a store: for writing (the daemon, or a command on an unmounted workspace) or for
//! reading beside a running writer; checking that its files are all there, that it lies
//! outside its workspace and that only its owner can read it; and reopening it after a failed
//! write.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, IteratorMode, Options, WriteBufferManager,
};

use super::{ALL_CFS, CF_BLOBS, CF_CHANGES, CF_META, Error, FORMAT_VERSION, Result, Store, keys};

/// `meta` key of the store's format version (one byte).
pub(super) const FORMAT_KEY: &[u8] = b"format";

/// RocksDB's memory, sized on purpose rather than left to its per-family defaults (a 32 MiB
/// block cache and 64 MiB of write buffers for each of the twelve families, plus every
/// table's index and filter blocks outside any cache): one block cache shared by every family,
/// holding the index and filter blocks too, and one budget for every family's write buffers.
/// The daemon's resident memory stays near the sum, whatever the number of changes.
struct Memory {
    cache: Cache,
    buffers: WriteBufferManager,
    /// The budget for all write buffers together.
    budget: usize,
}

/// The shared block cache (data, index and filter blocks of every family).
const BLOCK_CACHE: usize = 16 << 20;
/// All write buffers together, at most: half the reserve on small disks (see
/// [`write_buffers`]).
const WRITE_BUFFERS: usize = 32 << 20;
/// One write buffer of a family other than `blobs`: records and index keys are small, and a
/// flush of a few MiB is cheap.
const SMALL_BUFFER: usize = 4 << 20;

impl Memory {
    fn new(dir: &Path) -> Memory {
        let budget = buffer_budget(dir);
        Memory {
            cache: Cache::new_lru_cache(BLOCK_CACHE),
            buffers: WriteBufferManager::new_write_buffer_manager(budget, false),
            budget,
        }
    }

    /// Options every family shares: tables read through the shared cache.
    fn family(&self, name: &str) -> Options {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&self.cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        let mut opts = Options::default();
        opts.set_block_based_table_factory(&table);
        // Blobs are compressed by us; records and index keys are tiny.
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        let buffer = if name == CF_BLOBS {
            self.budget / 2
        } else {
            SMALL_BUFFER.min(self.budget / 4)
        };
        opts.set_write_buffer_size(buffer.max(1 << 20));
        opts.set_max_write_buffer_number(2);
        if name == CF_BLOBS {
            // Compaction in pieces that fit beside the reserve (gc's on a nearly full disk,
            // `gc::compaction_need`): small files, at most a few of them in one job, and a first
            // level under level 0 no larger than the write buffers, so that merging level 0
            // (whose files span every hash) rewrites that level and not the whole store. (Level
            // 0 is also compacted once it holds that much: smaller, and recording a tree would
            // set compactions off while it is being deleted.)
            let piece = blob_piece(self.budget);
            opts.set_target_file_size_base(piece);
            opts.set_max_compaction_bytes(blob_job_limit(self.budget));
            opts.set_max_bytes_for_level_base(self.budget as u64);
        }
        test_stall(&mut opts);
        opts
    }
}

/// The write buffers' budget of a store in `dir`.
fn buffer_budget(dir: &Path) -> usize {
    write_buffers(dir).min(WRITE_BUFFERS)
}

/// The size of the `blobs` family's table files: an eighth of the write buffers, 1 to 8 MiB.
fn blob_piece(budget: usize) -> u64 {
    (budget / 8).clamp(1 << 20, 8 << 20) as u64
}

/// What one compaction job of the `blobs` family takes in at most, beyond its first table and
/// what that overlaps (RocksDB's `max_compaction_bytes`).
fn blob_job_limit(budget: usize) -> u64 {
    2 * blob_piece(budget)
}

/// [`blob_job_limit`] for a store in `dir` (for gc's room check).
pub(super) fn blob_compaction_limit(dir: &Path) -> u64 {
    blob_job_limit(buffer_budget(dir))
}

/// Tests only: with `REWIND_TEST_STALL=PATH` set, RocksDB's write stall is easy to reach, to
/// show that no write waits in it: tiny write buffers, writes slowed after three tables wait
/// in level 0 and stopped after four, and every compaction waits while PATH exists (so the
/// tables pile up). Removing PATH lets compaction finish, which ends the stall. PATH must lie
/// outside the workspace.
fn test_stall(opts: &mut Options) {
    let Some(path) = std::env::var_os("REWIND_TEST_STALL").map(PathBuf::from) else {
        return;
    };
    opts.set_write_buffer_size(64 << 10);
    opts.set_level_zero_file_num_compaction_trigger(2);
    opts.set_level_zero_slowdown_writes_trigger(3);
    opts.set_level_zero_stop_writes_trigger(4);
    opts.set_compaction_filter("rewind-test-stall", move |_, _, _| {
        while path.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        rocksdb::CompactionDecision::Keep
    });
}

fn options(memory: &Memory) -> Options {
    let mut opts = memory.family(CF_META);
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // RocksDB's own log (`LOG`) grows by about 100 KB a gc (its compactions) and by a
    // statistics dump every 10 minutes, whatever changed: a new file at 1 MiB, three kept.
    opts.set_max_log_file_size(1 << 20);
    opts.set_keep_log_file_num(3);
    opts.set_max_total_wal_size(memory.budget as u64);
    opts.set_write_buffer_manager(&memory.buffers);
    // Preallocated log and table files would take the reserve's room before anything is
    // written to them (ext4 keeps what a failed `fallocate` got). The crate has no setter.
    match opts.get_options_from_string("allow_fallocate=false") {
        Ok(without) => without,
        Err(e) => {
            tracing::warn!("cannot turn off fallocate in the store: {e}");
            opts
        }
    }
}

/// A reader opens every table file at once (`max_open_files` -1), on one thread: RocksDB's
/// default of 16 threads for it per column family started 192 threads for each `rewind log`,
/// and a reader changes nothing, so the tables' statistics (for compaction) are not read.
fn reading_only(opts: &mut Options) {
    opts.set_max_file_opening_threads(1);
    opts.set_skip_stats_update_on_db_open(true);
}

/// What RocksDB may hold unflushed (its write buffers, and so its log): half the reserve kept
/// on the store's disk (see `write::reserve_for`), so that flushing them always fits.
fn write_buffers(dir: &Path) -> usize {
    let size = super::write::disk_space(dir).map_or(u64::MAX, |(size, _)| size);
    (super::write::reserve_for(size) / 2) as usize
}

fn descriptors(memory: &Memory) -> impl Iterator<Item = ColumnFamilyDescriptor> + '_ {
    ALL_CFS
        .iter()
        .map(move |name| ColumnFamilyDescriptor::new(*name, memory.family(name)))
}

/// Open the database for writing, its files created private (see [`private_files`]), after
/// checking again that it lies outside `workspace` (a symlink on the way may have changed).
fn open_db(dir: &Path, workspace: Option<&Path>) -> Result<DB> {
    if let Some(ws) = workspace {
        check_outside(dir, ws)?;
    }
    let _private = PrivateUmask::set();
    let memory = Memory::new(dir);
    let db = DB::open_cf_descriptors(&options(&memory), dir, descriptors(&memory))
        .map_err(|source| classify_open_error(dir, source))?;
    check_files(&db, dir)?;
    Ok(db)
}

/// How long opening a store for writing waits for another process to let go of it.
const LOCK_WAIT: Duration = Duration::from_secs(15);

/// [`open_db`], waiting up to [`LOCK_WAIT`] while another process holds the store's lock: a
/// daemon whose mount is gone (`fusermount3 -u` returns once the kernel lets go) may still be
/// recording the last edits and syncing, and `rewind mount` right after it would otherwise
/// fail on RocksDB's lock file. Past that, a clear refusal.
fn open_db_waiting(dir: &Path, workspace: Option<&Path>) -> Result<DB> {
    let give_up = Instant::now() + LOCK_WAIT;
    loop {
        match open_db(dir, workspace) {
            Err(Error::Db { source, .. }) if is_lock_error(&source) => {
                if Instant::now() >= give_up {
                    return Err(Error::Refused {
                        dir: dir.to_owned(),
                        reason: "in use by another process (the daemon of a mount of this store, \
                                 or a command writing it): unmount that workspace, or wait for \
                                 the command, and try again"
                            .into(),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Whether RocksDB refused to open a store because another process holds its `LOCK`.
fn is_lock_error(e: &rocksdb::Error) -> bool {
    e.kind() == rocksdb::ErrorKind::IOError && e.to_string().contains("lock file")
}

/// The umask every file of a store is created under: only its owner may read it.
const PRIVATE_UMASK: rustix::fs::Mode = rustix::fs::Mode::RWXG.union(rustix::fs::Mode::RWXO);

/// Make every file this process creates from now on private to its owner (umask 077): for a
/// process that keeps a store open for writing, whose database creates files (logs, tables,
/// manifests) as long as it runs. The daemon's FUSE threads create the workspace's files with
/// a umask of their own (`fs::backing`), so this does not change them.
pub fn private_files() {
    rustix::process::umask(PRIVATE_UMASK);
}

/// The umask set to 077 while a store is opened, and the caller's put back after.
struct PrivateUmask(rustix::fs::Mode);

impl PrivateUmask {
    fn set() -> PrivateUmask {
        PrivateUmask(rustix::process::umask(PRIVATE_UMASK))
    }
}

impl Drop for PrivateUmask {
    fn drop(&mut self) {
        rustix::process::umask(self.0);
    }
}

/// `path` made absolute with every symlink resolved, whether or not it exists yet: its
/// nearest existing ancestor is resolved and the missing rest appended (a dangling symlink is
/// followed to where it points).
pub fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    resolve_at(&absolute, 0)
}

fn resolve_at(path: &Path, depth: u32) -> std::io::Result<PathBuf> {
    use std::io::{Error as IoError, ErrorKind};
    if depth > 40 {
        return Err(IoError::from_raw_os_error(libc::ELOOP));
    }
    match path.canonicalize() {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(IoError::new(
            ErrorKind::InvalidInput,
            format!("{} cannot be resolved", path.display()),
        ));
    };
    let parent = resolve_at(parent, depth + 1)?;
    match std::fs::symlink_metadata(parent.join(name)) {
        // A dangling symlink: where it points.
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(parent.join(name))?;
            resolve_at(&parent.join(target), depth + 1)
        }
        _ => Ok(parent.join(name)),
    }
}

/// A store inside its workspace would be written through the mount by the daemon that serves
/// it, which would wait on itself for good: refused, also when a symlink leads there.
pub fn check_outside(store: &Path, workspace: &Path) -> Result<()> {
    let refuse = |reason: String| Error::Refused {
        dir: store.to_owned(),
        reason,
    };
    let ws = resolve(workspace).map_err(|e| {
        refuse(format!(
            "cannot resolve the workspace {}: {e}",
            workspace.display()
        ))
    })?;
    let resolved = resolve(store).map_err(|e| refuse(format!("cannot resolve it: {e}")))?;
    if resolved.starts_with(&ws) {
        let via = if resolved == store {
            String::new()
        } else {
            format!(" (it resolves to {})", resolved.display())
        };
        return Err(refuse(format!(
            "must not be inside the workspace {}{via}; choose a store outside it",
            ws.display()
        )));
    }
    // Nor may the workspace be inside the store: the store's folder is the store's alone.
    if ws.starts_with(&resolved) {
        return Err(refuse(format!(
            "must not hold the workspace {} (the store's folder is the store's alone); choose \
             a store outside it",
            ws.display()
        )));
    }
    Ok(())
}

/// Make the store's folder (private to its owner from the start) or check an existing one: a
/// folder others can enter is closed to them, unless they could already read a file in it
/// besides `rewind.toml` (the settings): then its history may have been read, which is for
/// the user to judge, so it is refused with how to fix it.
fn prepare_dir(dir: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    let mode = std::fs::metadata(dir).map_err(io)?.permissions().mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let mut readable = Vec::new();
    let mut settings = None;
    if mode & 0o011 != 0 {
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let m = entry.metadata().map_err(io)?.permissions().mode();
            if m & 0o044 == 0 {
                continue;
            }
            if entry.file_name() == crate::config::FILE {
                settings = Some((entry.path(), m));
            } else {
                readable.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    if !readable.is_empty() {
        readable.sort();
        return Err(Error::Refused {
            dir: dir.to_owned(),
            reason: format!(
                "other users can read it (folder mode {mode:04o}; readable: {}); a store must be \
                 private to its owner. If that is acceptable, run `chmod -R go= {}` and try again",
                readable.join(", "),
                dir.display()
            ),
        });
    }
    if let Some((path, m)) = settings {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m & 0o7700))
            .map_err(|source| Error::Io { path, source })?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o7700)).map_err(io)
}

impl Store {
    /// Open (creating if needed) the store in `dir` for reading and writing. Its folder and
    /// files are private to their owner whatever the umask; a folder others could read from is
    /// refused.
    pub fn open(dir: &Path) -> Result<Store> {
        Self::open_writer(dir, None)
    }

    /// [`Store::open`] for the daemon of `workspace`: the store must lie outside it, which is
    /// checked again whenever the database is reopened.
    pub fn open_outside(dir: &Path, workspace: &Path) -> Result<Store> {
        Self::open_writer(dir, Some(workspace))
    }

    fn open_writer(dir: &Path, workspace: Option<&Path>) -> Result<Store> {
        if let Some(ws) = workspace {
            check_outside(dir, ws)?;
        }
        {
            let _private = PrivateUmask::set();
            prepare_dir(dir)?;
        }
        let db = open_db_waiting(dir, workspace)?;
        let mut store = Self::finish_open(db, dir, false, None)?;
        store.workspace = workspace.map(Path::to_owned);
        Ok(store)
    }

    /// Make (or check) a store's folder before anything is written in it, as
    /// [`Store::open`] does: for `rewind mount`, which puts the daemon's log there first.
    pub fn prepare(dir: &Path, workspace: &Path) -> Result<()> {
        check_outside(dir, workspace)?;
        let _private = PrivateUmask::set();
        prepare_dir(dir)
    }

    /// Open an existing store for reading only, alongside a running writer if there is one: a
    /// RocksDB secondary instance, which sees everything the writer had written when it opened.
    /// With no writer running, a plain read-only instance: a secondary recovers to the newest
    /// state whose table files are all there, so a missing or truncated one would silently hide
    /// history instead of failing.
    pub fn open_read_only(dir: &Path) -> Result<Store> {
        if !dir.join("CURRENT").exists() {
            return Err(Error::Missing(dir.to_owned()));
        }
        if !writer_running(dir) {
            let mut opts = Options::default();
            opts.set_max_open_files(-1);
            reading_only(&mut opts);
            let memory = Memory::new(dir);
            let db = DB::open_cf_descriptors_read_only(&opts, dir, descriptors(&memory), false)
                .map_err(|source| classify_open_error(dir, source))?;
            check_files(&db, dir)?;
            return Self::finish_open(db, dir, true, None);
        }
        // The writer may compact between the secondary's reading of the file list and the
        // check, deleting a table file it lists: that is a race, not damage, so try again.
        let mut attempt = 0;
        loop {
            static SEQ: AtomicU64 = AtomicU64::new(0);
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let secondary =
                std::env::temp_dir().join(format!("rewind-reader-{}-{n}", std::process::id()));
            let mut opts = Options::default();
            opts.set_max_open_files(-1);
            reading_only(&mut opts);
            let db = {
                // The scratch directory's files too are the owner's alone.
                let _private = PrivateUmask::set();
                let memory = Memory::new(dir);
                DB::open_cf_descriptors_as_secondary(&opts, dir, &secondary, descriptors(&memory))
                    .map_err(|source| classify_open_error(dir, source))?
            };
            match check_files(&db, dir) {
                Err(Error::Damaged { .. }) if attempt < 5 && writer_running(dir) => {
                    drop(db);
                    let _ = std::fs::remove_dir_all(&secondary);
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(20 << attempt));
                }
                Err(e) => {
                    drop(db);
                    let _ = std::fs::remove_dir_all(&secondary);
                    return Err(e);
                }
                Ok(()) => return Self::finish_open(db, dir, true, Some(secondary)),
            }
        }
    }

    fn finish_open(
        db: DB,
        dir: &Path,
        read_only: bool,
        secondary: Option<PathBuf>,
    ) -> Result<Store> {
        let store = Store {
            db: RwLock::new(Some(db)),
            dir: dir.to_owned(),
            read_only,
            unwritable: Mutex::new(None),
            recovering: Mutex::new(()),
            room_seen: Mutex::new(None),
            halted: std::sync::OnceLock::new(),
            writer: Mutex::new(0),
            secondary,
            workspace: None,
            sessions_cache: Mutex::new(Default::default()),
            sweeps: AtomicU64::new(0),
            counts: Default::default(),
            pins: Default::default(),
            pinned: AtomicU64::new(0),
            gc_lock: Mutex::new(()),
            gc_watch: Mutex::new(None),
            dictionary: Mutex::new(None),
            wanted: AtomicU64::new(0),
            similar: Default::default(),
            recent: Default::default(),
        };
        match store.meta(FORMAT_KEY)?.and_then(|v| v.first().copied()) {
            Some(found) if found > FORMAT_VERSION => {
                return Err(Error::Format {
                    dir: dir.to_owned(),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
            Some(FORMAT_VERSION) => {}
            // An older store is read as it is; opened for writing, it is marked as this
            // format, since it may now hold records only this format describes.
            _ if read_only => {}
            _ => store.put_meta(FORMAT_KEY, &[FORMAT_VERSION])?,
        }
        if !read_only {
            store.load_counts()?;
        }
        // Ids are never handed out twice: not a retracted one (its tombstone explains it), nor
        // one a checkpoint, a turn's bound or gc's horizon names (a bound may be an id set
        // aside for a change that was then not recorded: `mark_point`).
        let handed_out = [
            store.last_id()?,
            store.last_retracted()?,
            store.horizon()?.map_or(0, |h| h.id),
            store.checkpoints()?.iter().map(|c| c.id).max().unwrap_or(0),
            store
                .turns(None)?
                .iter()
                .map(|t| t.end_id.unwrap_or(0).max(t.start_id))
                .max()
                .unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        *store.writer.lock().unwrap_or_else(|e| e.into_inner()) = handed_out;
        store.pinned.store(handed_out, Ordering::SeqCst);
        Ok(store)
    }

    /// The newest retracted id, 0 if none.
    fn last_retracted(&self) -> Result<u64> {
        let db = self.db()?;
        let prefix = keys::named_prefix(b"retracted");
        let mut end = prefix.clone();
        end.extend_from_slice(&[0xff; 8]);
        let mut iter = db.iterator_cf(
            db.cf(CF_META),
            IteratorMode::From(&end, rocksdb::Direction::Reverse),
        );
        match iter.next() {
            Some(Ok((key, _))) if key.starts_with(&prefix) => {
                Ok(keys::trailing_id(&key).unwrap_or(0))
            }
            Some(Err(e)) => Err(Store::db_error("scan meta")(e)),
            _ => Ok(0),
        }
    }

    /// The id of the newest change, 0 for an empty store.
    pub fn last_id(&self) -> Result<u64> {
        let db = self.db()?;
        let mut iter = db.iterator_cf(db.cf(CF_CHANGES), IteratorMode::End);
        match iter.next() {
            None => Ok(0),
            Some(item) => {
                let (key, _) = item.map_err(Store::db_error("scan changes"))?;
                keys::change_id(&key).ok_or_else(|| Error::Corrupt {
                    cf: CF_CHANGES,
                    key: keys::hex(&key),
                    reason: "key is not an id".into(),
                })
            }
        }
    }

    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let db = self.db()?;
        db.get_cf(db.cf(CF_META), key)
            .map_err(Store::db_error("read meta"))
    }

    /// After a failed write: write again, and if that fails for a reason of RocksDB's own (not
    /// a write stall, which ends by itself once compaction catches up, and closing the
    /// database would wait for that compaction with every reader held behind it), close the
    /// database and open it again, which replays what its log holds and clears RocksDB's own
    /// error state. The reopen is tried only when the disk has room for what
    /// the replay writes (about the size of the log) and the reserve: RocksDB's own recovery
    /// waits for a whole write buffer (64 MiB) more than that, too much for a small disk.
    /// Writes are accepted again only if the reopen works and a test write succeeds; otherwise
    /// the store stays unwritable, and reads go on (from a read-only instance if the reopen
    /// failed).
    pub fn recover(&self) -> Result<()> {
        let _alone = self.recovering.lock().unwrap_or_else(|e| e.into_inner());
        if self.read_only || self.writable() || self.halted.get().is_some() {
            return Ok(());
        }
        let no_space = matches!(
            &*self.unwritable.lock().unwrap_or_else(|e| e.into_inner()),
            Some((_, true))
        );
        if !no_space {
            let probed = probe(&*self.db()?);
            match probed {
                Ok(()) => {
                    self.writes_again();
                    return Ok(());
                }
                Err(source) if source.kind() == rocksdb::ErrorKind::Incomplete => {
                    return Err(Error::Db {
                        context: "test write",
                        source,
                    });
                }
                Err(_) => {}
            }
        }
        if let Some(room) = self.room() {
            // Room for the replay of the log, and for the rest of a content whose store stopped
            // at the reserve (see `check_room_for`).
            let wanted = self.wanted.load(Ordering::SeqCst);
            let need = room.reserve + log_bytes(&self.dir) + wanted;
            if room.free < need {
                return Err(Error::Unwritable {
                    reason: format!(
                        "the disk of {} is full ({} free, {} needed to take writes again)",
                        self.dir.display(),
                        super::write::mib(room.free),
                        super::write::mib(need)
                    ),
                    no_space: true,
                });
            }
        }
        let mut slot = self.db.write().unwrap_or_else(|e| e.into_inner());
        // Closing flushes nothing that matters: every acknowledged write is in the WAL.
        drop(slot.take());
        let reopened = open_db(&self.dir, self.workspace.as_deref());
        let db = match reopened {
            Ok(db) => db,
            Err(e) => {
                // Reads must go on: a read-only instance replays the log without writing (not
                // a store that now leads into the workspace, which would be read through the
                // mount).
                if !matches!(e, Error::Refused { .. }) {
                    let _private = PrivateUmask::set();
                    let memory = Memory::new(&self.dir);
                    *slot = DB::open_cf_descriptors_read_only(
                        &options(&memory),
                        &self.dir,
                        descriptors(&memory),
                        false,
                    )
                    .ok();
                }
                return Err(e);
            }
        };
        let probe = probe(&db);
        *slot = Some(db);
        drop(slot);
        probe.map_err(Store::db_error("test write"))?;
        self.writes_again();
        // The replay may hold a write that was reported failed.
        self.load_counts()?;
        Ok(())
    }

    fn writes_again(&self) {
        self.wanted.store(0, Ordering::SeqCst);
        *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::info!("the store accepts writes again");
    }
}

/// A test write, never waiting in a write stall.
fn probe(db: &DB) -> std::result::Result<(), rocksdb::Error> {
    let mut batch = rocksdb::WriteBatch::default();
    batch.put_cf(
        db.cf_handle(CF_META)
            .expect("column family created at open"),
        b"probe",
        b"",
    );
    db.write_opt(batch, &super::write::write_options())
}

/// The size of the store's write-ahead logs: what reopening it replays into new table files.
fn log_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().as_encoded_bytes().ends_with(b".log"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Whether another process has the store open for writing (holds RocksDB's record lock on
/// `LOCK`). Not for a process that has the store open for writing itself: closing any fd of
/// `LOCK` would drop its own lock.
fn writer_running(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(dir.join("LOCK")) else {
        return false;
    };
    // SAFETY: an all-zero flock is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_OFD_GETLK on an fd we own, into a flock we own.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
    // If we cannot tell, assume a writer: the secondary instance is safe beside one.
    r != 0 || lock.l_type != libc::F_UNLCK as libc::c_short
}

/// A store whose files are damaged says so plainly.
fn classify_open_error(dir: &Path, source: rocksdb::Error) -> Error {
    match source.kind() {
        rocksdb::ErrorKind::Corruption | rocksdb::ErrorKind::NotFound => Error::Damaged {
            dir: dir.to_owned(),
            reason: format!("cannot be opened: {source}"),
        },
        _ => Error::Db {
            context: "open",
            source,
        },
    }
}

/// Every table file the database lists must be there, whole: RocksDB opens a store with a
/// missing or truncated table file and fails only when a read reaches it (or reads nothing).
fn check_files(db: &DB, dir: &Path) -> Result<()> {
    let files = db
        .live_files()
        .map_err(Store::db_error("list table files"))?;
    for f in files {
        let name = f.name.trim_start_matches('/');
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == f.size as u64 => {}
            Ok(m) => {
                return Err(Error::Damaged {
                    dir: dir.to_owned(),
                    reason: format!(
                        "table file {name} is {} bytes, expected {}",
                        m.len(),
                        f.size
                    ),
                });
            }
            // A compaction RocksDB started at the open may have replaced it since the list was
            // taken: missing is damage only if the database still lists it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !still_listed(db, &f.name)? => {
                tracing::debug!("table file {name} was compacted away while the store opened");
            }
            Err(e) => {
                return Err(Error::Damaged {
                    dir: dir.to_owned(),
                    reason: format!("table file {name}: {e}"),
                });
            }
        }
    }
    Ok(())
}

/// Whether the database still lists table file `name` (as `live_files` names it).
fn still_listed(db: &DB, name: &str) -> Result<bool> {
    let files = db
        .live_files()
        .map_err(Store::db_error("list table files"))?;
    Ok(files.iter().any(|f| f.name == name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::noise;

    fn sum(store: &Store, property: &str) -> u64 {
        let db = store.db().unwrap();
        ALL_CFS
            .iter()
            .map(|name| {
                db.property_int_value_cf(db.cf(name), property)
                    .unwrap()
                    .unwrap()
            })
            .sum()
    }

    /// Write far more than the write-buffer budget, read it all back: the write buffers stay
    /// within their budget and every family reads through the one bounded block cache.
    #[test]
    fn memory_stays_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let blobs: Vec<_> = (1..=3 * 1024u64)
            .map(|seed| store.put_blob(&noise(16 << 10, seed)).unwrap())
            .collect();
        let unflushed = sum(&store, "rocksdb.cur-size-all-mem-tables");
        assert!(
            unflushed <= (WRITE_BUFFERS + SMALL_BUFFER) as u64,
            "{unflushed} bytes in write buffers"
        );
        for hash in &blobs {
            store.verify_blob(hash).unwrap();
        }
        let db = store.db().unwrap();
        for name in ALL_CFS {
            let capacity = db
                .property_int_value_cf(db.cf(name), "rocksdb.block-cache-capacity")
                .unwrap();
            assert_eq!(capacity, Some(BLOCK_CACHE as u64), "{name}");
            let usage = db
                .property_int_value_cf(db.cf(name), "rocksdb.block-cache-usage")
                .unwrap()
                .unwrap();
            assert!(usage <= BLOCK_CACHE as u64, "{name}: {usage} bytes cached");
        }
    }
}
