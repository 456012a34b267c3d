//! Points and paths as a user types them (`now`, the time `log` prints, a folder, a unique
//! beginning of a session name), and the small things rewind used to say that were not quite
//! true: through the real binary and a real mount.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};

use crate::common::{Workspace, ok, python_command, rw, rw_ok, sh, stderr, stdout, wait_for};

/// `rewind ARGS`, which must fail with exit status 2; its stderr.
fn usage(ws: &Workspace, args: &[&str]) -> String {
    let out = rw(ws, args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "rewind {args:?}:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    stderr(&out)
}

/// Wait until the wall clock is in a later second than `after` (a time as `log` prints it is
/// whole seconds, so two changes must be a second apart for it to tell them apart).
fn next_second() {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let start = now();
    assert!(wait_for(5, || now() > start));
}

#[test]
fn now_and_printed_times_are_points() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join("f"), "v1\n").unwrap();
    rw_ok(&ws, &["sync"]);
    next_second();
    fs::write(root.join("f"), "v2\n").unwrap();
    rw_ok(&ws, &["sync"]);

    // `now` wherever a point is taken.
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "now"]), "v2\n");
    rw_ok(&ws, &["diff", "--from", "1", "--to", "now", "--stat"]);
    let out = rw_ok(&ws, &["rollback", "--to", "now", "--dry-run"]);
    assert!(out.contains("nothing to roll back"), "{out}");
    assert_eq!(
        fs::read_to_string(root.join(".rewind/at/now/f")).unwrap(),
        "v2\n"
    );
    // A checkpoint may not be called `now` (nor anything else that reads as a point).
    assert!(usage(&ws, &["checkpoint", "now"]).contains("not allowed"));

    // The time `log` prints for the first change names the state right after it.
    let log = rw_ok(&ws, &["log", "f"]);
    let first = log.lines().next().expect("a change to f");
    let printed: String = first
        .split_whitespace()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(printed.len(), 19, "{first}");
    assert_eq!(
        rw_ok(&ws, &["cat", "f", "--at", &printed]),
        "v1\n",
        "{printed}"
    );
    let until = rw_ok(&ws, &["log", "--until", &printed]);
    assert_eq!(
        until.lines().filter(|l| l.contains("  f  ")).count(),
        1,
        "{until}"
    );
    // ... and so does the time `log --json` prints, to the nanosecond.
    let json = rw_ok(&ws, &["log", "f", "--json"]);
    let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    let time = first["time"].as_str().unwrap();
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", time]), "v1\n", "{time}");
    // Written as RFC 3339 to the second, it is that whole second, as `log` shows it.
    let whole = format!("{}Z", printed.replace(' ', "T"));
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", &whole]), "v1\n", "{whole}");
}

#[test]
fn a_folder_is_everything_below_it() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        "mkdir -p src/deep && echo a > src/a.rs && echo c > src/deep/c.rs && echo r > README \
         && echo x > srcfile",
    );
    rw_ok(&ws, &["sync"]);

    let log = rw_ok(&ws, &["log", "src"]);
    for p in ["src/a.rs", "src/deep/c.rs", "src/deep "] {
        assert!(log.contains(p), "{p} missing from:\n{log}");
    }
    assert!(!log.contains("README") && !log.contains("srcfile"), "{log}");
    let deep = rw_ok(&ws, &["log", "src/deep"]);
    assert!(
        deep.contains("src/deep/c.rs") && !deep.contains("src/a.rs"),
        "{deep}"
    );
    // From inside the folder, `.` is the folder.
    let mut cmd = ws.command(&["log", "."]);
    cmd.current_dir(root.join("src/deep"));
    let here = cmd.output().unwrap();
    assert_eq!(stdout(&here), deep);
    // A file is still just that file; -n counts what is shown.
    let one = rw_ok(&ws, &["log", "src/a.rs"]);
    assert_eq!(one.lines().count(), 1, "{one}");
    assert_eq!(rw_ok(&ws, &["log", "src", "-n", "1"]).lines().count(), 1);

    // `cat` of a folder is a clear error, not empty output.
    let err = usage(&ws, &["cat", "src"]);
    assert!(err.contains("folder"), "{err}");
    let err = usage(&ws, &["cat", "."]);
    assert!(err.contains("folder"), "{err}");
    assert_eq!(rw_ok(&ws, &["cat", "src/a.rs"]), "a\n");
}

