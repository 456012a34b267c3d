//! The control directory `.rewind/`: reachable by path from the workspace root, never listed
//! by its `readdir`. Its nodes are a typed tree ([`tree`]); who may see which is [`access`];
//! `events` is served without holding FUSE workers ([`events`]); `ctl` runs commands on a
//! thread of their own ([`ctl`]).
//!
//! Virtual inode numbers and handles live above [`BASE`], so neither collides with real ones.
//! Contents are made when a file is opened, so a reader sees one consistent snapshot, and
//! served with direct I/O. Nothing here is cached by the kernel (entries and attributes have a
//! TTL of zero): names appear on their own (a new checkpoint under `at/`), and every lookup
//! is checked against the caller.

mod access;
mod ctl;
pub use ctl::{NOTHING_DONE, PARTIAL};
mod events;

pub use events::stop_readers;
mod tree;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, PollEvents, PollNotifier,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyWrite, Request,
};

use super::attr::from_ns;
use super::backing::Backing;
use super::handle::HandleTable;
use super::inode::ROOT;
use super::{Caller, Core, MountState};
use crate::history::view::View;
use crate::history::{AsRecorded, Error, Recorder};
pub use tree::Node;

pub const NAME: &[u8] = b".rewind";
/// Virtual inode numbers start here, far above any counter value the inode table reaches.
pub const BASE: u64 = 1 << 62;

/// Whether `name` in `parent` is the control directory itself.
pub fn is_entry(parent: u64, name: &OsStr) -> bool {
    parent == ROOT && name.as_bytes() == NAME
}

/// The error for making something in the control directory (or making `.rewind` itself).
pub fn refuse_change(parent: u64) -> Errno {
    if Control::is_virtual(parent) {
        Errno::EROFS
    } else {
        Errno::EEXIST
    }
}

/// The error for removing or renaming something in it (or it).
pub fn refuse_removal(parent: u64) -> Errno {
    if Control::is_virtual(parent) {
        Errno::EROFS
    } else {
        Errno::EBUSY
    }
}

/// The error a failed lookup or read reports.
fn ctl_errno(e: Error) -> Errno {
    match e {
        Error::Io { source, .. } => Errno::from(source),
        Error::NotAFolder => Errno::ENOTDIR,
        Error::NotASymlink => Errno::EINVAL,
        Error::Store(_) => Errno::EIO,
        e if !e.is_usage() => Errno::EIO,
        _ => Errno::ENOENT,
    }
}

/// Whether a path (a folder, with `true`) is left unrecorded.
type Ignored = dyn Fn(&[u8], bool) -> bool + Send + Sync;

/// An open file of the control directory: what reads return (made at open, or the output of
/// the last `ctl` command) and how far the reader got.
struct Handle {
    node: Node,
    buf: Mutex<(Vec<u8>, usize)>,
    /// `ctl`: the beginning of a command line written in pieces, and the offset it was
    /// written at ([`held_back`]).
    line: Mutex<(Vec<u8>, u64)>,
}

/// Whether a write to `ctl` is only the beginning of a line: stdio (a shell's `echo`, a
/// `printf`) writes a long line in pieces of whole pages, so a write that is a whole number of
/// pages and does not end the line waits for the rest (or for a read, or the close).
fn held_back(data: &[u8]) -> bool {
    const PAGE: usize = 4096;
    !data.is_empty() && data.len().is_multiple_of(PAGE) && !data.ends_with(b"\n")
}

/// An open folder of the control directory.
struct Dir {
    entries: Vec<(Vec<u8>, u64, FileType)>,
}

pub struct Control {
    recorder: Arc<Recorder>,
    source: Arc<Backing>,
    /// The workspace as mounted.
    workspace: PathBuf,
    state: Arc<MountState>,
    /// The mounting user: it (and root) see everything.
    owner: u32,
    /// When the mount started: the times of virtual files.
    started: SystemTime,
    core: OnceLock<Arc<Core>>,
    nodes: Mutex<(HashMap<Node, u64>, HashMap<u64, Node>)>,
    handles: HandleTable<Handle>,
    dirs: HandleTable<Dir>,
    events: events::Events,
    commands: ctl::Commands,
    progress: Arc<ctl::Progress>,
    /// Whether a path is left unrecorded (for views of the past).
    ignored: Box<Ignored>,
    /// The live tree for views of the past: `source` without held-back creates.
    recorded: AsRecorded,
}

