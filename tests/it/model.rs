//! A model-based property test of what users do through the mount, and of the property that
//! matters most: every checkpoint is the tree it was taken on, both as `.rewind/at/NAME/` and by
//! rolling back to it, and undoing that rollback gives back the tree it started from.
//!
//! Each case starts from a small tree made before mounting (a project mounted over), mounts,
//! and runs a random sequence of operations over a few names in a few folders: writes (new
//! content), appends, truncates (by path and through an open file, shorter and longer),
//! deletes, mkdir, rmdir, renames of files and folders (over existing ones too),
//! `RENAME_EXCHANGE` of files and of folders (`renameat2(2)`, called directly), hard links (of
//! files and of symlinks: `link(2)` does not follow), relative symlinks to other names, chmod of
//! files (through symlinks too) and folders, checkpoints, two processes writing at once (two
//! files, or appending the same block to one file, whose result is the same in any order) and
//! an unmount and remount, and `rewind gc --max-size` (after its dry run, which must promise
//! exactly what the run then removes). Every operation is applied to a model too (a tree of folders and
//! inodes, so hard links share content and mode), and the mount must succeed or fail as the
//! model says. Writes through a symlink follow it as the kernel does; an operation whose
//! symlink would lead outside the workspace is not run.
//!
//! After each case: the workspace is the model (type, content, mode, symlink targets, and which
//! names are one file); nothing was recorded as `external` (the mount saw everything); and for
//! every checkpoint, in the order they were taken:
//! - `.rewind/at/NAME/` is the model's tree at that moment. Past files and folders show their
//!   recorded mode without write bits (`mode & 0o555`, docs/design.md, "Views of the past"),
//!   so that is what is compared; symlinks by target;
//! - `rewind rollback --to NAME --force` makes the workspace that tree, with exact modes. Which
//!   names are one file is not compared: a rollback restores content, type and mode per path,
//!   and does not promise to bring back hard-link identity;
//! - `rewind rollback --session rollback-N` (the session the rollback printed; no `--force`, as
//!   nothing else happened in between) gives back exactly the tree the rollback started from;
//! - before each of these rollbacks, its `--dry-run` prints the same plan, path for path, as
//!   the run then reports, with the same exit status, and nothing in the run fails.
//!
//! A checkpoint that gc left without the whole history after it must be refused (exit 2, naming
//! the oldest point kept) by `rollback --to`, `diff --from` and `.rewind/at/`, never answered
//! from what is left; only checkpoints older than every answered one may be refused, and none
//! taken after the last gc.
//!
//! Finally every view of the past is read again: history grown by rollbacks must not change
//! what a checkpoint shows.
//!
//! Failing cases are kept in `tests/it/model.proptest-regressions` (proptest's
//! `FileFailurePersistence::WithSource`) and replayed first on every run, so a regression found
//! once is tested for ever. Shrinking a failure is bounded (each case mounts a filesystem): under
//! nextest, whose limit is three minutes, it stops 165 s after the test began so that the seed
//! is still written; otherwise after `REWIND_MODEL_SHRINK_SECS` (default 600).
//! `PROPTEST_CASES` raises the number of cases for a long local run (run it with `rcargo test`,
//! which has no time limit).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};

use crate::common::{Workspace, python_command, rw};

// ---- names -----------------------------------------------------------------------------------

/// File and symlink names, and folder names, for what is made new. Folder names (`d*`) and leaf
/// names (`a`, `b`, `c`) never mix: files and symlinks are only renamed to leaf names and
/// folders to folder names, so a path's folders are always folders (or absent) and a symlink
/// can only be its last component. Renaming folders takes leaves to paths outside these lists
/// (`d1/d2/a`): operations reach them by picking among what exists.
const LEAVES: [&str; 8] = ["a", "b", "c", "d0/a", "d0/b", "d1/a", "d1/b", "d0/d2/a"];
const DIRS: [&str; 3] = ["d0", "d1", "d0/d2"];

/// A leaf, picked when the operation is run: for what must exist, below 128 the (n mod
/// count)th file or symlink that exists (if any does); otherwise, or for a new name, one of
/// `LEAVES`, mostly one whose folder exists.
#[derive(Clone, Copy, Debug)]
struct Leaf(u8);

/// A folder, picked the same way among folders and `DIRS`.
#[derive(Clone, Copy, Debug)]
struct Dir(u8);

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Whether `path` is `dir` or below it.
fn within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The relative symlink target from a link at `link` to `target`, as a person would write it.
fn relative(link: &str, target: &str) -> String {
    let from: Vec<&str> = parent(link).split('/').filter(|c| !c.is_empty()).collect();
    let to: Vec<&str> = target.split('/').collect();
    let common = from
        .iter()
        .zip(&to)
        .take_while(|(a, b)| a == b)
        .count()
        .min(to.len() - 1);
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    parts.join("/")
}

// ---- operations ------------------------------------------------------------------------------

#[derive(Clone)]
enum Content {
    Bytes(Vec<u8>),
    /// Over a MiB, so it is stored in chunks.
    Big {
        seed: u8,
        len: usize,
    },
}

impl Content {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Content::Bytes(b) => b.clone(),
            Content::Big { seed, len } => {
                let mut out = Vec::with_capacity(*len + 64);
                let mut i = 0usize;
                while out.len() < *len {
                    out.extend_from_slice(format!("line {i} of {seed}\n").as_bytes());
                    i += 1;
                }
                out.truncate(*len);
                out
            }
        }
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Content::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Content::Big { seed, len } => write!(f, "Big({seed}, {len})"),
        }
    }
}

