//! `rewind hook AGENT EVENT`: run by an agent's hooks with the hook's JSON payload on stdin.
//! It tells the daemon (through `.rewind/ctl`) that a session started, a prompt began a turn,
//! a tool call began or ended, or the agent stopped. The agent waits on it, so it does little
//! and never fails the agent's action: it prints exactly what the agent expects, logs any
//! problem to `hook.log` beside the stores, and exits 0 — within [`DEADLINE`] whatever happens:
//! it reads one JSON value and not up to the end of input (an agent may keep the pipe open), and
//! a daemon that does not answer (stopped, wedged) is given up on. The exchange with the daemon
//! runs in a child process (`--exchange`): a request the daemon took and never answers holds
//! its maker in an uninterruptible wait, and only the child is left waiting. When no daemon took the event,
//! the payload is not what the agent sends, or the event is not one rewind knows, it also says
//! so in one line on stderr (which the agents show at most to the user).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
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

/// Why a hook recorded nothing, or may not have recorded all it was to.
enum Missed {
    /// The payload was not what the agent should send, or the event is not one rewind knows:
    /// logged, and said on stderr.
    Payload(String),
    /// The daemon did not take (or did not confirm) the event: no workspace, not mounted,
    /// gone, or no answer in time. Logged, and said on stderr; the message ends with what is
    /// known to be recorded (see [`Told`]).
    Daemon(String),
}

/// What the exchange child (see [`tell`]) says on its stdout, one byte per step, so that the
/// hook knows how far it got even when it has to leave it behind: a request about to be made,
/// and one answered.
const SENDING: u8 = 0x01;
const ANSWERED: u8 = 0x06;

/// How far the exchange got: requests handed to the daemon, and answered.
struct Told {
    sent: usize,
    answered: usize,
    of: usize,
}

impl Told {
    /// `why`, and what is known to be recorded: only what was answered, and possibly a
    /// request still unanswered (the daemon may have taken it, or it was withdrawn when the
    /// exchange was killed: the hook cannot tell which).
    fn missed(&self, why: &str) -> Missed {
        let done = match (self.answered, self.sent > self.answered) {
            (0, false) => "nothing recorded".to_string(),
            (0, true) => "not confirmed: the daemon may still record it".to_string(),
            (n, false) => format!("recorded in part ({n} of {} requests)", self.of),
            (n, true) => format!(
                "recorded in part ({n} of {} requests); not confirmed: the daemon may still \
                 record the next",
                self.of
            ),
        };
        Missed::Daemon(format!("{why}; {done}"))
    }
}

