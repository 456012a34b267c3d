//! Which paths pass through unrecorded (SPEC.md, "What is recorded"): regenerable trees.
//!
//! In order, the first that decides wins:
//!
//! 1. `.rewindignore` at the workspace root (gitignore syntax), both ways: `*.log` ignores
//!    files, `!.venv/` records a folder that would otherwise be ignored.
//! 2. Folders regenerable by name: `.git/`, `node_modules/`, `__pycache__/`.
//! 3. Walking down from the root, each folder on the way (and the path itself, if a folder):
//!    ignored if a `.gitignore` above it names it (the deepest that matches decides, as in
//!    git), or if it holds a marker: a `CACHEDIR.TAG` with the standard signature (cargo's
//!    `target/`, pytest's and mypy's caches) or a `pyvenv.cfg` (a Python virtual environment).
//!    A single file that `.gitignore` names is still recorded: only folders are.
//!
//! What each folder holds (its markers, its `.gitignore`) is read once and cached; the
//! recorder forgets a folder's entry when one of those files, or the folder, changes.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::join;
use super::recorder::Source;

/// Folders ignored by name unless `.rewindignore` says otherwise.
pub const DEFAULTS: [&str; 3] = [".git/", "node_modules/", "__pycache__/"];

/// The first bytes of a cache directory tag (https://bford.info/cachedir/).
const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// The names of the files whose presence or content decides whether their folder is recorded.
pub const RULE_FILES: [&[u8]; 3] = [b"CACHEDIR.TAG", b"pyvenv.cfg", b".gitignore"];

/// Why a path is not recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// `.rewindignore` names it.
    RewindIgnore,
    /// `.git/`, `node_modules/` or `__pycache__/`.
    Regenerable,
    /// A folder that a `.gitignore` names.
    GitIgnore,
    /// A folder with a `CACHEDIR.TAG`.
    CacheTag,
    /// A Python virtual environment (a folder with `pyvenv.cfg`).
    Venv,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::RewindIgnore,
        Reason::Regenerable,
        Reason::GitIgnore,
        Reason::CacheTag,
        Reason::Venv,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Reason::RewindIgnore => ".rewindignore",
            Reason::Regenerable => ".git/node_modules/__pycache__",
            Reason::GitIgnore => ".gitignore folder",
            Reason::CacheTag => "cache tag",
            Reason::Venv => "venv",
        }
    }
}

/// What a folder holds that decides about it and what is below it.
#[derive(Default)]
struct Folder {
    marker: Option<Reason>,
    gitignore: Option<Gitignore>,
}

pub struct IgnoreRules {
    rewind: Gitignore,
    defaults: Gitignore,
    /// By path, so that what is below a folder is one range.
    folders: Mutex<BTreeMap<Vec<u8>, Arc<Folder>>>,
}

fn matcher(lines: &[&str], what: &str) -> Gitignore {
    let mut b = GitignoreBuilder::new("/");
    for line in lines {
        // A bad pattern is skipped, not fatal: recording more is the safe side.
        if let Err(e) = b.add_line(None, line) {
            tracing::warn!("{what}: skipping {line:?}: {e}");
        }
    }
    b.build().unwrap_or_else(|e| {
        tracing::warn!("{what}: {e}");
        Gitignore::empty()
    })
}

fn os(path: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(path))
}

