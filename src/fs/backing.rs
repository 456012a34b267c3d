//! Every syscall on the directory underneath the mount, relative to one directory fd opened
//! before mounting over it. Nothing else in the program touches the backing directory.
//!
//! Paths here are workspace-relative byte strings. Every operation resolves the parent folder
//! to a directory fd (cached; opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! a component at a time for paths longer than the kernel takes at once), then acts on the last
//! name with `*at(..., AT_SYMLINK_NOFOLLOW)` or `O_NOFOLLOW`. So no path can leave the
//! workspace, a symlink in it is an object to report, never a way out, and a path whose folder
//! became a symlink fails with `ELOOP`.
//!
//! Longer than most files (about 700 lines) on purpose: it is the one place with raw fd
//! syscalls, and keeping them together keeps every SAFETY argument in one room. Every syscall
//! goes through rustix but `fstat`/`fstatat`, which must give `libc::stat`, the type the
//! recorder, the history and FUSE attributes all read (see docs/design.md, "Syscalls").

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{OFlags, ResolveFlags};

/// The workspace directory as it was before the mount covered it.
pub struct Backing {
    root: OwnedFd,
    /// Directory fds by path, so an operation does not open and close its parent each time.
    /// Emptied whenever a folder is renamed or removed (then a path may name another folder,
    /// or none).
    dirs: Mutex<HashMap<Vec<u8>, Arc<OwnedFd>>>,
}

/// How many folders to keep open.
const DIR_CACHE: usize = 512;

/// The longest path resolved in one `openat2`; longer ones are walked in pieces.
const PATH_PIECE: usize = 2048;

/// A directory to act in: the root itself, or a cached one.
enum Dir<'a> {
    Root(BorrowedFd<'a>),
    Cached(Arc<OwnedFd>),
}

impl Dir<'_> {
    fn raw(&self) -> RawFd {
        match self {
            Dir::Root(fd) => fd.as_raw_fd(),
            Dir::Cached(fd) => fd.as_raw_fd(),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(fd) => *fd,
            Dir::Cached(fd) => fd.as_fd(),
        }
    }
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The open flags the kernel may pass in an open or create that mean the same on the file
/// underneath. Others are the kernel's own (`__FMODE_EXEC` for an exec, `FMODE_NONOTIFY`),
/// only make sense at creation (`O_CREAT`, `O_EXCL`, `O_NOCTTY`), or are ours to set
/// (`O_NOFOLLOW`, `O_CLOEXEC`); `openat2` refuses flags it does not know.
pub const PASSED_OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_LARGEFILE
    | libc::O_NOATIME;

