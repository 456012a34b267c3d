//! The hostile pass's findings (issues 21 and 25): each test is the finding's reproduction,
//! through the real binary, the real mount and real programs, and fails without its fix.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Workspace, ok, rw, rw_ok, sync};

/// A shell script in `dir` with no REWIND_SESSION/REWIND_AGENT inherited from the test runner.
fn bash(dir: &Path, script: &str) -> Output {
    Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .output()
        .unwrap()
}

/// The session and agent `log --json` gives the last change of `path`.
fn attribution(ws: &Workspace, path: &str) -> (String, String) {
    let out = rw_ok(ws, &["log", path, "--json", "-n", "1"]);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    (
        v["session"].as_str().unwrap().to_string(),
        v["agent"].as_str().unwrap().to_string(),
    )
}

/// F3: a process that wrote and then exec'd a program with its own REWIND_SESSION/REWIND_AGENT
/// (`exec env REWIND_SESSION=Y tool`, or the last command of `bash -c`) is attributed by the new
/// program's environment, not the one cached for its pid.
#[test]
fn an_exec_is_attributed_by_the_new_programs_environment() {
    let mut ws = Workspace::new();
    ws.mount();
    // The sleep keeps the exec out of the few milliseconds in which a pid's answer is reused
    // without reading /proc (a burst of changes by one process): what is checked is the cache.
    let out = bash(
        &ws.path(),
        "echo a > x; sleep 0.2; exec env REWIND_SESSION=Y REWIND_AGENT=ag \
         python3 -c 'open(\"y\", \"w\").write(\"y\")'",
    );
    ok(out);
    sync(&ws);
    let (x_session, x_agent) = attribution(&ws, "x");
    assert_ne!(x_session, "Y");
    assert_eq!(x_agent, "unknown");
    assert_eq!(
        attribution(&ws, "y"),
        ("Y".to_string(), "ag".to_string()),
        "{}",
        rw_ok(&ws, &["log"])
    );
    let plan = rw(&ws, &["rollback", "--session", "Y", "--dry-run"]);
    assert!(ok(plan).contains('y'));
}

/// The id of the last change of `path`.
fn last_id(ws: &Workspace, path: &str) -> String {
    let out = rw_ok(ws, &["log", path, "--json", "-n", "1"]);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    v["id"].to_string()
}

/// F3b: a rollback's session is one nobody uses yet. A user's own `rollback-2` (changes made with
/// REWIND_SESSION) and `rollback-4` (a live `session start` with no change yet) are skipped, so
/// that the printed "undo it with" undoes exactly the rollback, never the user's work.
#[test]
fn a_rollback_never_joins_a_users_session_of_its_name() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    ok(bash(&dir, "echo q > q.txt"));
    sync(&ws);
    let out = rw_ok(&ws, &["undo", &last_id(&ws, "q.txt")]);
    assert!(out.contains("rollback-1"), "{out}");
    ok(bash(
        &dir,
        "REWIND_SESSION=rollback-2 bash -c 'echo usr > usr.txt'",
    ));
    ok(bash(&dir, "echo z > zz.txt"));
    sync(&ws);
    let out = rw_ok(&ws, &["undo", &last_id(&ws, "zz.txt")]);
    assert!(out.contains("rollback-3"), "{out}");
    let mine = rw_ok(&ws, &["log", "--session", "rollback-2"]);
    assert!(
        mine.contains("usr.txt") && !mine.contains("zz.txt"),
        "{mine}"
    );
    let plan = rw_ok(&ws, &["rollback", "--session", "rollback-3", "--dry-run"]);
    assert!(!plan.contains("usr.txt"), "{plan}");

    // A process registered as `rollback-4` that has changed nothing yet.
    let mut holder = Command::new("python3")
        .arg("-c")
        .arg(
            "import os,sys\n\
             fd=os.open('.rewind/ctl',os.O_RDWR)\n\
             os.write(fd,b'session start rollback-4\\n')\n\
             os.lseek(fd,0,0); os.read(fd,4096); os.close(fd)\n\
             print('ready',flush=True); sys.stdin.read()\n\
             open('held.txt','w').write('h')\n",
        )
        .current_dir(&dir)
        .env_remove("REWIND_SESSION")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    ok(bash(&dir, "echo w > ww.txt"));
    sync(&ws);
    let out = rw_ok(&ws, &["undo", &last_id(&ws, "ww.txt")]);
    assert!(out.contains("rollback-5"), "{out}");
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    sync(&ws);
    assert_eq!(attribution(&ws, "held.txt").0, "rollback-4");
    let plan = rw_ok(&ws, &["rollback", "--session", "rollback-5", "--dry-run"]);
    assert!(!plan.contains("held.txt"), "{plan}");
}