/// An operation as generated; [`Model::step`] picks its names.
#[derive(Clone, Debug)]
enum Op {
    Write(Leaf, Content),
    Append(Leaf, Content),
    Truncate {
        leaf: Leaf,
        len: u16,
        by_path: bool,
    },
    Delete(Leaf),
    Mkdir(Dir),
    Rmdir(Dir),
    /// A file or symlink to a leaf name (over what is there, often).
    Rename(Leaf, Leaf),
    /// A folder to a folder name (over an empty folder, sometimes).
    RenameDir(Dir, Dir),
    Exchange(Leaf, Leaf),
    ExchangeDir(Dir, Dir),
    /// `ln FROM TO`.
    Link(Leaf, Leaf),
    /// `ln -s` (relative) at the first name, to the second.
    Symlink(Leaf, Leaf),
    Chmod(Leaf, u32),
    ChmodDir(Dir, u32),
    Checkpoint,
    /// Two processes at once, each writing one file in pieces (open, write, close per piece).
    TwoWriters(Leaf, Vec<u8>, Leaf, Vec<u8>),
    /// Two processes at once, each appending the same block to one file this many times.
    TwoAppenders(Leaf, Vec<u8>, u8),
    Remount,
    /// `rewind gc --max-size SIZE`, after its dry run.
    Gc(&'static str),
}

/// An operation with its paths: what is run, on the model and through the mount.
#[derive(Clone, Debug)]
enum Step {
    Write(String, Content),
    Append(String, Content),
    Truncate {
        path: String,
        len: u16,
        by_path: bool,
    },
    Delete(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
    /// `renameat2(RENAME_EXCHANGE)`.
    Exchange(String, String),
    Link(String, String),
    /// At this path, with this target.
    Symlink(String, String),
    Chmod(String, u32),
    TwoWriters(String, Vec<u8>, String, Vec<u8>),
    TwoAppenders(String, Vec<u8>, u8),
    Checkpoint,
    Remount,
    Gc(&'static str),
}

fn leaf() -> impl Strategy<Value = Leaf> {
    any::<u8>().prop_map(Leaf)
}

fn dir() -> impl Strategy<Value = Dir> {
    any::<u8>().prop_map(Dir)
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        30 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(Content::Bytes),
        1 => (any::<u8>(), 1_100_000..1_500_000usize).prop_map(|(seed, len)| Content::Big { seed, len }),
    ]
}

fn small() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..24)
}

fn file_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o600, 0o644, 0o755, 0o400, 0o640])
}

fn dir_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o755, 0o700, 0o555, 0o750])
}

/// What can be there before the first mount.
fn initial_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (leaf(), content()).prop_map(|(l, c)| Op::Write(l, c)),
        3 => dir().prop_map(Op::Mkdir),
        1 => (leaf(), leaf()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (leaf(), leaf()).prop_map(|(a, b)| Op::Symlink(a, b)),
        1 => (leaf(), file_mode()).prop_map(|(l, m)| Op::Chmod(l, m)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (leaf(), content()).prop_map(|(l, c)| Op::Write(l, c)),
        3 => (leaf(), content()).prop_map(|(l, c)| Op::Append(l, c)),
        2 => (leaf(), 0..300u16, any::<bool>()).prop_map(|(leaf, len, by_path)| Op::Truncate { leaf, len, by_path }),
        2 => leaf().prop_map(Op::Delete),
        3 => dir().prop_map(Op::Mkdir),
        1 => dir().prop_map(Op::Rmdir),
        3 => (leaf(), leaf()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (dir(), dir()).prop_map(|(a, b)| Op::RenameDir(a, b)),
        2 => (leaf(), leaf()).prop_map(|(a, b)| Op::Exchange(a, b)),
        1 => (dir(), dir()).prop_map(|(a, b)| Op::ExchangeDir(a, b)),
        2 => (leaf(), leaf()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (leaf(), leaf()).prop_map(|(a, b)| Op::Symlink(a, b)),
        2 => (leaf(), file_mode()).prop_map(|(l, m)| Op::Chmod(l, m)),
        1 => (dir(), dir_mode()).prop_map(|(d, m)| Op::ChmodDir(d, m)),
        3 => Just(Op::Checkpoint),
        1 => (leaf(), small(), leaf(), small()).prop_map(|(a, x, b, y)| Op::TwoWriters(a, x, b, y)),
        1 => (leaf(), small(), 1..12u8).prop_map(|(l, c, n)| Op::TwoAppenders(l, c, n)),
        1 => Just(Op::Remount),
        1 => prop::sample::select(vec!["0", "2K", "1M", "1G"]).prop_map(Op::Gc),
    ]
}

// ---- the model -------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir(u32),
    /// A file or symlink: an inode, shared by hard links.
    Obj(u64),
}

#[derive(Clone, Debug)]
enum Obj {
    File { content: Vec<u8>, mode: u32 },
    Symlink(String),
}

/// What a path holds, as compared.
#[derive(Clone, PartialEq, Eq)]
enum Seen {
    File { content: Vec<u8>, mode: u32 },
    Dir(u32),
    Symlink(Vec<u8>),
}

type Tree = BTreeMap<String, Seen>;

#[derive(Clone, Default)]
struct Model {
    tree: BTreeMap<String, Node>,
    objs: BTreeMap<u64, Obj>,
    next: u64,
}

/// Where a path leads when symlinks are followed.
enum Resolved {
    /// To this path (a file, or nothing in an existing folder).
    At(String),
    /// Nowhere: a missing folder or a symlink loop.
    Fails,
    /// Out of the workspace.
    Outside,
}

/// What the model says of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    Fails,
    /// Not run (a symlink leads outside the workspace, or two writers would race).
    Skip,
}