impl Control {
    pub fn new(
        recorder: Arc<Recorder>,
        source: Arc<Backing>,
        workspace: PathBuf,
        state: Arc<MountState>,
    ) -> Control {
        let rules = recorder.clone();
        Control {
            ignored: Box::new(move |path, dir| rules.ignores(path, dir)),
            recorded: AsRecorded {
                recorder: recorder.clone(),
                source: source.clone(),
            },
            events: events::Events::start(&recorder),
            recorder,
            source,
            workspace,
            state,
            owner: rustix::process::geteuid().as_raw(),
            started: SystemTime::now(),
            core: OnceLock::new(),
            nodes: Mutex::new((HashMap::new(), HashMap::new())),
            handles: HandleTable::starting_at(BASE),
            dirs: HandleTable::starting_at(BASE),
            commands: ctl::Commands::default(),
            progress: Default::default(),
        }
    }

    /// Give the control directory the filesystem's core (rollbacks act through it).
    pub(super) fn attach(&self, core: Arc<Core>) {
        let _ = self.core.set(core);
    }

    pub fn is_virtual(ino: u64) -> bool {
        ino >= BASE
    }

    /// The past, over the live tree as recorded so far.
    fn view(&self) -> View<'_> {
        View {
            history: self.recorder.history(),
            source: &self.recorded,
            ignored: &*self.ignored,
        }
    }

    /// [`view`](Self::view) once what has happened is recorded (held-back creates aside).
    fn settled_view(&self) -> crate::history::Result<View<'_>> {
        self.recorder.settle_for_views()?;
        Ok(self.view())
    }

    /// The inode number of a node (allocated on first use; the table only grows with what was
    /// looked at).
    fn ino(&self, node: Node) -> u64 {
        let mut t = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&ino) = t.0.get(&node) {
            return ino;
        }
        let ino = BASE + t.1.len() as u64;
        t.0.insert(node.clone(), ino);
        t.1.insert(ino, node);
        ino
    }

    fn node(&self, ino: u64) -> Result<Node, Errno> {
        if ino == ROOT {
            return Err(Errno::ENOENT);
        }
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .get(&ino)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn attr(&self, node: &Node) -> Result<FileAttr, Errno> {
        let ino = self.ino(node.clone());
        let mut rdev = 0;
        let (kind, perm, size) = match self.kind(node).map_err(ctl_errno)? {
            tree::Kind::Dir => (FileType::Directory, 0o555, 0),
            tree::Kind::Symlink { size } => (FileType::Symlink, 0o777, size),
            tree::Kind::File { size, writable } => (
                FileType::RegularFile,
                if writable { 0o600 } else { 0o444 },
                size,
            ),
            tree::Kind::Special(special) => {
                rdev = special.rdev() as u32;
                (special_type(special), 0o444, 0)
            }
        };
        let perm = match self.past_state(node) {
            // A device of the past is shown with its number, and opened by no one but root:
            // its owner here is the mount's, not the device's.
            _ if matches!(kind, FileType::CharDevice | FileType::BlockDevice) => 0,
            Some(s) if kind != FileType::Symlink => (s.mode & 0o555) as u16,
            _ if node.is_private() => perm & 0o700,
            _ => perm,
        };
        let time = self.node_time(node).map_or(self.started, from_ns);
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.owner,
            gid: rustix::process::getegid().as_raw(),
            rdev,
            blksize: 4096,
            flags: 0,
        })
    }

    /// The node at `ino` if `caller` may see it.
    fn visible(&self, caller: &Caller, ino: INodeNo) -> Result<Node, Errno> {
        let node = self.node(ino.0)?;
        if !self.may_see(caller, &node) {
            return Err(Errno::EACCES);
        }
        Ok(node)
    }

    // ---- FUSE requests ---------------------------------------------------------------------

    pub(super) fn lookup(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<FileAttr, Errno> {
        let caller = Caller::of(req);
        if parent.0 == ROOT {
            return self.attr(&Node::Dir);
        }
        let parent = self.visible(&caller, parent)?;
        let child = self
            .child(&parent, name.as_bytes())
            .map_err(ctl_errno)?
            .ok_or(Errno::ENOENT)?;
        if !self.may_see(&caller, &child) {
            return Err(Errno::EACCES);
        }
        self.attr(&child)
    }

    pub(super) fn getattr(&self, req: &Request, ino: INodeNo) -> Result<FileAttr, Errno> {
        let node = self.node(ino.0)?;
        // Attributes are as visible as on disk (a file in a folder one cannot search is not
        // reached, so nothing more is checked here); contents are what is checked.
        let _ = req;
        self.attr(&node)
    }

    pub(super) fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<FileAttr, Errno> {
        let node = self.visible(&Caller::of(req), ino)?;
        // `> .rewind/ctl` truncates, and under the writeback cache (a mount without
        // passthrough) the kernel sets the times of a file written at its close: both are taken
        // and change nothing (`close()` of a command written through a plain user's mount
        // failed with `EROFS`). Nothing else in the control directory changes.
        let size_or_times = mode.is_none() && uid.is_none() && gid.is_none();
        if node == Node::Ctl && size_or_times {
            return self.attr(&node);
        }
        Err(Errno::EROFS)
    }

    pub(super) fn readlink(&self, req: &Request, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let node = self.visible(&Caller::of(req), ino)?;
        tree_readlink(self, &node)
    }

    pub(super) fn open(&self, req: &Request, ino: INodeNo, flags: i32) -> Result<u64, Errno> {
        let node = self.visible(&Caller::of(req), ino)?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && node != Node::Ctl {
            return Err(Errno::EROFS);
        }
        if matches!(self.kind(&node).map_err(ctl_errno)?, tree::Kind::Dir) {
            return Err(Errno::EISDIR);
        }
        let content = match &node {
            Node::Ctl | Node::Events => Vec::new(),
            n => self.content(n).map_err(|e| {
                tracing::warn!("cannot make .rewind content: {e}");
                ctl_errno(e)
            })?,
        };
        let is_events = node == Node::Events;
        let fh = self.handles.insert(Handle {
            node,
            buf: Mutex::new((content, 0)),
            line: Mutex::new((Vec::new(), 0)),
        });
        if is_events {
            self.events.open(fh, self.recorder.subscribe());
        }
        Ok(fh)
    }

    pub(super) fn read(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let Some(h) = self.handles.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        if h.node == Node::Events {
            return self.events.read(fh.0, size, req.pid(), reply);
        }
        // A line still waiting for its end is all there is: run it, and answer from its output.
        let held = std::mem::take(&mut h.line.lock().unwrap_or_else(|e| e.into_inner()).0);
        if h.node == Node::Ctl && !held.is_empty() {
            let Some(job) = self.job(req, held) else {
                return reply.error(Errno::EIO);
            };
            return self.commands.run(job, move |output, _| {
                let mut buf = h.buf.lock().unwrap_or_else(|e| e.into_inner());
                let end = (size as usize).min(output.len());
                reply.data(&output[..end]);
                *buf = (output, end);
            });
        }
        let mut buf = h.buf.lock().unwrap_or_else(|e| e.into_inner());
        // ctl is read after a write on the same file: its output starts at 0 whatever offset
        // the write left; everything else is read by offset.
        let start = if h.node == Node::Ctl {
            buf.1
        } else {
            offset as usize
        };
        let start = start.min(buf.0.len());
        let end = (start + size as usize).min(buf.0.len());
        let chunk = buf.0[start..end].to_vec();
        if h.node == Node::Ctl {
            buf.1 = end;
        }
        drop(buf);
        reply.data(&chunk);
    }

    pub(super) fn write(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let Some(h) = self.handles.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        if h.node != Node::Ctl {
            return reply.error(Errno::EROFS);
        }
        let written = data.len() as u32;
        let line = {
            let mut held = h.line.lock().unwrap_or_else(|e| e.into_inner());
            // The rest of a line held back goes on where it ended; any other write begins anew.
            if held.0.is_empty() || held.1 + held.0.len() as u64 != offset {
                *held = (Vec::new(), offset);
            }
            held.0.extend_from_slice(data);
            if held_back(data) && held.0.len() <= ctl::LINE_MAX {
                return reply.written(written);
            }
            std::mem::take(&mut held.0)
        };
        let Some(job) = self.job(req, line) else {
            return reply.error(Errno::EIO);
        };
        self.commands.run(job, move |output, result| {
            *h.buf.lock().unwrap_or_else(|e| e.into_inner()) = (output, 0);
            match result {
                Ok(()) => reply.written(written),
                Err(e) => reply.error(e),
            }
        });
    }

    /// A command line written to `ctl`, to run.
    fn job(&self, req: &Request, line: Vec<u8>) -> Option<ctl::Job> {
        Some(ctl::Job {
            recorder: self.recorder.clone(),
            source: self.source.clone(),
            workspace: self.workspace.clone(),
            core: self.core.get().cloned()?,
            caller: req.pid(),
            progress: self.progress.clone(),
            line,
        })
    }

    pub(super) fn release(&self, req: &Request, fh: FileHandle) {
        let Some(h) = self.handles.remove(fh.0) else {
            return;
        };
        if h.node == Node::Events {
            self.events.release(fh.0);
        }
        // A line held back for its end that nobody read: it was the whole line.
        let held = std::mem::take(&mut h.line.lock().unwrap_or_else(|e| e.into_inner()).0);
        if h.node == Node::Ctl
            && !held.is_empty()
            && let Some(job) = self.job(req, held)
        {
            self.commands.run(job, |_, _| {});
        }
    }

    pub(super) fn poll(&self, fh: FileHandle, ph: PollNotifier) -> PollEvents {
        match self.handles.get(fh.0) {
            Some(h) if h.node == Node::Events => self.events.poll(fh.0, ph),
            _ => PollEvents::POLLIN | PollEvents::POLLRDNORM | PollEvents::POLLOUT,
        }
    }

    pub(super) fn opendir(&self, req: &Request, ino: INodeNo) -> Result<u64, Errno> {
        let node = self.visible(&Caller::of(req), ino)?;
        let mut entries = vec![
            (b".".to_vec(), ino.0, FileType::Directory),
            (b"..".to_vec(), ino.0, FileType::Directory),
        ];
        for (name, child) in self.list(&node).map_err(ctl_errno)? {
            let child_ino = self.ino(child.clone());
            let kind = match self.kind(&child) {
                Ok(tree::Kind::Dir) => FileType::Directory,
                Ok(tree::Kind::Symlink { .. }) => FileType::Symlink,
                Ok(tree::Kind::Special(special)) => special_type(special),
                _ => FileType::RegularFile,
            };
            entries.push((name, child_ino, kind));
        }
        Ok(self.dirs.insert(Dir { entries }))
    }

    pub(super) fn readdir(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(dir) = self.dirs.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (name, ino, kind)) in dir.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    pub(super) fn readdirplus(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let caller = Caller::of(req);
        let Some(dir) = self.dirs.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (name, ino, _)) in dir.entries.iter().enumerate().skip(offset as usize) {
            let Ok(node) = self.node(*ino) else { continue };
            let Ok(a) = self.attr(&node) else { continue };
            // Entries the caller may not see are listed without attributes (inode 0): the
            // name, as in a folder one can read but not search.
            let (ino, a) = if name == b"." || name == b".." || self.may_see(&caller, &node) {
                (*ino, a)
            } else {
                (0, super::attr::none())
            };
            if reply.add(
                INodeNo(ino),
                i as u64 + 1,
                OsStr::from_bytes(name),
                &std::time::Duration::ZERO,
                &a,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    pub(super) fn releasedir(&self, fh: FileHandle) {
        self.dirs.remove(fh.0);
    }

    /// The output of a command run for a file's content (`turns/S/N/diff`): it runs as the
    /// `.rewind/ctl` line it would be written as, and a refusal is the content, as there.
    fn run_for_content(
        &self,
        command: &crate::command::Command,
    ) -> crate::history::Result<Vec<u8>> {
        let Some(core) = self.core.get().cloned() else {
            return Ok(Vec::new());
        };
        let line = match command.line() {
            Ok(line) => line,
            Err(e) => return Ok(format!("error: {e}\n").into_bytes()),
        };
        let job = ctl::Job {
            recorder: self.recorder.clone(),
            source: self.source.clone(),
            workspace: self.workspace.clone(),
            core,
            caller: std::process::id(),
            progress: self.progress.clone(),
            line: line.as_bytes().to_vec(),
        };
        Ok(job.execute().0)
    }
}

fn tree_readlink(c: &Control, node: &Node) -> Result<Vec<u8>, Errno> {
    c.past_link(node).map_err(ctl_errno)
}

/// The type a FIFO, socket or device of the past shows as.
fn special_type(special: crate::history::change::Node) -> FileType {
    use crate::history::change::Node as Special;
    match special {
        Special::Fifo => FileType::NamedPipe,
        Special::Socket => FileType::Socket,
        Special::Char(_) => FileType::CharDevice,
        Special::Block(_) => FileType::BlockDevice,
        Special::Unknown => FileType::RegularFile,
    }
}
