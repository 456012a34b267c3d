//! The control directory `.rewind/`: a small typed tree of virtual nodes, resolved here and
//! nowhere else. Reachable by path from the workspace root, never listed by its `readdir`.
//!
//! ```text
//! .rewind/README  status  log  log.json  ctl  events
//! .rewind/at/POINT/...            the whole workspace at POINT, read-only
//! .rewind/versions/PATH/ID        every recorded version of PATH
//! .rewind/sessions/NAME/log       the changes of one session
//! ```
//!
//! Virtual inode numbers live above [`BASE`]; they are never forgotten (the table only grows
//! with what was looked at). File contents are made when the file is opened, so a reader sees one
//! consistent snapshot, and served with direct I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::history::point;
use crate::history::recorder::Source;
use crate::history::retention::Retention;
use crate::history::rollback::{self, Selector};
use crate::history::view::View;
use crate::history::{Recorder, time};
use crate::store::{FileKind, FileState, Order, Query};

pub const NAME: &[u8] = b".rewind";
/// Virtual inode numbers start here, far above any counter value the inode table reaches.
pub const BASE: u64 = 1 << 62;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Dir,
    Readme,
    Status,
    Log,
    LogJson,
    Ctl,
    Events,
    At,
    /// A path in the past tree right after change `at` (`path` empty: its root).
    AtPath {
        at: u64,
        path: Vec<u8>,
    },
    Versions,
    /// `.rewind/versions/PATH`: PATH's versions, and the versions of paths below it.
    VersionsOf(Vec<u8>),
    Version(Vec<u8>, u64),
    Sessions,
    Session(String),
    SessionLog(String),
}

/// What a node is to `stat`.
pub enum Kind {
    Dir,
    File { size: u64, writable: bool },
    Symlink,
}

const README: &str = "\
This is rewind's control directory. Nothing here is part of your project.

  status              the mount, the store, counts, sessions
  log, log.json       the history, newest last (as `rewind log`, `rewind log --json`)
  at/POINT/...        the whole workspace at POINT (a change id, checkpoint, RFC 3339 time or
                      a duration ago like 15m), read-only: diff -r .rewind/at/NAME/src src
  versions/PATH/ID    every recorded version of PATH, named by change id
  sessions/NAME/log   the changes of one session
  events              blocks; one JSON line per new change as it happens
  ctl                 write a command, read the result on the same open file:
                        checkpoint NAME
                        undo ID
                        rollback session NAME | agent NAME | since POINT | to POINT
                        rollback file PATH [to POINT]
                        session start NAME [agent NAME]
                        session end
                        gc [keep DURATION] [max-size BYTES]
                        sync  (record what is held back now: new files wait 0.5 s)
                      any of them may end with --dry-run (rollbacks also take --force)
";

pub struct Control {
    recorder: Arc<Recorder>,
    source: Arc<dyn Source>,
    /// The workspace as mounted, where rollbacks act (through the mount, so they are recorded).
    workspace: std::path::PathBuf,
    state: Arc<super::MountState>,
    nodes: Mutex<(HashMap<Node, u64>, HashMap<u64, Node>)>,
}

impl Control {
    pub fn new(
        recorder: Arc<Recorder>,
        source: Arc<dyn Source>,
        workspace: std::path::PathBuf,
        state: Arc<super::MountState>,
    ) -> Control {
        Control {
            recorder,
            source,
            workspace,
            state,
            nodes: Mutex::new((HashMap::new(), HashMap::new())),
        }
    }

    pub fn is_virtual(ino: u64) -> bool {
        ino >= BASE
    }

