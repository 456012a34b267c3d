//! The twenty-third hostile pass (round 15), on ea054bd: the history's truth where the daemon's
//! own threads (the writer thread's closed edits, the pending thread's held-back creates) still
//! hold changes when an agent's hook ends a tool call or a turn (`settle_session`), when
//! `.rewind/events` readers in several processes see an unmount, when two folders are
//! exchanged (RENAME_EXCHANGE), and when a checkpoint is taken and rolled back to right after
//! a burst. Each attack holds the threads with the test knobs (`REWIND_TEST_SLOW_END`,
//! `REWIND_TEST_SLOW_PENDING`, every edit closed with `REWIND_TEST_BURST=1`).
//!
//! Fail at ea054bd:
//! - `a_turns_end_while_both_threads_hold_its_changes_beyond_the_hooks_budget`,
//!   `a_stop_that_gives_up_then_the_next_prompt_at_once` (failed 3 runs of 4),
//!   `a_stop_that_gives_up_with_a_held_create_then_the_next_prompt_at_once`: when the threads
//!   hold a turn's changes longer than a hook's 800 ms, the hooks give up, the agent goes on,
//!   and its next prompt's edit is counted in the previous turn (`log --turn S:1` has it,
//!   `S:2` is empty; `turns --json` may even give turn 2 the id while `log --turn` does not).
//!   All three pass since a hook's turn command bounds the turn before it records what the
//!   session did (`Recorder::point_now`); they failed again with that change taken out.
//! - `events_readers_across_a_forced_unmount_while_both_threads_hold_items`,
//!   `events_readers_across_a_sigterm_while_both_threads_hold_items`: after `rewind unmount
//!   --force` or SIGTERM, `.rewind/events` readers get the held changes (in order, once) but
//!   never EOF or an error (20 s), and the daemon stays alive. (A plain `rewind unmount` is
//!   refused as busy while they read.) Both pass since the daemon, told to stop, ends the
//!   reads that have nothing left to say, and `unmount --force` tells it to.
//!
//! Every other test holds.

use std::fs;

use serde_json::Value;

use crate::common::{Workspace, daemon_pid, python_command, rw_ok, sync};
use crate::hostile18::{cat_at, lines, of};
use crate::hostile24::{SESSION, agent, hook_log, mounted, turn_log};
use crate::record::log;

/// The writer thread's closed edits and the pending thread's held-back creates each held 1 s.
const BOTH_HELD: &[(&str, &str)] = &[
    ("REWIND_TEST_SLOW_END", "1000"),
    ("REWIND_TEST_SLOW_PENDING", "1000"),
];

