//! Trust III, items 4, 7 and 8 (issue 25): `rewind agent install` and `uninstall` stay inside
//! the workspace whatever symlinks lie there; a hook answers and exits whether or not its stdin
//! is closed and whether or not a daemon answers; and names: `export --branch`, a
//! `REWIND_SESSION` that is not a name, `checkpoint now`, `log -n 0`. All through the real
//! binary, the real mount and real processes.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rewind::agent::{Agent, reply};
use serde_json::Value;

use crate::common::{REWIND, Workspace, daemon_pid, ok, rw};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `rewind ARGS` run in `dir` with the workspace's data home.
fn rw_in(ws: &Workspace, dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = ws.command(args);
    cmd.current_dir(dir).envs(envs.iter().copied());
    cmd.output().unwrap()
}

#[track_caller]
fn refused(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains(says), "{out:?}");
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

// ---- 4. installs stay inside ---------------------------------------------------------------

/// Every entry below `dir` (symlinks not followed): its kind and content.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let what = if m.is_symlink() {
                format!("link {}", fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                todo.push(p.clone());
                "dir".into()
            } else {
                format!("file {}", text(&fs::read(&p).unwrap()))
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// The agent's folder in the workspace and the file in it that install writes.
fn config(agent: Agent) -> (&'static str, &'static str) {
    match agent {
        Agent::Claude => (".claude", "settings.json"),
        Agent::Codex => (".codex", "hooks.json"),
        Agent::Gemini => (".gemini", "settings.json"),
        Agent::Cursor => (".cursor", "hooks.json"),
        Agent::Opencode => (".opencode", "plugins/rewind.js"),
    }
}

fn agent_cmd(ws: &Workspace, action: &str, agent: Agent) -> Output {
    rw_in(ws, &ws.path(), &["agent", action, agent.as_str()], &[])
}

/// Install and uninstall `agent` with its folder, or its config file, a symlink that leads out
/// of the workspace (absolute, and relative through `..`): refused with exit 2 and a message,
/// and nothing outside changes. A symlink that stays inside is followed and stays a link.
fn stays_inside(agent: Agent) {
    let ws = Workspace::new();
    let root = ws.path();
    let outside = ws.plain();
    let (dir, file) = config(agent);

    // What the outside folder holds: the agent's real config, with rewind's hooks in it (as a
    // user's own install elsewhere would have them), for uninstall to be tempted by.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = Workspace::new();
    ok(agent_cmd(&other, "install", agent));
    let installed = other.path().join(dir);
    sh_ok(&format!(
        "cp -a {}/. {}/ && cp -a {}/. {}/",
        q(&installed),
        q(&outside),
        q(&installed),
        q(elsewhere.path())
    ));
    let before = (tree(&outside), tree(elsewhere.path()));
    let unchanged = |what: &str| {
        assert_eq!(
            (tree(&outside), tree(elsewhere.path())),
            before,
            "{agent} {what}: something outside the workspace changed"
        );
    };

    let links: [(&str, PathBuf, PathBuf); 3] = [
        ("folder, absolute", root.join(dir), outside.clone()),
        (
            "folder, relative",
            root.join(dir),
            PathBuf::from("../plain"),
        ),
        (
            "file, absolute",
            root.join(dir).join(file),
            elsewhere.path().join(file),
        ),
    ];
    for (what, link, target) in &links {
        let _ = fs::remove_dir_all(root.join(dir));
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, link).unwrap();
        for action in ["install", "uninstall"] {
            let out = agent_cmd(&ws, action, agent);
            refused(&out, "outside the workspace");
            unchanged(&format!("{action} through a {what} link"));
        }
        assert!(fs::symlink_metadata(link).unwrap().is_symlink());
    }

    // Inside: a folder linked to another folder of the workspace is followed, both ways of
    // writing the link, and stays a link.
    for target in [root.join("shared"), PathBuf::from("shared")] {
        let _ = fs::remove_dir_all(root.join(dir));
        let _ = fs::remove_dir_all(root.join("shared"));
        fs::create_dir(root.join("shared")).unwrap();
        std::os::unix::fs::symlink(&target, root.join(dir)).unwrap();
        ok(agent_cmd(&ws, "install", agent));
        let written = fs::read_to_string(root.join("shared").join(file)).unwrap();
        assert!(written.contains("hook"), "{written}");
        assert!(fs::symlink_metadata(root.join(dir)).unwrap().is_symlink());
        ok(agent_cmd(&ws, "uninstall", agent));
        assert!(!root.join("shared").join(file).exists());
        unchanged("install through a link inside");
    }
    drop(other);
}

