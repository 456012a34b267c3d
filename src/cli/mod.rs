//! The command line: one module per subcommand, each an `XxxArgs` struct (its doc comment is the
//! `--help` text) and a `run` function. This module holds what they share: the global options,
//! finding the workspace and its store, and exit codes.

pub mod cat;
pub mod checkpoint;
pub mod config;
pub mod context;
pub mod diff;
pub mod gc;
pub mod log;
pub mod mount;
pub mod output;
pub mod rollback;
pub mod run;
pub mod sessions;
pub mod show;
pub mod status;
pub mod unmount;
pub mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rewind: every change to your project, recorded before it lands; history, diffs and rollback.
#[derive(Debug, Parser)]
#[command(name = "rewind", version, about, long_about = None)]
pub struct Cli {
    /// Run as if started in DIR.
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Mount(mount::MountArgs),
    Unmount(unmount::UnmountArgs),
    Run(run::RunArgs),
    Log(log::LogArgs),
    Show(show::ShowArgs),
    Diff(diff::DiffArgs),
    Cat(cat::CatArgs),
    Undo(rollback::UndoArgs),
    Rollback(rollback::RollbackArgs),
    Checkpoint(checkpoint::CheckpointArgs),
    Sessions(sessions::SessionsArgs),
    Status(status::StatusArgs),
    Gc(gc::GcArgs),
    Watch(watch::WatchArgs),
}

/// A failure with the exit code it maps to: 2 for bad usage or input, 1 for everything else.
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

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Failure {
        let code = match e {
            crate::Error::Invalid(_) | crate::Error::NotFound(_) => 2,
            _ => 1,
        };
        Failure {
            code,
            message: e.to_string(),
        }
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
    match cli.command {
        Command::Mount(args) => mount::run(&cwd, args),
        Command::Unmount(args) => unmount::run(&cwd, args),
        Command::Log(args) => log::run(&cwd, args),
        Command::Run(args) => run::run(args),
        Command::Show(args) => show::run(&cwd, args),
        Command::Diff(args) => diff::run(&cwd, args),
        Command::Cat(args) => cat::run(&cwd, args),
        Command::Sessions(args) => sessions::run(&cwd, args),
        Command::Undo(args) => rollback::undo(&cwd, args),
        Command::Rollback(args) => rollback::run(&cwd, args),
        Command::Checkpoint(args) => checkpoint::run(&cwd, args),
        Command::Status(args) => status::run(&cwd, args),
        Command::Gc(args) => gc::run(&cwd, args),
        Command::Watch(args) => watch::run(&cwd, args),
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
}

impl Registration {
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

/// Write one line to stdout; an error (a closed pipe, as with `| head`) ends the output quietly.
pub fn write_line(out: &mut impl std::io::Write, line: &str) -> std::io::Result<()> {
    writeln!(out, "{line}")
}
