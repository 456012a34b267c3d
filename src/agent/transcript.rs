//! Reading an agent's transcript at the end of a turn, to keep the conversation beside the code.
//!
//! The daemon reads it (the hook only names it), so what it reads is held to narrow rules: the
//! path must lie in the agent's own folder in a home (`HOME/.claude/…` for Claude Code,
//! `.codex` for Codex, `.gemini` for Gemini CLI, `.cursor` for Cursor; OpenCode names no
//! transcript), that home must not be in the workspace (the daemon never makes a syscall on
//! its own mount) and must belong to the workspace's owner, and the file must be a regular file
//! of that owner, reached from `/` without following any symlink. At most
//! [`MAX`] bytes are kept: the end of a longer transcript.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::Agent;

/// The most of a transcript kept per turn.
pub const MAX: u64 = 16 << 20;

/// The folder under a home where `agent` keeps its sessions, if it tells hooks about them.
pub fn folder(agent: Agent) -> Option<&'static str> {
    match agent {
        Agent::Claude => Some(".claude"),
        Agent::Codex => Some(".codex"),
        Agent::Gemini => Some(".gemini"),
        Agent::Cursor => Some(".cursor"),
        Agent::Opencode => None,
    }
}

/// Why a transcript was not read (the daemon logs it; the turn is kept without it).
#[derive(Debug, thiserror::Error)]
pub enum NotRead {
    #[error("{0} names no transcript")]
    NoTranscript(Agent),
    #[error("{}: not a plain absolute path", .0.display())]
    NotPlain(PathBuf),
    #[error("{}: not in a {folder} folder", path.display())]
    NotInFolder { path: PathBuf, folder: &'static str },
    #[error("{}: not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("{}: inside the workspace", .0.display())]
    InWorkspace(PathBuf),
    #[error("{}: {what}: {source}", path.display())]
    Open {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rustix::io::Errno,
    },
    #[error("{}: the home {} is not the workspace owner's", path.display(), home.display())]
    NotOwnersHome { path: PathBuf, home: PathBuf },
    #[error("{}: not a regular file", .0.display())]
    NotRegular(PathBuf),
    #[error("{}: not the workspace owner's file", .0.display())]
    NotOwners(PathBuf),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The transcript at `path` of `agent`, as the rules above allow, or why not.
pub fn read(agent: Agent, path: &Path, owner: u32, workspace: &Path) -> Result<Vec<u8>, NotRead> {
    let folder = folder(agent).ok_or(NotRead::NoTranscript(agent))?;
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(NotRead::NotPlain(path.into()));
    }
    // HOME/FOLDER/REST, split at the first FOLDER, before any syscall.
    let parts: Vec<Component> = path.components().collect();
    let at = parts
        .iter()
        .position(|c| c.as_os_str() == folder)
        .ok_or_else(|| NotRead::NotInFolder {
            path: path.into(),
            folder,
        })?;
    let home: PathBuf = parts[..at].iter().collect();
    let rest: PathBuf = parts[at + 1..].iter().collect();
    if rest.as_os_str().is_empty() {
        return Err(NotRead::NotAFile(path.into()));
    }
    if path.starts_with(workspace) || home.starts_with(workspace) {
        return Err(NotRead::InWorkspace(path.into()));
    }
    let io = |what: &'static str, source: rustix::io::Errno| NotRead::Open {
        path: path.into(),
        what,
        source,
    };
    // Without following symlinks: the check above is on the words of the path, and a symlink
    // in them (`/tmp/h -> WORKSPACE`) would lead the daemon into its own mount.
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("/", e))?;
    let home_fd = rustix::fs::openat2(
        &root,
        match home.strip_prefix("/") {
            Ok(rel) if !rel.as_os_str().is_empty() => rel,
            _ => Path::new("."),
        },
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| io("home (a path without symlinks)", e))?;
    let home_stat = rustix::fs::fstat(&home_fd).map_err(|e| io("home", e))?;
    if home_stat.st_uid != owner {
        return Err(NotRead::NotOwnersHome {
            path: path.into(),
            home,
        });
    }
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let agent_dir = rustix::fs::openat2(
        &home_fd,
        folder,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        beneath,
    )
    .map_err(|e| io(folder, e))?;
    // Non-blocking, so a FIFO put there cannot hold the open.
    let fd = rustix::fs::openat2(
        &agent_dir,
        &rest,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        beneath,
    )
    .map_err(|e| io("open", e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io("stat", e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(NotRead::NotRegular(path.into()));
    }
    if st.st_uid != owner {
        return Err(NotRead::NotOwners(path.into()));
    }
    let mut file = std::fs::File::from(fd);
    let size = st.st_size.max(0) as u64;
    let cut = size > MAX;
    if cut {
        file.seek(SeekFrom::Start(size - MAX))
            .map_err(|source| NotRead::Read {
                path: path.into(),
                source,
            })?;
    }
    let mut out = Vec::new();
    (&file)
        .take(MAX)
        .read_to_end(&mut out)
        .map_err(|source| NotRead::Read {
            path: path.into(),
            source,
        })?;
    if cut {
        // Start at a whole line.
        if let Some(nl) = out.iter().position(|b| *b == b'\n') {
            out.drain(..=nl);
        }
    }
    Ok(out)
}
