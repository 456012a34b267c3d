//! Names: lookup, mknod, mkdir, symlink, link, unlink, rmdir, rename — recorded, and kept in
//! step with the inode table.
//!
//! Each operation has a core that works on paths (`*_at`), used both by the FUSE request (which
//! turns inodes into paths first) and by a rollback (which has only paths, and then tells the
//! kernel what changed: see [`super::restore`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fuser::{Errno, FileAttr, FileHandle, INodeNo, RenameFlags};

use super::attr::{attr, key};
use super::backing::{self, join};
use super::{Caller, Core, Names, Result, record_errno};
use crate::history::{ChangeKind, FileKind};

fn check_name(name: &OsStr) -> Result<()> {
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

impl Core {
    /// Look up `name` in `parent` (whose path is `parent_path`), taking one kernel lookup.
    pub(super) fn entry(
        &self,
        parent: INodeNo,
        parent_path: &[u8],
        name: &OsStr,
    ) -> Result<FileAttr> {
        let st = self.backing.stat_at(parent_path, name)?;
        let ino = self.enter(parent, name.as_bytes(), key(&st));
        Ok(attr(ino, &st))
    }

    pub(super) fn lookup(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr> {
        check_name(name)?;
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        self.entry(parent, &parent_path, name)
    }

    pub(super) fn forget(&self, ino: INodeNo, nlookup: u64) {
        // Keep what we know of capabilities to the inodes the kernel holds.
        self.forget_no_caps(ino.0);
        self.inodes().forget(ino.0, nlookup);
    }

    pub(super) fn getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr> {
        if let Some(open) = fh.and_then(|fh| self.files.get(fh.0)) {
            return Ok(attr(
                ino.0,
                &backing::stat_fd(std::os::fd::AsFd::as_fd(&open.file))?,
            ));
        }
        let _names = self.names_shared();
        match self.reachable_path(ino) {
            Ok(path) => Ok(attr(ino.0, &self.backing.stat(&path)?)),
            // No name left (unlinked while open): `fstat` still answers, from an open handle.
            Err(e) => match self.files.find(|f| f.ino == ino.0) {
                Some(open) => Ok(attr(
                    ino.0,
                    &backing::stat_fd(std::os::fd::AsFd::as_fd(&open.file))?,
                )),
                None => Err(super::stale_if_nameless(e)),
            },
        }
    }

    pub(super) fn readlink(&self, ino: INodeNo) -> Result<Vec<u8>> {
        let _names = self.names_shared();
        let path = self.path(ino)?;
        self.backing.readlink(&path).map_err(Errno::from)
    }

    /// Before an operation recorded after it succeeds: refuse it if it could not be recorded.
    fn ready_for(&self, path: &[u8], is_dir: bool) -> Result<()> {
        match &self.recorder {
            Some(rec) => rec.ready_for(path, is_dir).map_err(record_errno),
            None => Ok(()),
        }
    }

    /// Give the object this call just made at `parent`/`name` to its caller and record it. If
    /// either fails, the object is taken back (it is new and empty, so nothing is lost) and the
    /// call fails: nothing stays in the workspace unrecorded. `ready_for` passing before it
    /// was made does not make its record certain: the store may start refusing writes in
    /// between (another record filled its disk).
    fn own_and_record_new(
        &self,
        caller: &Caller,
        kind: ChangeKind,
        parent: &[u8],
        name: &OsStr,
    ) -> Result<()> {
        SLOW_MADE.pause();
        let path = join(parent, name);
        let recorded = self
            .chown_new(caller, &path)
            .and_then(|()| match &self.recorder {
                Some(rec) => rec
                    .after_new(kind, &path, caller.by())
                    .map_err(record_errno),
                None => Ok(()),
            });
        if recorded.is_err() {
            let _ = self.backing.unlink(parent, name, kind == ChangeKind::Mkdir);
        }
        recorded
    }

    /// Give a newly created object to the user who asked for it (we may be root).
    pub(super) fn chown_new(&self, caller: &Caller, path: &[u8]) -> Result<()> {
        if self.euid == 0 && (caller.uid != 0 || caller.gid != 0) {
            self.backing
                .chown(path, Some(caller.uid), Some(caller.gid))?;
        }
        Ok(())
    }

    /// Record the new name `parent`/`name` of the file at `target`, just linked; if it cannot
    /// be recorded, the name is taken back (the file keeps its others) and the call fails.
    fn record_link(
        &self,
        caller: &Caller,
        target: &[u8],
        parent: &[u8],
        name: &OsStr,
    ) -> Result<()> {
        let Some(rec) = &self.recorder else {
            return Ok(());
        };
        SLOW_MADE.pause();
        let recorded = rec
            .after_link(target, &join(parent, name), caller.by())
            .map_err(record_errno);
        if recorded.is_err() {
            let _ = self.backing.unlink(parent, name, false);
        }
        recorded
    }

    // ---- cores, on paths -------------------------------------------------------------------

    pub(crate) fn mkdir_at(
        &self,
        caller: &Caller,
        parent: &[u8],
        name: &OsStr,
        mode: u32,
    ) -> Result<()> {
        check_name(name)?;
        let _making = self.making();
        let path = join(parent, name);
        self.ready_for(&path, true)?;
        self.backing.mkdir(parent, name, mode)?;
        self.own_and_record_new(caller, ChangeKind::Mkdir, parent, name)
    }

    pub(crate) fn mknod_at(
        &self,
        caller: &Caller,
        parent: &[u8],
        name: &OsStr,
        mode: u32,
        rdev: u64,
    ) -> Result<()> {
        check_name(name)?;
        let _making = self.making();
        let path = join(parent, name);
        self.ready_for(&path, false)?;
        self.backing.mknod(parent, name, mode, rdev)?;
        self.own_and_record_new(caller, ChangeKind::Create, parent, name)
    }

    pub(crate) fn symlink_at(
        &self,
        caller: &Caller,
        parent: &[u8],
        name: &OsStr,
        target: &[u8],
    ) -> Result<()> {
        check_name(name)?;
        let _making = self.making();
        let path = join(parent, name);
        self.ready_for(&path, false)?;
        self.backing.symlink(parent, name, target)?;
        self.own_and_record_new(caller, ChangeKind::Symlink, parent, name)
    }

    /// Give what is at `target` (not a folder, and as `link(2)`, a symlink itself) the new
    /// name `name` in `parent` (a rollback linking a file's names again), recorded as a link.
    /// Returns the file as it is now.
    pub(crate) fn link_at(
        &self,
        caller: &Caller,
        target: &[u8],
        parent: &[u8],
        name: &OsStr,
    ) -> Result<libc::stat> {
        check_name(name)?;
        let _making = self.making();
        let path = join(parent, name);
        self.ready_for(&path, false)?;
        let st = self.backing.stat(target)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(Errno::EPERM);
        }
        // As `link`: the file stays locked until its link is recorded.
        let _held = self.recorder.as_ref().map(|rec| rec.hold(&[key(&st)]));
        self.backing.link(target, parent, name)?;
        self.record_link(caller, target, parent, name)?;
        Ok(self.backing.stat(target)?)
    }

    /// Remove `name` from `parent` (a folder with `dir`). Returns what it was. `removed_names`
    /// updates the table of names once it is gone, with the file still held (as
    /// [`rename_at`](Self::rename_at)'s does).
    pub(crate) fn unlink_at(
        &self,
        caller: &Caller,
        parent: &[u8],
        name: &OsStr,
        dir: bool,
        removed_names: &mut dyn FnMut(&libc::stat),
    ) -> Result<libc::stat> {
        let seen = self.restores.seen();
        let st = self.backing.stat_at(parent, name)?;
        let path = join(parent, name);
        let unlink = || self.backing.unlink(parent, name, dir).map_err(Errno::from);
        if dir {
            self.ready_for(&path, true)?;
            let _removing = self.removing();
            self.freeing(key(&st), true, unlink)?;
            removed_names(&st);
            SLOW_RMDIR.pause();
            if let Some(rec) = &self.recorder {
                rec.after_rmdir(&path, &st, caller.by())
                    .map_err(record_errno)?;
            }
        } else {
            SLOW_LOOKED.pause();
            let removing = self.removing();
            let held = self.recorder.as_ref().map(|rec| rec.hold(&[key(&st)]));
            let st = match self.restores.since(seen) {
                // Looked at again, now that it is held (see `Restores`).
                true => match self.backing.stat_at(parent, name)? {
                    now if key(&now) == key(&st) => now,
                    _ => {
                        drop((held, removing));
                        return self.unlink_at(caller, parent, name, dir, removed_names);
                    }
                },
                false => st,
            };
            let _held = (held, removing);
            // The content is stored before the unlink; the delete is written after it, in the
            // background (`rm -rf` does not wait on an index write per file).
            let delete = match &self.recorder {
                Some(rec) => rec
                    .before_unlink(&path, &st, caller.by())
                    .map_err(record_errno)?,
                None => None,
            };
            self.freeing(key(&st), st.st_nlink <= 1, unlink)?;
            removed_names(&st);
            SLOW_UNLINK.pause();
            if let (Some(rec), Some(delete)) = (&self.recorder, delete) {
                rec.defer(delete);
            }
        }
        if let Some(rec) = &self.recorder {
            rec.names_changed(&path, dir);
        }
        Ok(st)
    }

    /// Rename; `false` (nothing done) when it moves a folder and `names` is not held
    /// exclusively (see `Core::names`). `renamed_names` updates the table of names once the
    /// rename is done (given what was at the source and what the target replaced), with its
    /// files still held: an open that waits for one of them finds the table saying where it
    /// went (`Core::begin_and_open`).
    #[allow(clippy::too_many_arguments)]
    fn rename_at(
        &self,
        caller: &Caller,
        parent: &[u8],
        name: &OsStr,
        new_parent: &[u8],
        new_name: &OsStr,
        flags: RenameFlags,
        names: &Names<'_>,
        renamed_names: &mut dyn FnMut(&libc::stat, Option<&libc::stat>),
    ) -> Result<bool> {
        check_name(new_name)?;
        let seen = self.restores.seen();
        let src = self.backing.stat_at(parent, name)?;
        let dst = self.backing.stat_at(new_parent, new_name).ok();
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) && dst.is_none() {
            return Err(Errno::ENOENT);
        }
        let src_path = join(parent, name);
        let dst_path = join(new_parent, new_name);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        // The files stay locked until the rename is done, so their episodes cannot end between
        // the bookkeeping and the rename itself.
        let mut files = vec![key(&src)];
        files.extend(dst.as_ref().map(key));
        let is_dir = |st: &libc::stat| st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        // A rename the disk would refuse is refused before any bookkeeping: taking back a
        // recorded rename does not put back the names the recorder moved on.
        if !exchange
            && let Some(d) = &dst
            && key(d) != key(&src)
        {
            match (is_dir(&src), is_dir(d)) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) => {
                    let target = self.backing.open_dir(&dst_path)?;
                    if !backing::read_dir_entries(&target)?.is_empty() {
                        return Err(Errno::ENOTEMPTY);
                    }
                }
                (false, false) => {}
            }
        }
        let folder = is_dir(&src) || (exchange && dst.as_ref().is_some_and(is_dir));
        if folder && !names.exclusive() {
            return Ok(false);
        }
        // A rename makes its target's name, and may free the file there: a rollback's making
        // of a name waits for it (`Core::removing`, taken before `pause_endings`, as an unlink
        // takes it before anything its recording holds). A rollback that linked a new file at
        // the target after it was looked at again below had it replaced unseen: the rename
        // was recorded as making the name, after the rollback's create of it.
        let removing = self.removing();
        let _endings = match &self.recorder {
            Some(rec) if folder => Some(rec.pause_endings()),
            _ => None,
        };
        SLOW_LOOKED.pause();
        let held = self.recorder.as_ref().map(|rec| rec.hold(&files));
        let (src, dst) = match self.restores.since(seen) {
            // Looked at again, now that they are held (see `Restores`).
            true => {
                let src_now = self.backing.stat_at(parent, name)?;
                let dst_now = self.backing.stat_at(new_parent, new_name).ok();
                if key(&src_now) != key(&src) || dst_now.as_ref().map(key) != dst.as_ref().map(key)
                {
                    drop((held, _endings, removing));
                    return self.rename_at(
                        caller,
                        parent,
                        name,
                        new_parent,
                        new_name,
                        flags,
                        names,
                        renamed_names,
                    );
                }
                (src_now, dst_now)
            }
            false => (src, dst),
        };
        let _held = (held, removing);
        let recorded = match &self.recorder {
            Some(rec) => rec
                .before_rename(
                    &src_path,
                    &src,
                    &dst_path,
                    dst.as_ref(),
                    exchange,
                    caller.by(),
                )
                .map_err(record_errno)?,
            None => Vec::new(),
        };
        // A rename over the last name of another file (or over a folder) frees its number.
        let freed = dst.as_ref().filter(|d| {
            !exchange
                && key(d) != key(&src)
                && (d.st_nlink <= 1 || d.st_mode & libc::S_IFMT == libc::S_IFDIR)
        });
        let rename = || {
            self.backing
                .rename(parent, name, new_parent, new_name, flags.bits())
                .map_err(Errno::from)
        };
        let renamed = match freed {
            Some(d) => self.freeing(key(d), true, rename),
            None => rename(),
        };
        if let Some(rec) = &self.recorder {
            // What decides whether a folder is recorded moved with it.
            rec.names_changed(&src_path, folder);
            rec.names_changed(&dst_path, folder);
        }
        if let Err(e) = renamed {
            if let Some(rec) = &self.recorder {
                rec.retract(&recorded);
            }
            return Err(e);
        }
        renamed_names(&src, dst.as_ref());
        if let Some(rec) = &self.recorder
            && !folder
        {
            rec.renamed_to(&dst_path);
            if exchange {
                rec.renamed_to(&src_path);
            }
        }
        // A folder the history did not have, arriving under a recorded name: what is in it
        // arrives too. The rename is done; if the store refuses these records, the next
        // mount's scan records what they missed.
        let moved_in = recorded.iter().any(|c| {
            c.kind == ChangeKind::Rename
                && c.path == dst_path
                && c.from.is_none()
                && c.after.as_ref().is_some_and(|a| a.kind == FileKind::Dir)
        });
        if moved_in
            && !exchange
            && let Some(rec) = &self.recorder
            && let Err(e) = rec.after_moved_in(&dst_path, caller.by())
        {
            tracing::warn!(
                "{}: what the folder moved in holds is not all recorded: {e}",
                String::from_utf8_lossy(&dst_path)
            );
        }
        Ok(true)
    }

    // ---- FUSE requests ---------------------------------------------------------------------

    pub(super) fn mknod(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<FileAttr> {
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        self.mknod_at(caller, &parent_path, name, mode, rdev.into())?;
        self.entry(parent, &parent_path, name)
    }

    pub(super) fn mkdir(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
    ) -> Result<FileAttr> {
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        self.mkdir_at(caller, &parent_path, name, mode)?;
        self.entry(parent, &parent_path, name)
    }

    pub(super) fn symlink(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        target: &Path,
    ) -> Result<FileAttr> {
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        self.symlink_at(caller, &parent_path, name, target.as_os_str().as_bytes())?;
        self.entry(parent, &parent_path, name)
    }

    pub(super) fn unlink(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        dir: bool,
    ) -> Result<()> {
        let _names = self.names_shared();
        let parent_path = self.path(parent)?;
        self.unlink_at(caller, &parent_path, name, dir, &mut |st| {
            let mut inodes = self.inodes();
            if dir || st.st_nlink <= 1 {
                inodes.gone(parent.0, name.as_bytes());
            } else {
                inodes.unlinked(parent.0, name.as_bytes());
            }
        })?;
        Ok(())
    }

    pub(super) fn rename(
        &self,
        caller: &Caller,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<()> {
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let mut renamed_names = |src: &libc::stat, dst: Option<&libc::stat>| {
            let mut inodes = self.inodes();
            if exchange {
                inodes.exchanged(parent.0, name.as_bytes(), new_parent.0, new_name.as_bytes());
            } else {
                if let Some(dst) = dst
                    && key(dst) != key(src)
                    && (dst.st_nlink <= 1 || dst.st_mode & libc::S_IFMT == libc::S_IFDIR)
                {
                    inodes.gone(new_parent.0, new_name.as_bytes());
                }
                inodes.renamed(parent.0, name.as_bytes(), new_parent.0, new_name.as_bytes());
            }
        };
        // Whether it moves a folder is known only once the paths are read, under the lock.
        let mut exclusive = false;
        let _names = loop {
            let names = if exclusive {
                self.names_exclusive()
            } else {
                self.names_shared()
            };
            let parent_path = self.path(parent)?;
            let new_parent_path = self.path(new_parent)?;
            let renamed = self.rename_at(
                caller,
                &parent_path,
                name,
                &new_parent_path,
                new_name,
                flags,
                &names,
                &mut renamed_names,
            )?;
            if renamed {
                break names;
            }
            exclusive = true;
        };
        Ok(())
    }

    pub(super) fn link(
        &self,
        caller: &Caller,
        ino: INodeNo,
        new_parent: INodeNo,
        new_name: &OsStr,
    ) -> Result<FileAttr> {
        check_name(new_name)?;
        let _names = self.names_shared();
        let _making = self.making();
        let new_parent_path = self.path(new_parent)?;
        let new_path = join(&new_parent_path, new_name);
        self.ready_for(&new_path, false)?;
        let Ok(mut path) = self.reachable_path(ino) else {
            // No name yet: an O_TMPFILE given its first one. A new file, written from now on.
            let open = self.link_unnamed(ino, &new_parent_path, new_name)?;
            let attr = self.entry(new_parent, &new_parent_path, new_name)?;
            self.begin_named(&open, &new_path, caller.by())?;
            return Ok(attr);
        };
        // The file stays locked until its link is recorded, so an episode of it that ends
        // meanwhile is recorded before the link (under the names it had) or after it.
        let file = self.inodes().key(ino.0);
        let mut tries = 0;
        let _held = loop {
            let held = self
                .recorder
                .as_ref()
                .zip(file)
                .map(|(rec, k)| rec.hold(&[k]));
            let Err(e) = self.backing.link(&path, &new_parent_path, new_name) else {
                break held;
            };
            // The name the table gave may be one of the file's that another operation is
            // just taking away (a second link of it unlinked or renamed): its name is asked
            // again, not holding the file, before an `ENOENT` is believed (the file itself is
            // there: the kernel found it by the name this process gave).
            if e.raw_os_error() != Some(libc::ENOENT) || tries >= LINK_TRIES {
                return Err(e.into());
            }
            tries += 1;
            drop(held);
            std::thread::sleep(std::time::Duration::from_millis(1));
            path = self.reachable_path(ino).map_err(|_| e)?;
        };
        self.record_link(caller, &path, &new_parent_path, new_name)?;
        self.entry(new_parent, &new_parent_path, new_name)
    }
}

/// How often a link asks again for its file's name when the one it had is gone (see `link`).
const LINK_TRIES: u32 = 5;

/// Tests only: `REWIND_TEST_SLOW_MADE=MS` makes every create, mkdir, mknod, symlink and link
/// wait that long between making its object (or name) and recording it, so a test can fill the store's disk
/// in between.
pub(super) static SLOW_MADE: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_MADE");

/// Tests only: `REWIND_TEST_SLOW_RMDIR=MS` makes every rmdir wait that long between removing
/// its folder and recording it, so a test can fill the store's disk in between.
static SLOW_RMDIR: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_RMDIR");

/// Tests only: `REWIND_TEST_SLOW_LOOKED=MS` makes every rename and unlink of a file wait that
/// long between taking the `stat` of its files and holding them, so that a test can run a
/// rollback's step in between (see `Restores`).
static SLOW_LOOKED: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_LOOKED");

/// Tests only: `REWIND_TEST_SLOW_UNLINK=MS` makes every unlink of a file wait that long
/// between its delete being prepared (its time taken) and queued (its id given later).
static SLOW_UNLINK: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_UNLINK");
