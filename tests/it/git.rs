//! History that reads, applies and travels like git (issue #13), through a real mount:
//!
//! 1. `rewind diff` / `rewind show` are git's extended format (`git diff --binary`): a property test takes random
//!    histories of text files (CR, CRLF, no final newline, bytes that are not UTF-8, odd names,
//!    nested folders; creates, edits, deletes, renames, chmod) with checkpoints A (in the
//!    middle) and B (later), and checks that `rewind diff --from A --to B` turns a copy of
//!    `.rewind/at/A/` into B's tree with `git apply` and back with `git apply -R`, and that its
//!    `--stat` is git's; a second one checks that a session's diff applies in order onto the tree
//!    before it. Fixed cases: CRLF with `patch` and `git apply`, a mode change, a rename, a
//!    binary file, `--stat`, the whole diff and colour byte for byte against git's.
//! 2. A session's, agent's or turn's diff shows what it did and nothing else, and says where
//!    someone else changed the file in between.
//! 3. Rolling a selection back again after undoing its rollback works.
//! 4. One line format (`log`, `watch`, `.rewind/log`), one JSON shape (`log --json`,
//!    `watch --json`, `.rewind/log.json`, `.rewind/events`); names lossless in JSON and escaped
//!    for people; a retracted id says so; a rollback with nothing to do says so and exits 0.
//! 5. Past views are honest: ignored paths absent, symlink sizes, mtimes, modes.
//! 6. `rewind export` writes a reviewable branch and touches nothing else.
//! 7. Completions, the man page, and `cargo install` (a test of its own: it runs cargo).
//!
//! The property tests mount a workspace per case (about a second each): 16 cases each by
//! default, `PROPTEST_CASES` for more (run long ones with `rcargo test`, which has no time
//! limit). Failing cases are kept in `tests/it/git.proptest-regressions` and replayed first;
//! shrinking stops 150 s into a nextest run, so the smallest failure found so far is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use serde_json::{Value, json};

use crate::common::{REWIND, Workspace, ok, ok_bytes, python_command, rw_env, sh, wait_for};

// ---- helpers ---------------------------------------------------------------------------------

/// `rewind ARGS` from inside the workspace with the fixed git identity and configuration of
/// [`git_env`] (export runs git); stdout is a pipe, so never coloured.
fn git_rw(ws: &Workspace, args: &[&str]) -> Output {
    git_rw_env(ws, args, &[])
}

fn git_rw_env(ws: &Workspace, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut all = git_env();
    all.extend_from_slice(envs);
    rw_env(ws, args, &all)
}

fn esc(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

/// The data home `Workspace::command` uses (for commands not started through it).
fn data_home(ws: &Workspace) -> PathBuf {
    ws.store().parent().unwrap().join("data")
}

/// git without the machine's or user's configuration, so output is git's defaults.
fn git_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_AUTHOR_NAME", "Human"),
        ("GIT_AUTHOR_EMAIL", "human@example.com"),
        ("GIT_COMMITTER_NAME", "Human"),
        ("GIT_COMMITTER_EMAIL", "human@example.com"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
    ]
}

fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .envs(git_env())
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("COLUMNS");
    cmd
}

#[track_caller]
fn git_ok(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = git(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `git apply [-R]` of `patch` in `dir` (not a repository: it acts as `patch -p1` does).
fn git_apply(dir: &Path, patch: &[u8], reverse: bool) -> Result<(), String> {
    let mut cmd = git(dir);
    cmd.arg("apply");
    if reverse {
        cmd.arg("-R");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(patch).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "git apply{} failed: {}",
            if reverse { " -R" } else { "" },
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Run `script` with bash in `dir` with extra environment; panic with its output if it fails.
#[track_caller]
fn sh_env(dir: &Path, envs: &[(&str, &str)], script: &str) -> String {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .envs(git_env())
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "script failed:\n{script}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const AGENT: &[(&str, &str)] = &[
    ("REWIND_SESSION", "agent-session"),
    ("REWIND_AGENT", "claude"),
];
const HUMAN: &[(&str, &str)] = &[("REWIND_SESSION", "human"), ("REWIND_AGENT", "person")];

/// The changes as `rewind log --json` prints them.
fn log_json(ws: &Workspace, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["log", "--json"];
    args.extend_from_slice(extra);
    ok(git_rw(ws, &args))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn last_id(ws: &Workspace) -> u64 {
    log_json(ws, &["-n", "1"])
        .last()
        .map_or(0, |c| c["id"].as_u64().unwrap())
}

/// The id of the newest change matching `kind` and `path`.
#[track_caller]
fn id_of(changes: &[Value], kind: &str, path: &str) -> u64 {
    changes
        .iter()
        .rev()
        .find(|c| c["kind"] == kind && c["path"] == path)
        .unwrap_or_else(|| panic!("no {kind} {path} in {changes:#?}"))["id"]
        .as_u64()
        .unwrap()
}

/// Seconds since the epoch of an RFC 3339 time in UTC (`2026-11-22T13:38:22.591984180Z`).
fn epoch_secs(t: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| -> i64 { t[r].parse().unwrap() };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    assert!(t.ends_with('Z'), "{t}");
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

/// What is at a path of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File { content: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Link(Vec<u8>),
}

/// Everything under `root` (not following symlinks), with exact modes.
fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    fn walk(root: &Path, rel: &[u8], out: &mut BTreeMap<Vec<u8>, Entry>) {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(OsStr::from_bytes(rel))
        };
        let mut names: Vec<Vec<u8>> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .collect();
        names.sort();
        for name in names {
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let full = root.join(OsStr::from_bytes(&path));
            let meta =
                fs::symlink_metadata(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
            let mode = meta.mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&full).unwrap();
                out.insert(path, Entry::Link(target.as_os_str().as_bytes().to_vec()));
            } else if meta.is_dir() {
                out.insert(path.clone(), Entry::Dir { mode });
                walk(root, &path, out);
            } else {
                let content = fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
                out.insert(path, Entry::File { content, mode });
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, b"", &mut out);
    out
}

/// Regular files only: path → (content, executable). What git tracks.
type Tree = BTreeMap<Vec<u8>, (Vec<u8>, bool)>;

fn files(root: &Path) -> Tree {
    snapshot(root)
        .into_iter()
        .filter_map(|(p, e)| match e {
            Entry::File { content, mode } => Some((p, (content, mode & 0o100 != 0))),
            _ => None,
        })
        .collect()
}

/// Where two trees differ, for a failure message; `None` if they are the same.
fn tree_difference(what: &str, got: &Tree, want: &Tree) -> Option<String> {
    let mut out = Vec::new();
    for (p, (c, x)) in want {
        match got.get(p) {
            None => out.push(format!("  missing {}", esc(p))),
            Some((gc, gx)) => {
                if gc != c {
                    out.push(format!(
                        "  {}: content {:?}, expected {:?}",
                        esc(p),
                        esc(gc),
                        esc(c)
                    ));
                }
                if gx != x {
                    out.push(format!("  {}: executable {gx}, expected {x}", esc(p)));
                }
            }
        }
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        out.push(format!("  unexpected {}", esc(p)));
    }
    (!out.is_empty()).then(|| format!("{what}:\n{}", out.join("\n")))
}

/// A writable copy of `from` (a past view is read-only) in a new folder `to`.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    let out = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp: {out:?}");
    let out = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "chmod: {out:?}");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A process that reads lines from a file or a command's stdout in the background.
struct Reader {
    child: Child,
    lines: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Reader {
    fn spawn(mut cmd: Command) -> Reader {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if line.last() == Some(&b'\n') {
                            line.pop();
                        }
                        sink.lock().unwrap().push(line);
                    }
                }
            }
        });
        Reader { child, lines }
    }

    fn lines(&self) -> Vec<Vec<u8>> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- 1. the property: random histories apply with git -----------------------------------------

/// Folders and file names never coincide, so a file never stands where a folder must be.
const DIRS: &[&[u8]] = &[b"", b"src", b"src/deep", b"docs/x y", "naïve".as_bytes()];
const NAMES: &[&[u8]] = &[
    b"a.txt",
    b"b.rs",
    b"c",
    b"run.sh",
    "é.md".as_bytes(),
    b"n\xffu",
    b"q\"t",
];
/// Lines (before their end): CRs inside and alone, bytes that are not UTF-8, indentation.
const POOL: &[&[u8]] = &[
    b"fn main() {",
    b"    let x = 1;",
    b"}",
    b"",
    b"# heading",
    "café".as_bytes(),
    b"\xff\xfe latin-1 \xe9t\xe9",
    b"a\rb",
    b"\r",
    b"trailing space ",
    b"\tindented",
    b"x",
    b"return y;",
    b"\x1b[31mred\x1b[m",
];

#[derive(Clone, Debug)]
struct Line {
    pick: usize,
    n: u8,
    crlf: bool,
}

impl Line {
    fn bytes(&self) -> Vec<u8> {
        let mut b = POOL[self.pick].to_vec();
        if self.n > 0 {
            b.extend_from_slice(format!(" {}", self.n).as_bytes());
        }
        b.extend_from_slice(if self.crlf { b"\r\n" } else { b"\n" });
        b
    }
}

#[derive(Clone, Debug)]
struct Content {
    lines: Vec<Line>,
    final_newline: bool,
}