pub fn run(cwd: &Path, args: &HookArgs) -> CliResult {
    if args.exchange {
        return exchange(cwd, &args.event);
    }
    let agent = super::agent::agent_of(args.agent);
    let started = Instant::now();
    let deadline = started + DEADLINE;
    let late = || format!("no answer within {} ms; gave up", DEADLINE.as_millis());
    // The payload is read beside, so that an input that never ends cannot hold the agent: at
    // the deadline this thread answers and the process exits, the reader with it.
    let (tx, rx) = mpsc::channel();
    let event = args.event.clone();
    let reader = std::thread::Builder::new()
        .name("hook".into())
        .spawn(move || {
            let _ = tx.send(lines(agent, &event));
        });
    let result = match reader {
        Ok(_) => match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(lines)) if lines.is_empty() => Ok(()),
            Ok(Ok(lines)) => tell(&lines, deadline, &late()),
            Ok(Err(missed)) => Err(missed),
            Err(_) => Err(Missed::Daemon(format!(
                "no payload within {} ms; gave up; nothing recorded",
                DEADLINE.as_millis()
            ))),
        },
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
        // One line, so that whoever tries the hook by hand, or wires it to the wrong event,
        // is told (the agent shows stderr at most to the user).
        Err(Missed::Payload(m)) => {
            let _ = writeln!(std::io::stderr(), "rewind hook: {m}; nothing recorded");
            Some(m)
        }
        Err(Missed::Daemon(m)) => {
            let _ = writeln!(std::io::stderr(), "rewind hook: {m}");
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

/// The agent: the nearest ancestor of this process that is not a shell, up to the first
/// process of its PID namespace: in a container's (or `unshare -p`'s) that is the agent,
/// whose hook runs through `sh -c`. (The daemon never registers its own namespace's init.)
fn agent_pid() -> u32 {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..16 {
        let Some(stat) = crate::procfs::stat(pid) else {
            break;
        };
        if !SHELLS.contains(&stat.name.as_str()) || stat.ppid == 0 {
            break;
        }
        pid = stat.ppid;
    }
    pid
}

/// Claude Code runs each Bash command after sourcing the file its SessionStart hooks get as
/// `CLAUDE_ENV_FILE`: exported there, the session's name reaches every shell command and what
/// it leaves running. A background job whose tool call's shell has exited is no longer under
/// the agent, and the daemon attributes it by this (`REWIND_HOOK_SESSION`, below any
/// registration: `who.rs` `EnvNames`).
fn name_shell_commands(session: &str, agent: &str) {
    let Some(path) = std::env::var_os("CLAUDE_ENV_FILE") else {
        return;
    };
    let lines = format!(
        "export REWIND_HOOK_SESSION={}\nexport REWIND_HOOK_AGENT={}\n",
        quote(session),
        quote(agent)
    );
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(lines.as_bytes()));
    if let Err(e) = written {
        log(&format!(
            "{agent} SessionStart: cannot name the session in {}: {e}",
            Path::new(&path).display()
        ));
    }
}

fn quote(s: &str) -> String {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| "''".into())
}

/// The command lines for the daemon that the payload on stdin asks for.
fn lines(agent: Agent, event: &str) -> Result<Vec<String>, Missed> {
    let stdin = std::io::stdin().lock().take(PAYLOAD_MAX);
    let (parsed, transcript) = agent::read_with_transcript(agent, event, stdin)
        .map_err(|e| Missed::Payload(e.to_string()))?;
    let a = agent.as_str();
    // Once: every line of one hook names the same agent process.
    let agent_pid = agent_pid();
    let start = |id: &str| {
        format!(
            "session start {} --agent {a} --pid {} --exclusive",
            quote(&session_name(agent, id)),
            agent_pid
        )
    };
    Ok(match parsed {
        HookEvent::SessionStart { session_id } => {
            if agent == Agent::Claude {
                name_shell_commands(&session_name(agent, &session_id), a);
            }
            vec![start(&session_id)]
        }
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
            turn += &format!(" --pid {agent_pid}");
            vec![start(&session_id), turn]
        }
        HookEvent::ToolStart {
            session_id,
            tool,
            tool_id,
        } => vec![format!(
            "tool begin --session {} --pid {}{} -- {}",
            quote(&session_name(agent, &session_id)),
            agent_pid,
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
            "tool end --session {} --pid {}{} -- {}",
            quote(&session_name(agent, &session_id)),
            agent_pid,
            tool_id
                .map(|i| format!(" --id={}", quote(&i)))
                .unwrap_or_default(),
            quote(&tool),
        )],
        // The daemon reads the transcript (after it answers: a slow or missing one never
        // holds the hook), and keeps it with the turn.
        HookEvent::Stop { session_id } => vec![format!(
            "turn end --session {} --pid {}{}",
            quote(&session_name(agent, &session_id)),
            agent_pid,
            transcript
                .map(|t| format!(" --transcript={}", quote(&t)))
                .unwrap_or_default()
        )],
        // The end of what SessionStart began: the open turn, and the registration of the
        // agent's process (else the shells under it go on recording as the agent's session).
        HookEvent::SessionEnd { session_id } => vec![
            format!(
                "turn end --session {} --pid {}",
                quote(&session_name(agent, &session_id)),
                agent_pid
            ),
            format!(
                "session end --session {} --pid {} --exclusive",
                quote(&session_name(agent, &session_id)),
                agent_pid
            ),
        ],
        HookEvent::Ignored if !agent::known_events(agent).contains(&event) => {
            return Err(Missed::Payload(format!(
                "{a} has no hook event {event:?} that rewind acts on (it acts on {})",
                agent::known_events(agent).join(", ")
            )));
        }
        HookEvent::Ignored => Vec::new(),
    })
}