impl Model {
    /// The name a generated leaf stands for now.
    fn leaf(&self, l: Leaf) -> String {
        let existing: Vec<&String> = self
            .tree
            .iter()
            .filter(|(_, n)| matches!(n, Node::Obj(_)))
            .map(|(p, _)| p)
            .collect();
        if l.0 < 128 && !existing.is_empty() {
            existing[l.0 as usize % existing.len()].clone()
        } else {
            LEAVES[l.0 as usize % LEAVES.len()].to_string()
        }
    }

    /// The name a generated folder stands for now.
    fn dir(&self, d: Dir) -> String {
        let existing: Vec<&String> = self
            .tree
            .iter()
            .filter(|(_, n)| matches!(n, Node::Dir(_)))
            .map(|(p, _)| p)
            .collect();
        if d.0 < 128 && !existing.is_empty() {
            existing[d.0 as usize % existing.len()].clone()
        } else {
            // Mostly the top folders.
            ["d0", "d0", "d0", "d1", "d1", "d0/d2"][d.0 as usize % 6].to_string()
        }
    }

    /// A name from `names` for something new: mostly one whose folder exists (and, for a
    /// folder, that is not there yet), so that most operations succeed; otherwise any.
    fn new_name(&self, names: &[&str], n: u8, folder: bool) -> String {
        let fits: Vec<&&str> = names
            .iter()
            .filter(|p| self.is_dir(parent(p)) && !(folder && self.tree.contains_key(**p)))
            .collect();
        if !n.is_multiple_of(4) && !fits.is_empty() {
            fits[n as usize / 4 % fits.len()].to_string()
        } else {
            names[n as usize % names.len()].to_string()
        }
    }

    /// `op` with its names picked.
    fn step(&self, op: &Op) -> Step {
        let new_leaf = |l: &Leaf| self.new_name(&LEAVES, l.0, false);
        let new_dir = |d: &Dir| self.new_name(&DIRS, d.0, true);
        match op {
            Op::Write(l, c) if l.0 >= 128 => Step::Write(new_leaf(l), c.clone()),
            Op::Write(l, c) => Step::Write(self.leaf(*l), c.clone()),
            Op::Append(l, c) => Step::Append(self.leaf(*l), c.clone()),
            Op::Truncate { leaf, len, by_path } => Step::Truncate {
                path: self.leaf(*leaf),
                len: *len,
                by_path: *by_path,
            },
            Op::Delete(l) => Step::Delete(self.leaf(*l)),
            Op::Mkdir(d) => Step::Mkdir(new_dir(d)),
            Op::Rmdir(d) => Step::Rmdir(self.dir(*d)),
            Op::Rename(a, b) => Step::Rename(self.leaf(*a), new_leaf(b)),
            Op::RenameDir(a, b) => Step::Rename(self.dir(*a), new_dir(b)),
            Op::Exchange(a, b) => Step::Exchange(self.leaf(*a), self.leaf(*b)),
            Op::ExchangeDir(a, b) => Step::Exchange(self.dir(*a), self.dir(*b)),
            Op::Link(a, b) => Step::Link(self.leaf(*a), new_leaf(b)),
            Op::Symlink(a, t) => {
                let at = new_leaf(a);
                let target = relative(&at, &self.leaf(*t));
                Step::Symlink(at, target)
            }
            Op::Chmod(l, m) => Step::Chmod(self.leaf(*l), *m),
            Op::ChmodDir(d, m) => Step::Chmod(self.dir(*d), *m),
            Op::Checkpoint => Step::Checkpoint,
            Op::TwoWriters(a, x, b, y) => {
                Step::TwoWriters(self.leaf(*a), x.clone(), new_leaf(b), y.clone())
            }
            Op::TwoAppenders(l, block, n) => Step::TwoAppenders(self.leaf(*l), block.clone(), *n),
            Op::Remount => Step::Remount,
            Op::Gc(size) => Step::Gc(size),
        }
    }

    fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || matches!(self.tree.get(path), Some(Node::Dir(_)))
    }

    fn obj_at(&self, path: &str) -> Option<u64> {
        match self.tree.get(path) {
            Some(Node::Obj(i)) => Some(*i),
            _ => None,
        }
    }

    fn file_at(&self, path: &str) -> Option<u64> {
        self.obj_at(path)
            .filter(|i| matches!(self.objs[i], Obj::File { .. }))
    }

    fn has_children(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        self.tree
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    fn add(&mut self, path: String, obj: Obj) {
        self.next += 1;
        self.objs.insert(self.next, obj);
        self.tree.insert(path, Node::Obj(self.next));
    }

    fn resolve(&self, path: &str) -> Resolved {
        let mut cur = path.to_string();
        // The kernel follows at most 40 symlinks.
        for _ in 0..=40 {
            if !self.is_dir(parent(&cur)) {
                return Resolved::Fails;
            }
            let Some(Obj::Symlink(target)) = self.obj_at(&cur).map(|i| &self.objs[&i]) else {
                return Resolved::At(cur);
            };
            let mut parts: Vec<&str> = parent(&cur).split('/').filter(|c| !c.is_empty()).collect();
            for c in target.split('/') {
                match c {
                    ".." => {
                        if parts.pop().is_none() {
                            return Resolved::Outside;
                        }
                    }
                    "" | "." => {}
                    c => parts.push(c),
                }
            }
            cur = parts.join("/");
        }
        Resolved::Fails
    }

    /// The file `path` leads to, for an operation that needs one.
    fn resolve_file(&self, path: &str) -> Result<u64, Expect> {
        match self.resolve(path) {
            Resolved::At(p) => self.file_at(&p).ok_or(Expect::Fails),
            Resolved::Fails => Err(Expect::Fails),
            Resolved::Outside => Err(Expect::Skip),
        }
    }

    fn content_mut(&mut self, i: u64) -> &mut Vec<u8> {
        match self.objs.get_mut(&i) {
            Some(Obj::File { content, .. }) => content,
            _ => unreachable!("not a file"),
        }
    }

    /// Write `content` to where `path` leads, creating the file (mode 644) if need be.
    fn write(&mut self, path: &str, content: Vec<u8>) -> Expect {
        match self.resolve(path) {
            Resolved::At(p) => match self.tree.get(&p) {
                None => {
                    self.add(
                        p,
                        Obj::File {
                            content,
                            mode: 0o644,
                        },
                    );
                    Expect::Ok
                }
                Some(Node::Obj(i)) => {
                    let i = *i;
                    *self.content_mut(i) = content;
                    Expect::Ok
                }
                Some(Node::Dir(_)) => Expect::Fails,
            },
            Resolved::Fails => Expect::Fails,
            Resolved::Outside => Expect::Skip,
        }
    }

    /// Take `from` and everything below it out of the tree, to put back at `to`.
    fn take_subtree(&mut self, from: &str) -> Vec<(String, Node)> {
        let paths: Vec<String> = self
            .tree
            .keys()
            .filter(|p| within(p, from))
            .cloned()
            .collect();
        paths
            .into_iter()
            .map(|p| {
                let n = self.tree.remove(&p).unwrap();
                (p, n)
            })
            .collect()
    }

    fn put_subtree(&mut self, from: &str, to: &str, nodes: Vec<(String, Node)>) {
        for (p, n) in nodes {
            self.tree.insert(format!("{to}{}", &p[from.len()..]), n);
        }
    }

    /// Apply `step` to the model, saying whether it should succeed. A failing step may leave
    /// the model changed: the caller keeps the model from before it.
    fn apply(&mut self, step: &Step) -> Expect {
        match step {
            Step::Write(p, c) => self.write(p, c.bytes()),
            Step::Append(p, c) => match self.resolve_file(p) {
                Ok(i) => {
                    self.content_mut(i).extend(c.bytes());
                    Expect::Ok
                }
                Err(e) => e,
            },
            Step::Truncate { path, len, .. } => match self.resolve_file(path) {
                Ok(i) => {
                    self.content_mut(i).resize(*len as usize, 0);
                    Expect::Ok
                }
                Err(e) => e,
            },
            Step::Delete(p) => match self.tree.get(p) {
                Some(Node::Obj(_)) => {
                    self.tree.remove(p);
                    Expect::Ok
                }
                _ => Expect::Fails,
            },
            Step::Mkdir(d) => {
                if self.is_dir(parent(d)) && !self.tree.contains_key(d) {
                    self.tree.insert(d.clone(), Node::Dir(0o755));
                    Expect::Ok
                } else {
                    Expect::Fails
                }
            }
            Step::Rmdir(d) => {
                if matches!(self.tree.get(d), Some(Node::Dir(_))) && !self.has_children(d) {
                    self.tree.remove(d);
                    Expect::Ok
                } else {
                    Expect::Fails
                }
            }
            Step::Rename(a, b) => {
                let Some(src) = self.tree.get(a).cloned() else {
                    return Expect::Fails;
                };
                if !self.is_dir(parent(b)) {
                    return Expect::Fails;
                }
                match (&src, self.tree.get(b)) {
                    // Onto itself, or another name of the same file: nothing happens (POSIX).
                    _ if a == b => return Expect::Ok,
                    (Node::Obj(i), Some(Node::Obj(j))) if i == j => return Expect::Ok,
                    (Node::Obj(_), Some(Node::Dir(_))) | (Node::Dir(_), Some(Node::Obj(_))) => {
                        return Expect::Fails;
                    }
                    (Node::Dir(_), Some(Node::Dir(_))) if self.has_children(b) => {
                        return Expect::Fails;
                    }
                    _ => {}
                }
                // A folder into itself.
                if within(b, a) {
                    return Expect::Fails;
                }
                self.tree.remove(b);
                let moved = self.take_subtree(a);
                self.put_subtree(a, b, moved);
                Expect::Ok
            }
            Step::Exchange(a, b) => {
                let (Some(x), Some(y)) = (self.tree.get(a), self.tree.get(b)) else {
                    return Expect::Fails;
                };
                if a == b || matches!((x, y), (Node::Obj(i), Node::Obj(j)) if i == j) {
                    return Expect::Ok;
                }
                if within(a, b) || within(b, a) {
                    return Expect::Fails;
                }
                let under_a = self.take_subtree(a);
                let under_b = self.take_subtree(b);
                self.put_subtree(a, b, under_a);
                self.put_subtree(b, a, under_b);
                Expect::Ok
            }
            Step::Link(a, b) => match self.obj_at(a) {
                Some(i) if self.is_dir(parent(b)) && !self.tree.contains_key(b) => {
                    self.tree.insert(b.clone(), Node::Obj(i));
                    Expect::Ok
                }
                _ => Expect::Fails,
            },
            Step::Symlink(at, target) => {
                if self.is_dir(parent(at)) && !self.tree.contains_key(at) {
                    self.add(at.clone(), Obj::Symlink(target.clone()));
                    Expect::Ok
                } else {
                    Expect::Fails
                }
            }
            Step::Chmod(p, m) => match self.resolve(p) {
                Resolved::At(p) => match self.tree.get(&p) {
                    Some(Node::Dir(_)) => {
                        self.tree.insert(p, Node::Dir(*m));
                        Expect::Ok
                    }
                    Some(Node::Obj(i)) => {
                        if let Some(Obj::File { mode, .. }) = self.objs.get_mut(&i.clone()) {
                            *mode = *m;
                        }
                        Expect::Ok
                    }
                    None => Expect::Fails,
                },
                Resolved::Fails => Expect::Fails,
                Resolved::Outside => Expect::Skip,
            },
            Step::TwoWriters(a, x, b, y) => {
                let target = |p: &str| match self.resolve(p) {
                    Resolved::At(p) if !matches!(self.tree.get(&p), Some(Node::Dir(_))) => {
                        Some((self.obj_at(&p), p))
                    }
                    _ => None,
                };
                let (Some((i, p)), Some((j, q))) = (target(a), target(b)) else {
                    return Expect::Skip;
                };
                // The same file from both: the result would depend on the order.
                if p == q || (i.is_some() && i == j) {
                    return Expect::Skip;
                }
                self.write(&p, x.clone());
                self.write(&q, y.clone());
                Expect::Ok
            }
            Step::TwoAppenders(p, block, n) => match self.resolve_file(p) {
                Ok(i) => {
                    for _ in 0..2 * *n {
                        self.content_mut(i).extend_from_slice(block);
                    }
                    Expect::Ok
                }
                Err(_) => Expect::Skip,
            },
            Step::Checkpoint | Step::Remount | Step::Gc(_) => Expect::Ok,
        }
    }

    fn tree(&self) -> Tree {
        self.tree
            .iter()
            .map(|(p, n)| {
                let seen = match n {
                    Node::Dir(m) => Seen::Dir(*m),
                    Node::Obj(i) => match &self.objs[i] {
                        Obj::File { content, mode } => Seen::File {
                            content: content.clone(),
                            mode: *mode,
                        },
                        Obj::Symlink(t) => Seen::Symlink(t.as_bytes().to_vec()),
                    },
                };
                (p.clone(), seen)
            })
            .collect()
    }
}

