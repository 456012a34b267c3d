//! `rewind mount`.

use std::io::{BufRead, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Args;

use super::config::Config;
use super::{CliResult, Failure, Registration};
use crate::fs::{self, MountConfig, MountState};
use crate::history::retention::Retention;
use sd_notify::NotifyState;
use std::sync::Arc;
use std::time::Duration;

use crate::history::Recorder;
use crate::history::recorder::PENDING_FOR;
use crate::store::Store;

/// Mount rewind over DIR: from now on every change made in DIR is recorded first.
///
/// Returns once the mount answers (the daemon keeps running in the background); with
/// --foreground it stays attached and logs to stderr until unmounted or sent SIGTERM/SIGINT.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The project directory to mount over.
    pub dir: PathBuf,
    /// Where the history store lives (default: $XDG_DATA_HOME/rewind/<name>-<hash>).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Stay in the foreground and log to stderr.
    #[arg(long)]
    pub foreground: bool,
    /// The default session for changes made by processes with no other attribution.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// Let other users use the mount (normal permission checks apply).
    #[arg(long)]
    pub allow_other: bool,
    /// Remove history older than this in the background (e.g. 30d; overrides rewind.toml).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep stored content under this size in the background (e.g. 2G; overrides rewind.toml).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Serve file data through the daemon instead of FUSE passthrough (for comparison).
    #[arg(long, hide = true)]
    pub no_passthrough: bool,
    /// Record nothing (for measuring what recording costs).
    #[arg(long, hide = true)]
    pub no_record: bool,
}

/// The environment variable through which a daemon tells the `rewind mount` that started it
/// that the mount is ready (or why it failed).
const READY_FD: &str = "REWIND_READY_FD";

pub fn run(cwd: &Path, args: MountArgs) -> CliResult {
    let dir = cwd.join(&args.dir);
    let mut config = MountConfig::new(&dir)?;
    config.allow_other = args.allow_other;
    config.passthrough &= !args.no_passthrough;
    let store = args
        .store
        .clone()
        .map(|s| cwd.join(s))
        .unwrap_or_else(|| super::default_store(&config.workspace));
    if store.starts_with(&config.workspace) {
        return Err(Failure::usage(format!(
            "the store {} must not be inside the workspace {}",
            store.display(),
            config.workspace.display()
        )));
    }
    // A bad setting fails the mount here, before anything is started.
    retention(&store, &args)?;
    if args.foreground {
        let ready = std::env::var(READY_FD)
            .ok()
            .and_then(|fd| fd.parse::<RawFd>().ok());
        // SAFETY: the fd was handed to us by our parent for exactly this purpose.
        let mut ready = ready.map(|fd| unsafe { std::fs::File::from_raw_fd(fd) });
        let result = serve(&config, &store, &args, ready.as_ref());
        if let (Err(e), Some(pipe)) = (&result, ready.as_mut()) {
            let _ = writeln!(pipe, "error: {}", e.message);
        }
        return result;
    }
    daemonize(&config, &store, &args)
}

