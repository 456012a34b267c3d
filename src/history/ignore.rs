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
//! recorder forgets a folder's entry when one of those files, or the folder, changes. What the
//! rules say about a folder and everything above it (its *chain*) is cached too, so that a
//! file's answer is two matches of its own path and a lookup of its folder's: every path an
//! edit or a delete touches is asked about, and walking the folders above it each time was
//! about 2 µs of a delete. Forgetting anything drops every chain (rule files change rarely).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::join;
use super::recorder::Source;

/// Folders ignored by name unless `.rewindignore` says otherwise. Only folders (each ends in
/// `/`): a file is never asked about against them, only the folders above it.
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
    chains: Mutex<Chains>,
}

/// What the rules say about a folder, from the root down to it: all a path below it needs
/// besides its own name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chain {
    /// `.rewindignore` on the folder or, failing that, the nearest folder above it it names.
    rewind: Verdict,
    /// A default name (`.git/`, ...) on the folder or one above.
    regenerable: bool,
    /// What `.gitignore` files and markers say about the folder or one above.
    folders: Option<Reason>,
}

impl Chain {
    /// The answer for the folder itself.
    fn decide(self) -> Option<Reason> {
        match self.rewind {
            Verdict::Ignore => Some(Reason::RewindIgnore),
            Verdict::Keep => None,
            Verdict::Unsaid if self.regenerable => Some(Reason::Regenerable),
            Verdict::Unsaid => self.folders,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Ignore,
    Keep,
    Unsaid,
}

impl Verdict {
    fn of<T>(m: Match<T>) -> Verdict {
        match m {
            Match::Ignore(_) => Verdict::Ignore,
            Match::Whitelist(_) => Verdict::Keep,
            Match::None => Verdict::Unsaid,
        }
    }

    /// This match, or `above` if it says nothing.
    fn or(self, above: Verdict) -> Verdict {
        if self == Verdict::Unsaid { above } else { self }
    }
}

/// The chains worked out since the last change of the rules, with a count of those changes:
/// a chain worked out from rules that changed meanwhile is not kept.
#[derive(Default)]
struct Chains {
    by_folder: HashMap<Vec<u8>, Chain>,
    generation: u64,
}

/// How many chains or folders are kept before the cache starts over.
const CACHED_AT_MOST: usize = 100_000;

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
            chains: Mutex::new(Chains::default()),
        }
    }

    /// `.rewindignore` changed.
    pub fn set_rewindignore(&mut self, text: &str) {
        self.rewind = matcher(&text.lines().collect::<Vec<_>>(), ".rewindignore");
        self.forget_chains();
    }

    /// Whether a workspace-relative path (or any folder above it) is ignored, and why.
    pub fn ignored(&self, source: &dyn Source, path: &[u8], is_dir: bool) -> Option<Reason> {
        if path.is_empty() {
            return None;
        }
        if is_dir {
            return self.chain(source, path).decide();
        }
        // The nearest match decides, the file's own name first (as
        // `matched_path_or_any_parents` walks), then its folder's chain.
        let folder = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => &path[..i],
            None => b"",
        };
        let chain = self.chain(source, folder);
        match Verdict::of(self.rewind.matched(os(path), false)).or(chain.rewind) {
            Verdict::Ignore => return Some(Reason::RewindIgnore),
            Verdict::Keep => return None,
            Verdict::Unsaid => {}
        }
        // The defaults name only folders (see `DEFAULTS`): a file's own name never matches
        // them, only a folder above it can (its chain). Asking cost a match of every pattern
        // each time a file was opened for writing, closed or deleted.
        if chain.regenerable {
            return Some(Reason::Regenerable);
        }
        chain.folders
    }

    /// The chain of the folder `dir` (`""`: the workspace), worked out from its parent's.
    fn chain(&self, source: &dyn Source, dir: &[u8]) -> Chain {
        let generation = {
            let chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = chains.by_folder.get(dir) {
                return *c;
            }
            chains.generation
        };
        let chain = if dir.is_empty() {
            // `matched_path_or_any_parents` asks about the empty path last, as a folder.
            Chain {
                rewind: Verdict::of(self.rewind.matched(os(dir), true)),
                regenerable: self.defaults.matched(os(dir), true).is_ignore(),
                folders: None,
            }
        } else {
            let parent = match dir.iter().rposition(|&b| b == b'/') {
                Some(i) => &dir[..i],
                None => b"",
            };
            let above = self.chain(source, parent);
            Chain {
                rewind: Verdict::of(self.rewind.matched(os(dir), true)).or(above.rewind),
                regenerable: above.regenerable || self.defaults.matched(os(dir), true).is_ignore(),
                folders: above.folders.or_else(|| self.folder_says(source, dir)),
            }
        };
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        if chains.generation == generation {
            if chains.by_folder.len() >= CACHED_AT_MOST {
                chains.by_folder = HashMap::new();
            }
            chains.by_folder.insert(dir.to_vec(), chain);
        }
        chain
    }

    /// What the `.gitignore` files above the folder `dir` (the deepest that matches decides)
    /// and its own markers say about it, nothing above it being ignored.
    fn folder_says(&self, source: &dyn Source, dir: &[u8]) -> Option<Reason> {
        let mut base = 0;
        let mut above = vec![(0, self.folder(source, b""))];
        while let Some(i) = dir[base..].iter().position(|&b| b == b'/') {
            base += i + 1;
            above.push((base, self.folder(source, &dir[..base - 1])));
        }
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
        self.folder(source, dir).marker
    }

    fn generation(&self) -> u64 {
        self.chains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation
    }

    fn forget_chains(&self) {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        chains.by_folder = HashMap::new();
        chains.generation += 1;
    }

    /// [`ignored`](Self::ignored) by walking every folder above `path` (what the chains
    /// cache), for the tests to compare.
    #[cfg(test)]
    fn ignored_walking(&self, source: &dyn Source, path: &[u8], is_dir: bool) -> Option<Reason> {
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
        // Before and after the folder: see `folder`.
        self.forget_chains();
        self.folders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(dir);
        self.forget_chains();
    }

    /// `dir` was removed or renamed, or something was renamed to it: forget it and all below.
    pub fn forget_under(&self, dir: &[u8]) {
        self.forget_chains();
        {
            let mut folders = self.folders.lock().unwrap_or_else(|e| e.into_inner());
            if dir.is_empty() {
                folders.clear();
            } else {
                folders.remove(dir);
                // Below `dir`: from `dir/` up to `dir0` ('0' follows '/').
                let below = [dir, b"/"].concat();
                let past = [dir, b"0"].concat();
                let gone: Vec<Vec<u8>> =
                    folders.range(below..past).map(|(k, _)| k.clone()).collect();
                for k in gone {
                    folders.remove(&k);
                }
            }
        }
        // Before and after the folders: see `folder`.
        self.forget_chains();
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
        // A rule file may change, and be forgotten, while the folder is read: what was read
        // then is this answer's, not kept for the next. `forget` moves the generation on
        // before it drops the folder (checked here with the folders held: an insert before
        // the drop is dropped) and again after (dropping chains worked out meanwhile).
        let generation = self.generation();
        let folder = Arc::new(read_folder(source, dir));
        let mut folders = self.folders.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != generation {
            return folder;
        }
        if folders.len() > CACHED_AT_MOST {
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

    /// A file is not asked about against the defaults (`ignored`): that holds only while they
    /// all name folders. A file named as one of them is recorded; below such a folder, not.
    #[test]
    fn the_defaults_name_only_folders() {
        let src = mem(&[]);
        let r = IgnoreRules::new("");
        for pattern in DEFAULTS {
            let name = pattern.strip_suffix('/').expect("a default names a folder");
            assert!(r.defaults.matched(os(name.as_bytes()), false).is_none());
            for file in [name.to_string(), format!("sub/{name}")] {
                assert_eq!(r.ignored(&src, file.as_bytes(), false), None, "{file}");
                assert_eq!(r.ignored_walking(&src, file.as_bytes(), false), None);
                let below = format!("{file}/x");
                assert_eq!(
                    r.ignored(&src, below.as_bytes(), false),
                    Some(Reason::Regenerable)
                );
            }
        }
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

    /// Every path of up to three names from a set that exercises each rule, as a file and as
    /// a folder, under several `.rewindignore`s: the cached chains answer as walking every
    /// folder does, asked in any order, and again once a rule file changed and was forgotten.
    #[test]
    fn chains_answer_as_walking_every_folder() {
        let sig = "Signature: 8a477f597d28d172789f06886806bc55\n";
        let files = [
            (".gitignore", "*.log\nbuild/\n/dist\n!keep/\nout\n"),
            ("web/.gitignore", "out\n!build/\nkeep\n"),
            ("web/build/.gitignore", "*\n"),
            ("target/CACHEDIR.TAG", sig),
            ("web/.venv/pyvenv.cfg", "home = /usr/bin\n"),
            ("out/pyvenv.cfg", "home = /usr/bin\n"),
        ];
        let names = [
            "web",
            "build",
            "dist",
            "out",
            "keep",
            "target",
            ".venv",
            "node_modules",
            ".git",
            "x.log",
            "a",
        ];
        let mut paths = Vec::new();
        for a in names {
            paths.push(a.to_string());
            for b in names {
                paths.push(format!("{a}/{b}"));
                for c in names {
                    paths.push(format!("{a}/{b}/{c}"));
                }
            }
        }
        let rewindignores = [
            "",
            "*.log\n!node_modules/\nbuild/\n",
            "!build/\n.env\n!web/out/\n",
            "!.venv/\ntarget/a\n",
            "*\n!*/\n",
        ];
        let check = |r: &IgnoreRules, src: &Mem, order: &mut dyn Iterator<Item = &String>| {
            for p in order {
                for is_dir in [false, true] {
                    assert_eq!(
                        r.ignored(src, p.as_bytes(), is_dir),
                        r.ignored_walking(src, p.as_bytes(), is_dir),
                        "{p} (folder: {is_dir})"
                    );
                }
            }
        };
        for text in rewindignores {
            let src = mem(&files);
            let r = IgnoreRules::new(text);
            check(&r, &src, &mut paths.iter());
            check(&r, &src, &mut paths.iter().rev());
            // A rule file changes: forgotten, every answer follows it.
            let mut changed = files.to_vec();
            changed[1] = ("web/.gitignore", "a\n");
            changed.push(("web/a/CACHEDIR.TAG", sig));
            let src = mem(&changed);
            r.forget(b"web");
            check(&r, &src, &mut paths.iter().rev());
            let r = IgnoreRules::new(text);
            check(&r, &src, &mut paths.iter().rev());
            check(&r, &src, &mut paths.iter());
        }
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

    /// A folder read from disk just before a rule file in it changed, and kept just after the
    /// writer's `forget` (the reader was preempted between `read_folder` and the insert): the
    /// generation keeps the chain worked out from it out of the cache, but not the folder
    /// itself, and every chain worked out afterwards uses it. Here the reader's lstat of
    /// `gen/../.gitignore` (the last file `read_folder` looks at) is where the writer slips in:
    /// it writes `.gitignore` naming `gen/` and forgets the workspace's folder, as
    /// `note_rules` does at the end of the write.
    #[test]
    fn a_folder_read_before_a_forget_is_not_kept_after_it() {
        use std::sync::{Mutex as M, OnceLock};
        struct Racy {
            files: M<HashMap<Vec<u8>, Vec<u8>>>,
            rules: OnceLock<Arc<IgnoreRules>>,
            raced: M<bool>,
        }
        impl Source for Racy {
            fn open_read(&self, path: &[u8]) -> io::Result<File> {
                let data = lock(&self.files)
                    .get(path)
                    .cloned()
                    .ok_or(io::ErrorKind::NotFound)?;
                let mut f = tempfile::tempfile()?;
                io::Write::write_all(&mut f, &data)?;
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
                let found = lock(&self.files).contains_key(path);
                if path == b".gitignore" && !std::mem::replace(&mut *lock(&self.raced), true) {
                    // The writer, between the reader's look and its insert.
                    lock(&self.files).insert(b".gitignore".to_vec(), b"gen/\n".to_vec());
                    self.rules.get().unwrap().forget(b"");
                }
                if !found {
                    return Err(io::ErrorKind::NotFound.into());
                }
                // SAFETY: a plain C struct; all zeroes is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                st.st_mode = libc::S_IFREG | 0o644;
                Ok(st)
            }
        }
        fn lock<T>(m: &M<T>) -> std::sync::MutexGuard<'_, T> {
            m.lock().unwrap()
        }
        let src = Racy {
            files: M::new(HashMap::new()),
            rules: OnceLock::new(),
            raced: M::new(false),
        };
        let rules = Arc::new(IgnoreRules::new(""));
        let _ = src.rules.set(rules.clone());
        // The reader: a write in gen/ asks about it while .gitignore is being written.
        assert_eq!(rules.ignored(&src, b"gen/a.txt", false), None);
        // Everything after the writer's forget must see the new .gitignore.
        let fresh = IgnoreRules::new("");
        assert_eq!(
            fresh.ignored_walking(&src, b"gen/b.txt", false),
            Some(Reason::GitIgnore)
        );
        assert_eq!(
            rules.ignored(&src, b"gen/b.txt", false),
            Some(Reason::GitIgnore),
            "the folder read before the forget was kept after it"
        );
    }
}
