//! Round 35: a hostile pass on 897db83, living in the workspace as a user would. Each test
//! failed before the fix named in its comment.

use std::fs;

use crate::common::{Workspace, rw, rw_ok, stderr, stdout, sync};

/// A checkpoint named `+1` is reached by its name, not read as change 1: `cat --at`,
/// `.rewind/at/` and a rollback's plan all answer for the checkpoint.
// Failed before a point's id had to be digits only (`Point::parse` took `u64::from_str`,
// which reads `+1` as 1): `cat --at +1` gave the first version, exit 0.
#[test]
fn a_checkpoint_named_plus_a_number_is_that_checkpoint() {
    let mut ws = Workspace::new();
    ws.mount();
    for v in ["v1", "v2", "v3"] {
        fs::write(ws.path().join("f"), format!("{v}\n")).unwrap();
        sync(&ws);
    }
    rw_ok(&ws, &["checkpoint", "+1"]);
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "+1"]), "v3\n");
    assert_eq!(
        fs::read_to_string(ws.path().join(".rewind/at/+1/f")).unwrap(),
        "v3\n"
    );
    let dry = rw(&ws, &["rollback", "--to", "+1", "--dry-run"]);
    assert!(stdout(&dry).starts_with("nothing to roll back"), "{dry:?}");
    ws.unmount();
}

