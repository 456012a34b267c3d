//! `.rewind/ctl`: a command line written to it is parsed by the CLI's own grammar and run by
//! the daemon, on a thread of its own (the write is answered when it is done, so no FUSE
//! worker waits on it), against the history it records and the workspace underneath the mount.
//! Its output is read back from the same open file. A bad command fails the write with
//! `EINVAL`, a failure with `EIO`; a command done in part ends its output with the line
//! `exit status 1`, a rollback that skipped everything with `exit status 1 (nothing done)`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fuser::Errno;

use crate::command::{self, Actor, Command, Env, Outcome, env::Applied};
use crate::fs::Core;
use crate::fs::backing::Backing;
use crate::fs::restore::Restorer;
use crate::history::GcReport;
use crate::history::change::{Checkpoint, Tool, Turn};
use crate::history::db::GcPolicy;
use crate::history::rollback::{self, OpenFiles, Plan};
use crate::history::who::{By, Claim, Foreign};
use crate::history::{AsRecorded, Error, Name, Recorder, Result, Source, time};

/// Why a turn or tool command from process `from` naming a session another process tree holds
/// was refused (logged, and said to the hook).
fn refused(
    Foreign {
        session,
        owner,
        under,
    }: Foreign,
    from: u32,
) -> Error {
    let why = match under {
        Some(agent) => format!(
            "session {session} belongs to process {owner}, and process {agent}, under it, never \
             started it (its session start was not recorded)"
        ),
        None => format!(
            "session {session} belongs to process {owner} and its children, and process {from} \
             is not one of them"
        ),
    };
    tracing::warn!("{why}; refused");
    Error::Usage(format!("{why}: nothing done"))
}

/// The line that ends the output of a command done in part (exit status 1 in the CLI).
pub const PARTIAL: &str = "exit status 1";

/// The line that ends the output of a rollback that skipped every path it would have changed
/// (exit status 1 in the CLI, as it skipped paths; but it did nothing, not part of its work).
pub const NOTHING_DONE: &str = "exit status 1 (nothing done)";

/// The longest command, in bytes.
pub const LINE_MAX: usize = 64 * 1024;

/// How many commands may run at once; more wait for one to finish.
const AT_ONCE: usize = 4;

/// How far the long commands running now have got, by the thread that wrote each: what
/// `.rewind/progress` shows, one line a command, `CALLER PHASE DONE TOTAL` (a rollback's
/// phases are `checking` its content, then `restoring` paths).
#[derive(Default)]
pub(super) struct Progress(
    std::sync::Mutex<std::collections::BTreeMap<u32, (&'static str, usize, usize)>>,
);

impl Progress {
    fn set(&self, caller: u32, phase: &'static str, done: usize, total: usize) {
        let mut running = self.0.lock().unwrap_or_else(|e| e.into_inner());
        running.insert(caller, (phase, done, total));
    }

    fn end(&self, caller: u32) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&caller);
    }

    pub(super) fn text(&self) -> Vec<u8> {
        let running = self.0.lock().unwrap_or_else(|e| e.into_inner());
        running
            .iter()
            .map(|(caller, (phase, done, total))| format!("{caller} {phase} {done} {total}\n"))
            .collect::<String>()
            .into_bytes()
    }
}

/// Runs commands off the FUSE threads.
#[derive(Default)]
pub(super) struct Commands {
    running: Arc<(AtomicUsize, std::sync::Mutex<()>, std::sync::Condvar)>,
}

/// One command to run.
pub(super) struct Job {
    pub(super) recorder: Arc<Recorder>,
    pub(super) source: Arc<Backing>,
    pub(super) workspace: PathBuf,
    pub(super) core: Arc<Core>,
    /// The thread that wrote the command.
    pub(super) caller: u32,
    /// Where a rollback tells how far it has got.
    pub(super) progress: Arc<Progress>,
    pub(super) line: Vec<u8>,
}