/// `openat2` confined to beneath `dirfd`, following no symlink at any component.
fn openat2_beneath(
    dirfd: BorrowedFd<'_>,
    path: &[u8],
    flags: i32,
    mode: u32,
) -> io::Result<OwnedFd> {
    let path = if path.is_empty() { &b"."[..] } else { path };
    let flags = OFlags::from_bits_retain((flags | libc::O_CLOEXEC) as u32);
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    loop {
        match rustix::fs::openat2(
            dirfd,
            OsStr::from_bytes(path),
            flags,
            rustix::fs::Mode::from_bits_truncate(mode),
            resolve,
        ) {
            Ok(fd) => return Ok(fd),
            // openat2 asks to retry when a rename raced the lookup.
            Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Open folder `path` below `dirfd`, in pieces short enough for the kernel.
fn open_dir_path(dirfd: BorrowedFd<'_>, path: &[u8], flags: i32) -> io::Result<OwnedFd> {
    if path.len() <= PATH_PIECE {
        return openat2_beneath(dirfd, path, flags, 0);
    }
    // Cut at a `/` before the limit, open that folder, go on from there.
    let cut = path[..PATH_PIECE]
        .iter()
        .rposition(|&b| b == b'/')
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
    let first = openat2_beneath(dirfd, &path[..cut], libc::O_PATH | libc::O_DIRECTORY, 0)?;
    open_dir_path(first.as_fd(), &path[cut + 1..], flags)
}

/// While the returned guard lives, this thread creates files with exactly the modes asked
/// for. The kernel has already applied the caller's umask to the mode it sends; the daemon's
/// own (077, for its store) would take bits away a second time. The umask is per process, so
/// the thread first takes its own copy of it (`unshare(CLONE_FS)`), and the daemon's other
/// threads keep theirs. The guard puts the thread's umask back, so that what the thread does
/// afterwards (recording into the store, which may make a new log file; starting a thread,
/// which shares its umask) creates private files again.
fn exact_modes() -> ExactModes {
    thread_local! {
        static OWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !OWN.get() {
        // SAFETY: unsharing CLONE_FS gives this thread its own root, cwd and umask; nothing
        // here depends on sharing them (every path is relative to a directory fd). The fd
        // table (CLONE_FILES, what makes rustix call this unsafe) stays shared.
        if unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }.is_err() {
            return ExactModes(None);
        }
        OWN.set(true);
    }
    // After unshare this affects this thread only.
    ExactModes(Some(rustix::process::umask(rustix::fs::Mode::empty())))
}

/// This thread's umask before [`exact_modes`], put back on drop.
struct ExactModes(Option<rustix::fs::Mode>);

impl Drop for ExactModes {
    fn drop(&mut self) {
        if let Some(mask) = self.0 {
            // The thread has its own umask (see `exact_modes`).
            rustix::process::umask(mask);
        }
    }
}

pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full stat into `st` on success, and only then is it read.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat returned 0, so `st` is initialized.
    Ok(unsafe { st.assume_init() })
}

impl Backing {
    /// Open `dir` (which must be a directory) to serve it later, even once a mount covers it.
    pub fn open(dir: &Path) -> io::Result<Backing> {
        let root = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(Backing {
            root,
            dirs: Mutex::new(HashMap::new()),
        })
    }

    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    fn dir(&self, path: &[u8]) -> io::Result<Dir<'_>> {
        if path.is_empty() {
            return Ok(Dir::Root(self.root.as_fd()));
        }
        let lock = || self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = lock().get(path) {
            return Ok(Dir::Cached(fd.clone()));
        }
        let fd = Arc::new(open_dir_path(
            self.root.as_fd(),
            path,
            libc::O_PATH | libc::O_DIRECTORY,
        )?);
        let mut dirs = lock();
        if dirs.len() >= DIR_CACHE {
            dirs.clear();
        }
        dirs.insert(path.to_vec(), fd.clone());
        Ok(Dir::Cached(fd))
    }

    /// A folder was renamed or removed: cached paths may now lead elsewhere.
    pub fn forget_dirs(&self) {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Run `f` on `path`'s parent directory fd and last name (`"."` on the root itself).
    fn at<T>(
        &self,
        path: &[u8],
        f: impl FnOnce(&Dir<'_>, &CString) -> io::Result<T>,
    ) -> io::Result<T> {
        match split(path) {
            None => f(&Dir::Root(self.root.as_fd()), &cstr(b".")?),
            Some((parent, name)) => f(&self.dir(parent)?, &cstr(name.as_bytes())?),
        }
    }

    /// `lstat` of `name` in directory `parent`.
    pub fn stat_at(&self, parent: &[u8], name: &OsStr) -> io::Result<libc::stat> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstatat writes a full stat on success, and only then is it read.
        check(unsafe {
            libc::fstatat(
                dir.raw(),
                name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        // SAFETY: fstatat returned 0, so `st` is initialized.
        Ok(unsafe { st.assume_init() })
    }

    /// `lstat` of a whole path (the root for an empty one).
    pub fn stat(&self, path: &[u8]) -> io::Result<libc::stat> {
        match split(path) {
            None => stat_fd(self.root.as_fd()),
            Some((parent, name)) => self.stat_at(parent, name),
        }
    }

    /// Open a file (never through a symlink) with `flags`; `mode` applies with `O_CREAT`.
    pub fn open_file(&self, path: &[u8], flags: i32, mode: u32) -> io::Result<File> {
        let (parent, name) =
            split(path).ok_or_else(|| io::Error::from_raw_os_error(libc::EISDIR))?;
        let dir = self.dir(parent)?;
        let _exact = (flags & libc::O_CREAT != 0).then(exact_modes);
        let fd = openat2_beneath(dir.fd(), name.as_bytes(), flags | libc::O_NOFOLLOW, mode)?;
        Ok(File::from(fd))
    }

    /// An unnamed regular file in folder `parent` (`O_TMPFILE`).
    pub fn open_tmpfile(&self, parent: &[u8], flags: i32, mode: u32) -> io::Result<File> {
        let dir = self.dir(parent)?;
        let _exact = exact_modes();
        // O_TMPFILE needs write access; the caller's flags carry it.
        let flags = (flags & !libc::O_TRUNC) | libc::O_TMPFILE;
        let fd = openat2_beneath(dir.fd(), b".", flags, mode)?;
        Ok(File::from(fd))
    }

    /// Give the open, unnamed file `file` the name `name` in `new_parent`, the way an
    /// unprivileged process links an `O_TMPFILE` (through `/proc/self/fd`).
    pub fn link_fd(&self, file: &File, new_parent: &[u8], name: &OsStr) -> io::Result<()> {
        let to = self.dir(new_parent)?;
        let from = format!("/proc/self/fd/{}", file.as_raw_fd());
        rustix::fs::linkat(
            rustix::fs::CWD,
            from.as_str(),
            to.fd(),
            name,
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        )?;
        Ok(())
    }

    /// Open a directory for reading its entries (or fsyncing it).
    pub fn open_dir(&self, path: &[u8]) -> io::Result<File> {
        let fd = open_dir_path(self.root.as_fd(), path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(File::from(fd))
    }

    pub fn mkdir(&self, parent: &[u8], name: &OsStr, mode: u32) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let _exact = exact_modes();
        rustix::fs::mkdirat(dir.fd(), name, rustix::fs::Mode::from_bits_truncate(mode))?;
        Ok(())
    }

    pub fn mknod(&self, parent: &[u8], name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let _exact = exact_modes();
        rustix::fs::mknodat(
            dir.fd(),
            name,
            rustix::fs::FileType::from_raw_mode(mode),
            rustix::fs::Mode::from_raw_mode(mode),
            rdev,
        )?;
        Ok(())
    }

    pub fn symlink(&self, parent: &[u8], name: &OsStr, target: &[u8]) -> io::Result<()> {
        let dir = self.dir(parent)?;
        rustix::fs::symlinkat(OsStr::from_bytes(target), dir.fd(), name)?;
        Ok(())
    }

    pub fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>> {
        let (parent, name) =
            split(path).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let dir = self.dir(parent)?;
        Ok(rustix::fs::readlinkat(dir.fd(), name, Vec::new())?.into_bytes())
    }

    pub fn unlink(&self, parent: &[u8], name: &OsStr, dir_flag: bool) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let flags = if dir_flag {
            rustix::fs::AtFlags::REMOVEDIR
        } else {
            rustix::fs::AtFlags::empty()
        };
        let result = rustix::fs::unlinkat(dir.fd(), name, flags);
        if dir_flag {
            self.forget_dirs();
        }
        Ok(result?)
    }

    pub fn rename(
        &self,
        parent: &[u8],
        name: &OsStr,
        new_parent: &[u8],
        new_name: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        let from = self.dir(parent)?;
        let to = self.dir(new_parent)?;
        let result = rustix::fs::renameat_with(
            from.fd(),
            name,
            to.fd(),
            new_name,
            rustix::fs::RenameFlags::from_bits_retain(flags),
        );
        // A cached folder path may now lead elsewhere (renames are rare enough to forget all).
        self.forget_dirs();
        Ok(result?)
    }

    pub fn link(&self, path: &[u8], new_parent: &[u8], new_name: &OsStr) -> io::Result<()> {
        let (parent, name) =
            split(path).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let from = self.dir(parent)?;
        let to = self.dir(new_parent)?;
        rustix::fs::linkat(
            from.fd(),
            name,
            to.fd(),
            new_name,
            rustix::fs::AtFlags::empty(),
        )?;
        Ok(())
    }

    pub fn chmod(&self, path: &[u8], mode: u32) -> io::Result<()> {
        // Linux cannot change a symlink's mode; callers do not ask for it.
        self.at(path, |dir, name| {
            let mode = rustix::fs::Mode::from_bits_retain(mode);
            Ok(rustix::fs::chmodat(
                dir.fd(),
                name,
                mode,
                rustix::fs::AtFlags::empty(),
            )?)
        })
    }

    pub fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.at(path, |dir, name| {
            Ok(rustix::fs::chownat(
                dir.fd(),
                name,
                uid.map(rustix::fs::Uid::from_raw),
                gid.map(rustix::fs::Gid::from_raw),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )?)
        })
    }

    pub fn utimens(&self, path: &[u8], times: &[libc::timespec; 2]) -> io::Result<()> {
        self.at(path, |dir, name| {
            Ok(rustix::fs::utimensat(
                dir.fd(),
                name,
                &timestamps(times),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )?)
        })
    }

    /// A path through `/proc/self/fd` naming `path` without following a final symlink, for the
    /// `l*xattr` calls, which have no `*at` form.
    fn proc_path<T>(
        &self,
        path: &[u8],
        f: impl FnOnce(&CString) -> io::Result<T>,
    ) -> io::Result<T> {
        self.at(path, |dir, name| {
            let mut p = format!("/proc/self/fd/{}/", dir.raw()).into_bytes();
            p.extend_from_slice(name.as_bytes());
            f(&cstr(&p)?)
        })
    }

    /// `size == 0` asks only for the size the value (or name list) would take.
    pub fn getxattr(&self, at: XattrAt, name: &OsStr, size: usize) -> io::Result<Xattr> {
        if size == 0 {
            return Xattr::size(match at {
                XattrAt::Path(path) => {
                    self.proc_path(path, |p| Ok(rustix::fs::lgetxattr_query(p, name)?))?
                }
                XattrAt::File(f) => rustix::fs::fgetxattr_query(f, name)?,
            });
        }
        let mut buf = vec![0u8; size];
        let n = match at {
            XattrAt::Path(path) => {
                self.proc_path(path, |p| Ok(rustix::fs::lgetxattr(p, name, &mut buf[..])?))?
            }
            XattrAt::File(f) => rustix::fs::fgetxattr(f, name, &mut buf[..])?,
        };
        buf.truncate(n);
        Ok(Xattr::Data(buf))
    }

    pub fn listxattr(&self, at: XattrAt, size: usize) -> io::Result<Xattr> {
        if size == 0 {
            return Xattr::size(match at {
                XattrAt::Path(path) => {
                    self.proc_path(path, |p| Ok(rustix::fs::llistxattr_query(p)?))?
                }
                XattrAt::File(f) => rustix::fs::flistxattr_query(f)?,
            });
        }
        let mut buf = vec![0u8; size];
        let n = match at {
            XattrAt::Path(path) => {
                self.proc_path(path, |p| Ok(rustix::fs::llistxattr(p, &mut buf[..])?))?
            }
            XattrAt::File(f) => rustix::fs::flistxattr(f, &mut buf[..])?,
        };
        buf.truncate(n);
        Ok(Xattr::Data(buf))
    }

    pub fn setxattr(&self, at: XattrAt, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
        match at {
            XattrAt::Path(path) => {
                self.proc_path(path, |p| Ok(rustix::fs::lsetxattr(p, name, value, flags)?))
            }
            XattrAt::File(f) => Ok(rustix::fs::fsetxattr(f, name, value, flags)?),
        }
    }

    pub fn removexattr(&self, at: XattrAt, name: &OsStr) -> io::Result<()> {
        match at {
            XattrAt::Path(path) => self.proc_path(path, |p| Ok(rustix::fs::lremovexattr(p, name)?)),
            XattrAt::File(f) => Ok(rustix::fs::fremovexattr(f, name)?),
        }
    }

    pub fn statfs(&self) -> io::Result<rustix::fs::StatVfs> {
        Ok(rustix::fs::fstatvfs(&self.root)?)
    }
}

// ---- open files ---------------------------------------------------------------------------

pub fn set_fd_mode(file: &File, mode: u32) -> io::Result<()> {
    rustix::fs::fchmod(file, rustix::fs::Mode::from_bits_truncate(mode & 0o7777))?;
    Ok(())
}

pub fn set_fd_owner(file: &File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    Ok(rustix::fs::fchown(
        file,
        uid.map(rustix::fs::Uid::from_raw),
        gid.map(rustix::fs::Gid::from_raw),
    )?)
}

pub fn futimens(file: &File, times: &[libc::timespec; 2]) -> io::Result<()> {
    Ok(rustix::fs::futimens(file, &timestamps(times))?)
}

/// Access and modification times as FUSE's setattr gives them (`UTIME_NOW` and `UTIME_OMIT`
/// included: rustix's are the kernel's same values).
fn timestamps([atime, mtime]: &[libc::timespec; 2]) -> rustix::fs::Timestamps {
    let ts = |t: &libc::timespec| rustix::fs::Timespec {
        tv_sec: t.tv_sec,
        tv_nsec: t.tv_nsec,
    };
    rustix::fs::Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    }
}

pub fn fallocate(file: &File, mode: i32, offset: u64, length: u64) -> io::Result<()> {
    // The kernel checks mode, offset and length.
    let mode = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
    Ok(rustix::fs::fallocate(file, mode, offset, length)?)
}

pub fn copy_file_range(
    src: &File,
    off_in: u64,
    dst: &File,
    off_out: u64,
    len: u64,
) -> io::Result<u64> {
    let mut off_in = off_in;
    let mut off_out = off_out;
    let n = rustix::fs::copy_file_range(
        src,
        Some(&mut off_in),
        dst,
        Some(&mut off_out),
        len.min(u32::MAX as u64 & !0xfff) as usize,
    )?;
    Ok(n as u64)
}

/// Open again, with `flags`, the file `held` is open on, through `/proc/self/fd`: it names
/// the file whatever its names are now (none, for a file unlinked while open).
pub fn reopen(held: &impl AsFd, flags: OFlags) -> io::Result<File> {
    let fd = rustix::fs::open(
        format!("/proc/self/fd/{}", held.as_fd().as_raw_fd()).as_str(),
        flags | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// The offset and length alignment the file's filesystem requires of `O_DIRECT` I/O (0 when
/// it does not say).
pub fn direct_io_alignment(file: &File) -> u32 {
    rustix::fs::statx(
        file,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    )
    .map(|st| st.stx_dio_offset_align)
    .unwrap_or(0)
}

/// `SEEK_DATA` / `SEEK_HOLE` (the only whences the kernel asks the daemon about).
pub fn lseek(file: &File, offset: i64, whence: i32) -> io::Result<i64> {
    use rustix::fs::SeekFrom;
    let from = match (whence, u64::try_from(offset)) {
        (libc::SEEK_DATA | libc::SEEK_HOLE, Err(_)) => {
            return Err(io::Error::from_raw_os_error(libc::ENXIO));
        }
        (libc::SEEK_DATA, Ok(o)) => SeekFrom::Data(o),
        (libc::SEEK_HOLE, Ok(o)) => SeekFrom::Hole(o),
        (libc::SEEK_SET, Ok(o)) => SeekFrom::Start(o),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let at = rustix::fs::seek(file, from)?;
    i64::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

/// An xattr value or name list, or only its size when the caller asked with size 0.
pub enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

/// What an xattr call is about: a path in the workspace (never through a symlink), or a file
/// open in the daemon (one with no name left, unlinked or replaced while open).
#[derive(Clone, Copy)]
pub enum XattrAt<'a> {
    Path(&'a [u8]),
    File(&'a File),
}

impl Xattr {
    fn size(n: usize) -> io::Result<Xattr> {
        // The kernel keeps a value or name list under 64 KiB.
        u32::try_from(n)
            .map(Xattr::Size)
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))
    }
}

/// Split a workspace-relative path into its parent and last name; `None` for the root.
pub fn split(path: &[u8]) -> Option<(&[u8], &OsStr)> {
    if path.is_empty() {
        return None;
    }
    Some(match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], OsStr::from_bytes(&path[i + 1..])),
        None => (&b""[..], OsStr::from_bytes(path)),
    })
}

/// Join a parent path and a name.
pub fn join(parent: &[u8], name: &OsStr) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    p.extend_from_slice(parent);
    if !parent.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name.as_bytes());
    p
}

