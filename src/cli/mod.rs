//! The `rewind` binary's commands. The grammar is `command` (shared with `.rewind/ctl`); this
//! module decides where each command runs — on the store directly, or in the daemon through
//! `.rewind/ctl` — and runs the verbs that only make sense in a shell (one file each). It also
//! holds the one mapping of errors to exit statuses.

mod agent;
mod context;
mod export;
mod history;
mod hook;
mod manual;
mod mcp;
mod mount;
mod run;
mod status;
mod ui;
mod unmount;
mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use crate::command::{Cli, Command};
use crate::command::{ShellVerb, Verb};
pub use context::{Ctx, stopped_daemon};

/// A failure with the exit status it maps to: 2 for bad usage or input (a damaged store
/// included), 1 for everything else.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

/// The one place errors become exit statuses.
impl From<crate::history::Error> for Failure {
    fn from(e: crate::history::Error) -> Failure {
        Failure {
            code: if e.is_usage() { 2 } else { 1 },
            message: e.to_string(),
        }
    }
}

impl From<crate::store::Error> for Failure {
    fn from(e: crate::store::Error) -> Failure {
        crate::history::Error::from(e).into()
    }
}

pub type CliResult = Result<ExitCode, Failure>;

pub fn run(cli: Cli) -> CliResult {
    let cwd = match &cli.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::failed(format!("cannot read the current directory: {e}")))?,
    };
    if !matches!(cli.command, Command::Mount(_)) {
        // Commands that print end quietly when their reader goes away (`rewind log | head`),
        // as other Unix tools do. The daemon keeps ignoring SIGPIPE.
        // SAFETY: resetting a signal disposition before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command.verb() {
        Verb::Shell(ShellVerb::Mount(args)) => mount::run(&cwd, args),
        Verb::Shell(ShellVerb::Unmount(args)) => unmount::run(&cwd, args),
        Verb::Shell(ShellVerb::Run(args)) => run::run(args),
        Verb::Shell(ShellVerb::Status(_)) => status::run(&cwd),
        Verb::Shell(ShellVerb::Watch(args)) => watch::run(&cwd, args),
        Verb::Shell(ShellVerb::Export(args)) => export::run(&cwd, args),
        Verb::Shell(ShellVerb::Agent(args)) => agent::run(&cwd, args),
        Verb::Shell(ShellVerb::Hook(args)) => hook::run(&cwd, args),
        Verb::Shell(ShellVerb::Mcp(_)) => mcp::run(&cwd),
        Verb::Shell(ShellVerb::Completions(args)) => manual::completions(args),
        Verb::Shell(ShellVerb::Man(_)) => manual::man(),
        Verb::Shell(ShellVerb::Ui(args)) => ui::run(&cwd, args),
        Verb::History(verb) => history::run(&cwd, &cli.command, verb),
    }
}

/// `$XDG_DATA_HOME/rewind` (or `~/.local/share/rewind`).
pub fn data_home() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    base.join("rewind")
}

/// The default store of a workspace: `<data_home>/<name>-<hash of the path>`.
pub fn default_store(workspace: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let hash = blake3::hash(workspace.as_os_str().as_bytes()).to_hex();
    let name = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    data_home().join(format!("{name}-{}", &hash[..12]))
}

/// Where `rewind mount` notes which store serves a workspace, so that later commands (and
/// `rewind status` with no workspace) find it: `<data_home>/mounts/<hash>`.
pub fn registry_entry(workspace: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let hash = blake3::hash(workspace.as_os_str().as_bytes()).to_hex();
    data_home().join("mounts").join(&hash[..16])
}

/// A workspace and its store, as recorded when it was mounted.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Registration {
    pub workspace: PathBuf,
    pub store: PathBuf,
    pub pid: u32,
    /// The daemon's start time (clock ticks after boot, `/proc/PID/stat`), which tells it
    /// from a process given its pid later, whatever its binary is called. Absent in a
    /// registration written before it was kept.
    #[serde(default)]
    pub start: Option<u64>,
}

impl Registration {
    /// The daemon's pid, if that process is the daemon that registered (its pid may have been
    /// handed to another process since it died).
    pub fn live_daemon(&self) -> Option<u32> {
        let now = crate::procfs::stat(self.pid)?;
        let same = match self.start {
            Some(start) => now.start == start,
            None => now.name == "rewind",
        };
        (self.pid != 0 && same).then_some(self.pid)
    }

    pub fn read(workspace: &Path) -> Option<Registration> {
        let text = std::fs::read_to_string(registry_entry(workspace)).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn write(&self) -> std::io::Result<()> {
        let path = registry_entry(&self.workspace);
        std::fs::create_dir_all(path.parent().expect("registry entries have a parent"))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(self).expect("plain struct"))?;
        std::fs::rename(tmp, path)
    }

    /// Every registered workspace.
    pub fn all() -> Vec<Registration> {
        let Ok(dir) = std::fs::read_dir(data_home().join("mounts")) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|t| serde_json::from_str(&t).ok())
            .collect()
    }
}

/// Find the workspace that `cwd` is in: the nearest ancestor (or itself) that is mounted or
/// registered.
pub fn find_workspace(cwd: &Path) -> Result<PathBuf, Failure> {
    let cwd = cwd
        .canonicalize()
        .map_err(|e| Failure::usage(format!("{}: {e}", cwd.display())))?;
    for dir in cwd.ancestors() {
        let mounted = crate::fs::is_rewind_mount(dir);
        if mounted || registry_entry(dir).exists() || default_store(dir).exists() {
            return Ok(dir.to_path_buf());
        }
    }
    Err(Failure::usage(format!(
        "{} is not inside a rewind workspace; mount one with `rewind mount DIR`, or name it with `-C DIR`",
        cwd.display()
    )))
}
