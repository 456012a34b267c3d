//! `setattr`: chmod (recorded), chown, truncate (a write episode of its own), and times
//! (not recorded, but kept in the manifest).

use std::os::fd::AsFd;

use fuser::{Errno, FileAttr, FileHandle, INodeNo, TimeOrNow};

use super::attr::{attr, killed_suid, timespec};
use super::backing::{self, futimens, set_fd_mode, set_fd_owner};
use super::{Caller, Core, Result, record_errno};

/// What a `setattr` asks to change.
pub struct Changes {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

impl Core {
    pub(super) fn setattr(
        &self,
        caller: &Caller,
        ino: INodeNo,
        ch: &Changes,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr> {
        let _names = self.names_shared();
        let open = fh.and_then(|fh| self.files.get(fh.0));
        let (open, path) = match open {
            Some(o) => (Some(o), self.path(ino).ok()),
            None => match self.reachable_path(ino) {
                Ok(path) => (None, Some(path)),
                // No name left: through a handle open on the file if there is one (`fchmod`
                // of a file unlinked while open, which the kernel sends without it), as on
                // disk; else `ESTALE`, a name replaced since the caller looked it up, which
                // the kernel then looks up again (`Core::named_path`).
                Err(e) => match self.files.find(|f| f.ino == ino.0) {
                    Some(o) => (Some(o), None),
                    None => return Err(super::stale_if_nameless(e)),
                },
            },
        };
        let stat = || match &open {
            Some(o) => backing::stat_fd(o.file.as_fd()).map_err(Errno::from),
            None => self
                .backing
                .stat(path.as_deref().ok_or(Errno::ENOENT)?)
                .map_err(Errno::from),
        };
        if let Some(mode) = ch.mode {
            let chmod = || match &open {
                Some(o) => set_fd_mode(&o.file, mode).map_err(Errno::from),
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    self.backing.chmod(path, mode & 0o7777).map_err(Errno::from)
                }
            };
            match (&self.recorder, path.as_deref()) {
                (Some(rec), Some(p)) => {
                    // Held until the chmod is done, so the end of a write episode on the file
                    // cannot be recorded in between, nor another chmod.
                    let named = rec.hold_stat(stat)?;
                    let recorded = rec
                        .before_chmod(p, named.stat(), mode, caller.by())
                        .map_err(record_errno)?;
                    if let Err(e) = chmod() {
                        rec.retract(&recorded.into_iter().collect::<Vec<_>>());
                        return Err(e);
                    }
                    if recorded.is_some()
                        && let Ok(st) = stat()
                    {
                        rec.metadata_changed(&st);
                    }
                }
                _ => chmod()?,
            }
        }
        if ch.uid.is_some() || ch.gid.is_some() {
            match &open {
                // No path to resolve: `tar` chowns every file it writes while it is open.
                Some(o) => set_fd_owner(&o.file, ch.uid, ch.gid)?,
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    self.backing.chown(path, ch.uid, ch.gid)?;
                }
            }
            // Not recorded; the file's ctime changed, not its content.
            if let Some(rec) = &self.recorder
                && let Ok(st) = stat()
            {
                rec.metadata_changed(&st);
            }
        }
        if let Some(size) = ch.size {
            match &open {
                // Open for writing: its episode already holds the content from before.
                Some(o) if fh.is_some() || writable(&o.file) => o.file.set_len(size)?,
                // A handle found open on a file with no name left (`truncate(2)` through
                // `/proc/PID/fd/N` of one unlinked or saved over while open), which may be
                // read-only: the file is opened again for writing through it, as a truncate
                // by path needs no writable descriptor on disk. In no tree: nothing to record.
                Some(o) => backing::reopen(&o.file, rustix::fs::OFlags::WRONLY)?.set_len(size)?,
                None => {
                    let path = path.as_deref().ok_or(Errno::ENOENT)?;
                    let (episode, (file, _), _, _) = self.begin_and_open(
                        ino.0,
                        path.to_vec(),
                        caller.by(),
                        false,
                        |path, _| {
                            let file = self.backing.open_file(path, libc::O_WRONLY, 0)?;
                            Ok((file, libc::O_WRONLY))
                        },
                    )?;
                    let result = file.set_len(size).map_err(Errno::from);
                    // Closed after the end: freed before it (unlinked meanwhile), its number
                    // could go to a new file that would join this episode.
                    self.end_write(episode);
                    drop(file);
                    result?;
                }
            }
            // Truncating by a process without CAP_FSETID clears set-ID bits, as on disk.
            if caller.uid != 0 {
                self.kill_suid(&path, open.as_deref().map(|o| &o.file))?;
            }
        }
        if ch.atime.is_some() || ch.mtime.is_some() {
            // An edit of the file not noted in the store yet is noted first: times put back
            // would hide it from the scan after a crash (`Recorder::before_times`).
            if let Some(rec) = &self.recorder
                && rec.any_unmarked()
            {
                rec.before_times(&stat()?).map_err(record_errno)?;
            }
            let times = [timespec(ch.atime), timespec(ch.mtime)];
            match (&open, path.as_deref()) {
                (Some(o), _) => futimens(&o.file, &times)?,
                (None, Some(path)) => self.backing.utimens(path, &times)?,
                (None, None) => return Err(Errno::ENOENT),
            }
            if let (Some(rec), Some(path)) = (&self.recorder, path.as_deref()) {
                let st = stat()?;
                rec.touched(path, &st);
                // Times are the last thing set: this stat is the reply.
                return Ok(attr(ino.0, &st));
            }
        }
        Ok(attr(ino.0, &stat()?))
    }

    /// Clear set-user-ID (and set-group-ID, when the group may execute) as a write or truncate
    /// by an unprivileged process does on disk.
    pub(super) fn kill_suid(
        &self,
        path: &Option<Vec<u8>>,
        file: Option<&std::fs::File>,
    ) -> Result<()> {
        let st = match file {
            Some(f) => backing::stat_fd(f.as_fd())?,
            None => match path {
                Some(p) => self.backing.stat(p)?,
                None => return Ok(()),
            },
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(());
        }
        if let Some(mode) = killed_suid(st.st_mode) {
            match (file, path) {
                (Some(f), _) => set_fd_mode(f, mode)?,
                (None, Some(p)) => self.backing.chmod(p, mode)?,
                (None, None) => {}
            }
        }
        Ok(())
    }
}

/// Whether `file` was opened for writing.
fn writable(file: &std::fs::File) -> bool {
    rustix::fs::fcntl_getfl(file).is_ok_and(|flags| {
        flags.contains(rustix::fs::OFlags::WRONLY) || flags.contains(rustix::fs::OFlags::RDWR)
    })
}
