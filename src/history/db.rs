//! The history as the rest of the program sees it: the store's records read and written as
//! domain types, with the domain's rules (which names are valid, which change of a path gc
//! must keep, when a checkpoint may be moved).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::change::{Change, ChangeKind, Checkpoint, OpenEpisode, Seen, SessionInfo, Turn};
use super::name::Name;
use super::{Error, Result};
use crate::store::{self, ChangeRecord, GcPlan, GcReport, Horizon, Query, SeenRecord, Store};

/// Bookkeeping written in the same batch as a change (see [`store::Extra`]).
#[derive(Default)]
pub struct Extra<'a> {
    pub finish_episode: Option<&'a [u8]>,
    pub manifest: &'a [(Vec<u8>, Option<Seen>)],
    pub move_under: Option<(&'a [u8], &'a [u8])>,
    /// The change's new content, not stored yet: written with it (see
    /// [`Store::prepare_file_reader`](store::Store::prepare_file_reader)).
    pub content: Option<&'a store::NewContent>,
    /// The marker of an episode that goes on from this change (a cut), written in its batch:
    /// written after it, a crash between the two left the old marker, and the next mount
    /// recorded the change again from it.
    pub marker: Option<(&'a [u8], &'a OpenEpisode)>,
}

/// What a retraction writes in its batch besides taking the changes back (see
/// [`store::Retraction`]).
#[derive(Default)]
pub struct Retraction<'a> {
    /// Manifest entries to put (`None`: to remove).
    pub manifest: &'a [(Vec<u8>, Option<Seen>)],
    /// Open-episode markers to put (`None`: to drop).
    pub markers: &'a [(Vec<u8>, Option<OpenEpisode>)],
    /// Swap the manifest entries below these two folders (a folder rename taken back).
    pub swap_under: Option<(&'a [u8], &'a [u8])>,
}

/// What gc may remove (the limits; the rule of what always stays is [`History::gc`]'s).
#[derive(Clone, Debug, Default)]
pub struct GcPolicy {
    /// Remove changes older than this time (ns since the epoch).
    pub older_than_ns: Option<u64>,
    /// Then remove the oldest changes until the stored content is at most this many bytes.
    pub max_bytes: Option<u64>,
    /// Only say what would be removed (the same plan a run carries out).
    pub dry_run: bool,
    /// Then re-encode older versions as deltas on newer ones (`store/repack.rs`): only when
    /// asked (`rewind gc --repack`), never by the retention the daemon applies by itself.
    pub repack: bool,
}

#[derive(Clone)]
pub struct History {
    store: Arc<Store>,
    /// Folders the manifest has nothing at or below (see [`Bare`]).
    bare: Arc<Mutex<Bare>>,
}

/// Folders found to have nothing at or below them in the manifest, so that asking again for a
/// path below one (every operation on an ignored path asks whether the history keeps it: all of
/// `npm install` under `node_modules/`) costs a hash lookup per folder above it instead of a
/// store read. Every manifest write that adds entries forgets the folders above them (below an
/// ignored folder only a rename into it does), and bumps `writes`, so that a look-up that began
/// before a write never caches what it saw.
#[derive(Default)]
struct Bare {
    folders: HashSet<Vec<u8>>,
    writes: u64,
}

/// How many folders [`Bare`] holds at most; past it, it starts again.
const BARE_MAX: usize = 100_000;

impl Bare {
    /// `path` or a folder above it is known to have nothing in the manifest.
    fn covers(&self, path: &[u8]) -> bool {
        !self.folders.is_empty() && folders_at_or_above(path).any(|f| self.folders.contains(f))
    }

    /// The manifest may have gained entries at `paths`, and anywhere below `moved_to` (the
    /// folders a rename moved a subtree to).
    fn gained<'p>(
        &mut self,
        paths: impl Iterator<Item = &'p [u8]>,
        moved_to: impl Iterator<Item = &'p [u8]>,
    ) {
        self.writes += 1;
        if self.folders.is_empty() {
            return;
        }
        for p in paths {
            for f in folders_at_or_above(p) {
                self.folders.remove(f);
            }
        }
        for to in moved_to {
            for f in folders_at_or_above(to) {
                self.folders.remove(f);
            }
            let mut below = to.to_vec();
            below.push(b'/');
            self.folders.retain(|f| !f.starts_with(&below));
        }
    }
}