impl Content {
    fn bytes(&self) -> Vec<u8> {
        let mut b: Vec<u8> = self.lines.iter().flat_map(Line::bytes).collect();
        if !self.final_newline && b.last() == Some(&b'\n') {
            b.pop();
            if self.lines.last().is_some_and(|l| l.crlf) {
                b.pop();
            }
        }
        b
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Replace(Index, Line),
    Insert(Index, Line),
    Remove(Index),
    /// Drop the final `\n` (leaving a `\r` before it, if any), or add one.
    FlipFinalNewline,
    /// `\n` ↔ `\r\n` at the end of one line.
    FlipCrlf(Index),
}

fn mutate(content: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = content
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    for m in muts {
        match m {
            Mutation::Replace(i, l) if !lines.is_empty() => {
                let i = i.index(lines.len());
                lines[i] = l.bytes();
            }
            Mutation::Insert(i, l) => {
                let i = i.index(lines.len() + 1);
                lines.insert(i, l.bytes());
            }
            Mutation::Remove(i) if !lines.is_empty() => {
                let i = i.index(lines.len());
                lines.remove(i);
            }
            Mutation::FlipFinalNewline => match lines.last_mut() {
                Some(l) if l.ends_with(b"\n") => {
                    l.pop();
                }
                Some(l) => l.push(b'\n'),
                None => lines.push(b"\n".to_vec()),
            },
            Mutation::FlipCrlf(i) if !lines.is_empty() => {
                let i = i.index(lines.len());
                let l = &mut lines[i];
                if l.ends_with(b"\r\n") {
                    l.truncate(l.len() - 2);
                    l.push(b'\n');
                } else if l.ends_with(b"\n") {
                    l.truncate(l.len() - 1);
                    l.extend_from_slice(b"\r\n");
                }
            }
            _ => {}
        }
    }
    lines.concat()
}

#[derive(Clone, Debug)]
enum Op {
    /// Write a file (new, or over an existing one), then make it executable or not.
    Create {
        dir: usize,
        name: usize,
        content: Content,
        exec: bool,
    },
    Edit {
        file: Index,
        muts: Vec<Mutation>,
    },
    Delete {
        file: Index,
    },
    /// Rename an existing file (over another one, if the target exists).
    Rename {
        file: Index,
        dir: usize,
        name: usize,
    },
    /// chmod +x / -x.
    Chmod {
        file: Index,
    },
}

fn line() -> impl Strategy<Value = Line> {
    (0..POOL.len(), 0u8..4, prop::bool::weighted(0.3)).prop_map(|(pick, n, crlf)| Line {
        pick,
        n,
        crlf,
    })
}

fn content() -> impl Strategy<Value = Content> {
    (
        proptest::collection::vec(line(), 0..16),
        prop::bool::weighted(0.7),
    )
        .prop_map(|(lines, final_newline)| Content {
            lines,
            final_newline,
        })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), line()).prop_map(|(i, l)| Mutation::Replace(i, l)),
        2 => (any::<Index>(), line()).prop_map(|(i, l)| Mutation::Insert(i, l)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        1 => Just(Mutation::FlipFinalNewline),
        1 => any::<Index>().prop_map(Mutation::FlipCrlf),
    ]
}

fn create() -> impl Strategy<Value = Op> {
    (
        0..DIRS.len(),
        0..NAMES.len(),
        content(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(dir, name, content, exec)| Op::Create {
            dir,
            name,
            content,
            exec,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => create(),
        5 => (any::<Index>(), proptest::collection::vec(mutation(), 1..4))
            .prop_map(|(file, muts)| Op::Edit { file, muts }),
        1 => any::<Index>().prop_map(|file| Op::Delete { file }),
        2 => (any::<Index>(), 0..DIRS.len(), 0..NAMES.len())
            .prop_map(|(file, dir, name)| Op::Rename { file, dir, name }),
        1 => any::<Index>().prop_map(|file| Op::Chmod { file }),
    ]
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Apply `op` to the model and say what the mount must be told (one JSON array a step).
fn step(model: &mut Tree, op: &Op, out: &mut Vec<Value>) {
    let pick = |model: &Tree, i: &Index| -> Option<Vec<u8>> {
        (!model.is_empty()).then(|| model.keys().nth(i.index(model.len())).unwrap().clone())
    };
    match op {
        Op::Create {
            dir,
            name,
            content,
            exec,
        } => {
            let path = join(DIRS[*dir], NAMES[*name]);
            let bytes = content.bytes();
            out.push(json!(["write", hex(&path), hex(&bytes)]));
            let was = model.get(&path).is_some_and(|(_, x)| *x);
            if was != *exec {
                out.push(json!([
                    "chmod",
                    hex(&path),
                    if *exec { 0o755 } else { 0o644 }
                ]));
            }
            model.insert(path, (bytes, *exec));
        }
        Op::Edit { file, muts } => {
            let Some(path) = pick(model, file) else {
                return;
            };
            let entry = model.get_mut(&path).unwrap();
            entry.0 = mutate(&entry.0, muts);
            out.push(json!(["write", hex(&path), hex(&entry.0)]));
        }
        Op::Delete { file } => {
            let Some(path) = pick(model, file) else {
                return;
            };
            model.remove(&path);
            out.push(json!(["rm", hex(&path)]));
        }
        Op::Rename { file, dir, name } => {
            let Some(path) = pick(model, file) else {
                return;
            };
            let to = join(DIRS[*dir], NAMES[*name]);
            if to == path {
                return;
            }
            let entry = model.remove(&path).unwrap();
            model.insert(to.clone(), entry);
            out.push(json!(["mv", hex(&path), hex(&to)]));
        }
        Op::Chmod { file } => {
            let Some(path) = pick(model, file) else {
                return;
            };
            let entry = model.get_mut(&path).unwrap();
            entry.1 = !entry.1;
            out.push(json!([
                "chmod",
                hex(&path),
                if entry.1 { 0o755 } else { 0o644 }
            ]));
        }
    }
}

/// Carries out the steps through the mount, in one process (so they are attributed to the
/// session in its environment).
const RUNNER: &str = r#"
import json, os, sys
os.umask(0o022)
for line in sys.stdin:
    op = json.loads(line)
    p = bytes.fromhex(op[1])
    if op[0] in ("write", "mv"):
        q = p if op[0] == "write" else bytes.fromhex(op[2])
        d = os.path.dirname(q)
        if d:
            os.makedirs(d, exist_ok=True)
    if op[0] == "write":
        with open(p, "wb") as f:
            f.write(bytes.fromhex(op[2]))
    elif op[0] == "chmod":
        os.chmod(p, op[2])
    elif op[0] == "rm":
        os.remove(p)
    elif op[0] == "mv":
        os.rename(p, bytes.fromhex(op[2]))
"#;

fn run_steps(root: &Path, steps: &[Value], envs: &[(&str, &str)]) -> Result<(), String> {
    let mut child = python_command(root, RUNNER)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for s in steps {
        input += &format!("{s}\n");
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the steps failed through the mount: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// `rewind diff --from A --to B` applies both ways, and its `--stat` is git's.
    Range,
    /// `rewind diff --session S` (S made everything between A and B) applies onto A.
    Session,
}

const SESSION: &[(&str, &str)] = &[("REWIND_SESSION", "agent-s"), ("REWIND_AGENT", "claude")];

/// A step for people: `write "docs/x y/a.txt" "a\r\nb"`.
fn describe(step: &Value) -> String {
    let word = |i: usize| -> String {
        match &step[i] {
            Value::String(h) => {
                let bytes: Vec<u8> = (0..h.len())
                    .step_by(2)
                    .map(|j| u8::from_str_radix(&h[j..j + 2], 16).unwrap())
                    .collect();
                format!("\"{}\"", esc(&bytes))
            }
            Value::Number(n) => format!("{:o}", n.as_u64().unwrap()),
            _ => String::new(),
        }
    };
    format!("{} {} {}", step[0].as_str().unwrap(), word(1), word(2))
}

fn run_case(pre: &[Op], mid: &[Op], post: &[Op], check: Check) -> Result<(), String> {
    // The model first: the steps of each phase, and the tree after it.
    let mut model = Tree::new();
    let mut phases = Vec::new();
    let mut trees = Vec::new();
    let mut script = String::new();
    for (ops, who) in [(pre, "anyone"), (mid, "session agent-s"), (post, "anyone")] {
        let mut steps = Vec::new();
        for op in ops {
            step(&mut model, op, &mut steps);
        }
        script += &format!("  by {who}:\n");
        for s in &steps {
            script += &format!("    {}\n", describe(s));
        }
        script += if trees.len() < 2 {
            ["  checkpoint A\n", "  checkpoint B\n"][trees.len()]
        } else {
            ""
        };
        phases.push(steps);
        trees.push(model.clone());
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        execute(&phases, &trees, check)
    }));
    let error = match result {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e,
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()),
    };
    Err(format!("{error}\nthe history:\n{script}"))
}

fn execute(phases: &[Vec<Value>], trees: &[Tree], check: Check) -> Result<(), String> {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let cp = |name: &str| -> Result<(), String> {
        let out = git_rw(&ws, &["checkpoint", name]);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| format!("checkpoint {name}: {out:?}"))
    };
    run_steps(&root, &phases[0], &[])?;
    cp("A")?;
    run_steps(&root, &phases[1], SESSION)?;
    cp("B")?;
    run_steps(&root, &phases[2], &[])?;
    // Record the new files still held back, as any rewind command does first: the past views
    // read below must not depend on that (`a_new_file_is_not_in_the_past_while_held_back`
    // tests it on its own).
    ok_bytes(&git_rw(&ws, &["sync"]));
    let (a, b, model) = (&trees[0], &trees[1], &trees[2]);

    // The model is the truth: the workspace now, and the past views.
    if let Some(d) = tree_difference("the workspace", &files(&root), model) {
        return Err(d);
    }
    for (name, want) in [("A", a), ("B", b)] {
        let got = files(&root.join(".rewind/at").join(name));
        if let Some(d) = tree_difference(&format!(".rewind/at/{name}"), &got, want) {
            return Err(d);
        }
    }
    let work = ws.plain();
    match check {
        Check::Range => {
            let patch = ok_bytes(&git_rw(&ws, &["diff", "--from", "A", "--to", "B"]));
            let show = || {
                format!(
                    "the diff:\n{}",
                    patch
                        .split(|b| *b == b'\n')
                        .map(esc)
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            };
            if a == b {
                return if patch.is_empty() {
                    Ok(())
                } else {
                    Err(format!("A and B are the same tree, yet {}", show()))
                };
            }
            let dir = work.join("range");
            copy_tree(&root.join(".rewind/at/A"), &dir);
            // A repository of A, to compare `--stat` with git's once B is applied.
            git_ok(&dir, &["init", "-q"]);
            git_ok(&dir, &["add", "-A"]);
            git_ok(&dir, &["commit", "-q", "--allow-empty", "-m", "A"]);
            git_apply(&dir, &patch, false).map_err(|e| format!("{e}\n{}", show()))?;
            let got: Tree = files(&dir)
                .into_iter()
                .filter(|(p, _)| !p.starts_with(b".git/"))
                .collect();
            if let Some(d) = tree_difference("A with the diff applied", &got, b) {
                return Err(format!("{d}\n{}", show()));
            }
            git_ok(&dir, &["add", "-A"]);
            let want = git_ok(&dir, &["diff", "--cached", "--stat"]);
            let status = git_ok(&dir, &["diff", "--cached", "--name-status", "-z"]);
            let fields: Vec<&[u8]> = status.split(|b| *b == 0).collect();
            let mut deleted = BTreeSet::new();
            let mut i = 0;
            while i + 1 < fields.len() {
                let kind = fields[i];
                if kind.starts_with(b"R") || kind.starts_with(b"C") {
                    i += 3;
                } else {
                    if kind == b"D" {
                        deleted.insert(fields[i + 1].to_vec());
                    }
                    i += 2;
                }
            }
            let stat = ok_bytes(&git_rw(
                &ws,
                &["diff", "--from", "A", "--to", "B", "--stat"],
            ));
            if stat != want {
                return Err(format!(
                    "--stat is not git's:\nrewind:\n{}\ngit:\n{}\n{}",
                    String::from_utf8_lossy(&stat),
                    String::from_utf8_lossy(&want),
                    show()
                ));
            }
            git_apply(&dir, &patch, true).map_err(|e| format!("{e}\n{}", show()))?;
            let got: Tree = files(&dir)
                .into_iter()
                .filter(|(p, _)| !p.starts_with(b".git/"))
                .collect();
            // git's own limit: `git apply -R` of git's own "deleted file mode 100755" brings
            // the file back as 0644. rewind prints exactly what git does there, so the
            // executable bit of a file the diff deletes is not what is tested in reverse.
            let mut want = a.clone();
            for p in &deleted {
                if let (Some(w), Some((_, gx))) = (want.get_mut(p), got.get(p)) {
                    w.1 = *gx;
                }
            }
            if let Some(d) = tree_difference("B with the diff applied in reverse", &got, &want) {
                return Err(format!("{d}\n{}", show()));
            }
        }
        Check::Session => {
            // A session none of whose steps recorded anything (none, or each left its path as
            // it was) is unknown to the history: refused by name, and its diff is empty.
            let out = git_rw(&ws, &["diff", "--session", "agent-s"]);
            let patch = if out.status.code() == Some(2)
                && String::from_utf8_lossy(&out.stderr).contains("there is no session")
            {
                Vec::new()
            } else {
                ok_bytes(&out)
            };
            let show = || {
                format!(
                    "the diff:\n{}",
                    patch
                        .split(|b| *b == b'\n')
                        .map(esc)
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            };
            let dir = work.join("session");
            copy_tree(&root.join(".rewind/at/A"), &dir);
            if !patch.is_empty() {
                git_apply(&dir, &patch, false).map_err(|e| format!("{e}\n{}", show()))?;
            }
            if let Some(d) = tree_difference("A with the session's diff applied", &files(&dir), b) {
                return Err(format!("{d}\n{}", show()));
            }
        }
    }
    Ok(())
}

static STARTED: OnceLock<Instant> = OnceLock::new();
static SHRINK_UNTIL: OnceLock<Instant> = OnceLock::new();

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(16);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        max_shrink_iters: 10_000,
        ..ProptestConfig::default()
    }
}

