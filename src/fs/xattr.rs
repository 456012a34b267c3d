//! Extended attributes: passed through unrecorded, with one shortcut. The kernel asks for
//! `security.capability` before the first write after every open, chown or chmod of an inode
//! (once per inode with HANDLE_KILLPRIV_V2, until its attributes change; `tar` chowns and
//! chmods every file). `no_caps` answers for inodes created by the mount or answered ENODATA
//! once; setxattr/removexattr of the name and forget clear it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fuser::{Errno, INodeNo};

use super::backing::Xattr;
use super::{Core, Result, lock};

/// The extended attribute holding file capabilities.
const CAPS_XATTR: &[u8] = b"security.capability";

impl Core {
    pub(super) fn note_no_caps(&self, ino: u64) {
        let mut known = lock(&self.no_caps);
        if known.len() >= 1 << 20 {
            known.clear();
        }
        known.insert(ino);
    }

    pub(super) fn forget_no_caps(&self, ino: u64) {
        lock(&self.no_caps).remove(&ino);
    }

    pub(super) fn setxattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        if name.as_bytes() == CAPS_XATTR {
            self.forget_no_caps(ino.0);
        }
        let _names = self.names_shared();
        let path = self.named_path(ino)?;
        self.backing
            .setxattr(&path, name, value, flags)
            .map_err(Errno::from)
    }

    pub(super) fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> Result<Xattr> {
        let caps = name.as_bytes() == CAPS_XATTR;
        if caps && lock(&self.no_caps).contains(&ino.0) {
            return Err(Errno::NO_XATTR);
        }
        let _names = self.names_shared();
        let path = self.named_path(ino)?;
        let result = self
            .backing
            .getxattr(&path, name, size as usize)
            .map_err(Errno::from);
        if caps && matches!(result, Err(Errno::NO_XATTR)) {
            self.note_no_caps(ino.0);
        }
        result
    }

    pub(super) fn listxattr(&self, ino: INodeNo, size: u32) -> Result<Xattr> {
        let _names = self.names_shared();
        let path = self.named_path(ino)?;
        self.backing
            .listxattr(&path, size as usize)
            .map_err(Errno::from)
    }

    pub(super) fn removexattr(&self, ino: INodeNo, name: &OsStr) -> Result<()> {
        if name.as_bytes() == CAPS_XATTR {
            self.forget_no_caps(ino.0);
        }
        let _names = self.names_shared();
        let path = self.named_path(ino)?;
        self.backing.removexattr(&path, name).map_err(Errno::from)
    }
}