/// `path` is `dir` or below it.
pub fn at_or_under(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

impl IgnoreRules {
    /// The defaults, under the lines of `.rewindignore` (which may be empty).
    pub fn new(rewindignore: &str) -> IgnoreRules {
        IgnoreRules {
            rewind: matcher(&rewindignore.lines().collect::<Vec<_>>(), ".rewindignore"),
            defaults: matcher(&DEFAULTS, "defaults"),
            folders: Mutex::new(BTreeMap::new()),
        }
    }

    /// `.rewindignore` changed.
    pub fn set_rewindignore(&mut self, text: &str) {
        self.rewind = matcher(&text.lines().collect::<Vec<_>>(), ".rewindignore");
    }

    /// Whether a workspace-relative path (or any folder above it) is ignored, and why.
    pub fn ignored(&self, source: &dyn Source, path: &[u8], is_dir: bool) -> Option<Reason> {
        if path.is_empty() {
            return None;
        }
        match self.rewind.matched_path_or_any_parents(os(path), is_dir) {
            Match::Ignore(_) => return Some(Reason::RewindIgnore),
            Match::Whitelist(_) => return None,
            Match::None => {}
        }
        if self
            .defaults
            .matched_path_or_any_parents(os(path), is_dir)
            .is_ignore()
        {
            return Some(Reason::Regenerable);
        }
        // The folders on the way down, each with the length of its path plus the slash.
        let mut above: Vec<(usize, Arc<Folder>)> = vec![(0, self.folder(source, b""))];
        let ends = path
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| i)
            .chain(is_dir.then_some(path.len()));
        for end in ends {
            let dir = &path[..end];
            for (base, folder) in above.iter().rev() {
                let Some(g) = &folder.gitignore else {
                    continue;
                };
                match g.matched(os(&dir[*base..]), true) {
                    Match::Ignore(_) => return Some(Reason::GitIgnore),
                    Match::Whitelist(_) => break,
                    Match::None => {}
                }
            }
            let folder = self.folder(source, dir);
            if let Some(r) = folder.marker {
                return Some(r);
            }
            above.push((end + 1, folder));
        }
        None
    }

    /// Whether `.rewindignore` records `path` whatever else says.
    pub fn whitelisted(&self, path: &[u8], is_dir: bool) -> bool {
        !path.is_empty()
            && self
                .rewind
                .matched_path_or_any_parents(os(path), is_dir)
                .is_whitelist()
    }

    /// The marker `dir` holds now, read afresh (its cached entry is replaced).
    pub fn marker_now(&self, source: &dyn Source, dir: &[u8]) -> Option<Reason> {
        self.forget(dir);
        self.folder(source, dir).marker
    }

    /// A rule file in `dir`, or `dir` itself, changed: read it again when next asked.
    pub fn forget(&self, dir: &[u8]) {
        self.folders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(dir);
    }

    /// `dir` was removed or renamed, or something was renamed to it: forget it and all below.
    pub fn forget_under(&self, dir: &[u8]) {
        let mut folders = self.folders.lock().unwrap_or_else(|e| e.into_inner());
        if dir.is_empty() {
            folders.clear();
            return;
        }
        folders.remove(dir);
        // Below `dir`: from `dir/` up to `dir0` ('0' follows '/').
        let below = [dir, b"/"].concat();
        let past = [dir, b"0"].concat();
        let gone: Vec<Vec<u8>> = folders.range(below..past).map(|(k, _)| k.clone()).collect();
        for k in gone {
            folders.remove(&k);
        }
    }

    fn folder(&self, source: &dyn Source, dir: &[u8]) -> Arc<Folder> {
        if let Some(f) = self
            .folders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return f.clone();
        }
        let folder = Arc::new(read_folder(source, dir));
        let mut folders = self.folders.lock().unwrap_or_else(|e| e.into_inner());
        if folders.len() > 100_000 {
            folders.clear();
        }
        folders.insert(dir.to_vec(), folder.clone());
        folder
    }
}

fn has_signature(source: &dyn Source, dir: &[u8]) -> bool {
    let mut head = Vec::new();
    source
        .open_read(&join(dir, b"CACHEDIR.TAG"))
        .and_then(|f| {
            f.take(CACHEDIR_SIGNATURE.len() as u64)
                .read_to_end(&mut head)
        })
        .is_ok()
        && head == CACHEDIR_SIGNATURE
}