/// One case, with shrinking bounded in time: under nextest (3 minutes a test) it stops 150 s
/// after the test began, so the smallest failure found so far is reported and kept.
fn property(pre: &[Op], mid: &[Op], post: &[Op], check: Check) -> Result<(), TestCaseError> {
    STARTED.get_or_init(Instant::now);
    // SAFETY: umask(2) only sets this process's file mode mask.
    unsafe { libc::umask(0o022) };
    if SHRINK_UNTIL
        .get()
        .is_some_and(|until| Instant::now() > *until)
    {
        return Ok(());
    }
    let begun = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_case(pre, mid, post, check)
    }));
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
        "case: {}+{}+{} ops, {:.1}s, {}",
        pre.len(),
        mid.len(),
        post.len(),
        begun.elapsed().as_secs_f64(),
        match &error {
            Some(e) => format!(
                "FAILED: {}",
                e.lines().take(2).collect::<Vec<_>>().join(" / ")
            ),
            None => "ok".into(),
        }
    );
    match error {
        None => Ok(()),
        Some(e) => {
            SHRINK_UNTIL.get_or_init(|| {
                let nextest = std::env::var_os("NEXTEST_RUN_ID").is_some();
                if nextest {
                    *STARTED.get().unwrap() + Duration::from_secs(150)
                } else {
                    Instant::now() + Duration::from_secs(600)
                }
            });
            Err(TestCaseError::fail(e))
        }
    }
}

fn pre_ops() -> impl Strategy<Value = Vec<Op>> {
    (
        proptest::collection::vec(create(), 1..5),
        proptest::collection::vec(op(), 0..4),
    )
        .prop_map(|(mut c, o)| {
            c.extend(o);
            c
        })
}

proptest! {
    #![proptest_config(config())]

    /// Random histories: `rewind diff --from A --to B` turns `.rewind/at/A/` into B's tree with
    /// `git apply` (content and executable bit), and back with `git apply -R`; its `--stat` is
    /// `git diff --stat` of the same trees, byte for byte.
    #[test]
    fn a_range_diff_applies_with_git_both_ways(
        pre in pre_ops(),
        mid in proptest::collection::vec(op(), 1..10),
        post in proptest::collection::vec(op(), 0..4),
    ) {
        property(&pre, &mid, &post, Check::Range)?;
    }

    /// Random histories where one session made everything between A and B, and nobody else
    /// touched its files meanwhile: `rewind diff --session` applies in order onto A and gives B.
    #[test]
    fn a_session_diff_applies_in_order_onto_the_tree_before_it(
        pre in pre_ops(),
        mid in proptest::collection::vec(op(), 1..10),
        post in proptest::collection::vec(op(), 0..4),
    ) {
        property(&pre, &mid, &post, Check::Session)?;
    }
}

// ---- 1. fixed cases, byte for byte against git ------------------------------------------------

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Run `cmd` (a shell command line) on a pseudo-terminal, as a person would: `script` gives it
/// one. Returns what the terminal received (`\n` arrives as `\r\n`).
fn on_a_terminal(ws: &Workspace, dir: &Path, cmd: &str, envs: &[(&str, &str)]) -> Vec<u8> {
    let out = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .current_dir(dir)
        .env("XDG_DATA_HOME", data_home(ws))
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .envs(git_env())
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A git repository (in `dir`) whose HEAD is the tree of `from` and whose index is the tree of
/// `to`: `git diff --cached` is git's diff of the two.
fn git_repo_of(from: &Path, to: &Path, dir: &Path) {
    copy_tree(from, dir);
    git_ok(dir, &["init", "-q"]);
    git_ok(dir, &["add", "-A"]);
    git_ok(dir, &["commit", "-q", "--allow-empty", "-m", "from"]);
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_name() != ".git" {
            let p = e.path();
            if p.is_dir() {
                fs::remove_dir_all(&p).unwrap();
            } else {
                fs::remove_file(&p).unwrap();
            }
        }
    }
    copy_tree(to, dir);
    // Hashed anew, not trusted to the index's stat data: `cp -a` keeps the recorded mtimes,
    // ext4 gives a removed file's inode number to the next at once, and a 9-byte file changed
    // within the second it was written looked unchanged to git (seen once in CI under load).
    fs::remove_file(dir.join(".git/index")).unwrap();
    git_ok(dir, &["add", "-A"]);
}

