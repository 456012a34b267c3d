//! The inode table: FUSE inode numbers to places in the workspace tree. No FUSE types here.
//!
//! A node is one backing file, keyed by its `(st_dev, st_ino)`, with every name (link) the
//! kernel knows it by: a parent inode and a name. Its path is a walk to the root through its
//! first name, so renaming a folder moves its whole subtree by changing one link, and a hard
//! link keeps working through its other names when one is removed. FUSE inode numbers come
//! from a counter and are never reused (generations are always 0). A node is dropped when the
//! kernel forgets all its lookups; the root never is.

use std::collections::HashMap;

pub const ROOT: u64 = 1;

/// A backing file's identity: `(st_dev, st_ino)`.
pub type BackingKey = (u64, u64);

/// A name of a node: its parent's inode and its name in there.
type Link = (u64, Vec<u8>);

#[derive(Debug)]
struct Node {
    /// Every name the node is known by; empty once the last is gone (unlinked but open).
    links: Vec<Link>,
    key: BackingKey,
    /// Lookups the kernel holds; the node is dropped when it forgets them all.
    lookups: u64,
}

#[derive(Debug)]
pub struct InodeTable {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<BackingKey, u64>,
    by_link: HashMap<Link, u64>,
    next: u64,
}

impl InodeTable {
    pub fn new(root_key: BackingKey) -> InodeTable {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                links: Vec::new(),
                key: root_key,
                lookups: 1,
            },
        );
        InodeTable {
            nodes,
            by_key: HashMap::from([(root_key, ROOT)]),
            by_link: HashMap::new(),
            next: ROOT + 1,
        }
    }

    /// The workspace-relative path of `ino` (empty for the root); `None` if it has none.
    pub fn path(&self, ino: u64) -> Option<Vec<u8>> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let (parent, name) = self.nodes.get(&cur)?.links.first()?;
            if names.len() > 8192 {
                return None;
            }
            names.push(name);
            cur = *parent;
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

    /// The parent of `ino` through its first name (the root for the root, and for nodes
    /// without a name).
    pub fn parent(&self, ino: u64) -> u64 {
        match self.nodes.get(&ino).and_then(|n| n.links.first()) {
            Some((p, _)) => *p,
            None => ROOT,
        }
    }

    pub fn key(&self, ino: u64) -> Option<BackingKey> {
        self.nodes.get(&ino).map(|n| n.key)
    }

    /// The inode of the backing file `key`, under whichever of its names the kernel knows it.
    pub fn of_key(&self, key: BackingKey) -> Option<u64> {
        self.by_key.get(&key).copied()
    }

    /// The inode known by `name` in `parent`, if the kernel has looked it up.
    pub fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.by_link.get(&(parent, name.to_vec())).copied()
    }

    /// The inode of `path`, if the kernel knows every folder on the way.
    pub fn find(&self, path: &[u8]) -> Option<u64> {
        let mut ino = ROOT;
        if path.is_empty() {
            return Some(ROOT);
        }
        for name in path.split(|b| *b == b'/') {
            ino = self.child(ino, name)?;
        }
        Some(ino)
    }

    /// The kernel looked up `name` in `parent` and found the backing file `key`: return its
    /// inode number (creating the node if new) with one more lookup held.
    pub fn lookup(&mut self, parent: u64, name: &[u8], key: BackingKey) -> u64 {
        let link = (parent, name.to_vec());
        // The name may still point at a node of a file that is gone (replaced outside our
        // view): it now names this one.
        if let Some(&old) = self.by_link.get(&link)
            && self.nodes.get(&old).is_some_and(|n| n.key != key)
        {
            self.drop_link(old, &link);
        }
        if let Some(&ino) = self.by_key.get(&key) {
            let node = self.nodes.get_mut(&ino).expect("by_key points at a node");
            node.lookups += 1;
            if ino != ROOT && !node.links.contains(&link) {
                node.links.push(link.clone());
                self.by_link.insert(link, ino);
            }
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                links: vec![link.clone()],
                key,
                lookups: 1,
            },
        );
        self.by_key.insert(key, ino);
        self.by_link.insert(link, ino);
        ino
    }

    /// A file with no name yet (`O_TMPFILE`): a node with one lookup and no links. A `link`
    /// later gives it its first name (`lookup` of the same key).
    pub fn unnamed(&mut self, key: BackingKey) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                links: Vec::new(),
                key,
                lookups: 1,
            },
        );
        self.by_key.insert(key, ino);
        ino
    }

    fn drop_link(&mut self, ino: u64, link: &Link) {
        if self.by_link.get(link) == Some(&ino) {
            self.by_link.remove(link);
        }
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.links.retain(|l| l != link);
        }
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
            let node = self.nodes.remove(&ino).expect("present above");
            if self.by_key.get(&node.key) == Some(&ino) {
                self.by_key.remove(&node.key);
            }
            for link in node.links {
                if self.by_link.get(&link) == Some(&ino) {
                    self.by_link.remove(&link);
                }
            }
        }
    }

    /// `name` in `parent` was renamed to `new_name` in `new_parent`. Whatever the new name
    /// named before loses that name.
    pub fn renamed(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
        let old = (parent, name.to_vec());
        let new = (new_parent, new_name.to_vec());
        if self.by_link.contains_key(&old) && self.by_link.get(&old) == self.by_link.get(&new) {
            // Two names of one file: rename(2) leaves both as they are.
            return;
        }
        if let Some(replaced) = self.by_link.get(&new).copied() {
            self.unlinked_ino(replaced, &new);
        }
        let Some(ino) = self.by_link.remove(&old) else {
            return;
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            for l in &mut node.links {
                if *l == old {
                    *l = new.clone();
                }
            }
        }
        self.by_link.insert(new, ino);
    }

    /// `name` in `parent` and `new_name` in `new_parent` swapped (`RENAME_EXCHANGE`).
    pub fn exchanged(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
        let a = (parent, name.to_vec());
        let b = (new_parent, new_name.to_vec());
        let ino_a = self.by_link.remove(&a);
        let ino_b = self.by_link.remove(&b);
        for (ino, from, to) in [(ino_a, &a, &b), (ino_b, &b, &a)] {
            if let Some(ino) = ino {
                if let Some(node) = self.nodes.get_mut(&ino) {
                    for l in &mut node.links {
                        if l == from {
                            *l = to.clone();
                        }
                    }
                }
                self.by_link.insert(to.clone(), ino);
            }
        }
    }

    /// `name` in `parent` was removed (unlink or rmdir). A node that loses its last known name
    /// lives on (open files, pending forgets) without a path, and a new file that reuses its
    /// backing inode gets a new node.
    pub fn unlinked(&mut self, parent: u64, name: &[u8]) {
        let link = (parent, name.to_vec());
        if let Some(ino) = self.by_link.get(&link).copied() {
            self.unlinked_ino(ino, &link);
        }
    }

    fn unlinked_ino(&mut self, ino: u64, link: &Link) {
        self.drop_link(ino, link);
        if let Some(node) = self.nodes.get(&ino)
            && node.links.is_empty()
            && self.by_key.get(&node.key) == Some(&ino)
        {
            self.by_key.remove(&node.key);
        }
    }

    /// The backing file `key` was just freed (its last name removed): a file that reuses the
    /// number gets a new node. Its old node keeps its names until `unlinked` or `gone` drops
    /// them. The caller makes sure no lookup enters a key in between (`Core::reuse`).
    pub fn retire(&mut self, key: BackingKey) {
        self.by_key.remove(&key);
    }

    /// `name` in `parent` was the last name of its file (its link count reached 0, or a
    /// folder): its node loses every name it still had.
    pub fn gone(&mut self, parent: u64, name: &[u8]) {
        let Some(ino) = self.by_link.get(&(parent, name.to_vec())).copied() else {
            return;
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            for link in std::mem::take(&mut node.links) {
                if self.by_link.get(&link) == Some(&ino) {
                    self.by_link.remove(&link);
                }
            }
            if self.by_key.get(&node.key) == Some(&ino) {
                self.by_key.remove(&node.key);
            }
        }
    }

    /// Make `ino` unreachable by name, so the next lookup of any of its names makes a new node
    /// (a new inode number for the kernel); returns those names. The old node keeps them for
    /// the handles still open on it. The kernel never takes a cached regular file's size from
    /// the daemon under the writeback cache, so this is how it learns of a file rewritten
    /// underneath (a rollback).
    pub fn renumber(&mut self, ino: u64) -> Vec<Link> {
        let Some(node) = self.nodes.get(&ino).filter(|_| ino != ROOT) else {
            return Vec::new();
        };
        if self.by_key.get(&node.key) == Some(&ino) {
            self.by_key.remove(&node.key);
        }
        for link in &node.links {
            if self.by_link.get(link) == Some(&ino) {
                self.by_link.remove(link);
            }
        }
        node.links.clone()
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
        t.renamed(a, b"b", z, b"c");
        assert_eq!(t.path(f).unwrap(), b"z/c/f.rs");
        assert_eq!(t.find(b"z/c/f.rs"), Some(f));
        assert_eq!(t.find(b"a/b"), None);
    }

    #[test]
    fn hard_links_share_an_inode_and_survive_losing_a_name() {
        let mut t = InodeTable::new((1, 2));
        let x = t.lookup(ROOT, b"x", (1, 30));
        let y = t.lookup(ROOT, b"y", (1, 30));
        assert_eq!(x, y);
        assert_eq!(t.path(x).unwrap(), b"x");
        t.unlinked(ROOT, b"x");
        assert_eq!(
            t.path(x).unwrap(),
            b"y",
            "the other name still leads to the file"
        );
        t.unlinked(ROOT, b"y");
        assert!(t.path(x).is_none());
        // A new file reusing the backing inode number gets a new node.
        let z = t.lookup(ROOT, b"z", (1, 30));
        assert_ne!(z, x);
        t.forget(x, 2);
        assert_eq!(t.path(z).unwrap(), b"z");
    }

    #[test]
    fn a_retired_key_reused_by_a_new_file_is_a_new_node() {
        let mut t = InodeTable::new((1, 2));
        let old = t.lookup(ROOT, b"old", (1, 50));
        // `old` was unlinked underneath and its number freed; a new file got it before the
        // table heard of the unlink.
        t.retire((1, 50));
        let new = t.lookup(ROOT, b"new", (1, 50));
        assert_ne!(new, old);
        t.gone(ROOT, b"old");
        assert!(t.path(old).is_none());
        assert_eq!(t.path(new).unwrap(), b"new", "the new file keeps its name");
        assert_eq!(t.lookup(ROOT, b"new", (1, 50)), new);
    }

    #[test]
    fn a_renumbered_file_is_a_new_node_for_every_name() {
        let mut t = InodeTable::new((1, 2));
        let a = t.lookup(ROOT, b"a", (1, 60));
        assert_eq!(t.lookup(ROOT, b"b", (1, 60)), a);
        let mut names = t.renumber(a);
        names.sort();
        assert_eq!(names, [(ROOT, b"a".to_vec()), (ROOT, b"b".to_vec())]);
        assert_eq!(t.child(ROOT, b"a"), None);
        assert_eq!(
            t.path(a).unwrap(),
            b"a",
            "open handles still reach the file"
        );
        let new = t.lookup(ROOT, b"b", (1, 60));
        assert_ne!(new, a);
        assert_eq!(t.lookup(ROOT, b"a", (1, 60)), new);
        t.forget(a, 2);
        assert_eq!(t.find(b"a"), Some(new));
        assert_eq!(t.path(new).unwrap(), b"b");
    }

    #[test]
    fn forget_drops_nodes_and_numbers_are_never_reused() {
        let mut t = InodeTable::new((1, 2));
        let x = t.lookup(ROOT, b"x", (1, 30));
        t.forget(x, 1);
        assert!(t.path(x).is_none());
        assert_eq!(t.len(), 1);
        assert!(t.lookup(ROOT, b"x", (1, 30)) > x);
        t.forget(ROOT, 100);
        assert!(t.path(ROOT).is_some(), "the root is never forgotten");
    }

    #[test]
    fn rename_over_and_exchange() {
        let mut t = InodeTable::new((1, 2));
        let a = t.lookup(ROOT, b"a", (1, 40));
        let b = t.lookup(ROOT, b"b", (1, 41));
        t.exchanged(ROOT, b"a", ROOT, b"b");
        assert_eq!(t.path(a).unwrap(), b"b");
        assert_eq!(t.path(b).unwrap(), b"a");
        t.renamed(ROOT, b"a", ROOT, b"b");
        assert_eq!(t.path(b).unwrap(), b"b");
        assert!(t.path(a).is_none(), "replaced by the rename");
    }
}
