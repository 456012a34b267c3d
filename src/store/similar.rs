//! Where the first version of a new path looks for a delta base: content recently recorded
//! for other paths with the same file name (`mod.rs` in another folder, a file moved by a
//! checkout) or the same extension and a size close to it (sibling tests, split modules).
//!
//! Only a hint, kept in memory and bounded: a base is referred to by its hash like any other,
//! read and checked when the delta is made (`blobs.rs`), and kept by gc for as long as a
//! delta on it is. After a restart the table starts empty and fills as content is recorded.

use std::collections::{HashMap, VecDeque};

use super::Hash;

/// File names remembered; past this the table starts over (as the capture cache does).
const NAMES_MAX: usize = 4096;
/// Recent contents remembered by extension.
const RECENT: usize = 256;
/// Candidates of the same extension tried, closest in size first.
const BY_SIZE: usize = 2;
/// A base much larger than the content costs more to load as a dictionary than the delta
/// saves: one larger than twice the content and this much is not tried.
const LARGER_BY: u64 = 64 << 10;

#[derive(Default)]
pub(crate) struct Similar {
    /// The newest content recorded for a path of each file name.
    by_name: HashMap<Vec<u8>, (Hash, u64)>,
    /// The newest contents recorded, newest last: extension, hash, size.
    recent: VecDeque<(Vec<u8>, Hash, u64)>,
}

/// The last component of `path`, and its extension (from the last dot, empty without one).
pub(super) fn name_and_extension(path: &[u8]) -> (&[u8], &[u8]) {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let extension = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 => &name[dot..],
        _ => &[],
    };
    (name, extension)
}

impl Similar {
    /// `hash` (of `size` bytes) is the newest content recorded for `path`.
    pub fn note(&mut self, path: &[u8], hash: Hash, size: u64) {
        let (name, extension) = name_and_extension(path);
        if self.by_name.len() >= NAMES_MAX && !self.by_name.contains_key(name) {
            self.by_name.clear();
        }
        self.by_name.insert(name.to_vec(), (hash, size));
        if let Some(i) = self.recent.iter().position(|(_, h, _)| *h == hash) {
            self.recent.remove(i);
        }
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((extension.to_vec(), hash, size));
    }

    /// Bases worth trying for the first version of `path`, of `size` bytes, best guess
    /// first: the newest content of a path with its file name, then the recent contents of
    /// its extension closest to its size.
    pub fn candidates(&self, path: &[u8], size: u64) -> Vec<Hash> {
        let (name, extension) = name_and_extension(path);
        let fits = |s: &u64| *s <= size.saturating_mul(2) + LARGER_BY;
        let mut out: Vec<Hash> = self
            .by_name
            .get(name)
            .filter(|(_, s)| fits(s))
            .map(|(h, _)| *h)
            .into_iter()
            .collect();
        let mut near: Vec<(u64, Hash)> = self
            .recent
            .iter()
            .filter(|(e, h, s)| e == extension && fits(s) && !out.contains(h))
            .map(|(_, h, s)| (s.abs_diff(size), *h))
            .collect();
        near.sort_by_key(|(distance, _)| *distance);
        out.extend(near.into_iter().take(BY_SIZE).map(|(_, h)| h));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_first_then_the_closest_sizes_of_the_extension() {
        let h = |i: u8| Hash([i; 32]);
        let mut s = Similar::default();
        s.note(b"a/mod.rs", h(1), 100);
        s.note(b"b/lib.rs", h(2), 1000);
        s.note(b"b/main.rs", h(3), 5000);
        s.note(b"c/notes.md", h(4), 990);
        s.note(b"Makefile", h(5), 990);
        assert_eq!(s.candidates(b"z/mod.rs", 1010), vec![h(1), h(2), h(3)]);
        assert_eq!(s.candidates(b"new.rs", 4000), vec![h(3), h(2)]);
        assert_eq!(s.candidates(b"x/notes.txt", 10), Vec::<Hash>::new());
        assert_eq!(s.candidates(b"y/Makefile", 10), vec![h(5)]);
        // A content noted again is one entry, moved to the newest.
        s.note(b"d/mod.rs", h(2), 1000);
        assert_eq!(s.candidates(b"mod.rs", 1000), vec![h(2), h(1), h(3)]);
        // Nor a base far larger than the content.
        s.note(b"big.rs", h(6), 1 << 20);
        assert_eq!(s.candidates(b"e/big.rs", 100), vec![h(1), h(2)]);
        assert_eq!(name_and_extension(b".hidden"), (&b".hidden"[..], &b""[..]));
    }
}
