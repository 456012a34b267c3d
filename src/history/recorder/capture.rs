//! Capturing a path's state: its content stored in the store, and the cache that lets an
//! unchanged file be captured again without reading it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};

use super::{Key, Recorder, lock};
use crate::history::change::{FileKind, FileState, Owner, Seen};
use crate::history::{Error, Result, show_path};
use crate::store::{Hash, KNOWN_KEY, KnownFileRecord, KnownRecord, NewContent};

/// How many files the cache knows at most (an entry is 96 bytes, about 13 MB in all); past
/// it, it starts again with a new table, so the old one's memory is given back.
pub(super) const KNOWN_MAX: usize = 100_000;

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

/// What looking a file up by its path says.
pub(super) enum Found {
    /// The path names the file, as this stat says.
    Same(libc::stat),
    /// The path is gone, or names another file.
    Gone,
    /// The path could not be looked up (`EACCES`: a folder above it its owner made
    /// unreadable, to a daemon that is not root): nothing says the file is gone.
    Hidden(io::Error),
}

/// An error that says a path is not there, rather than that it could not be looked at.
pub(super) fn not_there(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

/// An error of a change that waits until its path can be looked up or read again
/// ([`Found::Hidden`]): it is kept, not dropped.
pub(super) fn out_of_sight(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied)
}

/// The error of a change of `path` that waits until the path can be looked up again
/// ([`Found::Hidden`]).
pub(super) fn hidden(path: &[u8], source: io::Error) -> Error {
    Error::Io {
        path: show_path(path).into(),
        source,
    }
}

