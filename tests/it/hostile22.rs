//! The twenty-second hostile pass (round 15), on be90b0f and 58050c6: an unmount, an `fsync`
//! and every read of the history wait for what the daemon's own threads are recording (the
//! writer thread's closed edit, the pending thread's held-back create: `await_ends`, the
//! `ending` lock taken exclusively). Each attack holds a thread in the middle of its record
//! (`REWIND_TEST_SLOW_END`, `REWIND_TEST_SLOW_PENDING`) and then stops or reads: an fsync of
//! the file or of its folder followed by SIGKILL, SIGTERM and SIGINT, a forced (lazy) unmount
//! with the file still open and written, readers in several processes, a rename of the folder
//! while both threads hold one of its files, a gc racing an unmount. What an fsync returned for
//! must be in the history; nothing recorded twice, as `external` though the mount saw it, or
//! out of order; no hang.
//!
//! Two tests fail at 58050c6, both an fsync of a *folder* (`fsyncdir` -> `Recorder::sync`)
//! that returns before a new file's create, closed before it, is held back or recorded:
//! `a_folder_fsync_while_a_release_ends_a_new_file_records_its_create` (`sync` looks at the
//! tables before it waits for the end in progress) and
//! `a_folder_fsync_right_after_a_close_in_it_waits_for_the_release` (`sync` waits for no
//! RELEASE queued before it). After SIGKILL the create is `external`.
//! Both pass since 686bc74 (`fsyncdir` waits its turn; `sync` waits for releases and ends
//! before it looks). `readers_of_at_now_in_several_threads_during_a_burst_see_each_edit_just_closed`
//! fails now and then (a `.rewind/at/now/f.txt` read right after its own thread closed edit 6
//! shows edit 5: a known gap, see its comment) and is ignored. Every other test holds.

use std::fs;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Workspace, daemon_pid, python, python_command, rw, sync, wait_for};
use crate::hostile18::{cat_at, lines, of};
use crate::record::log;

/// Python helpers: `edit(path, text)` rewrites a file in place (an open for writing, no
/// O_TRUNC: with `REWIND_TEST_BURST=1` its end is a closed edit, for the writer thread);
/// `fsync_of(path)` opens `path` read-only (a folder too) and fsyncs it, as `sync FILE` does,
/// and returns how long the fsync took.
const PY: &str = r#"
import json, os, signal, subprocess, sys, threading, time
def edit(p, text):
    with open(p, "r+") as f:
        f.write(text); f.truncate()