/// `rewind mount DIR --store STORE` with the workspace's data home; a mount that should have
/// been refused but was not is taken down again before the test looks at the result.
fn try_mount(ws: &Workspace, dir: &Path, store: &Path) -> Output {
    let out = ws
        .command(&["mount"])
        .arg(dir)
        .arg("--store")
        .arg(store)
        .output()
        .unwrap();
    if crate::common::is_mounted(dir) {
        let _ = ws.command(&["unmount", "--force"]).arg(dir).output();
    }
    out
}

/// F3c: a workspace inside a mounted one (or a store inside one) is refused at mount, with a
/// message naming the outer workspace, instead of a mount where every open fails with ELOOP.
#[test]
fn a_workspace_inside_a_mounted_one_is_refused() {
    let mut outer = Workspace::new();
    std::fs::create_dir(outer.path().join("inner")).unwrap();
    outer.mount();
    let inner = outer.path().join("inner");
    let elsewhere = tempfile::tempdir().unwrap();
    let out = try_mount(&outer, &inner, &elsewhere.path().join("inner-store"));
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("inside the mounted workspace")
            && err.contains(&*outer.path().to_string_lossy()),
        "{err}"
    );
    assert!(!crate::common::is_mounted(&inner));
    // The outer workspace still works, and the inner folder is an ordinary one of it.
    ok(bash(&inner, "echo y > g; cat g"));

    // A workspace of its own, but with its store inside the mounted one.
    let other = Workspace::new();
    let out = try_mount(&other, &other.path(), &outer.path().join("st"));
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&*outer.path().to_string_lossy()), "{err}");
    assert!(!outer.path().join("st").exists());
}

/// F11: a workspace's own `.rewind` would be hidden by the control folder while mounted: the
/// mount is refused and says so; an empty `.rewind` hides nothing and is mounted quietly.
#[test]
fn a_workspaces_own_rewind_folder_is_not_hidden_silently() {
    let ws = Workspace::new();
    let own = ws.path().join(".rewind");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("mine.txt"), "my own data\n").unwrap();
    let out = try_mount(&ws, &ws.path(), &ws.store());
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(".rewind") && err.contains("move"), "{err}");
    assert_eq!(
        std::fs::read_to_string(own.join("mine.txt")).unwrap(),
        "my own data\n"
    );

    std::fs::remove_file(own.join("mine.txt")).unwrap();
    let mut ws = ws;
    let out = ws
        .command(&["mount"])
        .arg(ws.path())
        .arg("--store")
        .arg(ws.store())
        .output()
        .unwrap();
    ws.mark_mounted();
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert!(!crate::common::stderr(&out).contains(".rewind"));
    assert!(ws.path().join(".rewind/status").exists());
}

/// F5: `.rewind/at/` lists only the checkpoints that can be opened: one that gc put out of reach
/// is left out (its folder is ENOENT), a later one is listed.
#[test]
fn at_lists_no_checkpoint_gc_put_out_of_reach() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    ok(bash(&dir, "echo one > a"));
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "cp1"]);
    ok(bash(&dir, "echo two > a"));
    ok(bash(&dir, "echo three > a; echo b > b"));
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "cp2"]);
    let listed = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(".rewind/at"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listed(), ["cp1", "cp2"]);
    // gc removes the two older changes of a: the state right after the first (cp1) is gone.
    rw_ok(&ws, &["gc", "--max-size", "0"]);
    assert!(!dir.join(".rewind/at/cp1").exists());
    assert_eq!(listed(), ["cp2"]);
    for name in listed() {
        std::fs::read_dir(dir.join(".rewind/at").join(name)).unwrap();
    }
}

