//! Hostile tests, round 28: opens and truncates that hold their file at its name
//! (`Recorder::hold_at`, `Core::begin_and_open`), operations that carry what the cut
//! recorded, and the unlink that drops an orphaned edit's marker. Opens and truncates race
//! exchanges, renames over the name, folder renames, unlinks; writers keep files open while
//! the daemon is killed; then the history must still be an unbroken chain ending at the tree,
//! and no process may see an error a plain disk would not give.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::{Workspace, daemon_pid, python_command, rw_ok, stderr, wait_for};
use crate::hostile27::{assert_chain_ends_in_the_present, whole};
use crate::record::log;

const SLOW: &[(&str, &str)] = &[("REWIND_TEST_SLOW_NAMED", "400")];

/// Run `script` in the mount; it must succeed.
pub(crate) fn run(dir: &Path, script: &str) -> String {
    let out = python_command(dir, script).output().unwrap();
    assert!(
        out.status.success(),
        "the script failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A python process that runs `script` in `dir`, prints "ready" when set up, and waits for a
/// line on stdin before its end.
pub(crate) fn holder(dir: &Path, script: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = python_command(dir, script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the holder did not get ready");
    (child, out)
}

/// A truncate by name (`truncate(2)`, a setattr with a size and no handle) held in
/// `hold_at` while an exchange of its file with another is asked. The kernel holds the
/// truncated file's lock across the setattr and the exchange takes it too, so one comes
/// wholly before the other: the chain must hold and end at the tree either way.
#[test]
fn a_truncate_by_name_racing_an_exchange_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::write(dir.join("a"), "aaaaaaaa\n").unwrap();
    fs::write(dir.join("b"), "bbbbbbbbbbbb\n").unwrap();
    run(
        &dir,
        r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
t = threading.Thread(target=lambda: os.truncate("a", 3))
t.start()
time.sleep(0.15)
assert libc.renameat2(-100, b"a", -100, b"b", 2) == 0, ctypes.get_errno()
t.join()
"#,
    );
    let (a, b) = (
        fs::read_to_string(dir.join("a")).unwrap(),
        fs::read_to_string(dir.join("b")).unwrap(),
    );
    assert!(
        (a.as_str(), b.as_str()) == ("bbbbbbbbbbbb\n", "aaa")
            || (a.as_str(), b.as_str()) == ("bbb", "aaaaaaaa\n"),
        "unexpected contents: a {a:?} b {b:?}"
    );
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a truncate by name racing an exchange");
    ws.unmount();
}

/// A read-write open without truncation (the branch of `begin_and_open` that opens first and
/// reads the content before through the new fd) held in `hold_at` while the file is
/// exchanged with another: what it writes is recorded on the file it wrote.
#[test]
fn a_read_write_open_racing_an_exchange_records_the_file_it_opened() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::write(dir.join("a"), "aaaa\n").unwrap();
    fs::write(dir.join("b"), "bbbb\n").unwrap();
    run(
        &dir,
        r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
def rw():
    fd = os.open("a", os.O_RDWR)
    os.pwrite(fd, b"XY", 0)
    os.close(fd)
t = threading.Thread(target=rw)
t.start()
time.sleep(0.15)
assert libc.renameat2(-100, b"a", -100, b"b", 2) == 0, ctypes.get_errno()
t.join()
"#,
    );
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "a read-write open racing an exchange");
    let a = fs::read_to_string(dir.join("a")).unwrap();
    let b = fs::read_to_string(dir.join("b")).unwrap();
    assert!(
        (a.as_str(), b.as_str()) == ("XYbb\n", "aaaa\n")
            || (a.as_str(), b.as_str()) == ("bbbb\n", "XYaa\n"),
        "a {a:?} b {b:?}\n{}",
        whole(&changes)
    );
    ws.unmount();
}

/// An `O_TRUNC` open held in `hold_at` while a save-by-rename puts another file at the
/// name: the open truncates and writes one of the two, and the history says which.
#[test]
fn an_o_trunc_open_racing_a_rename_over_the_name_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::write(dir.join("a"), "old\n").unwrap();
    fs::write(dir.join("a.tmp"), "saved\n").unwrap();
    rw_ok(&ws, &["sync"]);
    run(
        &dir,
        r#"
import os, threading, time
def trunc():
    fd = os.open("a", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"written\n")
    os.close(fd)
t = threading.Thread(target=trunc)
t.start()
time.sleep(0.15)
os.rename("a.tmp", "a")
t.join()
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "an O_TRUNC open racing a rename over the name");
    ws.unmount();
}