def fsync_of(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        t = time.monotonic()
        os.fsync(fd)
        return time.monotonic() - t
    finally:
        os.close(fd)
"#;

/// The tester (session `agentT`, agent `tester`) edits `a.txt` to "two", then waits `secs`.
fn tester_edits_a(ws: &Workspace, secs: &str) {
    let status = python_command(
        &ws.path(),
        &format!("{PY}\nedit('a.txt', 'two\\n')\ntime.sleep({secs})"),
    )
    .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
    .status()
    .unwrap();
    assert!(status.success());
}

/// `fusermount3 -u` of the workspace, as a user would: it returns once the kernel has let go,
/// not when the daemon is done.
fn fusermount_u(ws: &Workspace) {
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// `a.txt` ("before"), mounted with `env` and every edit's end closed; its first edit since
/// the mount (whose marker is written at once) is made and recorded, so that the next one is
/// an edit only the daemon knows of until it is recorded. The number of changes so far.
fn mounted_after_a_first_edit(ws: &mut Workspace, env: &[(&str, &str)]) -> usize {
    fs::write(ws.path().join("a.txt"), "before\n").unwrap();
    let mut all = vec![("REWIND_TEST_BURST", "1")];
    all.extend_from_slice(env);
    ws.mount_with_env(&[] as &[&str], &all);
    fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    sync(ws);
    log(ws).len()
}

/// Run `script` (with [`PY`]) as session `agentT` of agent `tester`, SIGKILL the daemon right
/// after it, wait for it to be gone, and remount without knobs. The script's stdout.
fn script_then_sigkill(ws: &mut Workspace, script: &str) -> String {
    let pid = daemon_pid(ws);
    let script = format!("{PY}\n{script}\nos.kill({pid}, signal.SIGKILL)\n");
    let out = python_command(&ws.path(), &script)
        .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the script failed:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(wait_for(10, gone), "the daemon did not die");
    ws.mount();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Mounted after a first edit, with the end of the next held 1.5 s (`REWIND_TEST_SLOW_END`),
/// `script` run as the tester, then SIGKILL: the fsync it times and prints waited for the held
/// end (over 1 s; else the test would pass by luck of timing), and the one change after is
/// `kind` of `path` by the tester, holding "two".
fn a_held_end_fsynced_then_sigkill(script: &str, path: &str, kind: &str) {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    let took: f64 = script_then_sigkill(&mut ws, script).trim().parse().unwrap();
    assert!(took > 1.0, "the fsync took {took} s");
    one_change_by_tester(&ws, first, path, kind, "two\n");
    ws.unmount();
}

/// The changes after the first `first`: exactly one, of `path`, of `kind`, by the tester (not
/// `external`), after which `path` held `content`.
#[track_caller]
fn one_change_by_tester(ws: &Workspace, first: usize, path: &str, kind: &str, content: &str) {
    let all = log(ws);
    let new = &all[first..];
    assert_eq!(new.len(), 1, "one change expected:\n{}", lines(new));
    assert_eq!(new[0]["path"], path, "{}", lines(new));
    assert_eq!(new[0]["kind"], kind, "{}", lines(new));
    assert_eq!(new[0]["agent"], "tester", "{}", lines(new));
    assert_eq!(cat_at(ws, path, new[0]["id"].as_u64().unwrap()), content);
}

/// `sync FILE` (an fsync of a read-only fd) of a file whose edit the writer thread has taken
/// and is still recording (`REWIND_TEST_SLOW_END`: from 2 ms after the close to 1.5 s after),
/// then SIGKILL. SPEC: "`fsync` of a file in the workspace also makes its history durable".
/// `fsync` goes through `in_order` (`finish_closed`: the table is empty, the writer thread
/// took the edit) and `sync_file`, which takes `ending` shared only, but also the file's
/// stripe, which the writer thread holds while it records the file: the fsync waits for it.
#[test]
fn a_file_fsync_while_the_writer_thread_records_its_edit_makes_it_durable() {
    a_held_end_fsynced_then_sigkill(
        "edit('a.txt', 'two\\n')\ntime.sleep(0.1)\nprint(fsync_of('a.txt'))",
        "a.txt",
        "modify",
    );
}

/// The same with the file's folder fsynced (`sync -f`-like: an fsync of the folder's fd):
/// `Recorder::sync` waits for the writer thread (`await_ends`).
#[test]
fn a_folder_fsync_while_the_writer_thread_records_an_edit_makes_it_durable() {
    a_held_end_fsynced_then_sigkill(
        "edit('a.txt', 'two\\n')\ntime.sleep(0.1)\nprint(fsync_of('.'))",
        "a.txt",
        "modify",
    );
}

/// A new file's create taken by the pending thread (held back half a second, taken within a
/// quarter of a second more, held there 2 s by `REWIND_TEST_SLOW_PENDING`), the file fsynced
/// through a read-only fd meanwhile, then SIGKILL: its create is the tester's.
#[test]
fn a_file_fsync_while_the_pending_thread_records_its_create_makes_it_durable() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_PENDING", "2000")]);
    script_then_sigkill(
        &mut ws,
        "open('b.txt', 'w').write('two\\n')\ntime.sleep(1.0)\nfsync_of('b.txt')",
    );
    one_change_by_tester(&ws, first, "b.txt", "create", "two\n");
    ws.unmount();
}

/// SIGTERM or SIGINT to the daemon while the writer thread records an edit: the signal
/// unmounts, the daemon waits for the thread, exits, and the next mount has the edit once,
/// as its writer's.
fn a_signal_while_the_writer_thread_records(sig: i32) {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    let pid = daemon_pid(&ws);
    tester_edits_a(&ws, "0.1");
    // SAFETY: a signal to the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(
        wait_for(20, gone),
        "the daemon did not exit after signal {sig}"
    );
    ws.mount();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

#[test]
fn a_sigterm_while_the_writer_thread_records_an_edit_keeps_it() {
    a_signal_while_the_writer_thread_records(libc::SIGTERM);
}

#[test]
fn a_sigint_while_the_writer_thread_records_an_edit_keeps_it() {
    a_signal_while_the_writer_thread_records(libc::SIGINT);
}

/// `rewind unmount --force` (a lazy unmount) while a process holds `a.txt` open and goes on
/// writing it after the mount is detached; it closes it, then the writer thread holds the edit
/// (`REWIND_TEST_SLOW_END`) when the connection ends. The daemon records it before it exits:
/// the next mount has it once, the tester's, with what was written last.
#[test]
fn a_forced_unmount_with_a_file_open_and_written_keeps_its_edit() {
    detached_with_a_file_open_and_written(None);
}

/// The same detached by SIGTERM (the daemon's signal thread finds the mount busy and detaches
/// it lazily).
#[test]
fn a_sigterm_with_a_file_open_and_written_keeps_its_edit() {
    detached_with_a_file_open_and_written(Some(libc::SIGTERM));
}

fn detached_with_a_file_open_and_written(sig: Option<i32>) {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    let pid = daemon_pid(&ws);
    let mut child = python_command(
        &ws.path(),
        &format!(
            "{PY}\nf = open('a.txt', 'r+')\nf.write('tw'); f.flush()\nprint('open', flush=True)\n\
             sys.stdin.readline()\nf.write('o\\n'); f.truncate(); f.close()\n"
        ),
    )
    .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "open\n");
    match sig {
        None => {
            let forced = rw(&ws, &["unmount", "--force", ws.path().to_str().unwrap()]);
            assert!(forced.status.success(), "{forced:?}");
        }
        Some(sig) => {
            // SAFETY: a signal to the daemon this test started.
            assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
            assert!(
                wait_for(10, || !crate::common::is_mounted(&ws.path())),
                "not detached"
            );
        }
    }
    // Detached; the daemon serves the open file until it is closed.
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(
        wait_for(20, gone),
        "the daemon did not exit after the last close"
    );
    ws.mount();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// Four threads, each editing a file of its own and reading the history right after each
/// close, alternately through `rewind cat` and `rewind log` (`settle_for_reading`), while
/// every edit is closed and the writer thread holds each batch 30 ms (`REWIND_TEST_SLOW_END`):
/// each read sees the edit just closed, nothing hangs (each read within 20 s), and the history
/// has every edit once, in order.
#[test]
fn readers_in_several_threads_during_a_burst_see_each_edit_just_closed() {
    readers_during_a_burst(false);
}

/// `readers_in_several_threads_during_a_burst_see_each_edit_just_closed`, every third read
/// through `.rewind/at/now/` (`settle_for_views`). It fails now and then (5 of about 115 runs,
/// most with three copies at once): a read of `now/f1.txt` right after its thread's close
/// shows the edit before. The kernel lets a path walk that finds no `now` in its cache wait for
/// a LOOKUP of `now` another thread sent before this thread's close (`d_alloc_parallel`), and
/// takes that answer; the daemon resolved `now` then. docs/design.md, Known gaps.
#[test]
#[ignore = "known gap: a walk through .rewind/at/now may share another thread's LOOKUP of now sent before its close"]
fn readers_of_at_now_in_several_threads_during_a_burst_see_each_edit_just_closed() {
    readers_during_a_burst(true);
}

fn readers_during_a_burst(through_now: bool) {
    let mut ws = Workspace::new();
    for i in 0..4 {
        fs::write(ws.path().join(format!("f{i}.txt")), "0\n").unwrap();
    }
    ws.mount_with_env(
        &[] as &[&str],
        &[("REWIND_TEST_BURST", "1"), ("REWIND_TEST_SLOW_END", "30")],
    );
    for i in 0..4 {
        fs::write(ws.path().join(format!("f{i}.txt")), "1\n").unwrap();
    }
    sync(&ws);
    let first = log(&ws).len();
    let rewind = env!("CARGO_BIN_EXE_rewind");
    let through_now = if through_now { "True" } else { "False" };
    let script = format!(
        r#"{PY}
rewind = {rewind:?}
env = dict(os.environ)
bad = []
def worker(i):
    p = f"f{{i}}.txt"
    for r in range(2, 14):
        edit(p, f"{{r}}\n")
        how = r % 3 if {through_now} else 1 + r % 2
        t = time.monotonic()
        def run(*args):
            out = subprocess.run([rewind, *args], capture_output=True, text=True, timeout=20)
            if out.returncode != 0:
                raise Exception(f"rewind {{args}}: {{out.returncode}} {{out.stderr!r}} {{out.stdout!r}}")
            return out.stdout
        try:
            if how == 0:
                got = open(f".rewind/at/now/{{p}}").read()
            elif how == 1:
                got = run("cat", p)
            else:
                out = run("log", p, "--json")
                last = json.loads(out.splitlines()[-1])
                got = run("cat", p, "--at", str(last["id"]))
        except Exception as e:
            got = repr(e)
        if got != f"{{r}}\n":
            bad.append((p, r, how, got))
        if time.monotonic() - t > 20:
            bad.append((p, r, how, "slow"))
threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(bad))
"#
    );
    let out = python_command(&ws.path(), &script)
        .env("XDG_DATA_HOME", ws.path().parent().unwrap().join("data"))
        .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad: Value = serde_json::from_slice(&out.stdout).unwrap();
    if bad != serde_json::json!([]) {
        // What the daemon said of the RELEASE order (`RUST_LOG=rewind=debug` for its gaps).
        let said = fs::read_to_string(ws.store().join("daemon.log")).unwrap_or_default();
        for l in said.lines() {
            if l.contains("never read") || l.contains("going on without") {
                eprintln!("daemon: {l}");
            }
        }
    }
    assert_eq!(
        bad,
        serde_json::json!([]),
        "reads that missed the edit just closed"
    );
    let all = log(&ws);
    let new = &all[first..];
    let ids: Vec<u64> = all.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{}", lines(&all));
    for i in 0..4 {
        let p = format!("f{i}.txt");
        let got: Vec<String> = of(new, &p, "modify")
            .iter()
            .map(|c| cat_at(&ws, &p, c["id"].as_u64().unwrap()))
            .collect();
        let want: Vec<String> = (2..14).map(|r| format!("{r}\n")).collect();
        assert_eq!(got, want, "{p}:\n{}", lines(new));
    }
    assert_eq!(new.len(), 4 * 12, "{}", lines(new));
    ws.unmount();
}

/// A rename of the folder while the pending thread records a new file in it (held 1.5 s) and
/// the writer thread an edit of another (held 1.5 s): the rename waits for both
/// (`pause_endings`), the create and the modify are recorded under the old path before the
/// rename, nothing hangs, a remount records nothing more.
#[test]
fn a_folder_rename_while_both_threads_record_in_it_comes_after_both() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("d")).unwrap();
    fs::write(ws.path().join("d/a.txt"), "before\n").unwrap();
    ws.mount_with_env(
        &[] as &[&str],
        &[
            ("REWIND_TEST_BURST", "1"),
            ("REWIND_TEST_SLOW_END", "1500"),
            ("REWIND_TEST_SLOW_PENDING", "1500"),
        ],
    );
    fs::write(ws.path().join("d/a.txt"), "one\n").unwrap();
    sync(&ws);
    let first = log(&ws).len();
    let took = python(
        &ws.path(),
        &format!(
            "{PY}\nopen('d/new.txt', 'w').write('new\\n')\ntime.sleep(0.8)\n\
             edit('d/a.txt', 'two\\n')\ntime.sleep(0.1)\n\
             t = time.monotonic()\nos.rename('d', 'e')\nprint(time.monotonic() - t)"
        ),
    );
    let took: f64 = took.trim().parse().unwrap();
    let all = log(&ws);
    let new = &all[first..];
    let kinds: Vec<(String, String)> = new
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("create", "d/new.txt"),
        ("modify", "d/a.txt"),
        ("rename", "e"),
    ]
    .iter()
    .map(|(k, p)| (k.to_string(), p.to_string()))
    .collect();
    assert_eq!(kinds, want, "rename took {took} s:\n{}", lines(new));
    let id = |k: usize| new[k]["id"].as_u64().unwrap();
    assert_eq!(cat_at(&ws, "d/new.txt", id(0)), "new\n");
    assert_eq!(cat_at(&ws, "d/a.txt", id(1)), "two\n");
    assert_eq!(cat_at(&ws, "e/a.txt", id(2)), "two\n");
    ws.unmount();
    ws.mount();
    assert_eq!(
        log(&ws).len(),
        all.len(),
        "the remount recorded more:\n{}",
        lines(&log(&ws)[first..])
    );
    ws.unmount();
}