/// CRLF, a mode change, a rename with an edit, a binary file: the diff, `show`, `--stat` and
/// colour are what git prints for the same trees, byte for byte, and `patch` and `git apply`
/// take the diff.
#[test]
fn crlf_modes_renames_binaries_stat_and_colour_are_gits() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        r#"printf 'one\r\ntwo\r\nthree\r\n' > crlf.txt
printf 'fn main() {\n    println!("hi");\n}\n' > build.rs
for i in $(seq 1 30); do echo "line $i of the notes"; done > notes.txt
printf '\000\001\002binary' > blob.bin
mkdir -p src && printf 'pub fn a() {}\n' > src/lib.rs"#,
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "A"]));
    sh(&root, "sed -i 's/two/TWO/' crlf.txt");
    sh(&root, "chmod +x build.rs");
    sh(
        &root,
        "mv notes.txt NOTES.md && sed -i 's/line 15 of/line fifteen of/' NOTES.md",
    );
    sh(&root, r"printf '\000\001\003binary' > blob.bin");
    ok_bytes(&git_rw(&ws, &["checkpoint", "B"]));
    let log = log_json(&ws, &["--since", "A"]);

    // A CRLF file's edit keeps its carriage returns, and both tools apply it.
    let crlf = id_of(&log, "modify", "crlf.txt").to_string();
    let patch = ok_bytes(&git_rw(&ws, &["diff", &crlf]));
    assert!(contains(&patch, b"-two\r\n+TWO\r\n"), "{}", esc(&patch));
    let show = ok_bytes(&git_rw(&ws, &["show", &crlf]));
    assert!(show.ends_with(&patch), "show:\n{}", esc(&show));
    for tool in ["patch", "git"] {
        let dir = ws.plain().join(format!("crlf-{tool}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("crlf.txt"), b"one\r\ntwo\r\nthree\r\n").unwrap();
        if tool == "git" {
            git_apply(&dir, &patch, false).unwrap();
        } else {
            let mut child = Command::new("patch")
                .args(["-p1", "--quiet"])
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&patch).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "patch: {out:?}");
        }
        assert_eq!(
            fs::read(dir.join("crlf.txt")).unwrap(),
            b"one\r\nTWO\r\nthree\r\n",
            "{tool}"
        );
    }

    // A mode change.
    let chmod = id_of(&log, "chmod", "build.rs").to_string();
    let mode = b"diff --git a/build.rs b/build.rs\nold mode 100644\nnew mode 100755\n";
    assert_eq!(ok_bytes(&git_rw(&ws, &["diff", &chmod])), mode);
    assert!(ok_bytes(&git_rw(&ws, &["show", &chmod])).ends_with(mode));

    // A rename (as it happened: the content moved whole).
    let rename = id_of(&log, "rename", "NOTES.md").to_string();
    let show = ok_bytes(&git_rw(&ws, &["show", &rename]));
    assert!(
        contains(
            &show,
            b"diff --git a/notes.txt b/NOTES.md\nsimilarity index 100%\nrename from notes.txt\nrename to NOTES.md\n"
        ),
        "{}",
        esc(&show)
    );
    // A binary file: as `git diff --binary` writes it, full blob ids and both sides whole.
    let blob = id_of(&log, "modify", "blob.bin").to_string();
    let patch = ok_bytes(&git_rw(&ws, &["diff", &blob]));
    assert!(
        contains(
            &patch,
            b"index 0f49c4ae77b43dff338093c78e009676e7e308ba..0468cc67cd03cfa167f0c99fe957425b8eca2617 100644\nGIT binary patch\nliteral 9\n"
        ),
        "{}",
        esc(&patch)
    );

    // The whole range against git's own diff of the same two trees.
    let repo = ws.plain().join("repo");
    git_repo_of(
        &root.join(".rewind/at/A"),
        &root.join(".rewind/at/B"),
        &repo,
    );
    let range = ok_bytes(&git_rw(&ws, &["diff", "--from", "A", "--to", "B"]));
    // (git writes a changed binary file as a `delta` when that is shorter; not for 9 bytes.)
    let git_diff = git_ok(&repo, &["diff", "--cached", "--binary"]);
    assert_eq!(
        String::from_utf8_lossy(&range),
        String::from_utf8_lossy(&git_diff)
    );
    assert_eq!(range, git_diff);
    assert!(contains(
        &range,
        b"rename from notes.txt\nrename to NOTES.md\n"
    ));
    assert!(contains(&range, b"similarity index "));
    assert!(contains(&range, b"old mode 100644\nnew mode 100755\n"));
    assert_eq!(ok_bytes(&git_rw(&ws, &["diff", "--since", "A"])), git_diff);
    let stat = ok_bytes(&git_rw(
        &ws,
        &["diff", "--from", "A", "--to", "B", "--stat"],
    ));
    let git_stat = git_ok(&repo, &["diff", "--cached", "--stat"]);
    assert_eq!(
        String::from_utf8_lossy(&stat),
        String::from_utf8_lossy(&git_stat)
    );
    assert!(contains(&stat, b" build.rs "), "{}", esc(&stat));
    // One change's --stat: the mode change is listed as git lists it.
    assert_eq!(
        String::from_utf8_lossy(&ok_bytes(&git_rw(&ws, &["diff", &chmod, "--stat"]))),
        String::from_utf8_lossy(&git_ok(
            &repo,
            &["diff", "--cached", "--stat", "--", "build.rs"]
        ))
    );

    // Colour: as git colours on a terminal; none when piped (everything above) or NO_COLOR.
    for p in [&range, &stat] {
        assert!(!p.contains(&0x1b));
    }
    let rewind_cmd =
        |extra: &str| format!("{REWIND} -C {} diff --from A --to B{extra}", root.display());
    // (`--binary` beside `--stat` would add the patch.)
    for (extra, binary) in [("", " --binary"), (" --stat", "")] {
        let ours = on_a_terminal(&ws, &repo, &rewind_cmd(extra), &[]);
        let theirs = on_a_terminal(
            &ws,
            &repo,
            &format!("git --no-pager diff --cached{binary}{extra}"),
            &[],
        );
        assert!(ours.contains(&0x1b), "{}", esc(&ours));
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "coloured{extra}"
        );
        let plain = on_a_terminal(&ws, &repo, &rewind_cmd(extra), &[("NO_COLOR", "1")]);
        assert!(!plain.contains(&0x1b), "NO_COLOR{extra}: {}", esc(&plain));
        // A terminal that cannot show colour: git prints none.
        let ours = on_a_terminal(&ws, &repo, &rewind_cmd(extra), &[("TERM", "dumb")]);
        let theirs = on_a_terminal(
            &ws,
            &repo,
            &format!("git --no-pager diff --cached{binary}{extra}"),
            &[("TERM", "dumb")],
        );
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "TERM=dumb{extra}"
        );
    }
}

/// Binary files beside a text file: changed (NULs, random bytes), created, deleted and made
/// empty. `rewind diff --from A` applied with `git apply --binary` turns a copy of
/// `.rewind/at/A/` into the workspace byte for byte, and `-R` turns it back (hostile F2: a
/// `Binary files ... differ` line made git refuse the whole patch, text changes too).
#[test]
fn a_diff_with_binary_files_applies_with_git() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        r"mkdir -p src
{ printf '\000'; head -c 5000 /dev/urandom; } > src/random.bin
printf '\000\000text' > src/nul.txt
printf 'a\n' > src/t.txt
{ printf '\000'; head -c 3000 /dev/urandom; } > gone.bin
printf '\000\001\002' > emptied.bin",
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "A"]));
    sh(
        &root,
        r"head -c 100 /dev/urandom >> src/random.bin
printf '\000\001text' > src/nul.txt
printf 'b\n' > src/t.txt
{ printf '\000'; head -c 700 /dev/urandom; } > new.bin
rm gone.bin
: > emptied.bin",
    );
    ok_bytes(&git_rw(&ws, &["sync"]));
    let patch = ok_bytes(&git_rw(&ws, &["diff", "--from", "A"]));
    for name in [
        "src/random.bin",
        "src/nul.txt",
        "new.bin",
        "gone.bin",
        "emptied.bin",
    ] {
        let header = format!("diff --git a/{name} b/{name}\n");
        let at = patch
            .windows(header.len())
            .position(|w| w == header.as_bytes())
            .unwrap_or_else(|| panic!("no section for {name}: {}", esc(&patch)));
        let section = String::from_utf8_lossy(&patch[at..]);
        let index = section.lines().find(|l| l.starts_with("index ")).unwrap();
        let ids = index.split(' ').nth(1).unwrap();
        assert_eq!(ids.len(), 40 + 2 + 40, "{name}: {index}");
        assert!(section.contains("\nGIT binary patch\nliteral "), "{name}");
    }
    assert!(contains(&patch, b"-a\n+b\n"), "{}", esc(&patch));

    let dir = ws.plain().join("copy");
    copy_tree(&root.join(".rewind/at/A"), &dir);
    let before = files(&dir);
    let mut apply = git(&dir);
    apply.args(["apply", "--binary", "-"]);
    let out = apply
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(&patch)?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "git apply --binary: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(d) = tree_difference("after git apply", &files(&dir), &files(&root)) {
        panic!("{d}");
    }
    git_apply(&dir, &patch, true).unwrap();
    if let Some(d) = tree_difference("after git apply -R", &files(&dir), &before) {
        panic!("{d}");
    }
}