    /// The inode number of a node (allocated on first use).
    pub fn ino(&self, node: Node) -> u64 {
        let mut t = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&ino) = t.0.get(&node) {
            return ino;
        }
        let ino = BASE + t.1.len() as u64;
        t.0.insert(node.clone(), ino);
        t.1.insert(ino, node);
        ino
    }

    pub fn node(&self, ino: u64) -> Option<Node> {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .get(&ino)
            .cloned()
    }

    fn view(&self) -> View<'_> {
        View {
            store: self.recorder.store(),
            source: &*self.source,
        }
    }

    /// The child `name` of `parent`, if there is one.
    pub fn lookup(&self, parent: &Node, name: &[u8]) -> Result<Option<Node>> {
        let s = String::from_utf8_lossy(name).into_owned();
        Ok(match parent {
            Node::Dir => match name {
                b"README" => Some(Node::Readme),
                b"status" => Some(Node::Status),
                b"log" => Some(Node::Log),
                b"log.json" => Some(Node::LogJson),
                b"ctl" => Some(Node::Ctl),
                b"events" => Some(Node::Events),
                b"at" => Some(Node::At),
                b"versions" => Some(Node::Versions),
                b"sessions" => Some(Node::Sessions),
                _ => None,
            },
            Node::At => match point::resolve(&s, self.recorder.store()) {
                Ok(at) => Some(Node::AtPath {
                    at,
                    path: Vec::new(),
                }),
                Err(Error::NotFound(_) | Error::Invalid(_)) => None,
                Err(e) => return Err(e),
            },
            Node::AtPath { at, path } => {
                let child = join(path, name);
                self.view()
                    .state_at(&child, *at)?
                    .state()
                    .map(|_| Node::AtPath {
                        at: *at,
                        path: child,
                    })
            }
            Node::Versions | Node::VersionsOf(_) => {
                let base = match parent {
                    Node::VersionsOf(p) => p.clone(),
                    _ => Vec::new(),
                };
                if let Node::VersionsOf(p) = parent
                    && let Ok(id) = s.parse::<u64>()
                    && let Some(c) = self.recorder.store().change(id)?
                    && c.path == *p
                    && c.after.as_ref().is_some_and(|a| a.kind == FileKind::File)
                {
                    return Ok(Some(Node::Version(p.clone(), id)));
                }
                let child = join(&base, name);
                // The path itself, or something below it, has history (not merely a longer name
                // that starts the same, like `main.rs.bak` for `main.rs`).
                let has_history = self
                    .recorder
                    .store()
                    .paths_with_prefix(&child)?
                    .iter()
                    .any(|p| *p == child || p.get(child.len()) == Some(&b'/'));
                has_history.then_some(Node::VersionsOf(child))
            }
            Node::Sessions => self.recorder.store().session(&s)?.map(|_| Node::Session(s)),
            Node::Session(n) if name == b"log" => Some(Node::SessionLog(n.clone())),
            _ => None,
        })
    }

    pub fn kind(&self, node: &Node) -> Result<Kind> {
        Ok(match node {
            Node::Dir
            | Node::At
            | Node::Versions
            | Node::VersionsOf(_)
            | Node::Sessions
            | Node::Session(_) => Kind::Dir,
            Node::Ctl => Kind::File {
                size: 0,
                writable: true,
            },
            Node::AtPath { at, path } => match self.view().state_at(path, *at)?.state() {
                Some(s) if s.kind == FileKind::Dir => Kind::Dir,
                Some(s) if s.kind == FileKind::Symlink => Kind::Symlink,
                Some(s) => Kind::File {
                    size: s.size,
                    writable: false,
                },
                None => return Err(Error::NotFound("gone".into())),
            },
            Node::Version(_, id) => {
                let size = self
                    .recorder
                    .store()
                    .change(*id)?
                    .and_then(|c| c.after)
                    .map_or(0, |a| a.size);
                Kind::File {
                    size,
                    writable: false,
                }
            }
            _ => Kind::File {
                size: 0,
                writable: false,
            },
        })
    }

    /// The entries of a virtual folder: name and node.
    pub fn list(&self, node: &Node) -> Result<Vec<(Vec<u8>, Node)>> {
        let store = self.recorder.store();
        Ok(match node {
            Node::Dir => [
                ("README", Node::Readme),
                ("status", Node::Status),
                ("log", Node::Log),
                ("log.json", Node::LogJson),
                ("ctl", Node::Ctl),
                ("events", Node::Events),
                ("at", Node::At),
                ("versions", Node::Versions),
                ("sessions", Node::Sessions),
            ]
            .into_iter()
            .map(|(n, node)| (n.as_bytes().to_vec(), node))
            .collect(),
            // Any point can be looked up; the checkpoints are listed.
            Node::At => store
                .checkpoints()?
                .into_iter()
                .map(|c| {
                    (
                        c.name.into_bytes(),
                        Node::AtPath {
                            at: c.id,
                            path: Vec::new(),
                        },
                    )
                })
                .collect(),
            Node::AtPath { at, path } => self
                .view()
                .list_at(path, *at)?
                .into_iter()
                .map(|(name, _)| {
                    (
                        name.clone(),
                        Node::AtPath {
                            at: *at,
                            path: join(path, &name),
                        },
                    )
                })
                .collect(),
            Node::Versions | Node::VersionsOf(_) => {
                let base = match node {
                    Node::VersionsOf(p) => p.clone(),
                    _ => Vec::new(),
                };
                let mut out = Vec::new();
                if !base.is_empty() {
                    let q = Query {
                        path: Some(base.clone()),
                        order: Order::OldestFirst,
                        ..Query::default()
                    };
                    for c in store.query(&q)? {
                        if c.path == base
                            && c.after.as_ref().is_some_and(|a| a.kind == FileKind::File)
                        {
                            out.push((
                                c.id.to_string().into_bytes(),
                                Node::Version(base.clone(), c.id),
                            ));
                        }
                    }
                }
                let prefix = if base.is_empty() {
                    Vec::new()
                } else {
                    join(&base, b"")
                };
                let mut names: Vec<Vec<u8>> = store
                    .paths_with_prefix(&prefix)?
                    .into_iter()
                    .filter_map(|p| {
                        p[prefix.len()..]
                            .split(|b| *b == b'/')
                            .next()
                            .map(<[u8]>::to_vec)
                    })
                    .filter(|n| !n.is_empty())
                    .collect();
                names.dedup();
                out.extend(names.into_iter().map(|n| {
                    let child = join(&base, &n);
                    (n, Node::VersionsOf(child))
                }));
                out
            }
            Node::Sessions => store
                .sessions()?
                .into_iter()
                .map(|s| (s.name.clone().into_bytes(), Node::Session(s.name)))
                .collect(),
            Node::Session(n) => vec![(b"log".to_vec(), Node::SessionLog(n.clone()))],
            _ => return Err(Error::Invalid("not a folder".into())),
        })
    }

    pub fn readlink(&self, node: &Node) -> Result<Vec<u8>> {
        match node {
            Node::AtPath { at, path } => self
                .view()
                .content_at(path, *at)?
                .ok_or_else(|| Error::NotFound("gone".into())),
            _ => Err(Error::Invalid("not a symlink".into())),
        }
    }

    /// The content of a file node, made now.
    pub fn content(&self, node: &Node) -> Result<Vec<u8>> {
        self.recorder.flush_pending_older(true)?;
        let store = self.recorder.store();
        let lines = |q: Query, json: bool| -> Result<Vec<u8>> {
            let mut out = String::new();
            for c in store.query(&q)? {
                let line = if json {
                    crate::history::format::change_json(&c).to_string()
                } else {
                    crate::history::format::change_line(&c)
                };
                out.push_str(&line);
                out.push('\n');
            }
            Ok(out.into_bytes())
        };
        match node {
            Node::Readme => Ok(README.as_bytes().to_vec()),
            Node::Log => lines(Query::default(), false),
            Node::LogJson => lines(Query::default(), true),
            Node::SessionLog(s) => lines(
                Query {
                    session: Some(s.clone()),
                    ..Query::default()
                },
                false,
            ),
            Node::Status => self.status(),
            Node::AtPath { at, path } => self
                .view()
                .content_at(path, *at)?
                .ok_or_else(|| Error::NotFound("gone".into())),
            Node::Version(_, id) => {
                let c = store
                    .change(*id)?
                    .ok_or_else(|| Error::NotFound("gone".into()))?;
                match c.after.and_then(|a| a.hash) {
                    Some(h) => store.read_blob(&h),
                    None => Ok(Vec::new()),
                }
            }
            _ => Ok(Vec::new()),
        }
    }

    fn status(&self) -> Result<Vec<u8>> {
        let store = self.recorder.store();
        let stats = store.stats()?;
        let mut out = format!(
            "workspace: {}\nstore: {}\nstate: mounted\n{}changes: {}\nlast change: {}\nblobs: {} ({} bytes stored)\ndefault session: {}\nsessions:\n",
            self.workspace.display(),
            store.dir().display(),
            self.state.describe(),
            stats.changes,
            stats.last_id,
            stats.blobs,
            stats.blob_bytes,
            self.recorder.attributor().default_session(),
        );
        for s in store.sessions()? {
            out += &format!(
                "  {} ({} changes, last {})\n",
                s.name,
                s.count,
                time::short(s.last_time_ns)
            );
        }
        Ok(out.into_bytes())
    }

    /// Run one command written to `ctl` by process `pid`. `Err` is a bad command (EINVAL); the
    /// text is what the writer reads back either way.
    pub fn command(&self, line: &str, pid: u32) -> std::result::Result<String, String> {
        // Everything done so far belongs before a checkpoint or in a rollback's view.
        self.recorder
            .flush_pending_older(true)
            .map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let dry = words.last() == Some(&"--dry-run");
        let force = words.contains(&"--force");
        let words: Vec<&str> = words
            .into_iter()
            .filter(|w| *w != "--dry-run" && *w != "--force")
            .collect();
        let store = self.recorder.store();
        let resolve = |p: &str| point::resolve(p, store).map_err(|e| e.to_string());
        let path = |p: &str| -> std::result::Result<Vec<u8>, String> { safe_path(p) };
        let selector = match words.as_slice() {
            // Done above: everything held back is recorded.
            ["sync"] => return Ok("ok\n".into()),
            ["checkpoint", name] => {
                if dry {
                    return Ok(format!(
                        "would create checkpoint {name} at change {}\n",
                        store.last_id().map_err(|e| e.to_string())?
                    ));
                }
                let c = store
                    .put_checkpoint(name, time::now_ns())
                    .map_err(|e| e.to_string())?;
                return Ok(format!("checkpoint {} at change {}\n", c.name, c.id));
            }
            ["session", "start", name] | ["session", "start", name, "agent", _] => {
                crate::store::validate_name("session", name).map_err(|e| e.to_string())?;
                let agent = words.get(4).map(|a| a.to_string());
                if let Some(a) = &agent {
                    crate::store::validate_name("agent", a).map_err(|e| e.to_string())?;
                }
                if dry {
                    return Ok(format!("would start session {name} for process {pid}\n"));
                }
                if !self
                    .recorder
                    .attributor()
                    .register(pid, name.to_string(), agent)
                {
                    return Err(format!("process {pid} is gone"));
                }
                return Ok(format!(
                    "session {name} started for process {pid} and its children\n"
                ));
            }
            ["session", "end"] => {
                return match self.recorder.attributor().unregister(pid) {
                    Some(s) => Ok(format!("session {s} ended\n")),
                    None => Err("no session was started by this process or its parents".into()),
                };
            }
            ["gc", rest @ ..] => return self.gc(rest, dry),
            ["undo", id] => Selector::Change(
                id.parse()
                    .map_err(|_| format!("{id:?} is not a change id"))?,
            ),
            ["rollback", "session", name] => Selector::Session(name.to_string()),
            ["rollback", "agent", name] => Selector::Agent(name.to_string()),
            ["rollback", "since", p] | ["rollback", "to", p] => Selector::Since(resolve(p)?),
            ["rollback", "file", p] => Selector::File(path(p)?, None),
            ["rollback", "file", p, "to", at] => Selector::File(path(p)?, Some(resolve(at)?)),
            [] => return Err("empty command; see .rewind/README".into()),
            _ => return Err(format!("unknown command {line:?}; see .rewind/README")),
        };
        self.rollback(&selector, dry, force)
    }

    /// `gc [keep DURATION] [max-size BYTES]`: retention while mounted (the CLI's `rewind gc`).
    fn gc(&self, args: &[&str], dry: bool) -> std::result::Result<String, String> {
        let (mut keep, mut max_size) = (None, None);
        let mut it = args.iter();
        while let Some(word) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("gc: {word} needs a value"))?;
            match *word {
                "keep" => keep = Some(*value),
                "max-size" => max_size = Some(*value),
                _ => return Err(format!("gc: unknown option {word:?}")),
            }
        }
        let policy = Retention::parse(keep, max_size, None)
            .map_err(|e| format!("gc: {e}"))?
            .policy();
        if policy.older_than_ns.is_none() && policy.max_bytes.is_none() {
            return Err("gc: say keep DURATION and/or max-size BYTES".into());
        }
        if dry {
            return Ok("dry run: nothing removed\n".into());
        }
        let r = self
            .recorder
            .store()
            .gc(&policy)
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "removed {} changes and {} blobs; stored content {} -> {} bytes\n",
            r.changes_removed, r.blobs_removed, r.bytes_before, r.bytes_after
        ))
    }

    fn rollback(
        &self,
        selector: &Selector,
        dry: bool,
        force: bool,
    ) -> std::result::Result<String, String> {
        let store = self.recorder.store();
        let selected = rollback::select(store, selector).map_err(|e| e.to_string())?;
        if selected.is_empty() {
            return Err("nothing selected: no changes match".into());
        }
        let plan =
            rollback::plan(store, &*self.source, &selected, force).map_err(|e| e.to_string())?;
        let mut out = String::new();
        for (p, why) in &plan.skipped {
            out += &format!("skip     {}: {why}\n", String::from_utf8_lossy(p));
        }
        if dry {
            for s in &plan.steps {
                out += &format!("{}\n", rollback::describe(s));
            }
            out += &format!(
                "dry run: {} paths would be restored, {} skipped\n",
                plan.steps.len(),
                plan.skipped.len()
            );
            return Ok(out);
        }
        let session = rollback::next_session(store).map_err(|e| e.to_string())?;
        // A thread of its own, attributed to the rollback session; its syscalls go through the
        // mount and are served by the other FUSE threads.
        let (recorder, workspace, plan_c, session_c) = (
            self.recorder.clone(),
            self.workspace.clone(),
            plan.clone(),
            session.clone(),
        );
        let failed = std::thread::spawn(move || {
            // SAFETY: gettid cannot fail.
            let tid = unsafe { libc::gettid() } as u32;
            recorder.attributor().begin_restore(tid, session_c);
            let failed = rollback::execute(recorder.store(), &workspace, &plan_c);
            recorder.attributor().end_restore(tid);
            let _ = recorder.flush_pending_older(true);
            failed
        })
        .join()
        .map_err(|_| "the rollback thread failed".to_string())?;
        for s in &plan.steps {
            if !failed.iter().any(|(p, _)| *p == s.path) {
                out += &format!("{}\n", rollback::describe(s));
            }
        }
        for (p, e) in &failed {
            out += &format!("failed   {}: {e}\n", String::from_utf8_lossy(p));
        }
        out += &format!(
            "{session}: restored {} paths, skipped {}, failed {} (undo it with `rewind rollback --session {session}`)\n",
            plan.steps.len() - failed.len(),
            plan.skipped.len(),
            failed.len()
        );
        Ok(out)
    }

    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// A past state's attributes, for `stat` of `.rewind/at/...`.
    pub fn past_state(&self, node: &Node) -> Option<FileState> {
        match node {
            Node::AtPath { at, path } => self.view().state_at(path, *at).ok()?.state().cloned(),
            _ => None,
        }
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// A workspace-relative path from a command: no `..`, not absolute, not into `.rewind`.
pub fn safe_path(p: &str) -> std::result::Result<Vec<u8>, String> {
    let trimmed = p.trim_start_matches("./");
    if p.starts_with('/')
        || trimmed.split('/').any(|c| c == "..")
        || trimmed.is_empty()
        || trimmed.contains('\0')
    {
        return Err(format!(
            "{p:?}: give a path relative to the workspace root, without .."
        ));
    }
    if trimmed == ".rewind" || trimmed.starts_with(".rewind/") {
        return Err(".rewind/ is not part of the history".into());
    }
    Ok(trimmed.trim_end_matches('/').as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_paths_cannot_leave_the_workspace() {
        assert_eq!(safe_path("src/main.rs").unwrap(), b"src/main.rs");
        assert_eq!(safe_path("./a/").unwrap(), b"a");
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../b",
            "",
            ".rewind/ctl",
            "a\0b",
        ] {
            assert!(safe_path(bad).is_err(), "{bad:?}");
        }
    }
}
