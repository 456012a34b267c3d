//! Capturing a path's state: its content stored in the store, and the cache that lets an
//! unchanged file be captured again without reading it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;

use super::{Key, Recorder, lock};
use crate::history::change::{FileKind, FileState, Owner, Seen};
use crate::history::{Error, Result, show_path};
use crate::store::{Hash, KNOWN_KEY, KnownFileRecord, KnownRecord};

/// How many files the cache knows at most (about 200 bytes each); past it, it starts again.
const KNOWN_MAX: usize = 100_000;

/// Read access to the workspace underneath the mount.
pub trait Source: Send + Sync {
    /// A regular file, opened for reading; anything else at the path is an error (a FIFO
    /// would block the open, a device never end).
    fn open_read(&self, path: &[u8]) -> io::Result<File>;
    /// Names in a directory (without `.` and `..`).
    fn read_dir(&self, path: &[u8]) -> io::Result<Vec<Vec<u8>>>;
    fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>>;
    fn lstat(&self, path: &[u8]) -> io::Result<libc::stat>;
}

pub fn key_of(st: &libc::stat) -> Key {
    (st.st_dev, st.st_ino)
}

pub fn kind_of(st: &libc::stat) -> FileKind {
    FileKind::of(st)
}

pub fn seen_of(st: &libc::stat) -> Seen {
    Seen {
        kind: kind_of(st),
        size: if matches!(kind_of(st), FileKind::Dir | FileKind::Special(_)) {
            0
        } else {
            st.st_size as u64
        },
        mode: st.st_mode & 0o7777,
        mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
    }
}

