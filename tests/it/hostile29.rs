//! Hostile tests, round 29: what hostile28's names-that-stay workload found, each made
//! deterministic. A hard-linked file keeps being written under the name a rename over the
//! other one leaves it; an open whose inode loses every name while it looks for it opens
//! what the name it came by holds.

use std::fs;

use crate::common::{Workspace, rw_ok};
use crate::hostile27::assert_chain_ends_in_the_present;
use crate::hostile28::{holder, run};
use crate::record::log;

/// A file with two names, `a` and `b`, open for writing by `a`; a save-by-rename puts a new
/// file at `a`, and the writer goes on writing. The file it writes is now only `b`: what it
/// writes after the rename is a modify of `b`.
///
/// FAILED before: the edit stayed at `a`, its end found the saved file there and recorded
/// nothing, so `b`'s history ended at "one\ntwo\n" while `b` held "three" too (seen as
/// `change 232 ("delete" "l2") breaks the chain of l2` in hostile28's names-that-stay
/// workload).
#[test]
fn a_save_over_one_name_of_a_file_being_written_records_the_rest_under_the_other() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    run(
        &dir,
        r#"
import os
open("a", "w").write("one\n")
os.link("a", "b")
fd = os.open("a", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"two\n")
open("a.tmp", "w").write("saved\n")
os.rename("a.tmp", "a")
os.write(fd, b"three\n")
os.close(fd)
"#,
    );
    assert_eq!(
        fs::read_to_string(dir.join("b")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "saved\n");
    let changes =
        assert_chain_ends_in_the_present(&ws, "a save over one name of a file being written");
    let last_of_b = changes
        .iter()
        .rev()
        .find(|c| {
            c["path"] == "b"
                || c["links"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|n| n == "b"))
        })
        .expect("a change of b");
    assert_eq!(last_of_b["kind"], "modify", "{last_of_b}");
    assert_eq!(last_of_b["path"], "b", "{last_of_b}");
    ws.unmount();
}

/// The same while the daemon is killed before the writer closes, then a remount: what the
/// dead daemon had not recorded of `b` comes back as a change of `b`, not of the saved `a`.
#[test]
fn a_save_over_one_name_of_a_file_being_written_then_sigkill_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    let pid = crate::common::daemon_pid(&ws);
    let (mut child, _out) = holder(
        &dir,
        r#"
import os, sys
open("a", "w").write("one\n")
os.link("a", "b")
fd = os.open("a", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"two\n")
open("a.tmp", "w").write("saved\n")
os.rename("a.tmp", "a")
os.write(fd, b"three\n")
os.fsync(fd)
print("ready", flush=True)
sys.stdin.readline()
"#,
    );
    ws.kill_daemon(pid);
    drop(child.stdin.take());
    let _ = child.wait();
    ws.mount();
    assert_eq!(
        fs::read_to_string(dir.join("b")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_chain_ends_in_the_present(&ws, "after the remount");
    let changes = log(&ws);
    assert!(
        !changes
            .iter()
            .any(|c| c["path"] == "a" && c["after"].is_object() && c["kind"] == "external"),
        "the saved a is not an external change: {changes:?}"
    );
    ws.unmount();
}

/// An open of `s` for writing held in `hold_at` (`REWIND_TEST_SLOW_NAMED`) while its file,
/// which also has the name `l`, is saved over at `s`: the open looks for it at `l`, and is
/// held there again while `l` is unlinked. The file has no name left; on a plain disk the open
/// succeeds (on the file the process looked up). Here it opens what `s`, the name it came by,
/// holds: it must not fail.
///
/// FAILED before with `ENOENT`: the open went on at `l`, the last name it looked under
/// (hostile28's names-that-stay workload, with slow holds: `No such file or directory: 's0'`
/// for an open of a name that never goes away).
#[test]
fn an_open_whose_file_loses_both_names_while_it_looks_opens_the_name_it_came_by() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_NAMED", "400")]);
    let dir = ws.path();
    fs::write(dir.join("s"), "old\n").unwrap();
    fs::hard_link(dir.join("s"), dir.join("l")).unwrap();
    fs::write(dir.join("s.tmp"), "saved\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let out = run(
        &dir,
        r#"
import os, threading, time
err = []
def writer():
    try:
        fd = os.open("s", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"written\n")
        os.close(fd)
    except OSError as e:
        err.append(str(e))
t = threading.Thread(target=writer)
t.start()
time.sleep(0.15)
os.rename("s.tmp", "s")
time.sleep(0.4)
os.unlink("l")
t.join()
print("ERR " + err[0] if err else "OK")
"#,
    );
    assert_eq!(out.trim(), "OK", "the open failed");
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "an open whose file lost both names");
    ws.unmount();
}

/// A link of a file whose writes are still in the kernel's page cache (a mount without
/// passthrough: the writeback cache), flushed while the link is held after its cut
/// (`REWIND_TEST_SLOW_CUT`, `sync` from another thread): the new name is recorded with what the
/// cut recorded, and what the flush brings is the edit's, recorded at its end as a change of
/// both names.
///
/// FAILED before: the link read the file again after its cut, so the new name's first version
/// held writes no change before it recorded, and the edit's end said the file held the cut's
/// content before it (hostile28's names-that-stay workload with slow holds: `change 104
/// ("modify" "s2") breaks the chain of l2 (a hard link of it)`, where 103, the link, holds
/// more than 102, the cut).
#[test]
fn a_link_of_a_file_being_written_holds_what_its_cut_recorded() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&["--no-passthrough"], &[("REWIND_TEST_SLOW_CUT", "400")]);
    let dir = ws.path();
    fs::write(dir.join("a"), "zero\n").unwrap();
    rw_ok(&ws, &["sync"]);
    run(
        &dir,
        r#"
import os, threading, time
fd = os.open("a", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"one\n")
t = threading.Thread(target=lambda: os.link("a", "b"))
t.start()
time.sleep(0.15)
os.sync()
t.join()
os.write(fd, b"two\n")
os.close(fd)
"#,
    );
    assert_eq!(
        fs::read_to_string(dir.join("b")).unwrap(),
        "zero\none\ntwo\n"
    );
    assert_chain_ends_in_the_present(&ws, "a link of a file being written");
    ws.unmount();
}

/// A command written to `.rewind/ctl` as most programs write a file (python's
/// `open(..., "w")`, which checks `close()`), through a mount without passthrough (the
/// writeback cache, as for a plain user): the kernel sets the file's times at its close, which
/// the control file takes and ignores. A chmod of it is still refused.
///
/// FAILED before: `close()` returned `EROFS` after the command had run (bash's `>` ignores
/// it; python raises), found while making hostile21's scripts record held-back creates.
#[test]
fn a_command_written_to_ctl_closes_cleanly_without_passthrough() {
    let mut ws = Workspace::new();
    ws.mount_with(&["--no-passthrough"]);
    let dir = ws.path();
    fs::write(dir.join("f"), "one\n").unwrap();
    let out = run(
        &dir,
        r#"
import os
with open(".rewind/ctl", "w") as c:
    c.write("sync\n")
try:
    os.chmod(".rewind/ctl", 0o644)
    print("chmod taken")
except OSError as e:
    print("chmod:", e.strerror)
"#,
    );
    assert_eq!(out.trim(), "chmod: Read-only file system");
    let changes = log(&ws);
    assert!(
        changes
            .iter()
            .any(|c| c["path"] == "f" && c["kind"] == "create"),
        "the create of f, recorded by the sync: {changes:?}"
    );
    ws.unmount();
}