fn q(p: &Path) -> String {
    shlex::try_quote(p.to_str().unwrap()).unwrap().into_owned()
}

fn sh_ok(script: &str) {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

#[test]
fn claude_install_stays_inside_the_workspace() {
    stays_inside(Agent::Claude);
}

#[test]
fn codex_install_stays_inside_the_workspace() {
    stays_inside(Agent::Codex);
}

#[test]
fn gemini_install_stays_inside_the_workspace() {
    stays_inside(Agent::Gemini);
}

#[test]
fn cursor_install_stays_inside_the_workspace() {
    stays_inside(Agent::Cursor);
}

#[test]
fn opencode_install_stays_inside_the_workspace() {
    stays_inside(Agent::Opencode);
}

// ---- 7. hooks are bounded --------------------------------------------------------------------

/// A payload of `agent`'s `event` from the fixtures, with session id `sid`.
fn payload(agent: Agent, event: &str, sid: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/agents")
        .join(agent.as_str())
        .join(format!("{event}.json"));
    let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    let o = v.as_object_mut().unwrap();
    for key in ["session_id", "conversation_id"] {
        if o.get(key)
            .is_some_and(|s| s.as_str().is_some_and(|s| !s.is_empty()))
        {
            o.insert(key.into(), Value::from(sid));
        }
    }
    serde_json::to_vec(&v).unwrap()
}

/// `rewind hook AGENT EVENT` started the way an agent starts it (through bash, in the
/// workspace), waiting for a line `go` on stdin before it runs the hook: so the shell is in
/// place before the test stops the daemon, as an agent's is.
fn hook_process(ws: &Workspace, agent: Agent, event: &str) -> Child {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "read -r go && exec {} hook {} {event}",
            q(Path::new(REWIND)),
            agent.as_str()
        ))
        .current_dir(ws.path())
        .env("XDG_DATA_HOME", ws.store().parent().unwrap().join("data"))
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for the hook to exit; a guard against a hang (generous: it is not a measure of speed).
#[track_caller]
fn hook_exits(child: &mut Child) -> (i32, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let threads = threads_of(child.id());
            let _ = child.kill();
            panic!("the hook did not exit (the agent would wait on it); its threads: {threads:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}

/// Each thread of `pid`: its state letter and what it waits in.
fn threads_of(pid: u32) -> Vec<(char, String)> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let stat = fs::read_to_string(dir.join("stat")).ok()?;
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some((
                state,
                fs::read_to_string(dir.join("wchan")).unwrap_or_default(),
            ))
        })
        .collect()
}

fn expected_stdout(agent: Agent, event: &str) -> String {
    reply(agent, event).map(|r| r + "\n").unwrap_or_default()
}

fn turns(ws: &Workspace) -> Vec<Value> {
    json_lines(&ok(rw(ws, &["turns", "--json"])))
}

/// The agent keeps its end of stdin open after the payload: the hook reads the one JSON value,
/// does its work (the turn is there) and exits with its reply while the pipe is still open.
#[test]
fn a_hook_returns_while_its_stdin_stays_open() {
    let mut ws = Workspace::new();
    ws.mount();
    for (agent, event) in [
        (Agent::Claude, "UserPromptSubmit"),
        (Agent::Gemini, "BeforeAgent"),
        (Agent::Cursor, "beforeSubmitPrompt"),
    ] {
        let sid = format!("open-stdin-{agent}");
        let mut child = hook_process(&ws, agent, event);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.write_all(&payload(agent, event, &sid)).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        // `stdin` is held open until after the hook has exited.
        let (code, out, err) = hook_exits(&mut child);
        drop(stdin);
        assert_eq!(
            (code, out.as_str()),
            (0, expected_stdout(agent, event).as_str()),
            "{err}"
        );
        assert_eq!(err, "", "{agent}");
        let session = format!("{agent}-{sid}");
        assert!(
            turns(&ws).iter().any(|t| t["session"] == session.as_str()),
            "{agent}: the prompt opened no turn: {:?}",
            turns(&ws)
        );
    }
}

/// SIGCONT for a stopped daemon, even when the test fails.
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid and a signal number.
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