/// Read the entries of an open directory (without `.` and `..`): name, inode, type (from
/// `getdents64`, as the directory reports it; `Unknown` where it does not say).
pub fn read_dir_entries(dir: &File) -> io::Result<Vec<(Vec<u8>, u64, rustix::fs::FileType)>> {
    let mut out = Vec::new();
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 64 * 1024];
    let mut entries = rustix::fs::RawDir::new(dir, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push((name.to_vec(), entry.ino(), entry.file_type()));
        }
    }
    Ok(out)
}

impl crate::history::Source for Backing {
    /// Only a regular file is opened: what is at the path is looked at first (`O_PATH`, which
    /// opens nothing), and the same file opened for reading through it. Read as content, a
    /// FIFO would block the open and a device (`/dev/zero`) would never end: a path the
    /// history knows as a file can be one by the time it is read.
    fn open_read(&self, path: &[u8]) -> io::Result<File> {
        let at = self.open_file(path, libc::O_PATH, 0)?;
        if stat_fd(at.as_fd())?.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::other("not a regular file now"));
        }
        reopen(&at, OFlags::RDONLY | OFlags::NOCTTY)
    }

    fn read_dir(&self, path: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let dir = self.open_dir(path)?;
        Ok(read_dir_entries(&dir)?
            .into_iter()
            .map(|(name, _, _)| name)
            .collect())
    }

    fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>> {
        Backing::readlink(self, path)
    }

    fn lstat(&self, path: &[u8]) -> io::Result<libc::stat> {
        self.stat(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Content is read only from regular files: a FIFO would block the open for good, a
    /// device such as `/dev/zero` never end. Both are refused at once.
    #[test]
    fn only_regular_files_are_opened_to_be_read() {
        use crate::history::Source;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"content").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_bits_truncate(0o600),
            0,
        )
        .unwrap();
        let b = Backing::open(dir.path()).unwrap();
        let mut content = String::new();
        io::Read::read_to_string(&mut b.open_read(b"file").unwrap(), &mut content).unwrap();
        assert_eq!(content, "content");
        if rustix::process::geteuid().is_root() {
            // `/dev/zero`'s numbers.
            rustix::fs::mknodat(
                rustix::fs::CWD,
                dir.path().join("zero").as_path(),
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_bits_truncate(0o600),
                rustix::fs::makedev(1, 5),
            )
            .unwrap();
            assert!(b.open_read(b"zero").is_err());
        }
        assert!(b.open_read(b"fifo").is_err());
    }

    #[test]
    fn split_and_join_are_inverse() {
        assert_eq!(split(b""), None);
        assert_eq!(split(b"a"), Some((&b""[..], OsStr::new("a"))));
        assert_eq!(split(b"a/b/c"), Some((&b"a/b"[..], OsStr::new("c"))));
        for p in [&b"a"[..], b"a/b", b"x/y/z \xff"] {
            let (parent, name) = split(p).unwrap();
            assert_eq!(join(parent, name), p);
        }
    }

    #[test]
    fn nothing_resolves_outside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("inner")).unwrap();
        std::fs::write(dir.path().join("inner/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("inner/out")).unwrap();
        let b = Backing::open(&dir.path().join("inner")).unwrap();
        assert!(b.open_file(b"f", libc::O_RDONLY, 0).is_ok());
        for bad in [&b"../inner/f"[..], b"/etc/passwd", b"out/passwd", b"out"] {
            assert!(b.open_file(bad, libc::O_RDONLY, 0).is_err(), "{bad:?}");
        }
        assert!(b.stat(b"out").is_ok(), "a symlink itself can be looked at");
        assert_eq!(b.readlink(b"out").unwrap(), b"/etc");
        let e = b.stat(b"out/passwd").unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ELOOP),
            "a symlinked folder is not followed"
        );
    }

    #[test]
    fn paths_longer_than_the_kernel_takes_at_once_work() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backing::open(dir.path()).unwrap();
        let name = "d".repeat(200);
        let mut path: Vec<u8> = Vec::new();
        for _ in 0..30 {
            let (parent, leaf) = (path.clone(), OsStr::new(&name));
            b.mkdir(&parent, leaf, 0o755).unwrap();
            path = join(&parent, leaf);
        }
        assert!(path.len() > 6000);
        let f = b
            .open_file(
                &join(&path, OsStr::new("f")),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        drop(f);
        assert!(b.stat(&join(&path, OsStr::new("f"))).is_ok());
    }
}
