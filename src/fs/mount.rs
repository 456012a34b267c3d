//! Mounting the filesystem over the workspace itself, and unmounting it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fuser::{Config, MountOption, SessionACL};

use std::sync::Arc;

use super::RewindFs;
use super::backing::Backing;
use crate::history::{Error, IoResultExt, Recorder, Result};

/// Everything `mount` needs, validated.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// Let other users in (normal permission checks apply).
    pub allow_other: bool,
    /// Use FUSE passthrough when the kernel and our privileges allow it.
    pub passthrough: bool,
    /// FUSE worker threads.
    pub threads: usize,
}

impl MountConfig {
    /// Check that `dir` can be mounted over: an existing directory, not already a rewind mount.
    pub fn new(dir: &Path) -> Result<MountConfig> {
        // A mount whose daemon died answers nothing ("Transport endpoint is not connected"):
        // clear it, and mount again (the scan at mount records what changed meanwhile).
        if is_stale(dir) {
            tracing::warn!(
                "{}: clearing a stale mount left by a daemon that died",
                dir.display()
            );
            unmount(dir, true).with_path(dir)?;
        }
        let workspace = dir.canonicalize().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::Usage(format!("{} does not exist", dir.display())),
            _ => Error::Io {
                path: dir.to_owned(),
                source: e,
            },
        })?;
        let meta = std::fs::metadata(&workspace).with_path(&workspace)?;
        if !meta.is_dir() {
            return Err(Error::Usage(format!(
                "{} is not a directory; rewind mounts over a project directory",
                workspace.display()
            )));
        }
        if let Some(source) = mount_type(&workspace)? {
            return Err(Error::Usage(format!(
                "{} is already mounted ({source}); run `rewind unmount {}` first",
                workspace.display(),
                workspace.display()
            )));
        }
        if let Some(outer) = inside_rewind_mount(&workspace)? {
            return Err(Error::Usage(format!(
                "{} is inside the mounted workspace {}: a workspace cannot be mounted in \
                 another (its files could not be opened); mount only the outer one, or run \
                 `rewind unmount {}` first",
                workspace.display(),
                outer.display(),
                outer.display()
            )));
        }
        check_no_own_control_dir(&workspace)?;
        Ok(MountConfig {
            workspace,
            allow_other: false,
            passthrough: can_passthrough(),
            threads: std::thread::available_parallelism().map_or(4, |n| n.get().max(2) * 2),
        })
    }
}

/// The mounted rewind workspace that `path` lies in (below its root), if any, from
/// /proc/self/mountinfo. Mounting a workspace there cannot work: FUSE passthrough does not stack
/// on the outer mount's files (every open fails with ELOOP), and the outer mount would record
/// the inner one's store or backing writes as its own changes.
pub fn inside_rewind_mount(path: &Path) -> Result<Option<PathBuf>> {
    let mounts = crate::procfs::mountinfo().with_path("/proc/self/mountinfo")?;
    Ok(mounts
        .into_iter()
        .filter(|m| m.fstype.starts_with("fuse") && m.source.starts_with("rewind:"))
        .map(|m| PathBuf::from(m.point))
        .find(|point| path != point && path.starts_with(point)))
}

/// A workspace's own `.rewind` is hidden by the control folder while mounted: neither
/// reachable nor recorded. Refused unless it is an empty folder (then nothing is hidden).
fn check_no_own_control_dir(workspace: &Path) -> Result<()> {
    let own = workspace.join(".rewind");
    let Ok(meta) = std::fs::symlink_metadata(&own) else {
        return Ok(());
    };
    let empty = meta.is_dir() && std::fs::read_dir(&own).with_path(&own)?.next().is_none();
    if empty {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "a folder with files in it"
    } else {
        "not a folder"
    };
    Err(Error::Usage(format!(
        "{} already exists ({what}); while mounted, rewind's control folder takes its place and \
         it would be neither reachable nor recorded: move or rename it, then mount",
        own.display()
    )))
}

/// Whether `dir` is a FUSE mount whose daemon is gone. `stat` of the mount's root is not
/// enough: the kernel answers it from its attribute cache (a day long) without asking the dead
/// daemon; `statfs` always asks.
fn is_stale(dir: &Path) -> bool {
    let enotconn = |e: &io::Error| e.raw_os_error() == Some(libc::ENOTCONN);
    std::fs::metadata(dir).as_ref().is_err_and(enotconn)
        || rustix::fs::statfs(dir).is_err_and(|e| e == rustix::io::Errno::NOTCONN)
}

/// A mounted session, not yet serving. [`Mounted::run`] serves until unmounted.
pub struct Mounted {
    session: fuser::Session<RewindFs>,
}

impl Mounted {
    /// What tells the kernel about changes it did not see (a rollback's).
    pub fn notifier(&self) -> fuser::Notifier {
        self.session.notifier()
    }

