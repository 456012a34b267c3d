//! `rewind unmount`.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::{CliResult, Failure, Registration};
use crate::command::UnmountArgs;
use crate::fs;

pub fn run(cwd: &Path, args: &UnmountArgs) -> CliResult {
    let dir = match &args.dir {
        Some(d) => cwd.join(d),
        None => super::find_workspace(cwd)?,
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
    if !fs::is_rewind_mount(&dir) {
        return Err(Failure::usage(format!(
            "{} is not a rewind mount",
            dir.display()
        )));
    }
    // `--force` goes on: a plain unmount, or a lazy one once the daemon is told to stop.
    if !args.force
        && let Some(stopped) = super::context::stopped_daemon(&dir)
    {
        return Err(stopped);
    }
    let daemon = Registration::read(&dir).and_then(|r| r.live_daemon());
    // A reader of .rewind/events that just went away holds its file for up to a second.
    let mut result = if args.force {
        force(&dir, daemon)
    } else {
        fs::unmount(&dir, false)
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        result = fs::unmount(&dir, args.force);
    }
    match result {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let by = holders(&dir, daemon);
            let by = if by.is_empty() {
                format!("see `fuser -vm {}`", dir.display())
            } else {
                format!("by {}", by.join(", "))
            };
            return Err(Failure::failed(format!(
                "{} is busy: files in it are still open ({by}). Close them, or force with \
                 `rewind unmount --force {}` (open files keep working until closed).",
                dir.display(),
                dir.display()
            )));
        }
        Err(e) => {
            return Err(Failure::failed(format!(
                "cannot unmount {}: {e}",
                dir.display()
            )));
        }
    }
    // Wait for the daemon to flush its store and exit, so a following mount finds it closed.
    // After a forced (lazy) unmount it lives on until the open files are closed.
    if let Some(pid) = daemon.filter(|_| !args.force) {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Signal 0 only checks that the process exists.
        let exists = || {
            rustix::process::Pid::from_raw(pid as i32)
                .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
        };
        while exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    println!("unmounted {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `--force`: a plain unmount if nothing in the workspace is open. Otherwise the daemon is told
/// to stop (SIGTERM: it detaches the mount lazily, as here, and also ends the reads of
/// `.rewind/events`, which would keep a detached mount and itself alive for good); if the mount
/// is still there after [`FORCE_WAIT`] (a daemon that does not answer), it is detached here.
fn force(dir: &Path, daemon: Option<u32>) -> std::io::Result<()> {
    match fs::unmount(dir, false) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        done => return done,
    }
    if let Some(pid) = daemon
        && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
        && rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok()
    {
        let deadline = Instant::now() + FORCE_WAIT;
        while Instant::now() < deadline {
            if !fs::is_rewind_mount(dir) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fs::unmount(dir, true)
}

/// How long `unmount --force` waits for the daemon to detach the mount itself.
const FORCE_WAIT: Duration = Duration::from_secs(3);

/// How many processes a busy unmount names.
const HOLDERS_NAMED: usize = 8;

/// The processes that keep the mount at `dir` busy, as `name[pid]`: a current folder, a root
/// or an open file on it (a `rewind ui` reading `.rewind/events`, an editor, a shell). Those
/// this user may not look at are not named. A process on the folder underneath the mount (from
/// before it) is not on it, nor is the daemon's own hold of that folder. Nothing here asks the
/// daemon (a `stat` through the mount would hang with it): the mount each file is on is read
/// with `AT_STATX_DONT_SYNC`.
fn holders(dir: &Path, daemon: Option<u32>) -> Vec<String> {
    let Some(mount) = mount_id(dir) else {
        return Vec::new();
    };
    let me = std::process::id();
    // The path first: a `statx` of another process's file on a dead NFS mount elsewhere could
    // still wait.
    let on_mount = |link: &Path| {
        std::fs::read_link(link).is_ok_and(|to| to.starts_with(dir))
            && mount_id(link) == Some(mount)
    };
    let mut named: Vec<(u32, String)> = crate::procfs::processes()
        .filter(|pid| *pid != me && Some(*pid) != daemon)
        .filter(|pid| {
            let base = Path::new("/proc").join(pid.to_string());
            on_mount(&base.join("cwd"))
                || on_mount(&base.join("root"))
                || std::fs::read_dir(base.join("fd"))
                    .is_ok_and(|fds| fds.filter_map(|fd| fd.ok()).any(|fd| on_mount(&fd.path())))
        })
        .map(|pid| {
            let name = crate::procfs::stat(pid).map_or_else(|| "?".into(), |s| s.name);
            (pid, format!("{name}[{pid}]"))
        })
        .collect();
    named.sort();
    let more = named.len().saturating_sub(HOLDERS_NAMED);
    let mut out: Vec<String> = named
        .into_iter()
        .take(HOLDERS_NAMED)
        .map(|(_, n)| n)
        .collect();
    if more > 0 {
        out.push(format!("{more} more"));
    }
    out
}

/// The id of the mount `path` is on, from what the kernel has cached of it.
fn mount_id(path: &Path) -> Option<u64> {
    use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
    statx(CWD, path, AtFlags::STATX_DONT_SYNC, StatxFlags::MNT_ID)
        .ok()
        .filter(|st| st.stx_mask & StatxFlags::MNT_ID.bits() != 0)
        .map(|st| st.stx_mnt_id)
}