/// Opens for writing by a handle on the folder (`openat` of a folder fd), while another
/// thread renames the folder back and forth: on a plain disk no open ever fails, the folder fd
/// follows the folder. Held in `hold_at` (`REWIND_TEST_SLOW_NAMED`), the open looks for the
/// file at the path the daemon had for it before the rename.
#[test]
fn an_open_by_folder_fd_racing_the_folders_rename_does_not_fail() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/f"), "start\n").unwrap();
    let out = run(
        &dir,
        r#"
import os, threading, time
dfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
errors = []
def app(flags):
    try:
        fd = os.open("f", flags, dir_fd=dfd)
        os.write(fd, b"more\n")
        os.close(fd)
    except OSError as e:
        errors.append("%s: %s" % (flags, e))
for flags in [os.O_WRONLY | os.O_APPEND, os.O_RDWR]:
    t = threading.Thread(target=app, args=(flags,))
    t.start()
    time.sleep(0.15)
    if os.path.isdir("d"): os.rename("d", "e")
    else: os.rename("e", "d")
    t.join()
print("ERR " + "; ".join(errors) if errors else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(out.trim(), "OK", "an open failed where a plain disk opens");
    assert_chain_ends_in_the_present(&ws, "opens by folder fd racing the folder's rename");
    ws.unmount();
}

/// The same without any knob: a thread renames the folder back and forth while others open
/// the file below for writing through a folder fd, and truncate it by name from inside it (the
/// working directory follows the folder). No error on a plain disk.
#[test]
fn opens_and_truncates_below_a_folder_renamed_over_and_over_do_not_fail() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/f"), "start\n").unwrap();
    let out = run(
        &dir,
        r#"
import os, threading, time
root = os.getcwd()
D, E = os.path.join(root, "d"), os.path.join(root, "e")
dfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
errors = []
stop = False
def renamer():
    while not stop:
        try:
            if os.path.isdir(D): os.rename(D, E)
            else: os.rename(E, D)
        except OSError as e:
            errors.append("rename: %s" % e)
def opener(i):
    for n in range(150):
        flags = [os.O_WRONLY | os.O_APPEND, os.O_RDWR, os.O_WRONLY | os.O_TRUNC][(n + i) % 3]
        try:
            fd = os.open("f", flags, dir_fd=dfd)
            os.write(fd, b"w%d %d\n" % (i, n))
            os.close(fd)
        except OSError as e:
            errors.append("open %s: %s" % (flags, e))
def truncater():
    # The process's working directory: the folder, wherever it goes.
    os.fchdir(dfd)
    for n in range(150):
        try:
            os.truncate("f", n % 7)
        except OSError as e:
            errors.append("truncate: %s" % e)
r = threading.Thread(target=renamer)
r.start()
ts = [threading.Thread(target=opener, args=(i,)) for i in range(2)] + [threading.Thread(target=truncater)]
for t in ts: t.start()
for t in ts: t.join()
stop = True
r.join()
print("ERR %d %s" % (len(errors), "; ".join(sorted(set(errors))[:8])) if errors else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(out.trim(), "OK", "errors a plain disk does not give");
    assert_chain_ends_in_the_present(&ws, "opens below a folder renamed over and over");
    ws.unmount();
}

/// An open for writing held in `hold_at` while the name it opened is unlinked: the kernel
/// had found the file, and on a plain disk the open succeeds (the file lives while open).
///
/// Known gap: the open gets `ENOENT`, as if the unlink came first. Underneath, the unlink of
/// the file's last name freed the backing file (nothing holds it open there), so the daemon
/// has nothing left to open (`Core::begin_and_open` finds the inode without a name, and the
/// name gone).
#[test]
#[ignore = "known (design.md): an open of a file whose last name is unlinked first gets ENOENT; the backing file is gone"]
fn an_open_racing_the_unlink_of_its_name_does_not_fail() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::write(dir.join("f"), "start\n").unwrap();
    let out = run(
        &dir,
        r#"
import os, threading, time
errors = []
def app():
    try:
        fd = os.open("f", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"more\n")
        os.close(fd)
    except OSError as e:
        errors.append(str(e))
t = threading.Thread(target=app)
t.start()
time.sleep(0.15)
os.unlink("f")
t.join()
print("ERR " + "; ".join(errors) if errors else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(out.trim(), "OK", "an open failed where a plain disk opens");
    assert_chain_ends_in_the_present(&ws, "an open racing its name's unlink");
    ws.unmount();
}

/// A file opened, unlinked, and opened again for writing through `/proc/self/fd/N` (what a
/// program re-opening its own deleted temp file does): a plain disk opens it.
#[test]
fn reopening_an_unlinked_open_file_for_writing_through_proc_works() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    let out = run(
        &dir,
        r#"
import os
fd = os.open("t", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"one\n")
os.unlink("t")
res = []
for flags in [os.O_WRONLY | os.O_APPEND, os.O_RDWR, os.O_WRONLY | os.O_TRUNC]:
    try:
        g = os.open("/proc/self/fd/%d" % fd, flags)
        os.write(g, b"two\n")
        os.close(g)
    except OSError as e:
        res.append("%s: %s" % (flags, e))
try:
    os.truncate("/proc/self/fd/%d" % fd, 2)
except OSError as e:
    res.append("truncate: %s" % e)
os.close(fd)
print("ERR " + "; ".join(res) if res else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(
        out.trim(),
        "OK",
        "a reopen failed where a plain disk reopens"
    );
    assert_chain_ends_in_the_present(&ws, "reopening an unlinked file");
    ws.unmount();
}

/// A writer keeps `f` open with a second name `g`; `f` is unlinked (not the file's last
/// name, so the edit goes on under `g`), a new file is made at `f`, and the daemon is
/// SIGKILLed before the writer closes. The next mount must not read the new `f` as the old
/// edit going on, nor lose the chain of `g`.
#[test]
fn sigkill_after_unlinking_one_name_of_an_open_file_then_a_new_file_there() {
    sigkill_after_unlink(true);
}

/// The same when `f` was the file's last name (commit 279273d: the unlink drops the marker).
#[test]
fn sigkill_after_unlinking_the_last_name_of_an_open_file_then_a_new_file_there() {
    sigkill_after_unlink(false);
}

fn sigkill_after_unlink(link: bool) {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join("f"), "first\n").unwrap();
    if link {
        fs::hard_link(dir.join("f"), dir.join("g")).unwrap();
    }
    rw_ok(&ws, &["sync"]);
    let (mut child, _out) = holder(
        &dir,
        r#"
import os, sys
fd = os.open("f", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"written while open\n")
os.unlink("f")
os.write(fd, b"after the unlink\n")
with open("f", "w") as h: h.write("a new file\n")
print("ready", flush=True)
sys.stdin.readline()
"#,
    );
    std::thread::sleep(Duration::from_millis(700));
    let pid = daemon_pid(&ws);
    ws.kill_daemon(pid);
    let _ = child.kill();
    let _ = child.wait();
    ws.mount();
    assert!(wait_for(10, || dir.join("f").exists()));
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "after SIGKILL and a remount");
    assert_eq!(
        fs::read_to_string(dir.join("f")).unwrap(),
        "a new file\n",
        "{}",
        whole(&changes)
    );
    if link {
        assert_eq!(
            fs::read_to_string(dir.join("g")).unwrap(),
            "first\nwritten while open\nafter the unlink\n"
        );
    }
    ws.unmount();
}

/// A writer keeps `a` open and appends to it while another process exchanges it with `b`,
/// chmods it, renames it over `c`, links it as `d` and unlinks `c`, each a cut of the open
/// edit (`REWIND_TEST_SLOW_CUT` widens each); then the daemon gets SIGTERM, and the writer
/// writes once more and closes after that. The remount's history must
/// be a chain ending at the tree.
#[test]
fn cuts_of_an_open_writer_then_sigterm_and_a_remount_keep_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_CUT", "100")]);
    let dir = ws.path();
    for n in ["a", "b", "c"] {
        fs::write(dir.join(n), format!("{n}\n")).unwrap();
    }
    rw_ok(&ws, &["sync"]);
    let (mut child, mut out) = holder(
        &dir,
        r#"
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("a", os.O_WRONLY | os.O_APPEND)
stop = False
def writer():
    n = 0
    while not stop:
        try: os.write(fd, b"line %d\n" % n)
        except OSError: pass
        n += 1
        time.sleep(0.005)
t = threading.Thread(target=writer)
t.start()
time.sleep(0.1)
assert libc.renameat2(-100, b"a", -100, b"b", 2) == 0
time.sleep(0.1)
os.chmod("b", 0o600)
time.sleep(0.1)
os.rename("b", "c")
time.sleep(0.1)
os.link("c", "d")
time.sleep(0.1)
os.unlink("c")
time.sleep(0.1)
stop = True
t.join()
print("ready", flush=True)
sys.stdin.readline()
os.write(fd, b"after the signal\n")
os.close(fd)
"#,
    );
    let pid = daemon_pid(&ws);
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    // The mount is detached lazily: the daemon serves the open file until its close.
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.stdin.as_mut().unwrap().write_all(b"\n");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let status = child.wait().unwrap();
    let gone = wait_for(30, || !Path::new(&format!("/proc/{pid}")).exists());
    if !gone {
        ws.kill_daemon(pid);
    }
    let _ = std::process::Command::new("fusermount3")
        .arg("-uz")
        .arg(dir.as_path())
        .status();
    assert!(
        gone,
        "the daemon did not end 30 s after SIGTERM and the file's close"
    );
    assert!(status.success(), "the writer failed: {status}");
    ws.mount();
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "cuts then SIGTERM and a remount");
    let changes = log(&ws);
    assert!(
        fs::read_to_string(dir.join("d"))
            .unwrap()
            .ends_with("after the signal\n"),
        "{}",
        whole(&changes)
    );
    ws.unmount();
}