/// F7: an MCP request whose id the server cannot carry (1.5, a number beyond 64 bits) gets the
/// JSON-RPC 2.0 error with `"id": null`, not one without an `id` member; good ids still work.
#[test]
fn mcp_answers_an_unusable_id_with_id_null() {
    let mut ws = Workspace::new();
    ws.mount();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    let lines = [
        init,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":99999999999999999999999,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
    ];
    let mut child = ws
        .command(&["mcp"])
        .current_dir(ws.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors: Vec<&serde_json::Value> = answers
        .iter()
        .filter(|a| a.get("error").is_some())
        .collect();
    assert_eq!(errors.len(), 2, "{answers:?}");
    for e in errors {
        assert_eq!(e.get("id"), Some(&serde_json::Value::Null), "{e}");
        assert_eq!(e["error"]["code"], -32600, "{e}");
    }
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 7 && a.get("result").is_some()),
        "{answers:?}"
    );
}

/// `rewind hook ARGS` in the workspace with `payload` on stdin.
fn hook(ws: &Workspace, args: &[&str], payload: &[u8]) -> Output {
    use std::io::Write;
    let mut child = ws
        .command(&["hook"])
        .args(args)
        .current_dir(ws.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(payload).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// F8: a hook given a garbage payload, or an event rewind does not know, still exits 0 but says
/// so in one line on stderr; a good payload of a known event says nothing.
#[test]
fn a_hook_says_why_it_recorded_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    let out = hook(&ws, &["claude", "UserPromptSubmit"], b"garbage{{{");
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        err.starts_with("rewind hook: ") && err.contains("not JSON") && err.lines().count() == 1,
        "{err:?}"
    );
    let out = hook(&ws, &["claude", "Bogus"], b"{}");
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        err.contains("\"Bogus\"") && err.contains("SessionStart") && err.lines().count() == 1,
        "{err:?}"
    );
    let start = format!(
        r#"{{"session_id":"s9","hook_event_name":"SessionStart","cwd":"{}","source":"startup"}}"#,
        ws.path().display()
    );
    let out = hook(&ws, &["claude", "SessionStart"], start.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(crate::common::stderr(&out), "");
}

/// F10: SessionEnd ends what SessionStart registered. An "agent" (a python process running its
/// hooks as children, as an agent does) starts a session, writes, ends the session, writes
/// again: only the first write is the agent's session; the second is the mount's default.
#[test]
fn session_end_ends_the_agents_registration() {
    let mut ws = Workspace::new();
    ws.mount();
    let script = r#"
import json, os, subprocess, sys
rewind = sys.argv[1]
def hook(event):
    payload = {"session_id": "s2", "hook_event_name": event, "cwd": os.getcwd()}
    r = subprocess.run([rewind, "hook", "claude", event], input=json.dumps(payload).encode(),
                       capture_output=True)
    assert r.returncode == 0 and r.stderr == b"", (event, r)
hook("SessionStart")
open("during.txt", "w").write("d")
hook("SessionEnd")
open("after.txt", "w").write("a")
"#;
    let probe = ws.command(&["status"]);
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .arg(crate::common::REWIND)
        .current_dir(ws.path())
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT");
    for (k, v) in probe.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    ok(cmd.output().unwrap());
    sync(&ws);
    assert_eq!(
        attribution(&ws, "during.txt"),
        ("claude-s2".to_string(), "claude".to_string())
    );
    let (session, agent) = attribution(&ws, "after.txt");
    assert_ne!(session, "claude-s2", "{}", rw_ok(&ws, &["log"]));
    assert_eq!(agent, "unknown");
}

