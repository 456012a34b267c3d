//! Attribution: which session and agent made a change.
//!
//! In order: `REWIND_SESSION` / `REWIND_AGENT` in the environment of the process that made the
//! change (read from `/proc`, so a bash tool started by an agent inherits them; a value that is
//! not a valid name is recorded under its one-to-one mapping, [`Name::from_id`]); a registration
//! of the process or one of its ancestors (`session start` written to `.rewind/ctl`, or a
//! rollback run by the daemon); otherwise the mount's default session and agent `unknown`.
//! Lookups are cached per process, keyed by pid *and* start time so a reused pid never inherits
//! another process's attribution, and held with the process's name so that an `execve` (a new
//! program, with its own environment: `exec env REWIND_SESSION=Y tool`) is looked up afresh.
//! The uid is the one the kernel gave with the request.
//!
//! An agent's session id is bound to the process tree that registered it first
//! ([`Attributor::claim`]): another live tree naming the same id is registered apart, in
//! `NAME~pidPID`, and the turn and tool commands it sends are taken as its own session's
//! ([`Attributor::session_for`]), so one agent can neither open nor close another's turns.
//! Once the first tree is gone (the agent exited), the id passes to whoever claims it next (a
//! resumed session).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::name::{Name, ROLLBACK_AGENT};

/// Who made a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Who {
    pub session: String,
    pub agent: String,
    pub pid: u32,
    pub process: String,
    /// A rollback run by the daemon: its changes are recorded as kind `restore`.
    pub restore: bool,
    /// The session's agent turn open when the operation happened, and the tool call.
    pub turn: Option<u32>,
    pub tool: Option<super::change::Tool>,
    /// The filesystem uid the process had (the one the kernel checks its file access by).
    pub uid: Option<u32>,
}

/// Who asked for an operation, as the kernel says with the request: the thread, and the
/// filesystem uid it checks the operation's access by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct By {
    pub pid: u32,
    pub uid: u32,
}

/// A process identity that survives pid reuse: pid and start time (clock ticks since boot).
type ProcKey = (u32, u64);

#[derive(Clone, Debug)]
struct Registration {
    session: String,
    agent: Option<String>,
    /// For a claimed session ([`Attributor::claim`]): the name the process asked for (the
    /// session itself, or the one it was registered apart from).
    asked: Option<String>,
}

/// The registered processes, and which process tree each claimed session belongs to.
#[derive(Default)]
struct Registrations {
    by_process: HashMap<ProcKey, Registration>,
    owners: HashMap<String, ProcKey>,
}

/// What a claim of a session came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The session is the claimant's (it was free, already its tree's, or its owner is gone).
    Own,
    /// Another live process tree (its root `owner`) holds the session: the claimant is
    /// registered in `session`, a session of its own.
    Apart { session: String, owner: u32 },
}

/// A turn or tool command named a session that another live process tree holds, from a process
/// that did not claim it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    pub session: String,
    pub owner: u32,
    /// The agent process the command was from, when it is under the owner (it never claimed
    /// the session itself).
    pub under: Option<u32>,
}

/// The process `pid` and its ancestors, nearest first, each with its start time: at most 64,
/// up to init or the first one gone.
fn ancestry(pid: u32) -> impl Iterator<Item = ProcKey> {
    let mut next = Some(pid);
    std::iter::from_fn(move || {
        let cur = next.take()?;
        let (ppid, start) = stat(cur)?;
        next = (cur > 1).then_some(ppid);
        Some((cur, start))
    })
    .take(64)
}

/// Whether `pid` is `ancestor` or runs under it.
fn descends(pid: u32, ancestor: u32) -> bool {
    ancestry(pid).any(|(p, _)| p == ancestor)
}

/// Whether `pid` (a process, or a thread of one) is `caller`'s process, one above it, or one
/// under it.
pub fn related(caller: u32, pid: u32) -> bool {
    let (caller, pid) = (process_of(caller), process_of(pid));
    descends(caller, pid) || descends(pid, caller)
}

/// The name a process tree is registered under when `name` belongs to another tree.
pub fn apart_name(name: &str, pid: u32) -> String {
    let suffix = format!("~pid{pid}");
    let mut end = super::name::MAX_LEN
        .saturating_sub(suffix.len())
        .min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &name[..end])
}