/// An open for writing held in `hold_at` while its file is renamed away (`f` to `g`, what
/// an editor's rename-away save does first): a plain disk opens the file, now at `g`.
///
/// Failed before 23de97f (an open now looks its inode up again when the name holds
/// another file): the open gets `ENOENT` ("No such file or directory"). `Core::open` turns the inode
/// into a path (`reachable_path`, under the table of names shared) before
/// `Core::begin_and_open`; `Recorder::hold_named` then `lstat`s that path and returns its
/// error, while the unlink or rename has already changed the backing tree (it waits for the
/// table of names only to update it). Before a65a46f `begin_write` `stat`ed the path the same
/// way; `REWIND_TEST_SLOW_NAMED` widens the window the commit made.
#[test]
fn an_open_racing_a_rename_away_of_its_name_does_not_fail() {
    open_racing(&["f"], "os.rename('f', 'g')", "f");
}

/// An open of `g`, a hard link of `f`, held in `hold_at` while `f` is unlinked: the
/// process named `g`, which stays; a plain disk opens it.
///
/// Failed before 23de97f (an open now looks its inode up again when the name holds
/// another file): the open gets `ENOENT` ("No such file or directory"). `Core::open` turns the inode
/// into a path (`reachable_path`, under the table of names shared) before
/// `Core::begin_and_open`; `Recorder::hold_named` then `lstat`s that path and returns its
/// error, while the unlink or rename has already changed the backing tree (it waits for the
/// table of names only to update it). Before a65a46f `begin_write` `stat`ed the path the same
/// way; `REWIND_TEST_SLOW_NAMED` widens the window the commit made.
#[test]
fn an_open_of_one_link_racing_the_unlink_of_another_does_not_fail() {
    open_racing(&["f", "g"], "os.unlink('f')", "g");
}