/// `rewind gc --max-size 1` (keep as little as it may) started beside `rewind unmount` while
/// the writer thread holds an edit: both return (within 30 s), and after the remount the
/// file's newest change is that edit, the tester's, with its content; nothing is `external`.
#[test]
fn a_gc_racing_an_unmount_while_the_writer_thread_records_loses_nothing() {
    let mut ws = Workspace::new();
    mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    for i in 0..5 {
        fs::write(ws.path().join("a.txt"), format!("old {i}\n")).unwrap();
    }
    sync(&ws);
    tester_edits_a(&ws, "0.05");
    let started = Instant::now();
    let gc = ws
        .command(&["gc", "--max-size", "1"])
        .current_dir(ws.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let unmount = ws.rewind(&["unmount", ws.path().to_str().unwrap()]);
    let gc = gc.wait_with_output().unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
    eprintln!(
        "after {took:?}: gc: {} {} {}\nunmount: {} {}",
        gc.status,
        String::from_utf8_lossy(&gc.stdout),
        String::from_utf8_lossy(&gc.stderr),
        unmount.status,
        String::from_utf8_lossy(&unmount.stderr)
    );
    if crate::common::is_mounted(&ws.path()) {
        // The unmount came while gc's control request was in (busy): do it again.
        ws.unmount();
    }
    ws.mount();
    let all = log(&ws);
    eprintln!("{}", lines(&all));
    assert!(
        all.iter().all(|c| c["agent"] != "external"),
        "{}",
        lines(&all)
    );
    let last = all.iter().rev().find(|c| c["path"] == "a.txt").unwrap();
    assert_eq!(last["kind"], "modify", "{}", lines(&all));
    assert_eq!(last["agent"], "tester", "{}", lines(&all));
    assert_eq!(cat_at(&ws, "a.txt", last["id"].as_u64().unwrap()), "two\n");
    ws.unmount();
}

/// `fusermount3 -u` (which returns once the kernel has let go, not when the daemon is done)
/// while the writer thread records an edit, and `rewind mount` at once: the old daemon is
/// still waiting for its writer thread. The new mount waits for it to let go of the store
/// (it was refused with RocksDB's "While lock file: …/LOCK: Resource temporarily unavailable"
/// before); it must never scan the workspace before the old daemon has recorded the edit
/// (which would record it as `external`, then the old daemon's record a second time, or be
/// lost).
#[test]
fn a_remount_right_after_fusermount_u_while_the_writer_thread_records_keeps_the_edit_once() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    let pid = daemon_pid(&ws);
    tester_edits_a(&ws, "0.1");
    fusermount_u(&ws);
    // SAFETY: kill with signal 0 only asks whether the process exists.
    let old_alive = unsafe { libc::kill(pid, 0) == 0 };
    let mut cmd = ws.command(&["mount"]);
    cmd.arg(ws.path()).arg("--store").arg(ws.store());
    let again = cmd.output().unwrap();
    eprintln!(
        "old daemon alive at the remount: {old_alive}; mount: {} {}",
        again.status,
        String::from_utf8_lossy(&again.stderr)
    );
    let gone = || {
        // SAFETY: as above.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(wait_for(20, gone), "the old daemon did not exit");
    assert!(
        again.status.success(),
        "the mount did not wait for the old daemon: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    ws.mark_mounted();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
    ws.mount();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// The store's disk (a 64 MiB ext4) fills up while the writer thread holds an edit that does
/// not fit (`REWIND_TEST_SLOW_END`), and the workspace is unmounted meanwhile: the unmount
/// returns (no hang), the daemon exits; once the filler is gone, the next mount has the edit
/// once, with its content (never lost, never twice).
#[test]
fn a_full_store_while_the_writer_thread_holds_an_edit_and_an_unmount_loses_nothing() {
    use crate::full_disk::{reserve_of, run_within, small_ext4, write_noise};
    let small = small_ext4();
    let reserve = reserve_of(small.size());
    let store = small.path().join("store");
    let mut ws = Workspace::new();
    fs::write(ws.path().join("a.txt"), "before\n").unwrap();
    let mount = |ws: &mut Workspace, env: &[(&str, &str)]| {
        let mut cmd = ws.command(&["mount"]);
        cmd.arg(ws.path())
            .arg("--store")
            .arg(&store)
            .envs(env.iter().copied());
        let out = run_within(cmd, 60, "mount");
        assert!(out.status.success(), "{out:?}");
        ws.mark_mounted();
    };
    mount(
        &mut ws,
        &[("REWIND_TEST_BURST", "1"), ("REWIND_TEST_SLOW_END", "1500")],
    );
    fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    sync(&ws);
    let first = log(&ws).len();
    let filler = small.path().join("filler");
    write_noise(&filler, 30 << 20);
    let big = (small.available() - reserve / 2) as usize;
    let noise = crate::common::noise(big, 7);
    // Written in place (an open for writing without O_TRUNC: its end is a closed edit).
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(ws.path().join("a.txt"))
            .unwrap();
        std::io::Write::write_all(&mut f, &noise).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let pid = daemon_pid(&ws);
    let started = Instant::now();
    let mut cmd = ws.command(&["unmount", ws.path().to_str().unwrap()]);
    cmd.current_dir("/");
    let unmounted = run_within(cmd, 60, "unmount");
    eprintln!(
        "unmount after {:?}: {} {}",
        started.elapsed(),
        unmounted.status,
        String::from_utf8_lossy(&unmounted.stderr)
    );
    assert!(unmounted.status.success());
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(wait_for(30, gone), "the daemon did not exit");
    eprintln!(
        "daemon.log:\n{}",
        fs::read_to_string(store.join("daemon.log")).unwrap_or_default()
    );
    fs::remove_file(&filler).unwrap();
    mount(&mut ws, &[]);
    let all = log(&ws);
    let new = &all[first..];
    eprintln!("{}", lines(new));
    let of_a = of(new, "a.txt", "modify");
    assert_eq!(of_a.len(), 1, "{}", lines(new));
    let id = of_a[0]["id"].as_u64().unwrap().to_string();
    let got = crate::common::ok_bytes(&rw(&ws, &["cat", "a.txt", "--at", &id]));
    assert!(
        got == noise,
        "a.txt after #{id}: {} bytes, not what was written",
        got.len()
    );
    ws.unmount();
}

/// Everything at once for six seconds, with every edit closed and both threads slowed
/// (`REWIND_TEST_SLOW_END=3`, `REWIND_TEST_SLOW_PENDING=30`): edits, creates and deletes in
/// three folders, one folder renamed back and forth (`pause_endings`), `.gitignore` naming a
/// folder and not by turns while files are made in it (`quiet_burst` takes `quieting`
/// exclusively under `ending`), `rewind log`, `.rewind/at/now/` reads, and fsyncs of files and
/// folders, each in a thread of its own. No call hangs (each within 30 s, the whole within
/// 60 s); then every file's newest change names what it holds, ids are in order, and an unmount
/// and a remount record nothing more (nothing was left for the scan).
#[test]
fn everything_at_once_with_both_threads_slowed_neither_hangs_nor_loses_anything() {
    let mut ws = Workspace::new();
    for d in 0..3 {
        fs::create_dir(ws.path().join(format!("d{d}"))).unwrap();
        for f in 0..4 {
            fs::write(ws.path().join(format!("d{d}/f{f}.txt")), "0\n").unwrap();
        }
    }
    fs::create_dir(ws.path().join("ignored")).unwrap();
    ws.mount_with_env(
        &[] as &[&str],
        &[
            ("REWIND_TEST_BURST", "1"),
            ("REWIND_TEST_SLOW_END", "3"),
            ("REWIND_TEST_SLOW_PENDING", "30"),
        ],
    );
    let rewind = env!("CARGO_BIN_EXE_rewind");
    let script = format!(
        r#"{PY}
rewind = {rewind:?}
stop = time.monotonic() + 6
errors = []
slow = []
counts = {{}}
def timed(name, f):
    t = time.monotonic()
    f()
    took = time.monotonic() - t
    if took > 30:
        slow.append((name, took))
    counts[name] = counts.get(name, 0) + 1
def loop(name, body):
    def run():
        i = 0
        while time.monotonic() < stop:
            try:
                timed(name, lambda: body(i))
            except FileNotFoundError:
                pass
            except subprocess.TimeoutExpired as e:
                slow.append((name, str(e)))
            except Exception as e:
                errors.append((name, repr(e)))
            i += 1
    return threading.Thread(target=run)
def edits(i):
    d = "d2x" if os.path.exists("d2x") else "d2"
    for p in ["d0", "d1", d]:
        edit(f"{{p}}/f{{i % 4}}.txt", f"{{i}}\n")
def creates(i):
    p = f"d{{i % 2}}/n{{i % 5}}.txt"
    if i % 3 == 2 and os.path.exists(p):
        os.unlink(p)
    else:
        with open(p, "w") as f:
            f.write(f"new {{i}}\n")
def renames(i):
    if os.path.exists("d2"):
        os.rename("d2", "d2x")
    else:
        os.rename("d2x", "d2")
    time.sleep(0.05)
def rules(i):
    with open(".gitignore", "w") as f:
        f.write("ignored/\n" if i % 2 == 0 else "other/\n")
    with open(f"ignored/i{{i % 3}}.txt", "w") as f:
        f.write(f"{{i}}\n")
    time.sleep(0.02)
def logs(i):
    subprocess.run([rewind, "log", "--json"], capture_output=True, timeout=30, check=True)
def views(i):
    open(f".rewind/at/now/d0/f{{i % 4}}.txt").read()
def fsyncs(i):
    fsync_of(".")
    fsync_of(f"d1/f{{i % 4}}.txt")
    fsync_of("d0")
threads = [loop(n, b) for n, b in [("edits", edits), ("creates", creates), ("renames", renames),
    ("rules", rules), ("logs", logs), ("views", views), ("fsyncs", fsyncs)]]
for t in threads: t.start()
for t in threads: t.join(60)
hung = [t.name for t in threads if t.is_alive()]
print(json.dumps({{"hung": hung, "slow": slow, "errors": errors, "counts": counts}}), flush=True)
os._exit(0)
"#
    );
    let mut cmd = python_command(&ws.path(), &script);
    cmd.env("XDG_DATA_HOME", ws.path().parent().unwrap().join("data"))
        .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")]);
    let out = crate::full_disk::run_within(cmd, 120, "the script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{got}");
    assert_eq!(got["hung"], serde_json::json!([]), "{got}");
    assert_eq!(got["slow"], serde_json::json!([]), "{got}");
    assert_eq!(got["errors"], serde_json::json!([]), "{got}");
    fs::remove_dir_all(ws.path().join("ignored")).unwrap();
    sync(&ws);
    crate::hostile17::every_file_has_its_newest_change(&ws, &[]);
    let all = log(&ws);
    let ids: Vec<u64> = all.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids out of order");
    let started = Instant::now();
    ws.unmount();
    eprintln!(
        "unmount took {:?}; {} changes",
        started.elapsed(),
        all.len()
    );
    ws.mount();
    let again = log(&ws);
    assert_eq!(
        again.len(),
        all.len(),
        "the remount recorded more:\n{}",
        lines(&again[all.len().min(again.len())..])
    );
    ws.unmount();
}

/// SIGKILL while the pending thread holds a new file's create whose marker says who made it
/// (the file was fsynced before its close; `REWIND_TEST_SLOW_PENDING` holds the create 2 s
/// after the thread took it): the next mount records the create once, as the tester's, with
/// its content.
#[test]
fn a_sigkill_while_the_pending_thread_records_a_marked_create_keeps_who_made_it() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_PENDING", "2000")]);
    script_then_sigkill(
        &mut ws,
        "f = open('b.txt', 'w')\nf.write('two\\n'); f.flush(); os.fsync(f.fileno()); f.close()\n\
         time.sleep(1.0)",
    );
    one_change_by_tester(&ws, first, "b.txt", "create", "two\n");
    ws.unmount();
    ws.mount();
    one_change_by_tester(&ws, first, "b.txt", "create", "two\n");
    ws.unmount();
}

/// SIGKILL while the writer thread holds an edit whose marker is written (the file was open
/// for half a second, past `MARK_AFTER` and a round of the pending thread, before it was
/// written and closed; `REWIND_TEST_SLOW_END` holds it 2 s): the next mount records it once,
/// as the tester's, with its content.
#[test]
fn a_sigkill_while_the_writer_thread_records_a_marked_edit_keeps_who_made_it() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "2000")]);
    script_then_sigkill(
        &mut ws,
        "f = open('a.txt', 'r+')\ntime.sleep(0.6)\nf.write('two\\n'); f.truncate(); f.close()\n\
         time.sleep(0.1)",
    );
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
    ws.mount();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// A new file written and closed, then its folder (or the file) fsynced at once, then SIGKILL.
