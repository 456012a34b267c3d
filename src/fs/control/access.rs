//! Who may see what in `.rewind/` when other users can reach the mount (`--allow-other`).
//!
//! The mounting user and root see everything. Anyone else sees the README and the folders, a
//! file of the past (`at/`, `versions/`) only if they could read the original at that path in
//! the workspace now (every folder on the way searchable, the file readable, by mode; a path
//! that no longer exists counts as unreadable), and never the files that name every path or
//! act on the workspace (`log`, `status`, `sessions`, `turns`, `events`, `ctl`). Entries here
//! are never cached by the kernel, so every lookup is checked.

use super::Control;
use super::tree::Node;
use crate::fs::Caller;
use crate::history::Source;

/// Read, write, execute (search) bits as `access(2)` takes them.
const READ: u32 = 4;
const SEARCH: u32 = 1;

/// The groups of a process: its own and its supplementary ones.
fn groups_of(caller: &Caller) -> Vec<u32> {
    let mut groups = vec![caller.gid];
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", caller.pid))
        && let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:"))
    {
        groups.extend(
            line.split_whitespace()
                .filter_map(|g| g.parse::<u32>().ok()),
        );
    }
    groups
}

fn permits(st: &libc::stat, uid: u32, groups: &[u32], want: u32) -> bool {
    let bits = if st.st_uid == uid {
        st.st_mode >> 6
    } else if groups.contains(&st.st_gid) {
        st.st_mode >> 3
    } else {
        st.st_mode
    } & 7;
    bits & want == want
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
        match node.workspace_path() {
            Some(path) => self.could_read(caller, path),
            None => true,
        }
    }

    /// Whether `caller` could read `path` in the workspace now.
    fn could_read(&self, caller: &Caller, path: &[u8]) -> bool {
        let groups = groups_of(caller);
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
                Some(st) if permits(&st, caller.uid, &groups, SEARCH) => {}
                _ => return false,
            }
        }
        if path.is_empty() {
            return true;
        }
        match stat(path) {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => true,
            Some(st) => permits(&st, caller.uid, &groups, READ),
            None => false,
        }
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