/// The same with `f` renamed away instead (to `h`).
///
/// Failed before 23de97f (an open now looks its inode up again when the name holds
/// another file): the open gets `ENOENT` ("No such file or directory"). `Core::open` turns the inode
/// into a path (`reachable_path`, under the table of names shared) before
/// `Core::begin_and_open`; `Recorder::hold_named` then `lstat`s that path and returns its
/// error, while the unlink or rename has already changed the backing tree (it waits for the
/// table of names only to update it). Before a65a46f `begin_write` `stat`ed the path the same
/// way; `REWIND_TEST_SLOW_NAMED` widens the window the commit made.
#[test]
fn an_open_of_one_link_racing_the_rename_of_another_does_not_fail() {
    open_racing(&["f", "g"], "os.rename('f', 'h')", "g");
}

/// `names`: the file's names (hard links); `op`: python run 0.15 s into the open of `open`,
/// for append, then read-write, then with `O_TRUNC`, then a truncate by name, each held in
/// `hold_at`. No open may fail, and the chain must hold.
fn open_racing(names: &[&str], op: &str, open: &str) {
    for (i, flags) in [
        "os.O_WRONLY | os.O_APPEND",
        "os.O_RDWR",
        "os.O_WRONLY | os.O_TRUNC",
        "truncate",
    ]
    .iter()
    .enumerate()
    {
        let mut ws = Workspace::new();
        ws.mount_with_env(&[] as &[&str], SLOW);
        let dir = ws.path();
        fs::write(dir.join(names[0]), "start\n").unwrap();
        for n in &names[1..] {
            fs::hard_link(dir.join(names[0]), dir.join(n)).unwrap();
        }
        rw_ok(&ws, &["sync"]);
        let script = format!(
            r#"
import os, threading, time
errors = []
def app():
    try:
        if "{flags}" == "truncate":
            os.truncate("{open}", 3)
        else:
            fd = os.open("{open}", {flags})
            os.write(fd, b"more\n")
            os.close(fd)
    except OSError as e:
        errors.append(str(e))
t = threading.Thread(target=app)
t.start()
time.sleep(0.15)
{op}
t.join()
print("ERR " + "; ".join(errors) if errors else "OK")
"#
        );
        let out = run(&dir, &script);
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("{op} racing {flags}"));
        assert_eq!(
            out.trim(),
            "OK",
            "case {i}: open({open}, {flags}) racing {op} failed where a plain disk opens\n{}",
            whole(&changes)
        );
        ws.unmount();
    }
}

/// A rollback that puts a file back as it was while an open for writing of it is held in
/// `hold_at`: neither fails, and the chain holds (the open's episode is of the file the
/// name holds when it opens).
#[test]
fn a_rollback_racing_an_open_held_at_its_name_keeps_the_chain() {
    for (flags, del) in [
        ("os.O_WRONLY | os.O_APPEND", false),
        ("os.O_RDWR", false),
        ("os.O_WRONLY | os.O_TRUNC", false),
        ("os.O_WRONLY | os.O_APPEND", true),
    ] {
        let mut ws = Workspace::new();
        ws.mount_with_env(&[] as &[&str], SLOW);
        let dir = ws.path();
        if !del {
            fs::write(dir.join("f"), "at the point\n").unwrap();
        }
        fs::write(dir.join("p"), "p\n").unwrap();
        let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
        fs::write(dir.join("f"), "after the point\n").unwrap();
        rw_ok(&ws, &["sync"]);
        let script = format!(
            r#"
import os, subprocess, sys, threading, time
errors = []
def app():
    try:
        fd = os.open("f", {flags})
        os.write(fd, b"more\n")
        os.close(fd)
    except OSError as e:
        errors.append(str(e))
t = threading.Thread(target=app)
t.start()
time.sleep(0.15)
r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True)
t.join()
if r.returncode != 0: errors.append("rollback: %s" % r.stderr.decode())
print("ERR " + "; ".join(errors) if errors else "OK")
"#
        );
        let out = python_command(&dir, &script)
            .arg(env!("CARGO_BIN_EXE_rewind"))
            .arg(&point)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        rw_ok(&ws, &["sync"]);
        let changes =
            assert_chain_ends_in_the_present(&ws, &format!("rollback racing {flags} del {del}"));
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        if !del {
            // The open deleted nothing: a plain disk opens it whatever the rollback does.
            assert_eq!(said.trim(), "OK", "{flags}\n{}", whole(&changes));
        }
        ws.unmount();
    }
}

/// Without any knob: a thread makes and removes a second name `f` of the file `g` over and
/// over (and renames it to `h` and back), while others open `g` for writing (append,
/// read-write, `O_TRUNC`) and truncate it by name. `g` is never touched: on a plain disk no
/// open or truncate of it fails.
#[test]
fn opens_of_a_name_while_another_link_comes_and_goes_do_not_fail() {
    opens_while_links_come_and_go(false);
}

/// The same when the other name was the file's first (`f` made first, `g` linked to it), and
/// the thread removes `f` and links it back, or renames it to `h` and back.
#[test]
fn opens_of_a_name_while_the_first_name_comes_and_goes_do_not_fail() {
    opens_while_links_come_and_go(true);
}