/// A change made by `rewind run` in `session`.
fn change_in(ws: &Workspace, session: &str, script: &str) {
    let out = rw(
        ws,
        &["run", "--session", session, "--", "bash", "-ec", script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    rw_ok(ws, &["sync"]);
}

#[test]
fn a_unique_beginning_names_a_session() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh(
        &root,
        "git init -q && git -c user.email=t@t -c user.name=t commit -q --allow-empty -m init",
    );
    let a = "claude-7f3a0c11-2b4e-4f5a-9c1d-0123456789ab";
    let b = "claude-7f3b9e22-2b4e-4f5a-9c1d-0123456789ab";
    rw_ok(
        &ws,
        &[
            "turn",
            "begin",
            "--session",
            a,
            "--agent",
            "claude",
            "--prompt=add notes",
        ],
    );
    change_in(&ws, a, "echo from-a > notes.txt");
    rw_ok(&ws, &["turn", "end", "--session", a]);
    rw_ok(
        &ws,
        &[
            "turn",
            "begin",
            "--session",
            b,
            "--agent",
            "claude",
            "--prompt=other",
        ],
    );
    change_in(&ws, b, "echo from-b > other.txt");
    rw_ok(&ws, &["turn", "end", "--session", b]);

    let log = rw_ok(&ws, &["log", "--session", "claude-7f3a"]);
    assert!(
        log.contains("notes.txt") && !log.contains("other.txt"),
        "{log}"
    );
    let log = rw_ok(&ws, &["log", "--turn", "claude-7f3a:1"]);
    assert!(log.contains("notes.txt"), "{log}");
    let diff = rw_ok(&ws, &["diff", "--session", "claude-7f3b", "--stat"]);
    assert!(
        diff.contains("other.txt") && !diff.contains("notes.txt"),
        "{diff}"
    );
    assert!(rw_ok(&ws, &["turns", "--session", "claude-7f3a"]).contains("add notes"));
    // The control directory takes a unique beginning too; a shared one names nothing.
    let ctl = root.join(".rewind");
    let turn_log = fs::read_to_string(ctl.join("turns/claude-7f3a/1/log")).unwrap();
    assert!(
        turn_log.contains("notes.txt") && !turn_log.contains("other.txt"),
        "{turn_log}"
    );
    let session_log = fs::read_to_string(ctl.join("sessions/claude-7f3b/log")).unwrap();
    assert!(session_log.contains("other.txt"), "{session_log}");
    assert!(!ctl.join("turns/claude-7f/1/log").exists());
    let export = rw_ok(
        &ws,
        &["export", "--session", "claude-7f3b", "--branch", "b-work"],
    );
    assert!(export.contains("1 commit from 1 change"), "{export}");
    let dry = rw_ok(&ws, &["rollback", "--session", "claude-7f3b", "--dry-run"]);
    assert!(dry.contains("1 path would be restored"), "{dry}");

    // A beginning shared by both is refused, naming both, wherever a session is taken.
    for args in [
        &["log", "--session", "claude-7f"][..],
        &["diff", "--session", "claude-7f"],
        &["rollback", "--session", "claude-7f", "--dry-run"],
        &["turns", "--session", "claude"],
        &["log", "--turn", "claude-7f:1"],
        &["export", "--session", "claude-7f", "--branch", "b-2"],
    ] {
        let err = usage(&ws, args);
        assert!(err.contains(a) && err.contains(b), "{args:?}: {err}");
    }

    // A rolled-back turn says so, and by which rollback.
    let undo = rw_ok(&ws, &["rollback", "--turn", "claude-7f3a:1"]);
    assert!(undo.contains("restored 1 path,"), "{undo}");
    let session = undo
        .lines()
        .last()
        .and_then(|l| l.split(':').next())
        .unwrap()
        .to_string();
    assert!(session.starts_with("rollback-"), "{undo}");
    let turns = rw_ok(&ws, &["turns"]);
    assert!(
        turns.contains(&format!("(rolled back by {session})")),
        "{turns}"
    );
    let json = rw_ok(&ws, &["turns", "--json"]);
    let t: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(t["rolled_back"], "whole", "{json}");
    assert_eq!(t["rolled_back_by"][0], session.as_str(), "{json}");
}

/// Write a command to ctl on one open file and read the answer back from it.
fn ctl(root: &std::path::Path, cmd: &[u8]) -> (std::io::Result<()>, String) {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join(".rewind/ctl"))
        .unwrap();
    let w = f.write_all(cmd);
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    (w, out)
}