/// `fstat` of an open file.
pub(super) fn fstat(file: &File) -> io::Result<libc::stat> {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `file` is an open fd, and `st` a buffer of the type the kernel fills.
    if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled by the successful call above.
    Ok(unsafe { st.assume_init() })
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

/// What the cache keeps of a regular file it captured: its content's hash, valid while its
/// [`Sig`] is unchanged (the size is the signature's), with the store's sweep count when the
/// content was known to be stored. Mode and owner are read from the stat each time.
#[derive(Clone, Copy)]
pub(super) struct KnownFile {
    sig: Sig,
    hash: Hash,
    sweeps: u64,
    /// Read at the end of a change that was recorded: the history names this content as the
    /// file's last version, so an edit that begins from it needs no marker at once (see
    /// `episodes::Unmarked`).
    recorded: bool,
}

/// Reads `file` from offset `at` on with positioned reads, leaving the fd's offset alone.
struct ReadAt<'a> {
    file: &'a File,
    at: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The last captured content of each backing file, by backing key.
pub(super) type Known = std::collections::HashMap<Key, KnownFile>;

/// Put `file` into `known`, starting a new table once it holds `max` files.
fn remember(known: &mut Known, key: Key, file: KnownFile, max: usize) {
    if known.len() >= max && !known.contains_key(&key) {
        // A new table rather than `clear()`, which would keep the old one's capacity.
        *known = Known::default();
    }
    known.insert(key, file);
}

/// A file's state read at the end of its episode, with its content not stored yet if it is
/// new and small: [`Extra::content`](crate::history::db::Extra::content) writes it with the
/// change ([`Recorder::capture_end`]).
pub(super) struct Captured {
    pub(super) state: FileState,
    pub(super) content: Option<NewContent>,
    /// What the capture cache is to know once the content is stored.
    known: Option<(Key, KnownFile)>,
    /// Answered by the cache with content read at the end of a recorded change.
    pub(super) recorded: bool,
}

impl Recorder {
    /// The state of `path` as `st` describes it, with its content stored.
    pub(super) fn capture(&self, path: &[u8], st: &libc::stat) -> Result<FileState> {
        self.capture_cached(path, st, None).map(|c| c.state)
    }

    /// [`capture`](Recorder::capture), saying whether the content is the file's last version
    /// the history names ([`Captured::recorded`]); read through `through` (an fd of the file
    /// `st` describes, open for reading) if given, else from `path`.
    pub(super) fn capture_cached(
        &self,
        path: &[u8],
        st: &libc::stat,
        through: Option<&File>,
    ) -> Result<Captured> {
        self.capture_with(path, st, true, path, through, false)
    }

    /// [`capture_fresh_as`](Recorder::capture_fresh_as) at the end of an episode, or of a
    /// held-back create, read through `file` (an fd of the file open for reading) if given:
    /// new content of one value is not stored yet, but returned to be written with the change
    /// (one write instead of two); [`captured`](Recorder::captured) once it is.
    pub(super) fn capture_end(
        &self,
        path: &[u8],
        st: &libc::stat,
        version_of: &[u8],
        file: Option<&File>,
    ) -> Result<Captured> {
        self.capture_with(path, st, false, version_of, file, true)
    }

    /// What [`capture_end`](Recorder::capture_end) read is stored: the capture cache may
    /// answer with it; `recorded`: as the content after a change just recorded.
    pub(super) fn captured(&self, captured: Captured, recorded: bool) {
        if let Some((key, file)) = captured.known {
            remember(
                &mut lock(&self.known),
                key,
                KnownFile { recorded, ..file },
                KNOWN_MAX,
            );
        }
    }

    /// Read a file's content now, whatever the cache says (after writes, whose timestamps are
    /// too coarse to tell two versions of the same size apart), as the next version of
    /// `version_of` (itself, or the path a file saved under a temporary name is about to be
    /// renamed over: stored as a delta on that path's content when that pays). Read from
    /// `reader` if given (a handle on the file kept for a daemon that cannot open it by its
    /// name).
    pub(super) fn capture_fresh_as(
        &self,
        path: &[u8],
        st: &libc::stat,
        version_of: &[u8],
        reader: Option<&File>,
    ) -> Result<FileState> {
        self.capture_with(path, st, false, version_of, reader, false)
            .map(|c| c.state)
    }

    /// The cache holds the content last read from a file with no write episode open, keyed by
    /// backing inode and (size, mtime, ctime). It answers only while no episode is open on the
    /// file: then nothing can have written to it since (every write needs an episode). A
    /// file's content is read through `through` if given, else from `path`. `defer`: see
    /// [`capture_end`](Recorder::capture_end).
    fn capture_with(
        &self,
        path: &[u8],
        st: &libc::stat,
        use_cache: bool,
        version_of: &[u8],
        through: Option<&File>,
        defer: bool,
    ) -> Result<Captured> {
        let stored = |state| Captured {
            state,
            content: None,
            known: None,
            recorded: false,
        };
        // A file being written is not answered from the cache; it is read through the handle
        // its episode keeps, if any (see `Recorder::keep_reader`), when none is given.
        let (open, reader) = match lock(&self.episodes).get(&key_of(st)) {
            Some(ep) => (true, ep.reader.clone()),
            None => (false, None),
        };
        let use_cache = use_cache && !open;
        let through = through.or(reader.as_deref());
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
                    .filter(|k| use_cache && k.sig == sig)
                    .copied();
                // Reusing stored content: keep it from a gc running meanwhile (if one already
                // removed it, read the file again).
                if let Some(k) = cached
                    && store.keep_blob_since(&k.hash, k.sweeps).unwrap_or(false)
                {
                    return Ok(Captured {
                        recorded: k.recorded,
                        ..stored(FileState {
                            kind: FileKind::File,
                            size: sig.size as u64,
                            mode,
                            hash: Some(k.hash),
                            owner,
                        })
                    });
                }
                let sweeps = store.sweeps();
                let opened;
                let file = match through {
                    Some(file) => file,
                    None => {
                        opened = self.source.open_read(path).map_err(io_err)?;
                        &opened
                    }
                };
                // The file `st` describes, read up to the size it has as the read begins: one
                // that took its name meanwhile is not it, and a writer appending as fast as it
                // is read does not keep the read going.
                let now = file.metadata().map_err(io_err)?;
                if (now.dev(), now.ino()) != key {
                    return Err(io_err(io::Error::from_raw_os_error(libc::ENOENT)));
                }
                // From the start, whatever the fd's offset (a handle's is the writer's).
                let from_start = ReadAt { file, at: 0 };
                let read = from_start.take(now.len());
                let (hash, size, content) = if defer {
                    store.prepare_file_reader(version_of, read)?
                } else {
                    let (hash, size) = store.put_file_reader(version_of, read)?;
                    (hash, size, None)
                };
                let mut captured = stored(FileState {
                    kind: FileKind::File,
                    size,
                    mode,
                    hash: Some(hash),
                    owner,
                });
                // Only content read whole at the size `st` gives stands for the file while its
                // signature holds, and only once it is stored.
                if size as i64 == sig.size {
                    let known = (
                        key,
                        KnownFile {
                            sig,
                            hash,
                            sweeps,
                            recorded: false,
                        },
                    );
                    if content.is_none() {
                        remember(&mut lock(&self.known), known.0, known.1, KNOWN_MAX);
                    }
                    // Either way, `captured` may then say it is a recorded change's.
                    captured.known = Some(known);
                }
                captured.content = content;
                Ok(captured)
            }
            FileKind::Symlink => {
                let target = self.source.readlink(path).map_err(io_err)?;
                let hash = store.put_blob(&target)?;
                Ok(stored(FileState {
                    kind: FileKind::Symlink,
                    size: target.len() as u64,
                    mode: 0o777,
                    hash: Some(hash),
                    owner,
                }))
            }
            kind => Ok(stored(FileState {
                kind,
                size: 0,
                mode,
                hash: None,
                owner,
            })),
        }
    }

    /// Leave what the cache knows for the next mount (at unmount): a file whose inode, size,
    /// mtime and ctime are then still the same has the same content, so deleting or overwriting
    /// it is recorded without reading it. A ctime cannot be set back, so whatever changed the
    /// file while it was not mounted (an editor, `touch -r`, a restore from a backup) misses.
    ///
    /// Only what no gc may have deleted since it was captured: the next mount takes every
    /// entry as stored without looking (an entry of a file whose content a gc removed, say
    /// after the file moved into an ignored folder, would have its next change name a missing
    /// blob). A gc that deletes blobs after the record is written deletes it in its batch;
    /// one that did before is seen (`Store::put_meta_unless_swept`).
    pub fn save_known(&self) -> Result<()> {
        let store = self.history.store();
        let sweeps = store.sweeps();
        let files: Vec<KnownFileRecord> = lock(&self.known)
            .iter()
            .filter(|(_, k)| k.sweeps == sweeps)
            .map(|(key, k)| KnownFileRecord {
                dev: key.0,
                ino: key.1,
                size: k.sig.size,
                mtime: k.sig.mtime,
                ctime: k.sig.ctime,
                hash: k.hash.0,
            })
            .collect();
        if files.is_empty() {
            return Ok(());
        }
        let value = KnownRecord { files }.encode();
        store.put_meta_unless_swept(KNOWN_KEY, &value, sweeps)?;
        Ok(())
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
            let sig = Sig {
                size: f.size,
                mtime: f.mtime,
                ctime: f.ctime,
            };
            // What the last mount knew is stored, but whether the history names it as the
            // file's last version is not known here.
            let file = KnownFile {
                sig,
                hash: Hash(f.hash),
                sweeps,
                recorded: false,
            };
            known.insert((f.dev, f.ino), file);
        }
        Ok(())
    }

    /// Forget what was captured of a file whose inode number may now be reused.
    pub(super) fn forget_known(&self, key: Key) {
        lock(&self.known).remove(&key);
    }

    /// Only the metadata of the file `st` describes (its stat now) changed: its mode, owner or
    /// number of links, and with them its ctime. With no write episode open, and its size and
    /// mtime as last captured, its content has not changed either: that capture stays valid
    /// under `st`, and the next change recorded of it (a chmod, a link) takes its content from
    /// it. A daemon that is not root may no longer read a file chmodded `000` by its owner:
    /// reading it again would refuse the chmod that makes it readable again, or a link to it.
    pub fn metadata_changed(&self, st: &libc::stat) {
        let key = key_of(st);
        if lock(&self.episodes).contains_key(&key) {
            return;
        }
        let now = Sig::of(st);
        if let Some(k) = lock(&self.known).get_mut(&key)
            && (k.sig.size, k.sig.mtime) == (now.size, now.mtime)
        {
            k.sig = now;
        }
    }

    /// Only a file's times changed (no episode open, so its content cannot have): keep its
    /// last capture valid under the new stat.
    pub(super) fn refresh_known(&self, st: &libc::stat) {
        if let Some(k) = lock(&self.known).get_mut(&key_of(st))
            && k.sig.size() == st.st_size
        {
            k.sig = Sig::of(st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u8) -> KnownFile {
        KnownFile {
            sig: Sig {
                size: n.into(),
                mtime: (1, 2),
                ctime: (3, 4),
            },
            hash: Hash([n; 32]),
            sweeps: 0,
            recorded: false,
        }
    }

    #[test]
    fn the_cache_starts_over_with_a_small_table_past_its_bound() {
        let mut known = Known::default();
        for n in 0..200u8 {
            remember(&mut known, (1, n.into()), file(n), 200);
        }
        let full = known.capacity();
        // A file already known is updated in place.
        remember(&mut known, (1, 7), file(9), 200);
        assert_eq!(known.len(), 200);
        assert_eq!(known[&(1, 7)].hash, Hash([9; 32]));
        // One more starts a new table holding only it, without the old one's capacity.
        remember(&mut known, (1, 500), file(1), 200);
        assert_eq!(known.len(), 1);
        assert_eq!(known[&(1, 500)].hash, Hash([1; 32]));
        assert!(known.capacity() < full, "{} of {full}", known.capacity());
    }
}