/// `path` and each folder above it (`a/b/c`, `a/b`, `a`).
fn folders_at_or_above(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::successors(Some(path), |p| {
        p.iter().rposition(|b| *b == b'/').map(|i| &p[..i])
    })
    .filter(|p| !p.is_empty())
}

fn change(r: ChangeRecord) -> Result<Change> {
    Ok(Change::try_from(r)?)
}

impl History {
    pub fn new(store: Arc<Store>) -> History {
        History {
            store,
            bare: Arc::default(),
        }
    }

    /// The store underneath: content blobs, and writability.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn change(&self, id: u64) -> Result<Option<Change>> {
        self.store.change(id)?.map(change).transpose()
    }

    /// Change `id`, or an error that says why there is none: never recorded, taken back, or
    /// removed by retention.
    pub fn get(&self, id: u64) -> Result<Change> {
        if let Some(c) = self.change(id)? {
            return Ok(c);
        }
        if self.store.was_retracted(id)? {
            return Err(Error::Retracted(id));
        }
        let newest = self.last_id()?;
        if id > 0 && self.horizon()?.is_some_and(|h| id <= h.id) {
            return Err(Error::Removed(id));
        }
        if id > 0 && id <= newest {
            return Err(Error::Unused(id));
        }
        Err(Error::NoChange { id, newest })
    }

    pub fn query(&self, q: &Query) -> Result<Vec<Change>> {
        self.store.query(q)?.into_iter().map(change).collect()
    }

    /// Visit the changes a query selects until `visit` returns false.
    pub fn for_each(&self, q: &Query, mut visit: impl FnMut(Change) -> bool) -> Result<()> {
        let mut failed = None;
        self.store.for_each(q, |r| match change(r) {
            Ok(c) => visit(c),
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    pub fn last_id(&self) -> Result<u64> {
        Ok(self.store.last_id()?)
    }

    /// The first change to `path` (directly, as a rename's source, or through a hard link)
    /// with an id above `id`.
    pub fn first_change_after(&self, path: &[u8], id: u64) -> Result<Option<Change>> {
        let q = Query {
            path: Some(path.to_vec()),
            after_id: Some(id),
            limit: Some(1),
            ..Query::default()
        };
        Ok(self.query(&q)?.pop())
    }

    /// The newest change to `path` with an id at most `id`.
    pub fn last_change_until(&self, path: &[u8], id: u64) -> Result<Option<Change>> {
        let q = Query {
            path: Some(path.to_vec()),
            until_id: Some(id),
            order: store::Order::NewestFirst,
            limit: Some(1),
            ..Query::default()
        };
        Ok(self.query(&q)?.pop())
    }

    /// Every distinct path with history whose bytes start with `prefix`, in byte order.
    pub fn paths_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.store.paths_with_prefix(prefix)?)
    }

    pub fn id_at_time(&self, time_ns: u64) -> Result<u64> {
        Ok(self.store.id_at_time(time_ns)?)
    }

    /// Record changes in one batch, with consecutive ids (their `id` fields are ignored).
    pub fn record_many(&self, items: Vec<(Change, &Extra<'_>)>) -> Result<Vec<Change>> {
        self.record_with_ids(items.into_iter().map(|(c, e)| (c, e, None)).collect())
    }

    /// [`record_many`](History::record_many), where an item may bring an id set aside with
    /// [`reserve_id`](History::reserve_id) when its operation happened.
    pub fn record_with_ids(
        &self,
        items: Vec<(Change, &Extra<'_>, Option<u64>)>,
    ) -> Result<Vec<Change>> {
        let manifests: Vec<Vec<(Vec<u8>, Option<SeenRecord>)>> = items
            .iter()
            .map(|(_, e, _)| {
                e.manifest
                    .iter()
                    .map(|(p, s)| (p.clone(), s.as_ref().map(SeenRecord::from)))
                    .collect()
            })
            .collect();
        let markers: Vec<Option<(&[u8], store::EpisodeRecord)>> = items
            .iter()
            .map(|(_, e, _)| e.marker.map(|(p, m)| (p, m.into())))
            .collect();
        let extras: Vec<store::Extra<'_>> = items
            .iter()
            .zip(&manifests)
            .zip(&markers)
            .map(|(((_, e, _), manifest), marker)| store::Extra {
                finish_episode: e.finish_episode,
                manifest,
                move_under: e.move_under,
                content: e.content,
                marker: marker.as_ref().map(|(p, m)| (*p, m)),
            })
            .collect();
        let records = items
            .iter()
            .zip(&extras)
            .map(|((c, _, id), e)| (ChangeRecord::from(c), e, *id))
            .collect();
        let recorded = self.store.record_with_ids(records);
        self.gained(
            items.iter().flat_map(|(_, e, _)| {
                let added = e.manifest.iter().filter(|(_, s)| s.is_some());
                added.map(|(p, _)| p.as_slice())
            }),
            // A folder exchange moves both ways.
            items
                .iter()
                .flat_map(|(_, e, _)| e.move_under.into_iter().flat_map(|(a, b)| [a, b])),
        );
        recorded?.into_iter().map(change).collect()
    }

    /// The manifest may have gained entries: see [`Bare`].
    fn gained<'p>(
        &self,
        paths: impl Iterator<Item = &'p [u8]>,
        moved_to: impl Iterator<Item = &'p [u8]>,
    ) {
        self.bare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .gained(paths, moved_to);
    }

    /// `id`, or the id of the second half of the `RENAME_EXCHANGE` whose first half is change
    /// `id`: the two halves are one operation (the recorder writes them in one batch, the
    /// second right after the first with its time), and the state after only the first never
    /// was (a folder exchanged would show without its contents).
    pub fn exchange_end(&self, id: u64) -> Result<u64> {
        let Some(c) = self.change(id)? else {
            return Ok(id);
        };
        let (Some(from), ChangeKind::Rename | ChangeKind::Restore) = (c.from.as_deref(), c.kind)
        else {
            return Ok(id);
        };
        match self.change(id + 1)? {
            Some(next)
                if next.time_ns == c.time_ns
                    && next.path == from
                    && next.from.as_deref() == Some(c.path.as_slice()) =>
            {
                Ok(id + 1)
            }
            _ => Ok(id),
        }
    }

    /// The latest time of a change in the history (0 if there is none).
    pub fn latest_time(&self) -> Result<u64> {
        match self.id_at_time(u64::MAX)? {
            0 => Ok(0),
            id => Ok(self.change(id)?.map_or(0, |c| c.time_ns)),
        }
    }

    pub fn record(&self, c: Change, extra: &Extra<'_>) -> Result<Change> {
        let mut out = self.record_many(vec![(c, extra)])?;
        Ok(out.pop().expect("one change in, one out"))
    }

    /// Set an id aside for an operation that happened now and is recorded later.
    pub fn reserve_id(&self) -> u64 {
        self.store.reserve_id()
    }

    /// An id set aside will not be used.
    pub fn release_id(&self, id: u64) {
        self.store.release_id(id);
    }

    /// Whether `id` was handed out and holds nothing (see [`Store::id_unused`](store::Store::id_unused)).
    pub fn id_unused(&self, id: u64) -> Result<bool> {
        Ok(self.store.id_unused(id)?)
    }

    /// The id the next change gets.
    pub fn next_id(&self) -> u64 {
        self.store.next_id()
    }

    pub fn retract(&self, c: &Change) -> Result<()> {
        self.retract_with(std::slice::from_ref(c), &Retraction::default())
    }

    /// Take back `changes` with what `with` writes, in one batch: all of it or none.
    pub fn retract_with(&self, changes: &[Change], with: &Retraction<'_>) -> Result<()> {
        let records: Vec<ChangeRecord> = changes.iter().map(ChangeRecord::from).collect();
        let manifest: Vec<_> = with
            .manifest
            .iter()
            .map(|(p, s)| (p.clone(), s.as_ref().map(SeenRecord::from)))
            .collect();
        let markers: Vec<_> = with
            .markers
            .iter()
            .map(|(p, e)| (p.clone(), e.as_ref().map(store::EpisodeRecord::from)))
            .collect();
        let written = self.store.retract_with(
            &records,
            &store::Retraction {
                manifest: &manifest,
                markers: &markers,
                swap_under: with.swap_under,
            },
        );
        self.gained(
            with.manifest
                .iter()
                .filter(|(_, s)| s.is_some())
                .map(|(p, _)| p.as_slice()),
            with.swap_under.into_iter().flat_map(|(a, b)| [a, b]),
        );
        Ok(written?)
    }

    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        Ok(self
            .store
            .sessions()?
            .into_iter()
            .map(SessionInfo::from)
            .collect())
    }

    /// The session a user means by `given`: its exact name, or the one session (with changes
    /// or turns) whose name begins with it, as `claude-7f3a` for a session named after a whole
    /// UUID. A prefix of several is an error that lists them; a name that matches nothing is
    /// returned as given (it selects nothing).
    pub fn session_named(&self, given: &str) -> Result<String> {
        unique_prefix(given, self.session_names()?.iter().map(String::as_str))
    }

    /// Every session with changes or turns.
    fn session_names(&self) -> Result<std::collections::BTreeSet<String>> {
        let mut names: std::collections::BTreeSet<String> =
            self.store.sessions()?.into_iter().map(|s| s.name).collect();
        names.extend(self.store.turns(None)?.into_iter().map(|t| t.session));
        Ok(names)
    }

    /// [`session_named`](Self::session_named) for a selection: a name no session has is
    /// refused (a typo would otherwise select nothing and read as "already rolled back"),
    /// and an id as `REWIND_SESSION` gave it (`a/b`) names the session it was recorded
    /// under (`%a%2Fb`). A session has changes or turns, an edit in progress (its marker),
    /// or had changes gc removed every one of (its cut, which the selection then says).
    pub fn existing_session(&self, given: &str) -> Result<String> {
        // Every name begins with the empty one: an unset shell variable must select nothing.
        if given.is_empty() {
            return Err(Error::Usage("a session's name is empty".into()));
        }
        let names = self.session_names()?;
        let named = unique_prefix(given, names.iter().map(String::as_str))?;
        let mapped = Name::from_id("session", given.as_bytes()).to_string();
        let open = self.store.open_episodes()?;
        // The listed name first: it is what `rewind sessions` shows, and a session listed as
        // `%a%2Fb` (id `a/b`) must stay reachable by it even if another's id is `%a%2Fb`
        // (listed as `%%25a%252Fb`, by which that one is reached).
        for name in [named, mapped] {
            if names.contains(&name)
                || open.iter().any(|(_, e)| e.session == name)
                || self.store.cut(false, &name)?.is_some()
            {
                return Ok(name);
            }
        }
        Err(Error::NoSession(given.to_string()))
    }

    /// The agent a selection names: one with a change, a turn or an edit in progress, one
    /// whose every change gc removed, one of rewind's own (`external`, `rewind`), or an id as
    /// `REWIND_AGENT` gave it; else refused.
    pub fn existing_agent(&self, given: &str) -> Result<String> {
        if given.is_empty() {
            return Err(Error::Usage("an agent's name is empty".into()));
        }
        if crate::history::name::SYSTEM_AGENTS.contains(&given) {
            return Ok(given.to_string());
        }
        let mut agents: std::collections::BTreeSet<String> = self
            .store
            .sessions()?
            .into_iter()
            .flat_map(|s| s.agents)
            .collect();
        agents.extend(self.store.turns(None)?.into_iter().map(|t| t.agent));
        agents.extend(
            self.store
                .open_episodes()?
                .into_iter()
                .map(|(_, e)| e.agent),
        );
        let mapped = Name::from_id("agent", given.as_bytes()).to_string();
        for name in [given.to_string(), mapped] {
            if agents.contains(&name) || self.store.cut(true, &name)?.is_some() {
                return Ok(name);
            }
        }
        Err(Error::NoAgent(given.to_string()))
    }

    pub fn session(&self, name: &str) -> Result<Option<SessionInfo>> {
        Ok(self.store.session(name)?.map(SessionInfo::from))
    }

    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        Ok(self
            .store
            .checkpoints()?
            .into_iter()
            .map(Checkpoint::from)
            .collect())
    }

    pub fn checkpoint(&self, name: &str) -> Result<Option<Checkpoint>> {
        Ok(self.store.checkpoint(name)?.map(Checkpoint::from))
    }

    /// Name the current end of the history. An existing checkpoint of that name is refused
    /// unless `force` moves it.
    pub fn put_checkpoint(&self, name: &Name, time_ns: u64, force: bool) -> Result<Checkpoint> {
        match self.store.put_checkpoint(name.as_str(), time_ns, force)? {
            Some(c) => Ok(c.into()),
            None => Err(Error::CheckpointExists(name.to_string())),
        }
    }

    pub fn turns(&self, session: Option<&str>) -> Result<Vec<Turn>> {
        Ok(self
            .store
            .turns(session)?
            .into_iter()
            .map(Turn::from)
            .collect())
    }

    pub fn put_turn(&self, turn: &Turn) -> Result<()> {
        Ok(self.store.put_turn(&turn.into())?)
    }

    pub fn put_open_episode(&self, path: &[u8], e: &OpenEpisode) -> Result<()> {
        Ok(self.store.put_open_episode(path, &e.into())?)
    }

    pub fn drop_open_episode(&self, path: &[u8]) -> Result<()> {
        Ok(self.store.drop_open_episode(path)?)
    }

    pub fn open_episodes(&self) -> Result<Vec<(Vec<u8>, OpenEpisode)>> {
        Ok(self
            .store
            .open_episodes()?
            .into_iter()
            .map(|(p, e)| (p, e.into()))
            .collect())
    }

    pub fn manifest(&self) -> Result<Vec<(Vec<u8>, Seen)>> {
        Ok(self
            .store
            .manifest()?
            .into_iter()
            .map(|(p, s)| (p, s.into()))
            .collect())
    }

    /// Whether `path` is in the manifest: the history has it as present, so it stays recorded
    /// (and shown in views of the past) whatever the ignore rules say now.
    pub fn in_manifest(&self, path: &[u8]) -> Result<bool> {
        Ok(self.store.manifest_entry(path)?.is_some())
    }

    /// What the mount last saw at `path`, if the manifest has it.
    pub fn manifest_entry(&self, path: &[u8]) -> Result<Option<Seen>> {
        Ok(self.store.manifest_entry(path)?.map(Seen::from))
    }

    /// Whether `path`, or for a folder anything below it, is in the manifest: a folder that
    /// holds what the history has is kept with it.
    pub fn in_manifest_at_or_under(&self, path: &[u8], is_dir: bool) -> Result<bool> {
        let writes = {
            let bare = self.bare.lock().unwrap_or_else(|e| e.into_inner());
            if bare.covers(path) {
                return Ok(false);
            }
            bare.writes
        };
        // A file is asked about through its folder: one look-up answers for all its files.
        let folder = if is_dir {
            Some(path)
        } else {
            path.iter().rposition(|b| *b == b'/').map(|i| &path[..i])
        };
        if let Some(folder) = folder.filter(|f| !f.is_empty()) {
            if self.has_at_or_under(folder)? {
                if is_dir {
                    return Ok(true);
                }
            } else {
                let mut bare = self.bare.lock().unwrap_or_else(|e| e.into_inner());
                if bare.writes == writes {
                    if bare.folders.len() >= BARE_MAX {
                        bare.folders.clear();
                    }
                    bare.folders.insert(folder.to_vec());
                }
                return Ok(false);
            }
        }
        // A file in a folder the manifest has entries in, a file at the top, or the top.
        self.in_manifest(path)
    }

    /// The manifest has `folder` or something below it.
    fn has_at_or_under(&self, folder: &[u8]) -> Result<bool> {
        if self.in_manifest(folder)? {
            return Ok(true);
        }
        let mut below = folder.to_vec();
        below.push(b'/');
        Ok(self.store.manifest_has_prefix(&below)?)
    }

    pub fn put_manifest(&self, entries: &[(Vec<u8>, Option<Seen>)]) -> Result<()> {
        let records: Vec<_> = entries
            .iter()
            .map(|(p, s)| (p.clone(), s.as_ref().map(SeenRecord::from)))
            .collect();
        let written = self.store.put_manifest(&records);
        self.gained(
            entries
                .iter()
                .filter(|(_, s)| s.is_some())
                .map(|(p, _)| p.as_slice()),
            std::iter::empty(),
        );
        Ok(written?)
    }

    /// Swap the manifest entries below two folders (undoes a folder rename's, which swaps them).
    pub fn swap_manifest_under(&self, a: &[u8], b: &[u8]) -> Result<()> {
        let written = self.store.swap_manifest_under(a, b);
        self.gained(std::iter::empty(), [a, b].into_iter());
        Ok(written?)
    }

    pub fn replace_manifest(&self, entries: &[(Vec<u8>, Seen)]) -> Result<()> {
        let records: Vec<_> = entries
            .iter()
            .map(|(p, s)| (p.clone(), SeenRecord::from(s)))
            .collect();
        let written = self.store.replace_manifest(&records);
        {
            let mut bare = self.bare.lock().unwrap_or_else(|e| e.into_inner());
            bare.folders.clear();
            bare.writes += 1;
        }
        Ok(written?)
    }

    /// Remove history `policy` lets go, but never the newest change of any path (counting
    /// both names of a rename and every name of a hard-linked file), so that the present can
    /// always be undone one step and every path keeps its last known content.
    pub fn gc(&self, policy: &GcPolicy) -> Result<GcReport> {
        let protect = |all: &[ChangeRecord]| -> HashSet<u64> {
            let mut newest: std::collections::HashMap<&[u8], u64> = Default::default();
            for c in all {
                newest.insert(&c.path, c.id);
                for name in c.from.iter().chain(&c.links) {
                    newest.insert(name, c.id);
                }
            }
            newest.into_values().collect()
        };
        Ok(self.store.gc(&GcPlan {
            older_than_ns: policy.older_than_ns,
            max_bytes: policy.max_bytes,
            protect: &protect,
            dry_run: policy.dry_run,
            repack: policy.repack,
        })?)
    }

    /// The oldest point still answered exactly, if gc ever removed history.
    pub fn horizon(&self) -> Result<Option<Horizon>> {
        Ok(self.store.horizon()?)
    }

    /// Refuse a point (the state right after change `id`) that needs history gc removed.
    pub fn check_kept(&self, id: u64, given: &str) -> Result<u64> {
        match self.horizon()? {
            Some(h) if id < h.id => Err(Error::BeforeHorizon {
                point: given.to_string(),
                oldest: h.id,
                time: super::time::rfc3339(h.time_ns),
            }),
            _ => Ok(id),
        }
    }

    /// Refuse a selection of a session (or, with `agent`, an agent) that gc cut: showing,
    /// exporting or rolling back the rest would pass part of it off as the whole.
    pub fn check_whole(&self, agent: bool, name: &str) -> Result<()> {
        match self.store.cut(agent, name)? {
            Some(cut) if cut.removed > 0 => Err(Error::Cut {
                what: if agent { "agent" } else { "session" },
                name: name.to_string(),
                removed: cut.removed,
                newest: cut.newest_id,
            }),
            _ => Ok(()),
        }
    }

    /// What to say beside a listing or diff of a selection that gc cut (it is shown, but as
    /// what it is: a part).
    pub fn cut_note(
        &self,
        session: Option<&str>,
        agent: Option<&str>,
        turn: Option<u32>,
    ) -> Result<Option<String>> {
        let checked = match (session, agent, turn) {
            (Some(s), _, Some(t)) => self.check_whole_turn(s, t),
            (Some(s), _, None) => self.check_whole(false, s),
            (None, Some(a), _) => self.check_whole(true, a),
            _ => Ok(()),
        };
        match checked {
            Err(e @ Error::Cut { .. }) => Ok(Some(format!("note: {e}; what follows is the rest"))),
            Err(e) => Err(e),
            Ok(()) => Ok(None),
        }
    }

    /// Refuse a turn of a session some of whose changes gc removed.
    pub fn check_whole_turn(&self, session: &str, turn: u32) -> Result<()> {
        match self.store.cut(false, session)? {
            Some(cut) if cut.turns.contains(&turn) => Err(Error::Cut {
                what: "turn",
                name: format!("{session}:{turn}"),
                removed: cut.removed,
                newest: cut.newest_id,
            }),
            _ => Ok(()),
        }
    }
}