/// The agent's tool writes an edit (the writer thread holds it, `REWIND_TEST_SLOW_END`) and a
/// new file (the pending thread holds it, `REWIND_TEST_SLOW_PENDING`), then its PostToolUse
/// and Stop hooks come at once, then the next prompt edits again. Turn 1 must hold the edit
/// and the create, with the tool call, the session and the agent; turn 2 only its own edit.
/// `slow` is how long each thread holds its item: under the hook's 1 s budget, and over it
/// (the hook gives up waiting; the turn's end must still come before the next prompt's
/// changes).
fn a_turns_end_while_both_threads_hold_its_changes(slow: &str, in_budget: bool) {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n")],
        &[
            ("REWIND_TEST_SLOW_END", slow),
            ("REWIND_TEST_SLOW_PENDING", slow),
        ],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
hook("UserPromptSubmit", prompt="first", prompt_id="p-1", permission_mode="default")
tool = {"file_path": os.path.abspath("a.txt"), "content": "x"}
hook("PreToolUse", prompt_id="p-1", tool_name="Write", tool_input=tool, tool_use_id="toolu_1")
edit("a.txt", "turn one\n")
with open("b.txt", "w") as f:
    f.write("new in turn one\n")
t1 = hook("PostToolUse", prompt_id="p-1", tool_name="Write", tool_input=tool,
          tool_response={"filePath": tool["file_path"]}, tool_use_id="toolu_1")
t2 = hook("Stop", prompt_id="p-1", stop_hook_active=False, last_assistant_message="done")
hook("UserPromptSubmit", prompt="second", prompt_id="p-2", permission_mode="default")
edit("a.txt", "turn two\n")
t3 = hook("Stop", prompt_id="p-2", stop_hook_active=False, last_assistant_message="done")
print(json.dumps([t1, t2, t3]))
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let log_of_hooks = hook_log(&ws);
    if in_budget {
        assert_eq!(log_of_hooks, "", "a hook failed (hooks took {out})");
    }
    let one = turn_log(&ws, 1);
    let two = turn_log(&ws, 2);
    let what = format!(
        "hooks took {out}{log_of_hooks}turns:\n{}all:\n{}\nturn 1:\n{}\nturn 2:\n{}",
        rw_ok(&ws, &["turns", "--json"]),
        lines(new),
        lines(&one),
        lines(&two)
    );
    assert_eq!(new.len(), 3, "{what}");
    for c in new {
        assert_eq!(c["agent"], "claude", "{what}");
        assert_eq!(c["session"], SESSION, "{what}");
    }
    let kinds = |t: &[Value]| {
        let mut k: Vec<(String, String)> = t
            .iter()
            .map(|c| {
                (
                    c["kind"].as_str().unwrap().into(),
                    c["path"].as_str().unwrap().into(),
                )
            })
            .collect();
        k.sort();
        k
    };
    assert_eq!(
        kinds(&one),
        [
            ("create".into(), "b.txt".into()),
            ("modify".into(), "a.txt".into())
        ],
        "{what}"
    );
    for c in &one {
        assert_eq!(c["tool"]["id"], "toolu_1", "{what}");
    }
    assert_eq!(kinds(&two), [("modify".into(), "a.txt".into())], "{what}");
    assert!(two[0]["tool"].is_null(), "{what}");
    let id = |t: &[Value], p: &str| {
        t.iter().find(|c| c["path"] == p).unwrap()["id"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(cat_at(&ws, "a.txt", id(&one, "a.txt")), "turn one\n");
    assert_eq!(cat_at(&ws, "b.txt", id(&one, "b.txt")), "new in turn one\n");
    assert_eq!(cat_at(&ws, "a.txt", id(&two, "a.txt")), "turn two\n");
    ws.unmount();
}

#[test]
fn a_turns_end_while_both_threads_hold_its_changes_within_the_hooks_budget() {
    a_turns_end_while_both_threads_hold_its_changes("200", true);
}

#[test]
fn a_turns_end_while_both_threads_hold_its_changes_beyond_the_hooks_budget() {
    a_turns_end_while_both_threads_hold_its_changes("1500", false);
}

/// Another session (a plain process, `REWIND_SESSION=other`) edits `c.txt` (held by the
/// writer thread) and creates `d.txt` (held back) while the agent's tool call and turn end:
/// they are the other session's, never in the agent's turn; the agent's own edit is.
#[test]
fn another_sessions_held_changes_stay_out_of_the_agents_turn() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n"), ("c.txt", "before\n")],
        &[
            ("REWIND_TEST_SLOW_END", "800"),
            ("REWIND_TEST_SLOW_PENDING", "800"),
        ],
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
hook("UserPromptSubmit", prompt="first", prompt_id="p-1", permission_mode="default")
other = subprocess.Popen([sys.executable, "-c", '''
import time
with open("c.txt", "r+") as f:
    f.write("other\\n"); f.truncate()
with open("d.txt", "w") as f:
    f.write("other new\\n")
'''], env=dict(os.environ, REWIND_SESSION="other", REWIND_AGENT="someone"))
edit("a.txt", "mine\n")
other.wait()
hook("Stop", prompt_id="p-1", stop_hook_active=False, last_assistant_message="done")
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let one = turn_log(&ws, 1);
    let what = format!("all:\n{}\nturn 1:\n{}", lines(new), lines(&one));
    assert_eq!(new.len(), 3, "{what}");
    assert_eq!(one.len(), 1, "{what}");
    assert_eq!(one[0]["path"], "a.txt", "{what}");
    for p in ["c.txt", "d.txt"] {
        let c = new.iter().find(|c| c["path"] == p).expect(&what);
        assert_eq!(c["session"], "other", "{what}");
        assert_eq!(c["agent"], "someone", "{what}");
        assert!(c["turn"].is_null(), "{what}");
    }
    ws.unmount();
}

/// Three `.rewind/events` readers, each in its own process, while an edit (writer thread) and
/// a new file (pending thread) are held; then `rewind unmount`. The unmount must not hang on
/// the readers, each reader's read must end (EOF or an error) within a few seconds, and what
/// each got comes in id order, once each, and includes both held changes (recorded before the
/// unmount returns). After a remount, new readers see a new edit once.
#[test]
fn events_readers_across_a_forced_unmount_while_both_threads_hold_items() {
    events_readers_across_an_unmount_while_both_threads_hold_items(false);
}

/// The same with SIGTERM to the daemon ("SIGTERM unmounts (lazily if busy)").
#[test]
fn events_readers_across_a_sigterm_while_both_threads_hold_items() {
    events_readers_across_an_unmount_while_both_threads_hold_items(true);
}

fn events_readers_across_an_unmount_while_both_threads_hold_items(sigterm: bool) {
    let mut ws = Workspace::new();
    let first = mounted(&mut ws, &[("a.txt", "before\n")], BOTH_HELD);
    let reader = r#"
import json, sys, threading, time
got, end = [], []
def read():
    try:
        with open(".rewind/events") as ev:
            print("ready", flush=True)
            for line in ev:
                got.append(json.loads(line)["id"])
        end.append("eof")
    except Exception as e:
        end.append(repr(e))
t = threading.Thread(target=read, daemon=True)
t.start()
t.join(float(sys.argv[1]))
print(json.dumps({"got": got, "end": end}), flush=True)
"#;
    let spawn = |secs: &str| {
        let mut c = python_command(&ws.path(), reader)
            .arg(secs)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line, "ready\n");
        (c, out)
    };
    let readers: Vec<_> = (0..3).map(|_| spawn("20")).collect();
    python_command(
        &ws.path(),
        r#"
with open("a.txt", "r+") as f:
    f.write("held\n"); f.truncate()
with open("b.txt", "w") as f:
    f.write("new\n")
"#,
    )
    .status()
    .unwrap();
    // A plain `rewind unmount` is refused while the readers hold `.rewind/events` open (the
    // kernel's busy mount): the forced (lazy) one is what ends them.
    let busy = ws.rewind(&[std::ffi::OsStr::new("unmount"), ws.path().as_os_str()]);
    assert!(!busy.status.success());
    let pid = daemon_pid(&ws);
    let t = std::time::Instant::now();
    if sigterm {
        // SAFETY: a signal to the daemon this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    } else {
        let forced = ws.rewind(&[
            std::ffi::OsStr::new("unmount"),
            std::ffi::OsStr::new("--force"),
            ws.path().as_os_str(),
        ]);
        assert!(forced.status.success(), "{forced:?}");
    }
    let unmount_took = t.elapsed();
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SAFETY: kill with signal 0 only asks whether the process exists.
    let alive_3s_later = unsafe { libc::kill(pid, 0) == 0 };
    let mut results = Vec::new();
    for (mut c, mut out) in readers {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        c.wait().unwrap();
        results.push(serde_json::from_str::<Value>(rest.trim()).unwrap());
    }
    ws.mount();
    let all = log(&ws);
    let new: Vec<u64> = all[first..]
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    let what = format!(
        "unmount took {unmount_took:?}; daemon alive 3 s later: {alive_3s_later}; readers (20 s each): {results:?}\nlog:\n{}",
        lines(&all[first..])
    );
    assert_eq!(new.len(), 2, "{what}");
    assert_eq!(of(&all, "b.txt", "create").len(), 1, "{what}");
    for c in &all[first..] {
        assert_ne!(c["agent"], "external", "{what}");
    }
    for r in &results {
        assert_eq!(
            r["end"].as_array().unwrap().len(),
            1,
            "a reader hung: {what}"
        );
        let got: Vec<u64> = serde_json::from_value(r["got"].clone()).unwrap();
        assert_eq!(got, new, "{what}");
    }
    // A remount's readers see what comes next, once.
    let out = python_command(
        &ws.path(),
        r#"
import json, threading, time
got = []
def read():
    with open(".rewind/events") as ev:
        for line in ev:
            got.append(json.loads(line)["id"])
threading.Thread(target=read, daemon=True).start()
time.sleep(0.3)
with open("a.txt", "r+") as f:
    f.write("after\n"); f.truncate()
open(".rewind/log").read()
time.sleep(0.5)
print(json.dumps(got))
"#,
    )
    .output()
    .unwrap();
    let got: Vec<u64> = serde_json::from_slice(&out.stdout).unwrap();
    let last = log(&ws).last().unwrap()["id"].as_u64().unwrap();
    assert_eq!(got, [last]);
    ws.unmount();
}