fn opens_while_links_come_and_go(first: bool) {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    if first {
        fs::write(dir.join("f"), "start\n").unwrap();
        fs::hard_link(dir.join("f"), dir.join("g")).unwrap();
    } else {
        fs::write(dir.join("g"), "start\n").unwrap();
    }
    rw_ok(&ws, &["sync"]);
    let out = run(
        &dir,
        r#"
import os, sys, threading
first = os.path.exists("f")
errors = []
stop = False
def linker():
    n = 0
    while not stop:
        try:
            if first:
                if n % 2: os.rename("f", "h"); os.rename("h", "f")
                else: os.unlink("f"); os.link("g", "f")
            else:
                os.link("g", "f")
                if n % 2: os.rename("f", "h"); os.unlink("h")
                else: os.unlink("f")
        except OSError as e:
            errors.append("link: %s" % e)
        n += 1
def opener(i):
    for n in range(300):
        flags = [os.O_WRONLY | os.O_APPEND, os.O_RDWR, os.O_WRONLY | os.O_TRUNC][(n + i) % 3]
        try:
            fd = os.open("g", flags)
            os.write(fd, b"w%d %d\n" % (i, n))
            os.close(fd)
        except OSError as e:
            errors.append("open %s: %s" % (flags, e.strerror))
def truncater():
    for n in range(300):
        try:
            os.truncate("g", n % 7)
        except OSError as e:
            errors.append("truncate: %s" % e.strerror)
r = threading.Thread(target=linker)
r.start()
ts = [threading.Thread(target=opener, args=(i,)) for i in range(2)] + [threading.Thread(target=truncater)]
for t in ts: t.start()
for t in ts: t.join()
stop = True
r.join()
print("ERR %d %s" % (len(errors), "; ".join(sorted(set(errors))[:8])) if errors else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(out.trim(), "OK", "errors a plain disk does not give");
    assert_chain_ends_in_the_present(&ws, "opens of a name while another link comes and goes");
    ws.unmount();
}

/// Processes that open, truncate and rewrite three shared files whose names never go away
/// (they are only exchanged, renamed over, given and taken a second name, chmodded): on a
/// plain disk no operation on them fails. Prints the errors seen, or "OK".
/// `H28_SKIP=DIGITS` leaves those steps out; `H28_TRACE=FILE` appends each step (time, pid,
/// worker, step, kind, file) to FILE, to match against the log's pids.
const NAMES_STAY: &str = r#"
import ctypes, errno, os, random, sys, time
libc = ctypes.CDLL(None, use_errno=True)
seed, workers, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
# Steps left out (for narrowing a failure down): digits in H28_SKIP.
skip = os.environ.get("H28_SKIP", "")
S = ["s0", "s1", "s2"]
def step(r, w, i):
    s = r.choice(S)
    data = b"w%d r%d\n" % (w, i) * r.randrange(1, 4)
    k = r.randrange(9)
    if str(k) in skip:
        return
    if os.environ.get("H28_TRACE"):
        with open(os.environ["H28_TRACE"], "a") as tr:
            tr.write("%.6f pid %d w%d step %d k%d %s\n" % (time.time(), os.getpid(), w, i, k, s))
    if k == 0:
        os.truncate(s, r.randrange(8))
    elif k == 1:
        fd = os.open(s, os.O_RDWR)
        os.pwrite(fd, data, r.randrange(4))
        os.close(fd)
    elif k == 2:
        fd = os.open(s, os.O_WRONLY | os.O_APPEND)
        os.write(fd, data)
        os.close(fd)
    elif k == 3:
        fd = os.open(s, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, data)
        os.close(fd)
    elif k == 4:
        t = r.choice(S)
        if t != s and libc.renameat2(-100, s.encode(), -100, t.encode(), 2) != 0:
            raise OSError(ctypes.get_errno(), "exchange")
    elif k == 5:
        t = ".%s.w%d.%d" % (s, w, i)
        with open(t, "wb") as h: h.write(data)
        os.rename(t, s)
    elif k == 6:
        l = "l%d" % w
        try:
            os.link(s, l)
        except FileNotFoundError:
            # The file looked up at `s` was saved over before the link: a plain disk gives
            # this too (the kernel's check of the link count, after its lookup of `l`).
            return
        fd = os.open(l, os.O_WRONLY | os.O_APPEND)
        os.write(fd, data)
        os.close(fd)
        os.unlink(l)
    elif k == 7:
        os.chmod(s, r.choice([0o600, 0o644]))
    else:
        # A writer keeping the file open across others' steps.
        fd = os.open(s, os.O_WRONLY | os.O_APPEND)
        for _ in range(3):
            os.write(fd, data)
            time.sleep(0.01)
        os.close(fd)
def run(w, out):
    r = random.Random(seed * 1000 + w)
    for i in range(rounds):
        try:
            step(r, w, i)
        except OSError as e:
            os.write(out, b"w%d step %d: %s\n" % (w, i, str(e).encode()))
        if r.random() < 0.2: time.sleep(r.random() * 0.02)
rd, wr = os.pipe()
pids = []
for w in range(workers):
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try: run(w, wr)
        finally: os._exit(0)
    pids.append(pid)
os.close(wr)
errs = b""
while True:
    b = os.read(rd, 65536)
    if not b: break
    errs += b
for p in pids: os.waitpid(p, 0)
# ESTALE for a call on a name saved over twice within the kernel's one retry is a known gap
# (docs/design.md, hostile30's O_PATH tests: the daemon cannot act on the nameless file).
lines = [l for l in errs.decode().splitlines() if l]
other = [l for l in lines if "[Errno 116]" not in l]
print(("ERR\n" + "\n".join(other)) if other else "OK", flush=True)
if len(lines) > len(other):
    print("known: %d ESTALE" % (len(lines) - len(other)), flush=True)
"#;

fn names_stay(ws: &Workspace, seed: u64, workers: u32, rounds: u32) -> String {
    let dir = ws.path();
    let out = python_command(&dir, NAMES_STAY)
        .args([seed.to_string(), workers.to_string(), rounds.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out)
}

fn shared_files(ws: &Workspace) {
    for n in ["s0", "s1", "s2"] {
        fs::write(ws.path().join(n), format!("{n}\n")).unwrap();
    }
    rw_ok(ws, &["sync"]);
}

/// [`NAMES_STAY`] with 4 processes, no knob: no error, and the chain holds.
///
/// Since 23de97f writes through a hard link land in their own file, but this still failed
/// about 1 run in 2 (6 seeds) until hostile29's fixes: a modify of a hard-linked file whose
/// chain broke on its second name (`change 50 ("modify" "s2") breaks the chain of l2`: a save
/// over one name of a file being written), and `link(s0, l2)` getting `ENOENT` while another
/// process saves over `s0`, which the kernel itself answers (the file it looked up has no
/// links left) and a plain disk gives too: 2 of 60 seeds of this workload on ext4. The
/// workload now takes that `ENOENT` as a plain disk's, and `ESTALE` (a call on a name saved
/// over twice within the kernel's one retry) as the known gap it is (docs/design.md): it
/// prints how many (`known: N ESTALE`), 2 runs in 50 of these tests saw one.
///
/// FAILED before (no knob; seed 3 of 10 here, and 1 or 2 with steps left out by H28_SKIP): e.g.
/// `change 245 ("modify" "s2") breaks the chain of s2 (its own before)`: 237 links `l3` to
/// `s2`, 238/239 exchange `s1` and `s2`, then 240 records a modify of `s2` by the process that
/// wrote through `l3` (whose file is now at `s1`): the write went to the file at `s2`
/// (see `an_open_through_a_second_name_racing_an_exchange_of_the_first_writes_its_own_file`).
/// Without the link step too (`H28_SKIP=6`, 1 run in 3 of seed 1): `change 65 ("modify"
/// "s0") breaks the chain of s0 (its own before)`: 64 and 65 are one process's read-write
/// pwrite then `truncate(2)` of `s0`, amid others' exchanges; 65's before is content no change
/// recorded (not explained yet).
/// Also (H28_SKIP=023): `change 46 ("delete" "l2") breaks the chain of l2`: 44 links `l2`
/// to `s0`, 45 records another process's modify of `s0` with `links []`, so `l2`'s chain
/// misses it.
#[test]
fn opens_and_truncates_of_names_that_stay_never_fail_and_keep_the_chain() {
    let seeds: u64 = std::env::var("H28_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    for seed in 1..=seeds {
        let mut ws = Workspace::new();
        ws.mount();
        shared_files(&ws);
        let out = names_stay(&ws, seed, 4, 60);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("seed {seed}"));
        assert_eq!(
            out.lines().next().unwrap_or(""),
            "OK",
            "seed {seed}: errors a plain disk does not give\n{}",
            whole(&changes)
        );
        ws.unmount();
    }
}

/// The same with `REWIND_TEST_SLOW_NAMED` and `REWIND_TEST_SLOW_CUT` at 30 ms: every open's
/// hold and every cut is a wider window for the others.
///
/// FAILED every run before hostile29's fixes: e.g. `change 133 ("modify" "s2") breaks the
/// chain of s2 (its own before)`, `change 50 ("rename" "s1") breaks the chain of s0
/// (exchange, moved away)`, `change 40 ("chmod" "s0") breaks the chain of s0`, and opens of a
/// name that never goes away failing with `ENOENT`. Same workload with wider windows.
#[test]
fn opens_and_truncates_of_names_that_stay_with_slow_holds_and_cuts() {
    names_stay_slow(&[
        ("REWIND_TEST_SLOW_NAMED", "30"),
        ("REWIND_TEST_SLOW_CUT", "30"),
    ]);
}

/// The same with only `REWIND_TEST_SLOW_NAMED`.
#[test]
fn opens_and_truncates_of_names_that_stay_with_slow_holds() {
    names_stay_slow(&[("REWIND_TEST_SLOW_NAMED", "30")]);
}

/// The same with only `REWIND_TEST_SLOW_CUT`.
#[test]
fn opens_and_truncates_of_names_that_stay_with_slow_cuts() {
    names_stay_slow(&[("REWIND_TEST_SLOW_CUT", "30")]);
}

fn names_stay_slow(env: &[(&str, &str)]) {
    for seed in 7..=8 {
        let mut ws = Workspace::new();
        ws.mount_with_env(&[] as &[&str], env);
        shared_files(&ws);
        let out = names_stay(&ws, seed, 4, 40);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("{env:?} seed {seed}"));
        assert_eq!(
            out.lines().next().unwrap_or(""),
            "OK",
            "errors a plain disk does not give\n{}",
            whole(&changes)
        );
        ws.unmount();
    }
}

/// [`NAMES_STAY`] SIGKILLed in the middle, then a remount: the chain holds and ends at the
/// tree (what the dead daemon had not recorded comes back as `external`).
///
/// FAILED 3 runs of 3 before hostile29's fixes: `seed 2, after the remount: change 161
/// ("rename" "s0") breaks the chain of s2 (exchange, moved away)`, a breach in what the live
/// daemon recorded before the kill: the workload's own failure
/// (`opens_and_truncates_of_names_that_stay_never_fail_and_keep_the_chain`).
#[test]
fn names_that_stay_sigkilled_mid_run_then_a_remount_keep_the_chain() {
    for seed in 1..=2u64 {
        let mut ws = Workspace::new();
        ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_NAMED", "5")]);
        shared_files(&ws);
        let pid = daemon_pid(&ws);
        std::thread::scope(|s| {
            let h = s.spawn(|| names_stay(&ws, 20 + seed, 3, 200));
            std::thread::sleep(Duration::from_millis(1200 + 300 * seed));
            ws.kill_daemon(pid);
            h.join().unwrap();
        });
        ws.mount();
        assert_chain_ends_in_the_present(&ws, &format!("seed {seed}, after the remount"));
        ws.unmount();
    }
}

/// A writer keeps `a` open, fsynced (its edit has its marker), and chmods it: the chmod cuts
/// the edit, and the daemon is SIGKILLed while `REWIND_TEST_SLOW_CUT_RECORDED` holds it right
/// after the cut's change is in the store. The next mount must not record the cut's modify a
/// second time.
///
/// FAILED before the cut wrote its new marker in its change's batch: the change was written, then
/// the marker of the episode going on from it; killed between the two, the old marker (the
/// edit's before, its writer) was still there, and recovery recorded the same modify again
/// (same pid, same before and after, `links []`), as
/// `names_that_stay_sigkilled_mid_run_then_a_remount_keep_the_chain` did once in CI.
#[test]
fn a_cut_sigkilled_right_after_its_record_is_not_recorded_again() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_CUT_RECORDED", "3000")]);
    let dir = ws.path();
    fs::write(dir.join("a"), "a\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let (mut child, _out) = holder(
        &dir,
        r#"
import os, sys
fd = os.open("a", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"more\n")
os.fsync(fd)
print("ready", flush=True)
try: os.chmod("a", 0o600)
except OSError: pass
sys.stdin.readline()
"#,
    );
    // The chmod's cut is recorded and held by the knob.
    std::thread::sleep(Duration::from_millis(800));
    ws.kill_daemon(daemon_pid(&ws));
    let _ = child.stdin.as_mut().unwrap().write_all(b"\n");
    let _ = child.wait();
    ws.mount();
    let changes = assert_chain_ends_in_the_present(&ws, "a cut SIGKILLed after its record");
    let modifies = log(&ws)
        .iter()
        .filter(|c| c["kind"] == "modify" && c["path"] == "a")
        .count();
    assert_eq!(modifies, 1, "{}", whole(&changes));
    ws.unmount();
}

