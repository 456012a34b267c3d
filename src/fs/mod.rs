//! The FUSE filesystem: a passthrough over the workspace directory it is mounted on.
//!
//! Data I/O on regular files goes through the kernel (FUSE passthrough), so the daemon only
//! sees the edges of a write episode (open, truncate, fallocate, copy_file_range, rename,
//! unlink, release) — exactly the points where recording must run before content is destroyed.
//! Without passthrough (not root) the kernel's writeback cache is used and `read`/`write` come
//! here.
//!
//! Where things are: [`attr`] (stat to FUSE attributes), [`namespace`] (lookup, mkdir, mknod,
//! symlink, link, unlink, rename), [`setattr`], [`file`] (open, I/O, release, passthrough ids),
//! [`dir`] (listing), [`xattr`], [`restore`] (rollbacks carried out on the backing directory),
//! [`control`] (the `.rewind/` directory), [`backing`] (every syscall underneath), [`inode`]
//! and [`handle`] (the tables), [`mount`].
//!
//! Each `Filesystem` method below only picks the code that serves the request and replies
//! exactly once. The state they share is [`Core`], which the daemon's command threads use too
//! (a rollback works on the backing directory through the same code as FUSE requests).
//! Lock order: docs/design.md, "Lock order".
//!
//! About 900 lines because the `Filesystem` trait has forty-odd methods, each a few lines of
//! dispatch and reply; the logic they call lives in the modules above.

pub mod attr;
pub mod backing;
pub mod control;
mod dir;
mod file;
pub mod handle;
pub mod inode;
mod mount;
mod namespace;
mod order;
pub mod restore;
mod setattr;
mod state;
mod xattr;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, Notifier, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use crate::history::Recorder;
use crate::history::who::By;
use backing::Backing;
use handle::HandleTable;
use inode::InodeTable;
pub use mount::{
    MountConfig, Mounted, backing, can_passthrough, disk_readahead, filesystem,
    inside_rewind_mount, is_rewind_mount, match_readahead, mount, mount_type, unmount,
};
pub use state::MountState;

type Result<T> = std::result::Result<T, Errno>;

/// How long the kernel may cache entries and attributes. The mount is the only writer of the
/// directory underneath, so the kernel's view only goes stale through us, and we tell it.
const TTL: Duration = Duration::from_secs(24 * 3600);

/// Told whether passthrough is on, once the mount answers.
type ReadyHook = Box<dyn FnOnce(bool) + Send>;

/// Who asked: the process (thread) and the credentials the kernel checks with.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Caller {
    /// Who asked, for attribution: the thread and the filesystem uid the kernel gave.
    pub fn by(&self) -> By {
        By {
            pid: self.pid,
            uid: self.uid,
        }
    }

    fn of(req: &Request) -> Caller {
        Caller {
            pid: req.pid(),
            uid: req.uid(),
            gid: req.gid(),
        }
    }
}

/// A recording failure stops the operation: nothing happens unrecorded. A full disk is
/// `ENOSPC`, anything else `EIO`.
fn record_errno(e: crate::history::Error) -> Errno {
    tracing::error!("cannot record a change, refusing the operation: {e}");
    match &e {
        crate::history::Error::Store(s) if s.is_no_space() => Errno::ENOSPC,
        // The errno itself: fuser's conversion from an `ErrorKind` is always EIO.
        crate::history::Error::Io { source, .. } => {
            Errno::from_i32(source.raw_os_error().unwrap_or(libc::EIO))
        }
        _ => Errno::EIO,
    }
}

/// `ESTALE` for `ENOENT` from [`Core::path`]: see [`Core::named_path`].
fn stale_if_nameless(e: Errno) -> Errno {
    if e == Errno::ENOENT { Errno::ESTALE } else { e }
}

