//! `rewind mount`: validate, then either serve in the foreground (the daemon itself) or start
//! the daemon detached and wait until it says the mount answers.

use std::io::BufRead;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use super::{CliResult, Failure, Registration};
use crate::command::MountArgs;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::fs::MountConfig;
use crate::history::retention::Retention;

/// The environment variable through which a daemon tells the `rewind mount` that started it
/// that the mount is ready (or why it failed).
const READY_FD: &str = "REWIND_READY_FD";

pub fn run(cwd: &Path, args: &MountArgs) -> CliResult {
    let dir = cwd.join(&args.dir);
    // Looking at a workspace mounted already waits for its daemon: a stopped one is said at
    // once (the registry and `/proc` are read, not the mount).
    if let Some(stopped) = super::context::stopped_daemon(&dir) {
        return Err(stopped);
    }
    let mut config = MountConfig::new(&dir)?;
    config.allow_other = args.allow_other;
    config.passthrough &= !args.no_passthrough;
    let given = args
        .store
        .clone()
        .map(|s| cwd.join(s))
        .unwrap_or_else(|| super::default_store(&config.workspace));
    crate::store::check_outside(&given, &config.workspace)?;
    // The daemon opens the store by its resolved path, so a symlink on the way that changes
    // later cannot lead it into the workspace.
    let store = crate::store::resolve(&given)
        .map_err(|e| Failure::failed(format!("{}: {e}", given.display())))?;
    if let Some(outer) = crate::fs::inside_rewind_mount(&store)? {
        return Err(Failure::usage(format!(
            "the store {} is inside the mounted workspace {}, which would record it: give \
             `--store` a folder outside every mounted workspace",
            store.display(),
            outer.display()
        )));
    }
    // A bad setting fails the mount here, before anything is started.
    let retention = retention(&store, args)?;
    if !args.foreground {
        return daemonize(&config, &store, args);
    }
    crate::logging::init();
    let ready = std::env::var(READY_FD)
        .ok()
        .and_then(|fd| fd.parse::<RawFd>().ok())
        // SAFETY: the fd was handed to us by our parent for exactly this purpose.
        .map(|fd| unsafe { std::fs::File::from_raw_fd(fd) });
    let workspace = config.workspace.clone();
    let store_dir = store.clone();
    let register = Box::new(move |pid: u32| {
        Registration {
            workspace: workspace.clone(),
            store: store_dir.clone(),
            pid,
            start: crate::procfs::stat(pid).map(|s| s.start),
        }
        .write()
    });
    Daemon {
        mount: config,
        store_dir: store,
        session: args.session.clone(),
        retention,
        record: !args.no_record,
        ready,
    }
    .serve(register)?;
    Ok(ExitCode::SUCCESS)
}

/// Start `rewind mount --foreground` detached, and wait until it says the mount is ready.
fn daemonize(config: &MountConfig, store: &Path, args: &MountArgs) -> CliResult {
    let (read_end, write_end) =
        std::io::pipe().map_err(|e| Failure::failed(format!("pipe: {e}")))?;
    // Private before the daemon's log is put in it.
    crate::store::Store::prepare(store, &config.workspace)?;
    let log_path = store.join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
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
        cmd.arg("--session").arg(s.as_str());
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
    let write_fd = std::os::fd::AsRawFd::as_raw_fd(&write_end);
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
    let _ = std::io::BufReader::new(read_end).read_line(&mut answer);
    if answer.starts_with("ready") {
        println!(
            "mounted {} (store {}, daemon pid {})",
            config.workspace.display(),
            store.display(),
            child.id()
        );
        warn_of_those_underneath(&config.workspace);
        return Ok(ExitCode::SUCCESS);
    }
    // The daemon's own exit status says whether the input was bad (a damaged store: 2).
    let code = match child.wait().ok().and_then(|s| s.code()) {
        Some(2) => 2,
        _ => 1,
    };
    let why = answer
        .trim()
        .strip_prefix("error: ")
        .map(str::to_string)
        .unwrap_or_else(|| format!("the daemon exited; see {}", log_path.display()));
    Err(Failure {
        code,
        message: format!("cannot mount {}: {why}", config.workspace.display()),
    })
}

/// Processes whose current folder is in the workspace but on the folder underneath the mount
/// (a shell that ran `rewind mount .`, an agent started before the mount): what they write
/// there by a relative path is not recorded, and nothing says so. Named on stderr, with the way
/// out.
fn warn_of_those_underneath(workspace: &Path) {
    let Ok(mount) = std::fs::metadata(workspace) else {
        return;
    };
    let me = std::process::id();
    let mut under: Vec<String> = crate::procfs::processes()
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            // The path first: a `stat` of another process's folder could hang (a dead FUSE
            // or NFS mount elsewhere).
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            if !cwd.starts_with(workspace) {
                return None;
            }
            let on = std::fs::metadata(format!("/proc/{pid}/cwd")).ok()?;
            (on.dev() != mount.dev()).then(|| {
                let name = crate::procfs::stat(pid).map_or_else(|| "?".into(), |s| s.name);
                format!("{name}[{pid}]")
            })
        })
        .collect();
    if under.is_empty() {
        return;
    }
    under.sort();
    let n = under.len();
    eprintln!(
        "note: {} in {} from before the mount, on the folder underneath it: what {} there \
         is not recorded ({}). In a shell there, `cd .` moves onto the mount; start other \
         programs again from there.",
        if n == 1 {
            "a process is".to_string()
        } else {
            format!("{n} processes are")
        },
        workspace.display(),
        if n == 1 { "it writes" } else { "they write" },
        under.join(", ")
    );
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
