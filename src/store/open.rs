//! Opening a store: for writing (the daemon, or a command on an unmounted workspace) or for
//! reading beside a running writer; checking that its files are all there; and reopening it
//! after a failed write.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use rocksdb::{ColumnFamilyDescriptor, DB, IteratorMode, Options};

use super::{ALL_CFS, CF_CHANGES, CF_META, Error, FORMAT_VERSION, Result, Store, blobs, keys};

fn options(dir: &Path) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Blobs are compressed by us; records and index keys are tiny.
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_keep_log_file_num(3);
    let buffers = write_buffers(dir);
    opts.set_max_total_wal_size(buffers as u64);
    opts.set_db_write_buffer_size(buffers);
    opts.set_write_buffer_size(buffers);
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

/// What RocksDB may hold unflushed (its write buffers, and so its log): half the reserve kept
/// on the store's disk (see `write::reserve_for`), so that flushing them always fits; 64 MiB,
/// RocksDB's default, on any disk over 1.25 GiB.
fn write_buffers(dir: &Path) -> usize {
    let size = super::write::disk_space(dir).map_or(u64::MAX, |(size, _)| size);
    (super::write::reserve_for(size) / 2) as usize
}

fn descriptors(dir: &Path) -> impl Iterator<Item = ColumnFamilyDescriptor> {
    let buffers = write_buffers(dir);
    ALL_CFS.iter().map(move |name| {
        let mut opts = Options::default();
        opts.set_write_buffer_size(buffers);
        ColumnFamilyDescriptor::new(*name, opts)
    })
}

fn open_db(dir: &Path) -> Result<DB> {
    let db = DB::open_cf_descriptors(&options(dir), dir, descriptors(dir))
        .map_err(|source| classify_open_error(dir, source))?;
    check_files(&db, dir)?;
    Ok(db)
}

impl Store {
    /// Open (creating if needed) the store in `dir` for reading and writing.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        let db = open_db(dir)?;
        Self::finish_open(db, dir, false, None)
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
            let db = DB::open_cf_descriptors_read_only(&opts, dir, descriptors(dir), false)
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
            let db = DB::open_cf_descriptors_as_secondary(&opts, dir, &secondary, descriptors(dir))
                .map_err(|source| classify_open_error(dir, source))?;
            match check_files(&db, dir) {
                Err(Error::Damaged { .. }) if attempt < 5 && writer_running(dir) => {
                    drop(db);
                    let _ = std::fs::remove_dir_all(&secondary);
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
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
        secondary: Option<std::path::PathBuf>,
    ) -> Result<Store> {
        let store = Store {
            db: RwLock::new(Some(db)),
            dir: dir.to_owned(),
            read_only,
            unwritable: Mutex::new(None),
            writer: Mutex::new(0),
            secondary,
            sessions_cache: Mutex::new(Default::default()),
            sweeps: AtomicU64::new(0),
            recent_blobs: Mutex::new(blobs::RecentBlobs::default()),
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
        *store.writer.lock().unwrap_or_else(|e| e.into_inner()) = store.last_id()?;
        Ok(store)
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

    /// After a failed write: close the database and open it again, which replays what its log
    /// holds and clears RocksDB's own error state. Tried only when the disk has room for what
    /// the replay writes (about the size of the log) and the reserve: RocksDB's own recovery
    /// waits for a whole write buffer (64 MiB) more than that, too much for a small disk.
    /// Writes are accepted again only if the reopen works and a test write succeeds; otherwise
    /// the store stays unwritable, and reads go on (from a read-only instance if the reopen
    /// failed).
    pub fn recover(&self) -> Result<()> {
        if self.read_only || self.writable() {
            return Ok(());
        }
        if let Some(room) = self.room() {
            let need = room.reserve + log_bytes(&self.dir);
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
        let db = match open_db(&self.dir) {
            Ok(db) => db,
            Err(e) => {
                // Reads must go on: a read-only instance replays the log without writing.
                let dir = &self.dir;
                *slot =
                    DB::open_cf_descriptors_read_only(&options(dir), dir, descriptors(dir), false)
                        .ok();
                return Err(e);
            }
        };
        let mut probe = rocksdb::WriteBatch::default();
        probe.put_cf(
            db.cf_handle(CF_META)
                .expect("column family created at open"),
            b"probe",
            b"",
        );
        let probe = db.write_opt(probe, &super::write::write_options());
        *slot = Some(db);
        drop(slot);
        probe.map_err(Store::db_error("test write"))?;
        *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::info!("the store accepts writes again");
        Ok(())
    }
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
