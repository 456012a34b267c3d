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

/// `rewind status`'s counts: changes, blobs and their stored bytes.
pub(crate) fn status_counts(ws: &Workspace) -> (u64, u64, u64) {
    let status = ok(rw(ws, &["status"]));
    let number = |line: &str, word: usize| -> u64 {
        let rest = status
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("no {line} line in:\n{status}"));
        rest.split([' ', ','])
            .filter(|w| !w.is_empty())
            .nth(word)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no number {word} in {line}{rest}"))
    };
    (
        number("changes: ", 0),
        number("stored: ", 0),
        number("stored: ", 2),
    )
}

/// The same counts taken from the store's files by RocksDB itself: every change, every blob
/// and the length of its value. With the daemon running, call after `rewind sync`.
pub(crate) fn recount(store: &Path) -> (u64, u64, u64) {
    let opts = rocksdb::Options::default();
    // The writer may delete a table file while this opens: try again.
    let db = (0..5)
        .find_map(|_| {
            rocksdb::DB::open_cf_for_read_only(&opts, store, rewind::store::ALL_CFS, false).ok()
        })
        .expect("the store opens read-only");
    let changes = db
        .iterator_cf(
            db.cf_handle("changes").unwrap(),
            rocksdb::IteratorMode::Start,
        )
        .inspect(|item| assert!(item.is_ok()))
        .count() as u64;
    let (mut blobs, mut bytes) = (0, 0);
    for item in db.iterator_cf(db.cf_handle("blobs").unwrap(), rocksdb::IteratorMode::Start) {
        let (_, value) = item.unwrap();
        blobs += 1;
        bytes += value.len() as u64;
    }
    (changes, blobs, bytes)
}

/// `status` no longer counts by reading the whole store: its counts are kept with every write.
/// They must equal a full count after recording (small files, the same content twice, versions
/// stored as deltas, a chunked file, deletes and renames), after gc and across a remount.
#[test]
fn status_counts_equal_a_recount_of_the_store_after_recording_gc_and_a_remount() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    sh(
        &dir,
        "mkdir src && for i in $(seq 60); do seq $i 400 > src/f$i.txt; done \
         && for i in $(seq 10); do echo same > same$i; done \
         && for i in $(seq 5); do sed -i \"s/^1$i\\$/edit $i/\" src/f*.txt; done \
         && head -c 3145728 /dev/urandom > big.bin && cp big.bin big2.bin \
         && rm src/f1*.txt && mv src/f2.txt moved.txt",
    );
    ok(rw(&ws, &["sync"]));
    let after_work = status_counts(&ws);
    assert!(after_work.0 > 100 && after_work.1 > 60, "{after_work:?}");
    assert_eq!(after_work, recount(&ws.store()), "after recording, mounted");

    // gc removes most of it: the counts follow.
    // (The newest change of a path stays, and its content from before: write twice. Two
    // writes in quick succession may be one save, whose content from before is the big one:
    // settle between them.)
    sh(&dir, "echo a > big.bin && echo a > big2.bin");
    ok(rw(&ws, &["sync"]));
    sh(&dir, "echo b > big.bin && echo b > big2.bin");
    ok(rw(&ws, &["sync"]));
    ok(rw(&ws, &["gc", "--max-size", "1K"]));
    ok(rw(&ws, &["sync"]));
    let after_gc = status_counts(&ws);
    assert!(
        after_gc.0 < after_work.0 && after_gc.2 < after_work.2,
        "{after_work:?} -> {after_gc:?}"
    );
    assert_eq!(after_gc, recount(&ws.store()), "after gc, mounted");

    // Unmounted, status reads the store itself; a remount takes the counts up again.
    ws.unmount();
    assert_eq!(status_counts(&ws), recount(&ws.store()), "unmounted");
    ws.mount();
    sh(&dir, "echo more >> moved.txt && rm same1");
    ok(rw(&ws, &["sync"]));
    let remounted = status_counts(&ws);
    assert!(remounted.0 > after_gc.0, "{after_gc:?} -> {remounted:?}");
    assert_eq!(remounted, recount(&ws.store()), "after a remount, mounted");
}

