//! The review page's one way to the history: it runs the CLI's own commands, with the same
//! words, where the CLI would run them. Mounted, every command goes to the daemon through
//! `.rewind/ctl` (a rollback there is recorded like any other); unmounted, reading commands run
//! here on the store opened read-only, and commands that would change something are refused
//! with a message saying they need the mount. The page never computes history its own way:
//! everything it shows is the output of one of these commands. What it selects is a
//! [`Selection`](crate::history::Selection), made into the same typed [`Command`] the CLI
//! parses and MCP builds (`LogArgs::of`, `DiffArgs::of`, `RollbackArgs::of`); the words are
//! only how that command travels ([`line`]).

use std::path::Path;
use std::sync::Arc;

use crate::cli::{Ctx, Failure};
use crate::command::select::Unsayable;
use crate::command::words::NoLine;
use crate::command::{self, Command, Env, Outcome};
use crate::history::{BadName, History};

/// What a command answered.
pub struct Answer {
    pub output: Vec<u8>,
    /// Done in part (a rollback, or its dry run, that skips paths).
    pub partial: bool,
}

/// Why a command gave no answer.
#[derive(Debug)]
pub enum Refusal {
    /// Bad input: unknown ids or names, a bad point, a path outside the workspace.
    Usage(String),
    /// It needs the mount (changing anything, or the tree at a point).
    NeedsMount(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Usage(m) | Refusal::NeedsMount(m) | Refusal::Failed(m) => f.write_str(m),
        }
    }
}

impl From<Unsayable> for Refusal {
    fn from(e: Unsayable) -> Refusal {
        Refusal::Usage(e.to_string())
    }
}

impl From<NoLine> for Refusal {
    fn from(e: NoLine) -> Refusal {
        Refusal::Usage(e.to_string())
    }
}

impl From<BadName> for Refusal {
    fn from(e: BadName) -> Refusal {
        Refusal::Usage(e.to_string())
    }
}

/// The line `command` travels as (a `.rewind/ctl` line, and what the page shows after
/// `rewind`).
pub fn line(command: &Command) -> Result<String, Refusal> {
    Ok(command.line()?)
}

pub struct Backend {
    ctx: Ctx,
    /// Unmounted: the store, opened read-only once.
    history: Option<Arc<History>>,
    /// Unmounted: what the store's write-ahead logs and manifest were then
    /// ([`store_written`]). A store written since (mounted meanwhile, even if unmounted
    /// again; a gc) holds history that the opened one does not show.
    written: Vec<(String, u64)>,
}

/// The store's files that any write changes (its write-ahead logs, its manifest, `CURRENT`),
/// with their sizes: a read-only open changes none of them.
fn store_written(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let kept = name.ends_with(".log") || name.starts_with("MANIFEST-") || name == "CURRENT";
            kept.then(|| (name, e.metadata().map_or(0, |m| m.len())))
        })
        .collect();
    files.sort();
    files
}

impl Backend {
    /// Unmounted, the store is opened read-only here: why it cannot be is the CLI's failure,
    /// with its exit status.
    pub fn open(ctx: Ctx) -> Result<Backend, Failure> {
        let (history, written) = if ctx.mounted {
            (None, Vec::new())
        } else {
            let written = store_written(&ctx.store_dir);
            (Some(Arc::new(ctx.read_history()?)), written)
        };
        Ok(Backend {
            ctx,
            history,
            written,
        })
    }

    pub fn mounted(&self) -> bool {
        self.ctx.mounted
    }

    pub fn workspace(&self) -> &Path {
        &self.ctx.workspace
    }

