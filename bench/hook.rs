//! Hook benchmark: what an agent waits for on each of its hooks. The agent blocks on every
//! hook it runs, so this is latency the user sees on every prompt and tool call.
//!
//! Mounts a workspace, installs rewind's hooks for each agent whose hooks are shell commands
//! (`rewind agent install`), and runs the installed command strings exactly as the agent does
//! (through its shell, in the workspace, a realistic payload from the test fixtures on stdin),
//! cycling through the agent's events in order. Beside each hook it times `rewind --version`
//! through the same shell: the cost of starting the binary at all, which the hook cannot beat.
//!
//! `cargo bench --bench hook [-- --runs N]` (N hooks per agent, default 200). Needs root or
//! a usable `/dev/fuse` (it mounts).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rewind::agent::{Agent, events, is_rewind_command};
use serde_json::Value;

const REWIND: &str = env!("CARGO_BIN_EXE_rewind");
const AGENTS: [Agent; 4] = [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor];

/// The shell each agent runs a hook command with (src/agent/NOTES.md).
fn shell(agent: Agent) -> &'static [&'static str] {
    match agent {
        Agent::Claude | Agent::Gemini => &["bash", "-c"],
        Agent::Codex => &["bash", "-lc"],
        Agent::Cursor | Agent::Opencode => &["sh", "-c"],
    }
}

/// The config file `rewind agent install` writes, and whether its handlers are nested in
/// groups (`{"hooks": [...]}`) or flat (Cursor).
fn config_file(agent: Agent) -> (&'static str, bool) {
    match agent {
        Agent::Claude => (".claude/settings.json", true),
        Agent::Codex => (".codex/hooks.json", true),
        Agent::Gemini => (".gemini/settings.json", true),
        Agent::Cursor | Agent::Opencode => (".cursor/hooks.json", false),
    }
}

/// rewind's installed commands for `agent`, as (event, command), in the agent's event order.
fn installed(ws: &Path, agent: Agent) -> Vec<(String, String)> {
    let (rel, nested) = config_file(agent);
    let v: Value = serde_json::from_str(&fs::read_to_string(ws.join(rel)).unwrap()).unwrap();
    let mut out = Vec::new();
    for event in events(agent) {
        for entry in v["hooks"][*event].as_array().into_iter().flatten() {
            let handlers = if nested {
                entry["hooks"].as_array().cloned().unwrap_or_default()
            } else {
                vec![entry.clone()]
            };
            for h in handlers {
                if let Some(cmd) = h["command"]
                    .as_str()
                    .filter(|c| is_rewind_command(c, agent))
                {
                    out.push((event.to_string(), cmd.to_string()));
                }
            }
        }
    }
    out
}

/// The fixture payload of `agent`'s `event`, its session id replaced by `sid`.
fn payload(agent: Agent, event: &str, sid: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/agents")
        .join(agent.as_str())
        .join(format!("{event}.json"));
    let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    let o = v.as_object_mut().unwrap();
    for key in ["session_id", "conversation_id"] {
        if o.get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            o.insert(key.into(), Value::from(sid));
        }
    }
    serde_json::to_vec(&v).unwrap()
}

/// Run `cmd` through `shell` in `dir` with `stdin`, as an agent runs a hook; milliseconds.
fn run(shell: &[&str], cmd: &str, stdin: &[u8], dir: &Path, data: &Path) -> f64 {
    let start = Instant::now();
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .arg(cmd)
        .current_dir(dir)
        .env("XDG_DATA_HOME", data)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "`{cmd}` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed().as_secs_f64() * 1e3
}

/// Median, 90th percentile and maximum.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(200);

    let work = tempfile::Builder::new()
        .prefix("rewind-bench-hook-")
        .tempdir()
        .unwrap();
    let ws = work.path().join("ws");
    let data = work.path().join("data");
    fs::create_dir_all(&ws).unwrap();
    fs::write(ws.join("a.txt"), "a\n").unwrap();
    let rewind = |dir: &Path, args: &[&str]| {
        let out = Command::new(REWIND)
            .args(args)
            .current_dir(dir)
            .env("XDG_DATA_HOME", &data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rewind {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let store = work.path().join("store");
    rewind(
        work.path(),
        &[
            "mount",
            ws.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ],
    );

    let version = format!(
        "{} --version >/dev/null",
        fs::canonicalize(REWIND).unwrap().display()
    );
    let mut rows = Vec::new();
    for agent in AGENTS {
        rewind(&ws, &["agent", "install", agent.as_str()]);
        let cmds = installed(&ws, agent);
        assert!(!cmds.is_empty(), "no rewind hook installed for {agent}");
        let sid = format!("bench-{}-{}", agent.as_str(), std::process::id());
        let (mut hooks, mut base) = (Vec::new(), Vec::new());
        eprintln!("{agent}: {runs} hooks ...");
        for i in 0..runs {
            base.push(run(shell(agent), &version, b"", &ws, &data));
            let (event, cmd) = &cmds[i % cmds.len()];
            hooks.push(run(
                shell(agent),
                cmd,
                &payload(agent, event, &sid),
                &ws,
                &data,
            ));
        }
        rows.push((agent, cmds.len(), spread(hooks), spread(base)));
    }
    rewind(work.path(), &["unmount", ws.to_str().unwrap()]);

    println!(
        "hook latency, {runs} hooks per agent through its own shell (ms; \
         `--version` = the same shell starting rewind to do nothing)"
    );
    println!(
        "{:<8} {:>6} {:>8} {:>8} {:>8} {:>14} {:>11}",
        "agent", "events", "p50", "p90", "max", "--version p50", "p50 beyond"
    );
    for (agent, n, (p50, p90, max), (b50, _, _)) in rows {
        println!(
            "{:<8} {n:>6} {p50:>8.2} {p90:>8.2} {max:>8.2} {b50:>14.2} {:>11.2}",
            agent.as_str(),
            p50 - b50
        );
    }
}