/// F9: the daemon dies while a command is in flight (a long rollback, stopped and then killed
/// once the CLI has the control file open): the CLI says the daemon stopped and what to check,
/// not a raw "Software caused connection abort", and exits 2, not 1 ("done in part").
#[test]
fn a_command_whose_daemon_dies_says_so_clearly() {
    let mut ws = Workspace::new();
    ws.mount();
    ok(bash(
        &ws.path(),
        "mkdir d; for i in $(seq 3000); do echo $i > d/f$i; done",
    ));
    sync(&ws);
    let daemon = crate::common::daemon_pid(&ws);
    let mut cli = ws
        .command(&["-C"])
        .arg(ws.path())
        .args(["rollback", "--since", "1", "--force"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ctl = ws.path().join(".rewind/ctl");
    assert!(
        crate::common::wait_for(60, || crate::common::holds_open(cli.id(), &ctl)),
        "the rollback never opened .rewind/ctl"
    );
    // SAFETY: kill(2) of the daemon this test mounted.
    unsafe { libc::kill(daemon, libc::SIGSTOP) };
    assert!(
        cli.try_wait().unwrap().is_none(),
        "the rollback finished before the daemon could be stopped"
    );
    // SAFETY: as above.
    unsafe { libc::kill(daemon, libc::SIGKILL) };
    let out = cli.wait_with_output().unwrap();
    let err = crate::common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("daemon") && err.contains("rewind status") && err.contains("daemon.log"),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
}

/// F0b: without passthrough the kernel keeps its own size of a file it has open. A rollback
/// that rewrote such a file in place left a reader seeing the restored content padded with
/// zeros to the old size, and a forced rollback under an `O_APPEND` writer left a hole of
/// zeros before the writer's next append. Now a file open for reading is replaced (the reader
/// keeps the content it had, new opens get the restored one), and one open for writing is
/// refused with the writer named, even with `--force`, and left as it is.
#[test]
fn a_rollback_without_passthrough_never_shows_zeros_to_open_handles() {
    let mut ws = Workspace::new();
    ws.mount_with(&["--no-passthrough"]);
    assert!(rw_ok(&ws, &["status"]).contains("data path: writeback"));
    let dir = ws.path();
    bash(
        &dir,
        "printf 'original short\\n' > h; printf 'orig2\\n' > g",
    );
    sync(&ws);
    bash(
        &dir,
        "REWIND_SESSION=S6 bash -c 'printf \"changed by S6, a much longer line than before\\n\" > h; printf \"S6 wrote this\\n\" > g'",
    );
    sync(&ws);
    let script = format!(
        r#"
import os, subprocess, sys
reader = os.open('h', os.O_RDONLY)
before = os.pread(reader, 200, 0)
writer = os.open('g', os.O_WRONLY | os.O_APPEND)
os.write(writer, b'appended\n')
out = subprocess.run([{rewind:?}, 'rollback', '--session', 'S6', '--force'], capture_output=True, text=True)
print('code', out.returncode)
print('stdout', out.stdout.replace('\n', ' | '))
print('stderr', out.stderr.replace('\n', ' | '))
print('reader', os.pread(reader, 200, 0))
print('new', open('h', 'rb').read())
os.write(writer, b'after\n')
os.close(writer)
print('g', open('g', 'rb').read())
"#,
        rewind = crate::common::REWIND
    );
    let text = ok(Command::new("python3")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .env_remove("REWIND_SESSION")
        .output()
        .unwrap());
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} line in:\n{text}"))
            .to_string()
    };
    // The reader keeps the file it opened, whole and without zeros.
    assert_eq!(
        line("reader"),
        "b'changed by S6, a much longer line than before\\n'",
        "{text}"
    );
    // A new open reads the restored content.
    assert_eq!(line("new"), "b'original short\\n'", "{text}");
    // The written file is left as it is, and the writer named: done in part.
    assert_eq!(line("code"), "1", "{text}");
    // A skip of the plan, so the dry run says it too (plan::without_passthrough_...).
    assert!(
        line("stdout").contains("skip     g: held open for writing by process")
            && line("stdout").contains("without passthrough"),
        "{text}"
    );
    assert_eq!(
        line("g"),
        "b'S6 wrote this\\nappended\\nafter\\n'",
        "{text}"
    );
    assert!(!text.contains("\\x00"), "{text}");
}
