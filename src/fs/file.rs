//! Open files: open and create (a write episode begins), I/O when not passed through, release
//! (the episode ends), fsync, fallocate, copy_file_range, lseek, and FUSE passthrough ids.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, Weak};

use fuser::{BackingId, Errno, FileAttr, FileHandle, FopenFlags, INodeNo};

use super::attr::{attr, key, killed_suid};
use super::backing::{self, PASSED_OPEN_FLAGS, join};
use super::{Caller, Core, Result, lock, record_errno};
use crate::history::recorder::{Key, Through};
use crate::history::who::By;

/// An open regular file.
pub(super) struct OpenFile {
    pub(super) file: File,
    /// The FUSE inode it was opened as (for `fstat` of a file whose last name is gone).
    pub(super) ino: u64,
    /// Opened `O_DIRECT` without passthrough: the alignment the disk requires of offsets and
    /// lengths, checked here as the disk would (the backing fd is not `O_DIRECT`: the daemon's
    /// buffers are its own). The caller's buffer address never reaches the daemon, so its
    /// alignment cannot be checked.
    direct_align: u32,
    /// The write episode this handle holds open, if it was opened for writing (or, for an
    /// `O_TMPFILE`, once it was given a name).
    episode: Mutex<Option<Key>>,
    /// The thread that opened it (`By::pid`), for its episode to tell whose handle is
    /// released.
    opener: u32,
    /// `file` may be read through (opened for reading, not `O_DIRECT`): known from the flags it
    /// was opened with, which the daemon never changes, so its RELEASE need not ask.
    readable: bool,
    /// Held while the handle is open: the kernel must see the same backing id for every open
    /// handle of an inode.
    _backing_id: Option<Arc<BackingId>>,
}

impl OpenFile {
    /// `EINVAL` for direct I/O at an offset or of a length the disk would refuse.
    fn check_direct(&self, offset: u64, len: usize) -> Result<()> {
        let align = u64::from(self.direct_align);
        if align > 1 && (!offset.is_multiple_of(align) || !(len as u64).is_multiple_of(align)) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }
}

/// What an open gives the kernel.
pub(super) struct Opened {
    pub(super) fh: u64,
    pub(super) backing: Option<Arc<BackingId>>,
    pub(super) flags: FopenFlags,
}

/// Tests only: `REWIND_TEST_SLOW_CREATE_LOOKED=MS` makes a create that found no file at its
/// name wait that long before it opens it (`O_CREAT`), so that a test can have a rollback make
/// the file in between.
static SLOW_CREATE_LOOKED: crate::TestDelay =
    crate::TestDelay::new("REWIND_TEST_SLOW_CREATE_LOOKED");

/// How many times an open for writing looks again at a name whose file was replaced while
/// its content was being stored ([`Core::begin_write_as`], [`Core::begin_and_open`]).
const REPLACED_TRIES: u32 = 8;

/// How many times an open for writing looks up again the name of a file renamed before it
/// held it ([`Core::begin_and_open`]).
const MOVED_TRIES: u32 = 4;

/// What [`Core::begin_and_open`] gives: the episode begun, the file opened with its open flags,
/// its `fstat`, and the path it was opened at.
type Opening = (Option<Key>, (File, i32), libc::stat, Vec<u8>);

/// Whether an fd opened with `flags` may be read through: opened for reading, not `O_DIRECT`.
fn readable(flags: i32) -> bool {
    flags & libc::O_DIRECT == 0 && matches!(flags & libc::O_ACCMODE, libc::O_RDONLY | libc::O_RDWR)
}