/// A mode git does not keep (hostile F4): a chmod 644 -> 600 alone is said in a line `git
/// apply` skips, in `diff` and `show`, and a patch holding it still applies; with an edit, the
/// section carries git's `old mode` / `new mode` lines as they are, and applies.
#[test]
fn a_mode_git_does_not_keep_is_shown_and_the_patch_still_applies() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(&root, "printf 'x\\n' > m && printf 'one\\n' > e");
    ok_bytes(&git_rw(&ws, &["checkpoint", "A"]));
    sh(&root, "chmod 600 m");
    ok_bytes(&git_rw(&ws, &["sync"]));
    let log = log_json(&ws, &["--since", "A"]);
    let chmod = id_of(&log, "chmod", "m").to_string();
    let line =
        b"# mode of m: 100644 -> 100600 (git keeps only 100644 and 100755: git apply skips this line)\n";
    assert_eq!(ok_bytes(&git_rw(&ws, &["diff", &chmod])), line);
    let show = ok_bytes(&git_rw(&ws, &["show", &chmod]));
    assert!(show.ends_with(line), "{}", esc(&show));

    sh(&root, "chmod 600 e && printf 'two\\n' > e");
    ok_bytes(&git_rw(&ws, &["sync"]));
    let patch = ok_bytes(&git_rw(&ws, &["diff", "--from", "A"]));
    assert!(
        contains(
            &patch,
            b"diff --git a/e b/e\nold mode 100644\nnew mode 100600\nindex "
        ),
        "{}",
        esc(&patch)
    );
    assert!(contains(&patch, line), "{}", esc(&patch));
    let dir = ws.plain().join("copy");
    copy_tree(&root.join(".rewind/at/A"), &dir);
    git_apply(&dir, &patch, false).unwrap();
    assert_eq!(fs::read(dir.join("e")).unwrap(), b"two\n");
    // git keeps 100644 for both: the content moves, the permission bits stay.
    assert_eq!(fs::metadata(dir.join("e")).unwrap().mode() & 0o777, 0o644);
}

// ---- 2. a session's diff is that session's ----------------------------------------------------

/// The `+`/`-` lines of a diff (not its `---`/`+++` headers).
fn changed_lines(diff: &str) -> Vec<&str> {
    diff.lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++ ")
                && !l.starts_with("--- ")
        })
        .collect()
}

/// An agent edits a file, a person re-indents it, the agent edits it again: the agent's
/// session (and agent, and turns) diff holds the agent's two edits and not the re-indent, says
/// where someone else changed the file, and each part applies onto the tree it starts from.
#[test]
fn a_session_diff_shows_what_the_session_did_and_nothing_else() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        "printf 'def f():\\n    return 1\\n\\ndef g():\\n    x = 2\\n    return x\\n\\ndef h():\\n    return 3\\n' > app.py && printf 'other\\n' > other.txt",
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "start"]));
    let turn = |what: &[&str]| {
        let mut args = vec!["turn"];
        args.extend_from_slice(what);
        ok_bytes(&git_rw(&ws, &args));
    };
    turn(&[
        "begin",
        "--session",
        "agent-session",
        "--agent",
        "claude",
        "--prompt",
        "make f return 2",
    ]);
    sh_env(
        &root,
        AGENT,
        "sed -i 's/return 1/return 2/' app.py && printf 'new\\n' > new.py",
    );
    ok_bytes(&git_rw(&ws, &["sync"]));
    turn(&["end", "--session", "agent-session"]);
    sh_env(&root, HUMAN, "sed -i 's/^    /\\t/' app.py");
    turn(&[
        "begin",
        "--session",
        "agent-session",
        "--agent",
        "claude",
        "--prompt",
        "make h return 4",
    ]);
    sh_env(
        &root,
        AGENT,
        "sed -i 's/return 3/return 4/' app.py && printf 'other, edited\\n' > other.txt",
    );
    turn(&["end", "--session", "agent-session"]);
    ok_bytes(&git_rw(&ws, &["sync"]));
    let log = log_json(&ws, &[]);
    let human: Vec<u64> = log
        .iter()
        .filter(|c| c["session"] == "human")
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(human.len(), 1, "{log:#?}");
    let human = human[0];
    let turn1_end = log
        .iter()
        .filter(|c| c["session"] == "agent-session" && c["turn"] == 1)
        .map(|c| c["id"].as_u64().unwrap())
        .max()
        .unwrap();

    let diff = ok(git_rw(&ws, &["diff", "--session", "agent-session"]));
    assert_eq!(
        changed_lines(&diff),
        [
            "-    return 1",
            "+    return 2",
            "+new",
            "-\treturn 3",
            "+\treturn 4",
            "-other",
            "+other, edited"
        ],
        "{diff}"
    );
    let notes: Vec<&str> = diff.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(notes.len(), 1, "{diff}");
    let note = notes[0];
    assert!(
        note.contains("app.py")
            && note.contains("changed in between")
            && note.contains("human")
            && note.contains(&human.to_string()),
        "{note}"
    );
    // Before the note: what the agent did from the start; after it: from the human's change.
    let (first, second) = diff.split_once(&format!("{note}\n")).unwrap();
    let dir = ws.plain().join("part1");
    copy_tree(&root.join(".rewind/at/start"), &dir);
    git_apply(&dir, first.as_bytes(), false).unwrap();
    assert_eq!(
        files(&dir),
        files(&root.join(format!(".rewind/at/{turn1_end}")))
    );
    let dir = ws.plain().join("part2");
    copy_tree(&root.join(format!(".rewind/at/{human}")), &dir);
    git_apply(&dir, second.as_bytes(), false).unwrap();
    assert_eq!(files(&dir), files(&root));

    // The agent's diff is the session's (it had no other); each turn's applies on its own.
    assert_eq!(
        ok(git_rw(&ws, &["diff", "--agent", "claude"])),
        diff,
        "--agent"
    );
    let t1 = ok_bytes(&git_rw(&ws, &["diff", "--turn", "agent-session:1"]));
    let t2 = ok_bytes(&git_rw(&ws, &["diff", "--turn", "agent-session:2"]));
    assert_eq!(t1, first.as_bytes());
    assert_eq!(t2, second.as_bytes());
}

// ---- 3. rollback, undo, rollback again --------------------------------------------------------

/// The name `rollback-N` a rollback printed.
fn rollback_session(out: &str) -> String {
    out.lines()
        .filter_map(|l| l.split(':').next())
        .find(|w| w.starts_with("rollback-"))
        .unwrap_or_else(|| panic!("no rollback session in {out}"))
        .to_string()
}

/// `rollback --session fix-1`, then undoing that rollback, then `rollback --session fix-1`
/// again: the third restores exactly what the first did, skipping nothing.
#[test]
fn rolling_back_again_after_undoing_the_rollback_restores_again() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        "mkdir -p lib && printf 'a1\\n' > a.txt && printf 'b1\\n' > b.txt && chmod 640 b.txt && printf 'keep\\n' > keep.txt && printf 'c1\\n' > lib/c.txt",
    );
    ok_bytes(&git_rw(&ws, &["sync"]));
    let before = snapshot(&root);
    sh_env(
        &root,
        &[("REWIND_SESSION", "fix-1"), ("REWIND_AGENT", "codex")],
        "printf 'a2\\n' > a.txt && chmod +x a.txt && rm b.txt && printf 'new\\n' > new.txt && mv lib/c.txt lib/d.txt && printf 'c2\\n' >> lib/d.txt && mkdir tools && printf 'x\\n' > tools/x.sh",
    );
    sh_env(
        &root,
        HUMAN,
        "printf 'keep, edited by a person\\n' > keep.txt",
    );
    ok_bytes(&git_rw(&ws, &["sync"]));
    let after = snapshot(&root);
    // fix-1's paths as they were, the person's edit kept.
    let mut rolled = before.clone();
    rolled.insert(b"keep.txt".to_vec(), after[&b"keep.txt".to_vec()].clone());
    let show = |s: &BTreeMap<Vec<u8>, Entry>| -> String {
        s.iter()
            .map(|(p, e)| format!("{}: {e:?}", esc(p)))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let out = git_rw(&ws, &["rollback", "--session", "fix-1"]);
    let text = ok(&out);
    assert!(!text.lines().any(|l| l.starts_with("skip")), "{text}");
    let first = rollback_session(&text);
    assert_eq!(show(&snapshot(&root)), show(&rolled), "{text}");

    let text = ok(git_rw(&ws, &["rollback", "--session", &first]));
    assert!(!text.lines().any(|l| l.starts_with("skip")), "{text}");
    assert_eq!(show(&snapshot(&root)), show(&after), "{text}");

    let dry = ok(git_rw(
        &ws,
        &["rollback", "--session", "fix-1", "--dry-run"],
    ));
    assert!(
        !dry.lines().any(|l| l.starts_with("skip")) && dry.contains("dry run"),
        "{dry}"
    );
    let text = ok(git_rw(&ws, &["rollback", "--session", "fix-1"]));
    assert!(!text.lines().any(|l| l.starts_with("skip")), "{text}");
    assert_ne!(rollback_session(&text), first);
    assert_eq!(show(&snapshot(&root)), show(&rolled), "{text}");
}

// ---- 4. one line, one JSON shape; lossless and safe names; retracted ids -----------------------

/// The id a human log line starts with.
fn line_id(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn json_lines(lines: &[Vec<u8>], after: u64) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|v| v["id"].as_u64().is_some_and(|id| id > after))
        .collect()
}