/// A daemon that does not answer (stopped with SIGSTOP): the hook still gives the agent its
/// reply and exits 0, and says on stderr that nothing was recorded. Stdin closed or left open.
#[test]
fn a_hook_returns_when_the_daemon_does_not_answer() {
    let mut ws = Workspace::new();
    ws.mount();
    let pid = daemon_pid(&ws) as u32;
    let cases = [
        (Agent::Gemini, "BeforeTool", true),
        (Agent::Claude, "UserPromptSubmit", false),
        (Agent::Cursor, "beforeSubmitPrompt", true),
    ];
    let mut children: Vec<Child> = cases
        .iter()
        .map(|(agent, event, _)| hook_process(&ws, *agent, event))
        .collect();
    let stopped = Stopped(pid);
    // SAFETY: kill(2) with a pid and a signal number.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    // Stopped for good: every thread of it (a thread still running could take a request).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !threads_of(pid).iter().all(|(state, _)| *state == 'T') {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut open = Vec::new();
    for ((agent, event, keep_open), child) in cases.iter().zip(&mut children) {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin
            .write_all(&payload(*agent, event, "stopped-daemon"))
            .unwrap();
        if *keep_open {
            open.push(stdin);
        }
    }
    for ((agent, event, _), child) in cases.iter().zip(&mut children) {
        let (code, out, err) = hook_exits(child);
        assert_eq!(code, 0, "{agent} {event}: {err}");
        assert_eq!(out, expected_stdout(*agent, event), "{agent} {event}");
        // The hook cannot know whether the stopped daemon had read its request (then it will
        // carry it out when it runs again) or not (then the kill of the exchange withdrew it).
        assert!(
            err.ends_with("; nothing recorded\n")
                || err.ends_with("; not confirmed: the daemon may still record it\n"),
            "{agent} {event}: {err:?}"
        );
    }
    drop(open);
    drop(stopped);
    // The daemon goes on as before.
    ok(rw(&ws, &["sync"]));
}

/// Removes the file that holds the daemon's commands (`REWIND_TEST_HOLD_CTL`), whatever happens.
struct Released(PathBuf);

impl Drop for Released {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A daemon that took the hook's request and never answers it (a command held by the daemon's
/// test knob `REWIND_TEST_HOLD_CTL`): the request's maker waits in the kernel, uninterruptibly.
/// The hook still gives the agent its reply, exits 0 and says the event is not confirmed (the
/// daemon may still record it), while the request is still unanswered; the daemon goes on once the command is let go.
#[test]
fn a_hook_returns_when_the_daemon_took_its_request_and_never_answers() {
    let mut ws = Workspace::new();
    let hold = ws.store().parent().unwrap().join("hold");
    let taken = ws.store().parent().unwrap().join("hold.taken");
    let out = ws
        .command(&["mount"])
        .arg(ws.path())
        .arg("--store")
        .arg(ws.store())
        .env("REWIND_TEST_HOLD_CTL", &hold)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount: {}", text(&out.stderr));
    ws.mark_mounted();
    fs::write(&hold, b"").unwrap();
    let released = Released(hold.clone());
    let (agent, event) = (Agent::Claude, "UserPromptSubmit");
    let mut child = hook_process(&ws, agent, event);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.write_all(&payload(agent, event, "held")).unwrap();
    drop(stdin);
    let (code, out, err) = hook_exits(&mut child);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, expected_stdout(agent, event));
    // The request is in the daemon's hands: the hook must not say nothing was recorded.
    assert!(
        err.starts_with("rewind hook: no answer within 800 ms; gave up; ")
            && err.ends_with("; not confirmed: the daemon may still record it\n")
            && err.lines().count() == 1,
        "{err:?}"
    );
    // The daemon had taken the request, and it was still unanswered when the hook exited.
    assert!(taken.exists(), "the daemon did not take the hook's request");
    assert!(hold.exists());
    drop(released);
    ok(rw(&ws, &["sync"]));
}

/// No daemon at all (the workspace was mounted once, not now): exit 0, the reply, and a word on
/// stderr.
#[test]
fn a_hook_without_a_daemon_exits_0_and_says_so() {
    let mut ws = Workspace::new();
    ws.mount();
    ws.unmount();
    for (agent, event) in [
        (Agent::Claude, "PreToolUse"),
        (Agent::Gemini, "AfterTool"),
        (Agent::Codex, "Stop"),
    ] {
        let mut child = hook_process(&ws, agent, event);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin
            .write_all(&payload(agent, event, "no-daemon"))
            .unwrap();
        drop(stdin);
        let (code, out, err) = hook_exits(&mut child);
        assert_eq!((code, out), (0, expected_stdout(agent, event)), "{err}");
        assert!(
            err.contains("not mounted") && err.contains("nothing recorded"),
            "{agent}: {err:?}"
        );
    }
}

