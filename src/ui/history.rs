//! The review page's one way to the history: it runs the CLI's own commands, with the same
//! words, where the CLI would run them. Mounted, every command goes to the daemon through
//! `.rewind/ctl` (a rollback there is recorded like any other); unmounted, reading commands run
//! here on the store opened read-only, and commands that would change something are refused
//! with a message saying they need the mount. The page never computes history its own way:
//! everything it shows is the output of one of these commands.

use std::path::Path;
use std::sync::Arc;

use crate::cli::Ctx;
use crate::command::{self, Env, Outcome};
use crate::history::History;

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

pub struct Backend {
    ctx: Ctx,
    /// Unmounted: the store, opened read-only once.
    history: Option<Arc<History>>,
}

impl Backend {
    pub fn open(ctx: Ctx) -> Result<Backend, Refusal> {
        let history = if ctx.mounted {
            None
        } else {
            Some(Arc::new(
                ctx.read_history().map_err(|f| Refusal::Failed(f.message))?,
            ))
        };
        Ok(Backend { ctx, history })
    }

    pub fn mounted(&self) -> bool {
        self.ctx.mounted
    }

    pub fn workspace(&self) -> &Path {
        &self.ctx.workspace
    }

    /// Run `rewind WORDS...` as the CLI would, and return what it printed.
    pub fn run(&self, words: &[String]) -> Result<Answer, Refusal> {
        let line = shlex::try_join(words.iter().map(String::as_str))
            .map_err(|e| Refusal::Usage(e.to_string()))?;
        let cli = command::parse_line(&line).map_err(Refusal::Usage)?;
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
        let outcome = command::run(&cli.command, &mut env)
            .ok_or_else(|| Refusal::Usage(format!("`{}` is not a history command", line)))?
            .map_err(|e| {
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
        let base = self.ctx.workspace.join(".rewind/at").join(point).join(dir);
        let entries = std::fs::read_dir(&base).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Refusal::Usage(format!("no such point or folder: {point} {dir}"))
            } else {
                Refusal::Failed(format!("{}: {e}", base.display()))
            }
        })?;
        let mut names: Vec<(String, bool)> = entries
            .filter_map(|e| e.ok())
            .map(|e| {
                let dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                (e.file_name().to_string_lossy().into_owned(), dir)
            })
            .collect();
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