/// `rewind watch` (started before the changes), `rewind log` and `.rewind/log` print the same
/// lines; `watch --json`, `log --json`, `.rewind/log.json` and `.rewind/events` the same
/// objects. Names that differ only in bytes that are not UTF-8 stay apart in JSON, and names
/// (and process names) with newlines and escape sequences never reach a terminal raw.
#[test]
fn log_watch_and_the_control_files_share_one_line_and_one_json_shape() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let reader = |args: &[&str]| {
        let mut cmd = ws.command(args);
        cmd.current_dir(&root).env_remove("COLUMNS");
        Reader::spawn(cmd)
    };
    let watch = reader(&["watch"]);
    let watch_json = reader(&["watch", "--json"]);
    let events = Reader::spawn({
        let mut c = Command::new("cat");
        c.arg(root.join(".rewind/events"));
        c
    });
    // Until all three read: a probe folder at a time, until each has seen the same one.
    let mut base = None;
    for i in 0..20 {
        let name = format!("probe-{i}");
        fs::create_dir(root.join(&name)).unwrap();
        let seen = wait_for(3, || {
            [&watch, &watch_json, &events]
                .iter()
                .all(|r| r.lines().iter().any(|l| contains(l, name.as_bytes())))
        });
        if seen {
            base = Some(last_id(&ws));
            break;
        }
    }
    let base = base.expect("the readers never started");

    let odd: [&[u8]; 3] = [b"a\xff", b"a\xfe", b"x\n\x1b[31mred"];
    for name in odd {
        fs::write(root.join(OsStr::from_bytes(name)), b"odd\n").unwrap();
    }
    let esc_touch = ws.plain().join("t\x1b[1mouch");
    std::os::unix::fs::symlink(sh(&root, "command -v touch").trim(), &esc_touch).unwrap();
    sh(
        &root,
        &format!(
            "printf 'one\\n' > plain.txt && chmod +x plain.txt && mv plain.txt moved.txt && ln -s moved.txt link && mkdir dir && rmdir dir && printf 'two\\n' >> moved.txt && '{}' touched.txt && rm moved.txt",
            esc_touch.display()
        ),
    );
    sh_env(&root, AGENT, "printf 'agent\\n' > agent.txt");
    ok_bytes(&git_rw(&ws, &["sync"]));
    let since = base.to_string();
    let log = ok_bytes(&git_rw(&ws, &["log", "--since", &since]));
    let log_lines: Vec<Vec<u8>> = log
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let n = log_lines.len();
    assert!(n >= 10, "{}", esc(&log));
    let after_base = |r: &Reader| -> Vec<Vec<u8>> {
        r.lines()
            .into_iter()
            .filter(|l| line_id(l).is_some_and(|id| id > base))
            .collect()
    };
    let json_after = |r: &Reader| json_lines(&r.lines(), base);
    assert!(
        wait_for(30, || after_base(&watch).len() >= n
            && json_after(&watch_json).len() >= n
            && json_after(&events).len() >= n),
        "watch saw {} of {n} lines, watch --json {}, events {}",
        after_base(&watch).len(),
        json_after(&watch_json).len(),
        json_after(&events).len()
    );

    // One line format.
    let dot_log: Vec<Vec<u8>> = fs::read(root.join(".rewind/log"))
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| line_id(l).is_some_and(|id| id > base))
        .map(<[u8]>::to_vec)
        .collect();
    let show = |ls: &[Vec<u8>]| ls.iter().map(|l| esc(l)).collect::<Vec<_>>().join("\n");
    assert_eq!(show(&after_base(&watch)), show(&log_lines), "watch vs log");
    assert_eq!(show(&dot_log), show(&log_lines), ".rewind/log vs log");
    // Safe for a terminal: no escape character, and every line is one change (a name's
    // newline did not start a line of its own).
    for (what, bytes) in [
        ("log", log.clone()),
        ("watch", watch.lines().concat()),
        (".rewind/log", fs::read(root.join(".rewind/log")).unwrap()),
    ] {
        assert!(!bytes.contains(&0x1b), "{what}: {}", esc(&bytes));
    }
    let ids: Vec<u64> = log_lines.iter().map(|l| line_id(l).unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{}", esc(&log));
    assert!(
        log_lines
            .iter()
            .any(|l| contains(l, br#""x\n\033[31mred""#)),
        "{}",
        esc(&log)
    );

    // One JSON shape.
    let log_json: Vec<Value> = log_json(&ws, &["--since", &since]);
    assert_eq!(log_json.len(), n);
    let dot_json = json_lines(
        &fs::read(root.join(".rewind/log.json"))
            .unwrap()
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>(),
        base,
    );
    assert_eq!(dot_json, log_json, ".rewind/log.json");
    assert_eq!(json_after(&events), log_json, ".rewind/events");
    assert_eq!(json_after(&watch_json), log_json, "watch --json");
    for c in &log_json {
        let id = c["id"].as_u64().unwrap().to_string();
        let one: Value =
            serde_json::from_slice(&ok_bytes(&git_rw(&ws, &["show", &id, "--json"]))).unwrap();
        assert_eq!(&one, c, "show {id} --json");
        let shown = ok_bytes(&git_rw(&ws, &["show", &id]));
        assert!(!shown.contains(&0x1b), "show {id}: {}", esc(&shown));
    }

    // Lossless names: the exact bytes, base64, beside a readable form.
    let b64 = base64::engine::general_purpose::STANDARD;
    let by_bytes = |name: &[u8]| -> &Value {
        log_json
            .iter()
            .find(|c| {
                c["path_bytes"]
                    .as_str()
                    .is_some_and(|b| b64.decode(b).unwrap() == name)
            })
            .unwrap_or_else(|| panic!("no change with path_bytes {}", esc(name)))
    };
    let (ff, fe) = (by_bytes(b"a\xff"), by_bytes(b"a\xfe"));
    assert_ne!(ff["path_bytes"], fe["path_bytes"]);
    assert_eq!(ff["path"], "a\u{fffd}");
    let red = log_json
        .iter()
        .find(|c| c["path"] == "x\n\x1b[31mred")
        .expect("the name with a newline, exactly, in JSON");
    assert!(red.get("path_bytes").is_none(), "{red}");
    // And the escaped process name is still the process's name in JSON.
    assert!(
        log_json.iter().any(|c| c["process"] == "t\x1b[1mouch"),
        "{log_json:#?}"
    );
    assert!(
        log_json
            .iter()
            .any(|c| c["session"] == "agent-session" && c["agent"] == "claude")
    );
}

/// vim's save by renaming the original away leaves a gap in the ids (the rename taken back):
/// `rewind show` of that id says so. A rollback with nothing to do says so and exits 0.
#[test]
fn a_retracted_id_and_an_empty_rollback_say_so() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join("notes.txt"), "hello\n").unwrap();
    ok_bytes(&git_rw(&ws, &["sync"]));
    // `backupskip=` because vim skips its backup (the rename away) for files under /tmp.
    sh(
        &root,
        "HOME=$PWD/.. vim -u NONE -i NONE -N -es -c 'set backupskip=' -c 'normal Ax' -c wq notes.txt",
    );
    assert_eq!(fs::read(root.join("notes.txt")).unwrap(), b"hellox\n");
    // The kernel sends the new file's last RELEASE after vim has exited: under load the save
    // may reach the daemon after this read. Wait (bounded) for it.
    let mut log = Vec::new();
    wait_for(10, || {
        log = log_json(&ws, &[]);
        log.len() >= 2
    });
    let ids: BTreeSet<u64> = log.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    let last = *ids.last().unwrap();
    let gaps: Vec<u64> = (1..last).filter(|i| !ids.contains(i)).collect();
    assert!(!gaps.is_empty(), "no gap in {log:#?}");
    assert_eq!(
        log.last().unwrap()["kind"],
        "modify",
        "the save is one modify: {log:#?}"
    );
    for gap in gaps {
        for args in [
            vec!["show", &*gap.to_string()],
            vec!["show", &*gap.to_string(), "--json"],
        ] {
            let out = git_rw(&ws, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?}: {out:?}");
            assert!(err.contains("taken back"), "{args:?}: {err}");
            assert!(!err.contains("there is no change"), "{args:?}: {err}");
        }
    }
    // Nothing after a point: nothing to roll back, and that is not an error.
    ok_bytes(&git_rw(&ws, &["checkpoint", "end"]));
    let last = last.to_string();
    for args in [
        vec!["rollback", "--since", "end"],
        vec!["rollback", "--since", &last],
        vec!["rollback", "--since", "end", "--dry-run"],
    ] {
        let out = git_rw(&ws, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("nothing to roll back"),
            "{args:?}: {out:?}"
        );
    }
    // A session no change has is a mistake, said as one (hostile35).
    let out = git_rw(&ws, &["rollback", "--session", "no-such-session"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Through ctl too: the write succeeds, and the answer is not "done in part".
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join(".rewind/ctl"))
        .unwrap();
    f.write_all(b"rollback --since end\n").unwrap();
    let mut answer = String::new();
    f.read_to_string(&mut answer).unwrap();
    assert!(
        answer.contains("nothing to roll back") && !answer.contains("exit status"),
        "{answer}"
    );
    // And nothing was recorded by them.
    assert_eq!(last_id(&ws).to_string(), last);
}

// ---- 5. honest past views ---------------------------------------------------------------------

fn mtime_secs(p: &Path) -> i64 {
    fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mtime()
}

/// Ignored paths (a repository's `.git`, `node_modules`, a tagged `target`) are absent from the past;
/// a past symlink's size is its target's length; a past file's mtime is the time of the change
/// that gave it its content (a file unchanged since: its own); `versions/PATH/ID` carries
/// change ID's time; past modes are the recorded ones without write bits.
#[test]
fn past_views_show_what_was_recorded_with_honest_attributes() {
    let mut ws = Workspace::new();
    sh(
        &ws.path(),
        "printf 'from before\\n' > before.txt && touch -d '2020-01-02T03:04:05Z' before.txt",
    );
    ws.mount();
    let root = ws.path();
    sh_env(
        &root,
        &[],
        "git init -q . && mkdir -p node_modules/pkg target/debug vendor && printf 'Signature: 8a477f597d28d172789f06886806bc55\\n' > target/CACHEDIR.TAG && echo x > node_modules/x.js && echo y > node_modules/pkg/index.js && echo bin > target/debug/app && (cd vendor && git init -q lib) && printf 'hello\\n' > f.txt && printf '#!/bin/sh\\n' > run.sh && chmod 755 run.sh && printf 's\\n' > secret && chmod 600 secret && printf 'g\\n' > group.txt && chmod 640 group.txt && mkdir private && chmod 750 private && ln -s some/long/target/path lnk",
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "P1"]));
    // A second later, so that a wrong time shows.
    std::thread::sleep(Duration::from_millis(1100));
    sh(
        &root,
        "printf 'hello again\\n' > f.txt && rm lnk && ln -s x lnk && echo 'ref: refs/heads/other' > .git/HEAD && echo changed > node_modules/x.js && echo more > target/debug/app",
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "P2"]));
    let log = log_json(&ws, &[]);

    for point in ["P1", "P2"] {
        let at = root.join(".rewind/at").join(point);
        let names: BTreeSet<String> = fs::read_dir(&at)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for ignored in [".git", "node_modules", "target"] {
            assert!(!names.contains(ignored), "{point}: {names:?}");
            assert!(root.join(ignored).exists(), "{ignored} is there now");
        }
        for path in [
            ".git/HEAD",
            "node_modules/x.js",
            "node_modules/pkg/index.js",
            "target/debug/app",
            "vendor/lib/.git",
            "vendor/lib/.git/HEAD",
        ] {
            let e = fs::symlink_metadata(at.join(path)).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{point}/{path}");
        }
        assert!(at.join("vendor/lib").is_dir(), "{point}: vendor/lib");
        let lib: Vec<_> = fs::read_dir(at.join("vendor/lib")).unwrap().collect();
        assert!(lib.is_empty(), "{point}: vendor/lib holds {lib:?}");
    }

    let p1 = root.join(".rewind/at/P1");
    // Symlinks: the size is the target's length.
    let meta = fs::symlink_metadata(p1.join("lnk")).unwrap();
    assert!(meta.file_type().is_symlink());
    assert_eq!(meta.len(), "some/long/target/path".len() as u64);
    assert_eq!(
        fs::read_link(p1.join("lnk")).unwrap(),
        Path::new("some/long/target/path")
    );
    let meta = fs::symlink_metadata(root.join(".rewind/at/P2/lnk")).unwrap();
    assert_eq!(meta.len(), 1);

    // Times.
    let time_of = |id: u64| -> i64 {
        epoch_secs(
            log.iter().find(|c| c["id"] == id).unwrap()["time"]
                .as_str()
                .unwrap(),
        )
    };
    let created = id_of(&log, "create", "f.txt");
    let modified = id_of(&log, "modify", "f.txt");
    assert!(time_of(modified) > time_of(created));
    assert_eq!(
        mtime_secs(&p1.join("f.txt")),
        time_of(created),
        "at/P1/f.txt"
    );
    assert_eq!(
        mtime_secs(&root.join(".rewind/at/P2/f.txt")),
        time_of(modified),
        "at/P2/f.txt"
    );
    // A file never changed through the mount (it was there before): its own mtime.
    let before = fs::metadata(root.join("before.txt")).unwrap();
    assert_eq!(before.mtime(), 1_577_934_245);
    let past = fs::metadata(p1.join("before.txt")).unwrap();
    assert_eq!(
        (past.mtime(), past.mtime_nsec()),
        (before.mtime(), before.mtime_nsec()),
        "at/P1/before.txt"
    );
    assert_eq!(
        mtime_secs(&root.join(format!(".rewind/at/{created}/f.txt"))),
        time_of(created)
    );
    let versions: Vec<u64> = fs::read_dir(root.join(".rewind/versions/f.txt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        versions.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([created, modified])
    );
    for v in versions {
        let p = root.join(format!(".rewind/versions/f.txt/{v}"));
        assert_eq!(mtime_secs(&p), time_of(v), "versions/f.txt/{v}");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o444, "{v}");
    }

    // Modes: as recorded, without write bits.
    for (path, mode) in [
        ("f.txt", 0o444),
        ("run.sh", 0o555),
        ("secret", 0o400),
        ("group.txt", 0o440),
        ("private", 0o550),
    ] {
        let m = fs::symlink_metadata(p1.join(path)).unwrap().mode() & 0o7777;
        assert_eq!(m, mode, "at/P1/{path}: {m:o}");
    }
}