/// The kernel queues the file's RELEASE before close() returns; `REWIND_TEST_SLOW_RELEASE`
/// holds that RELEASE 1 s in the daemon (another FUSE thread may take it late, as on a busy
/// machine). A file's fsync waits its turn (`in_order`: the RELEASE sent before it goes
/// first); a folder's (`fsyncdir`, `Recorder::sync`) waits for no RELEASE (`sync` has no
/// `await_releases`, `fsyncdir` no `in_order`), so the daemon dies with the create not yet
/// held back, and the next mount records it as `external`.
fn fsync_right_after_a_close_then_sigkill(target: &str) -> f64 {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_RELEASE", "1000")]);
    let took = script_then_sigkill(
        &mut ws,
        &format!("open('b.txt', 'w').write('two\\n')\nprint(fsync_of({target:?}))"),
    );
    let took: f64 = took.trim().parse().unwrap();
    eprintln!("fsync of {target} took {took} s");
    one_change_by_tester(&ws, first, "b.txt", "create", "two\n");
    ws.unmount();
    took
}

#[test]
fn a_file_fsync_right_after_its_close_waits_for_its_release() {
    fsync_right_after_a_close_then_sigkill("b.txt");
}

#[test]
fn a_folder_fsync_right_after_a_close_in_it_waits_for_the_release() {
    fsync_right_after_a_close_then_sigkill(".");
}

