//! Rollbacks, carried out by the daemon on the directory underneath the mount: through the same
//! cores as FUSE requests (so every step is recorded, as a `restore`), relative to folder fds
//! opened without following symlinks (so nothing leaves the workspace: a path whose folder has
//! become a symlink fails with ELOOP and is reported), and never with a syscall on the mount
//! itself (the daemon would wait on itself). The kernel is then told what changed, as it
//! caches entries and attributes for a day.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use fuser::{Errno, INodeNo};

use super::attr::key;
use super::backing::{self, split};
use super::{Caller, Core};
use crate::history::change::Node;
use crate::history::recorder::Key;
use crate::history::rollback::{Apply, Names, Put};
use crate::history::who::By;
use crate::history::{Error, Result, show_path};

/// Carries out one rollback, as thread `tid` (which the attributor knows as the rollback's).
pub struct Restorer {
    core: Arc<Core>,
    tid: u32,
    /// What to tell the kernel once a step is done and the names lock let go: a notification
    /// may wait for a folder's lock, held by a process whose rename waits for that lock.
    notices: Mutex<Vec<Notice>>,
}

/// A change to tell the kernel about (see [`Restorer::tell_kernel`]).
enum Notice {
    /// `name` in `parent` is gone (it was inode `child`).
    Deleted {
        parent: u64,
        child: u64,
        name: Vec<u8>,
    },
    /// `name` in `parent` is something else now (or nothing).
    Entry { parent: u64, name: Vec<u8> },
    /// Inode `ino`'s content or attributes changed.
    Inode(u64),
}

/// Tests only: `REWIND_TEST_SLOW_RESTORE_END=MS` makes a rollback's rewrite of a file in place
/// wait that long once written, before its episode ends.
static SLOW_RESTORE_END: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_RESTORE_END");

/// Tests only: `REWIND_TEST_SLOW_RESTORE_WRITE=MS` makes a rollback's writing of a file's
/// content wait that long after its first write (the file half written).
static SLOW_RESTORE_WRITE: crate::TestDelay =
    crate::TestDelay::new("REWIND_TEST_SLOW_RESTORE_WRITE");

/// The file a rollback writes a content into: how much it took, and why it refused the rest.
/// Paused after its first write when a test asks (`SLOW_RESTORE_WRITE`).
struct Target<'f> {
    file: &'f mut std::fs::File,
    written: u64,
    refused: Option<std::io::Error>,
}

impl Write for Target<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.write(buf) {
            Ok(n) => {
                if self.written == 0 {
                    SLOW_RESTORE_WRITE.pause();
                }
                self.written += n as u64;
                Ok(n)
            }
            Err(e) => {
                // `write_all` tries again after an interrupted write.
                if self.refused.is_none() && e.kind() != std::io::ErrorKind::Interrupted {
                    self.refused = Some(std::io::Error::new(e.kind(), e.to_string()));
                }
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Write a content into `file`, the file at `path`. A write the file refused (its disk full)
/// is the file's error, named by its path and saying how much of the content it holds (the
/// error of the copy out of the store named the stored content instead).
fn write_content(
    path: &[u8],
    file: &mut std::fs::File,
    content: &mut dyn FnMut(&mut dyn Write) -> Result<u64>,
) -> Result<()> {
    let mut target = Target {
        file,
        written: 0,
        refused: None,
    };
    let written = content(&mut target).and_then(|_| {
        target.flush().map_err(|e| Error::Io {
            path: show_path(path).into(),
            source: e,
        })
    });
    match (written, target.refused) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(e)) => Err(Error::Io {
            path: show_path(path).into(),
            source: std::io::Error::new(
                e.kind(),
                format!(
                    "{e}: it holds the first {} bytes of the content it was to get",
                    target.written
                ),
            ),
        }),
        (Err(e), None) => Err(e),
    }
}

/// Tests only: `REWIND_TEST_SLOW_RESTORE_MADE=MS` makes a rollback's making of a new file
/// wait that long once the file has its name, before its create is begun.
static SLOW_RESTORE_MADE: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_RESTORE_MADE");

