//! The FUSE filesystem: a passthrough over the workspace directory it is mounted on.
//!
//! Data I/O on regular files goes through the kernel (FUSE passthrough: `open_backing` and
//! `opened_passthrough`), so the daemon only sees the edges of a write episode (open, truncate,
//! fallocate, copy_file_range, rename, unlink, release) — exactly the points where recording
//! must run before content is destroyed. Without passthrough (not root) the kernel's writeback
//! cache is used and `read`/`write` come here.
//!
//! Each `Filesystem` method is thin: it calls a `do_*` function returning `Result<T, Errno>`
//! and replies exactly once.
//!
//! Lock order: `inodes` before `backing_ids`; handle tables are leaves. No lock is held across
//! a syscall on the backing directory except `backing_ids` around the `BACKING_OPEN` ioctl,
//! which must be atomic with the check for an existing id.

pub mod backing;
pub mod control;
pub mod handle;
pub mod inode;
mod mount;
mod state;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle,
    FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};

use crate::history::{self, Recorder};
use crate::store::ChangeKind;
use backing::{Backing, Xattr};
use handle::HandleTable;
use inode::{BackingKey, InodeTable};
pub use mount::{
    MountConfig, Mounted, backing, can_passthrough, disk_readahead, filesystem, is_rewind_mount,
    match_readahead, mount, mount_type, unmount,
};
pub use state::MountState;

type Result<T> = std::result::Result<T, Errno>;

/// The extended attribute holding file capabilities.
const CAPS_XATTR: &[u8] = b"security.capability";

/// How long the kernel may cache entries and attributes. The mount is the only writer of the
/// directory underneath, so the kernel's view only goes stale through us, and we tell it.
const TTL: Duration = Duration::from_secs(24 * 3600);

/// Told whether passthrough is on, once the mount answers.
type ReadyHook = Box<dyn FnOnce(bool) + Send>;

/// An open regular file.
struct OpenFile {
    file: File,
    /// The write episode this handle holds open, if it was opened for writing.
    episode: Option<history::recorder::Key>,
    /// Held while the handle is open: the kernel must see the same backing id for every open
    /// handle of an inode.
    _backing_id: Option<Arc<BackingId>>,
}

/// An open file of the control directory: what reads return (made at open, or the result of
/// the last `ctl` command) and how far the reader got; `events` readers take new changes.
struct CtlHandle {
    node: control::Node,
    buf: Mutex<(Vec<u8>, usize)>,
    events: Option<crossbeam_channel::Receiver<Arc<crate::store::Change>>>,
    /// A poller of `events` waiting for the next change.
    poller: Arc<Mutex<Option<fuser::PollNotifier>>>,
}

/// An open directory: its entries, read once at `opendir` so offsets stay stable.
struct OpenDir {
    /// A folder of the control directory (entries carry virtual inode numbers).
    virtual_dir: bool,
    path: Vec<u8>,
    /// The FUSE inode of the parent, for `..`.
    parent: u64,
    /// Name, backing inode number (a hint for plain `readdir`), type.
    entries: Vec<(Vec<u8>, u64, FileType)>,
}

pub struct RewindFs {
    backing: Arc<Backing>,
    /// `None` when mounted without recording (for measuring what recording costs).
    recorder: Option<Arc<Recorder>>,
    inodes: Mutex<InodeTable>,
    files: HandleTable<OpenFile>,
    dirs: HandleTable<OpenDir>,
    /// The control directory, when recording (it needs the history).
    control: Option<Arc<control::Control>>,
    ctl_files: HandleTable<CtlHandle>,
    /// When the mount started: the times of virtual files.
    started: SystemTime,
    /// Per FUSE inode, the backing id shared by its open handles.
    backing_ids: Mutex<HashMap<u64, Weak<BackingId>>>,
    /// Inodes known to have no `security.capability`: the kernel asks for it before the first
    /// write after every open, chown and chmod (see `getxattr`), and this answers without
    /// touching the disk.
    no_caps: Mutex<std::collections::HashSet<u64>>,
    /// Set in `init` when the kernel agreed to passthrough.
    passthrough: AtomicBool,
    /// Whether to ask for passthrough at all (needs CAP_SYS_ADMIN).
    want_passthrough: bool,
    /// The daemon's own uid: when root, objects created for another user are given to them.
    euid: u32,
    /// Called once the kernel has finished `init`: the mount answers from then on.
    on_ready: Mutex<Option<ReadyHook>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn ctl_errno(e: crate::Error) -> Errno {
    Errno::from_i32(e.errno())
}

/// A recording failure stops the operation: nothing happens unrecorded.
fn record_errno(e: crate::Error) -> Errno {
    tracing::error!("cannot record a change, refusing the operation: {e}");
    Errno::from_i32(e.errno())
}

fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn dirent_type(d_type: u8) -> FileType {
    match d_type {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn attr(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: file_type(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn key(st: &libc::stat) -> BackingKey {
    (st.st_dev, st.st_ino)
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: d.subsec_nanos() as i64,
            },
            Err(e) => libc::timespec {
                tv_sec: -(e.duration().as_secs() as i64) - 1,
                tv_nsec: (1_000_000_000 - e.duration().subsec_nanos() as i64) % 1_000_000_000,
            },
        },
    }
}

impl RewindFs {
    pub fn new(
        backing: Arc<Backing>,
        recorder: Option<Arc<Recorder>>,
        control: Option<Arc<control::Control>>,
        want_passthrough: bool,
    ) -> io::Result<RewindFs> {
        let root = backing::stat_fd(backing.root_fd())?;
        Ok(RewindFs {
            backing,
            recorder,
            inodes: Mutex::new(InodeTable::new(key(&root))),
            files: HandleTable::default(),
            dirs: HandleTable::default(),
            control,
            ctl_files: HandleTable::starting_at(control::BASE),
            started: SystemTime::now(),
            backing_ids: Mutex::new(HashMap::new()),
            no_caps: Mutex::new(std::collections::HashSet::new()),
            passthrough: AtomicBool::new(false),
            want_passthrough,
            // SAFETY: geteuid cannot fail.
            euid: unsafe { libc::geteuid() },
            on_ready: Mutex::new(None),
        })
    }

    fn has_no_caps(&self, ino: u64) -> bool {
        self.no_caps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&ino)
    }

    fn note_no_caps(&self, ino: u64) {
        let mut known = self.no_caps.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= 1 << 20 {
            known.clear();
        }
        known.insert(ino);
    }

    fn forget_no_caps(&self, ino: u64) {
        self.no_caps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ino);
    }