/// The one name of `names` that is `given` or begins with it (`given` itself if none does);
/// an error listing them if several do.
pub fn unique_prefix<'a>(given: &str, names: impl Iterator<Item = &'a str>) -> Result<String> {
    let mut matching: Vec<&str> = Vec::new();
    for name in names {
        if name == given {
            return Ok(given.to_string());
        }
        if name.starts_with(given) {
            matching.push(name);
        }
    }
    match matching.as_slice() {
        [] => Ok(given.to_string()),
        [one] => Ok((*one).to_string()),
        many => {
            const SHOWN: usize = 10;
            let mut list = many[..many.len().min(SHOWN)]
                .iter()
                .map(|n| super::format::escape_text(n))
                .collect::<Vec<_>>()
                .join(", ");
            if many.len() > SHOWN {
                list += &format!(" and {} more", many.len() - SHOWN);
            }
            Err(Error::Usage(format!(
                "session {} is ambiguous: {} sessions begin with it ({list}); write more of the \
                 name",
                super::format::escape_text(given),
                many.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unique_prefix;

    #[test]
    fn a_unique_beginning_names_one_session() {
        let names = ["claude-7f3a01", "claude-7f3b02", "fix-1", "fix-12"];
        let pick = |given: &str| unique_prefix(given, names.into_iter());
        assert_eq!(pick("claude-7f3a").unwrap(), "claude-7f3a01");
        assert_eq!(pick("fix-1").unwrap(), "fix-1", "an exact name wins");
        assert_eq!(pick("nothing").unwrap(), "nothing");
        let e = pick("claude-7f").unwrap_err().to_string();
        assert!(
            e.contains("claude-7f3a01") && e.contains("claude-7f3b02"),
            "{e}"
        );
    }

    /// The cache of folders with nothing in the manifest answers as the store would, through
    /// the writes that add entries below such a folder: a file put there, a folder renamed in.
    #[test]
    fn folders_known_bare_follow_the_manifest() {
        use super::History;
        use crate::history::change::{FileKind, Seen};
        use crate::store::Store;

        let dir = tempfile::tempdir().unwrap();
        let history = History::new(std::sync::Arc::new(Store::open(dir.path()).unwrap()));
        let seen = Some(Seen {
            kind: FileKind::File,
            size: 1,
            mode: 0o644,
            mtime_ns: 0,
        });
        let kept = |p: &str, dir: bool| history.in_manifest_at_or_under(p.as_bytes(), dir).unwrap();
        assert!(!kept("node_modules/a/x.js", false));
        assert!(!kept("node_modules/a", true));
        assert!(
            !kept("node_modules/a/b/y.js", false),
            "below a folder known bare"
        );
        history
            .put_manifest(&[(b"node_modules/a/b/y.js".to_vec(), seen.clone())])
            .unwrap();
        assert!(kept("node_modules/a/b/y.js", false));
        assert!(kept("node_modules/a", true));
        assert!(!kept("node_modules/a/b/z.js", false));

        // A rename moves entries below a folder cached as bare.
        assert!(!kept("node_modules/c/d", true));
        history
            .put_manifest(&[(b"src/m/f".to_vec(), seen.clone())])
            .unwrap();
        history
            .swap_manifest_under(b"src/m", b"node_modules/c")
            .unwrap();
        assert!(kept("node_modules/c/f", false));
        assert!(kept("node_modules/c", true));
        assert!(!kept("node_modules/c/d", true));
    }
}