/// A new file is held back for half a second before it is recorded (to see whether it is a
/// temporary): meanwhile it must not appear in a view of a point before it, by listing or by
/// lookup.
#[test]
fn a_new_file_is_not_in_the_past_while_held_back() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join("old.txt"), "old\n").unwrap();
    ok_bytes(&git_rw(&ws, &["checkpoint", "P"]));
    let at = root.join(".rewind/at/P");
    for i in 0..5 {
        let name = format!("fresh-{i}.txt");
        fs::write(root.join(&name), "new\n").unwrap();
        let listed: Vec<String> = fs::read_dir(&at)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let looked_up = fs::symlink_metadata(at.join(&name));
        assert!(
            !listed.contains(&name),
            "{name}, made after P, is listed in .rewind/at/P: {listed:?}"
        );
        assert!(
            looked_up.is_err(),
            "{name}, made after P, is found in .rewind/at/P: {looked_up:?}"
        );
    }
}

// ---- 6. export ---------------------------------------------------------------------------------

/// What must not move when a branch is exported.
#[derive(Debug, PartialEq, Eq)]
struct RepoState {
    head: Vec<u8>,
    head_ref: Vec<u8>,
    index: Vec<u8>,
    status: Vec<u8>,
    cached: Vec<u8>,
    tree: BTreeMap<Vec<u8>, Entry>,
}

fn repo_state(root: &Path) -> RepoState {
    RepoState {
        head: git_ok(root, &["rev-parse", "HEAD"]),
        head_ref: git_ok(root, &["symbolic-ref", "HEAD"]),
        index: fs::read(root.join(".git/index")).unwrap(),
        status: git_ok(root, &["status", "--porcelain", "-z"]),
        cached: git_ok(root, &["diff", "--cached"]),
        tree: snapshot(root)
            .into_iter()
            .filter(|(p, _)| p != b".git" && !p.starts_with(b".git/"))
            .collect(),
    }
}

/// A path in a commit: its content and whether it is executable, or `None`.
fn in_commit(root: &Path, rev: &str, path: &[u8]) -> Option<(Vec<u8>, bool)> {
    let path = std::str::from_utf8(path).unwrap();
    let entry = git_ok(root, &["ls-tree", "-z", rev, "--", path]);
    if entry.is_empty() {
        return None;
    }
    let mode = &entry[..6];
    let content = git_ok(root, &["cat-file", "blob", &format!("{rev}:{path}")]);
    Some((content, mode == b"100755"))
}

/// A path in a past view, as git would hold it.
fn in_past(root: &Path, at: u64, path: &[u8]) -> Option<(Vec<u8>, bool)> {
    let p = root
        .join(".rewind/at")
        .join(at.to_string())
        .join(OsStr::from_bytes(path));
    let meta = fs::symlink_metadata(&p).ok()?;
    Some((fs::read(&p).unwrap(), meta.mode() & 0o100 != 0))
}

/// The commits of `branch` not on HEAD, oldest first: (sha, author name, author mail, message).
fn branch_commits(root: &Path, branch: &str) -> Vec<(String, String, String, String)> {
    let out = git_ok(
        root,
        &[
            "log",
            "--reverse",
            "-z",
            "--format=%H%x01%an%x01%ae%x01%B",
            &format!("HEAD..{branch}"),
        ],
    );
    String::from_utf8(out)
        .unwrap()
        .split('\0')
        .filter(|c| !c.trim().is_empty())
        .map(|c| {
            let f: Vec<&str> = c.trim_start_matches('\n').split('\u{1}').collect();
            (f[0].into(), f[1].into(), f[2].into(), f[3].into())
        })
        .collect()
}