/// Start `rewind mount --foreground` detached, and wait until it says the mount is ready.
fn daemonize(config: &MountConfig, store: &Path, args: &MountArgs) -> CliResult {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Failure::failed(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh fds we own.
    let (mut read_end, write_end) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    std::fs::create_dir_all(store)
        .map_err(|e| Failure::failed(format!("{}: {e}", store.display())))?;
    let log_path = store.join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Failure::failed(format!("{}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find the rewind binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg(&config.workspace)
        .arg("--foreground")
        .arg("--store")
        .arg(store);
    if let Some(s) = &args.session {
        cmd.arg("--session").arg(s);
    }
    if args.allow_other {
        cmd.arg("--allow-other");
    }
    if let Some(k) = &args.keep {
        cmd.arg("--keep").arg(k);
    }
    if let Some(m) = &args.max_size {
        cmd.arg("--max-size").arg(m);
    }
    if args.no_passthrough {
        cmd.arg("--no-passthrough");
    }
    if args.no_record {
        cmd.arg("--no-record");
    }
    let write_fd = fds[1];
    cmd.env(READY_FD, write_fd.to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(|e| Failure::failed(e.to_string()))?,
        )
        .stderr(log);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            // Let the write end survive exec.
            libc::fcntl(write_fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start the daemon: {e}")))?;
    drop(write_end);
    // One line: "ready ..." or "error: ...". EOF without one means the daemon died.
    let mut answer = String::new();
    let _ = std::io::BufReader::new(&mut read_end).read_line(&mut answer);
    if answer.starts_with("ready") {
        println!(
            "mounted {} (store {}, daemon pid {})",
            config.workspace.display(),
            store.display(),
            child.id()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let _ = child.wait();
    let why = answer
        .trim()
        .strip_prefix("error: ")
        .map(str::to_string)
        .unwrap_or_else(|| format!("the daemon exited; see {}", log_path.display()));
    Err(Failure::failed(format!(
        "cannot mount {}: {why}",
        config.workspace.display()
    )))
}

/// Mount and serve in this process until unmounted or signalled.
fn serve(
    config: &MountConfig,
    store_dir: &Path,
    args: &MountArgs,
    ready: Option<&std::fs::File>,
) -> CliResult {
    crate::logging::init();
    // Before any thread exists (RocksDB starts its own), so every thread inherits the mask and
    // only the signal thread ever takes these signals.
    let signals = block_signals();
    let state = Arc::new(MountState::new(retention(store_dir, args)?));
    let store = Arc::new(Store::open(store_dir)?);
    Config::write_template(store_dir);
    store.put_meta(
        b"workspace",
        config.workspace.as_os_str().as_encoded_bytes(),
    )?;
    Registration {
        workspace: config.workspace.clone(),
        store: store_dir.to_path_buf(),
        pid: std::process::id(),
    }
    .write()
    .map_err(|e| Failure::failed(format!("cannot register the mount: {e}")))?;

    let backing = fs::backing(config)?;
    let session = match &args.session {
        Some(s) => {
            crate::store::validate_name("session", s)?;
            s.clone()
        }
        None => default_session(),
    };
    let recorder =
        (!args.no_record).then(|| Arc::new(Recorder::new(store.clone(), backing.clone(), session)));
    if let Some(rec) = &recorder {
        let found = rec.recover()?;
        if found.episodes + found.external > 0 {
            tracing::info!(
                interrupted = found.episodes,
                external = found.external,
                "recorded changes made while not mounted"
            );
        }
        start_ticker(rec.clone());
        start_writer(rec.clone());
    }
    let fs = fs::filesystem(config, backing, recorder.clone(), state.clone())?;
    let ready = ready
        .map(|f| f.try_clone())
        .transpose()
        .map_err(|e| Failure::failed(e.to_string()))?;
    let workspace = config.workspace.clone();
    let ready_state = state.clone();
    fs.on_ready(move |passthrough| {
        ready_state.set_passthrough(passthrough);
        tracing::info!(workspace = %workspace.display(), passthrough, "serving");
    });
    // Asked before the mount covers the workspace.
    let readahead = fs::disk_readahead(&config.workspace);
    // Returns once FUSE_INIT has been answered and the kernel has taken the answer.
    let mounted = fs::mount(config, fs)?;
    // After INIT: the kernel sets the mount's readahead from INIT's answer, so not before.
    if let Some(kb) = &readahead {
        fs::match_readahead(&config.workspace, kb);
    }
    if let Some(mut pipe) = ready {
        let _ = writeln!(pipe, "ready passthrough={}", state.passthrough());
    }
    // Under systemd (Type=notify): the mount answers now.
    let status = format!("recording {}", config.workspace.display());
    if let Err(e) = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&status)]) {
        tracing::warn!("cannot tell systemd the mount is ready: {e}");
    }
    let workspace = config.workspace.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || wait_and_unmount(signals, &workspace))
        .map_err(|e| Failure::failed(e.to_string()))?;
    if recorder.is_some() {
        start_retention(store.clone(), state);
    }
    let result = mounted.run();
    if let Some(rec) = &recorder {
        rec.sync()?;
    }
    store.sync()?;
    // Keep the registration (commands find the store through it while unmounted); only the
    // daemon is gone.
    let _ = Registration {
        workspace: config.workspace.clone(),
        store: store_dir.to_path_buf(),
        pid: 0,
    }
    .write();
    tracing::info!("unmounted");
    result.map_err(|e| Failure::failed(format!("serving {}: {e}", config.workspace.display())))?;
    Ok(ExitCode::SUCCESS)
}

/// Block SIGTERM, SIGINT and SIGHUP in this thread (and the threads it starts), so that only
/// the signal thread receives them, with `sigwait`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_and_unmount(set: libc::sigset_t, workspace: &Path) {
    loop {
        let mut sig = 0;
        // SAFETY: sigwait on a set blocked in every thread.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        tracing::info!(signal = sig, "unmounting");
        let _ = sd_notify::notify(&[NotifyState::Stopping]);
        match fs::unmount(workspace, false) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tracing::warn!("files are still open; detaching the mount lazily");
                if fs::unmount(workspace, true).is_ok() {
                    return;
                }
            }
            Err(e) => tracing::error!("unmount failed: {e}"),
        }
    }
}

