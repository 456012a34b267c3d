//! Round 36: a hostile pass on f270498, living in the workspace as a user would. Each test
//! failed before the fix named in its comment.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Workspace, rw, rw_ok, stderr, stdout, sync};

/// A process holding `name` open for appending, in the environment `env`, that writes each
/// line it is given (flushed) and says so.
struct Writer {
    child: Child,
    said: BufReader<ChildStdout>,
}

impl Writer {
    fn start(ws: &Workspace, name: &str, env: &[(&str, &str)]) -> Writer {
        let script = format!(
            "import sys\nf = open({name:?}, 'a')\nprint('open', flush=True)\n\
             for line in sys.stdin:\n    f.write(line)\n    f.flush()\n    \
             print('written', flush=True)\nf.close()"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .current_dir(ws.path())
            .env_remove("REWIND_SESSION")
            .env_remove("REWIND_AGENT")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let said = BufReader::new(child.stdout.take().unwrap());
        let mut writer = Writer { child, said };
        writer.expect("open");
        writer
    }

    fn expect(&mut self, what: &str) {
        let mut line = String::new();
        self.said.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), what);
    }

    fn write(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        self.expect("written");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn close(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// `agent@session` of each change of `path`, oldest first.
fn whose(ws: &Workspace, path: &str) -> Vec<String> {
    crate::record::log(ws)
        .iter()
        .filter(|c| c["path"] == path)
        .map(|c| {
            format!(
                "{}@{}",
                c["agent"].as_str().unwrap(),
                c["session"].as_str().unwrap()
            )
        })
        .collect()
}

/// A mounted workspace whose `shared.txt` (`base`, recorded) agentA of sessA holds open,
/// having appended `A1`.
fn agent_a_writing() -> (Workspace, Writer) {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("shared.txt"), "base\n").unwrap();
    sync(&ws);
    let mut a = Writer::start(
        &ws,
        "shared.txt",
        &[("REWIND_SESSION", "sessA"), ("REWIND_AGENT", "agentA")],
    );
    a.write("A1");
    (ws, a)
}

/// A second agent that only opens a file for writing (`touch`) while the first holds it open
/// and writes on: nothing is the second's, everything written is the first's, and rolling
/// back the second's session touches nothing.
// Failed before the edit went back to the first writer when the newcomer's handle was
// released (`Recorder::hand_back`): `A2`, written by A after B's `touch`, was recorded as
// agentB's, and `rollback --session sessB` removed it, exit 0.
#[test]
fn a_newcomer_that_writes_nothing_leaves_the_edit_to_the_first_writer() {
    let (mut ws, mut a) = agent_a_writing();
    crate::common::sh(
        &ws.path(),
        "REWIND_SESSION=sessB REWIND_AGENT=agentB touch shared.txt",
    );
    a.write("A2");
    a.close();
    sync(&ws);
    let whose = whose(&ws, "shared.txt");
    assert!(
        whose.len() > 1 && whose[1..].iter().all(|w| w == "agentA@sessA"),
        "{whose:?}"
    );
    let out = rw(&ws, &["rollback", "--session", "sessB"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        fs::read_to_string(ws.path().join("shared.txt")).unwrap(),
        "base\nA1\nA2\n"
    );
    ws.unmount();
}

/// A second agent appends to a file the first holds open, and leaves: its line is its
/// change, and what the first writes after is the first's again. While the first still
/// holds the file, a rollback names it, not the second, which is gone, as the holder.
// Failed before the edit went back to the first writer (`Recorder::hand_back`): the changes
// were agentA, agentB, and `A2` went with agentB's; the rollback's skip named the second
// writer's pid, a process that no longer existed.
#[test]
fn what_the_first_writer_writes_after_a_newcomer_left_is_the_first_writers() {
    let (mut ws, mut a) = agent_a_writing();
    crate::common::sh(
        &ws.path(),
        "REWIND_SESSION=sessB REWIND_AGENT=agentB sh -c 'echo B1 >> shared.txt'",
    );
    a.write("A2");
    // Its marker is written once the edit has lasted a moment.
    std::thread::sleep(Duration::from_millis(300));
    let dry = rw(&ws, &["rollback", "--session", "sessA", "--dry-run"]);
    assert!(
        stdout(&dry).contains(&format!(
            "held open for writing by process {} (python3) of session sessA",
            a.pid()
        )),
        "{dry:?}"
    );
    a.close();
    sync(&ws);
    assert_eq!(
        whose(&ws, "shared.txt")[1..],
        ["agentA@sessA", "agentB@sessB", "agentA@sessA"]
    );
    let b = crate::record::log(&ws)
        .iter()
        .find(|c| c["session"] == "sessB")
        .map(|c| c["id"].to_string())
        .unwrap();
    assert_eq!(
        rw_ok(&ws, &["cat", "--at", &b, "shared.txt"]),
        "base\nA1\nB1\n"
    );
    ws.unmount();
}

/// An empty session or agent name selects nothing (an unset shell variable), and an empty
/// `REWIND_SESSION` is no session of its own. (A name that is one session's listed name and
/// another's id means the listed one, as `rewind sessions` shows it: the other is reached by
/// its own listed name, `names::a_session_id_that_is_not_a_name_is_mapped_and_kept`.)
// Failed before `existing_session` refused the empty name: `rollback --session ""` matched
// every session as a prefix and removed `g`, `h` and `k`, exit 0; and before an empty
// variable counted as unset, `REWIND_SESSION=` recorded its change in a session named `%`.
#[test]
fn empty_session_and_agent_names_select_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    crate::common::sh(
        &ws.path(),
        "REWIND_SESSION=a/b sh -c 'echo x > g'; REWIND_SESSION=%a%2Fb sh -c 'echo y > h'; \
         REWIND_SESSION= sh -c 'echo z > k'",
    );
    sync(&ws);
    for args in [
        &["rollback", "--session", ""][..],
        &["rollback", "--agent", ""],
        &["export", "--session=", "--branch", "review"],
        &["log", "--session", ""],
    ] {
        let out = rw(&ws, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let why = stderr(&out);
        assert!(why.contains("name is empty"), "{args:?}: {why}");
    }
    for f in ["g", "h", "k"] {
        assert!(ws.path().join(f).exists(), "{f}");
    }
    for listed_or_id in ["a/b", "%a%2Fb"] {
        let dry = rw_ok(&ws, &["rollback", "--session", listed_or_id, "--dry-run"]);
        assert!(dry.contains("remove   g") && !dry.contains(" h"), "{dry}");
    }
    let dry = rw_ok(&ws, &["rollback", "--session", "%%25a%252Fb", "--dry-run"]);
    assert!(dry.contains("remove   h") && !dry.contains(" g"), "{dry}");
    let k: Vec<String> = crate::record::log(&ws)
        .iter()
        .filter(|c| c["path"] == "k")
        .map(|c| c["session"].as_str().unwrap().to_string())
        .collect();
    assert!(k.len() == 1 && k[0] != "%", "{k:?}");
    ws.unmount();
}

/// A daemon started from a binary of another name (a copy, `rw`) and stopped is said to be
/// stopped at once, by `status`, `unmount` and a second `mount` of the workspace alike.
// Failed before the registration kept the daemon's start time (`Registration::live_daemon`):
// the check asked for a process named `rewind`, so `status` and `log` waited on the mount,
// and plain `unmount` went ahead; `mount` of the workspace waited in `statfs` either way.
#[test]
fn a_stopped_daemon_is_told_whatever_its_binary_is_called() {
    let mut ws = Workspace::new();
    let copy = ws.path().parent().unwrap().join("rw");
    fs::copy(crate::common::REWIND, &copy).unwrap();
    let out = Command::new(&copy)
        .arg("mount")
        .arg(ws.path())
        .arg("--store")
        .arg(ws.store())
        .env("XDG_DATA_HOME", ws.path().parent().unwrap().join("data"))
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    ws.mark_mounted();
    fs::write(ws.path().join("f"), "v1\n").unwrap();
    sync(&ws);
    let pid = crate::common::daemon_pid(&ws);
    assert!(
        fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains("(rw)")),
        "the daemon is not named rw"
    );
    // SAFETY: kill(2) of the test's own daemon.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let let_go = crate::hostile35::LetGo(pid);
    assert!(
        crate::common::wait_for(5, || fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.contains(") T "))),
        "the daemon did not stop"
    );
    let ws_arg = ws.path().to_str().unwrap().to_string();
    let store_arg = ws.store().to_str().unwrap().to_string();
    for args in [
        vec!["status"],
        vec!["log", "-n", "1"],
        vec!["unmount", &ws_arg],
        vec!["mount", &ws_arg, "--store", &store_arg],
    ] {
        let began = Instant::now();
        let out = crate::trust::rw_within(&ws, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(
            stderr(&out).contains(&format!("(pid {pid}) is stopped")),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(began.elapsed() < Duration::from_secs(5), "{args:?}");
    }
    drop(let_go);
    assert_eq!(rw_ok(&ws, &["cat", "f"]), "v1\n");
    ws.unmount();
}