    /// Run `command` as the CLI would, and return what it printed. It goes as its [`line`],
    /// parsed again here or in the daemon: the CLI's own checks of what goes with what apply.
    pub fn run(&self, command: &Command) -> Result<Answer, Refusal> {
        let line = line(command)?;
        let cli = command::parse_line(&line).map_err(|e| Refusal::Usage(e.to_string()))?;
        if self.ctx.mounted {
            let answer = self.ctx.ctl(&line).map_err(|f| {
                if f.code == 2 {
                    Refusal::Usage(f.message)
                } else {
                    Refusal::Failed(f.message)
                }
            })?;
            return Ok(Answer {
                output: answer.output,
                partial: answer.partial,
            });
        }
        // Mounted since the page started (or written by a command): the store it read is no
        // longer the whole history, so it answers nothing more.
        if crate::fs::is_rewind_mount(&self.ctx.workspace)
            || store_written(&self.ctx.store_dir) != self.written
        {
            return Err(Refusal::Failed(format!(
                "{} was mounted or its history written after this page started, which shows \
                 the history as it was then: restart `rewind ui` to follow it",
                self.ctx.workspace.display()
            )));
        }
        if cli.command.changes_something() {
            return Err(Refusal::NeedsMount(format!(
                "`rewind {}` changes the workspace: it runs in the daemon, and {} is not mounted \
                 (mount it with `rewind mount`, then restart `rewind ui`)",
                cli.command.name(),
                self.ctx.workspace.display()
            )));
        }
        let history = self.history.as_ref().expect("unmounted: opened");
        let source = self.ctx.source().map_err(|f| Refusal::Failed(f.message))?;
        let rules = self.ctx.ignore_rules(&source);
        let ignored = |path: &[u8], dir: bool| rules.ignored(&source, path, dir).is_some();
        let mut output = Vec::new();
        let mut env = Env {
            history,
            source: &source,
            ignored: &ignored,
            workspace: self.ctx.workspace.clone(),
            base: self.ctx.workspace.clone(),
            actor: None,
            caller: std::process::id(),
            color: false,
            width: 200,
            out: &mut output,
        };
        let command::Verb::History(verb) = cli.command.verb() else {
            return Err(Refusal::Usage(format!("`{line}` is not a history command")));
        };
        let outcome = command::run(verb, &mut env).map_err(|e| {
            if e.is_usage() {
                Refusal::Usage(e.to_string())
            } else {
                Refusal::Failed(e.to_string())
            }
        })?;
        Ok(Answer {
            output,
            partial: outcome != Outcome::Done,
        })
    }

    /// The names in a folder of the tree at a point, from the daemon's `.rewind/at/POINT/`
    /// (folders first, each with whether it is a folder). Only mounted.
    pub fn tree_at(&self, point: &str, dir: &str) -> Result<Vec<(String, bool)>, Refusal> {
        if !self.ctx.mounted {
            return Err(Refusal::NeedsMount(
                "the tree at a point is served by the mount (.rewind/at/); mount the workspace \
                 to browse it"
                    .into(),
            ));
        }
        if let Some(stopped) = crate::cli::stopped_daemon(&self.ctx.workspace) {
            return Err(Refusal::Failed(stopped.message));
        }
        let at = self.ctx.workspace.join(".rewind/at").join(point);
        let shown = at.join(dir);
        let io = |e: rustix::io::Errno| {
            if e == rustix::io::Errno::NOENT {
                Refusal::Usage(format!("no such point or folder: {point} {dir}"))
            } else if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::XDEV {
                Refusal::Usage(format!(
                    "{dir}: a symlink at {point}; the tree shows only what is in the workspace"
                ))
            } else {
                Refusal::Failed(format!("{}: {e}", shown.display()))
            }
        };
        use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let at_fd = rustix::fs::open(&at, flags, Mode::empty()).map_err(io)?;
        // Never through a symlink of the tree at that point: `lib -> /etc` would list the
        // machine's /etc.
        let fd = rustix::fs::openat2(
            &at_fd,
            if dir.is_empty() { "." } else { dir },
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(io)?;
        let entries = rustix::fs::Dir::read_from(&fd).map_err(io)?;
        let mut names: Vec<(String, bool)> = Vec::new();
        for e in entries {
            let e = e.map_err(io)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match e.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                        .map(|st| FileType::from_raw_mode(st.st_mode))
                        .unwrap_or(FileType::Unknown)
                }
                k => k,
            };
            names.push((
                String::from_utf8_lossy(name).into_owned(),
                kind == FileType::Directory,
            ));
        }
        names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(names)
    }

    /// `.rewind/events`, while mounted.
    pub fn events_path(&self) -> Option<std::path::PathBuf> {
        self.ctx
            .mounted
            .then(|| self.ctx.workspace.join(".rewind/events"))
    }
}
