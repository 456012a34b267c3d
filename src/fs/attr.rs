//! Converting between the backing directory's `stat` and FUSE's attributes, times and types.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};

use super::inode::BackingKey;

pub fn file_type(mode: u32) -> FileType {
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

/// A directory entry's type for FUSE (a type the directory does not report is read as a
/// regular file: readdir's type is a hint, and lookup gives the real one).
pub fn dirent_type(d_type: rustix::fs::FileType) -> FileType {
    use rustix::fs::FileType as T;
    match d_type {
        T::Directory => FileType::Directory,
        T::Symlink => FileType::Symlink,
        T::Fifo => FileType::NamedPipe,
        T::Socket => FileType::Socket,
        T::CharacterDevice => FileType::CharDevice,
        T::BlockDevice => FileType::BlockDevice,
        T::RegularFile | T::Unknown => FileType::RegularFile,
    }
}

pub fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

pub fn from_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

pub fn attr(ino: u64, st: &libc::stat) -> FileAttr {
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

/// A negative entry: inode 0 tells the kernel that the name does not exist.
pub fn none() -> FileAttr {
    // SAFETY: an all-zero stat is a valid value.
    attr(0, &unsafe { std::mem::zeroed() })
}

pub fn key(st: &libc::stat) -> BackingKey {
    (st.st_dev, st.st_ino)
}

pub fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
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

/// Whether writing or truncating a file with mode `mode` by a process without CAP_FSETID
/// clears set-ID bits, and the mode it leaves: set-user-ID always goes, set-group-ID only
/// when the group may execute (otherwise it marks mandatory locking and stays), as the disk
/// does.
pub fn killed_suid(mode: u32) -> Option<u32> {
    let mut kill = 0;
    if mode & libc::S_ISUID != 0 {
        kill |= libc::S_ISUID;
    }
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        kill |= libc::S_ISGID;
    }
    (kill != 0).then_some(mode & 0o7777 & !kill)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_id_bits_go_as_on_disk() {
        assert_eq!(killed_suid(0o4755), Some(0o755));
        assert_eq!(killed_suid(0o2755), Some(0o755));
        assert_eq!(
            killed_suid(0o2745),
            None,
            "set-group-ID without group execute stays"
        );
        assert_eq!(killed_suid(0o6775), Some(0o775));
        assert_eq!(killed_suid(0o755), None);
    }
}