    /// Run `f` (with whether passthrough is on) once the mount answers requests.
    pub fn on_ready(&self, f: impl FnOnce(bool) + Send + 'static) {
        *self.on_ready.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    /// Run `op`, recorded beforehand by `before` (and retracted if `op` then fails).
    fn recorded<T>(
        &self,
        before: impl FnOnce(&Recorder) -> crate::Result<Vec<crate::store::Change>>,
        op: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let Some(rec) = &self.recorder else {
            return op();
        };
        let changes = before(rec).map_err(record_errno)?;
        let result = op();
        if result.is_err() {
            rec.retract(&changes);
        }
        result
    }

    /// Before an operation recorded after it succeeds: refuse it if it could not be recorded.
    fn ready_for(&self, path: &[u8], is_dir: bool) -> Result<()> {
        match &self.recorder {
            Some(rec) => rec.ready_for(path, is_dir).map_err(record_errno),
            None => Ok(()),
        }
    }

    /// Record a new object at `path` after it was made.
    fn record_new(&self, kind: ChangeKind, path: &[u8], pid: u32) -> Result<()> {
        match &self.recorder {
            Some(rec) => rec.after_new(kind, path, pid).map_err(record_errno),
            None => Ok(()),
        }
    }

    /// Store a file's content before it may change; returns the episode to end at release.
    fn begin_write(&self, path: &[u8], pid: u32) -> Result<Option<history::recorder::Key>> {
        let Some(rec) = &self.recorder else {
            return Ok(None);
        };
        let st = self.backing.stat(path).map_err(errno)?;
        rec.begin_write(path, &st, pid).map_err(record_errno)
    }

    fn end_write(&self, episode: Option<history::recorder::Key>) {
        if let (Some(rec), Some(key)) = (&self.recorder, episode)
            && let Err(e) = rec.end_write(key)
        {
            tracing::error!("cannot record the end of a write: {e}");
        }
    }

    // ---- the control directory ------------------------------------------------------------

    fn control(&self) -> Result<&Arc<control::Control>> {
        self.control.as_ref().ok_or(Errno::ENOENT)
    }

    fn ctl_node(&self, ino: INodeNo) -> Result<control::Node> {
        self.control()?.node(ino.0).ok_or(Errno::ENOENT)
    }

    fn ctl_attr(&self, ino: u64) -> Result<FileAttr> {
        let ctl = self.control()?;
        let node = ctl.node(ino).ok_or(Errno::ENOENT)?;
        let (kind, perm, size) = match ctl.kind(&node).map_err(ctl_errno)? {
            control::Kind::Dir => (FileType::Directory, 0o555, 0),
            control::Kind::Symlink => (FileType::Symlink, 0o777, 0),
            control::Kind::File { size, writable } => (
                FileType::RegularFile,
                if writable { 0o600 } else { 0o444 },
                size,
            ),
        };
        let perm = match ctl.past_state(&node) {
            Some(s) if kind != FileType::Symlink => (s.mode & 0o555) as u16,
            _ => perm,
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.euid,
            // SAFETY: getegid cannot fail.
            gid: unsafe { libc::getegid() },
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Refuse to change anything inside `.rewind/`, or `.rewind` itself.
    fn not_control(&self, parent: INodeNo, name: &OsStr) -> Result<()> {
        if control::Control::is_virtual(parent.0) {
            return Err(Errno::EROFS);
        }
        if self.control.is_some() && parent.0 == inode::ROOT && name.as_bytes() == control::NAME {
            return Err(Errno::EEXIST);
        }
        Ok(())
    }

    fn ctl_open(&self, ino: INodeNo, flags: i32) -> Result<u64> {
        let ctl = self.control()?;
        let node = self.ctl_node(ino)?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && node != control::Node::Ctl {
            return Err(Errno::EROFS);
        }
        let poller: Arc<Mutex<Option<fuser::PollNotifier>>> = Arc::default();
        let (content, events) = match &node {
            control::Node::Ctl => (Vec::new(), None),
            control::Node::Events => {
                // Forward changes to this reader, waking a poller when one comes. The thread
                // ends at the first change after the file is closed.
                let upstream = ctl.recorder().subscribe();
                let (tx, rx) = crossbeam_channel::unbounded();
                let waiting = poller.clone();
                std::thread::Builder::new()
                    .name("events".into())
                    .spawn(move || {
                        for c in upstream {
                            if tx.send(c).is_err() {
                                break;
                            }
                            if let Some(n) =
                                waiting.lock().unwrap_or_else(|e| e.into_inner()).take()
                            {
                                let _ = n.notify();
                            }
                        }
                    })
                    .map_err(errno)?;
                (Vec::new(), Some(rx))
            }
            n if matches!(ctl.kind(n).map_err(ctl_errno)?, control::Kind::Dir) => {
                return Err(Errno::EISDIR);
            }
            n => (ctl.content(n).map_err(ctl_errno)?, None),
        };
        Ok(self.ctl_files.insert(CtlHandle {
            node,
            buf: Mutex::new((content, 0)),
            events,
            poller,
        }))
    }

    fn ctl_read(&self, pid: u32, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.ctl_files.get(fh.0).ok_or(Errno::EBADF)?;
        if let Some(events) = &h.events {
            // Block until a change comes; give up if the reader went away (FUSE interrupts are
            // not delivered to us, and a blocked reader holds a worker thread).
            loop {
                match events.recv_timeout(Duration::from_secs(1)) {
                    Ok(c) => {
                        let mut line = history::format::change_json(&c).to_string();
                        line.push('\n');
                        let mut more = line.into_bytes();
                        while more.len() < size as usize {
                            match events.try_recv() {
                                Ok(c) => {
                                    more.extend(
                                        history::format::change_json(&c).to_string().bytes(),
                                    );
                                    more.push(b'\n');
                                }
                                Err(_) => break,
                            }
                        }
                        return Ok(more);
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        if !Path::new(&format!("/proc/{pid}")).exists() {
                            return Err(Errno::EINTR);
                        }
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(Vec::new()),
                }
            }
        }
        let buf = h.buf.lock().unwrap_or_else(|e| e.into_inner());
        let data = &buf.0;
        // ctl is read after a write on the same file: its result starts at 0 whatever the
        // offset the write left; everything else is read by offset.
        let start = if h.node == control::Node::Ctl {
            buf.1
        } else {
            offset as usize
        };
        let start = start.min(data.len());
        let end = (start + size as usize).min(data.len());
        let chunk = data[start..end].to_vec();
        drop(buf);
        if h.node == control::Node::Ctl {
            h.buf.lock().unwrap_or_else(|e| e.into_inner()).1 = end;
        }
        Ok(chunk)
    }

    fn ctl_write(&self, pid: u32, fh: FileHandle, data: &[u8]) -> Result<u32> {
        let h = self.ctl_files.get(fh.0).ok_or(Errno::EBADF)?;
        if h.node != control::Node::Ctl {
            return Err(Errno::EROFS);
        }
        if data.len() > 4096 {
            *h.buf.lock().unwrap_or_else(|e| e.into_inner()) =
                (b"error: a command is one short line\n".to_vec(), 0);
            return Err(Errno::EINVAL);
        }
        let line = std::str::from_utf8(data).map_err(|_| Errno::EINVAL);
        let result = match line {
            Ok(line) => self.control()?.command(line.trim(), pid),
            Err(_) => Err("a command is text (UTF-8)".to_string()),
        };
        let mut buf = h.buf.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(text) => {
                *buf = (text.into_bytes(), 0);
                Ok(data.len() as u32)
            }
            Err(why) => {
                *buf = (format!("error: {why}\n").into_bytes(), 0);
                Err(Errno::EINVAL)
            }
        }
    }

    fn inodes(&self) -> std::sync::MutexGuard<'_, InodeTable> {
        self.inodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, ino: INodeNo) -> Result<Vec<u8>> {
        self.inodes().path(ino.0).ok_or(Errno::ENOENT)
    }

    /// Look up `name` in `parent` (whose path is `parent_path`), taking one kernel lookup.
    fn entry(&self, parent: INodeNo, parent_path: &[u8], name: &OsStr) -> Result<FileAttr> {
        let st = self.backing.stat_at(parent_path, name).map_err(errno)?;
        let ino = self.inodes().lookup(parent.0, name.as_bytes(), key(&st));
        Ok(attr(ino, &st))
    }

    /// Give a newly created object to the user who asked for it (we may be root).
    fn chown_new(&self, req: &Request, path: &[u8]) -> Result<()> {
        if self.euid == 0 && (req.uid() != 0 || req.gid() != 0) {
            self.backing
                .chown(path, Some(req.uid()), Some(req.gid()))
                .map_err(errno)?;
        }
        Ok(())
    }

    fn check_name(name: &OsStr) -> Result<()> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(())
    }

    fn do_lookup(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr> {
        Self::check_name(name)?;
        if let Some(ctl) = &self.control {
            if parent.0 == inode::ROOT && name.as_bytes() == control::NAME {
                return self.ctl_attr(ctl.ino(control::Node::Dir));
            }
            if control::Control::is_virtual(parent.0) {
                let node = self.ctl_node(parent)?;
                let child = ctl
                    .lookup(&node, name.as_bytes())
                    .map_err(ctl_errno)?
                    .ok_or(Errno::ENOENT)?;
                return self.ctl_attr(ctl.ino(child));
            }
        }
        let parent_path = self.path(parent)?;
        self.entry(parent, &parent_path, name)
    }

    fn do_getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr> {
        if control::Control::is_virtual(ino.0) {
            return self.ctl_attr(ino.0);
        }
        if let Some(open) = fh.and_then(|fh| self.files.get(fh.0)) {
            return Ok(attr(
                ino.0,
                &backing::stat_fd(open.file.as_fd()).map_err(errno)?,
            ));
        }
        let path = self.path(ino)?;
        Ok(attr(ino.0, &self.backing.stat(&path).map_err(errno)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn do_setattr(
        &self,
        pid: u32,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr> {
        if control::Control::is_virtual(ino.0) {
            // `> .rewind/ctl` truncates; nothing else in the control directory changes.
            let only_size = mode.is_none()
                && uid.is_none()
                && gid.is_none()
                && atime.is_none()
                && mtime.is_none();
            if self.ctl_node(ino)? == control::Node::Ctl && only_size {
                return self.ctl_attr(ino.0);
            }
            return Err(Errno::EROFS);
        }
        let path = self.path(ino).ok();
        let open = fh.and_then(|fh| self.files.get(fh.0));
        if let Some(mode) = mode {
            let st = match &open {
                Some(o) => backing::stat_fd(o.file.as_fd()).map_err(errno)?,
                None => self
                    .backing
                    .stat(path.as_deref().ok_or(Errno::ENOENT)?)
                    .map_err(errno)?,
            };
            let chmod = || match &open {
                Some(o) => set_fd_mode(&o.file, mode).map_err(errno),
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    self.backing.chmod(path, mode & 0o7777).map_err(errno)
                }
            };
            // Held until the chmod is done, so the end of a write episode on the file cannot
            // be recorded in between (see `Recorder::hold`).
            let _held = self.recorder.as_ref().map(|rec| rec.hold(&[key(&st)]));
            match path.as_deref() {
                Some(p) => self.recorded(
                    |rec| {
                        rec.before_chmod(p, &st, mode, pid)
                            .map(|c| c.into_iter().collect())
                    },
                    chmod,
                )?,
                None => chmod()?,
            }
        }
        if uid.is_some() || gid.is_some() {
            match &open {
                // No path to resolve: `tar` chowns every file it writes while it is open.
                Some(o) => set_fd_owner(&o.file, uid, gid).map_err(errno)?,
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    self.backing.chown(path, uid, gid).map_err(errno)?;
                }
            }
        }
        if let Some(size) = size {
            match &open {
                // Open for writing: its episode already holds the content from before.
                Some(o) => o.file.set_len(size).map_err(errno)?,
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    let episode = self.begin_write(path, pid)?;
                    let result = self
                        .backing
                        .open_file(path, libc::O_WRONLY, 0)
                        .and_then(|f| f.set_len(size))
                        .map_err(errno);
                    self.end_write(episode);
                    result?;
                }
            }
        }
        if atime.is_some() || mtime.is_some() {
            let times = [timespec(atime), timespec(mtime)];
            match (&open, path.as_deref()) {
                (Some(o), _) => futimens(&o.file, &times).map_err(errno)?,
                (None, Some(path)) => self.backing.utimens(path, &times).map_err(errno)?,
                (None, None) => return Err(Errno::ENOENT),
            }
            if let (Some(rec), Some(path)) = (&self.recorder, path.as_deref()) {
                let st = match &open {
                    Some(o) => backing::stat_fd(o.file.as_fd()),
                    None => self.backing.stat(path),
                }
                .map_err(errno)?;
                rec.touched(path, &st);
                // Times are the last thing set: this stat is the reply.
                return Ok(attr(ino.0, &st));
            }
        }
        self.do_getattr(ino, fh)
    }

    fn do_readlink(&self, ino: INodeNo) -> Result<Vec<u8>> {
        if control::Control::is_virtual(ino.0) {
            let node = self.ctl_node(ino)?;
            return self.control()?.readlink(&node).map_err(ctl_errno);
        }
        let path = self.path(ino)?;
        self.backing.readlink(&path).map_err(errno)
    }

    fn do_mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr> {
        Self::check_name(name)?;
        self.not_control(parent, name)?;
        let parent_path = self.path(parent)?;
        let mode = mode & !umask;
        self.ready_for(&backing::join(&parent_path, name), false)?;
        self.backing
            .mknod(&parent_path, name, mode, rdev as u64)
            .map_err(errno)?;
        let path = backing::join(&parent_path, name);
        self.chown_new(req, &path)?;
        self.record_new(ChangeKind::Create, &path, req.pid())?;
        self.entry(parent, &parent_path, name)
    }

    fn do_mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr> {
        Self::check_name(name)?;
        self.not_control(parent, name)?;
        let parent_path = self.path(parent)?;
        self.ready_for(&backing::join(&parent_path, name), true)?;
        self.backing
            .mkdir(&parent_path, name, mode & !umask & 0o7777)
            .map_err(errno)?;
        let path = backing::join(&parent_path, name);
        self.chown_new(req, &path)?;
        self.record_new(ChangeKind::Mkdir, &path, req.pid())?;
        self.entry(parent, &parent_path, name)
    }

    fn do_unlink(&self, pid: u32, parent: INodeNo, name: &OsStr, dir: bool) -> Result<()> {
        self.not_control(parent, name)
            .map_err(|e| if e == Errno::EEXIST { Errno::EBUSY } else { e })?;
        let parent_path = self.path(parent)?;
        let st = self.backing.stat_at(&parent_path, name).map_err(errno)?;
        let path = backing::join(&parent_path, name);
        let unlink = || self.backing.unlink(&parent_path, name, dir).map_err(errno);
        if dir {
            self.ready_for(&path, true)?;
            unlink()?;
            if let Some(rec) = &self.recorder {
                rec.after_rmdir(&path, &st, pid).map_err(record_errno)?;
            }
        } else {
            let _held = self.recorder.as_ref().map(|rec| rec.hold(&[key(&st)]));
            // The content is stored before the unlink; the delete is written after it, in the
            // background (`rm -rf` does not wait on an index write per file).
            let delete = match &self.recorder {
                Some(rec) => rec.before_unlink(&path, &st, pid).map_err(record_errno)?,
                None => None,
            };
            unlink()?;
            if let (Some(rec), Some(delete)) = (&self.recorder, delete) {
                rec.defer(delete);
            }
        }
        if dir || st.st_nlink <= 1 {
            self.inodes().removed(key(&st));
        }
        Ok(())
    }

    fn do_symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &Path,
    ) -> Result<FileAttr> {
        Self::check_name(name)?;
        self.not_control(parent, name)?;
        let parent_path = self.path(parent)?;
        self.ready_for(&backing::join(&parent_path, name), false)?;
        self.backing
            .symlink(&parent_path, name, target.as_os_str().as_bytes())
            .map_err(errno)?;
        let path = backing::join(&parent_path, name);
        self.chown_new(req, &path)?;
        self.record_new(ChangeKind::Symlink, &path, req.pid())?;
        self.entry(parent, &parent_path, name)
    }

    fn do_rename(
        &self,
        pid: u32,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<()> {
        Self::check_name(new_name)?;
        let busy = |e| if e == Errno::EEXIST { Errno::EBUSY } else { e };
        self.not_control(parent, name).map_err(busy)?;
        self.not_control(new_parent, new_name).map_err(busy)?;
        let parent_path = self.path(parent)?;
        let new_parent_path = self.path(new_parent)?;
        let src = self.backing.stat_at(&parent_path, name).map_err(errno)?;
        let dst = self.backing.stat_at(&new_parent_path, new_name).ok();
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        let src_path = backing::join(&parent_path, name);
        let dst_path = backing::join(&new_parent_path, new_name);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        // The files stay locked until the rename is done, so their episodes cannot end between
        // the bookkeeping and the rename itself.
        let mut files = vec![key(&src)];
        files.extend(dst.as_ref().map(key));
        let _held = self.recorder.as_ref().map(|rec| rec.hold(&files));
        self.recorded(
            |rec| rec.before_rename(&src_path, &src, &dst_path, dst.as_ref(), exchange, pid),
            || {
                self.backing
                    .rename(&parent_path, name, &new_parent_path, new_name, flags.bits())
                    .map_err(errno)
            },
        )?;
        let mut inodes = self.inodes();
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            if let Some(dst) = &dst {
                inodes.moved(key(dst), parent.0, name.as_bytes());
            }
        } else if let Some(dst) = &dst
            && key(dst) != key(&src)
            && (dst.st_nlink <= 1 || dst.st_mode & libc::S_IFMT == libc::S_IFDIR)
        {
            inodes.removed(key(dst));
        }
        inodes.moved(key(&src), new_parent.0, new_name.as_bytes());
        Ok(())
    }

    fn do_link(
        &self,
        pid: u32,
        ino: INodeNo,
        new_parent: INodeNo,
        new_name: &OsStr,
    ) -> Result<FileAttr> {
        Self::check_name(new_name)?;
        self.not_control(new_parent, new_name)?;
        if control::Control::is_virtual(ino.0) {
            return Err(Errno::EROFS);
        }
        let path = self.path(ino)?;
        let new_parent_path = self.path(new_parent)?;
        self.ready_for(&backing::join(&new_parent_path, new_name), false)?;
        self.backing
            .link(&path, &new_parent_path, new_name)
            .map_err(errno)?;
        let new_path = backing::join(&new_parent_path, new_name);
        self.record_new(ChangeKind::Link, &new_path, pid)?;
        self.entry(new_parent, &new_parent_path, new_name)
    }

    /// Flags for the backing open: the caller's, less those that only make sense at creation,
    /// and reading allowed where the kernel may need it for the page cache.
    fn backing_flags(&self, flags: i32) -> i32 {
        let mut flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        if !self.passthrough.load(Ordering::Relaxed) {
            // The writeback cache reads pages around partial writes and sends appends as
            // positioned writes, so the backing fd must be readable and not O_APPEND.
            flags &= !libc::O_APPEND;
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
        let mut ids = self.backing_ids.lock().unwrap_or_else(|e| e.into_inner());
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

    /// Register an opened backing file as a handle, with its passthrough backing id.
    fn finish_open(
        &self,
        ino: u64,
        file: File,
        episode: Option<history::recorder::Key>,
        open_backing: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> Result<(u64, Option<Arc<BackingId>>)> {
        let id = if self.passthrough.load(Ordering::Relaxed) {
            match self.backing_id(ino, &file, open_backing) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.end_write(episode);
                    return Err(errno(e));
                }
            }
        } else {
            None
        };
        let fh = self.files.insert(OpenFile {
            file,
            episode,
            _backing_id: id.clone(),
        });
        Ok((fh, id))
    }

    fn open_flags(&self) -> FopenFlags {
        if self.passthrough.load(Ordering::Relaxed) {
            FopenFlags::empty()
        } else {
            // The mount is the only writer underneath, so cached pages stay valid across opens.
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    fn do_read(&self, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
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
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        open.file.write_all_at(data, offset).map_err(errno)?;
        Ok(data.len() as u32)
    }

    fn do_opendir(&self, ino: INodeNo) -> Result<u64> {
        if control::Control::is_virtual(ino.0) {
            let ctl = self.control()?;
            let node = self.ctl_node(ino)?;
            let mut entries = vec![
                (b".".to_vec(), ino.0, FileType::Directory),
                (b"..".to_vec(), ino.0, FileType::Directory),
            ];
            for (name, child) in ctl.list(&node).map_err(ctl_errno)? {
                let child_ino = ctl.ino(child);
                let kind = self
                    .ctl_attr(child_ino)
                    .map(|a| a.kind)
                    .unwrap_or(FileType::RegularFile);
                entries.push((name, child_ino, kind));
            }
            return Ok(self.dirs.insert(OpenDir {
                virtual_dir: true,
                path: Vec::new(),
                parent: ino.0,
                entries,
            }));
        }
        let (path, parent) = {
            let inodes = self.inodes();
            (
                inodes.path(ino.0).ok_or(Errno::ENOENT)?,
                inodes.parent(ino.0),
            )
        };
        let dir = self.backing.open_dir(&path).map_err(errno)?;
        let mut entries = vec![
            (b".".to_vec(), ino.0, FileType::Directory),
            (b"..".to_vec(), parent, FileType::Directory),
        ];
        // A real `.rewind` in the workspace is hidden behind the control directory.
        let hide = self.control.is_some() && ino.0 == inode::ROOT;
        entries.extend(
            backing::read_dir_entries(&dir)
                .map_err(errno)?
                .into_iter()
                .filter(|(name, _, _)| !(hide && name == control::NAME))
                .map(|(name, d_ino, d_type)| (name, d_ino, dirent_type(d_type))),
        );
        Ok(self.dirs.insert(OpenDir {
            virtual_dir: false,
            path,
            parent,
            entries,
        }))
    }

    fn do_statfs(&self) -> Result<libc::statvfs> {
        self.backing.statfs().map_err(errno)
    }

    fn xattr_path(&self, ino: INodeNo) -> Result<Vec<u8>> {
        if control::Control::is_virtual(ino.0) {
            // Nothing in the control directory has extended attributes.
            return Err(Errno::ENODATA);
        }
        self.path(ino)
    }

    fn do_fallocate(&self, fh: FileHandle, offset: u64, length: u64, mode: i32) -> Result<()> {
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        // SAFETY: fallocate on an fd we own.
        let ret =
            unsafe { libc::fallocate(open.file.as_raw_fd(), mode, offset as i64, length as i64) };
        if ret < 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn do_copy_file_range(
        &self,
        fh_in: FileHandle,
        offset_in: u64,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
    ) -> Result<u32> {
        let src = self.files.get(fh_in.0).ok_or(Errno::EBADF)?;
        let dst = self.files.get(fh_out.0).ok_or(Errno::EBADF)?;
        let mut off_in = offset_in as i64;
        let mut off_out = offset_out as i64;
        // SAFETY: copy_file_range between fds we own, with offsets we own.
        let n = unsafe {
            libc::copy_file_range(
                src.file.as_raw_fd(),
                &mut off_in,
                dst.file.as_raw_fd(),
                &mut off_out,
                len.min(u32::MAX as u64 & !0xfff) as usize,
                0,
            )
        };
        if n < 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        Ok(n as u32)
    }

    fn do_lseek(&self, fh: FileHandle, offset: i64, whence: i32) -> Result<i64> {
        if !self.passthrough.load(Ordering::Relaxed) {
            // With the writeback cache, written data may not have reached the backing file yet,
            // so it would look like a hole (and a sparse-aware copy would drop it). ENOSYS makes
            // the kernel treat the whole file as data from now on: always safe.
            return Err(Errno::ENOSYS);
        }
        let open = self.files.get(fh.0).ok_or(Errno::EBADF)?;
        // SAFETY: lseek on an fd we own; only SEEK_DATA/SEEK_HOLE reach us.
        let ret = unsafe { libc::lseek(open.file.as_raw_fd(), offset, whence) };
        if ret < 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        Ok(ret)
    }
}

fn set_fd_mode(file: &File, mode: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fchmod on an fd we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode & 0o7777) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_fd_owner(file: &File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    // SAFETY: fchown on an fd we own; -1 (u32::MAX) leaves an id unchanged.
    let ret = unsafe {
        libc::fchown(
            file.as_raw_fd(),
            uid.unwrap_or(u32::MAX),
            gid.unwrap_or(u32::MAX),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn futimens(file: &File, times: &[libc::timespec; 2]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: futimens on an fd we own with two valid timespecs.
    if unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Filesystem for RewindFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let caps = config.capabilities();
        let mut want = InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_SPLICE_READ
            | InitFlags::FUSE_SPLICE_WRITE
            | InitFlags::FUSE_SPLICE_MOVE;
        let passthrough = self.want_passthrough
            && caps.contains(InitFlags::FUSE_PASSTHROUGH)
            && config.set_max_stack_depth(1).is_ok();
        if passthrough {
            want |= InitFlags::FUSE_PASSTHROUGH;
        } else {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let _ = config.add_capabilities(want & caps);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        self.passthrough.store(passthrough, Ordering::Relaxed);
        tracing::info!(passthrough, "mount ready");
        if let Some(f) = self
            .on_ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            f(passthrough);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent, name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            // A negative entry (inode 0): the kernel remembers that the name does not exist.
            // The mount is the only writer underneath, and whatever later creates the name goes
            // through the kernel, which drops the entry. Not in `.rewind/`, whose names appear
            // on their own (a new checkpoint under `at/`).
            Err(Errno::ENOENT) if !control::Control::is_virtual(parent.0) => {
                // SAFETY: an all-zero stat is a valid value.
                let none = attr(0, &unsafe { std::mem::zeroed() });
                reply.entry(&TTL, &none, Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // Keep what we know of capabilities to the inodes the kernel holds.
        self.forget_no_caps(ino.0);
        self.inodes().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.do_getattr(ino, fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.do_setattr(req.pid(), ino, mode, uid, gid, size, atime, mtime, fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.do_readlink(ino) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match self.do_mknod(req, parent, name, mode, umask, rdev) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.do_mkdir(req, parent, name, mode, umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.do_unlink(req.pid(), parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.do_unlink(req.pid(), parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self.do_symlink(req, parent, link_name, target) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.do_rename(req.pid(), parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.do_link(req.pid(), ino, newparent, newname) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if control::Control::is_virtual(ino.0) {
            return match self.ctl_open(ino, flags.0) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                Err(e) => reply.error(e),
            };
        }
        let result = (|| -> Result<(u64, Option<Arc<BackingId>>)> {
            let path = self.path(ino)?;
            let writing =
                flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
            // The content is stored before the open that could truncate or change it.
            let episode = if writing {
                self.begin_write(&path, req.pid())?
            } else {
                None
            };
            let opened = self
                .backing
                .open_file(&path, self.backing_flags(flags.0), 0);
            let file = match opened {
                Ok(f) => f,
                Err(e) => {
                    self.end_write(episode);
                    return Err(errno(e));
                }
            };
            self.finish_open(ino.0, file, episode, |f| reply.open_backing(f))
        })();
        match result {
            Ok((fh, Some(id))) => reply.opened_passthrough(FileHandle(fh), self.open_flags(), &id),
            Ok((fh, None)) => reply.opened(FileHandle(fh), self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| -> Result<(FileAttr, u64, Option<Arc<BackingId>>)> {
            Self::check_name(name)?;
            self.not_control(parent, name)?;
            let parent_path = self.path(parent)?;
            let path = backing::join(&parent_path, name);
            // An existing file opened through create (O_CREAT without O_EXCL) is a write.
            let existing = self.backing.stat(&path).ok();
            let mut episode = None;
            if existing.is_some() && flags & libc::O_EXCL == 0 {
                episode = self.begin_write(&path, req.pid())?;
            }
            let opened = self.backing.open_file(
                &path,
                self.backing_flags(flags) | libc::O_CREAT | (flags & libc::O_EXCL),
                mode & !umask & 0o7777,
            );
            let file = match opened {
                Ok(f) => f,
                Err(e) => {
                    self.end_write(episode);
                    return Err(errno(e));
                }
            };
            if existing.is_none() {
                self.chown_new(req, &path)?;
            }
            let st = backing::stat_fd(file.as_fd()).map_err(errno)?;
            if existing.is_none()
                && let Some(rec) = &self.recorder
            {
                episode = rec
                    .begin_create(&path, &st, req.pid())
                    .map_err(record_errno)?;
            }
            let ino = self.inodes().lookup(parent.0, name.as_bytes(), key(&st));
            // A new file has no capabilities.
            self.note_no_caps(ino);
            let (fh, id) = self.finish_open(ino, file, episode, |f| reply.open_backing(f))?;
            Ok((attr(ino, &st), fh, id))
        })();
        match result {
            Ok((attr, fh, Some(id))) => reply.created_passthrough(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                self.open_flags(),
                &id,
            ),
            Ok((attr, fh, None)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                self.open_flags(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if control::Control::is_virtual(fh.0) {
            return match self.ctl_read(req.pid(), fh, offset, size) {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            };
        }
        match self.do_read(fh, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if control::Control::is_virtual(fh.0) {
            return match self.ctl_write(req.pid(), fh, data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            };
        }
        match self.do_write(fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    // No `flush`: fuser answers ENOSYS, and the kernel then stops sending FLUSH at all, saving
    // a round trip on every close(). There is nothing to do at flush: the writeback cache writes
    // dirty pages before asking, locks are the kernel's own, and recording waits for RELEASE.

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if control::Control::is_virtual(fh.0) {
            self.ctl_files.remove(fh.0);
        } else if let Some(open) = self.files.remove(fh.0) {
            // Close our fd before recording, so the last writer's data is all there.
            let episode = open.episode;
            drop(open);
            self.end_write(episode);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = match self.files.get(fh.0) {
            None => Err(Errno::EBADF),
            Some(open) if datasync => open.file.sync_data().map_err(errno),
            Some(open) => open.file.sync_all().map_err(errno),
        };
        // fsync of a workspace file makes its history durable too.
        let result = result.and_then(|()| match &self.recorder {
            Some(rec) => rec.sync().map_err(record_errno),
            None => Ok(()),
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.do_opendir(ino) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(dir) = self.dirs.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (name, d_ino, kind)) in dir.entries.iter().enumerate().skip(offset as usize) {
            // The inode number in a plain readdir is only a hint; lookups give the real one.
            if reply.add(
                INodeNo(*d_ino),
                i as u64 + 1,
                *kind,
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(dir) = self.dirs.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        if dir.virtual_dir {
            for (i, (name, child, _)) in dir.entries.iter().enumerate().skip(offset as usize) {
                let Ok(a) = self.ctl_attr(*child) else {
                    continue;
                };
                if reply.add(
                    INodeNo(*child),
                    i as u64 + 1,
                    OsStr::from_bytes(name),
                    &TTL,
                    &a,
                    Generation(0),
                ) {
                    break;
                }
            }
            return reply.ok();
        }
        for (i, (name, _, _)) in dir.entries.iter().enumerate().skip(offset as usize) {
            let next = i as u64 + 1;
            if name == b"." || name == b".." {
                // The kernel takes no lookup for these; they only need to be listed.
                let (target, path) = if name == b"." {
                    (ino.0, dir.path.clone())
                } else {
                    (
                        dir.parent,
                        backing::split(&dir.path)
                            .map(|(p, _)| p.to_vec())
                            .unwrap_or_default(),
                    )
                };
                let Ok(st) = self.backing.stat(&path) else {
                    continue;
                };
                if reply.add(
                    INodeNo(target),
                    next,
                    OsStr::from_bytes(name),
                    &TTL,
                    &attr(target, &st),
                    Generation(0),
                ) {
                    break;
                }
                continue;
            }
            let name = OsStr::from_bytes(name);
            // Entries that vanished since opendir are skipped.
            let Ok(st) = self.backing.stat_at(&dir.path, name) else {
                continue;
            };
            let child = self.inodes().lookup(ino.0, name.as_bytes(), key(&st));
            if reply.add(
                INodeNo(child),
                i as u64 + 1,
                name,
                &TTL,
                &attr(child, &st),
                Generation(0),
            ) {
                // Not sent: give the lookup back.
                self.inodes().forget(child, 1);
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.do_statfs() {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if name.as_bytes() == CAPS_XATTR {
            self.forget_no_caps(ino.0);
        }
        let result = self
            .xattr_path(ino)
            .and_then(|p| self.backing.setxattr(&p, name, value, flags).map_err(errno));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // The kernel asks for `security.capability` before writing to a file whose privileges
        // it has not checked since it was opened, chowned or chmodded (once per inode with
        // HANDLE_KILLPRIV_V2, which sets SB_NOSEC). Answer from memory when we know.
        let caps = name.as_bytes() == CAPS_XATTR;
        if caps && self.has_no_caps(ino.0) {
            return reply.error(Errno::NO_XATTR);
        }
        tracing::debug!(name = %name.to_string_lossy(), "getxattr");
        let result = self.xattr_path(ino).and_then(|p| {
            self.backing
                .getxattr(&p, name, size as usize)
                .map_err(errno)
        });
        if caps && matches!(result, Err(Errno::NO_XATTR)) {
            self.note_no_caps(ino.0);
        }
        match result {
            Ok(Xattr::Size(n)) => reply.size(n),
            Ok(Xattr::Data(data)) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if control::Control::is_virtual(ino.0) {
            return if size == 0 {
                reply.size(0)
            } else {
                reply.data(&[])
            };
        }
        let result = self
            .xattr_path(ino)
            .and_then(|p| self.backing.listxattr(&p, size as usize).map_err(errno));
        match result {
            Ok(Xattr::Size(n)) => reply.size(n),
            Ok(Xattr::Data(data)) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if name.as_bytes() == CAPS_XATTR {
            self.forget_no_caps(ino.0);
        }
        let result = self
            .xattr_path(ino)
            .and_then(|p| self.backing.removexattr(&p, name).map_err(errno));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Mounted with default_permissions: the kernel checks access itself.
        reply.ok();
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        let ready = fuser::PollEvents::POLLIN | fuser::PollEvents::POLLRDNORM;
        let Some(h) = self.ctl_files.get(fh.0) else {
            // Regular files are always ready.
            return reply.poll(ready | fuser::PollEvents::POLLOUT);
        };
        match &h.events {
            Some(rx) => {
                // Register first, then look: a change arriving in between still wakes us.
                *h.poller.lock().unwrap_or_else(|e| e.into_inner()) = Some(ph);
                reply.poll(if rx.is_empty() {
                    fuser::PollEvents::empty()
                } else {
                    ready
                });
            }
            None => reply.poll(ready | fuser::PollEvents::POLLOUT),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // As a regular file answers terminal ioctls (isatty, TCGETS): quietly.
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.do_fallocate(fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.do_lseek(fh, offset, whence) {
            Ok(off) => reply.offset(off),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        match self.do_copy_file_range(fh_in, offset_in, fh_out, offset_out, len) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }
}
