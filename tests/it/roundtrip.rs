//! A rollback and its undo return the tree exactly: a seeded random workload of the operations
//! fsstress makes (create, write, truncate, mkdir, rmdir, rename, link, symlink, mknod of FIFOs
//! and character devices, chmod, unlink) runs through the mount from several processes after a
//! checkpoint; `rollback --to` the checkpoint must give back the tree as it was then, and
//! undoing that rollback the tree as it was before it, compared whole: type, mode, owner,
//! content, symlink targets, device numbers and which names are one file. The dry run and the
//! run must agree. The workload's seed is 1 unless `REWIND_SEED=N` says otherwise; a failure names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Output;

use crate::common::{Workspace, ok, python_command, rw, stdout};

/// The per-path lines of a rollback's output, without its summary line.
fn plan_lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = stdout(out).lines().map(str::to_string).collect();
    if lines.last().is_some_and(|l| {
        l.starts_with("dry run: ") || l.contains(": restored ") || l.starts_with("nothing to")
    }) {
        lines.pop();
    }
    lines
}

/// One process's share of the workload (`python3 -c WORKLOAD SEED OPS`): `OPS` random
/// operations on a small pool of names under `w/`, shared with the other processes (so they
/// also collide), from `SEED`. Failures
/// (`ENOENT`, `ENOTEMPTY`, ...) are part of the game and ignored.
const WORKLOAD: &str = r#"
import os, random, stat, sys
seed, ops = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
dirs = ['w', 'w/a', 'w/b', 'w/a/c', 'w/b/d']
def name():
    return r.choice(dirs) + '/' + r.choice(['f0', 'f1', 'f2', 'f3', 'x', 'y', 'a', 'b', 'c', 'd'])
def data():
    return bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 7, 100, 5000])))
for _ in range(ops):
    op = r.choice(['create', 'write', 'write', 'truncate', 'mkdir', 'rmdir', 'rename', 'rename',
                   'link', 'symlink', 'fifo', 'chardev', 'chmod', 'unlink', 'unlink'])
    p = name()
    try:
        if op == 'create':
            # Never blocks on a FIFO; a device or FIFO at the name is left as it is.
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.ftruncate(fd, 0)
                    os.write(fd, data())
            finally:
                os.close(fd)
        elif op == 'write':
            fd = os.open(p, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.pwrite(fd, data(), r.randrange(0, 6000))
            finally:
                os.close(fd)
        elif op == 'truncate':
            if stat.S_ISREG(os.lstat(p).st_mode):
                os.truncate(p, r.randrange(0, 3000))
        elif op == 'mkdir':
            os.mkdir(p, r.choice([0o755, 0o700, 0o775]))
        elif op == 'rmdir':
            os.rmdir(p)
        elif op == 'rename':
            os.rename(p, name())
        elif op == 'link':
            os.link(p, name(), follow_symlinks=False)
        elif op == 'symlink':
            os.symlink(r.choice(['f0', '../x', 'nowhere', '/etc/hostname']), p)
        elif op == 'fifo':
            os.mkfifo(p, r.choice([0o644, 0o600]))
        elif op == 'chardev':
            os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, r.choice([3, 5, 8])))
        elif op == 'chmod':
            if not stat.S_ISLNK(os.lstat(p).st_mode):
                os.chmod(p, r.choice([0o644, 0o600, 0o755, 0o640, 0o700]))
        elif op == 'unlink':
            os.unlink(p)
    except OSError:
        pass
"#;

/// What a path is: type, mode, owner, content or target, device number, and the other names
/// of its file.
type Tree = BTreeMap<String, String>;

fn snapshot(root: &Path) -> Tree {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, fs::Metadata)>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if rel == ".rewind" {
                continue;
            }
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                walk(base, &p, out);
            }
            out.push((rel, md));
        }
    }
    let mut all = Vec::new();
    walk(root, root, &mut all);
    let mut names: HashMap<u64, BTreeSet<String>> = HashMap::new();
    for (rel, md) in &all {
        if !md.is_dir() {
            names.entry(md.ino()).or_default().insert(rel.clone());
        }
    }
    let mut tree = Tree::new();
    for (rel, md) in all {
        let ft = md.file_type();
        let what = if ft.is_symlink() {
            format!("symlink -> {:?}", fs::read_link(root.join(&rel)).unwrap())
        } else if ft.is_dir() {
            "dir".to_string()
        } else if ft.is_file() {
            let content = fs::read(root.join(&rel)).unwrap();
            format!(
                "file {} bytes {}",
                content.len(),
                rewind::store::Hash::of(&content)
            )
        } else if ft.is_fifo() {
            "fifo".to_string()
        } else if ft.is_char_device() {
            format!("char {:x}", md.rdev())
        } else if ft.is_block_device() {
            format!("block {:x}", md.rdev())
        } else {
            "socket".to_string()
        };
        let others: Vec<&String> = if ft.is_dir() {
            Vec::new()
        } else {
            names[&md.ino()].iter().filter(|n| **n != rel).collect()
        };
        tree.insert(
            rel,
            format!(
                "{what} mode {:o} owner {}:{} links {others:?}",
                md.mode() & 0o7777,
                md.uid(),
                md.gid()
            ),
        );
    }
    tree
}

