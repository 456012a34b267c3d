//! Session summaries: a count and the first and last change of each session, kept in step with
//! the changes in the same batch (an index, like `by_session`, that needs no scan to read).

use super::{ChangeRecord, Result, SessionRecord, Store};

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
}