/// The state FUSE requests and the daemon's command threads share.
pub struct Core {
    backing: Arc<Backing>,
    /// `None` when mounted without recording (for measuring what recording costs).
    recorder: Option<Arc<Recorder>>,
    inodes: Mutex<InodeTable>,
    /// What the paths mean: held shared by an operation from the moment it turns an inode into
    /// a path until it has done and recorded what it does there, and exclusively by the rename
    /// of a folder (which changes what every path below it means) from its checks until the
    /// inode table has the new names. Otherwise `mkfifo a/c/f` beside `mv a b` could be
    /// recorded after the rename under a path that no longer holds it (a history where `a/c/f`
    /// is made after `a` is gone), and a lookup could find nothing where a file is.
    names: RwLock<()>,
    /// Held exclusively across a syscall that frees a backing inode number (the last unlink
    /// of a file, rmdir, a rename over a last name) and the `retire` of that key; shared while
    /// a key read from the backing is entered in the table (`enter`). Otherwise a file made
    /// meanwhile that reuses the number would be taken for the removed one.
    reuse: RwLock<()>,
    files: HandleTable<file::OpenFile>,
    dirs: HandleTable<dir::OpenDir>,
    /// Per FUSE inode, the backing id shared by its open handles.
    backing_ids: Mutex<HashMap<u64, Weak<BackingId>>>,
    /// Inodes known to have no `security.capability` (see `xattr`).
    no_caps: Mutex<HashSet<u64>>,
    /// Set in `init` when the kernel agreed to passthrough.
    passthrough: AtomicBool,
    /// Whether to ask for passthrough at all (needs CAP_SYS_ADMIN).
    want_passthrough: bool,
    /// The daemon's own uid: when root, objects created for another user are given to them.
    euid: u32,
    /// Tells the kernel what changed underneath it (rollbacks), once the session exists.
    notifier: OnceLock<Notifier>,
    /// When recording: the RELEASEs read and not yet past their id, which the requests the
    /// kernel sent after them wait for ([`order`]).
    order: Option<Arc<order::ReleaseOrder>>,
    /// Rollbacks begun and ended since the mount (see [`Restores`]).
    restores: Restores,
    /// Held shared by a request that makes something under a name (create, mkdir, mknod,
    /// symlink, link) from the moment it makes it until it is recorded (or its write episode
    /// begun), and exclusively by a rollback's removal of a name. The kernel keeps the two
    /// apart for requests through the mount (it locks the folder); a rollback works underneath,
    /// and found a file just created there before the daemon knew of it (its episode not begun,
    /// not held back): it recorded the delete of a file no change had made, and the create
    /// was never recorded.
    making: RwLock<()>,
    /// The other way round: held shared by a request that removes a name (unlink, rmdir) from
    /// the moment it removes it until its delete is queued or recorded, and exclusively by a
    /// rollback's making of a name. A rollback found a name a process had just unlinked free,
    /// made its file there and recorded its create before the process's delete was queued:
    /// the history had the file made where it still had one.
    removing: RwLock<()>,
}

/// Rollbacks begun and ended. A rollback works on the directory underneath, outside the
/// kernel's locks: a rename or unlink through the mount takes the `stat` of its files before
/// it holds them, which the kernel keeps valid against every other request (it locks the
/// folders and the files), but not against a rollback's step in between. When one ran or runs
/// meanwhile, they take their `stat` again once they hold their files; otherwise that would
/// cost every rename and unlink a syscall. A rename recorded from the mode a rollback had just
/// changed broke the file's chain (a save after a rollback's chmod), and a rollback's removal
/// of a save's temporary file, looked up just before the save renamed it, forgot the next
/// temporary's create.
#[derive(Default)]
struct Restores {
    begun: AtomicU64,
    ended: AtomicU64,
}

impl Restores {
    /// What to hand to [`since`](Self::since) once the files are held: how many rollbacks had
    /// begun, and whether one was running.
    fn seen(&self) -> (u64, bool) {
        // Ended first: a rollback that ends between the two loads is still seen running.
        let ended = self.ended.load(Ordering::SeqCst);
        let begun = self.begun.load(Ordering::SeqCst);
        (begun, begun != ended)
    }

    /// Whether a rollback ran at any moment since [`seen`](Self::seen) said `seen`: one was
    /// running then (it may have ended since), or one has begun since.
    fn since(&self, (begun, running): (u64, bool)) -> bool {
        running || self.begun.load(Ordering::SeqCst) != begun
    }
}

