//! The inode table: FUSE inode numbers to places in the workspace tree. No FUSE types here.
//!
//! A node is one backing file, keyed by its `(st_dev, st_ino)`, with every name (link) the
//! kernel knows it by: a parent inode and a name. Its path is a walk to the root through its
//! first name, so renaming a folder moves its whole subtree by changing one link, and a hard
//! link keeps working through its other names when one is removed. FUSE inode numbers come
//! from a counter and are never reused (generations are always 0). A node is dropped when the
//! kernel forgets all its lookups; the root never is.
//!
//! The table holds a node for every file the kernel keeps looked up (hundreds of thousands in
//! a big tree), so a node is small: each name is stored once, in its node (inline when short),
//! and the two indexes (by backing key, by name) hold only inode numbers, hashed from what the
//! node holds. An index entry points only at a live node that still has the key or name it was
//! hashed from: every change of a node's names or key goes through the indexes first.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

pub const ROOT: u64 = 1;

/// A backing file's identity: `(st_dev, st_ino)`.
pub type BackingKey = (u64, u64);

/// A file name, inline up to `Name::INLINE` bytes (most names), else on the heap.
#[derive(Clone, Debug)]
enum Name {
    Short(u8, [u8; Name::INLINE]),
    Long(Box<[u8]>),
}

impl Name {
    const INLINE: usize = 22;

    fn new(name: &[u8]) -> Name {
        if name.len() <= Name::INLINE {
            let mut bytes = [0; Name::INLINE];
            bytes[..name.len()].copy_from_slice(name);
            Name::Short(name.len() as u8, bytes)
        } else {
            Name::Long(name.into())
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Short(len, bytes) => &bytes[..usize::from(*len)],
            Name::Long(bytes) => bytes,
        }
    }
}

/// A name of a node: its parent's inode and its name in there.
#[derive(Clone, Debug)]
struct Link {
    parent: u64,
    name: Name,
}

impl Link {
    fn new(parent: u64, name: &[u8]) -> Link {
        Link {
            parent,
            name: Name::new(name),
        }
    }

    fn is(&self, parent: u64, name: &[u8]) -> bool {
        self.parent == parent && self.name.as_bytes() == name
    }
}

/// A node's names, in the order it got them: none (unlinked but open, or nameless), one (most
/// files, inline) or several (hard links).
#[derive(Debug)]
enum Links {
    None,
    One(Link),
    Many(Vec<Link>),
}

impl Links {
    fn as_slice(&self) -> &[Link] {
        match self {
            Links::None => &[],
            Links::One(link) => std::slice::from_ref(link),
            Links::Many(links) => links,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Link] {
        match self {
            Links::None => &mut [],
            Links::One(link) => std::slice::from_mut(link),
            Links::Many(links) => links,
        }
    }

    fn has(&self, parent: u64, name: &[u8]) -> bool {
        self.as_slice().iter().any(|l| l.is(parent, name))
    }

    fn push(&mut self, link: Link) {
        *self = match std::mem::replace(self, Links::None) {
            Links::None => Links::One(link),
            Links::One(first) => Links::Many(vec![first, link]),
            Links::Many(mut links) => {
                links.push(link);
                Links::Many(links)
            }
        };
    }

    /// Drops every copy of the name `name` in `parent`, keeping the others in order.
    fn remove(&mut self, parent: u64, name: &[u8]) {
        match self {
            Links::One(link) if link.is(parent, name) => *self = Links::None,
            Links::Many(links) => {
                links.retain(|l| !l.is(parent, name));
                if links.len() < 2 {
                    *self = match links.pop() {
                        Some(link) => Links::One(link),
                        None => Links::None,
                    };
                }
            }
            _ => {}
        }
    }
}

#[derive(Debug)]
struct Node {
    /// Every name the node is known by; none once the last is gone (unlinked but open).
    links: Links,
    key: BackingKey,
    /// Lookups the kernel holds; the node is dropped when it forgets them all.
    lookups: u64,
}

#[derive(Debug)]
pub struct InodeTable {
    nodes: HashMap<u64, Node>,
    /// The node of each backing key (not every node: a retired or renumbered one has none),
    /// hashed from its node's key.
    by_key: HashTable<u64>,
    /// The node each name leads to, with the hash of that name (a node with several names has
    /// an entry for each, so the name's hash is kept beside it to be rehashed).
    by_link: HashTable<(u64, u64)>,
    hasher: RandomState,
    next: u64,
}

impl InodeTable {
    pub fn new(root_key: BackingKey) -> InodeTable {
        let mut table = InodeTable {
            nodes: HashMap::new(),
            by_key: HashTable::new(),
            by_link: HashTable::new(),
            hasher: RandomState::new(),
            next: ROOT + 1,
        };
        table.nodes.insert(
            ROOT,
            Node {
                links: Links::None,
                key: root_key,
                lookups: 1,
            },
        );
        table.set_keyed(root_key, ROOT);
        table
    }

