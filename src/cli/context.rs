//! What every history command needs: the workspace, its store, whether it is mounted, and the
//! two ways to reach the history — the store itself, or the daemon through `.rewind/ctl`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Failure, Registration};
use crate::command::env::rel_path;
use crate::fs::backing::Backing;
use crate::history::ignore::IgnoreRules;
use crate::history::{History, Source};
use crate::store::Store;

pub struct Ctx {
    pub workspace: PathBuf,
    pub store_dir: PathBuf,
    pub mounted: bool,
    /// The directory the command was started in (or `-C`), for relative paths.
    pub base: PathBuf,
}

/// What a command written to `.rewind/ctl` answered.
pub struct Answer {
    pub output: Vec<u8>,
    /// Done in part (the output ended with `exit status 1`, now removed).
    pub partial: bool,
}

/// The store the daemon serving `workspace` records into, as its `.rewind/status` says. The
/// registration a command finds is that of its user's data folder (`XDG_DATA_HOME`): another
/// user (`sudo rewind log`), another data folder, or a mount whose `--store` is registered
/// elsewhere would name another store, or one a mount before this one left, and a command
/// would read an old history as the present one.
pub fn daemon_store(workspace: &Path) -> Option<PathBuf> {
    store_line(&std::fs::read_to_string(workspace.join(".rewind/status")).ok()?)
}

/// The store a daemon's status (`.rewind/status`) names.
pub fn store_line(status: &str) -> Option<PathBuf> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("store: "))
        .map(PathBuf::from)
}

/// A daemon stopped by a signal (`SIGSTOP`, `^Z`) or a debugger answers nothing until it is
/// let go, and everything that touches its workspace waits for it, a command too: said at
/// once instead (`None`: it runs, or its registration is not this user's to read).
pub fn stopped_daemon(workspace: &Path) -> Option<Failure> {
    // The registration's pid may be another process's by now (a daemon that died, its pid
    // handed out again): only the daemon is asked about.
    let pid = Registration::read(workspace)?.live_daemon()?;
    crate::procfs::stopped(pid).then(|| {
        Failure::failed(format!(
            "the daemon serving {} (pid {pid}) is stopped (by SIGSTOP, ^Z or a debugger): the \
             workspace and its `.rewind/` wait until it goes on, and so would this command. \
             `kill -CONT {pid}` lets it go on",
            workspace.display()
        ))
    })
}

impl Ctx {
    /// The workspace `cwd` is in, refused while its daemon is stopped ([`stopped_daemon`]):
    /// the command would wait for it.
    pub fn locate(cwd: &Path) -> Result<Ctx, Failure> {
        let ctx = Ctx::find(cwd)?;
        ctx.check_running()?;
        Ok(ctx)
    }

    /// Refuse to wait on a stopped daemon ([`stopped_daemon`]).
    fn check_running(&self) -> Result<(), Failure> {
        match self
            .mounted
            .then(|| stopped_daemon(&self.workspace))
            .flatten()
        {
            Some(stopped) => Err(stopped),
            None => Ok(()),
        }
    }