/// RENAME_EXCHANGE of `d1` and `d2` while the writer thread holds an edit of `d1/a.txt` and
/// the pending thread holds the create of `d2/n.txt`: the edit is of `d1/a.txt` (where it was
/// made) and the create of `d2/n.txt` (or, recorded after the exchange, of `d1/n.txt`), both
/// the tester's, none twice or `external` after a remount; the tree at the last change is the
/// tree on disk.
#[test]
fn a_folder_exchange_while_both_threads_hold_files_in_them() {
    a_folder_exchange_while_files_in_them_are_held("0.6");
}

/// The same at once: the edit just closed (the writer thread takes it 2 ms later), the new
/// file still held back in the table (the pending thread takes it after half a second).
#[test]
fn a_folder_exchange_right_after_the_writes_in_them() {
    a_folder_exchange_while_files_in_them_are_held("0");
}

fn a_folder_exchange_while_files_in_them_are_held(sleep: &str) {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("d1/a.txt", "one\n"), ("d2/b.txt", "two\n")],
        BOTH_HELD,
    );
    let out = python_command(
        &ws.path(),
        &(format!("SLEEP = {sleep}\n")
            + r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
with open("d1/a.txt", "r+") as f:
    f.write("edited\n"); f.truncate()
with open("d2/n.txt", "w") as f:
    f.write("new\n")
time.sleep(SLEEP)
r = libc.renameat2(-100, b"d1", -100, b"d2", 2)
assert r == 0, ctypes.get_errno()
"#),
    )
    .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let on_disk = |p: &str| fs::read_to_string(ws.path().join(p)).unwrap();
    assert_eq!(on_disk("d2/a.txt"), "edited\n");
    assert_eq!(on_disk("d1/n.txt"), "new\n");
    ws.unmount();
    ws.mount();
    let all = log(&ws);
    let new = &all[first..];
    let what = lines(new);
    for c in new {
        assert_eq!(c["agent"], "tester", "{what}");
    }
    let edits: Vec<&Value> = new.iter().filter(|c| c["kind"] == "modify").collect();
    assert_eq!(edits.len(), 1, "{what}");
    assert_eq!(edits[0]["path"], "d1/a.txt", "{what}");
    let creates: Vec<&Value> = new.iter().filter(|c| c["kind"] == "create").collect();
    assert_eq!(creates.len(), 1, "{what}");
    let last = new.last().unwrap()["id"].as_u64().unwrap();
    assert_eq!(cat_at(&ws, "d2/a.txt", last), "edited\n", "{what}");
    assert_eq!(cat_at(&ws, "d1/n.txt", last), "new\n", "{what}");
    assert_eq!(cat_at(&ws, "d1/b.txt", last), "two\nagain\n", "{what}");
    // Nothing at the other side of the exchange.
    let gone = ws
        .rewind(&[
            "-C".as_ref(),
            ws.path().as_os_str(),
            "cat".as_ref(),
            "d1/a.txt".as_ref(),
            "--at".as_ref(),
            last.to_string().as_ref(),
        ])
        .status;
    assert!(!gone.success(), "d1/a.txt still there at #{last}: {what}");
    ws.unmount();
}