pub struct Attributor {
    default_session: String,
    registrations: Mutex<Registrations>,
    /// Threads of this daemon carrying out a rollback, and its session.
    restorers: Mutex<HashMap<u32, String>>,
    /// Session and agent of each process, with the name it had when they were looked up.
    cache: Mutex<HashMap<ProcKey, Cached>>,
    /// Who each pid was found to be a moment ago, so that a burst of changes by one process
    /// (`rm -rf`, `tar x`) reads /proc once rather than once a change. Within [`RECENT`] a pid
    /// cannot be reused (pids are handed out in a cycle through pid_max) and its answer stands;
    /// only a rename by exec in that instant would show a moment late.
    recent: Mutex<HashMap<u32, (Instant, Who)>>,
}

/// A process's attribution as looked up while it ran the program `name`.
#[derive(Clone)]
struct Cached {
    name: String,
    session: String,
    agent: String,
}

const RECENT: Duration = Duration::from_millis(20);

/// What `/proc/PID/stat` says of a process: its parent, its start time and its name.
fn stat_full(pid: u32) -> Option<(u32, u64, String)> {
    let s = crate::procfs::stat(pid)?;
    Some((s.ppid, s.start, s.name))
}

fn stat(pid: u32) -> Option<(u32, u64)> {
    stat_full(pid).map(|(ppid, start, _)| (ppid, start))
}

/// The process a thread belongs to. FUSE names the thread that made a request (a Node tool
/// writes from a worker thread), but registrations and process trees are of processes.
pub fn process_of(tid: u32) -> u32 {
    crate::procfs::status(tid)
        .and_then(|s| s.tgid())
        .unwrap_or(tid)
}

/// The process that `caller` (a pid as this daemon sees it) knows as `pid`, as this daemon
/// sees it. A hook or a shell in a PID namespace of its own (an agent run in a container whose
/// workspace is the mount, a tool in a `bwrap --unshare-pid` or `unshare -p` sandbox) names
/// its agent or itself by the pid it sees there, which is another process's pid here (`1` is
/// init): registered as given, that process and everything under it would be recorded in the
/// session. The process is looked for among the caller and its ancestors first, then among
/// every process in the caller's namespace. `None`: the caller's namespace has no process
/// `pid` (or the caller is gone).
pub fn pid_as_seen_here(caller: u32, pid: u32) -> Option<u32> {
    let theirs = crate::procfs::pid_namespace(caller)?;
    if crate::procfs::pid_namespace(std::process::id()).as_ref() == Some(&theirs) {
        return Some(pid);
    }
    let depth = crate::procfs::status(caller)?.ns_pids().len();
    let is_it = |p: u32| {
        crate::procfs::status(p).is_some_and(|s| {
            let pids = s.ns_pids();
            pids.len() == depth && pids.last() == Some(&pid)
        }) && crate::procfs::pid_namespace(p).as_ref() == Some(&theirs)
    };
    ancestry(caller)
        .map(|(p, _)| p)
        .find(|p| is_it(*p))
        .or_else(|| crate::procfs::processes().find(|p| is_it(*p)))
}

/// The filesystem uid of a process (from `/proc/PID/status`), for a caller known only by pid
/// (the writer of a `.rewind/ctl` line); recording takes the uid from the FUSE request
/// instead.
pub fn fs_uid(pid: u32) -> Option<u32> {
    crate::procfs::status(pid)?.fs_uid()
}

/// The user name of a uid (from `/etc/passwd`), or the number as text.
pub fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

fn proc_key(pid: u32) -> Option<ProcKey> {
    stat(pid).map(|(_, start)| (pid, start))
}

/// Whether the process `key` names is still running (not a later process with its pid).
fn alive(key: ProcKey) -> bool {
    proc_key(key.0) == Some(key)
}

/// What a process's environment names it: `REWIND_SESSION` and `REWIND_AGENT` (set by a
/// person or `rewind run`: they come first), and `REWIND_HOOK_SESSION` and `REWIND_HOOK_AGENT`
/// (what an agent's hook gives every shell command of the agent, Claude Code's through its
/// `CLAUDE_ENV_FILE`: they count only for a process no registration covers, a background job
/// of a tool call whose shell has exited, reparented away from the agent).
#[derive(Default)]
struct EnvNames {
    session: Option<String>,
    agent: Option<String>,
    hook_session: Option<String>,
    hook_agent: Option<String>,
}

