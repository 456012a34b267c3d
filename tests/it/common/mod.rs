//! Shared helpers: a temp workspace mounted through the real `rewind` binary (always unmounted
//! on drop, lazily if need be), running `rewind` and python in it, and small filesystems for
//! full-disk tests. One definition each: a test file that needs a variant says how it differs.

use std::borrow::Borrow;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const REWIND: &str = env!("CARGO_BIN_EXE_rewind");

/// Make `home` a home whose login shell (Codex runs hooks with `$SHELL -lc`, which resets PATH
/// from the profile) finds this build's `rewind`, as a user's profile puts it on PATH.
pub fn login_profile(home: &Path) {
    let bin = Path::new(REWIND).parent().unwrap();
    std::fs::write(
        home.join(".bash_profile"),
        format!("export PATH='{}':\"$PATH\"\n", bin.display()),
    )
    .unwrap();
}

/// PATH with the test build's folder first, so that `rewind` (what installed hooks run) is this
/// build's binary.
pub fn path_with_rewind() -> std::ffi::OsString {
    let bin = Path::new(REWIND).parent().unwrap().to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&rest))).unwrap()
}

/// A workspace in a temp dir with its own store and data home, mountable with rewind.
pub struct Workspace {
    root: tempfile::TempDir,
    mounted: bool,
}

impl Workspace {
    pub fn new() -> Workspace {
        let root = tempfile::Builder::new()
            .prefix("rewind-test-")
            .tempdir()
            .unwrap();
        for sub in ["ws", "store", "data", "plain"] {
            std::fs::create_dir(root.path().join(sub)).unwrap();
        }
        Workspace {
            root,
            mounted: false,
        }
    }

    /// The workspace directory (the mount point once mounted).
    pub fn path(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    pub fn store(&self) -> PathBuf {
        self.root.path().join("store")
    }

    /// A plain directory beside the workspace, for comparisons.
    pub fn plain(&self) -> PathBuf {
        self.root.path().join("plain")
    }

    /// `rewind ARGS` with this workspace's data home, from inside the workspace.
    pub fn command(&self, args: &[impl AsRef<OsStr>]) -> Command {
        let mut cmd = Command::new(REWIND);
        cmd.args(args)
            .current_dir(self.root.path())
            .env("XDG_DATA_HOME", self.root.path().join("data"))
            .env("PATH", path_with_rewind())
            .env_remove("REWIND_SESSION")
            .env_remove("REWIND_AGENT");
        cmd
    }

    pub fn rewind(&self, args: &[impl AsRef<OsStr>]) -> Output {
        self.command(args).output().unwrap()
    }

    pub fn mount(&mut self) {
        self.mount_with(&[] as &[&str]);
    }

    pub fn mount_with(&mut self, extra: &[impl AsRef<OsStr>]) {
        self.mount_with_env(extra, &[]);
    }

    /// [`mount_with`](Workspace::mount_with), the daemon started with `env` set (a test knob
    /// such as `REWIND_TEST_SLOW_RELEASE`).
    pub fn mount_with_env(&mut self, extra: &[impl AsRef<OsStr>], env: &[(&str, &str)]) {
        let mut cmd = self.command(&["mount"]);
        cmd.arg(self.path())
            .arg("--store")
            .arg(self.store())
            .args(extra)
            .envs(env.iter().copied());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = true;
        assert!(
            is_mounted(&self.path()),
            "mount returned but {} is not mounted",
            self.path().display()
        );
    }

    /// Note a mount made by hand (with options `mount_with` does not cover), so drop unmounts it.
    pub fn mark_mounted(&mut self) {
        self.mounted = true;
    }

    /// SIGKILL the daemon `pid` serving this workspace, wait for it to be gone, and take its
    /// dead mount away (`fusermount3 -uz`), ready for [`mount`](Workspace::mount) again.
    pub fn kill_daemon(&self, pid: i32) {
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(
            wait_for(30, || !Path::new(&format!("/proc/{pid}")).exists()),
            "daemon {pid} still there 30 s after SIGKILL"
        );
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(self.path())
            .status();
    }

    pub fn unmount(&mut self) {
        let out = self.rewind(&[OsStr::new("unmount"), self.path().as_os_str()]);
        assert!(
            out.status.success(),
            "unmount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = false;
        assert!(!is_mounted(&self.path()));
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if self.mounted || is_mounted(&self.path()) {
            let _ = self
                .command(&[
                    OsStr::new("unmount"),
                    OsStr::new("--force"),
                    self.path().as_os_str(),
                ])
                .output();
            if is_mounted(&self.path()) {
                let _ = Command::new("umount").arg("-l").arg(self.path()).status();
            }
        }
    }
}

/// Whether a FUSE filesystem is mounted exactly at `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.to_string_lossy();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.get(4) == Some(&want.as_ref()) && l.contains(" - fuse")
    })
}

