//! Big trees and what recording them costs: a recorded tree is deleted without its files being
//! read again (in the mount that recorded it, and after a remount), an outside edit is still
//! captured, and a rollback of a large deletion says what it did in one line.

use std::fs;
use std::path::Path;

use crate::common::{Workspace, daemon_pid, ok, rw, sh};

/// Bytes the daemon has read so far with read(2) and the like (`rchar`): files it captured,
/// and the store's own table files.
fn bytes_read(pid: i32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

const FILES: usize = 40;
const FILE_SIZE: usize = 256 << 10;

/// A tree of `FILES` files of different random content under `dir`, and a copy in `copy`.
fn make_tree(dir: &Path, copy: &Path) {
    sh(
        dir.parent().unwrap(),
        &format!(
            "mkdir -p '{d}' '{c}' && for i in $(seq {FILES}); do \
             head -c {FILE_SIZE} /dev/urandom > '{d}'/f$i; cp '{d}'/f$i '{c}'/f$i; done",
            d = dir.display(),
            c = copy.display()
        ),
    );
}

/// Every file of `copy` is in `dir` with the same bytes.
#[track_caller]
fn assert_same_tree(dir: &Path, copy: &Path) {
    for i in 1..=FILES {
        let name = format!("f{i}");
        assert!(
            fs::read(dir.join(&name)).unwrap() == fs::read(copy.join(&name)).unwrap(),
            "{} differs from what was deleted",
            dir.join(&name).display()
        );
    }
}

/// `rm -rf` of a tree whose content the store holds, then a rollback: the deletion reads
/// (nearly) nothing, the rollback brings every byte back.
fn delete_and_restore(ws: &Workspace, dir: &str, copy: &Path) {
    let pid = daemon_pid(ws);
    ok(rw(ws, &["checkpoint", &format!("before-{dir}")]));
    let before = bytes_read(pid);
    sh(&ws.path(), &format!("rm -rf {dir}"));
    ok(rw(ws, &["sync"]));
    let read = bytes_read(pid) - before;
    let tree = (FILES * FILE_SIZE) as u64;
    // What the store reads of its own to record 40 deletes is a few KiB; reading the files
    // again would be the whole tree.
    assert!(
        read < tree / 8,
        "deleting a recorded tree of {tree} bytes read {read} bytes"
    );
    ok(rw(ws, &["rollback", "--to", &format!("before-{dir}")]));
    assert_same_tree(&ws.path().join(dir), copy);
}

#[test]
fn a_recorded_tree_is_deleted_without_reading_it_again_even_after_a_remount() {
    let mut ws = Workspace::new();
    ws.mount();
    make_tree(&ws.path().join("a"), &ws.plain().join("a"));
    ok(rw(&ws, &["sync"]));
    delete_and_restore(&ws, "a", &ws.plain().join("a"));

    // The next mount knows what this one stored.
    make_tree(&ws.path().join("b"), &ws.plain().join("b"));
    ok(rw(&ws, &["sync"]));
    ws.unmount();
    ws.mount();
    delete_and_restore(&ws, "b", &ws.plain().join("b"));
}

#[test]
fn a_file_changed_while_unmounted_is_read_when_deleted_even_with_its_size_and_mtime_put_back() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "recorded content\n").unwrap();
    fs::write(ws.path().join("g"), "left alone\n").unwrap();
    ok(rw(&ws, &["sync"]));
    ws.unmount();
    // Same size (17 bytes), and its mtime set back: only its ctime tells.
    sh(
        &ws.path(),
        "touch -r f ../ref && printf 'changed! content\\n' > f && touch -r ../ref f",
    );
    ws.mount();
    ok(rw(&ws, &["checkpoint", "before-rm"]));
    sh(&ws.path(), "rm f g");
    ok(rw(&ws, &["rollback", "--to", "before-rm"]));
    assert_eq!(
        fs::read_to_string(ws.path().join("f")).unwrap(),
        "changed! content\n"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("g")).unwrap(),
        "left alone\n"
    );
}

#[test]
fn a_rollback_of_many_paths_lists_the_first_ten_and_a_summary_unless_verbose() {
    let mut ws = Workspace::new();
    ws.mount();
    sh(
        &ws.path(),
        "mkdir t && for i in $(seq 150); do echo $i > t/f$i; done",
    );
    ok(rw(&ws, &["sync"]));
    ok(rw(&ws, &["checkpoint", "full"]));
    sh(&ws.path(), "rm -rf t");
    let out = ok(rw(&ws, &["rollback", "--to", "full"]));
    let lines: Vec<&str> = out.lines().collect();
    // 151 paths: the folder and its files.
    assert_eq!(lines.len(), 12, "{out}");
    assert_eq!(lines[10], "... and 141 more paths (-v lists them)", "{out}");
    assert!(lines[11].contains("restored 151 paths"), "{out}");
    for i in 1..=150 {
        assert_eq!(
            fs::read_to_string(ws.path().join(format!("t/f{i}"))).unwrap(),
            format!("{i}\n")
        );
    }

    // Undone again, listed in full.
    sh(&ws.path(), "rm -rf t");
    let out = ok(rw(&ws, &["rollback", "--to", "full", "-v"]));
    assert_eq!(out.lines().count(), 152, "{out}");
    assert!(!out.contains("more paths"), "{out}");
    assert_eq!(
        fs::read_to_string(ws.path().join("t/f150")).unwrap(),
        "150\n"
    );
}
