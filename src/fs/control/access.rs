//! Who may see what in `.rewind/` when other users can reach the mount (`--allow-other`).
//!
//! The mounting user and root see everything. Anyone else sees the README and the folders, a
//! file of the past (`at/`, `versions/`) only if they could read it both then and now: the
//! original at that path in the workspace now (every folder on the way searchable, the file
//! readable, by mode; a path that no longer exists counts as unreadable), and the version when
//! it was recorded (its recorded mode and owner, and every folder on the way as the history has
//! it at that point); and never the files that name every path or act on the workspace (`log`,
//! `status`, `sessions`, `turns`, `events`, `ctl`). Entries here are never cached by the
//! kernel, so every lookup is checked.

use super::Control;
use super::tree::Node;
use crate::fs::Caller;
use crate::history::Source;
use crate::history::change::{FileKind, FileState, Owner};

/// Read, write, execute (search) bits as `access(2)` takes them.
const READ: u32 = 4;
const SEARCH: u32 = 1;

/// The groups of a process: its own and its supplementary ones.
fn groups_of(caller: &Caller) -> Vec<u32> {
    let mut groups = vec![caller.gid];
    if let Some(status) = crate::procfs::status(caller.pid) {
        groups.extend(status.groups());
    }
    groups
}

fn permits(st: &libc::stat, uid: u32, groups: &[u32], want: u32) -> bool {
    permits_mode(st.st_mode, Owner::of(st), uid, groups, want)
}

/// Whether permission bits `mode` of a file that `owner` owns give `uid` (in `groups`) `want`.
fn permits_mode(mode: u32, owner: Owner, uid: u32, groups: &[u32], want: u32) -> bool {
    let bits = if owner.uid == uid {
        mode >> 6
    } else if groups.contains(&owner.gid) {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

/// The folders above `path`, the root left out (it is the workspace itself).
fn folders_above(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(i, b)| **b == b'/' && *i > 0)
        .map(|(i, _)| &path[..i])
}

impl Control {
    /// Whether `caller` may see `node`.
    pub(super) fn may_see(&self, caller: &Caller, node: &Node) -> bool {
        if caller.uid == 0 || caller.uid == self.owner {
            return true;
        }
        if node.is_private() {
            return false;
        }
        let Some(path) = node.workspace_path() else {
            return true;
        };
        let groups = groups_of(caller);
        // A store error while looking at the past denies.
        self.could_read(caller, &groups, path)
            && self
                .could_read_then(caller.uid, &groups, node)
                .unwrap_or(false)
    }

    /// Whether `uid` could read `path` in the workspace now.
    fn could_read(&self, caller: &Caller, groups: &[u32], path: &[u8]) -> bool {
        let stat = |p: &[u8]| self.source.lstat(p).ok();
        // Every folder on the way, the root included, must be searchable.
        let folders = std::iter::once(0).chain(
            path.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'/')
                .map(|(i, _)| i),
        );
        for end in folders {
            match stat(&path[..end]) {
                Some(st) if permits(&st, caller.uid, groups, SEARCH) => {}
                _ => return false,
            }
        }
        if path.is_empty() {
            return true;
        }
        match stat(path) {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => true,
            Some(st) => permits(&st, caller.uid, groups, READ),
            None => false,
        }
    }

    /// Whether `uid` could read the version `node` shows when it was recorded: the version's
    /// own mode and owner then, and every folder above it searchable as the history has it
    /// right after that change (`versions/PATH/ID`) or at that point (`at/POINT/PATH`). The
    /// folders of names (`versions/PATH/`) are checked as they are now only.
    fn could_read_then(
        &self,
        uid: u32,
        groups: &[u32],
        node: &Node,
    ) -> crate::history::Result<bool> {
        let view = self.view();
        let (path, at, state) = match node {
            Node::Version(path, id) => {
                let Some(c) = self.recorder.history().change(*id)? else {
                    return Ok(false);
                };
                (path, *id, c.states_of(path).1.cloned())
            }
            Node::AtPath { at, path } => (path, *at, view.access_at(path, *at)?),
            _ => return Ok(true),
        };
        for folder in folders_above(path) {
            match view.access_at(folder, at)? {
                Some(s)
                    if s.kind == FileKind::Dir && self.allowed(&s, folder, uid, groups, SEARCH) => {
                }
                _ => return Ok(false),
            }
        }
        Ok(match state {
            None => false,
            Some(s) if s.kind == FileKind::Symlink => true,
            Some(s) => self.allowed(&s, path, uid, groups, READ),
        })
    }

    /// Whether a recorded state of `path` gave `uid` `want`. A state recorded before owners
    /// were is taken as owned by whoever owns the path now (none: nobody may).
    fn allowed(&self, s: &FileState, path: &[u8], uid: u32, groups: &[u32], want: u32) -> bool {
        let owner = match s.owner {
            Some(o) => o,
            None => match self.source.lstat(path) {
                Ok(st) => Owner::of(&st),
                Err(_) => return false,
            },
        };
        permits_mode(s.mode, owner, uid, groups, want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_bits_are_read_as_the_kernel_reads_them() {
        // SAFETY: an all-zero stat is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_uid = 1000;
        st.st_gid = 100;
        st.st_mode = libc::S_IFREG | 0o640;
        assert!(permits(&st, 1000, &[1000], READ));
        assert!(permits(&st, 2000, &[100], READ));
        assert!(!permits(&st, 2000, &[200], READ));
        st.st_mode = libc::S_IFDIR | 0o700;
        assert!(!permits(&st, 2000, &[100], SEARCH));
    }
}
