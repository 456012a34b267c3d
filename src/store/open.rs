//! Opening a store: for writing (the daemon, or a command on an unmounted workspace) or for
//! reading beside a running writer; checking that its files are all there; and reopening it
//! after a failed write.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use rocksdb::{ColumnFamilyDescriptor, DB, IteratorMode, Options};

use super::{ALL_CFS, CF_CHANGES, CF_META, Error, FORMAT_VERSION, Result, Store, blobs, keys};

fn options() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Blobs are compressed by us; records and index keys are tiny.
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_keep_log_file_num(3);
    opts.set_max_total_wal_size(64 << 20);
    opts
}

fn descriptors() -> impl Iterator<Item = ColumnFamilyDescriptor> {
    ALL_CFS
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()))
}

fn open_db(dir: &Path) -> Result<DB> {
    let db = DB::open_cf_descriptors(&options(), dir, descriptors())
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
            let db = DB::open_cf_descriptors_read_only(&opts, dir, descriptors(), false)
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
            let db = DB::open_cf_descriptors_as_secondary(&opts, dir, &secondary, descriptors())
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
            pinned: AtomicU64::new(0),
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
        // Ids are never handed out twice: not a retracted one (its tombstone explains it), nor
        // one a checkpoint or gc's horizon names.
        let handed_out = [
            store.last_id()?,
            store.last_retracted()?,
            store.horizon()?.map_or(0, |h| h.id),
            store.checkpoints()?.iter().map(|c| c.id).max().unwrap_or(0),
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

    /// After a failed write: close the database and open it again, which replays what its log
    /// holds and clears RocksDB's own error state. Writes are accepted again only if that
    /// works and a test write succeeds; otherwise the store stays unwritable (reads go on).
    pub fn recover(&self) -> Result<()> {
        if self.read_only || self.writable() {
            return Ok(());
        }
        let mut slot = self.db.write().unwrap_or_else(|e| e.into_inner());
        // Closing flushes nothing that matters: every acknowledged write is in the WAL.
        drop(slot.take());
        let reopened = open_db(&self.dir);
        let db = match reopened {
            Ok(db) => db,
            Err(e) => {
                // Reads must go on: take what can be opened.
                *slot = DB::open_cf_descriptors(&options(), &self.dir, descriptors()).ok();
                return Err(e);
            }
        };
        let probe = db.put_cf(
            db.cf_handle(CF_META)
                .expect("column family created at open"),
            b"probe",
            b"",
        );
        *slot = Some(db);
        drop(slot);
        probe.map_err(Store::db_error("test write"))?;
        *self.unwritable.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::info!("the store accepts writes again");
        Ok(())
    }
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