    /// The workspace-relative path of `ino` (empty for the root); `None` if it has none.
    pub fn path(&self, ino: u64) -> Option<Vec<u8>> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let link = self.nodes.get(&cur)?.links.as_slice().first()?;
            if names.len() > 8192 {
                return None;
            }
            names.push(link.name.as_bytes());
            cur = link.parent;
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

    /// How many names `ino` is known by (more than one: hard links).
    pub fn name_count(&self, ino: u64) -> usize {
        self.nodes.get(&ino).map_or(0, |n| n.links.as_slice().len())
    }

    /// Every path of `ino`, one for each of its names, the first name's first (each reached
    /// through the first names of the folders above it).
    pub fn paths(&self, ino: u64) -> Vec<Vec<u8>> {
        let Some(node) = self.nodes.get(&ino) else {
            return Vec::new();
        };
        node.links
            .as_slice()
            .iter()
            .filter_map(|link| {
                let mut path = self.path(link.parent)?;
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(link.name.as_bytes());
                Some(path)
            })
            .collect()
    }

    /// Make the `i`th name of `ino` (in the order of [`paths`](Self::paths)) its first, the
    /// others keeping their order.
    pub fn prefer(&mut self, ino: u64, i: usize) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            let links = node.links.as_mut_slice();
            if i < links.len() {
                links[..=i].rotate_right(1);
            }
        }
    }

    /// The parent of `ino` through its first name (the root for the root, and for nodes
    /// without a name).
    pub fn parent(&self, ino: u64) -> u64 {
        match self
            .nodes
            .get(&ino)
            .and_then(|n| n.links.as_slice().first())
        {
            Some(link) => link.parent,
            None => ROOT,
        }
    }

    pub fn key(&self, ino: u64) -> Option<BackingKey> {
        self.nodes.get(&ino).map(|n| n.key)
    }

    /// The inode of the backing file `key`, under whichever of its names the kernel knows it.
    pub fn of_key(&self, key: BackingKey) -> Option<u64> {
        let nodes = &self.nodes;
        self.by_key
            .find(self.hasher.hash_one(key), |i| {
                nodes.get(i).is_some_and(|n| n.key == key)
            })
            .copied()
    }

    /// The inode known by `name` in `parent`, if the kernel has looked it up.
    pub fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        let hash = self.hasher.hash_one((parent, name));
        let nodes = &self.nodes;
        self.by_link
            .find(hash, |&(h, i)| {
                h == hash && nodes.get(&i).is_some_and(|n| n.links.has(parent, name))
            })
            .map(|&(_, i)| i)
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
        // The name may still point at a node of a file that is gone (replaced outside our
        // view): it now names this one.
        if let Some(old) = self.child(parent, name)
            && self.nodes.get(&old).is_some_and(|n| n.key != key)
        {
            self.drop_link(old, parent, name);
        }
        if let Some(ino) = self.of_key(key) {
            let node = self.nodes.get_mut(&ino).expect("by_key points at a node");
            node.lookups += 1;
            if ino != ROOT && !node.links.has(parent, name) {
                node.links.push(Link::new(parent, name));
                self.set_named(parent, name, ino);
            }
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                links: Links::One(Link::new(parent, name)),
                key,
                lookups: 1,
            },
        );
        self.set_keyed(key, ino);
        self.set_named(parent, name, ino);
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
                links: Links::None,
                key,
                lookups: 1,
            },
        );
        self.set_keyed(key, ino);
        ino
    }

    /// `key` leads to `ino`, a node with that key.
    fn set_keyed(&mut self, key: BackingKey, ino: u64) {
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        let entry = self.by_key.entry(
            hasher.hash_one(key),
            |i| nodes.get(i).is_some_and(|n| n.key == key),
            |i| nodes.get(i).map_or(0, |n| hasher.hash_one(n.key)),
        );
        *entry.or_insert(ino).get_mut() = ino;
    }

    /// `key` no longer leads to `ino` (its node's key), if it did.
    fn unset_keyed(&mut self, key: BackingKey, ino: u64) {
        if let Ok(entry) = self
            .by_key
            .find_entry(self.hasher.hash_one(key), |i| *i == ino)
        {
            entry.remove();
        }
    }

    /// `name` in `parent` leads to `ino`, a node with that name.
    fn set_named(&mut self, parent: u64, name: &[u8], ino: u64) {
        let hash = self.hasher.hash_one((parent, name));
        let nodes = &self.nodes;
        let entry = self.by_link.entry(
            hash,
            |&(h, i)| h == hash && nodes.get(&i).is_some_and(|n| n.links.has(parent, name)),
            |&(h, _)| h,
        );
        entry.or_insert((hash, ino)).get_mut().1 = ino;
    }

    /// `name` in `parent` no longer leads to `ino`, if it did. Two entries of one node whose
    /// names hash alike are interchangeable (each finds the node only by a name it has), so
    /// the entry need not be told apart by the name itself, and the node may be gone already.
    fn unset_named(&mut self, parent: u64, name: &[u8], ino: u64) {
        let hash = self.hasher.hash_one((parent, name));
        if let Ok(entry) = self.by_link.find_entry(hash, |&e| e == (hash, ino)) {
            entry.remove();
        }
    }

    fn drop_link(&mut self, ino: u64, parent: u64, name: &[u8]) {
        self.unset_named(parent, name, ino);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.links.remove(parent, name);
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
            self.unset_keyed(node.key, ino);
            for link in node.links.as_slice() {
                self.unset_named(link.parent, link.name.as_bytes(), ino);
            }
        }
    }

    /// `name` in `parent` was renamed to `new_name` in `new_parent`. Whatever the new name
    /// named before loses that name.
    pub fn renamed(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
        let replaced = self.child(new_parent, new_name);
        if replaced.is_some() && self.child(parent, name) == replaced {
            // Two names of one file: rename(2) leaves both as they are.
            return;
        }
        if let Some(replaced) = replaced {
            self.unlinked_ino(replaced, new_parent, new_name);
        }
        let Some(ino) = self.child(parent, name) else {
            return;
        };
        self.unset_named(parent, name, ino);
        if let Some(node) = self.nodes.get_mut(&ino) {
            for l in node.links.as_mut_slice() {
                if l.is(parent, name) {
                    *l = Link::new(new_parent, new_name);
                }
            }
        }
        self.set_named(new_parent, new_name, ino);
    }

    /// `name` in `parent` and `new_name` in `new_parent` swapped (`RENAME_EXCHANGE`).
    pub fn exchanged(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
        let ino_a = self.child(parent, name);
        let ino_b = self.child(new_parent, new_name);
        if let Some(a) = ino_a {
            self.unset_named(parent, name, a);
        }
        if let Some(b) = ino_b {
            self.unset_named(new_parent, new_name, b);
        }
        let mut swapped = [ino_a, ino_b];
        if ino_a == ino_b {
            swapped[1] = None;
        }
        for ino in swapped.into_iter().flatten() {
            if let Some(node) = self.nodes.get_mut(&ino) {
                for l in node.links.as_mut_slice() {
                    if l.is(parent, name) {
                        *l = Link::new(new_parent, new_name);
                    } else if l.is(new_parent, new_name) {
                        *l = Link::new(parent, name);
                    }
                }
            }
        }
        if let Some(a) = ino_a {
            self.set_named(new_parent, new_name, a);
        }
        if let Some(b) = ino_b {
            self.set_named(parent, name, b);
        }
    }

    /// `name` in `parent` was removed (unlink or rmdir). A node that loses its last known name
    /// lives on (open files, pending forgets) without a path, and a new file that reuses its
    /// backing inode gets a new node.
    pub fn unlinked(&mut self, parent: u64, name: &[u8]) {
        if let Some(ino) = self.child(parent, name) {
            self.unlinked_ino(ino, parent, name);
        }
    }

    fn unlinked_ino(&mut self, ino: u64, parent: u64, name: &[u8]) {
        self.drop_link(ino, parent, name);
        if let Some(node) = self.nodes.get(&ino)
            && node.links.as_slice().is_empty()
        {
            let key = node.key;
            self.unset_keyed(key, ino);
        }
    }

    /// The backing file `key` was just freed (its last name removed): a file that reuses the
    /// number gets a new node. Its old node keeps its names until `unlinked` or `gone` drops
    /// them. The caller makes sure no lookup enters a key in between (`Core::reuse`).
    pub fn retire(&mut self, key: BackingKey) {
        if let Some(ino) = self.of_key(key) {
            self.unset_keyed(key, ino);
        }
    }

    /// `name` in `parent` was the last name of its file (its link count reached 0, or a
    /// folder): its node loses every name it still had.
    pub fn gone(&mut self, parent: u64, name: &[u8]) {
        let Some(ino) = self.child(parent, name) else {
            return;
        };
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        let key = node.key;
        let links = std::mem::replace(&mut node.links, Links::None);
        for link in links.as_slice() {
            self.unset_named(link.parent, link.name.as_bytes(), ino);
        }
        self.unset_keyed(key, ino);
    }

    /// Make `ino` unreachable by name, so the next lookup of any of its names makes a new node
    /// (a new inode number for the kernel); returns those names. The old node keeps them for
    /// the handles still open on it. The kernel never takes a cached regular file's size from
    /// the daemon under the writeback cache, so this is how it learns of a file rewritten
    /// underneath (a rollback).
    pub fn renumber(&mut self, ino: u64) -> Vec<(u64, Vec<u8>)> {
        let Some(node) = self.nodes.get(&ino).filter(|_| ino != ROOT) else {
            return Vec::new();
        };
        let key = node.key;
        let names: Vec<(u64, Vec<u8>)> = node
            .links
            .as_slice()
            .iter()
            .map(|l| (l.parent, l.name.as_bytes().to_vec()))
            .collect();
        self.unset_keyed(key, ino);
        for (parent, name) in &names {
            self.unset_named(*parent, name, ino);
        }
        names
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
    fn a_preferred_name_comes_first_and_the_others_keep_their_order() {
        let mut t = InodeTable::new((1, 1));
        let d = t.lookup(ROOT, b"d", (1, 2));
        let f = t.lookup(d, b"f", (1, 3));
        assert_eq!(t.lookup(ROOT, b"g", (1, 3)), f);
        assert_eq!(t.lookup(ROOT, b"h", (1, 3)), f);
        assert_eq!(t.name_count(f), 3);
        assert_eq!(t.paths(f), [b"d/f".to_vec(), b"g".to_vec(), b"h".to_vec()]);
        t.prefer(f, 2);
        assert_eq!(t.path(f).unwrap(), b"h");
        assert_eq!(t.parent(f), ROOT);
        assert_eq!(t.paths(f), [b"h".to_vec(), b"d/f".to_vec(), b"g".to_vec()]);
        // Out of range: nothing moves.
        t.prefer(f, 7);
        assert_eq!(t.path(f).unwrap(), b"h");
        // Every name still leads to it.
        assert_eq!(t.find(b"d/f"), Some(f));
        assert_eq!(t.find(b"g"), Some(f));
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
    fn a_node_is_small_and_keeps_a_short_name_inline() {
        assert!(matches!(Name::new(b"f123456.txt"), Name::Short(..)));
        assert!(matches!(
            Name::new(&[b'x'; Name::INLINE + 1]),
            Name::Long(_)
        ));
        assert_eq!(Name::new(&[b'x'; 40]).as_bytes(), [b'x'; 40]);
        assert_eq!(Name::new(b"").as_bytes(), b"");
        assert_eq!(size_of::<Name>(), 24);
        assert_eq!(size_of::<Node>(), 56, "key, lookups and one name, no more");
    }

    #[test]
    fn names_follow_a_link_rename_unlink_and_forget() {
        let long = b"a name longer than twenty-two bytes.rs";
        let mut t = InodeTable::new((1, 2));
        let d = t.lookup(ROOT, b"d", (1, 10));
        let f = t.lookup(d, long, (1, 11));
        assert_eq!(
            t.lookup(ROOT, b"g", (1, 11)),
            f,
            "a hard link is the same node"
        );
        t.renamed(d, long, d, b"h");
        assert_eq!(t.child(d, long), None);
        assert_eq!(t.child(d, b"h"), Some(f));
        assert_eq!(t.child(ROOT, b"g"), Some(f));
        assert_eq!(t.path(f).unwrap(), b"d/h");
        t.renamed(ROOT, b"g", d, long);
        assert_eq!(t.find(b"d/a name longer than twenty-two bytes.rs"), Some(f));
        assert_eq!(t.child(ROOT, b"g"), None);
        t.unlinked(d, b"h");
        assert_eq!(
            t.path(f).unwrap(),
            b"d/a name longer than twenty-two bytes.rs"
        );
        assert_eq!(t.of_key((1, 11)), Some(f));
        t.forget(f, 1);
        assert_eq!(t.child(d, long), Some(f), "one lookup still held");
        t.forget(f, 1);
        assert_eq!(t.child(d, long), None);
        assert_eq!(t.of_key((1, 11)), None);
        assert_eq!(t.len(), 2);
        let again = t.lookup(d, long, (1, 11));
        assert!(again > f);
        assert_eq!(
            t.path(again).unwrap(),
            b"d/a name longer than twenty-two bytes.rs"
        );
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

/// The table checked against a plain model of the same rules: every name kept as a map key
/// (the table before its nodes were made small), driven by random sequences of operations.
#[cfg(test)]
mod model {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::{BackingKey, InodeTable, ROOT};

    type Link = (u64, Vec<u8>);

    struct Node {
        links: Vec<Link>,
        key: BackingKey,
        lookups: u64,
    }

    struct Model {
        nodes: HashMap<u64, Node>,
        by_key: HashMap<BackingKey, u64>,
        by_link: HashMap<Link, u64>,
        next: u64,
    }

    impl Model {
        fn new(root_key: BackingKey) -> Model {
            let root = Node {
                links: Vec::new(),
                key: root_key,
                lookups: 1,
            };
            Model {
                nodes: HashMap::from([(ROOT, root)]),
                by_key: HashMap::from([(root_key, ROOT)]),
                by_link: HashMap::new(),
                next: ROOT + 1,
            }
        }

        fn path(&self, ino: u64) -> Option<Vec<u8>> {
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
            names.reverse();
            Some(names.join(&b'/'))
        }

        fn parent(&self, ino: u64) -> u64 {
            self.nodes
                .get(&ino)
                .and_then(|n| n.links.first())
                .map_or(ROOT, |l| l.0)
        }

        fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
            self.by_link.get(&(parent, name.to_vec())).copied()
        }

        fn new_node(&mut self, links: Vec<Link>, key: BackingKey) -> u64 {
            let ino = self.next;
            self.next += 1;
            for link in &links {
                self.by_link.insert(link.clone(), ino);
            }
            let lookups = 1;
            self.nodes.insert(
                ino,
                Node {
                    links,
                    key,
                    lookups,
                },
            );
            self.by_key.insert(key, ino);
            ino
        }

        fn lookup(&mut self, parent: u64, name: &[u8], key: BackingKey) -> u64 {
            let link = (parent, name.to_vec());
            if let Some(&old) = self.by_link.get(&link)
                && self.nodes[&old].key != key
            {
                self.drop_link(old, &link);
            }
            let Some(&ino) = self.by_key.get(&key) else {
                return self.new_node(vec![link], key);
            };
            let node = self.nodes.get_mut(&ino).unwrap();
            node.lookups += 1;
            if ino != ROOT && !node.links.contains(&link) {
                node.links.push(link.clone());
                self.by_link.insert(link, ino);
            }
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

        fn unlink_all(&mut self, ino: u64) -> Vec<Link> {
            let node = &self.nodes[&ino];
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

        fn forget(&mut self, ino: u64, n: u64) {
            if ino == ROOT || !self.nodes.contains_key(&ino) {
                return;
            }
            let node = self.nodes.get_mut(&ino).unwrap();
            node.lookups = node.lookups.saturating_sub(n);
            if node.lookups == 0 {
                self.unlink_all(ino);
                self.nodes.remove(&ino);
            }
        }

        fn renamed(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
            let old = (parent, name.to_vec());
            let new = (new_parent, new_name.to_vec());
            if self.by_link.contains_key(&old) && self.by_link.get(&old) == self.by_link.get(&new) {
                return;
            }
            if let Some(replaced) = self.by_link.get(&new).copied() {
                self.unlinked_ino(replaced, &new);
            }
            let Some(ino) = self.by_link.remove(&old) else {
                return;
            };
            for l in &mut self.nodes.get_mut(&ino).unwrap().links {
                if *l == old {
                    *l = new.clone();
                }
            }
            self.by_link.insert(new, ino);
        }

        fn exchanged(&mut self, parent: u64, name: &[u8], new_parent: u64, new_name: &[u8]) {
            let a = (parent, name.to_vec());
            let b = (new_parent, new_name.to_vec());
            let ino_a = self.by_link.remove(&a);
            let ino_b = self.by_link.remove(&b);
            let mut swapped = vec![ino_a, ino_b];
            swapped.dedup();
            for ino in swapped.into_iter().flatten() {
                for l in &mut self.nodes.get_mut(&ino).unwrap().links {
                    if *l == a {
                        *l = b.clone();
                    } else if *l == b {
                        *l = a.clone();
                    }
                }
            }
            if let Some(ino) = ino_a {
                self.by_link.insert(b, ino);
            }
            if let Some(ino) = ino_b {
                self.by_link.insert(a, ino);
            }
        }

        fn unlinked(&mut self, parent: u64, name: &[u8]) {
            let link = (parent, name.to_vec());
            if let Some(ino) = self.by_link.get(&link).copied() {
                self.unlinked_ino(ino, &link);
            }
        }

        fn unlinked_ino(&mut self, ino: u64, link: &Link) {
            self.drop_link(ino, link);
            let node = &self.nodes[&ino];
            if node.links.is_empty() && self.by_key.get(&node.key) == Some(&ino) {
                self.by_key.remove(&node.key);
            }
        }

        fn gone(&mut self, parent: u64, name: &[u8]) {
            if let Some(ino) = self.child(parent, name) {
                self.unlink_all(ino);
                self.nodes.get_mut(&ino).unwrap().links.clear();
            }
        }

        fn renumber(&mut self, ino: u64) -> Vec<Link> {
            if ino == ROOT || !self.nodes.contains_key(&ino) {
                return Vec::new();
            }
            self.unlink_all(ino)
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Lookup(usize, usize, u64),
        Unnamed(u64),
        Forget(usize, u64),
        Renamed(usize, usize, usize, usize),
        Exchanged(usize, usize, usize, usize),
        Unlinked(usize, usize),
        Gone(usize, usize),
        Retire(u64),
        Renumber(usize),
    }

    const NAMES: [&[u8]; 4] = [
        b"a",
        b"b",
        b"twenty-two bytes, 22 b",
        b"a name longer than twenty-two bytes.txt",
    ];

    fn op() -> impl Strategy<Value = Op> {
        let (i, n, k) = (0..12usize, 0..NAMES.len(), 10..16u64);
        prop_oneof![
            6 => (i.clone(), n.clone(), k.clone()).prop_map(|(p, n, k)| Op::Lookup(p, n, k)),
            1 => k.clone().prop_map(Op::Unnamed),
            2 => (i.clone(), 1..3u64).prop_map(|(i, n)| Op::Forget(i, n)),
            3 => (i.clone(), n.clone(), i.clone(), n.clone())
                .prop_map(|(p, n, q, m)| Op::Renamed(p, n, q, m)),
            1 => (i.clone(), n.clone(), i.clone(), n.clone())
                .prop_map(|(p, n, q, m)| Op::Exchanged(p, n, q, m)),
            2 => (i.clone(), n.clone()).prop_map(|(p, n)| Op::Unlinked(p, n)),
            1 => (i.clone(), n.clone()).prop_map(|(p, n)| Op::Gone(p, n)),
            1 => k.prop_map(Op::Retire),
            1 => i.prop_map(Op::Renumber),
        ]
    }

    proptest! {
        #[test]
        fn the_table_answers_as_the_plain_model_does(ops in proptest::collection::vec(op(), 1..64)) {
            let mut t = InodeTable::new((1, 1));
            let mut m = Model::new((1, 1));
            // Inode numbers handed out so far; ops pick parents and nodes among them.
            let mut inos = vec![ROOT];
            for op in ops {
                let ino = |i: usize| inos[i % inos.len()];
                match op {
                    Op::Lookup(p, n, k) => {
                        let (p, n) = (ino(p), NAMES[n]);
                        let got = t.lookup(p, n, (1, k));
                        prop_assert_eq!(got, m.lookup(p, n, (1, k)));
                        inos.push(got);
                    }
                    Op::Unnamed(k) => {
                        let got = t.unnamed((1, k));
                        prop_assert_eq!(got, m.new_node(Vec::new(), (1, k)));
                        inos.push(got);
                    }
                    Op::Forget(i, n) => {
                        t.forget(ino(i), n);
                        m.forget(ino(i), n);
                    }
                    Op::Renamed(p, n, q, o) => {
                        t.renamed(ino(p), NAMES[n], ino(q), NAMES[o]);
                        m.renamed(ino(p), NAMES[n], ino(q), NAMES[o]);
                    }
                    Op::Exchanged(p, n, q, o) => {
                        t.exchanged(ino(p), NAMES[n], ino(q), NAMES[o]);
                        m.exchanged(ino(p), NAMES[n], ino(q), NAMES[o]);
                    }
                    Op::Unlinked(p, n) => {
                        t.unlinked(ino(p), NAMES[n]);
                        m.unlinked(ino(p), NAMES[n]);
                    }
                    Op::Gone(p, n) => {
                        t.gone(ino(p), NAMES[n]);
                        m.gone(ino(p), NAMES[n]);
                    }
                    Op::Retire(k) => {
                        t.retire((1, k));
                        m.by_key.remove(&(1, k));
                    }
                    Op::Renumber(i) => {
                        let mut got = t.renumber(ino(i));
                        let mut want = m.renumber(ino(i));
                        got.sort();
                        want.sort();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(t.len(), m.nodes.len());
                for &i in &inos {
                    prop_assert_eq!(t.path(i), m.path(i), "path of {}", i);
                    prop_assert_eq!(t.parent(i), m.parent(i));
                    prop_assert_eq!(t.key(i), m.nodes.get(&i).map(|n| n.key));
                    for name in NAMES {
                        prop_assert_eq!(t.child(i, name), m.child(i, name));
                    }
                }
                for k in 10..16 {
                    prop_assert_eq!(t.of_key((1, k)), m.by_key.get(&(1, k)).copied());
                }
                prop_assert_eq!(t.by_key.len(), m.by_key.len(), "no stale key entries");
                prop_assert_eq!(t.by_link.len(), m.by_link.len(), "no stale name entries");
            }
        }
    }
}
