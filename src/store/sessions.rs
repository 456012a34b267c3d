//! Session summaries: a count and the first and last change of each session, kept in step with
//! the changes in the same batch (an index, like `by_session`, that needs no scan to read).

use rocksdb::WriteBatch;

use super::{CF_SESSIONS, ChangeRecord, Result, SessionRecord, Store};

impl SessionRecord {
    /// A session that `change` is the first of (counted by [`count_in`](Self::count_in)).
    pub fn started_by(change: &ChangeRecord) -> SessionRecord {
        SessionRecord {
            name: change.session.clone(),
            count: 0,
            first_id: change.id,
            last_id: change.id,
            first_time_ns: change.time_ns,
            last_time_ns: change.time_ns,
            agents: Vec::new(),
        }
    }

    /// Count `change` in the session. It is usually the newest so far, but a held-back create
    /// is written after changes that came later (its id was set aside when it happened).
    pub fn count_in(&mut self, change: &ChangeRecord) {
        self.count += 1;
        if self.count == 1 || change.id >= self.last_id {
            self.last_id = change.id;
            self.last_time_ns = change.time_ns;
        }
        if change.id < self.first_id {
            self.first_id = change.id;
            self.first_time_ns = change.time_ns;
        }
        if !self.agents.contains(&change.agent) {
            self.agents.push(change.agent.clone());
        }
    }
}

impl Store {
    pub(super) fn updated_session(&self, change: &ChangeRecord) -> Result<SessionRecord> {
        let cached = self
            .sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&change.session)
            .cloned();
        let stored = match cached {
            Some(info) => Some(info),
            None => self.session(&change.session)?,
        };
        let mut info = stored.unwrap_or_else(|| SessionRecord::started_by(change));
        info.count_in(change);
        Ok(info)
    }

    /// Recompute every session summary from the remaining changes (after gc removed some).
    pub(super) fn rebuild_sessions(&self) -> Result<()> {
        let mut sessions: std::collections::HashMap<String, SessionRecord> = Default::default();
        self.for_each(&super::Query::default(), |c| {
            sessions
                .entry(c.session.clone())
                .or_insert_with(|| SessionRecord::started_by(&c))
                .count_in(&c);
            true
        })?;
        let old = self.sessions()?;
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        for old in old {
            if !sessions.contains_key(&old.name) {
                batch.delete_cf(db.cf(CF_SESSIONS), old.name.as_bytes());
            }
        }
        for info in sessions.values() {
            batch.put_cf(db.cf(CF_SESSIONS), info.name.as_bytes(), info.encode());
        }
        drop(db);
        self.sessions_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.write_to_free("gc sessions", batch)
    }
}
