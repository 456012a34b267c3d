//! The names of hard-linked files. FUSE tells the daemon which inode a write goes to, never by
//! which name, so a change to a file with several names is recorded under the one the mount
//! knows it by and carries the others (`Change::links`): `rewind log NAME` of any of them
//! shows it, and a rollback of any of them puts the shared content back in place.
//!
//! Names are learnt from the scan at mount (every recorded path) and kept up to date by link,
//! unlink and rename. Only files with more than one name are kept.

use std::collections::{BTreeSet, HashMap};

use super::{Key, Recorder, lock};
use crate::history::change::Seen;

#[derive(Default)]
pub(super) struct Links {
    names: HashMap<Key, BTreeSet<Vec<u8>>>,
}

impl Links {
    pub(super) fn add(&mut self, key: Key, path: &[u8]) {
        self.names.entry(key).or_default().insert(path.to_vec());
    }

    pub(super) fn remove(&mut self, key: Key, path: &[u8]) {
        if let Some(names) = self.names.get_mut(&key) {
            names.remove(path);
            if names.len() <= 1 {
                self.names.remove(&key);
            }
        }
    }

    /// Every name `key` is known by, if it has several.
    pub(super) fn names_of(&self, key: Key) -> Option<BTreeSet<Vec<u8>>> {
        self.names.get(&key).cloned()
    }

    /// Put back what [`names_of`](Links::names_of) said.
    pub(super) fn set(&mut self, key: Key, names: Option<BTreeSet<Vec<u8>>>) {
        match names {
            Some(names) => self.names.insert(key, names),
            None => self.names.remove(&key),
        };
    }

    pub(super) fn moved(&mut self, key: Key, from: &[u8], to: &[u8]) {
        if let Some(names) = self.names.get_mut(&key)
            && names.remove(from)
        {
            names.insert(to.to_vec());
        }
    }

    /// A folder was renamed: names below it move with it. With `exchange`
    /// (`RENAME_EXCHANGE`), names below `to` move below `from` at the same time.
    pub(super) fn moved_dir(&mut self, from: &[u8], to: &[u8], exchange: bool) {
        for names in self.names.values_mut() {
            let moved: Vec<(Vec<u8>, Vec<u8>)> = names
                .iter()
                .filter_map(|n| {
                    let new = moved_below(n, from, to)
                        .or_else(|| exchange.then(|| moved_below(n, to, from)).flatten())?;
                    Some((n.clone(), new))
                })
                .collect();
            for (old, _) in &moved {
                names.remove(old);
            }
            names.extend(moved.into_iter().map(|(_, new)| new));
        }
    }

    pub(super) fn others(&self, key: Key, path: &[u8]) -> Vec<Vec<u8>> {
        self.names
            .get(&key)
            .map(|names| names.iter().filter(|n| *n != path).cloned().collect())
            .unwrap_or_default()
    }

    /// Every name of the file `key`, if it has several.
    fn group(&self, key: Key) -> Option<Vec<Vec<u8>>> {
        self.names
            .get(&key)
            .filter(|names| names.len() > 1)
            .map(|names| names.iter().cloned().collect())
    }

    /// Every name of each file with several names that has a name below one of `dirs`.
    fn groups_below(&self, dirs: &[&[u8]]) -> Vec<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<Vec<u8>>> = self
            .names
            .values()
            .filter(|names| names.len() > 1)
            .filter(|names| {
                names.iter().any(|n| {
                    dirs.iter()
                        .any(|d| n.starts_with(d) && n.get(d.len()) == Some(&b'/'))
                })
            })
            .map(|names| names.iter().cloned().collect())
            .collect();
        out.sort();
        out
    }

    fn contains(&self, key: Key, path: &[u8]) -> bool {
        self.names.get(&key).is_some_and(|n| n.contains(path))
    }
}

/// `path` with folder `from` above it replaced by `to`, if `from` is above it.
pub(super) fn moved_below(path: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if path.starts_with(from) && path.get(from.len()) == Some(&b'/') {
        let mut new = to.to_vec();
        new.extend_from_slice(&path[from.len()..]);
        Some(new)
    } else {
        None
    }
}