    /// Serve requests until the filesystem is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Unmount the rewind mount at `dir`. Busy (files still open) is `EBUSY` unless `lazy`, which
/// detaches the mount now and lets the open files finish.
pub fn unmount(dir: &Path, lazy: bool) -> io::Result<()> {
    let flags = if lazy {
        rustix::mount::UnmountFlags::DETACH
    } else {
        rustix::mount::UnmountFlags::empty()
    };
    match rustix::mount::unmount(dir, flags) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    // Not root: the setuid helper may unmount our own mounts.
    let out = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg("--")
        .arg(dir)
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    if msg.contains("busy") {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(io::Error::other(msg.trim().to_string()))
}

/// Mount `fs` over `config.workspace`. The mount exists when this returns; requests are
/// answered once [`Mounted::run`] is called.
pub fn mount(config: &MountConfig, fs: RewindFs) -> Result<Mounted> {
    let mut fuse = Config::default();
    fuse.mount_options = vec![
        MountOption::FSName(format!("rewind:{}", config.workspace.display())),
        MountOption::Subtype("rewind".into()),
        MountOption::DefaultPermissions,
        MountOption::Suid,
        MountOption::Dev,
        MountOption::Exec,
    ];
    let root = rustix::process::geteuid().is_root();
    fuse.acl = if config.allow_other {
        SessionACL::All
    } else if !root && user_allow_other() {
        // The owner, and root too (the kernel lets root in only via allow_other).
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    fuse.n_threads = Some(config.threads);
    fuse.clone_fd = true;
    let session =
        fuser::Session::new(fs, &config.workspace, &fuse).map_err(|source| Error::Mount {
            path: config.workspace.clone(),
            source,
        })?;
    Ok(Mounted { session })
}

/// The readahead of the disk `workspace` is on (ask before mounting over it).
pub fn disk_readahead(workspace: &Path) -> Option<String> {
    let dev = std::fs::metadata(workspace).ok()?.dev();
    bdi_readahead(&bdi_name(dev))
}

/// `major:minor` of a device number, as /sys/class/bdi names devices.
fn bdi_name(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

fn bdi_readahead(name: &str) -> Option<String> {
    let kb = std::fs::read_to_string(format!("/sys/class/bdi/{name}/read_ahead_kb")).ok()?;
    Some(kb.trim().to_string())
}

/// Give the mount the readahead of the disk underneath. Passthrough reads are read ahead by
/// the FUSE mount's own setting (128 KiB, and FUSE_INIT can only lower it); a virtual disk may
/// have 8 MiB. Measured on W4's cold 1 GiB read: 2.1 to 2.7 GB/s through the mount against 2.9
/// to 3.9 natively, and 3.7 to 3.9 with this. Needs root; without it the default stays.
pub fn match_readahead(workspace: &Path, kb: &str) {
    let Some(ours) = mount_device(workspace) else {
        return;
    };
    if bdi_readahead(&ours).as_deref() == Some(kb) {
        return;
    }
    match std::fs::write(format!("/sys/class/bdi/{ours}/read_ahead_kb"), kb) {
        Ok(()) => tracing::debug!(kb, "readahead set to the disk's"),
        Err(e) => tracing::debug!("cannot set the mount's readahead: {e}"),
    }
}

/// The device number (`major:minor`) of the mount at `dir`, from /proc/self/mountinfo (a stat
/// would ask our own filesystem, which is not serving yet).
fn mount_device(dir: &Path) -> Option<String> {
    let want = dir.to_string_lossy();
    // The last mount at a path is the visible one.
    crate::procfs::mountinfo()
        .ok()?
        .into_iter()
        .rev()
        .find(|m| m.point == want)
        .map(|m| m.device)
}

/// Whether this process may pass files through (FUSE passthrough needs CAP_SYS_ADMIN: root,
/// or a service given the capability, as the system unit does).
pub fn can_passthrough() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    crate::procfs::status_of_self().is_some_and(|s| s.mask("CapEff") & (1 << CAP_SYS_ADMIN) != 0)
}

/// The workspace underneath, opened before the mount covers it.
pub fn backing(config: &MountConfig) -> Result<Arc<Backing>> {
    Ok(Arc::new(
        Backing::open(&config.workspace).with_path(&config.workspace)?,
    ))
}

/// The filesystem for `config`, serving `backing` and recording with `recorder`; `state` is
/// what `.rewind/status` reports of the mount.
pub fn filesystem(
    config: &MountConfig,
    backing: Arc<Backing>,
    recorder: Option<Arc<Recorder>>,
    state: Arc<super::MountState>,
) -> Result<RewindFs> {
    let control = recorder.as_ref().map(|rec| {
        super::control::Control::new(
            rec.clone(),
            backing.clone(),
            config.workspace.clone(),
            state,
        )
    });
    RewindFs::new(backing, recorder, control, config.passthrough).with_path(&config.workspace)
}

/// What is mounted exactly at `dir`, if it is a FUSE filesystem: its mount source (for rewind,
/// `rewind:<workspace>`), from /proc/self/mountinfo. The last mount at a path is the visible one.
pub fn mount_type(dir: &Path) -> Result<Option<String>> {
    let mounts = crate::procfs::mountinfo().with_path("/proc/self/mountinfo")?;
    let want = dir.to_string_lossy();
    Ok(mounts
        .into_iter()
        .rfind(|m| m.point == want)
        .and_then(|m| m.fstype.starts_with("fuse").then_some(m.source)))
}

/// Whether a rewind mount is at `dir`.
pub fn is_rewind_mount(dir: &Path) -> bool {
    mount_type(dir)
        .ok()
        .flatten()
        .is_some_and(|source| source.starts_with("rewind:"))
}

/// Whether /etc/fuse.conf lets users mount with `allow_other`.
fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other"))
}
