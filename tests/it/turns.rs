//! Turns as the unit of work (issue 20): a session id bound to the agent process that registered
//! it, the conversation kept with each turn, export one commit per turn, and what an agent can
//! ask over MCP. Stand-in agents are python processes that run the hook commands `rewind agent
//! install` wrote, through bash, as Claude Code does.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::{REWIND, Workspace, ok, rw_env};

/// Runs the steps of a plan: `hook` (every installed command of that event, its payload on
/// stdin), `write` (a file, from this process), `signal` / `wait` (files in the plan's sync
/// folder, to order two stand-ins), `transcript` (append lines to a file).
const STANDIN: &str = r#"
import json, os, subprocess, sys, time

plan = json.load(open(sys.argv[1]))
os.chdir(plan["workspace"])
with open(os.path.join(plan["workspace"], ".claude", "settings.json")) as f:
    config = json.load(f)

def commands(event):
    return [h["command"] for e in config.get("hooks", {}).get(event, [])
            for h in e.get("hooks", []) if h.get("type") == "command"]

for step in plan["steps"]:
    if "hook" in step:
        for cmd in commands(step["hook"]):
            r = subprocess.run(["bash", "-c", cmd], input=json.dumps(step["payload"]).encode(),
                               capture_output=True)
            if r.returncode != 0:
                sys.exit("hook %s exited %d" % (step["hook"], r.returncode))
    elif "write" in step:
        with open(step["write"], "w") as f:
            f.write(step["content"])
    elif "transcript" in step:
        os.makedirs(os.path.dirname(step["transcript"]), exist_ok=True)
        with open(step["transcript"], "a") as f:
            for line in step["lines"]:
                f.write(json.dumps(line) + "\n")
    elif "signal" in step:
        open(os.path.join(plan["sync"], step["signal"]), "w").close()
    elif "wait" in step:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(plan["sync"], step["wait"])):
            if time.time() > deadline:
                sys.exit("waited for %s in vain" % step["wait"])
            time.sleep(0.005)
"#;