/// A FUSE errno as a history error naming the path.
fn failed(path: &[u8], e: Errno) -> Error {
    Error::Io {
        path: show_path(path).into(),
        source: std::io::Error::from_raw_os_error(e.code()),
    }
}

impl Restorer {
    pub fn new(core: Arc<Core>, tid: u32) -> Restorer {
        core.restores
            .begun
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Restorer {
            core,
            tid,
            notices: Mutex::new(Vec::new()),
        }
    }

    /// Do one step with the paths holding still (`Core::names`), then tell the kernel what
    /// changed.
    fn step<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let names = self.core.names_shared();
        let result = f();
        // A step inside another leaves the telling to it.
        let outermost = names.taken();
        drop(names);
        if outermost {
            self.tell_kernel();
        }
        result
    }

    fn notice(&self, notice: Notice) {
        self.notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(notice);
    }

    /// Tell the kernel what the steps so far changed, as it caches entries and attributes.
    fn tell_kernel(&self) {
        let notices = std::mem::take(&mut *self.notices.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(notifier) = self.core.notifier.get() else {
            return;
        };
        for notice in notices {
            let result = match &notice {
                Notice::Deleted {
                    parent,
                    child,
                    name,
                } => notifier.delete(INodeNo(*parent), INodeNo(*child), OsStr::from_bytes(name)),
                Notice::Entry { parent, name } => {
                    notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
                }
                Notice::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
            };
            // ENOENT: the kernel had already dropped it.
            if let Err(e) = result
                && e.raw_os_error() != Some(libc::ENOENT)
            {
                tracing::debug!("cannot tell the kernel about a restored path: {e}");
            }
        }
    }

    fn parts<'p>(&self, path: &'p [u8]) -> Result<(&'p [u8], &'p OsStr)> {
        split(path).ok_or(Error::NotRestored("the workspace root itself is"))
    }

    /// The rollback's thread, for attribution (the attributor knows it as the rollback's).
    fn by(&self) -> By {
        By {
            pid: self.tid,
            uid: self.core.euid,
        }
    }

    /// Act as the owner of the folder a new object goes in (a root daemon gives it to them).
    fn caller_in(&self, parent: &[u8]) -> Caller {
        let (uid, gid) = self
            .core
            .backing
            .stat(parent)
            .map(|st| (st.st_uid, st.st_gid))
            .unwrap_or((self.core.euid, 0));
        Caller {
            pid: self.tid,
            uid,
            gid,
        }
    }

    /// Tell the kernel `name` in `parent` changed (now exists, or not), and keep the inode
    /// table in step with a removal.
    fn entry_changed(&self, parent: &[u8], name: &OsStr, removed: Option<&libc::stat>) {
        let (parent_ino, child) = {
            let mut inodes = self.core.inodes();
            let Some(parent_ino) = inodes.find(parent) else {
                // The kernel has never looked into this folder: it caches nothing of it.
                return;
            };
            let child = inodes.child(parent_ino, name.as_bytes());
            if let Some(st) = removed {
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR || st.st_nlink <= 1 {
                    inodes.gone(parent_ino, name.as_bytes());
                } else {
                    inodes.unlinked(parent_ino, name.as_bytes());
                }
            }
            (parent_ino, child)
        };
        let name = name.as_bytes().to_vec();
        match (removed, child) {
            // The kernel takes a deleted entry's inode to have no links left (`clear_nlink`):
            // a file with other names is told as a name gone and attributes changed, or those
            // names would show a link count of 0.
            (Some(st), Some(child))
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 =>
            {
                self.notice(Notice::Entry {
                    parent: parent_ino,
                    name,
                });
                self.notice(Notice::Inode(child));
            }
            (Some(_), Some(child)) => self.notice(Notice::Deleted {
                parent: parent_ino,
                child,
                name,
            }),
            _ => self.notice(Notice::Entry {
                parent: parent_ino,
                name,
            }),
        }
    }

    /// Tell the kernel a file's content or attributes changed.
    /// Take away whatever `path` (`name` in `parent`) is now, so that something new can be
    /// made there.
    fn clear(&self, caller: &Caller, parent: &[u8], name: &OsStr, path: &[u8]) -> Result<()> {
        if let Ok(st) = self.core.backing.stat(path) {
            let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            if !dir {
                self.cut_writer(path)?;
            }
            // The table of names follows in `entry_changed`, with the kernel's notice.
            let making = self.core.making_none();
            let st = self
                .core
                .unlink_at(caller, parent, name, dir, &mut |_| {})
                .map_err(|e| failed(path, e))?;
            drop(making);
            self.entry_changed(parent, name, Some(&st));
        }
        Ok(())
    }

    /// A file at `path` a process is writing (a forced rollback removing or replacing it):
    /// what it wrote so far is its own change first, a new file's create included. Removed
    /// unrecorded, a file made and written since the point left no history at all.
    fn cut_writer(&self, path: &[u8]) -> Result<()> {
        if let Some(rec) = &self.core.recorder
            && let Ok(st) = self.core.backing.stat(path)
            && st.st_mode & libc::S_IFMT == libc::S_IFREG
            && rec.is_open(&st)
        {
            rec.cut_for_restore(path, &st)?;
        }
        Ok(())
    }

    /// The inode the kernel knows `path`'s file by: through `path`, or, for a file with
    /// several names, through another name the kernel looked up (its pages are the file's,
    /// whichever name they were read through).
    fn known_ino(&self, path: &[u8]) -> Option<u64> {
        if let Some(ino) = self.core.inodes().find(path) {
            return Some(ino);
        }
        let st = self.core.backing.stat(path).ok()?;
        (st.st_nlink > 1)
            .then(|| self.core.inodes().of_key(key(&st)))
            .flatten()
    }

    /// Whether `path` must be replaced by a new file rather than rewritten in place. Without
    /// passthrough the kernel keeps its own size of a file it has open (the writeback cache),
    /// whatever the daemon says: rewritten in place, a handle open on it would read it padded
    /// with zeros to its old size. A file of one name that the kernel has open is therefore
    /// replaced: the open handles keep the file they had (as after a save by rename), every
    /// new open gets the restored one. One open for writing (a forced rollback) is refused
    /// instead: the writer would go on writing to a file no name leads to. The plan skips such
    /// a file already (`OpenFiles::cached`), so the dry run says so; this refuses one that a
    /// process opened for writing since the plan was made.
    fn cached_size_is_kept(&self, path: &[u8], st: &libc::stat) -> Result<bool> {
        if self.core.passthrough() {
            return Ok(false);
        }
        if let Some(rec) = &self.core.recorder
            && rec.is_open(st)
        {
            let writer = rec.open_writers().into_iter().find(|w| w.path == path);
            let (pid, process) = writer.map_or((0, String::from("?")), |w| (w.pid, w.process));
            return Err(Error::WrittenThroughCache {
                path: show_path(path),
                pid,
                process,
            });
        }
        if st.st_nlink > 1 {
            // Every name must get the restored content: in place.
            return Ok(false);
        }
        let Some(ino) = self.known_ino(path) else {
            // The kernel has never looked it up: it caches nothing of it.
            return Ok(false);
        };
        Ok(self.core.files.find(|f| f.ino == ino).is_some())
    }

    fn inode_changed(&self, path: &[u8]) {
        if let Some(ino) = self.known_ino(path) {
            self.notice(Notice::Inode(ino));
        }
    }

    /// Tell the kernel a file's content was rewritten in place. Under the writeback cache (no
    /// passthrough) the kernel keeps its own size of a cached file, whatever the daemon says
    /// (a shorter file would read as its old size, padded with zeros, and an append would
    /// write past a hole), so the file gets a new inode number: its names are looked up again.
    fn content_changed(&self, path: &[u8]) {
        self.inode_changed(path);
        if self.core.passthrough() {
            return;
        }
        let Some(ino) = self.known_ino(path) else {
            return;
        };
        let names = self.core.inodes().renumber(ino);
        for (parent, name) in names {
            self.notice(Notice::Entry { parent, name });
        }
    }

    /// A daemon that is not root may not open a file its owner made read-only (`chmod 444`)
    /// for writing, as its owner may not: where the daemon's user owns it, its owner's write
    /// bit is set first (a step of its own in the history; the rollback's last step gives the
    /// file the mode it had). Whether it was set.
    fn make_writable(&self, path: &[u8]) -> Result<bool> {
        let st = self
            .core
            .backing
            .stat(path)
            .map_err(|e| failed(path, e.into()))?;
        if self.core.euid == 0 || st.st_uid != self.core.euid || st.st_mode & 0o200 != 0 {
            return Ok(false);
        }
        self.chmod(path, (st.st_mode | 0o200) & 0o7777)?;
        Ok(true)
    }

    fn chmod(&self, path: &[u8], mode: u32) -> Result<()> {
        let st = self
            .core
            .backing
            .stat(path)
            .map_err(|e| failed(path, e.into()))?;
        if st.st_mode & 0o7777 == mode & 0o7777 {
            return Ok(());
        }
        let chmod = || {
            self.core
                .backing
                .chmod(path, mode & 0o7777)
                .map_err(|e| failed(path, e.into()))
        };
        match &self.core.recorder {
            Some(rec) => {
                // Its mode now, with the file held: a process's chmod may have come since.
                let named = rec
                    .hold_stat(|| self.core.backing.stat(path))
                    .map_err(|e| failed(path, e.into()))?;
                let recorded = rec.before_chmod(path, named.stat(), mode, self.by())?;
                if let Err(e) = chmod() {
                    rec.retract(&recorded.into_iter().collect::<Vec<_>>());
                    return Err(e);
                }
            }
            None => chmod()?,
        }
        self.inode_changed(path);
        Ok(())
    }

    /// Make the new file `path` (empty, `mode`) and begin its create. The create is begun
    /// before any process can find the file at its name: it is made unnamed (`O_TMPFILE`),
    /// held (see `Recorder::hold`), given its name, and its create begun before it is let
    /// go, so that a process's open, chmod, rename or unlink of it waits for the create and
    /// comes after it. Made at its name (`O_EXCL`) and found there before its create was
    /// begun, a process's open of it recorded a modify of a file no change had made, and the
    /// create was never recorded. A folder on a filesystem without `O_TMPFILE` gets the
    /// file made at its name, as before. Returns the file, open for writing, and its episode.
    fn make_file(&self, path: &[u8], mode: u32) -> Result<(std::fs::File, Option<Key>)> {
        let (parent, name) = self.parts(path)?;
        let io = |e: std::io::Error| failed(path, e.into());
        let caller = self.caller_in(parent);
        let Some(rec) = &self.core.recorder else {
            return Ok((self.make_file_at_its_name(&caller, path, mode)?, None));
        };
        rec.ready_for(path, false)?;
        let f = match self
            .core
            .backing
            // Read-write: a daemon that is not root reads a file it makes unreadable (0200)
            // through it when it records its create (`Core::end_write_of_made`).
            .open_tmpfile(parent, libc::O_RDWR, mode & 0o7777)
        {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
                let f = self.make_file_at_its_name(&caller, path, mode)?;
                let st = backing::stat_fd(f.as_fd()).map_err(io)?;
                SLOW_RESTORE_MADE.pause();
                return Ok((f, rec.begin_create(path, &st, self.by())?));
            }
            Err(e) => return Err(io(e)),
        };
        if self.core.euid == 0 && (caller.uid != 0 || caller.gid != 0) {
            backing::set_fd_owner(&f, Some(caller.uid), Some(caller.gid)).map_err(io)?;
        }
        let st = backing::stat_fd(f.as_fd()).map_err(io)?;
        let held = rec.hold(&[key(&st)]);
        self.core.backing.link_fd(&f, parent, name).map_err(io)?;
        SLOW_RESTORE_MADE.pause();
        let episode = rec.begin_create(path, &st, self.by())?;
        drop(held);
        Ok((f, episode))
    }

    /// A new, empty file made at `path` (`O_EXCL`), given to `caller`.
    fn make_file_at_its_name(
        &self,
        caller: &Caller,
        path: &[u8],
        mode: u32,
    ) -> Result<std::fs::File> {
        let f = self
            .core
            .backing
            .open_file(
                path,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                mode & 0o7777,
            )
            .map_err(|e| failed(path, e.into()))?;
        self.core
            .chown_new(caller, path)
            .map_err(|e| failed(path, e))?;
        Ok(f)
    }
}