/// Where two trees differ, one line per path.
fn differences(want: &Tree, got: &Tree) -> Vec<String> {
    let paths: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    paths
        .into_iter()
        .filter(|p| want.get(*p) != got.get(*p))
        .map(|p| format!("{p}: want {:?}, got {:?}", want.get(p), got.get(p)))
        .collect()
}

/// A rollback's dry run and run, which must agree; returns the run's output.
fn rollback(ws: &Workspace, args: &[&str], seed: u64) -> String {
    let mut dry_args = args.to_vec();
    dry_args.push("--dry-run");
    let dry = rw(ws, &dry_args);
    let run = rw(ws, args);
    assert_eq!(
        plan_lines(&dry),
        plan_lines(&run),
        "seed {seed}: `rollback {args:?}`: the dry run and the run differ\ndry run:\n{}\nrun:\n{}",
        stdout(&dry),
        stdout(&run)
    );
    assert!(run.status.success(), "seed {seed}: {run:?}");
    stdout(&run)
}

fn round_trip(seed: u64, links: bool) {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let mut script = WORKLOAD.to_string();
    if !links {
        script = script.replace("'link', ", "");
    }
    fs::create_dir_all(root.join("w/a/c")).unwrap();
    fs::create_dir_all(root.join("w/b/d")).unwrap();
    let run = |seed: u64, procs: u64, ops: u32| {
        let children: Vec<_> = (0..procs)
            .map(|i| {
                python_command(&root, &script)
                    .arg((seed + i).to_string())
                    .arg(ops.to_string())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success(), "a workload process failed");
        }
    };
    // A tree to go back to, with every kind of thing in it.
    run(seed, 1, 300);
    ok(rw(&ws, &["sync"]));
    let at_checkpoint = snapshot(&root);
    ok(rw(&ws, &["checkpoint", "before"]));
    run(seed + 100, 4, 400);
    ok(rw(&ws, &["sync"]));
    let before_rollback = snapshot(&root);

    let out = rollback(&ws, &["rollback", "--to", "before"], seed);
    let diff = differences(&at_checkpoint, &snapshot(&root));
    assert!(
        diff.is_empty(),
        "seed {seed}: `rollback --to` the checkpoint is not the tree as it was:\n{}\n{out}",
        diff.join("\n")
    );
    let session = out
        .split_whitespace()
        .find(|w| w.starts_with("rollback-"))
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
        .unwrap_or_else(|| panic!("seed {seed}: no rollback session named in:\n{out}"))
        .to_string();
    ok(rw(&ws, &["sync"]));
    let out = rollback(&ws, &["rollback", "--session", &session], seed);
    let diff = differences(&before_rollback, &snapshot(&root));
    assert!(
        diff.is_empty(),
        "seed {seed}: undoing {session} is not the tree as it was before it:\n{}\n{out}",
        diff.join("\n")
    );
}