#[test]
fn what_rewind_says_is_true() {
    let mut ws = Workspace::new();
    // Hooks set up in a folder that is not mounted: a warning that nothing is recorded yet.
    let out = ws.rewind(&[
        OsStr::new("-C"),
        ws.path().as_os_str(),
        OsStr::new("agent"),
        OsStr::new("install"),
        OsStr::new("opencode"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not mounted") && !stdout(&out).contains("now opens"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let plugin = fs::read_dir(ws.path().join(".opencode/plugins"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = fs::read_to_string(&plugin).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("`rewind agent install opencode`"),
        "{text}"
    );
    let out = ws.rewind(&[
        OsStr::new("-C"),
        ws.path().as_os_str(),
        OsStr::new("agent"),
        OsStr::new("uninstall"),
        OsStr::new("opencode"),
    ]);
    assert!(!plugin.exists());
    assert!(
        stdout(&out).contains("removed") && !stdout(&out).contains("updated"),
        "{}",
        stdout(&out)
    );

    ws.mount();
    let root = ws.path();
    // No turns: a hint where they come from.
    assert!(rw_ok(&ws, &["turns"]).contains("rewind agent install"));
    // No checkpoints: no empty line.
    let status = rw_ok(&ws, &["status"]);
    assert!(status.contains("checkpoints: none"), "{status}");

    // ctl says "error: " once.
    let (w, out) = ctl(&root, b"frobnicate\n");
    assert!(w.is_err());
    assert!(
        out.starts_with("error: ") && !out.contains("error: error:"),
        "{out}"
    );

    // One of a thing is one, not "1 paths".
    fs::write(root.join("f"), "one\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let undo = rw_ok(&ws, &["rollback", "--file", "f"]);
    assert!(undo.contains("restored 1 path,"), "{undo}");
    let sessions = rw_ok(&ws, &["sessions"]);
    assert!(
        sessions.lines().any(|l| l.contains(" 1 change ")),
        "{sessions}"
    );

    // A clean unmount leaves no warning in the daemon's log.
    ws.unmount();
    let log = ws.store().join("daemon.log");
    assert!(wait_for(10, || fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("unmounted"))));
    let text = fs::read_to_string(&log).unwrap();
    assert!(!text.contains("Failed to umount"), "{text}");
}

#[test]
fn a_long_ctl_line_is_one_command() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join("f"), "x\n").unwrap();
    rw_ok(&ws, &["sync"]);
    // Many paths: a line of some 20 kB, written by the shell's echo.
    let paths: Vec<String> = (0..2000).map(|i| format!("dir/p{i:05}")).collect();
    let line = format!("diff --stat --since 0 f {}", paths.join(" "));
    assert!(line.len() > 16 * 1024);
    fs::write(ws.plain().join("line"), &line).unwrap();
    let out = sh(
        &root,
        &format!(
            "exec 3<>.rewind/ctl; echo \"$(cat {})\" >&3; cat <&3",
            ws.plain().join("line").display()
        ),
    );
    assert!(
        out.contains(" f ") && out.contains("1 file changed"),
        "{out}"
    );
    // A line of exactly two pages with no newline, written at once: it waits for more, and
    // runs when its answer is read.
    let mut exact = b"log -n 1 f".to_vec();
    exact.resize(8192, b' ');
    let (w, out) = ctl(&root, &exact);
    assert!(w.is_ok() && out.contains("  f  "), "{out}");
    // Past the limit: said as it is.
    let (w, out) = ctl(&root, &[b'x'; 70_000]);
    assert!(w.is_err());
    assert!(out.contains("at most 64 KiB"), "{out}");
}

