//! Every syscall on the directory underneath the mount, relative to one directory fd opened
//! before mounting over it.
//!
//! Paths here are workspace-relative byte strings. Multi-component paths are resolved with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no path can leave the workspace, and the
//! last component is always acted on with `*at(..., AT_SYMLINK_NOFOLLOW)` or `O_NOFOLLOW`: a symlink
//! in the workspace is an object to report, never a way out.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The workspace directory as it was before the mount covered it.
pub struct Backing {
    root: OwnedFd,
    /// Directory fds by path, so an operation does not open and close its parent each time.
    /// Opened with the same `openat2` rules; emptied whenever a folder is renamed or removed
    /// (then a path may name another folder, or none).
    dirs: std::sync::Mutex<std::collections::HashMap<Vec<u8>, std::sync::Arc<OwnedFd>>>,
}

/// How many folders to keep open.
const DIR_CACHE: usize = 512;

/// A directory to act in: the root itself, or one opened for the call.
enum Dir<'a> {
    Root(BorrowedFd<'a>),
    Cached(std::sync::Arc<OwnedFd>),
}

impl Dir<'_> {
    fn raw(&self) -> RawFd {
        match self {
            Dir::Root(fd) => fd.as_raw_fd(),
            Dir::Cached(fd) => fd.as_raw_fd(),
        }
    }
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `openat2` confined to beneath `dirfd`, following no symlink at any component.
fn openat2_beneath(
    dirfd: RawFd,
    path: &[u8],
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let path = cstr(if path.is_empty() { b"." } else { path })?;
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
        how.mode = mode as u64;
    }
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    loop {
        // SAFETY: `how` and `path` outlive the call; the kernel copies them.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd to us and nobody else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let err = io::Error::last_os_error();
        // openat2 may ask us to retry when a rename raced the lookup.
        if err.raw_os_error() != Some(libc::EAGAIN) {
            return Err(err);
        }
    }
}

pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full stat into `st` on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    Ok(unsafe { st.assume_init() })
}