/// A checkpoint taken right after a burst whose edit the writer thread holds and whose new
/// file the pending thread holds: the checkpoint is the tree as it was (the edit and the new
/// file in it). Then more changes; `rollback --to CP --dry-run` lists exactly what the run
/// then does, and the tree after the run is the checkpoint's.
#[test]
fn a_checkpoint_right_after_a_held_burst_and_its_rollback_dry_run_vs_run() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("a.txt", "before\n"), ("c.txt", "keep\n")],
        BOTH_HELD,
    );
    let out = python_command(
        &ws.path(),
        r#"
import os
with open("a.txt", "r+") as f:
    f.write("at cp\n"); f.truncate()
with open("b.txt", "w") as f:
    f.write("new at cp\n")
fd = os.open(".rewind/ctl", os.O_RDWR)
os.write(fd, b"checkpoint cp1\n")
print(os.read(fd, 4096).decode())
os.close(fd)
"#,
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_cp = |p: &str| {
        let o = ws.rewind(&[
            "-C".as_ref(),
            ws.path().as_os_str(),
            "cat".as_ref(),
            p.as_ref(),
            "--at".as_ref(),
            "cp1".as_ref(),
        ]);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let what = lines(&log(&ws));
    assert_eq!(at_cp("a.txt").as_deref(), Some("at cp\n"), "{what}");
    assert_eq!(at_cp("b.txt").as_deref(), Some("new at cp\n"), "{what}");
    // After the checkpoint: another held burst.
    python_command(
        &ws.path(),
        r#"
with open("a.txt", "r+") as f:
    f.write("later\n"); f.truncate()
with open("e.txt", "w") as f:
    f.write("later new\n")
import os
os.unlink("b.txt")
"#,
    )
    .status()
    .unwrap();
    let dry = rw_ok(&ws, &["rollback", "--to", "cp1", "--dry-run"]);
    let run = rw_ok(&ws, &["rollback", "--to", "cp1"]);
    let on_disk = |p: &str| fs::read_to_string(ws.path().join(p)).ok();
    let what = format!("dry run:\n{dry}\nrun:\n{run}\n{}", lines(&log(&ws)));
    assert_eq!(on_disk("a.txt").as_deref(), Some("at cp\n"), "{what}");
    assert_eq!(on_disk("b.txt").as_deref(), Some("new at cp\n"), "{what}");
    assert_eq!(on_disk("c.txt").as_deref(), Some("keep\nagain\n"), "{what}");
    assert_eq!(on_disk("e.txt"), None, "{what}");
    for p in ["a.txt", "b.txt", "e.txt"] {
        assert!(dry.contains(p), "{p} not in the dry run: {what}");
    }
    assert!(!dry.contains("c.txt"), "{what}");
    ws.unmount();
}

/// Narrower: one edit in turn 1, held by the writer thread well past the hook's budget
/// (`REWIND_TEST_SLOW_END=2500`), the Stop hook gives up waiting; then the agent waits until
/// the daemon is surely done and opens turn 2 with an edit of its own. Turn 1 (its range in
/// `turns --json` and `log --turn`) holds its edit; turn 2 its own.
#[test]
fn a_stop_that_gives_up_while_the_writer_thread_holds_the_turns_edit() {
    a_stop_that_gives_up_then_the_next_turn(4, false);
}

/// The same, the next prompt and its edit coming at once after the Stop hook gave up (as an
/// agent does: the hook returned): the next turn's edit must not be counted in turn 1.
#[test]
fn a_stop_that_gives_up_then_the_next_prompt_at_once() {
    a_stop_that_gives_up_then_the_next_turn(0, false);
}

/// The same with a new file in turn 1 too, held back then held by the pending thread
/// (`REWIND_TEST_SLOW_PENDING=2500`).
#[test]
fn a_stop_that_gives_up_with_a_held_create_then_the_next_prompt_at_once() {
    a_stop_that_gives_up_then_the_next_turn(0, true);
}

fn a_stop_that_gives_up_then_the_next_turn(wait: u32, create: bool) {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n")],
        &[
            ("REWIND_TEST_SLOW_END", "2500"),
            ("REWIND_TEST_SLOW_PENDING", "2500"),
        ],
    );
    agent(
        &ws,
        &(format!(
            "WAIT = {wait}\nCREATE = {}\n",
            if create { "True" } else { "False" }
        ) + r#"
hook("SessionStart", source="startup", model="m")
hook("UserPromptSubmit", prompt="first", prompt_id="p-1", permission_mode="default")
edit("a.txt", "turn one\n")
if CREATE:
    open("b.txt", "w").write("new in turn one\n")
hook("Stop", prompt_id="p-1", stop_hook_active=False, last_assistant_message="done")
time.sleep(WAIT)
hook("UserPromptSubmit", prompt="second", prompt_id="p-2", permission_mode="default")
edit("a.txt", "turn two\n")
time.sleep(4)
hook("Stop", prompt_id="p-2", stop_hook_active=False, last_assistant_message="done")
"#),
    );
    let all = log(&ws);
    let new = &all[first..];
    let one = turn_log(&ws, 1);
    let two = turn_log(&ws, 2);
    let what = format!(
        "{}turns:\n{}all:\n{}\nturn 1:\n{}\nturn 2:\n{}",
        hook_log(&ws),
        rw_ok(&ws, &["turns", "--json"]),
        lines(new),
        lines(&one),
        lines(&two)
    );
    let n = if create { 2 } else { 1 };
    assert_eq!(new.len(), n + 1, "{what}");
    assert_eq!(one.len(), n, "{what}");
    assert_eq!(
        cat_at(&ws, "a.txt", one[0]["id"].as_u64().unwrap()),
        "turn one\n"
    );
    assert_eq!(two.len(), 1, "{what}");
    assert_eq!(
        cat_at(&ws, "a.txt", two[0]["id"].as_u64().unwrap()),
        "turn two\n"
    );
    ws.unmount();
}

/// `rewind export --session S --branch review`, run by the agent's own process right after
/// its tool edited `a.txt` (the writer thread holds the edit) and created `b.txt` (the
/// pending thread holds it), no hook in between: the branch's last commit has both, with
/// what was written.
#[test]
fn an_export_right_after_the_agents_writes_while_both_threads_hold_them() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("a.txt"), "before\n").unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .envs([
                ("GIT_CONFIG_NOSYSTEM", "1"),
                ("GIT_CONFIG_GLOBAL", "/dev/null"),
                ("GIT_AUTHOR_NAME", "Human"),
                ("GIT_AUTHOR_EMAIL", "human@example.com"),
                ("GIT_COMMITTER_NAME", "Human"),
                ("GIT_COMMITTER_EMAIL", "human@example.com"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main", "."]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "initial"]);
    ws.mount_with_env(
        &[] as &[&str],
        &[
            ("REWIND_TEST_BURST", "1"),
            ("REWIND_TEST_SLOW_END", "1000"),
            ("REWIND_TEST_SLOW_PENDING", "1000"),
        ],
    );
    fs::write(ws.path().join("a.txt"), "again\n").unwrap();
    sync(&ws);
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
hook("UserPromptSubmit", prompt="first", prompt_id="p-1", permission_mode="default")
edit("a.txt", "by the agent\n")
open("b.txt", "w").write("new by the agent\n")
r = subprocess.run(["rewind", "export", "--session", "claude-" + SID, "--branch", "review"],
                   capture_output=True, env=dict(os.environ, GIT_CONFIG_NOSYSTEM="1",
                   GIT_CONFIG_GLOBAL="/dev/null"))
print(r.returncode, r.stdout.decode(), r.stderr.decode())
"#,
    );
    let what = format!("export: {out}\n{}", lines(&log(&ws)));
    assert!(out.starts_with("0 "), "{what}");
    let show = |p: &str| {
        let o = std::process::Command::new("git")
            .args(["show", &format!("review:{p}")])
            .current_dir(ws.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(show("a.txt"), "by the agent\n", "{what}");
    assert_eq!(show("b.txt"), "new by the agent\n", "{what}");
    ws.unmount();
}

/// The tool-call level of the same: tool call 1's edit held by the writer thread past the
/// hook's budget (`REWIND_TEST_SLOW_END=2500`), its PostToolUse gives up, the next tool call
/// begins at once and edits another file. Each change carries its own tool call.
#[test]
fn a_post_tool_use_that_gives_up_then_the_next_tool_call_at_once() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n"), ("c.txt", "before\n")],
        &[("REWIND_TEST_SLOW_END", "2500")],
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
hook("UserPromptSubmit", prompt="first", prompt_id="p-1", permission_mode="default")
for n, p in [(1, "a.txt"), (2, "c.txt")]:
    tool = {"file_path": os.path.abspath(p), "content": "x"}
    hook("PreToolUse", prompt_id="p-1", tool_name="Write", tool_input=tool,
         tool_use_id=f"toolu_{n}")
    edit(p, f"by tool {n}\n")
    hook("PostToolUse", prompt_id="p-1", tool_name="Write", tool_input=tool,
         tool_response={"filePath": tool["file_path"]}, tool_use_id=f"toolu_{n}")
time.sleep(6)
hook("Stop", prompt_id="p-1", stop_hook_active=False, last_assistant_message="done")
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let one = turn_log(&ws, 1);
    let tools: Vec<String> = one
        .iter()
        .map(|c| format!("{} {}", c["path"].as_str().unwrap(), c["tool"]))
        .collect();
    let what = format!("{}all:\n{}\ntools: {tools:?}", hook_log(&ws), lines(new));
    // The attack happened: the first PostToolUse gave up while the edit was held.
    assert!(
        hook_log(&ws).contains("PostToolUse: no answer within"),
        "{what}"
    );
    assert_eq!(new.len(), 2, "{what}");
    assert_eq!(one.len(), 2, "{what}");
    for (p, id) in [("a.txt", "toolu_1"), ("c.txt", "toolu_2")] {
        let c = one.iter().find(|c| c["path"] == p).expect(&what);
        assert_eq!(c["tool"]["id"], id, "{what}");
    }
    ws.unmount();
}

/// Tail-like readers that stop after what they wait for, across a plain unmount and a remount:
/// in each mount three readers (each its own process) start, an edit (writer thread) and a new
/// file (pending thread) are held, and each reader must see exactly those two changes, in id
/// order, once; the ids of the second mount follow those of the first; then the readers have
/// closed and a plain unmount goes through.
#[test]
fn events_readers_in_two_mounts_each_see_the_held_changes_once_in_order() {
    let mut ws = Workspace::new();
    let env = [
        ("REWIND_TEST_BURST", "1"),
        ("REWIND_TEST_SLOW_END", "1000"),
        ("REWIND_TEST_SLOW_PENDING", "1000"),
    ];
    let first = mounted(&mut ws, &[("a.txt", "before\n")], &env[1..]);
    let reader = r#"
import json, sys, threading, time
got = []
def read():
    with open(".rewind/events") as ev:
        print("ready", flush=True)
        for line in ev:
            got.append(json.loads(line)["id"])
            if len(got) >= 2:
                return
t = threading.Thread(target=read, daemon=True)
t.start()
t.join(15)
print(json.dumps({"got": got, "done": not t.is_alive()}), flush=True)
"#;
    let mut seen = Vec::new();
    for round in 0..2 {
        if round == 1 {
            ws.mount_with_env(&[] as &[&str], &env);
        }
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let mut c = python_command(&ws.path(), reader)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
                let mut line = String::new();
                std::io::BufRead::read_line(&mut out, &mut line).unwrap();
                assert_eq!(line, "ready\n");
                (c, out)
            })
            .collect();
        python_command(
            &ws.path(),
            &format!(
                r#"
with open("a.txt", "r+") as f:
    f.write("held {round}\n"); f.truncate()
with open("new{round}.txt", "w") as f:
    f.write("new {round}\n")
"#
            ),
        )
        .status()
        .unwrap();
        let mut results = Vec::new();
        for (mut c, mut out) in readers {
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
            c.wait().unwrap();
            results.push(serde_json::from_str::<Value>(rest.trim()).unwrap());
        }
        let all = log(&ws);
        let ids: Vec<u64> = all[first..]
            .iter()
            .map(|c| c["id"].as_u64().unwrap())
            .collect();
        let what = format!(
            "round {round}: readers {results:?}\n{}",
            lines(&all[first..])
        );
        assert_eq!(ids.len(), 2 * (round + 1), "{what}");
        let these = ids[2 * round..].to_vec();
        for r in &results {
            assert_eq!(r["done"], true, "{what}");
            let got: Vec<u64> = serde_json::from_value(r["got"].clone()).unwrap();
            assert_eq!(got, these, "{what}");
        }
        seen.extend(these);
        ws.unmount();
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
}