#[test]
fn a_rollback_that_skipped_everything_did_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    change_in(&ws, "agent-1", "echo mine > f");
    change_in(&ws, "someone", "echo theirs > f");
    let out = rw(&ws, &["rollback", "--session", "agent-1"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("skip     f") && text.contains("nothing to roll back"),
        "{text}"
    );
    assert!(!text.contains("exit status"), "{text}");
    let (w, answer) = ctl(&root, b"rollback --session agent-1\n");
    assert!(w.is_ok(), "{answer}");
    assert!(
        answer.ends_with("exit status 1 (nothing done)\n"),
        "{answer}"
    );
    assert_eq!(fs::read_to_string(root.join("f")).unwrap(), "theirs\n");
}

/// A checkpoint taken while files are open for writing answers with them as they were at that
/// moment: a new file still being written is there with what it held, and a file being
/// rewritten holds what had been written so far (its episode is cut at the checkpoint).
#[test]
fn a_checkpoint_cuts_the_writes_in_progress() {
    let mut ws = Workspace::new();
    ws.mount();
    sh(&ws.path(), "printf 'old\\n' > g");
    let script = r#"
import os, subprocess, sys
f = open("f", "w"); g = open("g", "w")
f.write("first\n"); f.flush(); g.write("mid\n"); g.flush()
subprocess.run([os.environ["REWIND"], "checkpoint", "cp"], check=True)
f.write("second\n"); g.write("last\n")
f.close(); g.close()
"#;
    ok(python_command(&ws.path(), script)
        .env("REWIND", crate::common::REWIND)
        .env("XDG_DATA_HOME", ws.path().join("../data"))
        .output()
        .unwrap());
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "cp"]), "first\n");
    assert_eq!(rw_ok(&ws, &["cat", "g", "--at", "cp"]), "mid\n");
    assert_eq!(rw_ok(&ws, &["cat", "f"]), "first\nsecond\n");
    let at = ws.path().join(".rewind/at/cp");
    assert_eq!(fs::read_to_string(at.join("f")).unwrap(), "first\n");
    assert_eq!(fs::read_to_string(at.join("g")).unwrap(), "mid\n");
}

/// Unmounted, a question about a file answers from what was recorded, or refuses clearly when
/// the workspace no longer holds what the mount last saw there (changed or deleted while
/// unmounted): never the changed content passed off as the recorded one.
#[test]
fn unmounted_answers_are_exact_or_refused() {
    let mut ws = Workspace::new();
    ws.mount();
    sh(
        &ws.path(),
        "printf 'v1\\n' > f && printf 'g1\\n' > g && printf 'h1\\n' > h",
    );
    rw_ok(&ws, &["checkpoint", "cp"]);
    sh(&ws.path(), "printf 'v2\\n' > f");
    ws.unmount();
    assert_eq!(rw_ok(&ws, &["cat", "f"]), "v2\n");
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "cp"]), "v1\n");
    assert_eq!(rw_ok(&ws, &["cat", "g", "--at", "cp"]), "g1\n");
    // Changed while unmounted: same size, so only the content tells.
    sh(
        &ws.path(),
        "printf 'v3\\n' > f && printf 'g9\\n' > g && rm h && printf 'n\\n' > new",
    );
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "cp"]), "v1\n");
    for args in [
        &["cat", "f"][..],
        &["cat", "g", "--at", "cp"],
        &["cat", "h", "--at", "cp"],
    ] {
        let out = rw(&ws, args);
        assert!(!out.status.success(), "rewind {args:?}: {out:?}");
        assert!(
            stderr(&out).contains("changed while the workspace was not mounted"),
            "rewind {args:?}: {}",
            stderr(&out)
        );
    }
    // The next mount records what changed, and the answers are whole again.
    ws.mount();
    assert_eq!(rw_ok(&ws, &["cat", "g", "--at", "cp"]), "g1\n");
    assert_eq!(rw_ok(&ws, &["cat", "h", "--at", "cp"]), "h1\n");
    assert_eq!(rw_ok(&ws, &["cat", "f"]), "v3\n");
}