/// `rewind unmount` right after eight new files are closed at once, each RELEASE held 1 s in
/// the daemon (`REWIND_TEST_SLOW_RELEASE`): the daemon has four FUSE threads here (twice the
/// cores), so four RELEASEs wait in the kernel's queue, unread, when the unmount comes. The
/// files are closed, so the unmount is not busy; every create must still be recorded once, as
/// the tester's (the daemon saw each CREATE).
#[test]
fn an_unmount_right_after_closes_whose_releases_are_still_queued_keeps_every_create() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_RELEASE", "1000")]);
    python_command(
        &ws.path(),
        &format!(
            "{PY}\ndef make(i):\n    open(f'n{{i}}.txt', 'w').write(f'{{i}}\\n')\n\
             ts = [threading.Thread(target=make, args=(i,)) for i in range(8)]\n\
             for t in ts: t.start()\nfor t in ts: t.join()\n"
        ),
    )
    .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
    .status()
    .unwrap();
    let unmounted = ws.rewind(&["unmount", ws.path().to_str().unwrap()]);
    eprintln!(
        "unmount: {} {}",
        unmounted.status,
        String::from_utf8_lossy(&unmounted.stderr)
    );
    if crate::common::is_mounted(&ws.path()) {
        ws.unmount();
    }
    ws.mount();
    let all = log(&ws);
    let new = &all[first..];
    let mut wrong = Vec::new();
    for i in 0..8 {
        let p = format!("n{i}.txt");
        let c = of(new, &p, "create");
        if c.len() != 1 || c[0]["agent"] != "tester" {
            wrong.push(p);
        }
    }
    assert!(
        wrong.is_empty(),
        "not once as the tester's: {wrong:?}\n{}",
        lines(new)
    );
    assert_eq!(new.len(), 8, "{}", lines(new));
    ws.unmount();
}