    /// The workspace `cwd` is in, whether its daemon runs or not.
    pub fn find(cwd: &Path) -> Result<Ctx, Failure> {
        let workspace = super::find_workspace(cwd)?;
        let store_dir = Registration::read(&workspace)
            .map(|r| r.store)
            .unwrap_or_else(|| super::default_store(&workspace));
        Ok(Ctx {
            mounted: crate::fs::is_rewind_mount(&workspace),
            base: cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf()),
            workspace,
            store_dir,
        })
    }

    /// The store to read the history from: while mounted, the one the daemon records into
    /// ([`daemon_store`]), else [`store_dir`](Ctx::store_dir).
    pub fn reading_store(&self) -> PathBuf {
        self.mounted
            .then(|| daemon_store(&self.workspace))
            .flatten()
            .unwrap_or_else(|| self.store_dir.clone())
    }

    /// The history for reading: beside the daemon while mounted (after it has recorded what
    /// has happened, so what was just done shows, without cutting held-back new files short),
    /// directly otherwise.
    pub fn read_history(&self) -> Result<History, Failure> {
        self.check_running()?;
        let store_dir = self.reading_store();
        if self.mounted {
            // Best effort: a daemon that died leaves its store readable as it is.
            let _ = self.ctl("sync --for-reading");
        }
        let store = Store::open_read_only(&store_dir).map_err(|e| match e {
            crate::store::Error::Missing(_) => Failure::usage(format!(
                "no history for {} yet (store {})",
                self.workspace.display(),
                store_dir.display()
            )),
            e => Failure::from(e),
        })?;
        Ok(History::new(Arc::new(store)))
    }

    /// The history for writing, on an unmounted workspace (the daemon is the writer otherwise).
    pub fn write_history(&self) -> Result<History, Failure> {
        // The database may create files until the command ends: private, as the store is.
        crate::store::private_files();
        Ok(History::new(Arc::new(Store::open(&self.store_dir)?)))
    }

    /// The workspace as it is now (through the mount, if mounted).
    pub fn source(&self) -> Result<Backing, Failure> {
        self.check_running()?;
        Backing::open(&self.workspace)
            .map_err(|e| Failure::failed(format!("{}: {e}", self.workspace.display())))
    }

    /// What `.rewindignore` (and the defaults) leave unrecorded.
    pub fn ignore_rules(&self, source: &Backing) -> IgnoreRules {
        let text = source
            .open_read(b".rewindignore")
            .ok()
            .and_then(|f| std::io::read_to_string(f).ok())
            .unwrap_or_default();
        IgnoreRules::new(&text)
    }

    /// What to say when the daemon died before it answered (`ECONNABORTED` for a request in
    /// flight, `ENOTCONN` once the mount is stale), instead of the raw error: not a partial
    /// result (exit 1), but a failure that says what to check.
    fn daemon_gone(&self, e: &std::io::Error) -> Option<Failure> {
        if !matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::ENOTCONN)) {
            return None;
        }
        Some(Failure::usage(format!(
            "the daemon serving {ws} stopped before it answered; what it recorded is kept, but \
             the command may have been done only in part or not at all. Check `rewind status` \
             and the daemon log ({log}); `rewind mount {ws}` mounts the workspace again",
            ws = self.workspace.display(),
            log = self.store_dir.join("daemon.log").display(),
        )))
    }

    /// Run a command line through the daemon's `.rewind/ctl`.
    pub fn ctl(&self, line: &str) -> Result<Answer, Failure> {
        self.check_running()?;
        let path = self.workspace.join(".rewind/ctl");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                self.daemon_gone(&e)
                    .unwrap_or_else(|| Failure::failed(format!("{}: {e}", path.display())))
            })?;
        // Ended, so the daemon never waits for more of it (see `control::held_back`).
        let written = f.write_all(format!("{line}\n").as_bytes());
        let mut output = Vec::new();
        let _ = f.read_to_end(&mut output);
        let text = || {
            String::from_utf8_lossy(&output)
                .trim()
                .trim_start_matches("error: ")
                .to_string()
        };
        match written {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(Failure::usage(text()));
            }
            Err(e) if e.raw_os_error() == Some(libc::EIO) && !output.is_empty() => {
                return Err(Failure::failed(text()));
            }
            Err(e) => {
                return Err(self
                    .daemon_gone(&e)
                    .unwrap_or_else(|| Failure::failed(format!("{}: {e}", path.display()))));
            }
        }
        let mut partial = false;
        for trailer in [
            crate::fs::control::PARTIAL,
            crate::fs::control::NOTHING_DONE,
        ] {
            let trailer = format!("{trailer}\n");
            if output.ends_with(trailer.as_bytes()) {
                output.truncate(output.len() - trailer.len());
                partial = true;
                break;
            }
        }
        Ok(Answer { output, partial })
    }

    /// This process's command line as a `.rewind/ctl` line: the words after `rewind`, with
    /// `-C` naming the same folder inside the workspace.
    pub fn forwarded_line(&self) -> Result<String, Failure> {
        let mut words: Vec<String> = Vec::new();
        let mut args = std::env::args_os().skip(1);
        let mut literal = false;
        while let Some(arg) = args.next() {
            let arg = arg.into_string().map_err(|a| {
                Failure::usage(format!(
                    "{} is not UTF-8; .rewind/ctl takes text (unmount to use such a name)",
                    a.to_string_lossy()
                ))
            })?;
            if !literal {
                if arg == "--" {
                    literal = true;
                } else if arg == "-C" {
                    args.next();
                    continue;
                } else if arg.starts_with("-C") {
                    continue;
                }
            }
            words.push(arg);
        }
        let rel = rel_path(&self.workspace, &self.workspace, &self.base).map_err(Failure::from)?;
        let mut line = String::new();
        if !rel.is_empty() {
            let rel = String::from_utf8(rel)
                .map_err(|_| Failure::usage("the current folder's name is not UTF-8"))?;
            line = shlex::try_quote(&rel)
                .map_err(|e| Failure::usage(e.to_string()))?
                .into_owned();
            line = format!("-C {line} ");
        }
        let joined = shlex::try_join(words.iter().map(String::as_str))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok(line + &joined)
    }

    /// Run `f` with the workspace mounted: as it is, or mounted for the occasion and unmounted
    /// after (so that what `f` does is recorded like any other change).
    pub fn with_mount<T>(&self, f: impl FnOnce(&Ctx) -> Result<T, Failure>) -> Result<T, Failure> {
        if self.mounted {
            return f(self);
        }
        let exe = std::env::current_exe().map_err(|e| Failure::failed(e.to_string()))?;
        let out = std::process::Command::new(&exe)
            .arg("mount")
            .arg(&self.workspace)
            .arg("--store")
            .arg(&self.store_dir)
            .output()
            .map_err(|e| Failure::failed(e.to_string()))?;
        if !out.status.success() {
            return Err(Failure::failed(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let mounted = Ctx {
            mounted: true,
            workspace: self.workspace.clone(),
            store_dir: self.store_dir.clone(),
            base: self.base.clone(),
        };
        let result = f(&mounted);
        let _ = std::process::Command::new(&exe)
            .arg("unmount")
            .arg(&self.workspace)
            .output();
        result
    }
}