impl Backing {
    /// Open `dir` (which must be a directory) to serve it later, even once a mount covers it.
    pub fn open(dir: &Path) -> io::Result<Backing> {
        let path = cstr(dir.as_os_str().as_bytes())?;
        // SAFETY: plain open(2) of a NUL-terminated path.
        let fd = check(unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        Ok(Backing {
            // SAFETY: a fresh fd that we own.
            root: unsafe { OwnedFd::from_raw_fd(fd) },
            dirs: std::sync::Mutex::new(std::collections::HashMap::new()),
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
        let fd = std::sync::Arc::new(openat2_beneath(
            self.root.as_raw_fd(),
            path,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
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

    /// `lstat` of `name` in directory `parent`.
    pub fn stat_at(&self, parent: &[u8], name: &OsStr) -> io::Result<libc::stat> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstatat writes a full stat on success.
        check(unsafe {
            libc::fstatat(
                dir.raw(),
                name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(unsafe { st.assume_init() })
    }

    /// `lstat` of a whole path (the root for an empty one).
    pub fn stat(&self, path: &[u8]) -> io::Result<libc::stat> {
        match split(path) {
            None => stat_fd(self.root.as_fd()),
            Some((parent, name)) => self.stat_at(parent, name),
        }
    }

    /// Open a file (never a symlink) with `flags`; `mode` applies with `O_CREAT`.
    pub fn open_file(&self, path: &[u8], flags: libc::c_int, mode: u32) -> io::Result<File> {
        let fd = openat2_beneath(self.root.as_raw_fd(), path, flags | libc::O_NOFOLLOW, mode)?;
        Ok(File::from(fd))
    }

    /// Open a directory for reading its entries.
    pub fn open_dir(&self, path: &[u8]) -> io::Result<File> {
        let fd = openat2_beneath(
            self.root.as_raw_fd(),
            path,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        Ok(File::from(fd))
    }

    pub fn mkdir(&self, parent: &[u8], name: &OsStr, mode: u32) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        check(unsafe { libc::mkdirat(dir.raw(), name.as_ptr(), mode) }).map(drop)
    }

    pub fn mknod(&self, parent: &[u8], name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        check(unsafe { libc::mknodat(dir.raw(), name.as_ptr(), mode, rdev) }).map(drop)
    }

    pub fn symlink(&self, parent: &[u8], name: &OsStr, target: &[u8]) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        let target = cstr(target)?;
        check(unsafe { libc::symlinkat(target.as_ptr(), dir.raw(), name.as_ptr()) }).map(drop)
    }

    pub fn readlink(&self, path: &[u8]) -> io::Result<Vec<u8>> {
        let (parent, name) =
            split(path).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: readlinkat writes at most buf.len() bytes.
        let n = unsafe {
            libc::readlinkat(dir.raw(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    pub fn unlink(&self, parent: &[u8], name: &OsStr, dir_flag: bool) -> io::Result<()> {
        let dir = self.dir(parent)?;
        let name = cstr(name.as_bytes())?;
        let flags = if dir_flag { libc::AT_REMOVEDIR } else { 0 };
        let result = check(unsafe { libc::unlinkat(dir.raw(), name.as_ptr(), flags) }).map(drop);
        if dir_flag {
            self.forget_dirs();
        }
        result
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
        let name = cstr(name.as_bytes())?;
        let new_name = cstr(new_name.as_bytes())?;
        let result = check(unsafe {
            libc::renameat2(
                from.raw(),
                name.as_ptr(),
                to.raw(),
                new_name.as_ptr(),
                flags,
            )
        })
        .map(drop);
        // A cached folder path may now lead elsewhere (renames are rare enough to forget all).
        self.forget_dirs();
        result
    }

    pub fn link(&self, path: &[u8], new_parent: &[u8], new_name: &OsStr) -> io::Result<()> {
        let (parent, name) =
            split(path).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let from = self.dir(parent)?;
        let to = self.dir(new_parent)?;
        let name = cstr(name.as_bytes())?;
        let new_name = cstr(new_name.as_bytes())?;
        check(unsafe { libc::linkat(from.raw(), name.as_ptr(), to.raw(), new_name.as_ptr(), 0) })
            .map(drop)
    }

    /// Run `f` on `path`'s parent directory fd and last name (`"."` on the root itself).
    fn at<T>(
        &self,
        path: &[u8],
        f: impl FnOnce(RawFd, &CString) -> io::Result<T>,
    ) -> io::Result<T> {
        match split(path) {
            None => f(self.root.as_raw_fd(), &cstr(b".")?),
            Some((parent, name)) => {
                let dir = self.dir(parent)?;
                f(dir.raw(), &cstr(name.as_bytes())?)
            }
        }
    }

    pub fn chmod(&self, path: &[u8], mode: u32) -> io::Result<()> {
        // Linux cannot change a symlink's mode; callers do not ask for it.
        self.at(path, |dir, name| {
            check(unsafe { libc::fchmodat(dir, name.as_ptr(), mode, 0) }).map(drop)
        })
    }

    pub fn chown(&self, path: &[u8], uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.at(path, |dir, name| {
            check(unsafe {
                libc::fchownat(
                    dir,
                    name.as_ptr(),
                    uid.unwrap_or(u32::MAX),
                    gid.unwrap_or(u32::MAX),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
            .map(drop)
        })
    }

    pub fn utimens(&self, path: &[u8], times: &[libc::timespec; 2]) -> io::Result<()> {
        self.at(path, |dir, name| {
            check(unsafe {
                libc::utimensat(
                    dir,
                    name.as_ptr(),
                    times.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
            .map(drop)
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
            let mut p = format!("/proc/self/fd/{dir}/").into_bytes();
            p.extend_from_slice(name.as_bytes());
            f(&cstr(&p)?)
        })
    }

    /// `size == 0` asks only for the size the value (or name list) would take.
    pub fn getxattr(&self, path: &[u8], name: &OsStr, size: usize) -> io::Result<Xattr> {
        let name = cstr(name.as_bytes())?;
        self.proc_path(path, |p| {
            let mut buf = vec![0u8; size];
            // SAFETY: lgetxattr writes at most `size` bytes into buf.
            let n = unsafe {
                libc::lgetxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), size)
            };
            Xattr::from_ret(n, buf, size)
        })
    }

    pub fn listxattr(&self, path: &[u8], size: usize) -> io::Result<Xattr> {
        self.proc_path(path, |p| {
            let mut buf = vec![0u8; size];
            // SAFETY: llistxattr writes at most `size` bytes into buf.
            let n = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), size) };
            Xattr::from_ret(n, buf, size)
        })
    }

    pub fn setxattr(&self, path: &[u8], name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        let name = cstr(name.as_bytes())?;
        self.proc_path(path, |p| {
            check(unsafe {
                libc::lsetxattr(
                    p.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                )
            })
            .map(drop)
        })
    }

    pub fn removexattr(&self, path: &[u8], name: &OsStr) -> io::Result<()> {
        let name = cstr(name.as_bytes())?;
        self.proc_path(path, |p| {
            check(unsafe { libc::lremovexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
        })
    }

    pub fn statfs(&self) -> io::Result<libc::statvfs> {
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        check(unsafe { libc::fstatvfs(self.root.as_raw_fd(), st.as_mut_ptr()) })?;
        Ok(unsafe { st.assume_init() })
    }
}

/// An xattr value or name list, or only its size when the caller asked with size 0.
pub enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

impl Xattr {
    fn from_ret(n: isize, mut buf: Vec<u8>, size: usize) -> io::Result<Xattr> {
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if size == 0 {
            return Ok(Xattr::Size(n as u32));
        }
        buf.truncate(n as usize);
        Ok(Xattr::Data(buf))
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

/// Read the entries of an open directory (without `.` and `..`): name, inode, `d_type`.
pub fn read_dir_entries(dir: &File) -> io::Result<Vec<(Vec<u8>, u64, u8)>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes of dirents into buf.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(out);
        }
        let mut off = 0usize;
        while off < n as usize {
            // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name NUL-terminated.
            let ino = u64::from_ne_bytes(buf[off..off + 8].try_into().expect("8 bytes"));
            let reclen = u16::from_ne_bytes(buf[off + 16..off + 18].try_into().expect("2 bytes"));
            let d_type = buf[off + 18];
            let name_start = off + 19;
            let name_end = buf[name_start..off + reclen as usize]
                .iter()
                .position(|&b| b == 0)
                .map_or(off + reclen as usize, |p| name_start + p);
            let name = &buf[name_start..name_end];
            if name != b"." && name != b".." {
                out.push((name.to_vec(), ino, d_type));
            }
            off += reclen as usize;
        }
    }
}

impl crate::history::Source for Backing {
    fn open_read(&self, path: &[u8]) -> io::Result<File> {
        self.open_file(path, libc::O_RDONLY, 0)
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
    }
}