/// [`a_folder_fsync_right_after_a_close_in_it_waits_for_the_release`] without a knob: ten
/// rounds of a new file written, closed, its folder fsynced at once, SIGKILL, remount. How
/// often the RELEASE comes after the fsync on its own, on this machine.
#[test]
fn a_folder_fsync_right_after_a_close_without_a_knob_ten_rounds() {
    let mut ws = Workspace::new();
    let mut first = mounted_after_a_first_edit(&mut ws, &[]);
    let mut external = Vec::new();
    for round in 0..10 {
        let p = format!("b{round}.txt");
        script_then_sigkill(
            &mut ws,
            &format!("open({p:?}, 'w').write('two\\n')\nfsync_of('.')"),
        );
        let all = log(&ws);
        let new = &all[first..];
        assert_eq!(new.len(), 1, "{}", lines(new));
        if new[0]["agent"] != "tester" {
            external.push(lines(new));
        }
        first = all.len();
    }
    assert!(
        external.is_empty(),
        "{} of 10 rounds:\n{}",
        external.len(),
        external.join("\n")
    );
    ws.unmount();
}

/// SIGKILL while the daemon, unmounted by `fusermount3 -u`, waits in `sync` for its writer
/// thread (`REWIND_TEST_SLOW_END` holds the edit 2 s): the edit is unmarked (its file's last
/// version is recorded), so the next mount's scan records it, as `external` (by design: only
/// who made it is lost), once, with its content; a second remount records nothing more.
#[test]
fn a_sigkill_while_the_unmount_waits_for_the_writer_thread_records_the_edit_once() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "2000")]);
    let pid = daemon_pid(&ws);
    tester_edits_a(&ws, "0.1");
    fusermount_u(&ws);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: a signal to the daemon this test started (still waiting for its thread).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(wait_for(10, gone));
    ws.mount();
    let all = log(&ws);
    let new = &all[first..];
    assert_eq!(new.len(), 1, "{}", lines(new));
    assert_eq!(new[0]["kind"], "modify", "{}", lines(new));
    assert_eq!(
        cat_at(&ws, "a.txt", new[0]["id"].as_u64().unwrap()),
        "two\n"
    );
    eprintln!("{}", lines(new));
    ws.unmount();
    ws.mount();
    assert_eq!(log(&ws).len(), all.len());
    ws.unmount();
}

