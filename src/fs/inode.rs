//! The inode table: FUSE inode numbers to places in the workspace tree.
//!
//! Each node knows its parent and its name, so a path is a walk to the root and renaming a
//! directory moves its whole subtree in O(1). Nodes are keyed by the backing file's
//! `(st_dev, st_ino)` too, so hard links share one FUSE inode. FUSE inode numbers are never
//! reused (a counter), so generations are always 0. No FUSE types here.

use std::collections::HashMap;

pub const ROOT: u64 = 1;

/// A backing file's identity: `(st_dev, st_ino)`.
pub type BackingKey = (u64, u64);

#[derive(Debug)]
struct Node {
    /// 0 once the name is gone (unlinked), so the node has no path any more.
    parent: u64,
    name: Vec<u8>,
    key: BackingKey,
    /// Lookups the kernel holds; the node is dropped when it forgets them all.
    lookups: u64,
}

#[derive(Debug)]
pub struct InodeTable {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<BackingKey, u64>,
    next: u64,
}

impl InodeTable {
    pub fn new(root_key: BackingKey) -> InodeTable {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: Vec::new(),
                key: root_key,
                lookups: 1,
            },
        );
        InodeTable {
            nodes,
            by_key: HashMap::from([(root_key, ROOT)]),
            next: ROOT + 1,
        }
    }

    /// The workspace-relative path of `ino` (empty for the root); `None` if it has none.
    pub fn path(&self, ino: u64) -> Option<Vec<u8>> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let node = self.nodes.get(&cur)?;
            if node.parent == 0 || names.len() > 4096 {
                return None;
            }
            names.push(&node.name);
            cur = node.parent;
        }
        let mut path = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for (i, name) in names.iter().rev().enumerate() {
            if i > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(name);
        }
        Some(path)
    }

    /// The parent of `ino` (the root is its own parent; unknown or unlinked nodes report the root).
    pub fn parent(&self, ino: u64) -> u64 {
        match self.nodes.get(&ino) {
            Some(n) if n.parent != 0 => n.parent,
            _ => ROOT,
        }
    }

    pub fn key(&self, ino: u64) -> Option<BackingKey> {
        self.nodes.get(&ino).map(|n| n.key)
    }

    /// The kernel looked up `name` in `parent` and found the backing file `key`: return its
    /// inode number (creating the node if new) with one more lookup held.
    pub fn lookup(&mut self, parent: u64, name: &[u8], key: BackingKey) -> u64 {
        if let Some(&ino) = self.by_key.get(&key) {
            let node = self.nodes.get_mut(&ino).expect("by_key points at a node");
            node.lookups += 1;
            if ino != ROOT {
                // A hard link (or a stale name): the latest name used is the one we report.
                node.parent = parent;
                node.name = name.to_vec();
            }
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_vec(),
                key,
                lookups: 1,
            },
        );
        self.by_key.insert(key, ino);
        ino
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            let key = node.key;
            self.nodes.remove(&ino);
            if self.by_key.get(&key) == Some(&ino) {
                self.by_key.remove(&key);
            }
        }
    }

    /// The backing file `key` now lives at `name` in `parent` (after a rename).
    pub fn moved(&mut self, key: BackingKey, parent: u64, name: &[u8]) {
        if let Some(&ino) = self.by_key.get(&key) {
            let node = self.nodes.get_mut(&ino).expect("by_key points at a node");
            node.parent = parent;
            node.name = name.to_vec();
        }
    }

    /// The last name of backing file `key` is gone. Its node lives on (open files, pending
    /// forgets) without a path, and a new file that reuses the backing inode gets a new node.
    pub fn removed(&mut self, key: BackingKey) {
        if let Some(ino) = self.by_key.remove(&key)
            && let Some(node) = self.nodes.get_mut(&ino)
        {
            node.parent = 0;
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_renames_of_whole_subtrees() {
        let mut t = InodeTable::new((1, 2));
        let a = t.lookup(ROOT, b"a", (1, 10));
        let b = t.lookup(a, b"b", (1, 11));
        let f = t.lookup(b, b"f.rs", (1, 12));
        assert_eq!(t.path(f).unwrap(), b"a/b/f.rs");
        assert_eq!(t.path(ROOT).unwrap(), b"");
        let z = t.lookup(ROOT, b"z", (1, 20));
        t.moved((1, 11), z, b"c");
        assert_eq!(t.path(f).unwrap(), b"z/c/f.rs");
    }

    #[test]
    fn hard_links_share_an_inode_and_forget_drops_nodes() {
        let mut t = InodeTable::new((1, 2));
        let x = t.lookup(ROOT, b"x", (1, 30));
        let y = t.lookup(ROOT, b"y", (1, 30));
        assert_eq!(x, y);
        assert_eq!(t.path(x).unwrap(), b"y");
        t.forget(x, 1);
        assert!(t.path(x).is_some());
        t.forget(x, 1);
        assert!(t.path(x).is_none());
        assert_eq!(t.len(), 1);
        // A new node never reuses an old number.
        assert!(t.lookup(ROOT, b"x", (1, 30)) > x);
    }

    #[test]
    fn removed_nodes_lose_their_path_and_their_backing_inode_can_be_reused() {
        let mut t = InodeTable::new((1, 2));
        let d = t.lookup(ROOT, b"d", (1, 40));
        let f = t.lookup(d, b"f", (1, 41));
        t.removed((1, 41));
        assert!(t.path(f).is_none());
        let g = t.lookup(d, b"g", (1, 41));
        assert_ne!(f, g);
        assert_eq!(t.path(g).unwrap(), b"d/g");
        t.forget(f, 1);
        assert_eq!(
            t.path(g).unwrap(),
            b"d/g",
            "forgetting the old node leaves the new one"
        );
        t.forget(ROOT, 100);
        assert!(t.path(ROOT).is_some(), "the root is never forgotten");
    }
}