/// Send `lines` to the daemon from a child process and wait for it until `deadline`, then
/// give up with `late`. A request the daemon took and never answers holds the process that
/// made it in an uninterruptible wait, which even its exit waits for; so it must not be the
/// hook, which the agent waits on. The child is killed at the deadline (a request not yet
/// taken is then withdrawn) and left to end when the daemon answers. Whether the daemon had
/// taken it cannot be known, and the message says so (see [`Told`]).
fn tell(lines: &[String], deadline: Instant, late: &str) -> Result<(), Missed> {
    let cannot = |e: std::io::Error| {
        Missed::Daemon(format!("cannot start the exchange: {e}; nothing recorded"))
    };
    let mut child = Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .arg("--exchange")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot)?;
    let mut steps = child.stdout.take();
    // Read without waiting: a child left behind keeps its end of the pipe open.
    if let Some(out) = &steps
        && let Err(e) = rustix::fs::fcntl_setfl(out, rustix::fs::OFlags::NONBLOCK)
    {
        let _ = child.kill();
        return Err(cannot(e.into()));
    }
    let told = |steps: &mut Option<std::process::ChildStdout>| {
        let mut said = Vec::new();
        if let Some(out) = steps {
            // What is there now, up to the end or to what would block.
            let _ = out.read_to_end(&mut said);
        }
        Told {
            sent: said.iter().filter(|b| **b == SENDING).count(),
            answered: said.iter().filter(|b| **b == ANSWERED).count(),
            of: lines.len(),
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // The child reads all of it before it touches the mount, so this cannot block for long.
        let _ = stdin.write_all(lines.join("\0").as_bytes());
    }
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut why = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = err.read_to_string(&mut why);
                }
                if status.success() {
                    return Ok(());
                }
                let told = told(&mut steps);
                // The child said why, and a request that failed was answered (not recorded).
                let told = Told {
                    sent: told.answered,
                    ..told
                };
                return Err(match why.trim() {
                    "" => told.missed(&format!("the exchange ended with {status}")),
                    why => told.missed(why),
                });
            }
            Ok(None) if Instant::now() >= deadline => {
                // Killed first, then read: what it said before the kill is all there.
                let _ = child.kill();
                return Err(told(&mut steps).missed(late));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                let _ = child.kill();
                return Err(told(&mut steps).missed(&format!("cannot wait for the exchange: {e}")));
            }
        }
    }
}