/// The store could not read the file at a name: it is gone, or another file took the name.
fn not_found(e: &crate::history::Error) -> bool {
    matches!(e, crate::history::Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

/// Whether an open writes (or truncates) the file.
pub(super) fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Core {
    /// Store the content of the file at `path` (`st`, its `lstat`) before it may change;
    /// returns the episode to end at release. The content before is read by path: if another
    /// file took the name meanwhile (an atomic save renamed over it), the name is looked at
    /// again, and the open goes on with the file it names now, as it would have without
    /// recording.
    fn begin_write_as(&self, path: &[u8], st: libc::stat, by: By) -> Result<Option<Key>> {
        let Some(rec) = &self.recorder else {
            return Ok(None);
        };
        let mut st = st;
        let mut tries = 0;
        loop {
            match rec.begin_write(path, &st, by) {
                Err(e) if tries < REPLACED_TRIES && not_found(&e) => {
                    match self.backing.stat(path) {
                        Ok(now) if key(&now) != key(&st) => {
                            st = now;
                            tries += 1;
                        }
                        _ => return Err(record_errno(e)),
                    }
                }
                begun => return begun.map_err(record_errno),
            }
        }
    }

    /// Begin the write episode of the file `ino`, found at `path`, and open it there (`open`,
    /// given the path and whether an episode began), the file held at its name in between
    /// ([`Recorder::hold_at`]): no rename through the mount can move it away or put another
    /// file at the name meanwhile, so the episode is of the file opened. A rename that moved it
    /// before it was held has updated the table of names by then (it holds its files until
    /// it has), so its name is looked up again: the open is of the inode the caller looked
    /// up, as on disk, where a name of it that stays (a hard link) must keep naming it. With no
    /// name left (replaced by a save), moved from outside the mount (the table never learns),
    /// or not in the table, the open goes on with what the name holds, looked at again if that
    /// changes while its content is stored, as [`begin_write_as`](Self::begin_write_as) does.
    /// `first`: open it first and read its content before through the new fd (a read-write
    /// open, which changes nothing by itself); else the content is stored before `open`, which
    /// may truncate it. Returns the episode, the file with its open flags, its `fstat`, and the
    /// path it was opened at.
    ///
    /// [`Recorder::hold_at`]: crate::history::recorder::Recorder::hold_at
    pub(super) fn begin_and_open(
        &self,
        ino: u64,
        path: Vec<u8>,
        by: By,
        first: bool,
        mut open: impl FnMut(&[u8], bool) -> io::Result<(File, i32)>,
    ) -> Result<Opening> {
        let Some(rec) = &self.recorder else {
            let file = open(&path, false)?;
            let st = backing::stat_fd(file.0.as_fd())?;
            return Ok((None, file, st, path));
        };
        // Its own statement: the table's lock is not held while waiting for the file.
        let inode_key = self.inodes().key(ino);
        let mut path = path;
        // The name the open came by, once the inode is looked for under another.
        let mut asked: Option<Vec<u8>> = None;
        let (mut moved, mut tries) = (0, 0);
        let mut waited_out = false;
        loop {
            let named = match inode_key {
                Some(key) => match rec.hold_at(&path, key)? {
                    Some(named) => named,
                    None if moved < MOVED_TRIES => {
                        moved += 1;
                        match self.reachable_path(INodeNo(ino)) {
                            Ok(now) => {
                                let was = std::mem::replace(&mut path, now);
                                asked.get_or_insert(was);
                                continue;
                            }
                            // Replaced (a save renamed over it), with no name left: the open
                            // is of what the name it came by holds now, as one a moment later
                            // would be (not `ESTALE`, which the kernel retries only once). Not
                            // of a name the inode was looked for under since: a second name
                            // it lost meanwhile (a hard link unlinked) holds nothing.
                            Err(_) => {
                                if let Some(asked) = asked.take() {
                                    path = asked;
                                }
                                rec.hold_named(&path)?
                            }
                        }
                    }
                    None => rec.hold_named(&path)?,
                },
                None => rec.hold_named(&path)?,
            };
            // A rollback writing the file: this open comes after it (`Recorder::restoring`).
            let held = key(named.stat());
            if !waited_out && rec.restoring(held, by.pid) {
                drop(named);
                waited_out = !rec.await_restored(held, by.pid);
                continue;
            }
            let (episode, file, st) = if first {
                let file = open(&path, false)?;
                let st = backing::stat_fd(file.0.as_fd())?;
                if key(&st) != key(named.stat()) && tries < REPLACED_TRIES {
                    tries += 1;
                    continue;
                }
                let through = readable(file.1).then_some(&file.0);
                let episode = rec
                    .begin_write_named(&named, &path, &st, by, through)
                    .map_err(record_errno)?;
                (episode, file, st)
            } else {
                let episode = match rec.begin_write_named(&named, &path, named.stat(), by, None) {
                    Err(e) if tries < REPLACED_TRIES && not_found(&e) => {
                        tries += 1;
                        continue;
                    }
                    begun => begun.map_err(record_errno)?,
                };
                let opened = open(&path, episode.is_some()).and_then(|file| {
                    let st = backing::stat_fd(file.0.as_fd())?;
                    Ok((file, st))
                });
                match opened {
                    Ok((file, st)) => (episode, file, st),
                    Err(e) => {
                        // Its end holds the file.
                        drop(named);
                        self.end_write(episode);
                        return Err(e.into());
                    }
                }
            };
            return Ok((episode, file, st, path));
        }
    }

    /// Open the file at `path` for a rollback to rewrite in place (not truncated yet) and begin
    /// its episode, noted in the store at once (see `Recorder::begin_restore`): the episode is
    /// of the file opened. Begun first and opened by the name after, a save renaming its file
    /// over the name in between had the rollback write into the saved file, and nothing
    /// recorded it. Returns the file, its `fstat`, whether another process had it open for
    /// writing, and the episode.
    pub(super) fn open_to_restore(
        &self,
        path: &[u8],
        by: By,
    ) -> Result<(File, libc::stat, bool, Option<Key>)> {
        let mut tries = 0;
        loop {
            let file = self.backing.open_file(path, libc::O_WRONLY, 0)?;
            let st = backing::stat_fd(file.as_fd())?;
            let Some(rec) = &self.recorder else {
                return Ok((file, st, false, None));
            };
            let written = rec.is_open(&st);
            // Another file at the name once held (a save): opened again, as `begin_write_as`
            // looks again.
            match rec.begin_restore(path, &st, by) {
                Err(e) if tries < REPLACED_TRIES && not_found(&e) => tries += 1,
                begun => return Ok((file, st, written, begun.map_err(record_errno)?)),
            }
        }
    }

    pub(super) fn end_write(&self, episode: Option<Key>) {
        self.end_write_through(episode, None, None, None);
    }

    /// [`end_write`](Self::end_write) of a file the daemon made and wrote through `file`
    /// (a rollback's): kept to read it from if the daemon cannot open it by its name.
    pub(super) fn end_write_of_made(&self, episode: Option<Key>, file: &File) {
        let reader = episode.and_then(|_| self.reader_if_unreadable(file));
        self.end_write_through(episode, None, reader, None);
    }

    /// [`end_write`](Self::end_write) at the release of a handle whose fd is `file`: if the
    /// episode ends there and `file` may be read, the new content is read through it (what
    /// the kernel wrote through passthrough and what the daemon wrote are in the same file)
    /// instead of opening the file again by its path. `reader`: a handle to keep for a new
    /// file the daemon cannot open by its name (see
    /// [`reader_if_unreadable`](Core::reader_if_unreadable)).
    fn end_write_through(
        &self,
        episode: Option<Key>,
        file: Option<Through>,
        reader: Option<File>,
        opener: Option<u32>,
    ) {
        if let (Some(rec), Some(key)) = (&self.recorder, episode)
            && let Err(e) = rec.end_write(key, file, reader, opener)
        {
            tracing::error!("cannot record the end of a write: {e}");
        }
    }

    /// A handle on `file` for the recorder to read it from, if the daemon (not root) may not
    /// be able to open it by its name (no read bit for it in its mode) and `file` is readable.
    fn reader_if_unreadable(&self, file: &File) -> Option<File> {
        if self.euid == 0 || self.recorder.is_none() {
            return None;
        }
        let st = backing::stat_fd(file.as_fd()).ok()?;
        let mode = st.st_mode;
        let readable =
            mode & libc::S_IROTH != 0 || (st.st_uid == self.euid && mode & libc::S_IRUSR != 0);
        // SAFETY: F_GETFL on a valid fd reads its flags.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        if readable || flags < 0 || flags & libc::O_ACCMODE == libc::O_WRONLY {
            return None;
        }
        file.try_clone().ok()
    }

    /// Flags for the backing open: the caller's that mean the same underneath, and reading
    /// allowed where the kernel may need it for the page cache.
    fn backing_flags(&self, flags: i32) -> i32 {
        let mut flags = flags & PASSED_OPEN_FLAGS;
        if !self.passthrough() {
            // The writeback cache reads pages around partial writes and sends appends as
            // positioned writes, so the backing fd must be readable and not O_APPEND. Direct
            // I/O reaches the daemon with buffers of its own, not aligned for O_DIRECT.
            flags &= !(libc::O_APPEND | libc::O_DIRECT);
            if flags & libc::O_ACCMODE == libc::O_WRONLY {
                flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            }
        }
        flags
    }

    /// The backing id to pass through for `ino`, shared with its other open handles.
    fn backing_id(
        &self,
        ino: u64,
        file: &File,
        open: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> io::Result<Arc<BackingId>> {
        let mut ids = lock(&self.backing_ids);
        if let Some(id) = ids.get(&ino).and_then(Weak::upgrade) {
            return Ok(id);
        }
        let id = Arc::new(open(file)?);
        ids.insert(ino, Arc::downgrade(&id));
        if ids.len() > 1024 {
            ids.retain(|_, w| w.strong_count() > 0);
        }
        Ok(id)
    }

    fn has_backing_id(&self, ino: u64) -> bool {
        lock(&self.backing_ids)
            .get(&ino)
            .is_some_and(|w| w.strong_count() > 0)
    }

    /// Register an opened backing file as a handle. `direct`: data goes through the daemon
    /// (no passthrough), for writes the daemon must see.
    #[allow(clippy::too_many_arguments)]
    fn finish_open(
        &self,
        caller: &Caller,
        ino: u64,
        (file, backing_flags): (File, i32),
        episode: Option<Key>,
        open_flags: i32,
        direct: bool,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened> {
        let id = if self.passthrough() && !direct {
            match self.backing_id(ino, &file, open_backing) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.end_write(episode);
                    return Err(e.into());
                }
            }
        } else {
            None
        };
        let flags = if direct {
            FopenFlags::FOPEN_DIRECT_IO
        } else if self.passthrough() {
            FopenFlags::empty()
        } else {
            // The mount is the only writer underneath, so cached pages stay valid across opens.
            FopenFlags::FOPEN_KEEP_CACHE
        };
        let direct_align = if !self.passthrough() && open_flags & libc::O_DIRECT != 0 {
            backing::direct_io_alignment(&file)
        } else {
            0
        };
        let readable = readable(backing_flags);
        let fh = self.files.insert(OpenFile {
            file,
            ino,
            direct_align,
            episode: Mutex::new(episode),
            opener: caller.by().pid,
            readable,
            _backing_id: id.clone(),
        });
        Ok(Opened {
            fh,
            backing: id,
            flags,
        })
    }

    /// With passthrough the kernel writes to the backing file with the daemon's credentials,
    /// which keep set-ID bits; a process without CAP_FSETID must lose them on write, as on
    /// disk. Its writes to a set-ID file therefore go through the daemon (which is told to
    /// clear them), unless the file is already passed through for another handle (the kernel
    /// allows only one mode per inode).
    fn writes_must_clear_suid(
        &self,
        caller: &Caller,
        ino: u64,
        flags: i32,
        st: &libc::stat,
    ) -> bool {
        self.passthrough()
            && caller.uid != 0
            && writes(flags)
            && killed_suid(st.st_mode).is_some()
            && !self.has_backing_id(ino)
    }

    pub(super) fn open(
        &self,
        caller: &Caller,
        ino: INodeNo,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened> {
        let _names = self.names_shared();
        let path = match self.reachable_path(ino) {
            Ok(path) => path,
            // No name left. A file unlinked while open, opened again through
            // `/proc/PID/fd/N`, is reopened through a handle the daemon holds on it, as on
            // disk (nothing to record: it is in no tree); else `ESTALE`, and the kernel looks
            // the name up again (`named_path`).
            Err(e) => {
                return match self.files.find(|f| f.ino == ino.0) {
                    Some(open) => self.reopen(caller, ino, &open.file, flags, open_backing),
                    None => Err(super::stale_if_nameless(e)),
                };
            }
        };
        let (episode, (file, backing_flags), st, path) = if writes(flags) {
            // A read-write open changes nothing by itself, and nothing can be written before
            // it is answered: the file is opened first, and its content stored as the fd
            // shows it. Otherwise the content is stored before the open that could truncate
            // or change it.
            let first = flags & libc::O_ACCMODE == libc::O_RDWR && flags & libc::O_TRUNC == 0;
            self.begin_and_open(ino.0, path, caller.by(), first, |path, episode| {
                self.open_backing(path, flags, episode)
            })?
        } else {
            SLOW_OPEN_READ.pause();
            let opened = self.open_backing(&path, flags, false)?;
            let st = backing::stat_fd(opened.0.as_fd())?;
            // Opened by the name the table has for the inode: a rename over that name may
            // have landed underneath before the table follows it (a `sed -i` saving over the
            // file this process is opening). The handle was then another file's under this
            // inode, and what the process did through it (an `fchmod`, a chmod the kernel
            // sent for the inode once it had no name) went to the saved file, unrecorded.
            // `ESTALE`: the kernel looks the name up again and opens what it holds now.
            if self.inodes().key(ino.0).is_some_and(|k| k != key(&st)) {
                return Err(Errno::ESTALE);
            }
            (None, opened, st, path)
        };
        if flags & libc::O_TRUNC != 0 && caller.uid != 0 {
            self.kill_suid(&Some(path.clone()), Some(&file))?;
        }
        // A daemon that is not root may not read the file by its name once its owner makes it
        // unreadable: its episode keeps a handle to read it through.
        if self.euid != 0
            && let (Some(rec), Some(key)) = (&self.recorder, episode)
            && readable(backing_flags)
            && let Ok(reader) = file.try_clone()
        {
            rec.keep_reader(key, reader);
        }
        let direct = self.writes_must_clear_suid(caller, ino.0, flags, &st);
        self.finish_open(
            caller,
            ino.0,
            (file, backing_flags),
            episode,
            flags,
            direct,
            open_backing,
        )
    }

    /// The backing fd for an open of the regular file `path` with the caller's `flags`. One
    /// that begins a write episode (`episode`) and may only write is opened read-write when
    /// the daemon may read the file, so that the episode's end reads the new content through
    /// it ([`release`](Self::release)) instead of opening the file again by its path (two
    /// opens, one of them through `/proc`). The caller gains nothing by it: the kernel checks
    /// a read against the caller's own open (`EBADF` for a write-only one), and passes
    /// through with a file of its own opened with the caller's flags; without passthrough the
    /// fd is read-write anyway (see [`backing_flags`](Self::backing_flags)). Where the daemon
    /// may not read (`EACCES`: a daemon that is not root, a file its owner made write-only),
    /// the open is refused: what it would write could not be read at the episode's end, and
    /// would be missing from the history (the recorder refuses what it cannot record). Where
    /// a read-write open is not allowed for another reason (`EPERM`: an append-only file), the
    /// open is what the caller asked.
    /// Returns the fd with the flags it was opened with.
    fn open_backing(&self, path: &[u8], flags: i32, episode: bool) -> io::Result<(File, i32)> {
        let flags = self.backing_flags(flags);
        if episode && flags & libc::O_ACCMODE == libc::O_WRONLY {
            let rdwr = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            match self.backing.open_file(path, rdwr, 0) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
                opened => return opened.map(|f| (f, rdwr)),
            }
        }
        self.backing.open_file(path, flags, 0).map(|f| (f, flags))
    }

    /// Open again, with `flags`, the file with no name left that `held` (a handle's fd) is
    /// open on ([`backing::reopen`]).
    fn reopen(
        &self,
        caller: &Caller,
        ino: INodeNo,
        held: &File,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<Opened> {
        let backing_flags = self.backing_flags(flags);
        let file = backing::reopen(
            held,
            rustix::fs::OFlags::from_bits_retain(backing_flags as u32),
        )?;
        let st = backing::stat_fd(file.as_fd())?;
        let direct = self.writes_must_clear_suid(caller, ino.0, flags, &st);
        self.finish_open(
            caller,
            ino.0,
            (file, backing_flags),
            None,
            flags,
            direct,
            open_backing,
        )
    }

    pub(super) fn create(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, Opened)> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let _names = self.names_shared();
        let _making = self.making();
        let parent_path = self.path(parent)?;
        let path = join(&parent_path, name);
        // An existing file opened through create (O_CREAT without O_EXCL) is a write.
        let existing = self.backing.stat(&path).ok();
        if existing.is_none() {
            SLOW_CREATE_LOOKED.pause();
        }
        let mut episode = None;
        if let Some(st) = existing
            && flags & libc::O_EXCL == 0
        {
            episode = self.begin_write_as(&path, st, caller.by())?;
        }
        if existing.is_none()
            && let Some(rec) = &self.recorder
        {
            rec.ready_for(&path, false).map_err(record_errno)?;
        }
        let mut backing_flags = self.backing_flags(flags) | libc::O_CREAT | (flags & libc::O_EXCL);
        // A daemon that is not root cannot open by its name a new file its mode makes
        // unreadable (`open(O_CREAT|O_WRONLY, 0)`): the file is made readable-and-writable,
        // as its creator may, so that its content can be captured from the handle at its
        // close (`release`). If it turns out to be there already, opened as asked. An existing
        // file being written is opened as [`open_backing`](Self::open_backing) opens it: read
        // too, and refused if the daemon may not read it (what is written would be missing from
        // the history).
        let read_too = self.recorder.is_some()
            && backing_flags & libc::O_ACCMODE == libc::O_WRONLY
            && ((existing.is_none() && self.euid != 0) || episode.is_some());
        if read_too {
            backing_flags = (backing_flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let mut opened = self.backing.open_file(&path, backing_flags, mode);
        let denied = |opened: &io::Result<File>, errno| {
            opened
                .as_ref()
                .is_err_and(|e| e.raw_os_error() == Some(errno))
        };
        if read_too
            && (denied(&opened, libc::EPERM) || episode.is_none() && denied(&opened, libc::EACCES))
        {
            backing_flags = (backing_flags & !libc::O_ACCMODE) | libc::O_WRONLY;
            opened = self.backing.open_file(&path, backing_flags, mode);
        }
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                self.end_write(episode);
                return Err(e.into());
            }
        };
        if existing.is_none() {
            super::namespace::SLOW_MADE.pause();
            if let Err(e) = self.chown_new(caller, &path) {
                // Not given to its caller: take it back, as nothing is recorded yet.
                let _ = self.backing.unlink(&parent_path, name, false);
                return Err(e);
            }
        } else if flags & libc::O_TRUNC != 0 && caller.uid != 0 {
            self.kill_suid(&Some(path.clone()), Some(&file))?;
        }
        let st = backing::stat_fd(file.as_fd())?;
        if existing.is_none()
            && let Some(rec) = &self.recorder
        {
            episode = rec
                .begin_create(&path, &st, caller.by())
                .map_err(record_errno)?;
        }
        let ino = self.enter(parent, name.as_bytes(), key(&st));
        // A new file has no capabilities.
        if existing.is_none() {
            self.note_no_caps(ino);
        }
        let direct = existing.is_some() && self.writes_must_clear_suid(caller, ino, flags, &st);
        let opened = self.finish_open(
            caller,
            ino,
            (file, backing_flags),
            episode,
            flags,
            direct,
            open_backing,
        )?;
        Ok((attr(ino, &st), opened))
    }

    /// `O_TMPFILE`: an unnamed file in folder `parent`, open. Nothing is recorded until a
    /// `link` gives it a name (nothing existed before it, nothing is destroyed).
    pub(super) fn tmpfile(
        &self,
        caller: &Caller,
        parent: INodeNo,
        mode: u32,
        flags: i32,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(FileAttr, Opened)> {
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        let backing_flags = self.backing_flags(flags);
        let file = self
            .backing
            .open_tmpfile(&parent_path, backing_flags, mode)?;
        if self.euid == 0 && (caller.uid != 0 || caller.gid != 0) {
            backing::set_fd_owner(&file, Some(caller.uid), Some(caller.gid))?;
        }
        let st = backing::stat_fd(file.as_fd())?;
        let ino = self.inodes().unnamed(key(&st));
        self.note_no_caps(ino);
        let opened = self.finish_open(
            caller,
            ino,
            (file, backing_flags),
            None,
            flags,
            false,
            open_backing,
        )?;
        Ok((attr(ino, &st), opened))
    }

    /// An `O_TMPFILE` of inode `ino` is being given its first name `new_path`: link it from
    /// its open handle. Returns the handle, to start its write episode once linked.
    pub(super) fn link_unnamed(
        &self,
        ino: INodeNo,
        new_parent: &[u8],
        name: &OsStr,
    ) -> Result<Arc<OpenFile>> {
        let open = self.files.find(|f| f.ino == ino.0).ok_or(Errno::ENOENT)?;
        self.backing.link_fd(&open.file, new_parent, name)?;
        Ok(open)
    }

    /// A file named for the first time while open (an `O_TMPFILE`) is a new file being
    /// written: its create is recorded at its last close, like any other.
    pub(super) fn begin_named(&self, open: &OpenFile, path: &[u8], by: By) -> Result<()> {
        let Some(rec) = &self.recorder else {
            return Ok(());
        };
        let st = backing::stat_fd(open.file.as_fd())?;
        let episode = rec.begin_create(path, &st, by).map_err(record_errno)?;
        *lock(&open.episode) = episode;
        Ok(())
    }

    pub(super) fn read(&self, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        open.check_direct(offset, size as usize)?;
        let mut buf = vec![0u8; size as usize];
        let mut filled = 0;
        while filled < buf.len() {
            match open
                .file
                .read_at(&mut buf[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    /// A write that reached the daemon. `kill_suid`: the writer lacks CAP_FSETID, so set-ID
    /// bits go, as on disk.
    pub(super) fn write(
        &self,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        kill_suid: bool,
    ) -> Result<u32> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        open.check_direct(offset, data.len())?;
        open.file.write_all_at(data, offset)?;
        if kill_suid {
            self.kill_suid(&None, Some(&open.file))?;
        }
        Ok(data.len() as u32)
    }

    /// Whether the open handle `fh` holds a write episode (its RELEASE may record).
    pub(super) fn holds_episode(&self, fh: FileHandle) -> bool {
        self.files
            .get(fh.0)
            .is_some_and(|open| lock(&open.episode).is_some())
    }

    /// At the RELEASE of `fh`: if its write episode is held by other handles too, leave it
    /// (the episode goes on, nothing is recorded) and say so; the release then ends nothing.
    /// Not a handle the episode would keep to read the file from (see
    /// [`end_write_through`](Self::end_write_through)): its release hands it over.
    pub(super) fn leave_shared_episode(&self, fh: FileHandle) -> bool {
        let (Some(rec), Some(open)) = (&self.recorder, self.files.get(fh.0)) else {
            return false;
        };
        if self.reader_if_unreadable(&open.file).is_some() {
            return false;
        }
        let key = *lock(&open.episode);
        match key {
            Some(key) if rec.leave_if_shared(key, open.opener) => {
                *lock(&open.episode) = None;
                true
            }
            _ => false,
        }
    }

    pub(super) fn release(&self, fh: FileHandle) {
        SLOW_RELEASE.pause();
        if let Some(open) = self.files.remove(fh.0) {
            slow_release_of(self, open.ino);
            let episode = lock(&open.episode).take();
            let reader = episode.and_then(|_| self.reader_if_unreadable(&open.file));
            // The handle's fd is given to the end of its episode, which a closed edit keeps
            // to be read by the writer thread (no `dup` here, and its close is the writer
            // thread's). Its backing id goes after the end, as the fd did before.
            match Arc::try_unwrap(open) {
                Ok(OpenFile {
                    file,
                    readable,
                    opener,
                    _backing_id,
                    ..
                }) => {
                    let through = readable.then_some(Through::Given(file));
                    self.end_write_through(episode, through, reader, Some(opener));
                    drop(_backing_id);
                }
                Err(open) => {
                    let through = open.readable.then_some(Through::Lent(&open.file));
                    self.end_write_through(episode, through, reader, Some(open.opener));
                }
            }
        }
    }

    pub(super) fn fsync(&self, fh: FileHandle, datasync: bool) -> Result<()> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        if datasync {
            open.file.sync_data()?;
        } else {
            open.file.sync_all()?;
        }
        // fsync of a workspace file makes its history durable too (a new file's create that
        // is not recorded yet included: see `Recorder::sync_file`).
        match &self.recorder {
            Some(rec) => {
                let st = backing::stat_fd(open.file.as_fd())?;
                rec.sync_file(&st).map_err(record_errno)
            }
            None => Ok(()),
        }
    }

    pub(super) fn fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<()> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        backing::fallocate(&open.file, mode, offset, length).map_err(Errno::from)
    }

    pub(super) fn copy_file_range(
        &self,
        fh_in: FileHandle,
        offset_in: u64,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
    ) -> Result<u32> {
        let src = self.files.get(fh_in.0).ok_or(Errno::EBADF)?;
        let dst = self.files.get(fh_out.0).ok_or(Errno::EBADF)?;
        let n = backing::copy_file_range(&src.file, offset_in, &dst.file, offset_out, len)?;
        Ok(n as u32)
    }

    pub(super) fn lseek(&self, fh: FileHandle, offset: i64, whence: i32) -> Result<i64> {
        if !self.passthrough() {
            // With the writeback cache, written data may not have reached the backing file yet,
            // so it would look like a hole (and a sparse-aware copy would drop it). ENOSYS makes
            // the kernel treat the whole file as data from now on: always safe.
            return Err(Errno::ENOSYS);
        }
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        backing::lseek(&open.file, offset, whence).map_err(Errno::from)
    }
}

/// Tests only: `REWIND_TEST_SLOW_RELEASE=MS` makes every RELEASE wait that long before it is
/// handled, as when the FUSE thread that took it is slow to run, so that a request sent after
/// the writer's close is handled first.
static SLOW_RELEASE: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_RELEASE");

/// Tests only: `REWIND_TEST_SLOW_OPEN_READ=MS` makes every open that does not write wait that
/// long between finding the inode's name and opening the file by it, so that a test can rename
/// another file over the name in between.
static SLOW_OPEN_READ: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_OPEN_READ");

/// Tests only: `REWIND_TEST_SLOW_RELEASE_OF=NAME:MS` makes the RELEASE of a file named `NAME`
/// wait that long before it is handled, and no other: the writer's next file is closed, and
/// its RELEASE handled, while the first one's waits.
fn slow_release_of(core: &Core, ino: u64) {
    static OF: std::sync::OnceLock<Option<(Vec<u8>, u64)>> = std::sync::OnceLock::new();
    let of = OF.get_or_init(|| {
        let v = std::env::var("REWIND_TEST_SLOW_RELEASE_OF").ok()?;
        let (name, ms) = v.rsplit_once(':')?;
        Some((name.as_bytes().to_vec(), ms.parse().ok()?))
    });
    let Some((name, ms)) = of else {
        return;
    };
    let path = core.path(INodeNo(ino)).unwrap_or_default();
    if path.rsplit(|&b| b == b'/').next() == Some(&name[..]) {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
}