/// An open of `l`, a second name of `a`, held in `hold_at` while `a` is exchanged with
/// `b`. The process opened `l`, which still names the same file (now also at `b`): on a plain
/// disk what it writes lands in that file, so `l` and `b` end with "more" and `a` (the other
/// file) is untouched. The daemon turns the inode into its first name, `a`, looks there,
/// finds the other file, and opens that.
///
/// Failed before 23de97f (an open now looks its inode up again when the name holds
/// another file): the write lands in the other file (`a` ends "...more", `l` unchanged); the history
/// records a modify of `a`. `Core::open` (src/fs/file.rs) opens the path the table of names
/// gives the inode (`reachable_path`: its first name, `a`), not the name the process opened;
/// `Recorder::hold_named` sees another file at `a` and holds that one instead, and
/// `begin_and_open` opens it. Data written into the wrong file, not only a wrong history.
#[test]
fn an_open_through_a_second_name_racing_an_exchange_of_the_first_writes_its_own_file() {
    let mut wrong = Vec::new();
    for flags in [
        "os.O_WRONLY | os.O_APPEND",
        "os.O_RDWR | os.O_APPEND",
        "truncate",
    ] {
        let mut ws = Workspace::new();
        ws.mount_with_env(&[] as &[&str], SLOW);
        let dir = ws.path();
        fs::write(dir.join("a"), "the linked file\n").unwrap();
        fs::hard_link(dir.join("a"), dir.join("l")).unwrap();
        fs::write(dir.join("b"), "the other file\n").unwrap();
        rw_ok(&ws, &["sync"]);
        let script = format!(
            r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
errors = []
def app():
    try:
        if "{flags}" == "truncate":
            os.truncate("l", 3)
        else:
            fd = os.open("l", {flags})
            os.write(fd, b"more\n")
            os.close(fd)
    except OSError as e:
        errors.append(str(e))
t = threading.Thread(target=app)
t.start()
time.sleep(0.15)
assert libc.renameat2(-100, b"a", -100, b"b", 2) == 0, ctypes.get_errno()
t.join()
print("ERR " + "; ".join(errors) if errors else "OK")
"#
        );
        let out = run(&dir, &script);
        let read = |n: &str| fs::read_to_string(dir.join(n)).unwrap();
        let (a, b, l) = (read("a"), read("b"), read("l"));
        rw_ok(&ws, &["sync"]);
        let changes = log(&ws);
        let want_l = if flags == "truncate" {
            "the"
        } else {
            "the linked file\nmore\n"
        };
        let got = (out.trim(), a.as_str(), b.as_str(), l.as_str());
        let want = ("OK", "the other file\n", want_l, want_l);
        if got != want {
            wrong.push(format!(
                "{flags}: (errors, a, b, l) {got:?}, a plain disk gives {want:?}\n{}",
                whole(&changes)
            ));
        }
        ws.unmount();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The same with a save-by-rename over the first name (`a.tmp` renamed over `a`) instead of
/// an exchange: the file `l` names is the old `a`, now only at `l`; a plain disk appends to
/// it and leaves the new `a` as saved.
///
/// Failed before 23de97f (an open now looks its inode up again when the name holds
/// another file): the write lands in the other file (`a` ends "...more", `l` unchanged); the history
/// records a modify of `a`. `Core::open` (src/fs/file.rs) opens the path the table of names
/// gives the inode (`reachable_path`: its first name, `a`), not the name the process opened;
/// `Recorder::hold_named` sees another file at `a` and holds that one instead, and
/// `begin_and_open` opens it. Data written into the wrong file, not only a wrong history.
#[test]
fn an_open_through_a_second_name_racing_a_rename_over_the_first_writes_its_own_file() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], SLOW);
    let dir = ws.path();
    fs::write(dir.join("a"), "the linked file\n").unwrap();
    fs::hard_link(dir.join("a"), dir.join("l")).unwrap();
    fs::write(dir.join("a.tmp"), "saved\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let out = run(
        &dir,
        r#"
import os, threading, time
errors = []
def app():
    try:
        fd = os.open("l", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"more\n")
        os.close(fd)
    except OSError as e:
        errors.append(str(e))
t = threading.Thread(target=app)
t.start()
time.sleep(0.15)
os.rename("a.tmp", "a")
t.join()
print("ERR " + "; ".join(errors) if errors else "OK")
"#,
    );
    let read = |n: &str| fs::read_to_string(dir.join(n)).unwrap();
    let (a, l) = (read("a"), read("l"));
    rw_ok(&ws, &["sync"]);
    let changes = log(&ws);
    assert_eq!(
        (out.trim(), a.as_str(), l.as_str()),
        ("OK", "saved\n", "the linked file\nmore\n"),
        "(errors, a, l)\n{}",
        whole(&changes)
    );
    assert_chain_ends_in_the_present(&ws, "rename over the first name");
    ws.unmount();
}