impl Commands {
    /// Run `job` on a thread of its own, then hand its output and the write's answer to `done`.
    pub(super) fn run(
        &self,
        job: Job,
        done: impl FnOnce(Vec<u8>, std::result::Result<(), Errno>) + Send + 'static,
    ) {
        let running = self.running.clone();
        // An agent's hook waits less than a second for its command: one that bounds a turn or
        // a tool call must not queue behind other commands (reads waiting for the history to
        // settle, a rollback). It takes its bound at once, and at most a settle after.
        let queued = !job.is_hook_command();
        let spawned = std::thread::Builder::new()
            .name("ctl".into())
            .spawn(move || {
                let (count, lock, freed) = &*running;
                if queued {
                    let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                    while count.load(Ordering::SeqCst) >= AT_ONCE {
                        guard = freed.wait(guard).unwrap_or_else(|e| e.into_inner());
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                }
                hold_for_tests("REWIND_TEST_HOLD_CTL");
                let (output, result) = job.execute();
                if queued {
                    count.fetch_sub(1, Ordering::SeqCst);
                    freed.notify_one();
                }
                done(output, result);
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a command thread: {e}");
        }
    }
}

/// Tests only: with `REWIND_TEST_HOLD_CTL=PATH` set for the daemon, a command taken while
/// PATH exists makes `PATH.taken` and waits until PATH is removed before it runs, so that a
/// test can hold a request the daemon took unanswered (as a wedged daemon would).
/// With `REWIND_TEST_HOLD_PROGRESS=PATH`, a rollback halfway through restoring waits the same
/// way (so a test sees its progress).
fn hold_for_tests(var: &str) {
    let Some(hold) = std::env::var_os(var).map(PathBuf::from) else {
        return;
    };
    if hold.exists() {
        let mut taken = hold.clone().into_os_string();
        taken.push(".taken");
        let _ = std::fs::write(&taken, b"");
        while hold.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Usage errors are the writer's (EINVAL); anything else failed (EIO).
fn error_errno(e: &Error) -> Errno {
    if e.is_usage() {
        Errno::EINVAL
    } else {
        Errno::EIO
    }
}

impl Job {
    /// Whether the line is one of the commands an agent's hook sends (`session`, `turn`,
    /// `tool`).
    fn is_hook_command(&self) -> bool {
        std::str::from_utf8(&self.line)
            .ok()
            .and_then(|line| command::parse_line(line.trim()).ok())
            .is_some_and(|cli| cli.command.is_hook())
    }

    /// Run the command now. Returns the output to read back and the write's answer.
    pub(super) fn execute(&self) -> (Vec<u8>, std::result::Result<(), Errno>) {
        let fail = |msg: String, errno: Errno| (format!("error: {msg}\n").into_bytes(), Err(errno));
        if self.line.len() > LINE_MAX {
            return fail(
                format!(
                    "a command is at most {} KiB; this one is {} bytes",
                    LINE_MAX / 1024,
                    self.line.len()
                ),
                Errno::EINVAL,
            );
        }
        let Ok(line) = std::str::from_utf8(&self.line) else {
            return fail("a command is text (UTF-8)".into(), Errno::EINVAL);
        };
        let line = line.trim();
        let cli = match command::parse_line(line) {
            Ok(cli) => cli,
            Err(why) => return fail(why.to_string(), Errno::EINVAL),
        };
        let base = match &cli.dir {
            Some(dir) => match command::env::rel_path(&self.workspace, &self.workspace, dir) {
                Ok(rel) => self.workspace.join(std::ffi::OsStr::new(
                    std::str::from_utf8(&rel).unwrap_or_default(),
                )),
                Err(e) => return fail(e.to_string(), Errno::EINVAL),
            },
            None => self.workspace.clone(),
        };
        // Closed edits are recorded before anything that may record, as `Core::in_order` does
        // on a FUSE thread. Not before an agent's hook, which must not wait for them before
        // it bounds its turn or tool call (`plumbing`, which records them after).
        if !cli.command.is_hook()
            && let Err(e) = self.recorder.finish_closed()
        {
            tracing::error!("cannot record the end of an edit: {e}");
        }
        // A reading command sees everything done before it was asked, and changes nothing:
        // held-back new files are waited for, not recorded early.
        let reading =
            !cli.command.changes_something() && !matches!(cli.command, Command::Sync { .. });
        if reading {
            self.recorder.settle_for_reading();
        }
        // And it answers from the history, as `.rewind/at/` does: a new file still held back
        // (the store could not take it, or it was made after the settle) is in no point yet,
        // so `cat --at`, `diff` and the rest never read it from the live file.
        let recorded = AsRecorded {
            recorder: self.recorder.clone(),
            source: self.source.clone(),
        };
        let source: &dyn Source = if reading { &recorded } else { &*self.source };
        let actor = DaemonActor { job: self };
        // Content a command stores for what it does next (a hunk to put back, a file's content
        // kept across a rollback) stays until the command is over (`store/pins.rs`).
        let _pins = self.recorder.history().store().pin_scope();
        let ignored = |path: &[u8], dir: bool| self.recorder.ignores(path, dir);
        let mut out = Vec::new();
        let result = {
            let mut env = Env {
                history: self.recorder.history(),
                source,
                ignored: &ignored,
                workspace: self.workspace.clone(),
                base,
                actor: Some(&actor),
                caller: self.caller,
                color: cli.color_output,
                width: cli.output_width.unwrap_or(80),
                out: &mut out,
            };
            match cli.command.verb() {
                command::Verb::History(verb) => Some(command::run(verb, &mut env)),
                command::Verb::Shell(_) => None,
            }
        };
        match result {
            None => fail(
                format!(
                    "`rewind {}` runs in a shell, not through .rewind/ctl",
                    cli.command.name()
                ),
                Errno::EINVAL,
            ),
            Some(Ok(Outcome::Done)) => (out, Ok(())),
            Some(Ok(Outcome::Partial)) => {
                out.extend_from_slice(format!("{PARTIAL}\n").as_bytes());
                (out, Ok(()))
            }
            Some(Ok(Outcome::Skipped)) => {
                out.extend_from_slice(format!("{NOTHING_DONE}\n").as_bytes());
                (out, Ok(()))
            }
            Some(Err(e)) => {
                let mut text = out;
                text.extend_from_slice(format!("error: {e}\n").as_bytes());
                (text, Err(error_errno(&e)))
            }
        }
    }
}

/// What a command may change, in the daemon.
struct DaemonActor<'a> {
    job: &'a Job,
}

impl DaemonActor<'_> {
    fn recorder(&self) -> &Recorder {
        &self.job.recorder
    }

    /// Read the agent's transcript and keep it as `turn`'s conversation, on a thread of its
    /// own: the hook that ended the turn is answered first, and a transcript that cannot be
    /// read (missing, someone else's, outside the agent's folder) is logged, never an error.
    fn keep_conversation(&self, turn: &Turn, path: PathBuf) {
        let Ok(agent) = turn.agent.parse::<crate::agent::Agent>() else {
            return;
        };
        let recorder = Arc::clone(&self.job.recorder);
        let workspace = self.job.workspace.clone();
        let owner = crate::fs::backing::stat_fd(self.job.source.root_fd()).map(|st| st.st_uid);
        let (session, number) = (turn.session.clone(), turn.number);
        let spawned = std::thread::Builder::new()
            .name("conversation".into())
            .spawn(move || {
                let kept = owner
                    .map_err(|e| format!("{}: {e}", workspace.display()))
                    .and_then(|owner| {
                        crate::agent::transcript::read(agent, &path, owner, &workspace)
                            .map_err(|e| e.to_string())
                    })
                    .and_then(|text| {
                        recorder
                            .turns()
                            .keep_conversation(&session, number, &text)
                            .map_err(|e| e.to_string())
                    });
                if let Err(why) = kept {
                    tracing::warn!("turn {session}:{number}: conversation not kept: {why}");
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(
                "turn {}:{}: conversation not kept: {e}",
                turn.session,
                turn.number
            );
        }
    }

    /// The next rollback's session name, never handed out twice, after any `rollback-N`
    /// already in the history, and one that no change, turn or live registration uses yet: a
    /// user may name a session `rollback-N` (REWIND_SESSION, `rewind run --session`), and the
    /// rollback must not join it, or undoing the rollback would undo the user's work.
    fn next_rollback_session(&self) -> Result<String> {
        let history = self.recorder().history();
        let store = history.store();
        let mut used: std::collections::HashSet<String> =
            history.sessions()?.into_iter().map(|s| s.name).collect();
        used.extend(history.turns(None)?.into_iter().map(|t| t.session));
        if store.meta(b"rollbacks")?.is_none() {
            let highest = used
                .iter()
                .filter_map(|s| s.strip_prefix("rollback-")?.parse::<u64>().ok())
                .max()
                .unwrap_or(0);
            store.put_meta(b"rollbacks", &highest.to_be_bytes())?;
        }
        let who = self.recorder().attributor();
        loop {
            let name = format!("rollback-{}", store.next_in_sequence(b"rollbacks")?);
            if !used.contains(&name) && !who.is_registered(&name) {
                return Ok(name);
            }
        }
    }
}

impl Actor for DaemonActor<'_> {
    fn settle(&self) -> Result<()> {
        self.recorder().settle()
    }

    fn checkpoint(&self, name: &Name, force: bool) -> Result<Checkpoint> {
        self.recorder().settle()?;
        self.recorder().cut_open_episodes()?;
        self.recorder()
            .history()
            .put_checkpoint(name, time::now_ns(), force)
    }

    fn gc(&self, policy: &GcPolicy) -> Result<GcReport> {
        self.recorder().history().gc(policy)
    }

    fn rollback(&self, plan: &Plan) -> Result<Applied> {
        let session = self.next_rollback_session()?;
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let who = self.recorder().attributor();
        who.begin_restore(tid, session.clone());
        let restorer = Restorer::new(self.job.core.clone(), tid);
        let (progress, caller) = (&self.job.progress, self.job.caller);
        // Once the process that asked is gone (the CLI killed: it waits in the kernel for the
        // answer, with SIGKILL pending), nobody reads the outcome: stop at the next step.
        // Looked at every 50 ms at most (a rollback of 50,000 files has as many steps).
        let looked = std::cell::Cell::new(None::<(std::time::Instant, bool)>);
        let stopped = || match looked.get() {
            Some((at, gone)) if at.elapsed() < std::time::Duration::from_millis(50) => gone,
            _ => {
                let gone = crate::procfs::gone_or_killed(caller);
                looked.set(Some((std::time::Instant::now(), gone)));
                gone
            }
        };
        let report = |phase: rollback::Phase, done, total| {
            progress.set(caller, phase.name(), done, total);
            if phase == rollback::Phase::Restoring && done == total / 2 {
                hold_for_tests("REWIND_TEST_HOLD_PROGRESS");
            }
        };
        let failed = rollback::execute(
            self.recorder().history(),
            plan,
            &restorer,
            &report,
            &stopped,
        );
        progress.end(caller);
        who.end_restore(tid);
        // Record what is still held back (its new files are recorded as each is written, but
        // a process's held-back creates and queued deletes may be waiting).
        self.recorder().settle()?;
        Ok(Applied { session, failed })
    }

    fn open_files(&self) -> OpenFiles {
        OpenFiles {
            writers: self.recorder().open_writers(),
            cached: !self.job.core.passthrough(),
        }
    }

    fn detached(&self, plan: &Plan) -> std::collections::HashSet<Vec<u8>> {
        rollback::detached(plan, &crate::fs::restore::NamesNow(&self.job.core))
    }

    fn session_of(&self, pid: u32) -> Option<String> {
        let pid = crate::history::who::process_of(pid);
        let uid = crate::history::who::fs_uid(pid)?;
        Some(self.recorder().attributor().who(By { pid, uid }).session)
    }

    fn plumbing(&self, command: &Command, caller: u32) -> Result<String> {
        use crate::command::plumbing::{SessionCommand, ToolCommand, TurnCommand};
        let rec = self.recorder();
        // A turn or tool command is about the session the caller's process tree holds under
        // that name, up to the agent process a hook names: another agent's hook naming it, or
        // one from under the agent that never claimed it, opens, ends and marks nothing of it.
        // A pid given is as the caller sees it: translated when it runs in a PID namespace of
        // its own (`who::pid_as_seen_here`).
        let here = |pid: &Option<u32>| -> Result<Option<u32>> {
            pid.map(|p| {
                crate::history::who::pid_as_seen_here(caller, p).ok_or(Error::ProcessGone(p))
            })
            .transpose()
        };
        let own = |asked: &str, agent: &Option<u32>| {
            let agent = here(agent)?;
            rec.attributor()
                .session_for(asked, caller, agent)
                .map_err(|foreign| refused(foreign, agent.unwrap_or(caller)))
        };
        match command {
            Command::Sync { for_reading } => {
                if *for_reading {
                    rec.settle_for_reading();
                } else {
                    rec.settle()?;
                }
                Ok("ok\n".into())
            }
            Command::Session(SessionCommand::Start {
                name,
                agent,
                pid,
                exclusive,
            }) => {
                let pid = here(pid)?.unwrap_or(caller);
                // Only the writer, a process above it or one it started: another's would be
                // attributed by a command it never sent. Never init, above every process.
                if pid == 1 || !crate::history::who::related(caller, pid) {
                    return Err(Error::Usage(format!(
                        "process {pid} is neither the process that sent this command, one of \
                         its parents (init excepted), nor one it started"
                    )));
                }
                // rewind's own agent names are mapped, as from the environment.
                let agent = agent
                    .as_ref()
                    .map(|a| Name::from_id("agent", a.as_str().as_bytes()).into_string());
                let gone = || Error::ProcessGone(pid);
                if !*exclusive {
                    if !rec.attributor().register(pid, name.to_string(), agent) {
                        return Err(gone());
                    }
                } else if let Claim::Apart { session, owner } = rec
                    .attributor()
                    .claim(pid, name.to_string(), agent)
                    .ok_or_else(gone)?
                {
                    tracing::warn!(
                        "session {name} belongs to process {owner} and its children; process                          {pid}, which named it too, is recorded as session {session}"
                    );
                    return Ok(format!(
                        "session {name} belongs to process {owner}: process {pid} and its                          children recorded as session {session}\n"
                    ));
                }
                Ok(format!(
                    "session {name} started for process {pid} and its children\n"
                ))
            }
            Command::Session(SessionCommand::End {
                pid,
                session,
                exclusive,
            }) => {
                let pid = here(pid)?.unwrap_or(caller);
                match session {
                    None => match rec.attributor().unregister(pid) {
                        Some(s) => Ok(format!("session {s} ended\n")),
                        None => Err(Error::NoSessionStarted),
                    },
                    Some(name) => match if *exclusive {
                        rec.attributor().unregister_session_of(pid, name.as_str())
                    } else {
                        rec.attributor().unregister_session(pid, name.as_str())
                    } {
                        Some(s) => Ok(format!("session {s} ended\n")),
                        None => Ok(format!(
                            "session {name} was not registered for process {pid}\n"
                        )),
                    },
                }
            }
            Command::Turn(TurnCommand::Begin {
                session,
                agent,
                prompt,
                prompt_id,
                pid,
            }) => {
                let session = Name::parse("session", &own(session, pid)?)?;
                // The turn begins at once, bounded by the ids of everything done before the
                // prompt; what the session did before it is then recorded before the hook is
                // answered (other sessions' saves in progress are left alone). Settled first,
                // a hook that gives up waiting would let the agent's next edits be counted in
                // the turn before.
                let agent = Name::from_id("agent", agent.as_bytes());
                let turn = rec.bound_turn(session.as_str(), |point| {
                    rec.turns().begin(
                        session.as_str(),
                        agent.as_str(),
                        prompt,
                        prompt_id.clone(),
                        point,
                    )
                })?;
                Ok(format!(
                    "turn {}:{} began\n{}",
                    turn.session,
                    turn.number,
                    settled_after_bound(rec, session.as_str())
                ))
            }
            Command::Turn(TurnCommand::End {
                session,
                transcript,
                pid,
            }) => {
                let session = &own(session, pid)?;
                // Ended at once, then settled (as a turn begins, above).
                let ended = rec.bound_turn(session, |point| rec.turns().end(session, point))?;
                let settled = settled_after_bound(rec, session);
                Ok(match ended {
                    Some(t) => {
                        if let Some(path) = transcript {
                            self.keep_conversation(&t, path.clone());
                        }
                        format!("turn {}:{} ended\n{settled}", t.session, t.number)
                    }
                    None => format!("no turn was open\n{settled}"),
                })
            }
            Command::Tool(ToolCommand::Begin {
                session,
                name,
                id,
                pid,
            }) => {
                rec.turns().tool_begin(
                    &own(session, pid)?,
                    Tool {
                        name: name.clone(),
                        id: id.clone(),
                    },
                );
                Ok("ok\n".into())
            }
            Command::Tool(ToolCommand::End {
                session,
                name,
                id,
                pid,
            }) => {
                let session = &own(session, pid)?;
                // Forgotten at once: what the tool did carries it already (each change is
                // labelled when it is made), and is recorded before the hook is answered.
                rec.turns().tool_end(session, name, id.as_deref());
                rec.settle_session(session)?;
                Ok("ok\n".into())
            }
            Command::Whoami { json } => {
                let uid = crate::history::who::fs_uid(caller).unwrap_or(0);
                let who = rec.attributor().who(By { pid: caller, uid });
                let (turn, tool) = rec.turns().current(&who.session);
                let prompt = match turn {
                    Some(n) => rec
                        .history()
                        .turns(Some(&who.session))?
                        .into_iter()
                        .find(|t| t.number == n)
                        .map(|t| t.prompt),
                    None => None,
                };
                let default = who.session == rec.attributor().default_session();
                if *json {
                    return Ok(serde_json::json!({
                        "session": who.session, "agent": who.agent, "default": default,
                        "turn": turn.map(|n| format!("{}:{n}", who.session)),
                        "prompt": prompt, "tool": tool.map(|t| t.name),
                        "pid": who.pid, "process": who.process,
                    })
                    .to_string()
                        + "\n");
                }
                let mut out = format!("session {} (agent {})", who.session, who.agent);
                if default {
                    out += ": the mount's default; no agent or `rewind run` registered this \
                            process or its parents";
                }
                match (turn, prompt) {
                    (Some(n), prompt) => {
                        out +=
                            &format!("\nturn {}:{n}: {}", who.session, prompt.unwrap_or_default());
                    }
                    (None, _) => out += "\nno turn open",
                }
                Ok(out + "\n")
            }
            other => Err(Error::NotADaemonCommand(other.name())),
        }
    }
}

/// Record what `session` did before its turn's bound, once the turn has begun or ended: a
/// store that refuses it (a full disk) does not undo the switch, which is in the store; what
/// waits is recorded once the store takes writes. A line saying so, or nothing.
fn settled_after_bound(rec: &Recorder, session: &str) -> String {
    match rec.settle_session(session) {
        Ok(()) => String::new(),
        Err(e) => {
            tracing::error!("{session}'s last changes before its turn's bound wait: {e}");
            format!("its last changes are not all recorded yet: {e}\n")
        }
    }
}