fn env_vars(pid: u32) -> EnvNames {
    let mut names = EnvNames::default();
    let Some(env) = crate::procfs::environ(pid) else {
        return names;
    };
    for var in &env {
        let Some(at) = var.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, v) = (&var[..at], &var[at + 1..]);
        // An empty value is unset, as `${VAR:-…}` treats `VAR=`: not a session named `%`.
        if v.is_empty() {
            continue;
        }
        match name {
            b"REWIND_SESSION" => names.session = Some(named("session", pid, v)),
            b"REWIND_AGENT" => names.agent = Some(named("agent", pid, v)),
            b"REWIND_HOOK_SESSION" => names.hook_session = Some(named("session", pid, v)),
            b"REWIND_HOOK_AGENT" => names.hook_agent = Some(named("agent", pid, v)),
            _ => {}
        }
    }
    names
}

/// The name a value from the environment is recorded under: the value itself when it is a valid
/// name (and not one of rewind's own agents), otherwise its one-to-one mapping
/// ([`Name::from_id`], which keeps the value as given), so the process's changes still land in a
/// session of its own, and never pass for a rollback's.
fn named(what: &'static str, pid: u32, bytes: &[u8]) -> String {
    let name = Name::from_id(what, bytes);
    if let Some(given) = name.given() {
        tracing::info!(
            "process {pid}: REWIND_{} {given:?} is not a name of its own; recorded as {name}",
            what.to_uppercase()
        );
    }
    name.into_string()
}

impl Attributor {
    pub fn new(default_session: String) -> Attributor {
        Attributor {
            default_session,
            registrations: Mutex::new(Registrations::default()),
            restorers: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            recent: Mutex::new(HashMap::new()),
        }
    }

    pub fn default_session(&self) -> &str {
        &self.default_session
    }

    /// Attribute `pid` (the process of that thread) and its descendants to `session` (and
    /// `agent`, if given).
    pub fn register(&self, pid: u32, session: String, agent: Option<String>) -> bool {
        let pid = process_of(pid);
        let Some(key) = proc_key(pid) else {
            return false;
        };
        self.lock_registrations().by_process.insert(
            key,
            Registration {
                session,
                agent,
                asked: None,
            },
        );
        self.forget_lookups();
        true
    }

    /// Register `pid` (the agent process) and its descendants as `session`, which becomes its
    /// tree's: unless another live process tree claimed it first, and then in a session of its
    /// own ([`apart_name`]). `None`: the process is gone.
    pub fn claim(&self, pid: u32, session: String, agent: Option<String>) -> Option<Claim> {
        let pid = process_of(pid);
        let key = proc_key(pid)?;
        let mut regs = self.lock_registrations();
        let claim = match regs.owners.get(&session) {
            // A process under the owner is apart too (a nested agent resuming the session from
            // the agent's shell, a tool's subprocess sending its hooks): as the owner it would
            // put the agent's own next hook apart, and its prompts would end the agent's turns.
            Some(owner) if *owner != key && alive(*owner) => Claim::Apart {
                session: apart_name(&session, pid),
                owner: owner.0,
            },
            _ => Claim::Own,
        };
        let registered = match &claim {
            Claim::Own => session.clone(),
            Claim::Apart { session, .. } => session.clone(),
        };
        if regs.owners.len() > 1024 {
            regs.owners.retain(|_, owner| alive(*owner));
            let live: Vec<ProcKey> = regs.by_process.keys().copied().collect();
            for k in live.into_iter().filter(|k| !alive(*k)) {
                regs.by_process.remove(&k);
            }
        }
        regs.owners.insert(registered.clone(), key);
        regs.by_process.insert(
            key,
            Registration {
                session: registered,
                agent,
                asked: Some(session),
            },
        );
        drop(regs);
        self.forget_lookups();
        Some(claim)
    }