/// `rewind hook AGENT EVENT --exchange`, the child of [`tell`]: send each NUL-separated line on
/// stdin to the daemon. A failure is said on stderr, with exit status 1.
fn exchange(cwd: &Path, event: &str) -> CliResult {
    let mut input = String::new();
    let sent = std::io::stdin()
        .take(PAYLOAD_MAX * 2)
        .read_to_string(&mut input)
        .map_err(|e| Failure::failed(format!("cannot read the lines: {e}")))
        .and_then(|_| {
            let ctx = Ctx::locate(cwd)?;
            if !ctx.mounted {
                return Err(Failure::failed(format!(
                    "{} is not mounted",
                    ctx.workspace.display()
                )));
            }
            let mut steps = std::io::stdout();
            for line in input.split('\0').filter(|l| !l.is_empty()) {
                // Said before the request is made, so the hook knows one may be in flight.
                let _ = steps.write_all(&[SENDING]).and_then(|()| steps.flush());
                let answer = match ctx.ctl(line) {
                    // A daemon of an older rewind (still mounted across an upgrade) knows
                    // every command a hook sends but not each of its flags: said again
                    // without the flag, the command is done as that daemon did it before.
                    Err(f) => match for_an_older_daemon(line, &f.message) {
                        Some(older) => ctx.ctl(&older)?,
                        None => return Err(f),
                    },
                    Ok(answer) => answer,
                };
                let _ = steps.write_all(&[ANSWERED]).and_then(|()| steps.flush());
                // Another agent process holds this session id: ours was recorded apart (the
                // daemon said so); worth a line in the log, not a failure.
                let said = String::from_utf8_lossy(&answer.output);
                if said.contains(" belongs to process ") {
                    log(&format!("{event}: {}", said.trim()));
                }
            }
            Ok(())
        });
    match sent {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(f) => {
            let _ = writeln!(std::io::stderr(), "{}", f.message);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Flags a hook adds that an older daemon's grammar may lack; each is left out (with its
/// value, if it takes one) when that daemon says it does not know it.
const NEWER_FLAGS: [(&str, bool); 2] = [("--pid", true), ("--exclusive", false)];

/// `line` without the flag an older daemon refused as unknown (`message`, clap's "unexpected
/// argument '--pid' found"), or None when the refusal is not of such a flag. Only words before
/// a `--` are flags: a tool's name or a quoted prompt that says `--pid` is left alone.
fn for_an_older_daemon(line: &str, message: &str) -> Option<String> {
    let (flag, takes_value) = NEWER_FLAGS
        .into_iter()
        .find(|(flag, _)| message.contains(&format!("unexpected argument '{flag}' found")))?;
    let mut words = shlex::split(line)?;
    let end = words.iter().position(|w| w == "--").unwrap_or(words.len());
    let at = words[..end].iter().position(|w| w == flag)?;
    let to = if takes_value { at + 2 } else { at + 1 };
    words.drain(at..to.min(end));
    shlex::try_join(words.iter().map(String::as_str)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(sent: usize, answered: usize, of: usize) -> String {
        match (Told { sent, answered, of }).missed("why") {
            Missed::Daemon(m) => m,
            Missed::Payload(m) => panic!("not a daemon's miss: {m}"),
        }
    }

    /// A daemon of an older rewind refuses a flag it does not know: the hook says the command
    /// again without it, and without nothing else (a prompt or a tool's name that says
    /// `--pid` is not a flag).
    #[test]
    fn a_line_for_an_older_daemon_leaves_out_only_the_flag_it_refused() {
        let refused = |flag: &str| format!("unexpected argument '{flag}' found\n\nUsage: ...");
        assert_eq!(
            for_an_older_daemon(
                "turn begin --session s --agent claude '--prompt=say --pid 7' --pid 42",
                &refused("--pid")
            )
            .as_deref(),
            Some("turn begin --session s --agent claude '--prompt=say --pid 7'")
        );
        assert_eq!(
            for_an_older_daemon(
                "tool begin --session s --pid 42 -- --pid",
                &refused("--pid")
            )
            .as_deref(),
            Some("tool begin --session s -- --pid")
        );
        assert_eq!(
            for_an_older_daemon(
                "session end --session s --pid 42 --exclusive",
                &refused("--exclusive")
            )
            .as_deref(),
            Some("session end --session s --pid 42")
        );
        assert_eq!(
            for_an_older_daemon("turn end --session s --pid 42", "no such session"),
            None
        );
        assert_eq!(
            for_an_older_daemon("turn end --session s", &refused("--pid")),
            None,
            "nothing to leave out"
        );
    }

    /// The message never says more than was done: nothing recorded only when no request was
    /// made or every one made failed; a request in flight is "not confirmed".
    #[test]
    fn a_hooks_message_says_what_is_known_to_be_recorded() {
        assert_eq!(said(0, 0, 2), "why; nothing recorded");
        assert_eq!(
            said(1, 0, 2),
            "why; not confirmed: the daemon may still record it"
        );
        assert_eq!(said(1, 1, 2), "why; recorded in part (1 of 2 requests)");
        assert_eq!(
            said(2, 1, 2),
            "why; recorded in part (1 of 2 requests); not confirmed: the daemon may still \
             record the next"
        );
    }
}