/// Run `rewind rollback --to POINT` on a pseudo-terminal (its stdout to `file` instead, if
/// given), the daemon held halfway through restoring (`REWIND_TEST_HOLD_PROGRESS` at `hold`)
/// until the terminal shows the progress bar, or for a second when stdout is a file (there
/// must be nothing to wait for). Returns what the terminal showed, then a line `PROGRESS:`
/// with what `.rewind/progress` said while the rollback was held.
fn rollback_on_a_terminal(ws: &Workspace, hold: &Path, point: &str, file: Option<&Path>) -> String {
    let taken = hold.with_extension("taken");
    let _ = fs::remove_file(&taken);
    fs::write(hold, b"").unwrap();
    let script = r#"
import os, pty, re, select, sys, time
rewind, hold, point, redirect = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    if redirect != "-":
        os.dup2(os.open(redirect, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.execv(rewind, [rewind, "rollback", "--to", point])
shown, progress, held_since = b"", "", None
deadline = time.time() + 120
while True:
    if os.path.exists(hold) and os.path.exists(hold + ".taken"):
        if held_since is None:
            held_since = time.time()
            progress = open(".rewind/progress").read()
        bar = re.search(rb"restoring \[[=> ]*\] \d+/[\d,]+ paths", shown)
        if bar or (redirect != "-" and time.time() - held_since > 1) or time.time() > deadline:
            os.remove(hold)
    ready, _, _ = select.select([fd], [], [], 0.05)
    if ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        shown += data
os.waitpid(pid, 0)
sys.stdout.write(shown.decode(errors="replace") + "\nPROGRESS: " + progress)
"#;
    let out = crate::common::python_command(&ws.path(), script)
        .arg(crate::common::REWIND)
        .arg(hold)
        .arg(point)
        .arg(file.map_or("-".into(), |f| f.display().to_string()))
        .env("XDG_DATA_HOME", ws.store().parent().unwrap().join("data"))
        .env_remove("REWIND_SESSION")
        .output()
        .unwrap();
    let _ = fs::remove_file(hold);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The end of a terminal's output, for messages (a spinner fills pages).
fn tail(shown: &str) -> &str {
    let mut start = shown.len().saturating_sub(1500);
    while !shown.is_char_boundary(start) {
        start += 1;
    }
    &shown[start..]
}

/// Mount `ws` with its daemon holding every rollback halfway while `hold` exists
/// (`REWIND_TEST_HOLD_PROGRESS`).
fn mount_holding_rollbacks(ws: &mut Workspace, hold: &Path) {
    let out = ws
        .command(&["mount"])
        .arg(ws.path())
        .arg("--store")
        .arg(ws.store())
        .env("REWIND_TEST_HOLD_PROGRESS", hold)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ws.mark_mounted();
}

/// A big rollback shows a progress bar on a terminal, fed by the daemon's `.rewind/progress`;
/// with its output going to a file or a pipe it shows none.
#[test]
fn a_big_rollback_shows_its_progress_on_a_terminal_and_none_when_output_is_not_one() {
    let mut ws = Workspace::new();
    let hold = ws.plain().join("hold");
    mount_holding_rollbacks(&mut ws, &hold);
    sh(
        &ws.path(),
        "mkdir t && for i in $(seq 300); do echo $i > t/f$i; done",
    );
    ok(rw(&ws, &["checkpoint", "full"]));
    sh(&ws.path(), "rm -rf t");
    ok(rw(&ws, &["checkpoint", "empty"]));

    let shown = rollback_on_a_terminal(&ws, &hold, "full", None);
    assert!(
        shown.contains("rollback: restoring [") && shown.contains("/301 paths"),
        "no progress bar on the terminal:\n{}",
        tail(&shown)
    );
    assert!(shown.contains("rollback-1: restored 301 paths"), "{shown}");
    // The daemon's side, while the rollback was held halfway: `WRITER restoring 150 301`.
    let progress = shown.split("PROGRESS: ").nth(1).unwrap();
    let words: Vec<&str> = progress.split_whitespace().collect();
    assert_eq!(words[1..], ["restoring", "150", "301"], "{progress}");
    assert_eq!(fs::read_dir(ws.path().join("t")).unwrap().count(), 300);

    // Output to a file: no progress on the terminal, the summary in the file.
    let file = ws.plain().join("out.txt");
    let shown = rollback_on_a_terminal(&ws, &hold, "empty", Some(&file));
    let shown = shown.split("PROGRESS: ").next().unwrap();
    assert!(
        !shown.contains("restoring") && !shown.contains("working"),
        "progress shown while stdout is a file:\n{}",
        tail(shown)
    );
    let written = fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("rollback-2: restored 301 paths"),
        "{written}"
    );
    assert!(!ws.path().join("t").exists());

    // Piped: the summary alone.
    let out = rw(&ws, &["rollback", "--to", "full"]);
    assert_eq!(crate::common::stderr(&out), "");
    assert!(ok(out).contains("rollback-3: restored 301 paths"));
}

/// A long command through `.rewind/ctl` (here a rollback held halfway, as a big one or a gc
/// would take minutes) does not hold up the others: `rewind log` answers meanwhile. The
/// kernel used to hold `ctl`'s lock over each write until its command answered.
#[test]
fn a_long_command_does_not_hold_up_the_others() {
    let mut ws = Workspace::new();
    let hold = ws.plain().join("hold");
    mount_holding_rollbacks(&mut ws, &hold);
    sh(
        &ws.path(),
        "mkdir t && for i in $(seq 20); do echo $i > t/f$i; done",
    );
    ok(rw(&ws, &["checkpoint", "full"]));
    sh(&ws.path(), "rm -rf t");

    fs::write(&hold, b"").unwrap();
    let taken = hold.with_extension("taken");
    let mut rollback = ws
        .command(&[
            "-C".as_ref(),
            ws.path().as_os_str(),
            "rollback".as_ref(),
            "--to".as_ref(),
            "full".as_ref(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !taken.exists() {
        assert!(
            waited.elapsed().as_secs() < 60,
            "the rollback never reached its hold"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // While it is held: another command runs to its end (given a minute; it used to wait
    // for the rollback, which waits here for ever).
    let mut log = ws
        .command(&[
            "-C".as_ref(),
            ws.path().as_os_str(),
            "log".as_ref(),
            "-n".as_ref(),
            "1".as_ref(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = log.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed().as_secs() >= 60 {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let still_held = rollback.try_wait().unwrap().is_none();
    fs::remove_file(&hold).unwrap();
    if status.is_none() {
        let _ = log.kill();
    }
    let log_out = log.wait_with_output().unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "log waited for the held rollback"
    );
    assert!(still_held, "the rollback was still held while log answered");
    // The newest change then: a restore the held rollback made before its hold.
    let shown = String::from_utf8_lossy(&log_out.stdout).into_owned();
    assert_eq!(shown.lines().count(), 1, "{shown}");
    assert!(rollback.wait().unwrap().success());
    assert_eq!(fs::read_to_string(ws.path().join("t/f7")).unwrap(), "7\n");
}
