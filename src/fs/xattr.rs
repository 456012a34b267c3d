//! Extended attributes: passed through unrecorded, with one shortcut. The kernel asks for
//! `security.capability` before the first write after every open, chown or chmod of an inode
//! (once per inode with HANDLE_KILLPRIV_V2, until its attributes change; `tar` chowns and
//! chmods every file). `no_caps` answers for inodes created by the mount or answered ENODATA
//! once; setxattr/removexattr of the name and forget clear it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use std::sync::Arc;

use fuser::{Errno, INodeNo};

use super::backing::{Xattr, XattrAt};
use super::file::OpenFile;
use super::{Core, Result, lock};

/// The file an xattr call is about: its path, or, with no name left, a handle open on it.
enum Target {
    Path(Vec<u8>),
    Open(Arc<OpenFile>),
}

impl Target {
    fn at(&self) -> XattrAt<'_> {
        match self {
            Target::Path(path) => XattrAt::Path(path),
            Target::Open(open) => XattrAt::File(&open.file),
        }
    }
}

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

    /// What a call about `ino` reaches: its path; with no name left, a handle open on the
    /// file, as on disk (`fsetxattr`, or a call through `/proc/PID/fd/N`, of a file unlinked
    /// or saved over while open, which the kernel sends without the handle), as `setattr`
    /// does; else `ESTALE` (`Core::named_path`).
    fn xattr_target(&self, ino: INodeNo) -> Result<Target> {
        match self.named_path(ino) {
            Ok(path) => Ok(Target::Path(path)),
            Err(e) => match self.files.find(|f| f.ino == ino.0) {
                Some(open) => Ok(Target::Open(open)),
                None => Err(e),
            },
        }
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
        let target = self.xattr_target(ino)?;
        self.backing
            .setxattr(target.at(), name, value, flags)
            .map_err(Errno::from)
    }

    pub(super) fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> Result<Xattr> {
        let caps = name.as_bytes() == CAPS_XATTR;
        if caps && lock(&self.no_caps).contains(&ino.0) {
            return Err(Errno::NO_XATTR);
        }
        let _names = self.names_shared();
        let target = self.xattr_target(ino)?;
        let result = self
            .backing
            .getxattr(target.at(), name, size as usize)
            .map_err(Errno::from);
        if caps && matches!(result, Err(Errno::NO_XATTR)) {
            self.note_no_caps(ino.0);
        }
        result
    }

    pub(super) fn listxattr(&self, ino: INodeNo, size: u32) -> Result<Xattr> {
        let _names = self.names_shared();
        let target = self.xattr_target(ino)?;
        self.backing
            .listxattr(target.at(), size as usize)
            .map_err(Errno::from)
    }

    pub(super) fn removexattr(&self, ino: INodeNo, name: &OsStr) -> Result<()> {
        if name.as_bytes() == CAPS_XATTR {
            self.forget_no_caps(ino.0);
        }
        let _names = self.names_shared();
        let target = self.xattr_target(ino)?;
        self.backing
            .removexattr(target.at(), name)
            .map_err(Errno::from)
    }
}