/// The change id in a commit message ("rewind change N: ...").
fn change_in(message: &str) -> Option<u64> {
    let rest = message.split("rewind change ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// An agent's session in a real repository, exported as a branch: one commit per change, by
/// the agent, naming the session; each commit's tree is `.rewind/at/<change>/` for every path
/// the session touched; a gitignored file stays out; the working tree, index and HEAD do not
/// move. An existing branch is refused, and so is a workspace that is not a repository.
#[test]
fn export_writes_a_reviewable_branch_and_touches_nothing_else() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh_env(
        &root,
        &[],
        "git init -q -b main . && printf '*.log\\n' > .gitignore && printf 'fn main() {}\\n' > main.rs && printf 'one\\n' > keep.txt && printf 'old\\n' > old.txt && printf 'tool\\n' > tool.sh && mkdir -p docs && printf 'docs\\n' > docs/guide.md && printf 'log\\n' > debug.log && git add -A && git commit -qm initial",
    );
    // Not committed when the agent starts: the branch starts from it.
    sh_env(&root, HUMAN, "printf 'one, edited\\n' > keep.txt");
    ok_bytes(&git_rw(&ws, &["sync"]));
    sh_env(
        &root,
        AGENT,
        "printf 'fn main() { println!(\"hi\"); }\\n' > main.rs && printf 'new\\n' > new.rs && rm old.txt && mv docs/guide.md docs/GUIDE.md && chmod +x tool.sh && printf 'agent log\\n' >> debug.log && printf 'one, edited, then by the agent\\n' > keep.txt && mkdir -p src && printf 'pub fn x() {}\\n' > src/x.rs && printf '\\000\\001 binary\\n' > data.bin",
    );
    ok_bytes(&git_rw(&ws, &["checkpoint", "mid"]));
    sh_env(&root, AGENT, "printf 'pub fn y() {}\\n' >> src/x.rs");
    ok_bytes(&git_rw(&ws, &["sync"]));
    let session = log_json(&ws, &["--session", "agent-session"]);
    let touched: BTreeSet<Vec<u8>> = session
        .iter()
        .flat_map(|c| [c["path"].as_str(), c["from"].as_str()])
        .flatten()
        .map(|p| p.as_bytes().to_vec())
        .filter(|p| p != b"src")
        .collect();
    let first = session[0]["id"].as_u64().unwrap();
    let state = repo_state(&root);

    let export = |args: &[&str]| {
        let mut all = vec!["export"];
        all.extend_from_slice(args);
        git_rw(&ws, &all)
    };
    let out = export(&["--session", "agent-session", "--branch", "review"]);
    let said = ok(&out);
    assert!(said.contains("review"), "{said}");
    assert_eq!(repo_state(&root), state, "export moved something");

    let commits = branch_commits(&root, "review");
    let mut exported = BTreeSet::new();
    for (i, (sha, author, mail, message)) in commits.iter().enumerate() {
        let at = match change_in(message) {
            Some(id) => {
                assert_eq!(author, "claude", "{message}");
                assert!(
                    message.contains("agent-session") && mail.contains("agent-session"),
                    "{mail} {message}"
                );
                assert!(exported.insert(id), "two commits for change {id}");
                id
            }
            None => {
                // The state just before the session, where it differs from HEAD.
                assert_eq!(i, 0, "{message}");
                first - 1
            }
        };
        for path in &touched {
            let want = if path == b"debug.log" {
                None
            } else {
                in_past(&root, at, path)
            };
            assert_eq!(
                in_commit(&root, sha, path),
                want,
                "commit {sha} ({message:?}), {}",
                esc(path)
            );
        }
    }
    // One commit for each change git can hold (not the ignored log, not the folder).
    let expected: BTreeSet<u64> = session
        .iter()
        .filter(|c| c["path"] != "debug.log" && c["kind"] != "mkdir")
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(exported, expected);
    assert!(
        change_in(&commits[0].3).is_none(),
        "keep.txt was edited before the session and not committed: a first commit sets it"
    );

    // By agent: the same work; since a point: only what came after.
    ok_bytes(&export(&["--agent", "claude", "--branch", "review-agent"]));
    assert_eq!(
        git_ok(&root, &["rev-parse", "review^{tree}"]),
        git_ok(&root, &["rev-parse", "review-agent^{tree}"])
    );
    ok_bytes(&export(&[
        "--session",
        "agent-session",
        "--since",
        "mid",
        "--branch",
        "review-later",
    ]));
    let later = branch_commits(&root, "review-later");
    let ids: Vec<u64> = later.iter().filter_map(|c| change_in(&c.3)).collect();
    let last = session.last().unwrap()["id"].as_u64().unwrap();
    assert_eq!(ids, [last], "{later:#?}");
    let tip = &later.last().unwrap().0;
    assert_eq!(
        in_commit(&root, tip, b"src/x.rs"),
        in_past(&root, last, b"src/x.rs")
    );
    assert_eq!(repo_state(&root), state, "the exports moved something");

    // An existing branch is refused, and nothing changes.
    for branch in ["review", "main"] {
        let out = export(&["--session", "agent-session", "--branch", branch]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("exists"),
            "{out:?}"
        );
    }
    assert_eq!(
        branch_commits(&root, "review").len(),
        commits.len(),
        "review was rewritten"
    );
    assert_eq!(repo_state(&root), state);

    // Not a repository.
    let mut plain = Workspace::new();
    plain.mount();
    sh_env(&plain.path(), AGENT, "printf 'x\\n' > x.txt");
    let out = plain
        .command(&["export", "--session", "agent-session", "--branch", "b"])
        .current_dir(plain.path())
        .envs(git_env())
        .env("GIT_CEILING_DIRECTORIES", plain.path().parent().unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not in a git repository"),
        "{out:?}"
    );
}

// ---- 7. completions, the manual, cargo install --------------------------------------------------

/// `rewind completions bash|zsh|fish` print scripts that name the commands (bash's parses);
/// `rewind man` prints roff that `man` and groff render without complaint.
#[test]
fn completions_and_the_manual_are_generated_from_the_commands() {
    let run = |args: &[&str]| {
        let out = Command::new(REWIND).args(args).output().unwrap();
        ok_bytes(&out)
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        let text = String::from_utf8(script.clone()).unwrap();
        for word in [
            "rollback",
            "export",
            "checkpoint",
            "diff",
            "watch",
            "completions",
        ] {
            assert!(text.contains(word), "{shell} completions lack {word}");
        }
        let checker = match shell {
            "bash" => Some("bash"),
            other => Command::new(other)
                .arg("--version")
                .output()
                .is_ok()
                .then_some(other),
        };
        if let Some(checker) = checker {
            let mut child = Command::new(checker)
                .arg("-n")
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&script).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "{checker} -n: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let bad = Command::new(REWIND)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));

    let roff = run(&["man"]);
    assert!(roff.starts_with(b".ie") || contains(&roff, b".TH rewind"));
    let render = |cmd: &str, args: &[&str]| -> Output {
        let mut child = Command::new(cmd)
            .args(args)
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "100")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&roff).unwrap();
        child.wait_with_output().unwrap()
    };
    let man = render("man", &["-l", "-"]);
    assert!(
        man.status.success() && man.stderr.is_empty(),
        "man -l -: {}",
        String::from_utf8_lossy(&man.stderr)
    );
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(
        text.contains("rollback") && text.contains("export"),
        "{text}"
    );
    if Command::new("groff").arg("--version").output().is_ok() {
        let groff = render("groff", &["-man", "-Tutf8", "-ww"]);
        assert!(
            groff.status.success() && groff.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&groff.stderr)
        );
        assert!(String::from_utf8_lossy(&groff.stdout).contains("rollback"));
    }
}

/// `cargo install --path . --debug` works and the installed binary runs. It reuses the shared
/// build cache (its build directory: `CARGO_BUILD_BUILD_DIR`, or `CARGO_TARGET_DIR` as
/// scripts/test sets it), offline and with the lock file; a
/// build that starts compiling RocksDB again is stopped and fails the test (that is 25 minutes
/// of C++, and would mean the install resolves features differently from the build).
#[test]
fn cargo_install_works() {
    // The shared cache holds the build's intermediate files (its build directory); the final
    // binary goes to a target directory of this test's own. Installing into the shared one
    // would put `target/debug/rewind` there again (unlink, then link), and every other test's
    // `rewind mount` running at that moment would find its own executable gone when it
    // starts the daemon (`current_exe`).
    let build = std::env::var_os("CARGO_BUILD_BUILD_DIR")
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/rewind/target")
        });
    let root = tempfile::Builder::new()
        .prefix("rewind-install-")
        .tempdir()
        .unwrap();
    let target = root.path().join("target");
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let mut child = Command::new(cargo)
        .args(["install", "--path"])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["--debug", "--locked", "--offline", "--root"])
        .arg(root.path())
        .env("CARGO_BUILD_BUILD_DIR", &build)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = child.id() as i32;
    let stderr = child.stderr.take().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let rocksdb = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (seen, rocksdb) = (seen.clone(), rocksdb.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("Compiling librocksdb-sys") || line.contains("Compiling rocksdb") {
                    rocksdb.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                seen.lock().unwrap().push_str(&format!("{line}\n"));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if rocksdb.load(std::sync::atomic::Ordering::SeqCst) || Instant::now() > deadline {
            // SAFETY: kill(2) of the process group this test started.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = reader.join();
    let log = seen.lock().unwrap().clone();
    assert!(
        !rocksdb.load(std::sync::atomic::Ordering::SeqCst),
        "cargo install started compiling RocksDB again; stopped:\n{log}"
    );
    let status = status.unwrap_or_else(|| panic!("cargo install took over 150 s:\n{log}"));
    assert!(status.success(), "cargo install failed:\n{log}");
    let out = Command::new(root.path().join("bin/rewind"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("rewind "),
        "{out:?}"
    );
}
