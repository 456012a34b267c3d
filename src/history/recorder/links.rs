//! The names of hard-linked files. FUSE tells the daemon which inode a write goes to, never by
//! which name, so a change to a file with several names is recorded under the one the mount
//! knows it by and carries the others (`Change::links`): `rewind log NAME` of any of them
//! shows it, and a rollback of any of them puts the shared content back in place.
//!
//! Names are learnt from the scan at mount (every recorded path) and kept up to date by link,
//! unlink and rename. Only files with more than one name are kept.

use std::collections::{BTreeSet, HashMap};

use super::{Key, Recorder, lock};

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

    pub(super) fn moved(&mut self, key: Key, from: &[u8], to: &[u8]) {
        if let Some(names) = self.names.get_mut(&key)
            && names.remove(from)
        {
            names.insert(to.to_vec());
        }
    }

    /// A folder was renamed: names below it move with it.
    pub(super) fn moved_dir(&mut self, from: &[u8], to: &[u8]) {
        let mut prefix = from.to_vec();
        prefix.push(b'/');
        for names in self.names.values_mut() {
            let below: Vec<Vec<u8>> = names
                .iter()
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            for old in below {
                names.remove(&old);
                let mut new = to.to_vec();
                new.extend_from_slice(&old[from.len()..]);
                names.insert(new);
            }
        }
    }

    fn others(&self, key: Key, path: &[u8]) -> Vec<Vec<u8>> {
        self.names
            .get(&key)
            .map(|names| names.iter().filter(|n| *n != path).cloned().collect())
            .unwrap_or_default()
    }

    fn contains(&self, key: Key, path: &[u8]) -> bool {
        self.names.get(&key).is_some_and(|n| n.contains(path))
    }
}

impl Recorder {
    /// The other names of the file `key`, which `path` names.
    pub(super) fn other_names(&self, key: Key, path: &[u8]) -> Vec<Vec<u8>> {
        lock(&self.links).others(key, path)
    }

    /// Whether `a` and `b` are both names of the file `key`.
    pub(super) fn same_file(&self, key: Key, a: &[u8], b: &[u8]) -> bool {
        let links = lock(&self.links);
        links.contains(key, a) && links.contains(key, b)
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
        l.moved_dir(b"d", b"e");
        assert_eq!(l.others((1, 5), b"a"), vec![b"e/c".to_vec()]);
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
