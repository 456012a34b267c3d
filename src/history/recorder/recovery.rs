//! Recovery at mount: finish the write episodes a crash cut short, and record what changed in
//! the workspace while nothing was mounted, by comparing it with the manifest (what the mount
//! last saw at every path).

use std::collections::{BTreeMap, HashMap};

use super::Recorder;
use super::capture::{kind_of, seen_of};
use crate::history::Result;
use crate::history::change::{ChangeKind, FileKind, FileState, Seen};
use crate::history::db::Extra;
use crate::history::who::Who;

/// What the scan at mount found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Write episodes cut short by a crash, now recorded.
    pub episodes: usize,
    /// Changes made while nothing was mounted, recorded as agent `external`.
    pub external: usize,
}

type Tree = BTreeMap<Vec<u8>, (libc::stat, Seen)>;

impl Recorder {
    /// Before mounting: finish episodes a crash cut short, and record what changed in the
    /// workspace while it was not mounted (compared with the manifest the mount left).
    pub fn recover(&self) -> Result<Recovery> {
        let mut report = Recovery::default();
        for (path, ep) in self.history.open_episodes()? {
            // A rollback's write cut short is still the rollback's (a restore).
            let restore = ep.agent == "rewind";
            let who = Who {
                session: ep.session,
                agent: ep.agent,
                pid: ep.pid,
                process: ep.process,
                restore,
                turn: ep.turn,
                tool: ep.tool,
                uid: ep.uid,
            };
            let now = self
                .source
                .lstat(&path)
                .ok()
                .filter(|st| kind_of(st) == FileKind::File);
            let after = now.as_ref().map(|st| self.capture(&path, st)).transpose()?;
            // A marker left by an earlier version has no owner: the owner alone is no change.
            let unchanged = match (&after, &ep.before) {
                (Some(a), Some(b)) if b.owner.is_none() => {
                    FileState {
                        owner: None,
                        ..a.clone()
                    } == *b
                }
                _ => after == ep.before,
            };
            if !unchanged {
                let kind = match (&ep.before, &after) {
                    (None, _) => ChangeKind::Create,
                    (_, None) => ChangeKind::Delete,
                    _ => ChangeKind::Modify,
                };
                let mut change = self.change(kind, &path, &who);
                change.before = ep.before;
                change.after = after;
                let manifest = [(path.clone(), now.as_ref().map(seen_of))];
                let extra = Extra {
                    finish_episode: Some(&path),
                    manifest: &manifest,
                    move_under: None,
                };
                self.record(change, &extra)?;
                report.episodes += 1;
            } else {
                self.history.drop_open_episode(&path)?;
            }
        }

        let current = self.walk()?;
        let first_mount = self.history.store().meta(b"manifest")?.is_none();
        if !first_mount {
            let old: HashMap<Vec<u8>, Seen> = self.history.manifest()?.into_iter().collect();
            report.external = self.record_external(&old, &current)?;
        }
        let entries: Vec<(Vec<u8>, Seen)> = current
            .iter()
            .map(|(p, (_, seen))| (p.clone(), seen.clone()))
            .collect();
        self.history.replace_manifest(&entries)?;
        Ok(report)
    }

    /// Every recorded path in the workspace, with its stat. Notes the names of hard-linked
    /// files on the way.
    fn walk(&self) -> Result<Tree> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![Vec::new()];
        while let Some(dir) = dirs.pop() {
            let names = match self.source.read_dir(&dir) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("scan: cannot read {}: {e}", String::from_utf8_lossy(&dir));
                    continue;
                }
            };
            for name in names {
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                if path == b".rewind" {
                    continue;
                }
                let Ok(st) = self.source.lstat(&path) else {
                    continue;
                };
                let is_dir = kind_of(&st) == FileKind::Dir;
                if !self.records(&path, is_dir) {
                    continue;
                }
                if is_dir {
                    dirs.push(path.clone());
                }
                self.note_name(&st, &path);
                out.insert(path, (st, seen_of(&st)));
            }
        }
        Ok(out)
    }

    fn record_external(&self, old: &HashMap<Vec<u8>, Seen>, current: &Tree) -> Result<usize> {
        let who = Who {
            session: self.who.default_session().to_string(),
            agent: "external".into(),
            pid: 0,
            process: "external".into(),
            restore: false,
            turn: None,
            tool: None,
            uid: None,
        };
        // What we knew of a path: its last recorded state if that matches the manifest.
        let known_before = |path: &[u8], seen: &Seen| -> Result<FileState> {
            let last = self.history.last_change_until(path, u64::MAX)?;
            let recorded = last.and_then(|c| {
                if c.path == path || c.links.iter().any(|l| l == path) {
                    c.after
                } else {
                    None
                }
            });
            Ok(match recorded {
                Some(s) if s.kind == seen.kind && s.size == seen.size && s.mode == seen.mode => s,
                _ => FileState {
                    kind: seen.kind,
                    size: seen.size,
                    mode: seen.mode,
                    hash: None,
                    owner: None,
                },
            })
        };
        let mut count = 0;
        // Deletions, deepest first, so a folder's contents go before the folder.
        let mut gone: Vec<&Vec<u8>> = old.keys().filter(|p| !current.contains_key(*p)).collect();
        gone.sort_by(|a, b| b.cmp(a));
        for path in gone {
            let seen = &old[path];
            let kind = if seen.kind == FileKind::Dir {
                ChangeKind::Rmdir
            } else {
                ChangeKind::Delete
            };
            let mut change = self.change(kind, path, &who);
            change.before = Some(known_before(path, seen)?);
            self.record_one(change, &[(path.clone(), None)])?;
            count += 1;
        }
        // New and changed paths, parents first (BTreeMap order).
        for (path, (st, seen)) in current {
            let kind = match old.get(path) {
                None => match seen.kind {
                    FileKind::Dir => ChangeKind::Mkdir,
                    FileKind::Symlink => ChangeKind::Symlink,
                    _ => ChangeKind::Create,
                },
                Some(was) if was == seen => continue,
                Some(was) if was.kind == FileKind::Dir && seen.kind == FileKind::Dir => {
                    if was.mode == seen.mode {
                        continue;
                    }
                    ChangeKind::Chmod
                }
                Some(was)
                    if was.kind == seen.kind
                        && was.size == seen.size
                        && was.mtime_ns == seen.mtime_ns =>
                {
                    ChangeKind::Chmod
                }
                Some(_) => ChangeKind::Modify,
            };
            let mut change = self.change(kind, path, &who);
            change.before = old.get(path).map(|s| known_before(path, s)).transpose()?;
            change.after = Some(self.capture(path, st)?);
            let manifest = [(path.clone(), Some(seen.clone()))];
            if change.before == change.after {
                // Only its times moved: remember them, so the next mount need not read it again.
                self.history.put_manifest(&manifest)?;
                continue;
            }
            self.record_one(change, &manifest)?;
            count += 1;
        }
        Ok(count)
    }
}