/// Run a shell script in `dir`; panic with its output if it fails.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "script failed in {}:\n{script}\nstdout:\n{}\nstderr:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Wait until `f` holds, for at most `secs` seconds.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// `rewind ARGS` run from inside the workspace (the mount once mounted).
pub fn rw(ws: &Workspace, args: &[&str]) -> Output {
    rw_env(ws, args, &[])
}

/// `rewind ARGS` run from inside the workspace with `envs` added to its environment (and no
/// terminal width or colour preference inherited from whoever runs the tests).
pub fn rw_env(ws: &Workspace, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = ws.command(args);
    cmd.current_dir(ws.path())
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .envs(envs.iter().copied());
    cmd.output().unwrap()
}

/// `rewind ARGS` from inside the workspace, which must succeed: its stdout.
#[track_caller]
pub fn rw_ok(ws: &Workspace, args: &[&str]) -> String {
    let out = rw(ws, args);
    assert!(
        out.status.success(),
        "rewind {args:?} failed ({}):\nstderr: {}\nstdout: {}",
        out.status,
        stderr(&out),
        stdout(&out)
    );
    stdout(&out)
}

/// The kinds of the changes of `path` that `rewind log PATH --json` lists, oldest first.
#[track_caller]
pub fn kinds_of(ws: &Workspace, path: &str) -> Vec<String> {
    rw_ok(ws, &["log", path, "--json"])
        .lines()
        .map(|l| {
            let change: serde_json::Value = serde_json::from_str(l).unwrap();
            change["kind"].as_str().unwrap().to_string()
        })
        .collect()
}

/// `rewind sync`, which must succeed: every change made before it is recorded when it returns.
#[track_caller]
pub fn sync(ws: &Workspace) {
    rw_ok(ws, &["sync"]);
}

/// [`wait_recorded`] for one path: at least `n` changes of `path` (relative to the workspace).
#[track_caller]
pub fn wait_recorded_of(ws: &Workspace, path: &str, n: usize) {
    let count = || {
        sync(ws);
        rw_ok(ws, &["log", path, "--json"]).lines().count()
    };
    assert!(
        wait_for(20, || count() >= n),
        "fewer than {n} changes of {path} recorded:\n{}",
        rw_ok(ws, &["log"])
    );
}

/// Whether process `pid` holds `path` open (one of its descriptors names it).
pub fn holds_open(pid: u32, path: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
            .any(|l| l == path)
    })
}

/// A command's output, which must say it succeeded (exit 0); else the test fails with its
/// status, stderr and stdout.
#[track_caller]
pub fn check(out: &Output) -> &Output {
    assert!(
        out.status.success(),
        "failed ({}):\nstderr: {}\nstdout: {}",
        out.status,
        stderr(out),
        stdout(out)
    );
    out
}

/// The stdout (as text) of a command that must have succeeded.
#[track_caller]
pub fn ok(out: impl Borrow<Output>) -> String {
    stdout(check(out.borrow()))
}