/// A tree as `.rewind/at/` shows it: modes without write bits.
fn as_past(tree: &Tree) -> Tree {
    tree.iter()
        .map(|(p, s)| {
            let s = match s {
                Seen::File { content, mode } => Seen::File {
                    content: content.clone(),
                    mode: mode & 0o555,
                },
                Seen::Dir(m) => Seen::Dir(m & 0o555),
                other => other.clone(),
            };
            (p.clone(), s)
        })
        .collect()
}

// ---- the real thing --------------------------------------------------------------------------

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let (a, b) = (cpath(a), cpath(b));
    // SAFETY: renameat2(2) with two NUL-terminated paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Each writer: `path mode hex pieces`; mode `w` writes the content in pieces (the first
/// truncating), `a` appends the block `pieces` times; every piece is its own open and close.
/// Both wait for a line on stdin, so they start together.
const WRITER: &str = r#"
import os, sys
path, mode, data, pieces = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4])
sys.stdin.readline()
if mode == "w":
    step = max(1, -(-len(data) // pieces))
    chunks = [data[i:i + step] for i in range(0, len(data), step)] or [b""]
    for n, chunk in enumerate(chunks):
        flags = os.O_WRONLY | (os.O_CREAT | os.O_TRUNC if n == 0 else os.O_APPEND)
        fd = os.open(path, flags, 0o666)
        os.write(fd, chunk)
        os.close(fd)
else:
    for _ in range(pieces):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, data)
        os.close(fd)
"#;

fn two_at_once(root: &Path, jobs: [(String, &str, &[u8], usize); 2]) -> Result<(), String> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut children = Vec::new();
    for (path, mode, data, pieces) in &jobs {
        let child = python_command(root, WRITER)
            .arg(path)
            .arg(mode)
            .arg(hex(data))
            .arg(pieces.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        children.push(child);
    }
    for c in &mut children {
        let _ = c.stdin.as_mut().unwrap().write_all(b"go\n");
    }
    let mut errors = String::new();
    for c in children {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            errors += &String::from_utf8_lossy(&out.stderr);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Do `step` on the real tree at `root`. `Checkpoint` and `Remount` are done by the caller.
fn run(root: &Path, step: &Step) -> Result<(), String> {
    let at = |p: &str| root.join(p);
    let io = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    match step {
        Step::Write(p, c) => io(fs::write(at(p), c.bytes())),
        Step::Append(p, c) => io(fs::OpenOptions::new()
            .append(true)
            .open(at(p))
            .and_then(|mut f| f.write_all(&c.bytes()))),
        Step::Truncate { path, len, by_path } => {
            if *by_path {
                let p = cpath(&at(path));
                // SAFETY: truncate(2) with a NUL-terminated path.
                if unsafe { libc::truncate(p.as_ptr(), *len as libc::off_t) } == 0 {
                    Ok(())
                } else {
                    io(Err(std::io::Error::last_os_error()))
                }
            } else {
                io(fs::OpenOptions::new()
                    .write(true)
                    .open(at(path))
                    .and_then(|f| f.set_len(*len as u64)))
            }
        }
        Step::Delete(p) => io(fs::remove_file(at(p))),
        Step::Mkdir(d) => io(fs::create_dir(at(d))),
        Step::Rmdir(d) => io(fs::remove_dir(at(d))),
        Step::Rename(a, b) => io(fs::rename(at(a), at(b))),
        Step::Exchange(a, b) => io(exchange(&at(a), &at(b))),
        Step::Link(a, b) => io(fs::hard_link(at(a), at(b))),
        Step::Symlink(p, target) => io(std::os::unix::fs::symlink(target, at(p))),
        Step::Chmod(p, m) => io(fs::set_permissions(at(p), fs::Permissions::from_mode(*m))),
        Step::TwoWriters(a, x, b, y) => two_at_once(
            root,
            [
                (a.clone(), "w", x, 1 + x.len() % 4),
                (b.clone(), "w", y, 1 + y.len() % 3),
            ],
        ),
        Step::TwoAppenders(p, block, n) => two_at_once(
            root,
            [
                (p.clone(), "a", block, *n as usize),
                (p.clone(), "a", block, *n as usize),
            ],
        ),
        Step::Checkpoint | Step::Remount | Step::Gc(_) => Ok(()),
    }
}

/// The tree under `root` (not following symlinks), and each file's or symlink's inode.
fn walk(root: &Path) -> Result<(Tree, BTreeMap<String, u64>), String> {
    fn go(
        root: &Path,
        rel: &str,
        tree: &mut Tree,
        inodes: &mut BTreeMap<String, u64>,
    ) -> Result<(), String> {
        fn at(p: &Path) -> impl Fn(std::io::Error) -> String + '_ {
            move |e| format!("reading {}: {e}", p.display())
        }
        let dir = root.join(rel);
        for entry in fs::read_dir(&dir).map_err(at(&dir))? {
            let name = entry.map_err(at(&dir))?.file_name();
            let path = join(rel, &name.to_string_lossy());
            let full = root.join(&path);
            let md = fs::symlink_metadata(&full).map_err(at(&full))?;
            let mode = md.mode() & 0o7777;
            let seen = if md.is_dir() {
                go(root, &path, tree, inodes)?;
                Seen::Dir(mode)
            } else if md.file_type().is_symlink() {
                inodes.insert(path.clone(), md.ino());
                let target = fs::read_link(&full).map_err(at(&full))?;
                Seen::Symlink(target.as_os_str().as_bytes().to_vec())
            } else {
                inodes.insert(path.clone(), md.ino());
                Seen::File {
                    content: fs::read(&full).map_err(at(&full))?,
                    mode,
                }
            };
            tree.insert(path, seen);
        }
        Ok(())
    }
    let mut tree = Tree::new();
    let mut inodes = BTreeMap::new();
    go(root, "", &mut tree, &mut inodes)?;
    Ok((tree, inodes))
}

fn show(s: Option<&Seen>) -> String {
    match s {
        None => "absent".into(),
        Some(Seen::Dir(m)) => format!("folder {m:o}"),
        Some(Seen::Symlink(t)) => format!("symlink -> {}", String::from_utf8_lossy(t)),
        Some(Seen::File { content, mode }) => {
            let head = &content[..content.len().min(40)];
            format!(
                "file {mode:o}, {} bytes {:?}{}",
                content.len(),
                String::from_utf8_lossy(head),
                if content.len() > 40 { "…" } else { "" }
            )
        }
    }
}

/// Where two trees differ, one line a path; empty if they are the same.
fn differences(want: &Tree, got: &Tree) -> String {
    let mut out = String::new();
    for p in want
        .keys()
        .chain(got.keys().filter(|p| !want.contains_key(*p)))
    {
        let (w, g) = (want.get(p), got.get(p));
        if w != g {
            out += &format!("  {p}: expected {}, found {}\n", show(w), show(g));
        }
    }
    out
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The end of the history, for failure reports.
fn history(ws: &Workspace) -> String {
    let out = rw(ws, &["log"]);
    let log = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(120)..].join("\n")
}

// ---- one case --------------------------------------------------------------------------------

/// What a case did, for the line each case prints.
#[derive(Default)]
struct Stats {
    ok: usize,
    failed: usize,
    skipped: usize,
    checkpoints: usize,
    restored: usize,
    /// Changes gc removed, and checkpoints it left too old to answer.
    gc_removed: u64,
    refused: usize,
}

fn run_case(initial: &[Op], ops: &[Op], stats: &mut Stats) -> Result<(), String> {
    let mut ws = Workspace::new();
    let root = ws.path();
    let mut model = Model::default();
    // What was run, for failure reports.
    let mut done = String::new();
    // A project that was there before it was mounted over.
    for (n, op) in initial.iter().enumerate() {
        let step = model.step(op);
        let mut next = model.clone();
        let expect = next.apply(&step);
        if expect == Expect::Skip {
            // It would act outside the workspace (through a symlink), as in the ops below.
            done += &format!("  initial {n}: {step:?} not run\n");
            continue;
        }
        let result = run(&root, &step);
        match (&expect, &result) {
            (Expect::Ok, Ok(())) => model = next,
            (Expect::Fails, Err(_)) => {}
            _ => {
                return Err(format!(
                    "initial step {n} {step:?} on the disk (the model is wrong): the model says \
                     {expect:?}, the disk gave {result:?}"
                ));
            }
        }
        done += &format!("  before mounting: {step:?} {expect:?}\n");
    }
    ws.mount();
    let mut checkpoints: Vec<(String, Tree)> = Vec::new();
    let take = |ws: &Workspace, model: &Model, checkpoints: &mut Vec<(String, Tree)>| {
        let name = format!("cp{}", checkpoints.len());
        let out = rw(ws, &["checkpoint", &name]);
        if !out.status.success() {
            return Err(format!("checkpoint {name} failed: {}", text(&out)));
        }
        checkpoints.push((name, model.tree()));
        Ok(())
    };
    take(&ws, &model, &mut checkpoints)?;
    done += "  checkpoint cp0\n";
    // Checkpoints taken before the last gc may be refused as too old; later ones never.
    let mut gc_before = 0;
    for (n, op) in ops.iter().enumerate() {
        let step = model.step(op);
        match step {
            Step::Checkpoint => {
                take(&ws, &model, &mut checkpoints)?;
                done += &format!("  {n}: checkpoint cp{}\n", checkpoints.len() - 1);
            }
            Step::Remount => {
                ws.unmount();
                ws.mount();
                done += &format!("  {n}: remount\n");
            }
            Step::Gc(size) => {
                // Held-back creates are recorded first, so the dry run and the run see the
                // same history.
                let sync = rw(&ws, &["sync"]);
                let dry = rw(&ws, &["gc", "--max-size", size, "--dry-run"]);
                let real = rw(&ws, &["gc", "--max-size", size]);
                if !sync.status.success() || !dry.status.success() || !real.status.success() {
                    return Err(format!(
                        "{done}  {n}: gc --max-size {size} failed:\n{}{}{}",
                        text(&sync),
                        text(&dry),
                        text(&real)
                    ));
                }
                let (would, did) = (removed(&dry.stdout), removed(&real.stdout));
                if would.is_none() || would != did {
                    return Err(format!(
                        "{done}  {n}: gc --max-size {size} did not do what its dry run said:\n{}{}",
                        text(&dry),
                        text(&real)
                    ));
                }
                stats.gc_removed += did.map_or(0, |(changes, _)| changes);
                gc_before = checkpoints.len();
                done += &format!("  {n}: gc --max-size {size}: removed {did:?}\n");
            }
            _ => {
                let mut next = model.clone();
                let expect = next.apply(&step);
                if expect == Expect::Skip {
                    stats.skipped += 1;
                    done += &format!("  {n}: {step:?} not run\n");
                    continue;
                }
                let result = run(&root, &step);
                match (expect, &result) {
                    (Expect::Ok, Ok(())) => {
                        stats.ok += 1;
                        model = next;
                    }
                    (Expect::Fails, Err(_)) => {
                        stats.failed += 1;
                    }
                    _ => {
                        return Err(format!(
                            "{done}  {n}: {step:?}: the model says {expect:?}, the mount gave \
                             {result:?}"
                        ));
                    }
                }
                done += &format!("  {n}: {step:?} {expect:?}\n");
            }
        }
    }
    // Every failure report starts with what was done.
    let done = format!("steps:\n{done}");

    // 1. The workspace is the model, hard links included.
    let (now, inodes) = walk(&root)?;
    let want = model.tree();
    let diff = differences(&want, &now);
    if !diff.is_empty() {
        return Err(format!(
            "{done}the workspace is not the model:\n{diff}history:\n{}",
            history(&ws)
        ));
    }
    for (p, node) in &model.tree {
        for (q, other) in model.tree.range(p.clone()..).skip(1) {
            if let (Node::Obj(i), Node::Obj(j)) = (node, other)
                && (i == j) != (inodes[p] == inodes[q])
            {
                return Err(format!(
                    "{done}{p} and {q} should {}be one file",
                    if i == j { "" } else { "not " }
                ));
            }
        }
    }

    // 2. The mount saw everything: nothing for the next mount's scan to record.
    let external = rw(&ws, &["log", "--agent", "external"]);
    if !external.status.success() || !external.stdout.is_empty() {
        return Err(format!(
            "{done}changes recorded as external: {}",
            text(&external)
        ));
    }

    // 3. Every checkpoint, seen through .rewind/at/ and by rolling back to it.
    let past_view = |ws: &Workspace, name: &str, tree: &Tree| -> Result<(), String> {
        let (past, _) = walk(&ws.path().join(".rewind/at").join(name))
            .map_err(|e| format!("{done}{e}\nhistory:\n{}", history(ws)))?;
        let diff = differences(&as_past(tree), &past);
        if diff.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{done}.rewind/at/{name}/ is not the tree at {name}:\n{diff}history:\n{}",
                history(ws)
            ))
        }
    };
    // A checkpoint that gc left without whole history after it is refused, everywhere, with
    // an error naming the oldest point kept; every other one answers exactly.
    let mut answered: Vec<(String, Tree)> = Vec::new();
    for (i, (name, tree)) in checkpoints.iter().enumerate() {
        let preview = rw(&ws, &["rollback", "--to", name, "--dry-run"]);
        let refused = preview.status.code() == Some(2)
            && String::from_utf8_lossy(&preview.stderr).contains("oldest point still kept");
        if !refused {
            answered.push((name.clone(), tree.clone()));
            continue;
        }
        if i >= gc_before || !answered.is_empty() {
            return Err(format!(
                "{done}{name} was refused as older than what gc kept, but {}: {}",
                if i >= gc_before {
                    "it was taken after the last gc".to_string()
                } else {
                    format!("the older {} was answered", answered[0].0)
                },
                text(&preview)
            ));
        }
        stats.refused += 1;
        let view = ws.path().join(".rewind/at").join(name);
        if fs::symlink_metadata(&view).is_ok() {
            return Err(format!(
                "{done}{name} is refused, but .rewind/at/{name}/ is there"
            ));
        }
        let (before, _) = walk(&root)?;
        let out = rw(&ws, &["rollback", "--to", name, "--force", "-v"]);
        let (after, _) = walk(&root)?;
        if out.status.code() != Some(2) || before != after {
            return Err(format!(
                "{done}{name} is refused, but rollback --to {name} --force: {}",
                text(&out)
            ));
        }
        let cat = rw(&ws, &["diff", "--from", name, "--stat"]);
        if cat.status.code() != Some(2) {
            return Err(format!(
                "{done}{name} is refused, but diff --from {name}: {}",
                text(&cat)
            ));
        }
    }
    let checkpoints = answered;
    for (name, tree) in &checkpoints {
        past_view(&ws, name, tree)?;
    }
    for (name, tree) in &checkpoints {
        let (before, _) = walk(&root)?;
        let dry = rw(&ws, &["rollback", "--to", name, "--force", "--dry-run"]);
        let out = rw(&ws, &["rollback", "--to", name, "--force", "-v"]);
        same_plan(&dry, &out)
            .map_err(|e| format!("{done}rollback --to {name}: {e}history:\n{}", history(&ws)))?;
        if !out.status.success() {
            return Err(format!(
                "{done}rollback --to {name} failed: {}history:\n{}",
                text(&out),
                history(&ws)
            ));
        }
        let (after, _) = walk(&root)?;
        let diff = differences(tree, &after);
        if !diff.is_empty() {
            return Err(format!(
                "{done}rollback --to {name} did not give the tree at {name}:\n{diff}rollback said: {}history:\n{}",
                text(&out),
                history(&ws)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(session) = stdout
            .lines()
            .find(|l| l.contains(": restored "))
            .and_then(|l| l.split(':').next())
        else {
            // Nothing to do: the workspace was that tree already.
            if before != after {
                return Err(format!(
                    "{done}rollback --to {name} did nothing but: {}",
                    text(&out)
                ));
            }
            continue;
        };
        stats.restored += restored(&stdout);
        let dry = rw(&ws, &["rollback", "--session", session, "--dry-run"]);
        let undo = rw(&ws, &["rollback", "--session", session, "-v"]);
        same_plan(&dry, &undo).map_err(|e| {
            format!(
                "{done}undoing {session} (the rollback to {name}): {e}history:\n{}",
                history(&ws)
            )
        })?;
        if !undo.status.success() {
            return Err(format!(
                "{done}undoing {session} (the rollback to {name}) failed: {}history:\n{}",
                text(&undo),
                history(&ws)
            ));
        }
        let (undone, _) = walk(&root)?;
        let diff = differences(&before, &undone);
        if !diff.is_empty() {
            return Err(format!(
                "{done}undoing {session} (the rollback to {name}) did not give back the tree before it:\n{diff}undo said: {}history:\n{}",
                text(&undo),
                history(&ws)
            ));
        }
    }
    // History grown by rollbacks does not change the past.
    for (name, tree) in &checkpoints {
        past_view(&ws, name, tree).map_err(|e| format!("after the rollbacks: {e}"))?;
    }
    stats.checkpoints = checkpoints.len() + stats.refused;
    ws.unmount();
    Ok(())
}

/// N and M in gc's "removed N changes and M blobs" (or its dry run's "would remove ...").
fn removed(out: &[u8]) -> Option<(u64, u64)> {
    let out = String::from_utf8_lossy(out);
    let line = out.lines().next()?;
    let rest = line.split("remove").nth(1)?;
    let mut numbers = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<u64>().ok());
    Some((numbers.next()??, numbers.next()??))
}

/// The dry run's plan is what the run did: the same lines, path for path (skips included),
/// and nothing failed.
fn same_plan(dry: &Output, run: &Output) -> Result<(), String> {
    let lines = |out: &Output| -> Vec<String> {
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.last().is_some_and(|l| {
            l.starts_with("dry run: ") || l.contains(": restored ") || l.starts_with("nothing to")
        }) {
            lines.pop();
        }
        lines
    };
    if dry.status.code() != run.status.code()
        || lines(dry) != lines(run)
        || String::from_utf8_lossy(&run.stdout).contains("\nfailed ")
        || String::from_utf8_lossy(&run.stdout).starts_with("failed ")
    {
        return Err(format!(
            "the dry run's plan is not what the run did:\ndry run: {}run: {}",
            text(dry),
            text(run)
        ));
    }
    Ok(())
}

/// N in a rollback's "rollback-M: restored N paths".
fn restored(out: &str) -> usize {
    out.lines()
        .find_map(|l| l.split(": restored ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

// ---- the property ----------------------------------------------------------------------------

/// When the test began, and when shrinking a failure must stop.
static STARTED: OnceLock<Instant> = OnceLock::new();
static SHRINK_UNTIL: OnceLock<Instant> = OnceLock::new();

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(18);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        max_shrink_iters: 100_000,
        ..ProptestConfig::default()
    }
}

/// The first failure starts the shrinking clock (see the module's comment).
fn failed() {
    SHRINK_UNTIL.get_or_init(|| {
        let now = Instant::now();
        if std::env::var_os("NEXTEST").is_some() || std::env::var_os("NEXTEST_RUN_ID").is_some() {
            let started = *STARTED.get().unwrap_or(&now);
            started + Duration::from_secs(165)
        } else {
            let secs = std::env::var("REWIND_MODEL_SHRINK_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(600);
            now + Duration::from_secs(secs)
        }
    });
}

proptest! {
    #![proptest_config(config())]

    /// Random sequences of what users do: the workspace is always the model, and every
    /// checkpoint is the model's tree at that moment, through `.rewind/at/NAME/` and by a
    /// rollback to it, which its own undo takes back.
    #[test]
    fn every_checkpoint_is_the_tree_it_was_taken_on(
        initial in proptest::collection::vec(initial_op(), 0..8),
        ops in proptest::collection::vec(op(), 5..40),
    ) {
        STARTED.get_or_init(Instant::now);
        // SAFETY: umask(2) only sets this process's file mode mask.
        unsafe { libc::umask(0o022) };
        if SHRINK_UNTIL.get().is_some_and(|until| Instant::now() > *until) {
            // Out of time to shrink: the smallest failure found so far is the one reported
            // and kept; candidates from now on count as passing, which ends the shrinking.
            return Ok(());
        }
        let begun = Instant::now();
        let mut stats = Stats::default();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(&initial, &ops, &mut stats)));
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into()),
            ),
        };
        eprintln!(
            "case: {} initial, {} ops ({} done, {} failed as expected, {} not run), {} checkpoints ({} refused after gc), {} changes removed by gc, {} paths restored, {:.1}s, {}",
            initial.len(),
            ops.len(),
            stats.ok,
            stats.failed,
            stats.skipped,
            stats.checkpoints,
            stats.refused,
            stats.gc_removed,
            stats.restored,
            begun.elapsed().as_secs_f64(),
            if error.is_some() { "FAILED" } else { "ok" }
        );
        if let Some(e) = error {
            failed();
            return Err(TestCaseError::fail(e));
        }
    }
}