/// A new file's RELEASE is being handled (`REWIND_TEST_SLOW_END` holds its end 1.5 s inside
/// `end_write`, under `ending` shared, before the create is put in the table of held-back
/// ones) when its folder is fsynced, 0.1 s after the close; then SIGKILL. `Recorder::sync`
/// looks at the tables first (`finish_closed`, `flush_pending_older`: empty) and only then
/// waits for the end in progress (`await_ends`), which puts the create in the table after the
/// look: the fsync returns with it held back, unrecorded, and the next mount records the
/// create as `external`. `settle` waits once before it looks as well; `sync` does not.
#[test]
fn a_folder_fsync_while_a_release_ends_a_new_file_records_its_create() {
    a_held_end_fsynced_then_sigkill(
        "open('b.txt', 'w').write('two\\n')\ntime.sleep(0.1)\nprint(fsync_of('.'))",
        "b.txt",
        "create",
    );
}

/// The same with an edit of a file that was there, its end closed (`REWIND_TEST_BURST`) by
/// the RELEASE: `finish_episode` returns before `REWIND_TEST_SLOW_END` for a closed edit, so
/// the RELEASE is short; the end is held by the writer thread instead, which `sync` waits for.
#[test]
fn a_folder_fsync_while_a_release_ends_an_edit_records_it() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    let took = script_then_sigkill(&mut ws, "edit('a.txt', 'two\\n')\nprint(fsync_of('.'))");
    eprintln!("the folder's fsync took {} s", took.trim());
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// `rewind unmount --force` (lazy) while a process has its working directory in the
/// workspace: after the detach it goes on through that directory, making a new file, editing
/// another (its end closed and held by the writer thread, `REWIND_TEST_SLOW_END`) and reading
/// the history through `.rewind/` there; then it exits, the connection ends, and the daemon
/// records what is left before it exits. The next mount has each change once, the tester's.
#[test]
fn a_lazy_unmount_with_a_working_directory_inside_keeps_what_is_done_after_it() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "500")]);
    let pid = daemon_pid(&ws);
    let mut child = python_command(
        &ws.path(),
        &format!(
            "{PY}\nprint('in', flush=True)\nsys.stdin.readline()\n\
             open('c.txt', 'w').write('new\\n')\nedit('a.txt', 'two\\n')\n\
             print(open('.rewind/at/now/a.txt').read(), end='', flush=True)\n"
        ),
    )
    .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "in\n");
    let forced = rw(&ws, &["unmount", "--force", ws.path().to_str().unwrap()]);
    assert!(forced.status.success(), "{forced:?}");
    assert!(!crate::common::is_mounted(&ws.path()));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest, "two\n", "the view after the detach");
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(
        wait_for(20, gone),
        "the daemon did not exit after the last user left"
    );
    ws.mount();
    let all = log(&ws);
    let new = &all[first..];
    assert_eq!(new.len(), 2, "{}", lines(new));
    for c in new {
        assert_eq!(c["agent"], "tester", "{}", lines(new));
    }
    assert_eq!(of(new, "c.txt", "create").len(), 1, "{}", lines(new));
    assert_eq!(of(new, "a.txt", "modify").len(), 1, "{}", lines(new));
    ws.unmount();
}

