//! Attribution: which session and agent made a change.
//!
//! In order: `REWIND_SESSION` / `REWIND_AGENT` in the environment of the process that made the
//! change (read from `/proc`, so a bash tool started by an agent inherits them; a value that is
//! not a valid name is recorded under its one-to-one mapping, [`Name::from_id`]); a registration
//! of the process or one of its ancestors (`session start` written to `.rewind/ctl`, or a
//! rollback run by the daemon); otherwise the mount's default session and agent `unknown`.
//! Lookups are cached per process, keyed by pid *and* start time so a reused pid never inherits
//! another process's attribution. The uid is read afresh at each lookup.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::name::Name;

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

/// A process identity that survives pid reuse: pid and start time (clock ticks since boot).
type ProcKey = (u32, u64);

#[derive(Clone, Debug)]
struct Registration {
    session: String,
    agent: Option<String>,
}

pub struct Attributor {
    default_session: String,
    registrations: Mutex<HashMap<ProcKey, Registration>>,
    /// Threads of this daemon carrying out a rollback, and its session.
    restorers: Mutex<HashMap<u32, String>>,
    cache: Mutex<HashMap<ProcKey, (String, String)>>,
    /// Who each pid was found to be a moment ago, so that a burst of changes by one process
    /// (`rm -rf`, `tar x`) reads /proc once rather than once a change. Within [`RECENT`] a pid
    /// cannot be reused (pids are handed out in a cycle through pid_max) and its answer stands;
    /// only a rename by exec in that instant would show a moment late.
    recent: Mutex<HashMap<u32, (Instant, Who)>>,
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

/// The filesystem uid of a process or thread (the last of the four on the `Uid:` line of
/// `/proc/PID/status`). Read at each lookup, never cached with the attribution: a setuid
/// program keeps its pid and start time.
fn fs_uid(pid: u32) -> Option<u32> {
    crate::procfs::status(pid)?.fs_uid()
}

fn proc_key(pid: u32) -> Option<ProcKey> {
    stat(pid).map(|(_, start)| (pid, start))
}

/// `REWIND_SESSION` and `REWIND_AGENT` from a process's environment.
fn env_vars(pid: u32) -> (Option<String>, Option<String>) {
    let Some(env) = crate::procfs::environ(pid) else {
        return (None, None);
    };
    let mut session = None;
    let mut agent = None;
    for var in &env {
        if let Some(v) = var.strip_prefix(b"REWIND_SESSION=") {
            session = Some(named("session", pid, v));
        } else if let Some(v) = var.strip_prefix(b"REWIND_AGENT=") {
            agent = Some(named("agent", pid, v));
        }
    }
    (session, agent)
}

/// The name a value from the environment is recorded under: the value itself when it is a valid
/// name, otherwise its one-to-one mapping ([`Name::from_id`], which keeps the value as given), so
/// the process's changes still land in a session of its own.
fn named(what: &'static str, pid: u32, bytes: &[u8]) -> String {
    let name = Name::from_id(what, bytes);
    if let Some(given) = name.given() {
        tracing::info!(
            "process {pid}: REWIND_{} {given:?} is not a name; recorded as {name}",
            what.to_uppercase()
        );
    }
    name.into_string()
}

impl Attributor {
    pub fn new(default_session: String) -> Attributor {
        Attributor {
            default_session,
            registrations: Mutex::new(HashMap::new()),
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
        self.lock_registrations()
            .insert(key, Registration { session, agent });
        self.lock_cache().clear();
        self.lock_recent().clear();
        true
    }

    /// Drop the registration of `pid` or its nearest registered ancestor. Returns the session.
    pub fn unregister(&self, pid: u32) -> Option<String> {
        let mut regs = self.lock_registrations();
        let mut cur = process_of(pid);
        for _ in 0..64 {
            let (ppid, start) = stat(cur)?;
            if let Some(r) = regs.remove(&(cur, start)) {
                drop(regs);
                self.lock_cache().clear();
                self.lock_recent().clear();
                return Some(r.session);
            }
            if cur <= 1 {
                return None;
            }
            cur = ppid;
        }
        None
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

    /// Who `pid` is, for recording a change it makes.
    pub fn who(&self, pid: u32) -> Who {
        if let Some(session) = self
            .restorers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
        {
            return Who {
                session: session.clone(),
                agent: "rewind".into(),
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
            return who.clone();
        }
        let who = self.look_up(pid);
        let mut recent = self.lock_recent();
        if recent.len() >= 1024 {
            recent.retain(|_, (at, _)| at.elapsed() < RECENT);
        }
        recent.insert(pid, (Instant::now(), who.clone()));
        who
    }

    /// Who `pid` is, from /proc and the registrations.
    fn look_up(&self, pid: u32) -> Who {
        // One read of /proc/PID/stat gives the name and the start time that keys the cache.
        let (process, key) = match stat_full(pid) {
            Some((_, start, name)) => (name, Some((pid, start))),
            None => ("?".to_string(), None),
        };
        let uid = fs_uid(pid);
        if let Some(key) = key
            && let Some((session, agent)) = self.lock_cache().get(&key).cloned()
        {
            return Who {
                session,
                agent,
                pid,
                process,
                restore: false,
                turn: None,
                tool: None,
                uid,
            };
        }
        let (session, agent) = self.resolve(pid);
        if let Some(key) = key {
            let mut cache = self.lock_cache();
            if cache.len() > 4096 {
                cache.clear();
            }
            cache.insert(key, (session.clone(), agent.clone()));
        }
        Who {
            session,
            agent,
            pid,
            process,
            restore: false,
            turn: None,
            tool: None,
            uid,
        }
    }

    fn resolve(&self, pid: u32) -> (String, String) {
        let (env_session, env_agent) = env_vars(pid);
        if let Some(session) = env_session {
            return (session, env_agent.unwrap_or_else(|| "unknown".into()));
        }
        let regs = self.lock_registrations();
        if !regs.is_empty() {
            // Walk up from the thread's process (its own parent is the process's parent).
            let mut cur = process_of(pid);
            for _ in 0..64 {
                let Some((ppid, start)) = stat(cur) else {
                    break;
                };
                if let Some(r) = regs.get(&(cur, start)) {
                    let agent = r
                        .agent
                        .clone()
                        .or(env_agent)
                        .unwrap_or_else(|| "unknown".into());
                    return (r.session.clone(), agent);
                }
                if cur <= 1 {
                    break;
                }
                cur = ppid;
            }
        }
        (
            self.default_session.clone(),
            env_agent.unwrap_or_else(|| "unknown".into()),
        )
    }

    fn lock_registrations(&self) -> std::sync::MutexGuard<'_, HashMap<ProcKey, Registration>> {
        self.registrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_recent(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (Instant, Who)>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<ProcKey, (String, String)>> {
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

    #[test]
    fn registrations_cover_the_process_and_fall_back_to_the_default() {
        let a = Attributor::new("default".into());
        let me = std::process::id();
        let who = a.who(me);
        assert_eq!(who.pid, me);
        assert_eq!(who.uid, Some(rustix::process::geteuid().as_raw()));
        if std::env::var_os("REWIND_SESSION").is_none() {
            assert_eq!(who.session, "default");
            assert!(a.register(me, "s1".into(), Some("bot".into())));
            let who = a.who(me);
            assert_eq!((who.session.as_str(), who.agent.as_str()), ("s1", "bot"));
            assert_eq!(a.unregister(me).as_deref(), Some("s1"));
            assert_eq!(a.who(me).session, "default");
        }
    }
}