// ---- 8. names --------------------------------------------------------------------------------

fn git_env() -> [(&'static str, &'static str); 6] {
    [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_AUTHOR_NAME", "Human"),
        ("GIT_AUTHOR_EMAIL", "human@example.com"),
        ("GIT_COMMITTER_NAME", "Human"),
        ("GIT_COMMITTER_EMAIL", "human@example.com"),
    ]
}

fn sh_env(dir: &Path, envs: &[(&str, &str)], script: &str) {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .envs(git_env())
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

fn refs(root: &Path) -> String {
    let out = Command::new("git")
        .args(["for-each-ref", "--format=%(refname)"])
        .current_dir(root)
        .envs(git_env())
        .output()
        .unwrap();
    text(&out.stdout)
}

/// `--branch` takes NAME or refs/heads/NAME (the same branch), and no other ref.
#[test]
fn export_branch_is_a_name_or_refs_heads_name() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh_env(
        &root,
        &[],
        "git init -q -b main . && echo one > a.txt && git add -A && git commit -qm initial",
    );
    sh_env(&root, &[("REWIND_SESSION", "agent-s")], "echo two > a.txt");
    let export = |branch: &str| {
        rw_in(
            &ws,
            &root,
            &["export", "--session", "agent-s", "--branch", branch],
            &git_env(),
        )
    };
    let said = ok(export("refs/heads/review"));
    assert!(said.contains("branch review:"), "{said}");
    let listed = refs(&root);
    assert!(listed.lines().any(|r| r == "refs/heads/review"), "{listed}");
    assert!(!listed.contains("refs/heads/refs/"), "{listed}");
    ok(export("plain-name"));
    assert!(refs(&root).lines().any(|r| r == "refs/heads/plain-name"));
    // The same branch named the long way exists already.
    refused(&export("refs/heads/plain-name"), "exists");
    for other in [
        "refs/tags/v1",
        "refs/remotes/origin/x",
        "refs/heads/refs/heads/x",
        "refs/x",
    ] {
        refused(&export(other), "--branch takes NAME or refs/heads/NAME");
    }
    assert_eq!(
        refs(&root).lines().count(),
        3,
        "main, review, plain-name: {}",
        refs(&root)
    );
}

/// `REWIND_SESSION=a/b` is not a name: its changes land in a session of their own, named one
/// to one from it (not the mount's session, not a session named like the mapping), and
/// `rewind sessions` shows the id as given.
#[test]
fn a_session_id_that_is_not_a_name_is_mapped_and_kept() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh_env(&root, &[("REWIND_SESSION", "a/b")], "echo x > slash.txt");
    sh_env(
        &root,
        &[("REWIND_SESSION", "%a%2Fb")],
        "echo y > lookalike.txt",
    );
    sh_env(&root, &[("REWIND_SESSION", "now")], "echo z > now.txt");
    sh_env(&root, &[], "echo w > plain.txt");
    ok(rw(&ws, &["sync"]));
    let log = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let session_of = |path: &str| {
        log.iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path} not recorded: {log:?}"))["session"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mounts = session_of("plain.txt");
    let slash = session_of("slash.txt");
    let lookalike = session_of("lookalike.txt");
    let now = session_of("now.txt");
    assert_eq!(slash, "%a%2Fb");
    assert_ne!(
        lookalike, slash,
        "a name given as the mapping joined the mapped session"
    );
    let all = [&mounts, &slash, &lookalike, &now];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b, "{all:?}");
        }
    }

    let sessions = json_lines(&ok(rw(&ws, &["sessions", "--json"])));
    let given = |name: &str| {
        sessions
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no session {name}: {sessions:?}"))["given"]
            .clone()
    };
    assert_eq!(given(&slash), "a/b");
    assert_eq!(given(&lookalike), "%a%2Fb");
    assert_eq!(given(&now), "now");
    assert_eq!(given(&mounts), Value::Null);
    let listed = ok(rw(&ws, &["sessions"]));
    assert!(listed.contains("(given as \"a/b\")"), "{listed}");
    // The mapped name selects the session's changes.
    let only = json_lines(&ok(rw(&ws, &["log", "--json", "--session", &slash])));
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(only[0]["path"], "slash.txt");
}