/// The atomic save every careful program makes: a temporary file written and closed, renamed
/// over its target, the folder fsynced, then SIGKILL; the temporary's end held 1 s in its
/// RELEASE (`REWIND_TEST_SLOW_END`). The rename waits its turn after the RELEASE, so the save
/// is one `modify` of the target, the tester's, with its content, durable at the fsync.
#[test]
fn an_atomic_save_then_a_folder_fsync_then_sigkill_keeps_one_modify_by_its_writer() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1000")]);
    script_then_sigkill(
        &mut ws,
        "open('.a.txt.tmp', 'w').write('two\\n')\nos.rename('.a.txt.tmp', 'a.txt')\n\
         fsync_of('.')",
    );
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// [`a_folder_fsync_while_a_release_ends_a_new_file_records_its_create`] by a careful program,
/// which fsyncs the file before its close: its marker says who made it, so the create is the
/// tester's after the SIGKILL even though the folder's fsync returned before it was recorded.
#[test]
fn a_new_file_fsynced_then_closed_then_its_folder_fsynced_then_sigkill_keeps_who_made_it() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    script_then_sigkill(
        &mut ws,
        "f = open('b.txt', 'w')\nf.write('two\\n'); f.flush(); os.fsync(f.fileno()); f.close()\n\
         time.sleep(0.1)\nfsync_of('.')",
    );
    one_change_by_tester(&ws, first, "b.txt", "create", "two\n");
    ws.unmount();
}

/// `rewind unmount` while `rewind log` waits for the writer thread (`REWIND_TEST_SLOW_END`
/// holds the edit 1.5 s; the log's settle waits for it): both return, the log shows the edit,
/// and the next mount has it once, the tester's.
#[test]
fn an_unmount_while_a_log_waits_for_the_writer_thread_returns_and_keeps_the_edit() {
    let mut ws = Workspace::new();
    let first = mounted_after_a_first_edit(&mut ws, &[("REWIND_TEST_SLOW_END", "1500")]);
    tester_edits_a(&ws, "0.05");
    let started = Instant::now();
    let reader = ws
        .command(&["log", "a.txt", "--json"])
        .current_dir(ws.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let unmount = ws.rewind(&["unmount", ws.path().to_str().unwrap()]);
    let reader = reader.wait_with_output().unwrap();
    let took = started.elapsed();
    eprintln!(
        "after {took:?}: log: {} {}\nunmount: {} {}",
        reader.status,
        String::from_utf8_lossy(&reader.stderr),
        unmount.status,
        String::from_utf8_lossy(&unmount.stderr)
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(reader.status.success());
    let last: Value = serde_json::from_str(
        String::from_utf8_lossy(&reader.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["agent"], "tester", "{last}");
    if crate::common::is_mounted(&ws.path()) {
        ws.unmount();
    }
    ws.mount();
    one_change_by_tester(&ws, first, "a.txt", "modify", "two\n");
    ws.unmount();
}

/// A rename of the folder while a new file's RELEASE in it is inside `end_write`
/// (`REWIND_TEST_SLOW_END` holds it 1.5 s before the create is held back): the rename waits
/// for it (`pause_endings`), then finds the create held back under the old path and records
/// it first. The create under `d/`, then the rename, then nothing more at a remount.
#[test]
fn a_folder_rename_while_a_release_ends_a_new_file_in_it_records_the_create_first() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("d")).unwrap();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_END", "1500")]);
    sync(&ws);
    let first = log(&ws).len();
    python(
        &ws.path(),
        &format!(
            "{PY}\nopen('d/new.txt', 'w').write('new\\n')\ntime.sleep(0.1)\nos.rename('d', 'e')"
        ),
    );
    let all = log(&ws);
    let new = &all[first..];
    let kinds: Vec<String> = new
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["kind"].as_str().unwrap(),
                c["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(kinds, ["create d/new.txt", "rename e"], "{}", lines(new));
    assert_eq!(
        cat_at(&ws, "d/new.txt", new[0]["id"].as_u64().unwrap()),
        "new\n"
    );
    ws.unmount();
    ws.mount();
    assert_eq!(log(&ws).len(), all.len());
    ws.unmount();
}
