//! `rewind hook AGENT EVENT`: run by an agent's hooks with the hook's JSON payload on stdin.
//! It tells the daemon (through `.rewind/ctl`) that a session started, a prompt began a turn,
//! a tool call began or ended, or the agent stopped. The agent waits on it, so it does little
//! and never fails the agent's action: it prints exactly what the agent expects, logs any
//! problem to `hook.log` beside the stores, and exits 0 — within [`DEADLINE`] whatever happens:
//! it reads one JSON value and not up to the end of input (an agent may keep the pipe open), and
//! a daemon that does not answer (stopped, wedged) is given up on. When no daemon took the event
//! it also says so in one line on stderr (which the agents show at most to the user).

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::context::Ctx;
use super::{CliResult, Failure};
use crate::agent::{self, Agent, HookEvent};
use crate::command::HookArgs;

/// Processes that stand between an agent and its hook command.
const SHELLS: [&str; 9] = [
    "sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "busybox", "env",
];

/// The most of a payload read (a prompt may be long; nothing needs more).
const PAYLOAD_MAX: u64 = 4 << 20;

/// How long reading the payload and telling the daemon may take together; the hook then
/// answers the agent and exits, whatever is still waiting (SPEC: within 1 s).
const DEADLINE: Duration = Duration::from_millis(800);

/// Why a hook recorded nothing.
enum Missed {
    /// The payload was not what the agent should send: logged.
    Payload(String),
    /// No daemon took the event (no workspace, not mounted, gone, or no answer in time):
    /// logged, and said on stderr.
    Daemon(String),
}

pub fn run(cwd: &Path, args: &HookArgs) -> CliResult {
    let agent = super::agent::agent_of(args.agent);
    let started = Instant::now();
    // The work runs beside, so that a read or a daemon that never ends cannot hold the agent:
    // at the deadline this thread answers and the process exits, the worker with it.
    let (tx, rx) = mpsc::channel();
    let (dir, event) = (cwd.to_path_buf(), args.event.clone());
    let worker = std::thread::Builder::new()
        .name("hook".into())
        .spawn(move || {
            let _ = tx.send(handle(&dir, agent, &event));
        });
    let result = match worker {
        Ok(_) => rx.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            Err(Missed::Daemon(format!(
                "no payload and answer within {} ms; gave up",
                DEADLINE.as_millis()
            )))
        }),
        Err(e) => Err(Missed::Daemon(format!("cannot start: {e}"))),
    };
    // The agent's answer first, whatever happened.
    if let Some(reply) = agent::reply(agent, &args.event) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
    let message = match &result {
        Ok(()) => None,
        Err(Missed::Payload(m)) => Some(m),
        Err(Missed::Daemon(m)) => {
            let _ = writeln!(std::io::stderr(), "rewind hook: {m}; nothing recorded");
            Some(m)
        }
    };
    if let Some(m) = message {
        log(&format!(
            "{agent} {}: {m} ({} ms)",
            args.event,
            started.elapsed().as_millis()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn log(line: &str) {
    let path = super::data_home().join("hook.log");
    let _ = std::fs::create_dir_all(super::data_home());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(
            f,
            "{} {line}",
            crate::history::time::rfc3339(crate::history::time::now_ns())
        );
    }
}

/// The session a hook's agent session is recorded as: `AGENT-ID`, the id cut to what a name
/// may hold.
pub fn session_name(agent: Agent, id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    format!(
        "{}-{}",
        agent.as_str(),
        if clean.is_empty() { "session" } else { &clean }
    )
}

/// The agent: the nearest ancestor of this process that is not a shell.
fn agent_pid() -> u32 {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..16 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            break;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            break;
        };
        let name = &stat[open + 1..close];
        if !SHELLS.contains(&name) {
            return pid;
        }
        let Some(ppid) = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            break;
        };
        if ppid <= 1 {
            break;
        }
        pid = ppid;
    }
    pid
}

fn quote(s: &str) -> String {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| "''".into())
}

fn handle(cwd: &Path, agent: Agent, event: &str) -> Result<(), Missed> {
    let stdin = std::io::stdin().lock().take(PAYLOAD_MAX);
    let (parsed, transcript) = agent::read_with_transcript(agent, event, stdin)
        .map_err(|e| Missed::Payload(e.to_string()))?;
    let daemon = |f: Failure| Missed::Daemon(f.message);
    let ctx = Ctx::locate(cwd).map_err(daemon)?;
    if !ctx.mounted {
        return Err(Missed::Daemon(format!(
            "{} is not mounted",
            ctx.workspace.display()
        )));
    }
    let a = agent.as_str();
    let start = |id: &str| {
        format!(
            "session start {} --agent {a} --pid {} --exclusive",
            quote(&session_name(agent, id)),
            agent_pid()
        )
    };
    let lines: Vec<String> = match parsed {
        HookEvent::SessionStart { session_id } => vec![start(&session_id)],
        HookEvent::Prompt {
            session_id,
            prompt,
            prompt_id,
        } => {
            // Registered again at each prompt: some agents have no session-start hook, and a
            // daemon restarted since knows no registrations.
            let mut turn = format!(
                "turn begin --session {} --agent {a} --prompt={}",
                quote(&session_name(agent, &session_id)),
                quote(&crate::history::turns::first_line(&prompt))
            );
            if let Some(id) = prompt_id {
                turn += &format!(" --prompt-id={}", quote(&id));
            }
            vec![start(&session_id), turn]
        }
        HookEvent::ToolStart {
            session_id,
            tool,
            tool_id,
        } => vec![format!(
            "tool begin --session {}{} -- {}",
            quote(&session_name(agent, &session_id)),
            tool_id
                .map(|i| format!(" --id={}", quote(&i)))
                .unwrap_or_default(),
            quote(&tool),
        )],
        HookEvent::ToolEnd {
            session_id,
            tool,
            tool_id,
        } => vec![format!(
            "tool end --session {}{} -- {}",
            quote(&session_name(agent, &session_id)),
            tool_id
                .map(|i| format!(" --id={}", quote(&i)))
                .unwrap_or_default(),
            quote(&tool),
        )],
        // The daemon reads the transcript (after it answers: a slow or missing one never
        // holds the hook), and keeps it with the turn.
        HookEvent::Stop { session_id } => vec![format!(
            "turn end --session {}{}",
            quote(&session_name(agent, &session_id)),
            transcript
                .map(|t| format!(" --transcript={}", quote(&t)))
                .unwrap_or_default()
        )],
        HookEvent::SessionEnd { session_id } => vec![format!(
            "turn end --session {}",
            quote(&session_name(agent, &session_id))
        )],
        HookEvent::Ignored => Vec::new(),
    };
    for line in lines {
        let answer = ctx.ctl(&line).map_err(daemon)?;
        // Another agent process holds this session id: ours was recorded apart (the daemon
        // said so); worth a line in the log, not a failure.
        let said = String::from_utf8_lossy(&answer.output);
        if said.contains(" belongs to process ") {
            log(&format!("{agent} {event}: {}", said.trim()));
        }
    }
    Ok(())
}
