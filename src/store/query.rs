//! Reading records: changes through their indexes, and the small families (sessions,
//! checkpoints, turns, markers, the manifest).

use rocksdb::{Direction, IteratorMode};

use super::{
    CF_BY_AGENT, CF_BY_PATH, CF_BY_SESSION, CF_BY_TIME, CF_CHANGES, CF_CHECKPOINTS, CF_EPISODES,
    CF_MANIFEST, CF_SESSIONS, CF_TURNS, ChangeRecord, CheckpointRecord, EpisodeRecord, Error,
    Result, SeenRecord, SessionRecord, Store, TurnRecord, keys, write::index_names,
};

/// Which end of the history a query starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    #[default]
    OldestFirst,
    NewestFirst,
}

/// A selection of changes. Every field narrows it; the default selects everything.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// Changes indexed under this path: to it, renamed from it, or to another name of the
    /// same file.
    pub path: Option<Vec<u8>>,
    pub session: Option<String>,
    pub agent: Option<String>,
    /// Only changes with `id > after_id`.
    pub after_id: Option<u64>,
    /// Only changes with `id <= until_id`.
    pub until_id: Option<u64>,
    /// Only changes with `time_ns >= since_ns`.
    pub since_ns: Option<u64>,
    /// Only changes with `time_ns <= until_ns`.
    pub until_ns: Option<u64>,
    pub order: Order,
    pub limit: Option<usize>,
}

impl Query {
    fn admits(&self, c: &ChangeRecord) -> bool {
        self.path
            .as_ref()
            .is_none_or(|p| index_names(c).any(|n| n == p.as_slice()))
            && self.session.as_ref().is_none_or(|s| *s == c.session)
            && self.agent.as_ref().is_none_or(|a| *a == c.agent)
            && self.after_id.is_none_or(|id| c.id > id)
            && self.until_id.is_none_or(|id| c.id <= id)
            && self.since_ns.is_none_or(|t| c.time_ns >= t)
            && self.until_ns.is_none_or(|t| c.time_ns <= t)
    }
}

impl Store {
    pub fn change(&self, id: u64) -> Result<Option<ChangeRecord>> {
        let key = keys::change(id);
        let db = self.db()?;
        let value = db
            .get_pinned_cf(db.cf(CF_CHANGES), key)
            .map_err(Store::db_error("read change"))?;
        value
            .map(|v| ChangeRecord::decode(CF_CHANGES, &key, &v))
            .transpose()
    }

    /// The changes a query selects, in its order, up to its limit.
    pub fn query(&self, q: &Query) -> Result<Vec<ChangeRecord>> {
        let mut out = Vec::new();
        self.for_each(q, |c| {
            out.push(c);
            true
        })?;
        Ok(out)
    }

