//! Where a command runs: the history it reads, the workspace as it is now, how paths given to
//! it are read, and — in the daemon only — what it may change ([`Actor`]).

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use crate::history::GcReport;
use crate::history::change::Checkpoint;
use crate::history::db::GcPolicy;
use crate::history::rollback::{OpenFiles, Plan};
use crate::history::view::View;
use crate::history::{Error, History, Name, Result, Source};

/// How a command ended (its output is already written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Done in part: a rollback that skipped or failed some paths (exit status 1).
    Partial,
    /// Nothing done: a rollback that skipped every path it would have changed (exit status 1,
    /// as it skipped paths, but not "done in part").
    Skipped,
}

/// What a rollback did.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The session the rollback's changes are recorded in.
    pub session: String,
    /// Paths that failed, and why.
    pub failed: Vec<(Vec<u8>, String)>,
}

/// What only the one writer of the store (the daemon, or a command on an unmounted
/// workspace) can do.
pub trait Actor {
    /// Record everything that has happened so far (see `Recorder::settle`).
    fn settle(&self) -> Result<()>;
    fn checkpoint(&self, name: &Name, force: bool) -> Result<Checkpoint>;
    fn gc(&self, policy: &GcPolicy) -> Result<GcReport>;
    /// Carry out a rollback plan, recorded in a new `rollback-N` session.
    fn rollback(&self, plan: &Plan) -> Result<Applied>;
    /// The files processes hold open for writing now (through the mount), and whether the
    /// data path keeps their size in the kernel.
    fn open_files(&self) -> OpenFiles;
    /// The paths of `plan` its run would make files of their own, the files having other
    /// names now (see [`rollback::detached`](crate::history::rollback::detached)).
    fn detached(&self, _plan: &Plan) -> std::collections::HashSet<Vec<u8>> {
        std::collections::HashSet::new()
    }
    /// The daemon's own answer to a plumbing command (sessions, turns, tool calls).
    fn plumbing(&self, command: &super::Command, caller: u32) -> Result<String>;
    /// The session a process's changes are recorded in (its environment, or a registration of
    /// it or an ancestor), where the daemon can tell.
    fn session_of(&self, _pid: u32) -> Option<String> {
        None
    }
}

pub struct Env<'a> {
    pub history: &'a History,
    /// The workspace as it is now (underneath the mount).
    pub source: &'a dyn Source,
    /// Whether a path is left unrecorded (`.rewindignore`).
    pub ignored: &'a dyn Fn(&[u8], bool) -> bool,
    /// The workspace's absolute path.
    pub workspace: PathBuf,
    /// The absolute directory relative paths are read from (the shell's directory, or `-C`).
    pub base: PathBuf,
    pub actor: Option<&'a dyn Actor>,
    /// The process that asked (for `session start` through ctl).
    pub caller: u32,
    /// Colour output (a terminal), and its width.
    pub color: bool,
    pub width: usize,
    pub out: &'a mut dyn Write,
}

impl<'a> Env<'a> {
    pub fn view(&self) -> View<'_> {
        View {
            history: self.history,
            source: self.source,
            ignored: self.ignored,
        }
    }

    pub fn actor(&self, what: &str) -> Result<&'a dyn Actor> {
        self.actor
            .ok_or_else(|| Error::NeedsMount(what.to_string()))
    }

    /// A path given by the user, as a workspace-relative path. Read lexically: `..` may not
    /// leave the workspace, absolute paths must be inside it, and `.rewind/` is not history.
    pub fn rel_path(&self, given: &Path) -> Result<Vec<u8>> {
        rel_path(&self.workspace, &self.base, given)
    }

    /// Write output, ending quietly if the reader went away.
    pub fn print(&mut self, text: &str) -> Result<()> {
        self.write(text.as_bytes())
    }

    /// Write bytes as they are (diffs are byte-exact).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        match self.out.write_all(bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map_err(|source| Error::Io {
                path: "<output>".into(),
                source,
            }),
        }
    }

    pub fn println(&mut self, line: &str) -> Result<()> {
        self.print(line)?;
        self.print("\n")
    }
}

/// Normalize `given` (relative to `base`) lexically and make it relative to `workspace`.
pub fn rel_path(workspace: &Path, base: &Path, given: &Path) -> Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        base.join(given)
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in joined.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => parts.clear(),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(n) => parts.push(n),
        }
    }
    let normal: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
        .chain(parts)
        .collect();
    let rel = normal.strip_prefix(workspace).map_err(|_| {
        Error::Usage(format!(
            "{} is outside the workspace {}",
            given.display(),
            workspace.display()
        ))
    })?;
    let bytes = rel.as_os_str().as_bytes().to_vec();
    if bytes.starts_with(b".rewind") && (bytes.len() == 7 || bytes[7] == b'/') {
        return Err(Error::Usage(
            ".rewind/ is rewind's control directory, not part of the history".into(),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cannot_leave_the_workspace() {
        let ws = Path::new("/home/u/proj");
        let base = Path::new("/home/u/proj/src");
        let rel = |g: &str| rel_path(ws, base, Path::new(g));
        assert_eq!(rel("main.rs").unwrap(), b"src/main.rs");
        assert_eq!(rel("../README").unwrap(), b"README");
        assert_eq!(rel("/home/u/proj/a/b").unwrap(), b"a/b");
        assert_eq!(rel("..").unwrap(), b"");
        for bad in ["../../x", "/etc/passwd", "../.rewind/ctl", "/home/u/projX"] {
            assert!(rel(bad).is_err(), "{bad}");
        }
    }
}