/// A mounted workspace with Claude Code's hooks installed, and a home and sync folder for
/// stand-ins.
struct Scene {
    ws: Workspace,
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        Scene::prepared("true")
    }

    /// Like `new`, with the workspace first made by `setup` (bash, in the workspace).
    fn prepared(setup: &str) -> Scene {
        let mut ws = Workspace::new();
        let out = Command::new("bash")
            .arg("-ec")
            .arg(setup)
            .current_dir(ws.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "setup: {out:?}");
        ws.mount();
        let dir = tempfile::Builder::new()
            .prefix("rewind-turns-")
            .tempdir()
            .unwrap();
        for sub in ["sync", "home", "bin"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        fs::write(dir.path().join("standin.py"), STANDIN).unwrap();
        let sc = Scene { ws, dir };
        sc.ok(&["agent", "install", "claude"]);
        sc
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn data_home(&self) -> PathBuf {
        self.ws.store().parent().unwrap().join("data")
    }

    fn hook_log(&self) -> String {
        fs::read_to_string(self.data_home().join("rewind/hook.log")).unwrap_or_default()
    }

    /// The PATH stand-ins and commands run with: `rewind` found in the test build's folder.
    fn path_var(&self) -> String {
        let bin = Path::new(REWIND).parent().unwrap();
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// `rewind ARGS` in the workspace with the scene's home (where the agent's hooks are).
    fn rw(&self, args: &[&str]) -> Output {
        let home = self.home();
        rw_env(&self.ws, args, &[("HOME", home.to_str().unwrap())])
    }

    fn ok(&self, args: &[&str]) -> String {
        ok(self.rw(args))
    }

    fn json(&self, args: &[&str]) -> Vec<Value> {
        self.ok(args)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Start a stand-in agent on `steps`.
    fn spawn(&self, name: &str, steps: Vec<Value>) -> Child {
        let plan = json!({
            "workspace": self.ws.path(),
            "sync": self.dir.path().join("sync"),
            "steps": steps,
        });
        let plan_path = self.dir.path().join(format!("{name}.plan.json"));
        fs::write(&plan_path, serde_json::to_vec(&plan).unwrap()).unwrap();
        Command::new("python3")
            .arg(self.dir.path().join("standin.py"))
            .arg(plan_path)
            .current_dir(self.ws.path())
            .env("XDG_DATA_HOME", self.data_home())
            .env("HOME", self.home())
            .env("PATH", self.path_var())
            .env_remove("REWIND_SESSION")
            .env_remove("REWIND_AGENT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn finish(child: Child) {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "stand-in failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A Claude Code payload of `event` for session `sid`.
fn payload(event: &str, sid: &str, extra: Value) -> Value {
    let mut v = json!({
        "session_id": sid,
        "cwd": "/somewhere",
        "hook_event_name": event,
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn hook(event: &str, sid: &str, extra: Value) -> Value {
    json!({"hook": event, "payload": payload(event, sid, extra)})
}

fn prompt(sid: &str, text: &str) -> Value {
    hook("UserPromptSubmit", sid, json!({"prompt": text}))
}

fn write(path: &str, content: &str) -> Value {
    json!({"write": path, "content": content})
}

/// Paths of the changes a turn made, from `log --turn T --json`.
fn turn_paths(sc: &Scene, turn: &str) -> Vec<String> {
    sc.json(&["log", "--turn", turn, "--json"])
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

/// Two agents at once, the second sending the first's session id: the second neither opens
/// nor closes the first's turns, and its work is recorded in a session of its own; once the
/// first has exited, a third process with that id (a resumed session) takes it over.
#[test]
fn a_session_id_belongs_to_the_process_tree_that_registered_it() {
    let sc = Scene::new();
    let sid = "5e55-10a1-b0nd";
    let session = format!("claude-{sid}");
    let first = sc.spawn(
        "first",
        vec![
            hook("SessionStart", sid, json!({"source": "startup"})),
            prompt(sid, "first agent's prompt"),
            write("first-a.txt", "a\n"),
            json!({"signal": "first-open"}),
            json!({"wait": "second-done"}),
            write("first-b.txt", "b\n"),
            hook("Stop", sid, json!({})),
            json!({"signal": "first-stopped"}),
            json!({"wait": "may-exit"}),
        ],
    );
    let second = sc.spawn(
        "second",
        vec![
            json!({"wait": "first-open"}),
            hook("SessionStart", sid, json!({"source": "startup"})),
            prompt(sid, "second agent's prompt"),
            write("second.txt", "2\n"),
            // Sent while the first agent's turn is open: it must not close it.
            hook("Stop", sid, json!({})),
            json!({"signal": "second-done"}),
            json!({"wait": "first-stopped"}),
        ],
    );
    let second_pid = second.id();
    Scene::finish(second);
    // The first agent is still running here (waiting): its id is still bound to it.
    let stray = sc.spawn("stray", vec![hook("Stop", sid, json!({}))]);
    Scene::finish(stray);
    fs::write(sc.dir.path().join("sync/may-exit"), "").unwrap();
    Scene::finish(first);

    let apart = format!("{session}~pid{second_pid}");
    let turns = sc.json(&["turns", "--json"]);
    assert_eq!(turns.len(), 2, "{turns:#?}");
    let mine = turns
        .iter()
        .find(|t| t["session"] == session.as_str())
        .unwrap();
    assert_eq!(mine["prompt"], "first agent's prompt");
    assert_eq!(mine["turn"], 1);
    assert!(mine["end_id"].is_u64(), "closed by its own Stop: {mine}");
    let theirs = turns
        .iter()
        .find(|t| t["session"] == apart.as_str())
        .unwrap();
    assert_eq!(theirs["prompt"], "second agent's prompt");
    assert!(theirs["end_id"].is_u64(), "{theirs}");

    // Each turn holds its own agent's work, and only it: the first turn stayed open across
    // the second agent's Stop, so it holds both of its writes.
    assert_eq!(
        turn_paths(&sc, &format!("{session}:1")),
        ["first-a.txt", "first-b.txt"]
    );
    assert_eq!(turn_paths(&sc, &format!("{apart}:1")), ["second.txt"]);
    let plan = sc.ok(&["rollback", "--turn", &format!("{session}:1"), "--dry-run"]);
    assert!(
        plan.contains("first-a.txt") && !plan.contains("second.txt"),
        "{plan}"
    );

    // What happened is in the hook log: the second agent registered apart, and the stray
    // Stop (from a process that never registered) refused.
    let log = sc.hook_log();
    assert!(
        log.contains(&format!("recorded as session {apart}")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("claude Stop") && l.contains("is not one of them")),
        "{log}"
    );

    // The first agent has exited: a resumed session (a new process, same id) takes it over.
    let resumed = sc.spawn(
        "resumed",
        vec![
            hook("SessionStart", sid, json!({"source": "resume"})),
            prompt(sid, "resumed prompt"),
            write("resumed.txt", "r\n"),
            hook("Stop", sid, json!({})),
        ],
    );
    Scene::finish(resumed);
    let turns = sc.json(&["turns", "--session", &session, "--json"]);
    assert_eq!(turns.len(), 2, "{turns:#?}");
    assert_eq!(turns[1]["prompt"], "resumed prompt");
    assert!(turns[1]["end_id"].is_u64());
    assert_eq!(turn_paths(&sc, &format!("{session}:2")), ["resumed.txt"]);
}

/// `rewind mcp` spoken to in raw lines: every malformed message is answered as JSON-RPC 2.0
/// says, a huge argument gets a clear message, and the server goes on serving.
#[test]
fn mcp_answers_malformed_messages_with_json_rpc_errors() {
    use std::io::{BufRead, BufReader, Write};

    let mut ws = Workspace::new();
    fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    ws.mount();
    fs::write(ws.path().join("a.txt"), "b\n").unwrap();
    let mut child = ws
        .command(&["mcp"])
        .current_dir(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |line: &[u8]| {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut exchange = |send: &mut dyn FnMut(&[u8]), line: &[u8]| -> Value {
        send(line);
        let mut answer = String::new();
        assert!(
            stdout.read_line(&mut answer).unwrap() > 0,
            "server closed stdout"
        );
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
    };
    let mut exchange = |line: &[u8]| exchange(&mut send, line);
    let init = exchange(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "rewind", "{init}");
    // A notification is not answered: the answer read next is the ping's.
    let pong = exchange(
        b"{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}\n\
          {\"jsonrpc\": \"2.0\", \"id\": \"p\", \"method\": \"ping\"}",
    );
    assert_eq!(pong["id"], "p", "{pong}");

    let error = |v: &Value| (v["error"]["code"].as_i64(), v["id"].clone());
    let parse = exchange(b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": ");
    assert_eq!(error(&parse), (Some(-32700), Value::Null), "{parse}");
    assert!(
        parse.as_object().unwrap().contains_key("id"),
        "\"id\": null is there"
    );
    let batch = exchange(b"[{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"ping\"}]");
    assert_eq!(error(&batch), (Some(-32600), Value::Null), "{batch}");
    let version = exchange(br#"{"jsonrpc": "1.0", "id": 4, "method": "ping"}"#);
    assert_eq!(error(&version), (Some(-32600), json!(4)), "{version}");
    let no_method = exchange(br#"{"jsonrpc": "2.0", "id": 5}"#);
    assert_eq!(error(&no_method), (Some(-32600), json!(5)), "{no_method}");
    let array_args = exchange(
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "history", "arguments": ["a.txt"]}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(error(&array_args), (Some(-32602), json!(6)), "{array_args}");
    assert!(
        array_args["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`arguments` must be an object"),
        "{array_args}"
    );
    let array_params =
        exchange(br#"{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}"#);
    assert_eq!(
        error(&array_params),
        (Some(-32602), json!(7)),
        "{array_params}"
    );

    // A 2 MB argument: a tool error that says what is wrong.
    let huge = exchange(
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "history", "arguments": {"path": "x".repeat(2 << 20)}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(huge["id"], 8, "{}", &huge.to_string()[..200]);
    assert_eq!(huge["result"]["isError"], true);
    let said = huge["result"]["content"][0]["text"].as_str().unwrap();
    assert!(said.contains("`path` is 2097152 bytes long"), "{said}");
    assert!(
        !said.contains("Argument list too long") && said.len() < 200,
        "{said}"
    );
    // A line over the server's limit: answered, not dropped.
    let mut big = br#"{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"pad": ""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 9 << 20));
    big.extend_from_slice(b"\"}}");
    let too_long = exchange(&big);
    assert_eq!(error(&too_long), (Some(-32600), Value::Null), "{too_long}");

    // Still serving.
    let history = exchange(
        json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
            "params": {"name": "history", "arguments": {}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(history["id"], 10);
    assert_ne!(history["result"]["isError"], true, "{history}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Waits (bounded) until `turns --show T --json` has a conversation: it is kept by the daemon
/// after it answers the Stop hook.
fn conversation_of(sc: &Scene, turn: &str) -> Option<String> {
    for _ in 0..400 {
        // The turn itself may not have begun yet.
        let out = sc.rw(&["turns", "--show", turn, "--json"]);
        if out.status.success() {
            let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
            if let Some(c) = shown["conversation"].as_str() {
                return Some(c.to_string());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    None
}

/// Claude Code's transcript is kept with each turn: `turns --show` and
/// `.rewind/turns/S/N/conversation` give what the turn added to it; a transcript outside the
/// agent's own folder, or missing, is not read and fails nothing.
#[test]
fn each_turn_keeps_the_conversation_it_added() {
    let sc = Scene::new();
    let sid = "c0nv-e75a";
    let session = format!("claude-{sid}");
    let transcript = sc
        .home()
        .join(".claude/projects/-ws")
        .join(format!("{sid}.jsonl"));
    let path = transcript.to_str().unwrap().to_string();
    let said =
        |role: &str, text: &str| json!({"type": role, "message": {"role": role, "content": text}});
    let stop = |t: &str| hook("Stop", sid, json!({"transcript_path": t}));
    let agent = sc.spawn(
        "talker",
        vec![
            hook("SessionStart", sid, json!({"source": "startup", "transcript_path": path})),
            prompt(sid, "add a greeting"),
            json!({"transcript": path, "lines": [said("user", "add a greeting"), said("assistant", "I wrote hello.txt")]}),
            write("hello.txt", "hello\n"),
            stop(&path),
            json!({"wait": "first-kept"}),
            prompt(sid, "make it louder"),
            json!({"transcript": path, "lines": [said("user", "make it louder"), said("assistant", "Now it shouts")]}),
            write("hello.txt", "HELLO\n"),
            stop(&path),
        ],
    );
    let first = conversation_of(&sc, &format!("{session}:1")).expect("turn 1's conversation");
    fs::write(sc.dir.path().join("sync/first-kept"), "").unwrap();
    Scene::finish(agent);
    assert!(first.contains("I wrote hello.txt"), "{first}");
    let second = conversation_of(&sc, &format!("{session}:2")).expect("turn 2's conversation");
    assert!(second.contains("Now it shouts"), "{second}");
    assert!(
        !second.contains("I wrote hello.txt"),
        "only what turn 2 added: {second}"
    );
    assert_eq!(second.lines().count(), 2, "{second}");

    let text = sc.ok(&["turns", "--show", &format!("{session}:2")]);
    assert!(text.contains("prompt: make it louder"), "{text}");
    assert!(text.contains("Now it shouts"), "{text}");
    let file = fs::read_to_string(
        sc.ws
            .path()
            .join(".rewind/turns")
            .join(&session)
            .join("2/conversation"),
    )
    .unwrap();
    assert_eq!(file, second);
    let listing: Vec<String> =
        fs::read_dir(sc.ws.path().join(".rewind/turns").join(&session).join("1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
    assert!(listing.contains(&"conversation".to_string()), "{listing:?}");

    // Outside the agent's folder (a file of the same user's, elsewhere in the home), and
    // missing: nothing read, the hooks as quiet as ever.
    let elsewhere = sc.home().join("notes.jsonl");
    fs::write(&elsewhere, "{\"secret\": 1}\n").unwrap();
    let other = "0the-r5e5";
    let agent = sc.spawn(
        "others",
        vec![
            prompt(other, "one"),
            hook("Stop", other, json!({"transcript_path": elsewhere})),
            prompt(other, "two"),
            hook(
                "Stop",
                other,
                json!({"transcript_path": sc.home().join(".claude/gone.jsonl")}),
            ),
        ],
    );
    Scene::finish(agent);
    sc.ok(&["sync"]);
    for n in [1, 2] {
        let shown = sc.json(&["turns", "--show", &format!("claude-{other}:{n}"), "--json"]);
        assert_eq!(shown[0]["conversation"], Value::Null, "{shown:?}");
    }
    assert_eq!(sc.hook_log(), "", "no hook failed");
}

/// A transcript path whose home is a symlink into the workspace (`/tmp/h/.claude/t.jsonl`,
/// `/tmp/h -> WORKSPACE`) is not read: its words are outside the workspace, but reading it
/// would have the daemon make syscalls on its own mount (and keep a workspace file as the
/// conversation).
#[test]
fn a_transcript_through_a_symlink_into_the_workspace_is_not_read() {
    let sc = Scene::new();
    fs::create_dir_all(sc.ws.path().join(".claude")).unwrap();
    fs::write(sc.ws.path().join(".claude/t.jsonl"), "{\"inside\": 1}\n").unwrap();
    let link = sc.dir.path().join("linked-home");
    std::os::unix::fs::symlink(sc.ws.path(), &link).unwrap();
    let through = link.join(".claude/t.jsonl");
    sc.ok(&["turn", "begin", "--session", "s1", "--agent", "claude"]);
    sc.ok(&[
        "turn",
        "end",
        "--session",
        "s1",
        "--transcript",
        through.to_str().unwrap(),
    ]);
    // The reading runs after the daemon answers: wait until it either kept it or said why not.
    let log = sc.ws.store().join("daemon.log");
    let mut said = String::new();
    for _ in 0..400 {
        said = fs::read_to_string(&log).unwrap_or_default();
        let shown = sc.json(&["turns", "--show", "s1:1", "--json"]);
        if said.contains("s1:1: conversation not kept") || shown[0]["conversation"] != Value::Null {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let shown = sc.json(&["turns", "--show", "s1:1", "--json"]);
    assert_eq!(shown[0]["conversation"], Value::Null, "{shown:?}");
    assert!(said.contains("without symlinks"), "{said}");
}

/// `rewind agent install claude --local` writes `.claude/settings.local.json`; the hooks run
/// `rewind` from PATH (checked at install); agents with no local settings say so.
#[test]
fn agent_install_local_and_rewind_from_path() {
    let ws = Workspace::new();
    let run = |args: &[&str], path: Option<&std::ffi::OsStr>| {
        let mut cmd = ws.command(args);
        cmd.current_dir(ws.path());
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        cmd.output().unwrap()
    };
    // Not on PATH: refused, with what to do, and nothing written.
    let out = run(
        &["agent", "install", "claude"],
        Some("/usr/bin:/bin".as_ref()),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`rewind` is not on PATH"), "{err}");
    assert!(!ws.path().join(".claude").exists());

    let out = run(&["agent", "install", "claude", "--local"], None);
    assert!(out.status.success(), "{out:?}");
    assert!(!ws.path().join(".claude/settings.json").exists());
    let local: Value =
        serde_json::from_slice(&fs::read(ws.path().join(".claude/settings.local.json")).unwrap())
            .unwrap();
    let stop = local["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert_eq!(stop, "rewind hook claude Stop || true");
    // The project file gets the same, not the binary's path.
    assert!(run(&["agent", "install", "claude"], None).status.success());
    let text = fs::read_to_string(ws.path().join(".claude/settings.json")).unwrap();
    assert!(
        text.contains("\"rewind hook claude UserPromptSubmit || true\""),
        "{text}"
    );
    assert!(!text.contains(REWIND), "{text}");

    for agent in ["codex", "gemini", "cursor", "opencode"] {
        let out = run(&["agent", "install", agent, "--local"], None);
        assert_eq!(out.status.code(), Some(2), "{agent}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("has no local settings file"), "{agent}: {err}");
    }

    // Uninstall takes rewind's hooks out of both.
    assert!(
        run(&["agent", "uninstall", "claude"], None)
            .status
            .success()
    );
    assert!(
        !ws.path().join(".claude").exists(),
        "both files held only rewind's hooks"
    );
}

/// Over MCP (rmcp's client, as agents speak it): `whoami` finds the caller's session and turn
/// from its process tree, `show` one change, `cat` a file at a point in pages, and `history`
/// is compact unless asked for `full`.
#[tokio::test]
async fn mcp_whoami_show_cat_and_compact_history() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    let sc = Scene::new();
    // This test process plays the agent: its hooks run through bash, so it is the process the
    // session is registered to, and the MCP server it starts below runs in its tree.
    let sid = "mcp-wh0am1";
    let run_hook = |event: &str, payload: Value| {
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("rewind hook claude {event}"))
            .current_dir(sc.ws.path())
            .env("XDG_DATA_HOME", sc.data_home())
            .env("PATH", sc.path_var())
            .env_remove("REWIND_SESSION")
            .env_remove("REWIND_AGENT")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(
            &mut child.stdin.take().unwrap(),
            payload.to_string().as_bytes(),
        )
        .unwrap();
        assert!(child.wait().unwrap().success());
    };
    run_hook("SessionStart", payload("SessionStart", sid, json!({})));
    run_hook(
        "UserPromptSubmit",
        payload("UserPromptSubmit", sid, json!({"prompt": "grow the file"})),
    );
    let big: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
    fs::write(sc.ws.path().join("big.txt"), "small\n").unwrap();
    // The create is recorded at the file's last RELEASE, which the kernel sends after close()
    // returns: a second open before it arrives joins the same write episode, and the two
    // writes are one create. Wait for the create so the next write is a modify of its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !sc
        .json(&["log", "--json"])
        .iter()
        .any(|c| c["path"] == "big.txt" && c["kind"] == "create")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the create of big.txt never recorded"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fs::write(sc.ws.path().join("big.txt"), &big).unwrap();
    sc.ok(&["sync"]);

    let mut cmd = tokio::process::Command::new(REWIND);
    cmd.arg("mcp")
        .current_dir(sc.ws.path())
        .env("XDG_DATA_HOME", sc.data_home())
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT");
    let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let call = |tool: &'static str, args: Value| {
        let client = &client;
        async move {
            let r = client
                .call_tool(
                    CallToolRequestParams::new(tool)
                        .with_arguments(args.as_object().unwrap().clone()),
                )
                .await
                .unwrap();
            let text: String = r
                .content
                .iter()
                .filter_map(|c| c.as_text())
                .map(|t| t.text.as_str())
                .collect();
            assert_ne!(r.is_error, Some(true), "{tool} {args}: {text}");
            text
        }
    };

    let me: Value = serde_json::from_str(&call("whoami", json!({})).await).unwrap();
    let session = format!("claude-{sid}");
    assert_eq!(me["session"], session.as_str(), "{me}");
    assert_eq!(me["agent"], "claude");
    assert_eq!(me["turn"], format!("{session}:1").as_str());
    assert_eq!(me["prompt"], "grow the file");
    assert_eq!(me["default"], false);

    // Compact history by default: the fields an agent needs, short hashes.
    let compact = call("history", json!({})).await;
    let full = call("history", json!({"full": true})).await;
    let changes: Vec<Value> = compact
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let grown = changes
        .iter()
        .find(|c| c["path"] == "big.txt" && c["kind"] == "modify")
        .expect("the modify of big.txt");
    assert_eq!(grown["turn"], 1);
    assert_eq!(grown["session"], session.as_str());
    assert_eq!(grown["after"].as_str().unwrap().len(), 12);
    assert!(grown.get("pid").is_none() && grown.get("uid").is_none());
    let per = |text: &str| text.len() / text.lines().count();
    eprintln!(
        "history bytes per change: full {}, compact {} ({} changes)",
        per(&full),
        per(&compact),
        changes.len()
    );
    assert!(
        per(&compact) * 2 < per(&full),
        "compact {compact}\nfull {full}"
    );

    // show: one change, with its diff.
    let id = grown["id"].as_u64().unwrap();
    let shown = call("show", json!({"id": id})).await;
    assert!(
        shown.contains("big.txt") && shown.contains("+line 9999"),
        "{shown}"
    );

    // cat: the file before the change, and now in 64 KiB pages.
    let before = call(
        "cat",
        json!({"path": "big.txt", "at": (id - 1).to_string()}),
    )
    .await;
    assert_eq!(before, "small\n");
    let mut read = String::new();
    let mut offset = 0;
    loop {
        let page = call("cat", json!({"path": "big.txt", "offset": offset})).await;
        match page.rsplit_once("\n[rewind: ") {
            Some((body, tail)) => {
                read += body;
                offset = tail
                    .split("\"offset\": ")
                    .nth(1)
                    .and_then(|t| {
                        t.trim_end_matches(|c: char| !c.is_ascii_digit())
                            .parse()
                            .ok()
                    })
                    .unwrap_or_else(|| panic!("no next offset in {tail:?}"));
            }
            None => {
                read += &page;
                break;
            }
        }
    }
    assert_eq!(read, big);
    client.cancel().await.unwrap();
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `rewind export --session S` makes one commit per turn: the prompt as its message, then the
/// turn, its files and change ids (and with `--with-conversation` what was said), by the agent
/// at the turn's end. Each commit's tree is `.rewind/at/<the turn's end>`, and the crate builds
/// at each, though not between a turn's edits. `--per-change` gives one commit a change.
#[test]
fn export_makes_one_commit_per_turn() {
    let sc = Scene::prepared(
        "mkdir src
         printf '[package]\\nname = \"tiny\"\\nversion = \"0.1.0\"\\nedition = \"2021\"\\n' > Cargo.toml
         printf 'pub fn a() -> u32 { 1 }\\n' > src/lib.rs
         printf 'target/\\n.claude/\\n' > .gitignore
         git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
    );
    let sid = "exp0-7ur5";
    let session = format!("claude-{sid}");
    let transcript = sc
        .home()
        .join(".claude/projects/-ws")
        .join(format!("{sid}.jsonl"));
    let path = transcript.to_str().unwrap().to_string();
    let stop = hook("Stop", sid, json!({"transcript_path": path}));
    let said = |text: &str| json!({"type": "assistant", "message": {"role": "assistant", "content": text}});
    // Each turn first declares a module (the crate does not build), then writes it.
    let agent = sc.spawn(
        "exporter",
        vec![
            prompt(sid, "add module b"),
            write("src/lib.rs", "mod b;\npub fn a() -> u32 { 1 }\n"),
            write("src/b.rs", "pub fn b() -> u32 { 2 }\n"),
            json!({"transcript": path, "lines": [said("I added module b")]}),
            stop.clone(),
            json!({"wait": "kept"}),
            prompt(sid, "add module c"),
            write("src/lib.rs", "mod b;\nmod c;\npub fn a() -> u32 { 1 }\n"),
            write("src/c.rs", "pub fn c() -> u32 { crate::b::b() }\n"),
            json!({"transcript": path, "lines": [said("I added module c")]}),
            stop,
        ],
    );
    conversation_of(&sc, &format!("{session}:1")).expect("turn 1's conversation");
    fs::write(sc.dir.path().join("sync/kept"), "").unwrap();
    Scene::finish(agent);
    conversation_of(&sc, &format!("{session}:2")).expect("turn 2's conversation");
    let turns = sc.json(&["turns", "--session", &session, "--json"]);
    assert_eq!(turns.len(), 2, "{turns:?}");

    let out = sc.ok(&[
        "export",
        "--session",
        &session,
        "--branch",
        "review",
        "--with-conversation",
    ]);
    assert!(out.contains("2 commits from 4 changes"), "{out}");
    let root = sc.ws.path();
    let commits = git(&root, &["rev-list", "--reverse", "HEAD..review"]);
    let commits: Vec<&str> = commits.lines().collect();
    assert_eq!(commits.len(), 2, "{commits:?}");
    let scratch = tempfile::tempdir().unwrap();
    for ((commit, turn), prompt) in commits
        .iter()
        .zip(&turns)
        .zip(["add module b", "add module c"])
    {
        let msg = git(&root, &["log", "-1", "--format=%B", commit]);
        assert!(msg.starts_with(&format!("{prompt}\n")), "{msg}");
        let n = turn["turn"].as_u64().unwrap();
        assert!(
            msg.contains(&format!(
                "rewind turn {session}:{n}, agent claude, 2 changes"
            )),
            "{msg}"
        );
        let ids: Vec<String> = sc
            .json(&["log", "--turn", &format!("{session}:{n}"), "--json"])
            .iter()
            .map(|c| c["id"].to_string())
            .collect();
        assert!(
            msg.contains(&format!("Changes: {}\n", ids.join(" "))),
            "{msg}"
        );
        assert!(msg.contains("  src/lib.rs\n"), "{msg}");
        assert!(
            msg.contains(&format!("I added module {}", &prompt[11..])),
            "{msg}"
        );
        let author = git(&root, &["log", "-1", "--format=%an %at", commit]);
        let end_s = {
            let end = turn["end_time"].as_str().unwrap();
            let out = Command::new("date")
                .args(["-d", end, "+%s"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        assert_eq!(
            author.trim(),
            format!("claude {end_s}"),
            "by the agent at the turn's end"
        );

        // The commit's tree is the workspace at the turn's end (what git tracks of it).
        let at = root.join(".rewind/at").join(turn["end_id"].to_string());
        for file in git(&root, &["ls-tree", "-r", "--name-only", commit]).lines() {
            let committed = git(&root, &["show", &format!("{commit}:{file}")]);
            assert_eq!(
                committed,
                fs::read_to_string(at.join(file)).unwrap(),
                "{file}"
            );
        }
        for e in fs::read_dir(at.join("src")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            git(&root, &["cat-file", "-e", &format!("{commit}:src/{name}")]);
        }
        // And it builds.
        let dir = scratch.path().join(n.to_string());
        fs::create_dir(&dir).unwrap();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "git -C '{}' archive {commit} | tar -x -C '{}'",
                root.display(),
                dir.display()
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let build = Command::new("cargo")
            .args(["build", "--offline", "--quiet"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            // Not a build folder shared with other builds (whose lock it would wait on).
            .env_remove("CARGO_BUILD_BUILD_DIR")
            .output()
            .unwrap();
        assert!(
            build.status.success(),
            "turn {n} does not build: {}",
            String::from_utf8_lossy(&build.stderr)
        );
    }

    // One commit a change when asked: 4, the first of which does not build.
    let out = sc.ok(&[
        "export",
        "--session",
        &session,
        "--branch",
        "each",
        "--per-change",
    ]);
    assert!(out.contains("4 commits"), "{out}");
}
