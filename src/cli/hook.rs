//! `rewind hook AGENT EVENT`: run by an agent's hooks with the hook's JSON payload on stdin.
//! It tells the daemon (through `.rewind/ctl`) that a session started, a prompt began a turn,
//! a tool call began or ended, or the agent stopped. The agent waits on it, so it does little
//! and never fails the agent's action: it prints exactly what the agent expects, logs any
//! problem to `hook.log` beside the stores, and exits 0.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

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

pub fn run(cwd: &Path, args: &HookArgs) -> CliResult {
    let agent = super::agent::agent_of(args.agent);
    let started = Instant::now();
    let result = handle(cwd, agent, &args.event);
    // The agent's answer first, whatever happened.
    if let Some(reply) = agent::reply(agent, &args.event) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
    if let Err(e) = &result {
        log(&format!(
            "{agent} {}: {} ({} ms)",
            args.event,
            e.message,
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

fn handle(cwd: &Path, agent: Agent, event: &str) -> Result<(), Failure> {
    let mut payload = Vec::new();
    std::io::stdin()
        .take(PAYLOAD_MAX)
        .read_to_end(&mut payload)
        .map_err(|e| Failure::failed(format!("reading the payload: {e}")))?;
    let parsed = agent::parse(agent, event, &payload).map_err(|e| Failure::usage(e.to_string()))?;
    let ctx = Ctx::locate(cwd)?;
    if !ctx.mounted {
        return Err(Failure::usage(format!(
            "{} is not mounted; nothing recorded",
            ctx.workspace.display()
        )));
    }
    let a = agent.as_str();
    let start = |id: &str| {
        format!(
            "session start {} --agent {a} --pid {}",
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
        HookEvent::Stop { session_id } => vec![format!(
            "turn end --session {}",
            quote(&session_name(agent, &session_id))
        )],
        HookEvent::SessionEnd { session_id } => vec![format!(
            "turn end --session {}",
            quote(&session_name(agent, &session_id))
        )],
        HookEvent::Ignored => Vec::new(),
    };
    for line in lines {
        ctx.ctl(&line)?;
    }
    Ok(())
}