/// One thread chmods `s` over and over while another saves it by rename (a new file renamed
/// over `s`), the name always there: on a plain disk no chmod fails. Found by the
/// names-that-stay workload with only these two steps (`H28_SKIP=0123468`, seed 2):
/// `w3 step 4: [Errno 116] Stale file handle: 's2'`.
///
/// FAILS: `ERR 479 ['Stale file handle']` of 4000 chmods. The kernel looked `s` up and sent
/// SETATTR for that inode; a rename put another file at `s` meanwhile, the daemon finds the
/// inode without a name and answers `ESTALE`; the kernel retries the lookup once only
/// (`retry_estale`), so under repeated saves the error reaches the process. On disk the chmod
/// applies to the file it looked up. Applying it to the file the save put at the name made
/// this pass (19abca1) but was taken back: see hostile30's `O_PATH` tests.
#[test]
#[ignore = "known (design.md): a call on a name saved over meanwhile can get ESTALE (479 of 4000 chmods)"]
fn chmods_racing_saves_by_rename_never_see_a_stale_handle() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join("s"), "start\n").unwrap();
    let out = run(
        &dir,
        r#"
import os, threading
errors = []
stop = False
def saver(i):
    n = 0
    while not stop:
        t = ".s.%d.%d" % (i, n)
        with open(t, "w") as h: h.write("v%d\n" % n)
        os.rename(t, "s")
        n += 1
def chmodder():
    for n in range(2000):
        try:
            os.chmod("s", [0o600, 0o644][n % 2])
        except OSError as e:
            errors.append(e.strerror)
ss = [threading.Thread(target=saver, args=(i,)) for i in range(2)]
for s in ss: s.start()
cs = [threading.Thread(target=chmodder) for i in range(2)]
for c in cs: c.start()
for c in cs: c.join()
stop = True
for s in ss: s.join()
print("ERR %d %s" % (len(errors), sorted(set(errors))) if errors else "OK")
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(out.trim(), "OK", "errors a plain disk does not give");
    assert_chain_ends_in_the_present(&ws, "chmods racing saves by rename");
    ws.unmount();
}

/// Two processes save `s` by rename over and over while a third chmods it (errors ignored
/// here: see `chmods_racing_saves_by_rename_never_see_a_stale_handle`); then the chain must
/// hold and end at the tree.
#[test]
fn saves_by_rename_racing_chmods_keep_the_chain() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join("s"), "start\n").unwrap();
    rw_ok(&ws, &["sync"]);
    run(
        &dir,
        r#"
import os, time
def saver(i):
    for n in range(150):
        t = ".s.%d.%d" % (i, n)
        with open(t, "w") as h: h.write("w%d v%d\n" % (i, n))
        os.rename(t, "s")
def chmodder():
    for n in range(300):
        try: os.chmod("s", [0o600, 0o644][n % 2])
        except OSError: pass
pids = []
for f in [lambda: saver(0), lambda: saver(1), chmodder]:
    pid = os.fork()
    if pid == 0:
        try: f()
        finally: os._exit(0)
    pids.append(pid)
for p in pids: os.waitpid(p, 0)
"#,
    );
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "saves by rename racing chmods");
    ws.unmount();
}
