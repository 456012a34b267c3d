//! Directories: listing (entries read once at `opendir`, so offsets stay stable), and
//! `fsyncdir`, which makes a rename or create in the folder durable.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;

use fuser::{Errno, FileHandle, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::attr::{attr, dirent_type, key};
use super::backing::{self, read_dir_entries};
use super::inode::ROOT;
use super::{Core, Result, TTL};

/// An open directory.
pub(super) struct OpenDir {
    path: Vec<u8>,
    /// The FUSE inode of the parent, for `..`.
    parent: u64,
    /// Name, backing inode number (a hint for plain `readdir`), type.
    entries: Vec<(Vec<u8>, u64, FileType)>,
    /// The folder underneath, for fsyncdir.
    dir: File,
}

impl Core {
    /// `hide`: leave a real `.rewind` in the workspace root out (the control directory
    /// stands in its place).
    pub(super) fn opendir(&self, ino: INodeNo, hide: bool) -> Result<u64> {
        let _names = self.names_shared();
        let (path, parent) = {
            let inodes = self.inodes();
            (
                inodes.path(ino.0).ok_or(Errno::ENOENT)?,
                inodes.parent(ino.0),
            )
        };
        let dir = self.backing.open_dir(&path)?;
        let mut entries = vec![
            (b".".to_vec(), ino.0, FileType::Directory),
            (b"..".to_vec(), parent, FileType::Directory),
        ];
        let hide = hide && ino.0 == ROOT;
        entries.extend(
            read_dir_entries(&dir)?
                .into_iter()
                .filter(|(name, _, _)| !(hide && name == super::control::NAME))
                .map(|(name, d_ino, d_type)| (name, d_ino, dirent_type(d_type))),
        );
        Ok(self.dirs.insert(OpenDir {
            path,
            parent,
            entries,
            dir,
        }))
    }

    pub(super) fn readdir(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
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

    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(dir) = self.dirs.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
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
                let entry = attr(target, &st);
                if reply.add(
                    INodeNo(target),
                    next,
                    OsStr::from_bytes(name),
                    &TTL,
                    &entry,
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
            let child = self.enter(ino, name.as_bytes(), key(&st));
            if reply.add(
                INodeNo(child),
                next,
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

    pub(super) fn releasedir(&self, fh: FileHandle) {
        self.dirs.remove(fh.0);
    }

    pub(super) fn fsyncdir(&self, fh: FileHandle, datasync: bool) -> Result<()> {
        let dir = self.dirs.get(fh.0).ok_or(Errno::EBADF)?;
        if datasync {
            dir.dir.sync_data()?;
        } else {
            dir.dir.sync_all()?;
        }
        // What was recorded of the folder's changes is made durable with them.
        match &self.recorder {
            Some(rec) => rec.sync().map_err(super::record_errno),
            None => Ok(()),
        }
    }
}