/// A time that is no time rewind can name (past the year 2554, or a day that does not exist)
/// and an id too large for one are refused saying so, not as a checkpoint that does not
/// exist; a duration longer ago than 1970 is the state before anything was recorded.
// Failed before `Point::parse` told things shaped as times and ids from names: `there is no
// checkpoint named "2999-01-01T00:00:00Z"`.
#[test]
fn points_shaped_as_times_that_are_none_say_why() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "v1\n").unwrap();
    sync(&ws);
    for (at, why) in [
        (
            "2999-01-01T00:00:00Z",
            "rewind's times run from 1970 to 2554",
        ),
        ("2026-02-30T00:00:00Z", "no valid RFC 3339 time"),
        ("99999999999999999999", "no change id is that large"),
    ] {
        let out = rw(&ws, &["cat", "f", "--at", at]);
        assert_eq!(out.status.code(), Some(2), "{at}: {out:?}");
        assert!(
            stderr(&out).contains(why) && !stderr(&out).contains("checkpoint"),
            "{at}: {}",
            stderr(&out)
        );
    }
    let out = rw(&ws, &["cat", "f", "--at", "1000000d"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("did not exist"), "{}", stderr(&out));
    let refused = rw(&ws, &["checkpoint", "2026-02-30T00:00:00Z"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    ws.unmount();
}

/// A session or agent that made no change is refused by name (exit 2), where it used to
/// select nothing and read as "already rolled back"; an id as `REWIND_SESSION` gave it names
/// the session it was recorded under.
// Failed before the selection asked for the session and agent (`existing_session`,
// `existing_agent`): `rollback --session sessAA` said `nothing to roll back`, exit 0, and
// `rollback --session a/b` too, although `rewind sessions` listed it (as `%a%2Fb`).
#[test]
fn a_session_or_agent_no_change_has_is_refused_by_name() {
    let mut ws = Workspace::new();
    ws.mount();
    crate::common::sh(
        &ws.path(),
        "echo base > f; REWIND_SESSION=sessA REWIND_AGENT=agentA sh -c 'echo a > f'; \
         REWIND_SESSION=a/b sh -c 'echo b > g'; true",
    );
    sync(&ws);
    for args in [
        &["rollback", "--session", "sessAA", "--dry-run"][..],
        &["rollback", "--session", "sessAA"],
        &["log", "--session", "no-such-session"],
        &["log", "--agent", "agentZ"],
        &["export", "--session", "nope"],
    ] {
        let out = rw(&ws, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            stderr(&out).contains("there is no session") || stderr(&out).contains("agent"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(fs::read_to_string(ws.path().join("f")).unwrap(), "a\n");
    let dry = rw_ok(&ws, &["rollback", "--session", "a/b", "--dry-run"]);
    assert!(dry.contains("remove   g"), "{dry}");
    assert!(rw_ok(&ws, &["log", "--agent", "agentA"]).contains("agentA@sessA"));
    assert!(rw_ok(&ws, &["log", "--session", "sess"]).contains("agentA@sessA"));
    ws.unmount();
}

/// A store with one damaged table block (a bad sector under the stored content) records what
/// is edited afterwards, and mounts again: the content whose lookup hits the damaged block is
/// stored anew.
// Failed before a damaged block counted as "not stored" (`store::blobs::stored_len`): the
// append to `a.txt` was never recorded while `status` said `recording` (the daemon log said
// `cannot record the end of a write: … Corruption: block checksum mismatch`), and the next
// mount failed with the same error.
#[test]
fn edits_after_a_damaged_store_block_are_recorded_and_the_store_mounts_again() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    let p = |name: &str| dir.join(name);
    for i in 1..=50 {
        fs::write(p("f.txt"), format!("v{i}\n")).unwrap();
        let mut a = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p("a.txt"))
            .unwrap();
        std::io::Write::write_all(&mut a, format!("{i}\n").as_bytes()).unwrap();
    }
    fs::write(p("g.txt"), "g\n").unwrap();
    sync(&ws);
    // Twice: RocksDB's write buffers go to table files.
    ws.unmount();
    ws.mount();
    ws.unmount();
    let mut flipped = 0;
    for entry in fs::read_dir(ws.store()).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "sst") {
            let mut bytes = fs::read(&path).unwrap();
            // The table of content: a zstd frame in its first data block.
            if bytes[..bytes.len().min(300)]
                .windows(4)
                .any(|w| w == [0x28, 0xb5, 0x2f, 0xfd])
            {
                bytes[10] ^= 0x55;
                fs::write(&path, bytes).unwrap();
                flipped += 1;
            }
        }
    }
    assert!(flipped > 0, "no table of content found to damage");
    ws.mount();
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(p("a.txt"))
        .unwrap();
    std::io::Write::write_all(&mut a, b"51\n").unwrap();
    drop(a);
    fs::write(p("f.txt"), "v51\n").unwrap();
    fs::remove_file(p("g.txt")).unwrap();
    sync(&ws);
    let now = fs::read(p("a.txt")).unwrap();
    assert!(now.ends_with(b"50\n51\n"));
    let last = crate::record::log(&ws)
        .into_iter()
        .rfind(|c| c["path"] == "a.txt")
        .unwrap();
    assert_eq!(
        last["after"]["hash"],
        rewind::store::Hash::of(&now).to_string().as_str(),
        "the append is not the newest version of a.txt: {last}"
    );
    ws.unmount();
    ws.mount();
    assert_eq!(rw_ok(&ws, &["cat", "a.txt"]).as_bytes(), &now[..]);
    ws.unmount();
}

/// Sends SIGCONT to the daemon when dropped, so that a failing test leaves no stopped daemon
/// for the workspace's unmount to wait on.
pub(crate) struct LetGo(pub(crate) i32);

impl Drop for LetGo {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the test's own daemon.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// With its daemon stopped (SIGSTOP), `status`, `log` and `unmount` say so at once, naming
/// the pid and how to let it go on, instead of waiting with the workspace; once it goes on,
/// everything answers again.
// Failed before the CLI asked whether the daemon is stopped (`cli::stopped_daemon`): each
// command waited in the kernel until the daemon was let go (over 120 s in the report).
#[test]
fn commands_on_a_stopped_daemon_say_so_at_once() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "v1\n").unwrap();
    sync(&ws);
    let pid = crate::common::daemon_pid(&ws);
    // SAFETY: kill(2) of the test's own daemon.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let let_go = LetGo(pid);
    assert!(
        crate::common::wait_for(5, || fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.contains(") T "))),
        "the daemon did not stop"
    );
    let ws_arg = ws.path().to_str().unwrap().to_string();
    for args in [
        vec!["status"],
        vec!["log", "-n", "1"],
        vec!["cat", "f"],
        vec!["unmount", &ws_arg],
    ] {
        let out = crate::trust::rw_within(&ws, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(
            stderr(&out).contains(&format!("(pid {pid}) is stopped"))
                && stderr(&out).contains(&format!("kill -CONT {pid}")),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    drop(let_go);
    assert_eq!(rw_ok(&ws, &["cat", "f"]), "v1\n");
    ws.unmount();
}

/// Two sessions writing one file that both hold open: what the first wrote before the second
/// joined is the first's change, the rest the second's, so rolling back the first session
/// skips the file as changed later by the second instead of taking the second's write with
/// it.
// Failed before a writer of another session cut the episode it joined
// (`begin_write_held`): the log had one change by agentA, sessB none at all, and `rollback
// --session sessA` put the file back to `base`, B's line gone, exit 0.
#[test]
fn a_second_sessions_write_to_a_file_another_holds_open_is_its_own_change() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("shared.txt"), "base\n").unwrap();
    sync(&ws);
    let a = Appending::start(
        &ws,
        "shared.txt",
        "from A",
        &[("REWIND_SESSION", "sessA"), ("REWIND_AGENT", "agentA")],
    );
    crate::common::sh(
        &ws.path(),
        "REWIND_SESSION=sessB REWIND_AGENT=agentB sh -c 'echo \"from B\" >> shared.txt'; true",
    );
    a.close();
    sync(&ws);
    let whose: Vec<String> = crate::record::log(&ws)
        .iter()
        .filter(|c| c["path"] == "shared.txt")
        .map(|c| {
            format!(
                "{}@{}",
                c["agent"].as_str().unwrap(),
                c["session"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(whose[1..], ["agentA@sessA", "agentB@sessB"], "{whose:?}");
    let out = rw(&ws, &["rollback", "--session", "sessA"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout(&out).contains("skip     shared.txt: changed later by"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("shared.txt")).unwrap(),
        "base\nfrom A\nfrom B\n"
    );
    ws.unmount();
}

/// A session whose only work is an edit still in progress, and an agent gc removed every
/// change of, are still named: the rollback of the first speaks of its file held open, and
/// the log of the second says what gc removed, where "there is no session" would be wrong.
// Failed with the first version of `existing_session`, which knew only sessions with changes
// or turns (a review of it found these).
#[test]
fn sessions_with_only_an_edit_in_progress_or_only_removed_changes_are_named() {
    let mut ws = Workspace::new();
    ws.mount();
    crate::common::sh(
        &ws.path(),
        "echo base > f; echo one > old.txt; \
         REWIND_SESSION=old REWIND_AGENT=old-bot sh -c 'echo two > old.txt'; \
         echo three > old.txt",
    );
    sync(&ws);
    let gc = rw_ok(&ws, &["gc", "--keep", "0s"]);
    assert!(gc.starts_with("removed "), "{gc}");
    let log = rw(&ws, &["log", "--agent", "old-bot"]);
    assert_eq!(log.status.code(), Some(0), "{log:?}");
    assert!(stdout(&log).contains("gc removed"), "{log:?}");
    let busy = Appending::start(&ws, "f", "busy", &[("REWIND_SESSION", "busy")]);
    // Its marker is written once the edit has lasted a moment.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let dry = rw(&ws, &["rollback", "--session", "busy", "--dry-run"]);
    busy.close();
    assert_eq!(dry.status.code(), Some(1), "{dry:?}");
    assert!(stdout(&dry).contains("skip     f:"), "{dry:?}");
    ws.unmount();
}

/// A process holding `name` open for appending, in the environment `env`, once it has written
/// `line` to it (flushed); [`close`](Appending::close) lets it close the file and end.
struct Appending(std::process::Child);

impl Appending {
    fn start(ws: &Workspace, name: &str, line: &str, env: &[(&str, &str)]) -> Appending {
        let script = format!(
            "import sys\nf = open({name:?}, 'a')\nf.write({line:?} + '\\n')\nf.flush()\n\
             print('written', flush=True)\nsys.stdin.readline()\nf.close()"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .current_dir(ws.path())
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut said,
        )
        .unwrap();
        assert_eq!(said, "written\n", "{name}");
        Appending(child)
    }

    fn close(mut self) {
        drop(self.0.stdin.take());
        assert!(self.0.wait().unwrap().success());
    }
}