impl Recorder {
    /// The other names of the file `key`, which `path` names.
    /// The other names the file at `path` (whose stat is `st`) has now, as recorded.
    pub fn names_of(&self, path: &[u8], st: &libc::stat) -> Vec<Vec<u8>> {
        self.other_names(super::capture::key_of(st), path)
    }

    pub(super) fn other_names(&self, key: Key, path: &[u8]) -> Vec<Vec<u8>> {
        lock(&self.links).others(key, path)
    }

    /// The hard-linked files a rename of `src` (`src_st`) to `dst` (`dst_st`, if it exists)
    /// takes a name from, each with every name it has now (before the rename): a file leaves
    /// `src` and one is replaced at `dst` (or moved, in an exchange); a folder takes every
    /// name below it. What [`Change::groups`](crate::history::Change::groups) keeps.
    pub(super) fn groups_renamed(
        &self,
        src: &[u8],
        src_st: &libc::stat,
        dst: &[u8],
        dst_st: Option<&libc::stat>,
        exchange: bool,
    ) -> Vec<Vec<Vec<u8>>> {
        let is_dir = |st: &libc::stat| st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let links = lock(&self.links);
        let dst_dir = exchange && dst_st.is_some_and(is_dir);
        if is_dir(src_st) || dst_dir {
            let mut dirs = vec![src];
            if exchange {
                dirs.push(dst);
            }
            return links.groups_below(&dirs);
        }
        let src_key = super::key_of(src_st);
        let dst_key = dst_st.filter(|st| !is_dir(st)).map(super::key_of);
        if dst_key == Some(src_key) {
            // Two names of one file: rename(2) leaves both.
            return Vec::new();
        }
        [Some(src_key), dst_key]
            .into_iter()
            .flatten()
            .filter_map(|k| links.group(k))
            .collect()
    }

    /// Whether `a` and `b` are both names of the file `key`.
    pub(super) fn same_file(&self, key: Key, a: &[u8], b: &[u8]) -> bool {
        let links = lock(&self.links);
        links.contains(key, a) && links.contains(key, b)
    }

    /// The manifest entries for a change to the file at `path` whose other names are `links`:
    /// one file, so one stat for every recorded name, or the next mount's scan would take the
    /// other names' new content or mode for a change made while unmounted.
    pub(super) fn manifest_of_names(
        &self,
        path: &[u8],
        links: &[Vec<u8>],
        seen: Seen,
    ) -> Vec<(Vec<u8>, Option<Seen>)> {
        std::iter::once(path.to_vec())
            .chain(links.iter().filter(|l| self.records(l, false)).cloned())
            .map(|p| (p, Some(seen.clone())))
            .collect()
    }

    /// A file with several names was seen at `path`.
    pub(super) fn note_name(&self, st: &libc::stat, path: &[u8]) {
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 {
            lock(&self.links).add(super::key_of(st), path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_links_unlinks_and_renames() {
        let mut l = Links::default();
        l.add((1, 5), b"a");
        l.add((1, 5), b"d/c");
        assert_eq!(l.others((1, 5), b"a"), vec![b"d/c".to_vec()]);
        l.moved_dir(b"d", b"e", false);
        assert_eq!(l.others((1, 5), b"a"), vec![b"e/c".to_vec()]);
        l.add((1, 6), b"f/x");
        l.add((1, 6), b"e/x");
        l.moved_dir(b"e", b"f", true);
        assert_eq!(l.others((1, 5), b"a"), vec![b"f/c".to_vec()]);
        assert_eq!(l.others((1, 6), b"f/x"), vec![b"e/x".to_vec()]);
        l.moved_dir(b"f", b"e", false);
        l.remove((1, 6), b"e/x");
        l.moved((1, 5), b"a", b"b");
        assert_eq!(l.others((1, 5), b"e/c"), vec![b"b".to_vec()]);
        l.remove((1, 5), b"b");
        assert!(
            l.others((1, 5), b"e/c").is_empty(),
            "one name left: not kept"
        );
        assert!(l.names.is_empty());
    }
}