fn seed() -> u64 {
    std::env::var("REWIND_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[test]
fn a_rollback_and_its_undo_return_the_tree_exactly() {
    let seed = seed();
    eprintln!("seed {seed} (REWIND_SEED={seed} runs it again)");
    round_trip(seed, false);
}

#[test]
fn a_rollback_and_its_undo_return_hard_link_groups_linked() {
    let seed = seed();
    eprintln!("seed {seed} (REWIND_SEED={seed} runs it again)");
    round_trip(seed, true);
}

/// `stat -c '%i %h'` of each name, through the mount.
fn inodes(root: &Path, names: &[&str]) -> Vec<(u64, u64)> {
    names
        .iter()
        .map(|n| {
            let md = fs::symlink_metadata(root.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (md.ino(), md.nlink())
        })
        .collect()
}

/// A session takes every name from linked files: deletes them (`rm`), renames one away and
/// saves one by renaming over it (`sed -i`). Its rollback makes each group one file again, with
/// as many names as it had (not copies), and the undo of that rollback takes them back apart.
#[test]
fn names_a_session_took_from_linked_files_come_back_linked() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    crate::common::sh(
        &root,
        "printf 'shared\\n' > a; ln a b; mkdir d; ln a d/c; ln a e; \
         printf 'pair\\n' > k; ln k k2; mkfifo p; ln p p2",
    );
    ok(rw(&ws, &["sync"]));
    let before_session = snapshot(&root);
    crate::common::sh(
        &root,
        "export REWIND_SESSION=takes; rm a; rm b; mv d/c moved; sed -i s/shared/edited/ e; \
         rm k; rm k2; rm p; rm p2",
    );
    ok(rw(&ws, &["sync"]));
    let after_session = snapshot(&root);
    assert_eq!(inodes(&root, &["moved"])[0].1, 1, "{after_session:?}");

    let out = rollback(&ws, &["rollback", "--session", "takes"], 0);
    let diff = differences(&before_session, &snapshot(&root));
    assert!(diff.is_empty(), "{}\n{out}", diff.join("\n"));
    let group = inodes(&root, &["a", "b", "d/c", "e"]);
    assert!(
        group.iter().all(|g| *g == (group[0].0, 4)),
        "a, b, d/c and e are not one file with 4 names: {group:?}\n{out}"
    );
    let pair = inodes(&root, &["k", "k2"]);
    assert!(pair[0] == pair[1] && pair[0].1 == 2, "{pair:?}\n{out}");
    let fifo = inodes(&root, &["p", "p2"]);
    assert!(fifo[0] == fifo[1] && fifo[0].1 == 2, "{fifo:?}\n{out}");
    assert!(out.contains("link     b (to a)"), "{out}");

    ok(rw(&ws, &["sync"]));
    let session = rollback_session(&out);
    let out = rollback(&ws, &["rollback", "--session", &session], 0);
    let diff = differences(&after_session, &snapshot(&root));
    assert!(diff.is_empty(), "{}\n{out}", diff.join("\n"));
    ok(rw(&ws, &["sync"]));

    // And its undo again: one file once more.
    let out = rollback(&ws, &["rollback", "--session", "takes"], 0);
    let diff = differences(&before_session, &snapshot(&root));
    assert!(diff.is_empty(), "{}\n{out}", diff.join("\n"));
}

/// The session a rollback's output names for its undo (`rollback-N`).
fn rollback_session(out: &str) -> String {
    out.split("rewind rollback --session ")
        .nth(1)
        .and_then(|t| t.split('`').next())
        .unwrap_or_else(|| panic!("no undo in:\n{out}"))
        .to_string()
}

/// `before` run through the mount, a checkpoint, then `session`: `rollback --to` the
/// checkpoint gives back the tree `before` made and the undo of that rollback the tree
/// `session` left, compared whole (which names are one file too). Returns the outputs of the
/// rollback and of its undo.
fn round_trip_of(before: &str, session: &str) -> (String, String) {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    crate::common::sh(&root, before);
    ok(rw(&ws, &["sync"]));
    let at_checkpoint = snapshot(&root);
    ok(rw(&ws, &["checkpoint", "before"]));
    crate::common::sh(&root, session);
    ok(rw(&ws, &["sync"]));
    let before_rollback = snapshot(&root);
    let first = rollback(&ws, &["rollback", "--to", "before"], 0);
    let diff = differences(&at_checkpoint, &snapshot(&root));
    assert!(
        diff.is_empty(),
        "`rollback --to` the checkpoint is not the tree as it was:\n{}\n{first}",
        diff.join("\n")
    );
    ok(rw(&ws, &["sync"]));
    let session = rollback_session(&first);
    let undo = rollback(&ws, &["rollback", "--session", &session], 0);
    let diff = differences(&before_rollback, &snapshot(&root));
    assert!(
        diff.is_empty(),
        "undoing {session} is not the tree as it was before it:\n{}\n{undo}",
        diff.join("\n")
    );
    (first, undo)
}

/// A name of a linked file removed and made again as a file of its own with the same type,
/// content and mode (a FIFO, a file, a symlink) holds what it held: the rollback still links
/// it to its other name again, and the undo makes it a file of its own again.
#[test]
fn a_name_made_again_alike_is_linked_again_and_its_undo_separates_it() {
    let (first, undo) = round_trip_of(
        "mkfifo p; ln p p2; printf same > f; ln f f2; ln -s t s; ln -P s s2",
        "rm p; mkfifo p; rm f; printf same > f; rm s; ln -s t s",
    );
    for line in [
        "link     p (to p2)",
        "link     f (to f2)",
        "link     s (to s2)",
    ] {
        assert!(first.contains(line), "{line:?} not in:\n{first}");
    }
    for line in ["separate p ", "separate f ", "separate s "] {
        assert!(undo.contains(line), "{line:?} not in:\n{undo}");
    }
}

/// A name linked to another file after the selection took it (`rm p; ln q p`) says, in a
/// later change to that file (`chmod q`), that it is one of its names: that is not what it
/// was before the selection. The rollback puts it back as the file of its own it was (not
/// linked to `q`), and the undo links it to `q` again.
#[test]
fn a_name_linked_after_the_selection_took_it_goes_back_to_its_own_file() {
    let (first, _) = round_trip_of(
        "mkfifo p q; printf a > f; printf a > g",
        "rm p; ln q p; chmod 700 q; rm f; ln g f; chmod 600 g",
    );
    for line in ["separate p ", "separate f "] {
        assert!(first.contains(line), "{line:?} not in:\n{first}");
    }
}

/// A name the selection made anew, whose file has a name it must not keep (`d`, linked to
/// `f3` by the rollback, goes back to being one file with `x` only): it is made a file of its
/// own before its group is linked to it, so the other name keeps what it holds.
#[test]
fn a_name_whose_file_has_a_name_beyond_its_group_is_separated_first() {
    let (_, undo) = round_trip_of(
        "mkfifo -m 600 d; ln d f3",
        "rm d; mkfifo -m 600 d; ln d x; chmod 700 d",
    );
    assert!(undo.contains("separate d "), "{undo}");
    assert!(undo.contains("link     x (to d)"), "{undo}");
}