    /// The session a turn or tool command naming `asked` is about, for the process `caller`
    /// that sent it: the one its tree claimed under that name (`asked`, or the session it was
    /// registered apart in); `asked` itself when no live tree holds it (an agent's last hook
    /// may run after the agent exited); refused when another live tree holds it and the
    /// caller's never claimed it.
    ///
    /// `agent`, when given, is the agent process the command is from (what `rewind hook`
    /// found above itself): only a claim by it or by a process between it and the caller
    /// counts, and none if it is not above the caller (the hook's exchange, left waiting when
    /// the hook gave up, has since been given another parent). A process under the owner
    /// whose own claim was never recorded (its hook gave up waiting) would otherwise be taken
    /// for the owner, and its Stop would end the owner's turn.
    pub fn session_for(
        &self,
        asked: &str,
        caller: u32,
        agent: Option<u32>,
    ) -> Result<String, Foreign> {
        let agent = agent.map(process_of);
        let mut up: Vec<ProcKey> = ancestry(process_of(caller)).collect();
        if let Some(agent) = agent {
            let to = up
                .iter()
                .position(|(p, _)| *p == agent)
                .map_or(0, |i| i + 1);
            up.truncate(to);
        }
        let regs = self.lock_registrations();
        if let Some(r) = up.iter().find_map(|key| {
            regs.by_process
                .get(key)
                .filter(|r| r.asked.as_deref() == Some(asked))
        }) {
            return Ok(r.session.clone());
        }
        match regs.owners.get(asked) {
            Some(owner) if alive(*owner) => Err(Foreign {
                session: asked.to_string(),
                owner: owner.0,
                under: agent.filter(|a| !up.is_empty() && *a != owner.0 && descends(*a, owner.0)),
            }),
            _ => Ok(asked.to_string()),
        }
    }

    /// Whether a live registration attributes changes to `session` (a rollback's session must be
    /// one nobody is in yet).
    pub fn is_registered(&self, session: &str) -> bool {
        self.lock_registrations()
            .by_process
            .iter()
            .any(|(key, r)| r.session == session && alive(*key))
    }

    fn forget_lookups(&self) {
        self.lock_cache().clear();
        self.lock_recent().clear();
    }

    /// Drop the registration of `pid` or its nearest registered ancestor. Returns the session.
    pub fn unregister(&self, pid: u32) -> Option<String> {
        self.unregister_where(pid, |_| true)
    }

    /// Drop the registration of session `asked` (as its tree claimed it: the session itself or
    /// the one it was registered apart in) held by `pid` or its nearest ancestor holding it; a
    /// registration of another session on the way is left. Returns the session.
    pub fn unregister_session(&self, pid: u32, asked: &str) -> Option<String> {
        self.unregister_where(pid, |r| {
            r.session == asked || r.asked.as_deref() == Some(asked)
        })
    }

    /// As [`unregister_session`](Attributor::unregister_session), but only a registration of
    /// `pid` itself.
    pub fn unregister_session_of(&self, pid: u32, asked: &str) -> Option<String> {
        self.unregister_where_up_to(pid, 1, |r| {
            r.session == asked || r.asked.as_deref() == Some(asked)
        })
    }

    fn unregister_where(&self, pid: u32, wanted: impl Fn(&Registration) -> bool) -> Option<String> {
        self.unregister_where_up_to(pid, 64, wanted)
    }

    /// The nearest of `pid` and its ancestors, `levels` of them at most, whose registration is
    /// `wanted`, unregistered.
    fn unregister_where_up_to(
        &self,
        pid: u32,
        levels: usize,
        wanted: impl Fn(&Registration) -> bool,
    ) -> Option<String> {
        let mut regs = self.lock_registrations();
        let key = ancestry(process_of(pid))
            .take(levels)
            .find(|key| regs.by_process.get(key).is_some_and(&wanted))?;
        let r = regs.by_process.remove(&key)?;
        regs.owners.retain(|_, owner| *owner != key);
        drop(regs);
        self.forget_lookups();
        Some(r.session)
    }