/// The mount's default session: named after the time the mount started (UTC).
fn default_session() -> String {
    let t = crate::history::time::rfc3339(crate::history::time::now_ns());
    format!("mount-{}-{}", &t[..10], t[11..19].replace(':', ""))
}

/// The retention limits for this mount: `rewind.toml` in the store, overridden by flags.
fn retention(store_dir: &Path, args: &MountArgs) -> Result<Retention, Failure> {
    let mut r = Config::load(store_dir)?.retention;
    let flags = Retention::parse(args.keep.as_deref(), args.max_size.as_deref(), None)
        .map_err(|e| Failure::usage(format!("--{e}")))?;
    if flags.keep.is_some() {
        r.keep = flags.keep;
    }
    if flags.max_size.is_some() {
        r.max_size = flags.max_size;
    }
    Ok(r)
}

/// Apply the retention limits in the background: soon after mounting (so short mounts get
/// it too), then every `retention.every`.
fn start_retention(store: Arc<Store>, state: Arc<MountState>) {
    if !state.retention.is_set() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("retention".into())
        .spawn(move || {
            let mut wait = state.retention.every.min(FIRST_GC);
            loop {
                std::thread::sleep(wait);
                wait = state.retention.every;
                let result = store.gc(&state.retention.policy());
                match &result {
                    Ok(r) if r.changes_removed + r.blobs_removed > 0 => tracing::info!(
                        changes = r.changes_removed,
                        blobs = r.blobs_removed,
                        bytes = r.bytes_after,
                        "retention: removed old history"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::error!("retention: gc failed: {e}"),
                }
                state.gc_done(&result);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the retention thread: {e}");
    }
}

/// How long after mounting retention first runs.
const FIRST_GC: Duration = Duration::from_secs(60);

/// Write deferred changes (deletes) as they come, batched (see `Recorder::defer`).
fn start_writer(recorder: Arc<Recorder>) {
    let wakeups = recorder.wakeups();
    let spawned = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || {
            for () in wakeups.iter() {
                if let Err(e) = recorder.drain() {
                    tracing::error!("cannot record deletes: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the writer thread: {e}");
    }
}

/// Record held-back creates once they are old enough (see `Recorder::flush_pending_older`).
fn start_ticker(recorder: Arc<Recorder>) {
    let spawned = std::thread::Builder::new()
        .name("pending".into())
        .spawn(move || {
            loop {
                std::thread::sleep(PENDING_FOR / 2);
                if let Err(e) = recorder.flush_pending_older(false) {
                    tracing::error!("cannot record new files: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the pending-create thread: {e}");
    }
}