pub struct RewindFs {
    core: Arc<Core>,
    /// The control directory, when recording (it needs the history).
    control: Option<control::Control>,
    /// Called once the kernel has finished `init`: the mount answers from then on.
    on_ready: Mutex<Option<ReadyHook>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// Whether this thread holds [`Core::names`]: an operation inside another (a rollback's
    /// removal inside its write of a file) does not take it again, which would wait behind a
    /// folder rename that waits for the first.
    static HOLDS_NAMES: Cell<bool> = const { Cell::new(false) };
}

/// [`Core::names`], held by this thread (or by an operation this one is part of).
/// Neither guard when it was held already.
pub(crate) struct Names<'a> {
    shared: Option<RwLockReadGuard<'a, ()>>,
    exclusive: Option<RwLockWriteGuard<'a, ()>>,
}

impl Names<'_> {
    fn exclusive(&self) -> bool {
        self.exclusive.is_some()
    }

    /// Whether this guard took the lock (not held already by an operation around it).
    pub(crate) fn taken(&self) -> bool {
        self.shared.is_some() || self.exclusive.is_some()
    }
}

impl Drop for Names<'_> {
    fn drop(&mut self) {
        if self.taken() {
            HOLDS_NAMES.set(false);
        }
    }
}

impl Core {
    fn inodes(&self) -> std::sync::MutexGuard<'_, InodeTable> {
        lock(&self.inodes)
    }

    /// The kernel is told of `name` in `parent`, the backing file `key` (read after the syscall
    /// that made or found it): its inode number, with one more lookup held.
    fn enter(&self, parent: INodeNo, name: &[u8], key: inode::BackingKey) -> u64 {
        let _reuse = self.reuse.read().unwrap_or_else(|e| e.into_inner());
        self.inodes().lookup(parent.0, name, key)
    }

    /// Run `free`, a syscall that frees the backing inode number of `key` when `frees`, so
    /// that no file made meanwhile is entered as the freed one (see `reuse`).
    fn freeing<T>(
        &self,
        key: inode::BackingKey,
        frees: bool,
        free: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !frees {
            return free();
        }
        let _reuse = self.reuse.write().unwrap_or_else(|e| e.into_inner());
        let done = free()?;
        self.inodes().retire(key);
        Ok(done)
    }

    /// Hold [`making`](Core::making) shared, for a request that makes something under a name.
    pub(crate) fn making(&self) -> RwLockReadGuard<'_, ()> {
        self.making.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold [`making`](Core::making) exclusively, for a rollback's removal of a name.
    pub(crate) fn making_none(&self) -> RwLockWriteGuard<'_, ()> {
        self.making.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold [`removing`](Core::removing) shared, for a request that removes a name.
    pub(crate) fn removing(&self) -> RwLockReadGuard<'_, ()> {
        self.removing.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold [`removing`](Core::removing) exclusively, for a rollback's making of a name.
    pub(crate) fn removing_none(&self) -> RwLockWriteGuard<'_, ()> {
        self.removing.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold [`names`](Core::names) shared, for an operation on paths.
    pub(crate) fn names_shared(&self) -> Names<'_> {
        if HOLDS_NAMES.get() {
            return Names {
                shared: None,
                exclusive: None,
            };
        }
        let held = self.names.read().unwrap_or_else(|e| e.into_inner());
        HOLDS_NAMES.set(true);
        Names {
            shared: Some(held),
            exclusive: None,
        }
    }

    /// Hold [`names`](Core::names) exclusively, for a folder's rename. This thread must not
    /// hold it already.
    fn names_exclusive(&self) -> Names<'_> {
        debug_assert!(
            !HOLDS_NAMES.get(),
            "names taken exclusively inside an operation"
        );
        let held = self.names.write().unwrap_or_else(|e| e.into_inner());
        HOLDS_NAMES.set(true);
        Names {
            shared: None,
            exclusive: Some(held),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<Vec<u8>> {
        self.inodes().path(ino.0).ok_or(Errno::ENOENT)
    }

    /// [`path`](Self::path) for a request about a file the caller named (open, stat, xattrs):
    /// with no name left, `ESTALE`. The name it looked up was unlinked or renamed over since
    /// (an atomic save racing the call), and the kernel then looks the name up again and asks
    /// about what it names now: on disk such a call never fails, and `ENOENT` for a name that
    /// always held a file would be wrong (`hostile21::r_plus_opens_racing_atomic_saves_*`).
    fn named_path(&self, ino: INodeNo) -> Result<Vec<u8>> {
        self.path(ino).map_err(stale_if_nameless)
    }

    /// The path of `ino` to reach the file by. The daemon reaches a file through the first of
    /// its names it saw. A daemon that is not root may be refused (`EACCES`) on the way to that
    /// one, a folder above it made unreadable by its owner, while another name of a hard-linked
    /// file is in reach, as it is outside the mount: the names are tried in turn, and the first
    /// that works is the file's first name from then on. Costs a `stat` only for a file with
    /// several names, with a daemon that is not root.
    fn reachable_path(&self, ino: INodeNo) -> Result<Vec<u8>> {
        if self.euid == 0 {
            return self.path(ino);
        }
        let (path, names) = {
            let inodes = self.inodes();
            (inodes.path(ino.0), inodes.name_count(ino.0))
        };
        let path = path.ok_or(Errno::ENOENT)?;
        if names < 2 {
            return Ok(path);
        }
        let refused = |p: &[u8]| {
            self.backing
                .stat(p)
                .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES))
        };
        if !refused(&path) {
            return Ok(path);
        }
        let paths = self.inodes().paths(ino.0);
        for (i, other) in paths.iter().enumerate().skip(1) {
            if self.backing.stat(other).is_ok() {
                self.inodes().prefer(ino.0, i);
                return Ok(other.clone());
            }
        }
        Ok(path)
    }

    fn passthrough(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    /// Wait until every RELEASE the kernel sent before `req` has set its end's id aside, then
    /// record the closed edits: call before any lock, in a request that may record ([`order`]).
    fn in_order(&self, req: &Request) {
        self.in_turn(req);
        // Closed edits are recorded before anything else that may record: it may change,
        // move or look at their files (`recorder::episodes::Closed`).
        if let Some(rec) = &self.recorder
            && let Err(e) = rec.finish_closed()
        {
            tracing::error!("cannot record the end of an edit: {e}");
        }
    }

    /// [`in_order`](Self::in_order) for an open for writing: it records the closed edit of
    /// its own file itself ([`Recorder::begin_write`]), and no other.
    fn in_turn(&self, req: &Request) {
        if let Some(order) = &self.order {
            order.wait_before(req.unique().0);
        }
    }

    /// Whether an open for writing of `ino` may record a change (and so must wait its turn,
    /// [`in_order`](Self::in_order)): only if a write episode is open on the file. With none,
    /// the open stores the content before and notes the episode, neither of which takes an
    /// id, so it need not wait for the RELEASEs sent before it. With one, it may cut it (a
    /// change) or join it, and the RELEASE of an earlier handle of the same file must end it
    /// first: `echo a > f; echo b > f` is two changes. A held-back create of the file has its
    /// id already. A request sent before that opens the file too is no reason to wait: opens
    /// take no id, in whichever order they are handled.
    fn open_may_take_id(&self, ino: INodeNo) -> bool {
        let Some(rec) = &self.recorder else {
            return false;
        };
        let Some(key) = self.inodes().key(ino.0) else {
            return true;
        };
        rec.has_episode(key)
    }

    /// Give the kernel's notifier (after the session is made, before it serves).
    pub fn set_notifier(&self, n: Notifier) {
        let _ = self.notifier.set(n);
    }
}