    /// Visit the changes a query selects until `visit` returns false or the limit is reached.
    pub fn for_each(&self, q: &Query, mut visit: impl FnMut(ChangeRecord) -> bool) -> Result<()> {
        let limit = q.limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(());
        }
        let mut seen = 0;
        let mut take = |c: ChangeRecord| -> bool {
            if !q.admits(&c) {
                return true;
            }
            seen += 1;
            visit(c) && seen < limit
        };
        // Pick the narrowest index; every other condition is a filter.
        let (cf, name) = if let Some(p) = &q.path {
            (CF_BY_PATH, Some(p.as_slice()))
        } else if let Some(s) = &q.session {
            (CF_BY_SESSION, Some(s.as_bytes()))
        } else if let Some(a) = &q.agent {
            (CF_BY_AGENT, Some(a.as_bytes()))
        } else {
            (CF_CHANGES, None)
        };
        let lo_id = q.after_id.map_or(0, |id| id.saturating_add(1));
        let hi_id = q.until_id.unwrap_or(u64::MAX);
        let (prefix, start) = match (name, q.order) {
            (Some(n), Order::OldestFirst) => (keys::named_prefix(n), keys::named(n, lo_id)),
            (Some(n), Order::NewestFirst) => (keys::named_prefix(n), keys::named(n, hi_id)),
            (None, Order::OldestFirst) => (Vec::new(), keys::change(lo_id).to_vec()),
            (None, Order::NewestFirst) => (Vec::new(), keys::change(hi_id).to_vec()),
        };
        let direction = match q.order {
            Order::OldestFirst => Direction::Forward,
            Order::NewestFirst => Direction::Reverse,
        };
        let db = self.db()?;
        let iter = db.iterator_cf(db.cf(cf), IteratorMode::From(&start, direction));
        for item in iter {
            let (key, value) = item.map_err(Store::db_error("scan"))?;
            if !key.starts_with(&prefix) {
                break;
            }
            let change = if name.is_some() {
                let id = keys::trailing_id(&key).ok_or_else(|| Error::Corrupt {
                    cf,
                    key: keys::hex(&key),
                    reason: "index key without an id".into(),
                })?;
                let value = db
                    .get_pinned_cf(db.cf(CF_CHANGES), keys::change(id))
                    .map_err(Store::db_error("read change"))?;
                match value {
                    Some(v) => ChangeRecord::decode(CF_CHANGES, &keys::change(id), &v)?,
                    // An index entry whose change gc removed in another batch: skip it.
                    None => continue,
                }
            } else {
                ChangeRecord::decode(CF_CHANGES, &key, &value)?
            };
            if !take(change) {
                break;
            }
        }
        Ok(())
    }

    /// Whether change `id` was taken back (recorded before an operation that then failed).
    pub fn was_retracted(&self, id: u64) -> Result<bool> {
        let db = self.db()?;
        Ok(db
            .get_pinned_cf(db.cf(super::CF_META), keys::retracted(id))
            .map_err(Store::db_error("read meta"))?
            .is_some())
    }

    /// Every distinct name in `by_path` that starts with `prefix`, in byte order.
    pub fn paths_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let db = self.db()?;
        let iter = db.iterator_cf(
            db.cf(CF_BY_PATH),
            IteratorMode::From(prefix, Direction::Forward),
        );
        for item in iter {
            let (key, _) = item.map_err(Store::db_error("scan paths"))?;
            if !key.starts_with(prefix) {
                break;
            }
            let Some(name) = keys::name_of(&key) else {
                continue;
            };
            if out.last().map(Vec::as_slice) != Some(name) {
                out.push(name.to_vec());
            }
        }
        Ok(out)
    }

    /// The id of the last change at or before `time_ns` (0 if there is none).
    pub fn id_at_time(&self, time_ns: u64) -> Result<u64> {
        let start = keys::time(time_ns, u64::MAX);
        let db = self.db()?;
        let mut iter = db.iterator_cf(
            db.cf(CF_BY_TIME),
            IteratorMode::From(&start, Direction::Reverse),
        );
        match iter.next() {
            None => Ok(0),
            Some(item) => {
                let (key, _) = item.map_err(Store::db_error("scan time"))?;
                Ok(keys::trailing_id(&key).unwrap_or(0))
            }
        }
    }

    pub fn session(&self, name: &str) -> Result<Option<SessionRecord>> {
        self.get(CF_SESSIONS, name.as_bytes(), SessionRecord::decode)
    }

    pub fn sessions(&self) -> Result<Vec<SessionRecord>> {
        self.scan(CF_SESSIONS, b"", |_, k, v| {
            SessionRecord::decode(CF_SESSIONS, k, v)
        })
    }

    pub fn checkpoint(&self, name: &str) -> Result<Option<CheckpointRecord>> {
        self.get(CF_CHECKPOINTS, name.as_bytes(), CheckpointRecord::decode)
    }

    pub fn checkpoints(&self) -> Result<Vec<CheckpointRecord>> {
        self.scan(CF_CHECKPOINTS, b"", |_, k, v| {
            CheckpointRecord::decode(CF_CHECKPOINTS, k, v)
        })
    }

    /// The turns of one session, or of every session with `None`, in order.
    pub fn turns(&self, session: Option<&str>) -> Result<Vec<TurnRecord>> {
        let prefix = session.map(|s| keys::named_prefix(s.as_bytes()));
        self.scan(CF_TURNS, prefix.as_deref().unwrap_or(b""), |_, k, v| {
            TurnRecord::decode(CF_TURNS, k, v)
        })
    }

    pub fn open_episodes(&self) -> Result<Vec<(Vec<u8>, EpisodeRecord)>> {
        self.scan(CF_EPISODES, b"", |_, k, v| {
            Ok((k.to_vec(), EpisodeRecord::decode(CF_EPISODES, k, v)?))
        })
    }

    /// The manifest: what the mount last saw at each path.
    pub fn manifest(&self) -> Result<Vec<(Vec<u8>, SeenRecord)>> {
        self.scan(CF_MANIFEST, b"", |_, k, v| {
            Ok((k.to_vec(), SeenRecord::decode(CF_MANIFEST, k, v)?))
        })
    }

    /// What the mount last saw at `path`, if it is in the manifest.
    pub fn manifest_entry(&self, path: &[u8]) -> Result<Option<SeenRecord>> {
        self.get(CF_MANIFEST, path, SeenRecord::decode)
    }

    /// Whether the manifest has an entry whose key starts with `prefix`.
    pub fn manifest_has_prefix(&self, prefix: &[u8]) -> Result<bool> {
        let db = self.db()?;
        let mut iter = db.iterator_cf(
            db.cf(CF_MANIFEST),
            IteratorMode::From(prefix, Direction::Forward),
        );
        match iter.next() {
            Some(item) => Ok(item.map_err(Store::db_error("scan"))?.0.starts_with(prefix)),
            None => Ok(false),
        }
    }

    pub(super) fn get<T>(
        &self,
        cf: &'static str,
        key: &[u8],
        decode: impl Fn(&'static str, &[u8], &[u8]) -> Result<T>,
    ) -> Result<Option<T>> {
        let db = self.db()?;
        let value = db
            .get_pinned_cf(db.cf(cf), key)
            .map_err(Store::db_error("read"))?;
        value.map(|v| decode(cf, key, &v)).transpose()
    }

    /// Decode every value of `cf` whose key starts with `prefix`.
    pub(super) fn scan<T>(
        &self,
        cf: &'static str,
        prefix: &[u8],
        decode: impl Fn(&'static str, &[u8], &[u8]) -> Result<T>,
    ) -> Result<Vec<T>> {
        let db = self.db()?;
        let mut out = Vec::new();
        let iter = db.iterator_cf(db.cf(cf), IteratorMode::From(prefix, Direction::Forward));
        for item in iter {
            let (key, value) = item.map_err(Store::db_error("scan"))?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push(decode(cf, &key, &value)?);
        }
        Ok(out)
    }
}