/// `--since` with the time `log` printed for a change takes that change (and what came after
/// it in the same second), in `log`, `diff` and a rollback's plan.
#[test]
fn since_a_printed_time_includes_that_second() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join("f"), "v1\n").unwrap();
    rw_ok(&ws, &["sync"]);
    next_second();
    fs::write(root.join("g"), "g1\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let log = rw_ok(&ws, &["log", "g"]);
    let line = log.lines().next().expect("a change to g");
    let printed: String = line
        .split_whitespace()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(printed.len(), 19, "{line}");
    let since = rw_ok(&ws, &["log", "--since", &printed]);
    assert!(since.contains("  g  ") || since.contains(" g\n"), "{since}");
    assert!(!since.lines().any(|l| l.ends_with(" f")), "{since}");
    let diff = rw_ok(&ws, &["diff", "--since", &printed, "--stat"]);
    assert!(diff.contains('g'), "{diff}");
    let plan = rw_ok(&ws, &["rollback", "--since", &printed, "--dry-run"]);
    assert!(plan.contains("remove") && plan.contains(" g\n"), "{plan}");
}

/// Unmounted, `status` says that nothing is being recorded.
#[test]
fn status_unmounted_says_it_is_not_recording() {
    let mut ws = Workspace::new();
    ws.mount();
    sh(&ws.path(), "echo a > f");
    let status = rw_ok(&ws, &["status"]);
    assert!(!status.contains("recording: no"), "{status}");
    ws.unmount();
    let status = rw_ok(&ws, &["status"]);
    assert!(status.contains("recording: no (not mounted"), "{status}");
}

/// A `RENAME_EXCHANGE` is recorded as two renames, one each way, with one time. The state
/// after only the first never was (an exchanged folder would show without its contents), so
/// a point naming the first half's id means the state after the whole exchange.
#[test]
fn a_point_between_the_halves_of_an_exchange_is_the_whole_exchange() {
    let mut ws = Workspace::new();
    let dir = ws.path();
    fs::create_dir_all(dir.join("d1")).unwrap();
    fs::create_dir_all(dir.join("d2")).unwrap();
    fs::write(dir.join("d1/f"), "in d1\n").unwrap();
    fs::write(dir.join("d2/g"), "in d2\n").unwrap();
    ws.mount();
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, b"d1", -100, b"d2", 2) != 0:
    raise OSError(ctypes.get_errno(), "renameat2")
"#;
    let out = python_command(&dir, script).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let log = rw_ok(&ws, &["log", "--json"]);
    let halves: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(halves.len(), 2, "{log}");
    let first = halves[0]["id"].as_u64().unwrap().to_string();
    // After the exchange, d1 holds what d2 held, and the other way round.
    assert_eq!(rw_ok(&ws, &["cat", "--at", &first, "d1/g"]), "in d2\n");
    assert_eq!(rw_ok(&ws, &["cat", "--at", &first, "d2/f"]), "in d1\n");
    let at = dir.join(".rewind/at").join(&first);
    assert_eq!(fs::read_to_string(at.join("d1/g")).unwrap(), "in d2\n");
    assert_eq!(fs::read_to_string(at.join("d2/f")).unwrap(), "in d1\n");
    ws.unmount();
}