/// `now` and whatever else reads as a point is refused as a checkpoint name (SPEC "Names");
/// `log -n 0` prints nothing.
#[test]
fn checkpoint_names_are_not_points_and_log_n_0_prints_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    sh_env(&root, &[], "echo 1 > a && echo 2 > b");
    ok(rw(&ws, &["sync"]));
    for point in ["now", "3", "10m", "2026-01-02T03:04:05Z"] {
        let out = rw(&ws, &["checkpoint", point]);
        refused(&out, "is not allowed");
    }
    ok(rw(&ws, &["checkpoint", "before"]));
    let all = ok(rw(&ws, &["log"]));
    assert_eq!(all.lines().count(), 2, "{all}");
    assert_eq!(ok(rw(&ws, &["log", "-n", "0"])), "");
    assert_eq!(ok(rw(&ws, &["log", "-n", "0", "--json"])), "");
    assert_eq!(ok(rw(&ws, &["log", "-n", "1"])).lines().count(), 1);
}

/// `rewind` and `external` are the agents of rollbacks and of edits made while unmounted. Given
/// from outside — `REWIND_AGENT`, `rewind run --agent`, a ctl `session start --agent` — they
/// are mapped as a session id that is not a name is (`%rewind`), with the value as given kept,
/// so a user's changes never pass for a rollback's or an unmounted edit's.
#[test]
fn rewinds_own_agent_names_given_from_outside_are_mapped() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let agent_env = |session, agent| [("REWIND_SESSION", session), ("REWIND_AGENT", agent)];
    sh_env(&root, &agent_env("s1", "rewind"), "echo a > env.txt");
    sh_env(&root, &agent_env("s2", "external"), "echo b > env2.txt");
    ok(rw(
        &ws,
        &[
            "run",
            "--session",
            "s3",
            "--agent",
            "rewind",
            "--",
            "sh",
            "-c",
            "echo c > run.txt",
        ],
    ));
    sh_env(
        &root,
        &[],
        "exec 3<>.rewind/ctl; echo 'session start s4 --agent external' >&3; cat <&3 >/dev/null; \
         exec 3>&-; echo d > ctl.txt; \
         exec 3<>.rewind/ctl; echo 'turn begin --session s4 --agent rewind --prompt=p' >&3; \
         cat <&3 >/dev/null; exec 3>&-",
    );
    ok(rw(&ws, &["sync"]));
    let log = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let of = |path: &str| {
        let c = log
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path} not recorded: {log:?}"));
        let s = |k: &str| c[k].as_str().unwrap().to_string();
        (s("kind"), s("session"), s("agent"))
    };
    let mapped = |session: &str, agent: &str| ("create".to_string(), session.into(), agent.into());
    assert_eq!(of("env.txt"), mapped("s1", "%rewind"));
    assert_eq!(of("env2.txt"), mapped("s2", "%external"));
    assert_eq!(of("run.txt"), mapped("s3", "%rewind"));
    assert_eq!(of("ctl.txt"), mapped("s4", "%external"));
    // Neither is selected as rewind's own; the mapped name selects them.
    assert_eq!(ok(rw(&ws, &["log", "--agent", "rewind"])), "");
    assert_eq!(ok(rw(&ws, &["log", "--agent", "external"])), "");
    let theirs = json_lines(&ok(rw(&ws, &["log", "--json", "--agent", "%rewind"])));
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    let sessions = json_lines(&ok(rw(&ws, &["sessions", "--json"])));
    let s1 = sessions.iter().find(|s| s["name"] == "s1").unwrap();
    assert_eq!(s1["agents_given"]["%rewind"], "rewind", "{s1}");
    let listed = ok(rw(&ws, &["sessions"]));
    assert!(
        listed.contains("(agent %external given as \"external\")"),
        "{listed}"
    );
    let turns = json_lines(&ok(rw(&ws, &["turns", "--json", "--session", "s4"])));
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0]["agent"], "%rewind", "{turns:?}");

    // A rollback's changes and an unmounted edit's are still the only ones under those names.
    let rolled = ok(rw(&ws, &["rollback", "--session", "s1"]));
    assert!(rolled.contains("remove   env.txt"), "{rolled}");
    ws.unmount();
    fs::write(root.join("offline.txt"), "e\n").unwrap();
    ws.mount();
    let rewinds = json_lines(&ok(rw(&ws, &["log", "--json", "--agent", "rewind"])));
    assert_eq!(rewinds.len(), 1, "{rewinds:?}");
    assert_eq!(rewinds[0]["kind"], "restore");
    let external = json_lines(&ok(rw(&ws, &["log", "--json", "--agent", "external"])));
    assert_eq!(external.len(), 1, "{external:?}");
    assert_eq!(external[0]["path"], "offline.txt");
}
