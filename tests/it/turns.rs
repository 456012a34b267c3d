//! Turns as the unit of work (issue 20): a session id bound to the agent process that registered
//! it, the conversation kept with each turn, export one commit per turn, and what an agent can
//! ask over MCP. Stand-in agents are python processes that run the hook commands `rewind agent
//! install` wrote, through bash, as Claude Code does.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::{REWIND, Workspace};

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
        let mut ws = Workspace::new();
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
        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
    }

    fn rw(&self, args: &[&str]) -> Output {
        let mut cmd = self.ws.command(args);
        cmd.current_dir(self.ws.path())
            .env("HOME", self.home())
            .env("PATH", self.path_var());
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.rw(args);
        assert!(
            out.status.success(),
            "rewind {args:?} failed ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
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
    let mine = turns.iter().find(|t| t["session"] == session.as_str()).unwrap();
    assert_eq!(mine["prompt"], "first agent's prompt");
    assert_eq!(mine["turn"], 1);
    assert!(mine["end_id"].is_u64(), "closed by its own Stop: {mine}");
    let theirs = turns.iter().find(|t| t["session"] == apart.as_str()).unwrap();
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
    assert!(plan.contains("first-a.txt") && !plan.contains("second.txt"), "{plan}");

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