fn read_folder(source: &dyn Source, dir: &[u8]) -> Folder {
    let is_file = |p: &[u8]| {
        source
            .lstat(p)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
    };
    // The workspace itself is never ignored as a whole.
    let marker = if dir.is_empty() {
        None
    } else if is_file(&join(dir, b"CACHEDIR.TAG")) && has_signature(source, dir) {
        Some(Reason::CacheTag)
    } else if is_file(&join(dir, b"pyvenv.cfg")) {
        Some(Reason::Venv)
    } else {
        None
    };
    let gitignore_path = join(dir, b".gitignore");
    let gitignore = is_file(&gitignore_path)
        .then(|| source.open_read(&gitignore_path).ok())
        .flatten()
        .and_then(|f| std::io::read_to_string(f.take(1 << 20)).ok())
        .map(|text| matcher(&text.lines().collect::<Vec<_>>(), ".gitignore"))
        .filter(|g| !g.is_empty());
    Folder { marker, gitignore }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs::File;
    use std::io;

    use super::*;

    /// A workspace in memory: files by path, folders implied.
    struct Mem(HashMap<Vec<u8>, Vec<u8>>);

    impl Source for Mem {
        fn open_read(&self, path: &[u8]) -> io::Result<File> {
            let data = self.0.get(path).ok_or(io::ErrorKind::NotFound)?;
            let mut f = tempfile::tempfile()?;
            io::Write::write_all(&mut f, data)?;
            io::Seek::rewind(&mut f)?;
            Ok(f)
        }
        fn read_dir(&self, _: &[u8]) -> io::Result<Vec<Vec<u8>>> {
            Ok(Vec::new())
        }
        fn readlink(&self, _: &[u8]) -> io::Result<Vec<u8>> {
            Err(io::ErrorKind::NotFound.into())
        }
        fn lstat(&self, path: &[u8]) -> io::Result<libc::stat> {
            self.0.get(path).ok_or(io::ErrorKind::NotFound)?;
            // SAFETY: a plain C struct; all zeroes is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            st.st_mode = libc::S_IFREG | 0o644;
            Ok(st)
        }
    }

    fn mem(files: &[(&str, &str)]) -> Mem {
        Mem(files
            .iter()
            .map(|(p, c)| (p.as_bytes().to_vec(), c.as_bytes().to_vec()))
            .collect())
    }

    #[test]
    fn defaults_and_negation() {
        let src = mem(&[]);
        let r = IgnoreRules::new("");
        let ig = |r: &IgnoreRules, p: &str, d| r.ignored(&src, p.as_bytes(), d);
        assert_eq!(ig(&r, ".git", true), Some(Reason::Regenerable));
        assert!(ig(&r, ".git/objects/ab/cdef", false).is_some());
        assert!(ig(&r, "web/node_modules/left-pad/index.js", false).is_some());
        assert!(ig(&r, "pkg/__pycache__/m.cpython-312.pyc", false).is_some());
        assert_eq!(ig(&r, "target/debug/rewind", false), None);
        assert_eq!(ig(&r, "src/main.rs", false), None);
        assert_eq!(ig(&r, ".gitignore", false), None);

        let r = IgnoreRules::new("*.log\n!node_modules/\nbuild/\n");
        assert_eq!(ig(&r, "debug.log", false), Some(Reason::RewindIgnore));
        assert!(ig(&r, "sub/dir/x.log", false).is_some());
        assert_eq!(ig(&r, "node_modules/x.js", false), None);
        assert!(ig(&r, "build/out.o", false).is_some());
        assert!(ig(&r, ".git/HEAD", false).is_some());
    }

    #[test]
    fn gitignore_names_folders_not_files() {
        let src = mem(&[
            (".gitignore", "*.log\n.env\nbuild/\n/dist\n"),
            ("web/.gitignore", "out\n!keep.log\n"),
        ]);
        let r = IgnoreRules::new("");
        let ig = |p: &str, d| r.ignored(&src, p.as_bytes(), d);
        assert_eq!(ig(".env", false), None);
        assert_eq!(ig("debug.log", false), None);
        assert_eq!(ig("build", true), Some(Reason::GitIgnore));
        assert_eq!(ig("build/x.o", false), Some(Reason::GitIgnore));
        assert_eq!(ig("a/build/x.o", false), Some(Reason::GitIgnore));
        assert_eq!(ig("dist/app.js", false), Some(Reason::GitIgnore));
        assert_eq!(ig("a/dist/app.js", false), None);
        assert_eq!(ig("web/out/a.js", false), Some(Reason::GitIgnore));
        assert_eq!(ig("out/a.js", false), None);
        // .rewindignore has the last word.
        let r = IgnoreRules::new("!build/\n.env\n");
        assert_eq!(r.ignored(&src, b"build/x.o", false), None);
        assert_eq!(r.ignored(&src, b".env", false), Some(Reason::RewindIgnore));
    }

    #[test]
    fn markers_make_their_folder_ignored() {
        let sig = "Signature: 8a477f597d28d172789f06886806bc55\n# a cache\n";
        let src = mem(&[
            ("target/CACHEDIR.TAG", sig),
            ("fake/CACHEDIR.TAG", "Signature: not the right one\n"),
            (".venv/pyvenv.cfg", "home = /usr/bin\n"),
            ("CACHEDIR.TAG", sig),
        ]);
        let r = IgnoreRules::new("");
        let ig = |p: &str, d| r.ignored(&src, p.as_bytes(), d);
        assert_eq!(ig("target", true), Some(Reason::CacheTag));
        assert_eq!(ig("target/debug/app", false), Some(Reason::CacheTag));
        assert_eq!(ig("fake/x", false), None);
        assert_eq!(ig(".venv/lib/python3/site.py", false), Some(Reason::Venv));
        // Not the workspace as a whole.
        assert_eq!(ig("src/main.rs", false), None);
        // `!.venv/` records a venv.
        let r = IgnoreRules::new("!.venv/\n");
        assert_eq!(r.ignored(&src, b".venv/bin/python", false), None);
    }
}