impl RewindFs {
    pub fn new(
        backing: Arc<Backing>,
        recorder: Option<Arc<Recorder>>,
        control: Option<control::Control>,
        want_passthrough: bool,
    ) -> io::Result<RewindFs> {
        let root = backing::stat_fd(backing.root_fd())?;
        let order = recorder.is_some().then(Arc::default);
        let core = Arc::new(Core {
            backing,
            recorder,
            inodes: Mutex::new(InodeTable::new(attr::key(&root))),
            names: RwLock::new(()),
            reuse: RwLock::new(()),
            files: HandleTable::default(),
            dirs: HandleTable::default(),
            backing_ids: Mutex::new(HashMap::new()),
            no_caps: Mutex::new(HashSet::new()),
            passthrough: AtomicBool::new(false),
            want_passthrough,
            restores: Restores::default(),
            making: RwLock::new(()),
            removing: RwLock::new(()),
            euid: rustix::process::geteuid().as_raw(),
            notifier: OnceLock::new(),
            order,
        });
        let fs = RewindFs {
            core,
            control,
            on_ready: Mutex::new(None),
        };
        if let Some(c) = &fs.control {
            c.attach(fs.core.clone());
        }
        Ok(fs)
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Run `f` (with whether passthrough is on) once the mount answers requests.
    pub fn on_ready(&self, f: impl FnOnce(bool) + Send + 'static) {
        *lock(&self.on_ready) = Some(Box::new(f));
    }

    fn control_for(&self, ino: INodeNo) -> Option<&control::Control> {
        self.control
            .as_ref()
            .filter(|_| control::Control::is_virtual(ino.0))
    }

    fn is_control_name(&self, parent: INodeNo, name: &OsStr) -> bool {
        self.control.is_some() && control::is_entry(parent.0, name)
    }
}

/// Reply to an operation that returns nothing.
fn ok_or(reply: ReplyEmpty, result: Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for RewindFs {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Some(order) = &self.core.order {
            order.start(req.unique().0);
        }
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
        let passthrough = self.core.want_passthrough
            && caps.contains(InitFlags::FUSE_PASSTHROUGH)
            && config.set_max_stack_depth(1).is_ok();
        if passthrough {
            want |= InitFlags::FUSE_PASSTHROUGH;
        } else {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let _ = config.add_capabilities(want & caps);
        // The kernel numbers a background request (a RELEASE) only when it sends it, and holds
        // it back, unnumbered, while `max_background` are in flight: the writer's next request
        // would then be numbered, and recorded, first (`order`). When recording, the limit is
        // as high as the kernel lets it be (for a daemon that is not root, the fuse module's
        // max_user_bgreq, thousands); the congestion threshold still throttles readahead and
        // writeback at 48.
        let max_background = if self.core.order.is_some() {
            u16::MAX
        } else {
            64
        };
        let _ = config.set_max_background(max_background);
        let _ = config.set_congestion_threshold(48);
        self.core.passthrough.store(passthrough, Ordering::Relaxed);
        tracing::info!(passthrough, "mount ready");
        if let Some(f) = lock(&self.on_ready).take() {
            f(passthrough);
        }
        Ok(())
    }

    fn received(&self, req: &Request, release: Option<(INodeNo, FileHandle)>) {
        if let Some(order) = &self.core.order {
            let records = release.is_some_and(|(ino, fh)| {
                self.control_for(ino).is_none() && self.core.holds_episode(fh)
            });
            order.read(req.unique().0, records);
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(c) = &self.control
            && (control::Control::is_virtual(parent.0) || self.is_control_name(parent, name))
        {
            // What it names may be made by an edit whose RELEASE the kernel sent before this
            // (after the writer's close() returned): that end is recorded first.
            self.core.in_turn(req);
            return match c.lookup(req, parent, name) {
                // Entries in `.rewind/` are checked against the caller every time: not cached.
                Ok(attr) => reply.entry(&Duration::ZERO, &attr, Generation(0)),
                Err(e) => reply.error(e),
            };
        }
        match self.core.lookup(parent, name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            // A negative entry (inode 0): the kernel remembers that the name does not exist.
            // The mount is the only writer underneath, and whatever later creates the name
            // goes through the kernel (or tells it), which drops the entry.
            Err(Errno::ENOENT) => reply.entry(&TTL, &attr::none(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if control::Control::is_virtual(ino.0) {
            return;
        }
        self.core.forget(ino, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(c) = self.control_for(ino) {
            return match c.getattr(req, ino) {
                Ok(attr) => reply.attr(&Duration::ZERO, &attr),
                Err(e) => reply.error(e),
            };
        }
        match self.core.getattr(ino, fh) {
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
        if let Some(c) = self.control_for(ino) {
            return match c.setattr(req, ino, mode, uid, gid) {
                Ok(attr) => reply.attr(&Duration::ZERO, &attr),
                Err(e) => reply.error(e),
            };
        }
        self.core.in_order(req);
        let changes = setattr::Changes {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self.core.setattr(&Caller::of(req), ino, &changes, fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        if let Some(c) = self.control_for(ino) {
            return match c.readlink(req, ino) {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(e),
            };
        }
        match self.core.readlink(ino) {
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
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, name) {
            return reply.error(control::refuse_change(parent.0));
        }
        self.core.in_order(req);
        match self
            .core
            .mknod(&Caller::of(req), parent, name, mode & !umask, rdev)
        {
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
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, name) {
            return reply.error(control::refuse_change(parent.0));
        }
        self.core.in_order(req);
        match self
            .core
            .mkdir(&Caller::of(req), parent, name, mode & !umask & 0o7777)
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, name) {
            return reply.error(control::refuse_removal(parent.0));
        }
        self.core.in_order(req);
        ok_or(
            reply,
            self.core.unlink(&Caller::of(req), parent, name, false),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, name) {
            return reply.error(control::refuse_removal(parent.0));
        }
        self.core.in_order(req);
        ok_or(
            reply,
            self.core.unlink(&Caller::of(req), parent, name, true),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, link_name) {
            return reply.error(control::refuse_change(parent.0));
        }
        self.core.in_order(req);
        match self
            .core
            .symlink(&Caller::of(req), parent, link_name, target)
        {
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
        for (p, n) in [(parent, name), (newparent, newname)] {
            if control::Control::is_virtual(p.0) || self.is_control_name(p, n) {
                return reply.error(control::refuse_removal(p.0));
            }
        }
        self.core.in_order(req);
        ok_or(
            reply,
            self.core
                .rename(&Caller::of(req), parent, name, newparent, newname, flags),
        );
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if control::Control::is_virtual(ino.0)
            || control::Control::is_virtual(newparent.0)
            || self.is_control_name(newparent, newname)
        {
            return reply.error(control::refuse_change(newparent.0));
        }
        self.core.in_order(req);
        match self.core.link(&Caller::of(req), ino, newparent, newname) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if let Some(c) = self.control_for(ino) {
            // Parallel writes: each writer of `ctl` has a handle (and a line) of its own, and
            // a command answers its write only when it is done; without the flag the kernel
            // holds the file's lock over each write, so one long command (a gc, a rollback)
            // would hold up every other `rewind` command and hook until it ended.
            let flags_out = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
            self.core.in_turn(req);
            return match c.open(req, ino, flags.0) {
                Ok(fh) => reply.opened(FileHandle(fh), flags_out),
                Err(e) => reply.error(e),
            };
        }
        if file::writes(flags.0) && self.core.open_may_take_id(ino) {
            self.core.in_turn(req);
        }
        match self
            .core
            .open(&Caller::of(req), ino, flags.0, |f| reply.open_backing(f))
        {
            Ok(file::Opened {
                fh,
                backing: Some(id),
                flags,
            }) => reply.opened_passthrough(FileHandle(fh), flags, &id),
            Ok(file::Opened { fh, flags, .. }) => reply.opened(FileHandle(fh), flags),
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
        if control::Control::is_virtual(parent.0) || self.is_control_name(parent, name) {
            return reply.error(if self.is_control_name(parent, name) {
                Errno::EEXIST
            } else {
                Errno::EROFS
            });
        }
        self.core.in_order(req);
        let created = self.core.create(
            &Caller::of(req),
            parent,
            name,
            mode & !umask & 0o7777,
            flags,
            |f| reply.open_backing(f),
        );
        match created {
            Ok((
                attr,
                file::Opened {
                    fh,
                    backing: Some(id),
                    flags,
                },
            )) => reply.created_passthrough(&TTL, &attr, Generation(0), FileHandle(fh), flags, &id),
            Ok((attr, file::Opened { fh, flags, .. })) => {
                reply.created(&TTL, &attr, Generation(0), FileHandle(fh), flags);
            }
            Err(e) => reply.error(e),
        }
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if control::Control::is_virtual(parent.0) {
            return reply.error(Errno::EROFS);
        }
        self.core.in_order(req);
        let made = self.core.tmpfile(
            &Caller::of(req),
            parent,
            mode & !umask & 0o7777,
            flags,
            |f| reply.open_backing(f),
        );
        match made {
            Ok((
                attr,
                file::Opened {
                    fh,
                    backing: Some(id),
                    flags,
                },
            )) => {
                reply.created_passthrough(&TTL, &attr, Generation(0), FileHandle(fh), flags, &id);
            }
            Ok((attr, file::Opened { fh, flags, .. })) => {
                reply.created(&TTL, &attr, Generation(0), FileHandle(fh), flags);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Some(c) = self.control_for(ino) {
            // May keep the reply and answer later (a blocking `events` read).
            return c.read(req, fh, offset, size, reply);
        }
        match self.core.read(fh, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(c) = self.control_for(ino) {
            // A command runs on a thread of its own and replies when done; it sees what was
            // closed before it. The ids of what was closed are set aside here; the edits are
            // recorded by the command's thread (`Job::execute`): an agent's hook must not wait
            // for them before its turn begins or ends.
            self.core.in_turn(req);
            return c.write(req, fh, offset, data, reply);
        }
        let kill_suid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.core.write(fh, offset, data, kill_suid) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    // No `flush`: fuser answers ENOSYS, and the kernel then stops sending FLUSH at all, saving
    // a round trip on every close(). There is nothing to do at flush: the writeback cache writes
    // dirty pages before asking, locks are the kernel's own, and recording waits for RELEASE.

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(c) = self.control_for(ino) {
            c.release(req, fh);
        } else {
            let order = self.core.order.as_ref();
            // A handle whose episode other handles still hold ends nothing: it need not wait
            // its turn, nor hold up the requests after it.
            let _turn = if self.core.leave_shared_episode(fh) {
                if let Some(o) = order {
                    o.pass(req.unique().0);
                }
                None
            } else {
                order.and_then(|o| o.turn(req.unique().0))
            };
            self.core.release(fh);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.control_for(ino).is_some() {
            return reply.ok();
        }
        // It records a new file's create if it is held back.
        self.core.in_order(req);
        ok_or(reply, self.core.fsync(fh, datasync));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Some(c) = self.control_for(ino) {
            self.core.in_turn(req);
            return match c.opendir(req, ino) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(e),
            };
        }
        let hide = self.control.is_some();
        match self.core.opendir(ino, hide) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        if let Some(c) = self.control_for(ino) {
            return c.readdir(fh, offset, reply);
        }
        self.core.readdir(fh, offset, reply);
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        if let Some(c) = self.control_for(ino) {
            return c.readdirplus(req, fh, offset, reply);
        }
        self.core.readdirplus(ino, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Some(c) = self.control_for(ino) {
            c.releasedir(fh);
        } else {
            self.core.releasedir(fh);
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.control_for(ino).is_some() {
            return reply.ok();
        }
        // What it makes durable includes the end of an edit closed before it, whose RELEASE
        // another worker may not have taken yet.
        self.core.in_order(req);
        ok_or(reply, self.core.fsyncdir(fh, datasync));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.core.backing.statfs().map_err(Errno::from) {
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
        if self.control_for(ino).is_some() {
            return reply.error(Errno::EPERM);
        }
        ok_or(reply, self.core.setxattr(ino, name, value, flags));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if self.control_for(ino).is_some() {
            // Nothing in the control directory has extended attributes.
            return reply.error(Errno::NO_XATTR);
        }
        match self.core.getxattr(ino, name, size) {
            Ok(backing::Xattr::Size(n)) => reply.size(n),
            Ok(backing::Xattr::Data(data)) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if self.control_for(ino).is_some() {
            return if size == 0 {
                reply.size(0);
            } else {
                reply.data(&[]);
            };
        }
        match self.core.listxattr(ino, size) {
            Ok(backing::Xattr::Size(n)) => reply.size(n),
            Ok(backing::Xattr::Data(data)) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.control_for(ino).is_some() {
            return reply.error(Errno::EPERM);
        }
        ok_or(reply, self.core.removexattr(ino, name));
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Mounted with default_permissions: the kernel checks access itself.
        reply.ok();
    }

    fn poll(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        if let Some(c) = self.control_for(ino) {
            return reply.poll(c.poll(fh, ph));
        }
        // Regular files are always ready.
        reply.poll(
            fuser::PollEvents::POLLIN | fuser::PollEvents::POLLRDNORM | fuser::PollEvents::POLLOUT,
        );
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
        ok_or(reply, self.core.fallocate(fh, offset, length, mode));
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
        match self.core.lseek(fh, offset, whence) {
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
        match self
            .core
            .copy_file_range(fh_in, offset_in, fh_out, offset_out, len)
        {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }
}