    /// Attribute everything thread `tid` (of this process) does to rollback `session`, until
    /// [`end_restore`](Attributor::end_restore).
    pub fn begin_restore(&self, tid: u32, session: String) {
        self.restorers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tid, session);
    }

    pub fn end_restore(&self, tid: u32) {
        self.restorers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&tid);
    }

    /// Who made a change: `by.pid`'s attribution, with the uid of the request (never cached
    /// with the attribution: a setuid program keeps its pid and start time).
    pub fn who(&self, by: By) -> Who {
        let pid = by.pid;
        if let Some(session) = self
            .restorers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
        {
            return Who {
                session: session.clone(),
                agent: ROLLBACK_AGENT.into(),
                pid,
                process: "rewind".into(),
                restore: true,
                turn: None,
                tool: None,
                uid: Some(rustix::process::geteuid().as_raw()),
            };
        }
        if let Some((at, who)) = self.lock_recent().get(&pid)
            && at.elapsed() < RECENT
        {
            return Who {
                uid: Some(by.uid),
                ..who.clone()
            };
        }
        let who = self.look_up(pid, by.uid);
        let mut recent = self.lock_recent();
        if recent.len() >= 1024 {
            recent.retain(|_, (at, _)| at.elapsed() < RECENT);
        }
        recent.insert(pid, (Instant::now(), who.clone()));
        who
    }

    /// Who `pid` is, from /proc and the registrations.
    fn look_up(&self, pid: u32, uid: u32) -> Who {
        // One read of /proc/PID/stat gives the name and the start time that keys the cache. A
        // process whose name changed since has exec'd another program, which has its own
        // environment: it is looked up again.
        let (process, key) = match stat_full(pid) {
            Some((_, start, name)) => (name, Some((pid, start))),
            None => ("?".to_string(), None),
        };
        if let Some(key) = key
            && let Some(Cached { session, agent, .. }) = self
                .lock_cache()
                .get(&key)
                .filter(|c| c.name == process)
                .cloned()
        {
            return Who {
                session,
                agent,
                pid,
                process,
                restore: false,
                turn: None,
                tool: None,
                uid: Some(uid),
            };
        }
        let (session, agent) = self.resolve(pid);
        if let Some(key) = key {
            let mut cache = self.lock_cache();
            if cache.len() > 4096 {
                cache.clear();
            }
            cache.insert(
                key,
                Cached {
                    name: process.clone(),
                    session: session.clone(),
                    agent: agent.clone(),
                },
            );
        }
        Who {
            session,
            agent,
            pid,
            process,
            restore: false,
            turn: None,
            tool: None,
            uid: Some(uid),
        }
    }

    fn resolve(&self, pid: u32) -> (String, String) {
        let env = env_vars(pid);
        let env_agent = env.agent;
        if let Some(session) = env.session {
            return (session, env_agent.unwrap_or_else(|| "unknown".into()));
        }
        let regs = self.lock_registrations();
        let regs = &regs.by_process;
        if !regs.is_empty() {
            // Up from the thread's process (its own parent is the process's parent).
            if let Some(r) = ancestry(process_of(pid)).find_map(|key| regs.get(&key)) {
                let agent = r
                    .agent
                    .clone()
                    .or(env_agent)
                    .unwrap_or_else(|| "unknown".into());
                return (r.session.clone(), agent);
            }
        }
        if let Some(session) = env.hook_session {
            let agent = env_agent.or(env.hook_agent);
            return (session, agent.unwrap_or_else(|| "unknown".into()));
        }
        (
            self.default_session.clone(),
            env_agent.unwrap_or_else(|| "unknown".into()),
        )
    }

    fn lock_registrations(&self) -> std::sync::MutexGuard<'_, Registrations> {
        self.registrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_recent(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (Instant, Who)>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<ProcKey, Cached>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parses_names_with_spaces_and_parens() {
        let (ppid, start) = stat(std::process::id()).unwrap();
        assert!(ppid > 0 && start > 0);
        assert!(stat(u32::MAX).is_none());
    }

    /// A caller in the daemon's own PID namespace means the pid it gives; one that is gone
    /// means none (the namespace case is `hostile25::an_agent_in_a_pid_namespace_*`).
    #[test]
    fn a_pid_from_the_daemons_own_namespace_is_taken_as_given() {
        assert_eq!(pid_as_seen_here(std::process::id(), 4242), Some(4242));
        assert_eq!(pid_as_seen_here(u32::MAX, 1), None);
    }

    #[test]
    fn registrations_cover_the_process_and_fall_back_to_the_default() {
        let a = Attributor::new("default".into());
        let me = std::process::id();
        let by = |uid| By { pid: me, uid };
        let who = a.who(by(4242));
        assert_eq!(who.pid, me);
        assert_eq!(who.uid, Some(4242), "the request's uid, not the process's");
        if std::env::var_os("REWIND_SESSION").is_none() {
            assert_eq!(who.session, "default");
            assert!(a.register(me, "s1".into(), Some("bot".into())));
            let who = a.who(by(7));
            assert_eq!(who.uid, Some(7));
            assert_eq!((who.session.as_str(), who.agent.as_str()), ("s1", "bot"));
            assert_eq!(a.unregister(me).as_deref(), Some("s1"));
            assert_eq!(a.who(by(0)).session, "default");
        }
    }

    /// A child process that lives long enough for a test.
    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_claimed_session_belongs_to_its_tree_until_it_is_gone() {
        let a = Attributor::new("default".into());
        let (mut first, second) = (sleeper(), sleeper());
        let (p1, p2) = (first.id(), second.id());
        assert_eq!(a.claim(p1, "s".into(), None), Some(Claim::Own));
        assert_eq!(a.claim(p1, "s".into(), None), Some(Claim::Own), "again");
        let apart = apart_name("s", p2);
        assert_eq!(
            a.claim(p2, "s".into(), None),
            Some(Claim::Apart {
                session: apart.clone(),
                owner: p1
            })
        );
        assert_eq!(a.who(By { pid: p2, uid: 0 }).session, apart);
        assert_eq!(a.who(By { pid: p1, uid: 0 }).session, "s");
        assert_eq!(a.session_for("s", p1, None).as_deref(), Ok("s"));
        assert_eq!(a.session_for("s", p2, None), Ok(apart.clone()));
        // This process is in neither tree and claimed nothing.
        assert_eq!(
            a.session_for("s", std::process::id(), None),
            Err(Foreign {
                session: "s".into(),
                owner: p1,
                under: None
            })
        );
        // The first tree is gone: the id passes on, to whoever claims it next.
        first.kill().unwrap();
        first.wait().unwrap();
        assert_eq!(
            a.session_for("s", std::process::id(), None).as_deref(),
            Ok("s")
        );
        let third = sleeper();
        assert_eq!(a.claim(third.id(), "s".into(), None), Some(Claim::Own));
        assert_eq!(
            a.who(By {
                pid: third.id(),
                uid: 0
            })
            .session,
            "s"
        );
        for mut c in [second, third] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(apart_name(&"é".repeat(64), u32::MAX).len() <= super::super::name::MAX_LEN);
    }

    /// A command from an agent process under the owner that never claimed the session (its
    /// hook gave up) is refused, though the owner's claim is above it; the owner's own, named
    /// as the agent, is taken; an agent that is not above the writer counts no claim; only the
    /// agent's own registration is ended by `unregister_session_of`.
    #[test]
    fn a_command_naming_its_agent_counts_only_claims_up_to_it() {
        let a = Attributor::new("default".into());
        let owner = std::process::id();
        let mut child = sleeper();
        let kid = child.id();
        assert_eq!(a.claim(owner, "s".into(), None), Some(Claim::Own));
        // From the owner's tree with no agent named: the owner's claim, as before.
        assert_eq!(a.session_for("s", kid, None).as_deref(), Ok("s"));
        assert_eq!(
            a.session_for("s", kid, Some(kid)),
            Err(Foreign {
                session: "s".into(),
                owner,
                under: Some(kid)
            })
        );
        assert_eq!(a.session_for("s", kid, Some(owner)).as_deref(), Ok("s"));
        assert_eq!(a.session_for("s", owner, Some(owner)).as_deref(), Ok("s"));
        // The named agent is not above the writer: no claim counts.
        assert_eq!(
            a.session_for("s", owner, Some(kid)),
            Err(Foreign {
                session: "s".into(),
                owner,
                under: None
            })
        );
        assert_eq!(a.unregister_session_of(kid, "s"), None);
        assert_eq!(a.who(By { pid: kid, uid: 0 }).session, "s");
        assert_eq!(a.unregister_session_of(owner, "s").as_deref(), Some("s"));
        assert_eq!(a.who(By { pid: kid, uid: 0 }).session, "default");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_child_of_the_owner_naming_its_session_is_apart_and_the_owner_keeps_it() {
        let a = Attributor::new("default".into());
        let owner = std::process::id();
        let mut child = sleeper();
        assert_eq!(a.claim(owner, "s".into(), None), Some(Claim::Own));
        let apart = apart_name("s", child.id());
        assert_eq!(
            a.claim(child.id(), "s".into(), None),
            Some(Claim::Apart {
                session: apart.clone(),
                owner
            })
        );
        // The agent's next hook (each prompt claims again) keeps its own session.
        assert_eq!(a.claim(owner, "s".into(), None), Some(Claim::Own));
        assert_eq!(a.session_for("s", child.id(), None), Ok(apart));
        assert_eq!(a.session_for("s", owner, None).as_deref(), Ok("s"));
        let _ = child.kill();
        let _ = child.wait();
    }
}