/// The stdout (as bytes) of a command that must have succeeded.
#[track_caller]
pub fn ok_bytes(out: &Output) -> Vec<u8> {
    check(out).stdout.clone()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The pid of the daemon serving the workspace, from the registry entry `rewind mount` wrote
/// (so it answers while the daemon is stopped or busy).
pub fn daemon_pid(ws: &Workspace) -> i32 {
    let mounts = ws.root.path().join("data/rewind/mounts");
    let want = [ws.path(), ws.path().canonicalize().unwrap_or_default()];
    let entries: Vec<serde_json::Value> = std::fs::read_dir(&mounts)
        .unwrap_or_else(|e| panic!("{}: {e}", mounts.display()))
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect();
    entries
        .iter()
        .find(|r| {
            r["workspace"]
                .as_str()
                .is_some_and(|w| want.iter().any(|p| p == Path::new(w)))
        })
        .and_then(|r| r["pid"].as_i64())
        .unwrap_or_else(|| panic!("no registry entry for {}: {entries:?}", ws.path().display()))
        as i32
}

/// `python3 -c SCRIPT` in `dir`, not started yet: add arguments, environment and pipes.
pub fn python_command(dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(script).current_dir(dir);
    cmd
}

/// Run `python3 -c SCRIPT` in `dir`, which must succeed: its stdout.
#[track_caller]
pub fn python(dir: &Path, script: &str) -> String {
    let out = python_command(dir, script).output().unwrap();
    assert!(
        out.status.success(),
        "python failed in {} ({}):\n{script}\nstderr: {}",
        dir.display(),
        out.status,
        stderr(&out)
    );
    stdout(&out)
}

/// The kinds of small filesystem a full-disk test puts a store on.
#[derive(Clone, Copy, Debug)]
pub enum Disk {
    Tmpfs,
    /// ext4 on a loop file: a real disk's file system (blocks reserved for root, delayed
    /// allocation, a journal, `fallocate`).
    Ext4,
}

/// A small filesystem (see [`Disk`]), unmounted (lazily if need be) on drop, its loop file
/// with it. `None` when we may not mount.
pub struct SmallFs {
    /// Holds the mount point (and the loop file); removed after the unmount.
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl SmallFs {
    /// A tmpfs of `mib` MiB.
    pub fn new(mib: u32) -> Option<SmallFs> {
        SmallFs::of(Disk::Tmpfs, mib)
    }

    pub fn of(disk: Disk, mib: u32) -> Option<SmallFs> {
        let dir = tempfile::Builder::new()
            .prefix("rewind-smallfs-")
            .tempdir()
            .ok()?;
        let mnt = match disk {
            Disk::Tmpfs => dir.path().to_path_buf(),
            Disk::Ext4 => dir.path().join("mnt"),
        };
        let mut mount = Command::new("mount");
        match disk {
            Disk::Tmpfs => {
                mount.args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"]);
            }
            Disk::Ext4 => {
                let image = dir.path().join("image");
                std::fs::File::create(&image)
                    .ok()?
                    .set_len(u64::from(mib) << 20)
                    .ok()?;
                let made = Command::new("mkfs.ext4")
                    .args(["-q", "-F"])
                    .arg(&image)
                    .status()
                    .ok()?
                    .success();
                std::fs::create_dir(&mnt).ok()?;
                if !made {
                    return None;
                }
                mount.args(["-o", "loop"]).arg(&image);
            }
        }
        let ok = mount.arg(&mnt).status().ok()?.success();
        ok.then_some(SmallFs { _dir: dir, mnt })
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The file system's size.
    pub fn size(&self) -> u64 {
        let st = nix_statvfs(&self.mnt);
        st.f_blocks * st.f_frsize
    }

    /// Bytes an unprivileged writer may still use.
    pub fn available(&self) -> u64 {
        let st = nix_statvfs(&self.mnt);
        st.f_bavail * st.f_frsize
    }

    /// Run `f`, watching the free space (every millisecond): its answer, and the least free
    /// space seen while it ran.
    pub fn least_available_while<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let watch = s.spawn(|| {
                let mut least = u64::MAX;
                while !done.load(Ordering::SeqCst) {
                    least = least.min(self.available());
                    std::thread::sleep(Duration::from_millis(1));
                }
                least
            });
            let out = f();
            done.store(true, Ordering::SeqCst);
            (out, watch.join().unwrap())
        })
    }
}

fn nix_statvfs(path: &Path) -> libc::statvfs {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs of a NUL-terminated path into memory we own; read only on success.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statvfs returned 0, so it filled `st`.
    unsafe { st.assume_init() }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // A loop mount's device is let go with its last unmount (`mount -o loop` sets
        // autoclear); the loop file goes with the temp dir.
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// Deterministic incompressible bytes (xorshift).
pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Damage the stored value of `blob` in the (closed) store at `store`: one bit flipped in its
/// last byte, as a bad disk sector might.
pub fn damage_blob(store: &Path, blob: &rewind::store::Hash) {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(false);
    let db = rocksdb::DB::open_cf(&opts, store, rewind::store::ALL_CFS).unwrap();
    let blobs = db.cf_handle("blobs").unwrap();
    let mut value = db.get_cf(blobs, blob.0).unwrap().unwrap();
    let last = value.len() - 1;
    value[last] ^= 0x40;
    db.put_cf(blobs, blob.0, value).unwrap();
}