/// The stat fields that change whenever content may have.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Sig {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Sig {
    pub(super) fn of(st: &libc::stat) -> Sig {
        Sig {
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    pub(super) fn size(&self) -> i64 {
        self.size
    }
}

/// The last captured state of each backing file, valid while its [`Sig`] is unchanged, with
/// the store's sweep count when its content was known to be stored.
pub(super) type Known = std::collections::HashMap<Key, (Sig, FileState, u64)>;

impl Recorder {
    /// The state of `path` as `st` describes it, with its content stored.
    pub(super) fn capture(&self, path: &[u8], st: &libc::stat) -> Result<FileState> {
        self.capture_with(path, st, true, path)
    }

    /// Read a file's content now, whatever the cache says: after writes, whose timestamps are
    /// too coarse to tell two versions of the same size apart.
    pub(super) fn capture_fresh(&self, path: &[u8], st: &libc::stat) -> Result<FileState> {
        self.capture_with(path, st, false, path)
    }

    /// [`capture_fresh`](Recorder::capture_fresh) of content that becomes the next version of
    /// `version_of` (a file saved under a temporary name, about to be renamed over it): stored
    /// as a delta on that path's content when that pays.
    pub(super) fn capture_fresh_as(
        &self,
        path: &[u8],
        st: &libc::stat,
        version_of: &[u8],
    ) -> Result<FileState> {
        self.capture_with(path, st, false, version_of)
    }

    /// The cache holds the content last read from a file with no write episode open, keyed by
    /// backing inode and (size, mtime, ctime). It answers only while no episode is open on the
    /// file: then nothing can have written to it since (every write needs an episode).
    fn capture_with(
        &self,
        path: &[u8],
        st: &libc::stat,
        use_cache: bool,
        version_of: &[u8],
    ) -> Result<FileState> {
        let use_cache = use_cache && !lock(&self.episodes).contains_key(&key_of(st));
        let mode = st.st_mode & 0o7777;
        let owner = Some(Owner::of(st));
        let io_err = |source| Error::Io {
            path: show_path(path).into(),
            source,
        };
        let store = self.history.store();
        match kind_of(st) {
            FileKind::File => {
                let key = key_of(st);
                let sig = Sig::of(st);
                let cached = lock(&self.known)
                    .get(&key)
                    .filter(|(s, ..)| use_cache && *s == sig)
                    .map(|(_, state, sweeps)| (state.clone(), *sweeps));
                // Reusing stored content: keep it from a gc running meanwhile (if one already
                // removed it, read the file again).
                if let Some((state, sweeps)) = cached
                    && state
                        .hash
                        .is_none_or(|h| store.keep_blob_since(&h, sweeps).unwrap_or(false))
                {
                    return Ok(FileState {
                        mode,
                        owner,
                        ..state
                    });
                }
                let sweeps = store.sweeps();
                let file = self.source.open_read(path).map_err(io_err)?;
                // The file `st` describes, read up to the size it has as the read begins: one
                // that took its name meanwhile is not it, and a writer appending as fast as it
                // is read does not keep the read going.
                let now = file.metadata().map_err(io_err)?;
                if (now.dev(), now.ino()) != key {
                    return Err(io_err(io::Error::from_raw_os_error(libc::ENOENT)));
                }
                let (hash, size) = store.put_file_reader(version_of, file.take(now.len()))?;
                let state = FileState {
                    kind: FileKind::File,
                    size,
                    mode,
                    hash: Some(hash),
                    owner,
                };
                let mut known = lock(&self.known);
                if known.len() > KNOWN_MAX {
                    known.clear();
                }
                known.insert(key, (sig, state.clone(), sweeps));
                Ok(state)
            }
            FileKind::Symlink => {
                let target = self.source.readlink(path).map_err(io_err)?;
                let hash = store.put_blob(&target)?;
                Ok(FileState {
                    kind: FileKind::Symlink,
                    size: target.len() as u64,
                    mode: 0o777,
                    hash: Some(hash),
                    owner,
                })
            }
            kind => Ok(FileState {
                kind,
                size: 0,
                mode,
                hash: None,
                owner,
            }),
        }
    }

    /// Leave what the cache knows for the next mount (at unmount): a file whose inode, size,
    /// mtime and ctime are then still the same has the same content, so deleting or overwriting
    /// it is recorded without reading it. A ctime cannot be set back, so whatever changed the
    /// file while it was not mounted (an editor, `touch -r`, a restore from a backup) misses.
    pub fn save_known(&self) -> Result<()> {
        let files: Vec<KnownFileRecord> = lock(&self.known)
            .iter()
            .filter(|(_, (_, state, _))| state.kind == FileKind::File)
            .filter_map(|(key, (sig, state, _))| {
                Some(KnownFileRecord {
                    dev: key.0,
                    ino: key.1,
                    size: sig.size,
                    mtime: sig.mtime,
                    ctime: sig.ctime,
                    hash: state.hash?.0,
                })
            })
            .collect();
        if files.is_empty() {
            return Ok(());
        }
        let value = KnownRecord { files }.encode();
        Ok(self.history.store().put_meta(KNOWN_KEY, &value)?)
    }

    /// Take what the last mount left ([`save_known`](Self::save_known)) into the cache. It is
    /// taken once: a mount that ends without saving (a crash) leaves nothing stale behind. Its
    /// content is still stored: a gc that deletes blobs deletes the record in the same batch
    /// (and checking each blob would read it whole from its table file).
    pub(super) fn load_known(&self) -> Result<()> {
        let store = self.history.store();
        let Some(value) = store.meta(KNOWN_KEY)? else {
            return Ok(());
        };
        store.delete_meta(KNOWN_KEY)?;
        let record = match KnownRecord::decode("meta", KNOWN_KEY, &value) {
            Ok(r) => r,
            Err(e) => {
                // Only a cache: the files are read again.
                tracing::warn!("{e}");
                return Ok(());
            }
        };
        let sweeps = store.sweeps();
        let mut known = lock(&self.known);
        for f in record.files.into_iter().take(KNOWN_MAX) {
            let state = FileState {
                kind: FileKind::File,
                size: f.size as u64,
                mode: 0,
                hash: Some(Hash(f.hash)),
                owner: None,
            };
            let sig = Sig {
                size: f.size,
                mtime: f.mtime,
                ctime: f.ctime,
            };
            known.insert((f.dev, f.ino), (sig, state, sweeps));
        }
        Ok(())
    }

    /// Forget what was captured of a file whose inode number may now be reused.
    pub(super) fn forget_known(&self, key: Key) {
        lock(&self.known).remove(&key);
    }

    /// Only a file's times changed (no episode open, so its content cannot have): keep its
    /// last capture valid under the new stat.
    pub(super) fn refresh_known(&self, st: &libc::stat) {
        if let Some((sig, state, _)) = lock(&self.known).get_mut(&key_of(st))
            && sig.size() == st.st_size
            && state.kind == FileKind::File
        {
            *sig = Sig::of(st);
        }
    }
}