impl Drop for Restorer {
    fn drop(&mut self) {
        let ended = &self.core.restores.ended;
        ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Apply for Restorer {
    fn remove(&self, path: &[u8], dir: bool) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            let caller = self.caller_in(parent);
            if !dir {
                self.cut_writer(path)?;
            }
            // The table of names follows in `entry_changed`, with the kernel's notice. Nothing
            // is being made meanwhile (see `Core::making`).
            let making = self.core.making_none();
            let removed = self.core.unlink_at(&caller, parent, name, dir, &mut |_| {});
            drop(making);
            let st = match removed {
                Ok(st) => st,
                // Gone since the plan was made (a save renamed its temporary file away): as
                // the point had it, with nothing to record.
                Err(e) if e == Errno::ENOENT => return Ok(()),
                Err(e) => return Err(failed(path, e)),
            };
            self.entry_changed(parent, name, Some(&st));
            Ok(())
        })
    }

    fn make_dir(&self, path: &[u8], mode: u32) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            match self.core.backing.stat(path) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
                _ => {
                    let caller = self.caller_in(parent);
                    // A folder a process is removing is recorded gone first (see
                    // `Core::removing`).
                    let removing = self.core.removing_none();
                    let made = self.core.mkdir_at(&caller, parent, name, mode & 0o7777);
                    drop(removing);
                    match made {
                        Ok(()) => self.entry_changed(parent, name, None),
                        // Made since it was looked at (another rollback at once, a process):
                        // a folder is what the step wants there.
                        Err(e)
                            if e == Errno::EEXIST
                                && self
                                    .core
                                    .backing
                                    .stat(path)
                                    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR) => {
                        }
                        Err(e) => return Err(failed(path, e)),
                    }
                }
            }
            // mkdir applies the daemon's umask; the mode is set exactly.
            self.chmod(path, mode)
        })
    }

    fn write_file(
        &self,
        path: &[u8],
        mode: u32,
        how: Put,
        content: &mut dyn FnMut(&mut dyn Write) -> Result<u64>,
    ) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            let io = |e: std::io::Error| failed(path, e.into());
            // A process's create that made the file and has not yet begun its episode ends
            // that first, and none begins until this rollback's own episode has (see
            // `Core::making`): found there before its create was recorded, the file was
            // rewritten in place and its restore recorded from the process's empty file,
            // before the create that made it.
            let mut making = Some(self.core.making_none());
            let now = match self.core.backing.stat(path) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => Some(st),
                Ok(_) => return Err(failed(path, Errno::EEXIST)),
                Err(_) => None,
            };
            if now.is_some() && how == Put::New {
                return Err(Error::Io {
                    path: show_path(path).into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "File exists: made since the rollback was planned, and left as it is",
                    ),
                });
            }
            let detach = how == Put::Detach;
            let mut existing = now.is_some();
            let replace = match &now {
                Some(st) if !detach => self.cached_size_is_kept(path, st)?,
                _ => false,
            };
            if existing && (detach || replace) {
                // A file of its own: this name goes, and is made again below.
                making = None;
                self.remove(path, false)?;
                existing = false;
            }
            if existing {
                // In place, so every name of a hard-linked file gets it. A process that holds it
                // open for writing (a forced rollback) keeps writing to it: what it wrote so far
                // is its own change, the rewrite the rollback's.
                let mut opened = self.core.open_to_restore(path, self.by());
                drop(making);
                if matches!(opened, Err(e) if e == Errno::EACCES) && self.make_writable(path)? {
                    let _making = self.core.making_none();
                    opened = self.core.open_to_restore(path, self.by());
                }
                let (mut f, st, written, episode) = opened.map_err(|e| failed(path, e))?;
                let writer = self.core.recorder.as_ref().filter(|_| written);
                if let Some(rec) = writer
                    && let Err(e) = rec.cut_for_restore(path, &st)
                {
                    self.core.end_write(episode);
                    return Err(e);
                }
                let written = f
                    .set_len(0)
                    .map_err(io)
                    .and_then(|()| write_content(path, &mut f, content));
                let recorded = match writer {
                    Some(rec) => rec.restored_in_place(path, &st, self.by()),
                    None => Ok(()),
                };
                SLOW_RESTORE_END.pause();
                self.core.end_write(episode);
                // Closed once its episode has ended: a file that lost its name meanwhile (a
                // save renamed another over it) is freed at the close, and ext4 gives its
                // number to the next new file at once, which would join this episode.
                drop(f);
                written?;
                recorded?;
                self.content_changed(path);
            } else {
                // Taken again below, after `removing` (the order every rollback step takes them).
                drop(making);
                // A file a process is unlinking is recorded gone first (see `Core::removing`).
                let removing = self.core.removing_none();
                // And a process's create of the name that looked before the file was there
                // opens it (`O_CREAT` without `O_EXCL`) only once its episode is begun, and
                // waits for the rollback's content (`Core::making`, `Recorder::restoring`): a
                // create that found no file and then opened this one joined the rollback's
                // edit, unchecked.
                let making = self.core.making_none();
                let made = self.make_file(path, mode);
                drop((making, removing));
                let (mut f, episode) = made?;
                let written = write_content(path, &mut f, content);
                // Closed after the end, as above.
                self.core.end_write_of_made(episode, &f);
                drop(f);
                written?;
                self.entry_changed(parent, name, None);
            }
            self.chmod(path, mode)
        })
    }

    fn make_symlink(&self, path: &[u8], target: &[u8]) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            let caller = self.caller_in(parent);
            self.clear(&caller, parent, name, path)?;
            let removing = self.core.removing_none();
            let made = self.core.symlink_at(&caller, parent, name, target);
            drop(removing);
            made.map_err(|e| failed(path, e))?;
            self.entry_changed(parent, name, None);
            Ok(())
        })
    }

    fn make_node(&self, path: &[u8], node: Node, mode: u32) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            let caller = self.caller_in(parent);
            let Some(kind) = node.type_bits() else {
                return Err(Error::UnknownNodeType {
                    path: show_path(path),
                });
            };
            self.clear(&caller, parent, name, path)?;
            let removing = self.core.removing_none();
            let made =
                self.core
                    .mknod_at(&caller, parent, name, kind | (mode & 0o7777), node.rdev());
            drop(removing);
            made.map_err(|e| failed(path, e))?;
            self.entry_changed(parent, name, None);
            Ok(())
        })
    }

    fn link(&self, target: &[u8], path: &[u8]) -> Result<()> {
        self.step(|| {
            let (parent, name) = self.parts(path)?;
            let caller = self.caller_in(parent);
            self.clear(&caller, parent, name, path)?;
            let removing = self.core.removing_none();
            let made = self.core.link_at(&caller, target, parent, name);
            drop(removing);
            made.map_err(|e| failed(path, e))?;
            self.entry_changed(parent, name, None);
            // Its link count changed.
            self.inode_changed(target);
            Ok(())
        })
    }

    fn set_mode(&self, path: &[u8], mode: u32) -> Result<()> {
        self.step(|| self.chmod(path, mode))
    }
}

impl Names for Restorer {
    fn other_names(&self, path: &[u8]) -> Vec<Vec<u8>> {
        NamesNow(&self.core).other_names(path)
    }

    fn shared_file(&self, path: &[u8]) -> Option<(u64, u64)> {
        NamesNow(&self.core).shared_file(path)
    }
}

/// The names files have now, underneath the mount and in the recorder's table of links: for
/// a plan to say which files its run makes files of their own ([`detached`](crate::history::rollback::detached)).
pub struct NamesNow<'a>(pub &'a Core);

impl Names for NamesNow<'_> {
    fn other_names(&self, path: &[u8]) -> Vec<Vec<u8>> {
        match (&self.0.recorder, self.0.backing.stat(path)) {
            (Some(recorder), Ok(st)) => recorder.names_of(path, &st),
            _ => Vec::new(),
        }
    }

    fn shared_file(&self, path: &[u8]) -> Option<(u64, u64)> {
        let st = self.0.backing.stat(path).ok()?;
        (st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1)
            .then_some((st.st_dev, st.st_ino))
    }
}
