//! Which changes a command is about: one change, a session, an agent, an agent turn (or a
//! session from a turn on), a path, and a range of points. Every reader of history selects
//! through here — `log`, `diff`, `rollback`, `export`, `turns`, `.rewind/` and MCP — so a turn
//! or a session prefix means the same to all of them.
//!
//! Two types, as ripgrep turns low-level arguments into high-level ones: a [`Selection`] is
//! what was asked, plain data that a command line, a `.rewind/ctl` line, a URL's query or an
//! MCP call can fill in (paths already workspace-relative); [`Selection::resolve`] checks it
//! against the history once — session prefixes completed, turns found, points turned into
//! change ids — into a [`Resolved`], which nothing downstream re-checks. A `Resolved` lists its
//! changes ([`Resolved::changes`], [`Resolved::for_each`]), says where gc cut it
//! ([`Resolved::cut_note`], [`Resolved::check_whole`]), and is what a net diff
//! ([`super::netdiff`]) and a rollback plan ([`super::rollback::select`]) start from.

use super::change::{Change, Order, Turn};
use super::turns::TurnRef;
use super::{Error, History, Result, point};
use crate::store::Query;

/// What to select, as given. Every field narrows the selection; the default selects
/// everything. `since` and `until` are points (a change id, checkpoint, time or duration
/// ago); `path` is workspace-relative (empty: the whole workspace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// One change, by id (nothing else may be given with it).
    pub change: Option<u64>,
    /// A session: its name or a unique beginning of it.
    pub session: Option<String>,
    pub agent: Option<String>,
    /// One agent turn: `SESSION:N`, `N` (within `session` if given) or the agent's prompt id.
    pub turn: Option<String>,
    /// What a turn's session did from that turn on (a turn, written as for `turn`).
    pub to_turn: Option<String>,
    /// Changes to this path (under any of its names); for a folder with history below it,
    /// also everything below.
    pub path: Option<Vec<u8>>,
    /// Only changes after this point (`--since`): a time written to the second, as `rewind
    /// log` prints it, names that whole second, so its changes are included.
    pub since: Option<String>,
    /// Only changes after this point, taken exactly (`diff --from`, `rollback --to`): a time
    /// to the second is its end, as everywhere a point names a state.
    pub from: Option<String>,
    /// Only changes up to this point.
    pub until: Option<String>,
}

/// A selection checked against the history: the session's full name, the turns found, the
/// points as change ids. Made by [`Selection::resolve`]; the fields are public for callers
/// that already hold resolved values (a [`Turn`] from the history, a change id), and the
/// default selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub change: Option<u64>,
    /// The session given (its full name); a turn's own session is in `turn`.
    pub session: Option<String>,
    pub agent: Option<String>,
    pub turn: Option<Turn>,
    pub to_turn: Option<Turn>,
    pub path: Option<Vec<u8>>,
    /// Whether `path` is a folder with history below it: changes below it count too.
    pub below: bool,
    /// Changes with ids above this (`since`).
    pub after: Option<u64>,
    /// Changes with ids up to this (`until`).
    pub until: Option<u64>,
}

impl Selection {
    /// Whether nothing narrows it.
    pub fn is_everything(&self) -> bool {
        *self == Selection::default()
    }

    /// Check the selection against `history`, in one place for every caller.
    pub fn resolve(&self, history: &History) -> Result<Resolved> {
        let alone = Selection {
            change: self.change,
            ..Selection::default()
        };
        if self.change.is_some() && *self != alone {
            return Err(Error::Usage(
                "a change id selects that change alone; give nothing else with it".into(),
            ));
        }
        if self.turn.is_some() && self.to_turn.is_some() {
            return Err(Error::Usage("give --turn or --to-turn, not both".into()));
        }
        let session = self
            .session
            .as_deref()
            .map(|s| history.existing_session(s))
            .transpose()?;
        let agent = self
            .agent
            .as_deref()
            .map(|a| history.existing_agent(a))
            .transpose()?;
        let turn = |t: &Option<String>| {
            t.as_deref()
                .map(|t| TurnRef::parse(t).resolve(history, session.as_deref()))
                .transpose()
        };
        let (turn, to_turn) = (turn(&self.turn)?, turn(&self.to_turn)?);
        // A folder's selection is everything below it too (the whole workspace's, everything).
        let (path, below) = match &self.path {
            // (Rollback's one file is the path as given.)
            Some(rel) if rel.is_empty() => (Some(rel.clone()), true),
            Some(rel) => {
                let mut prefix = rel.clone();
                prefix.push(b'/');
                (
                    Some(rel.clone()),
                    !history.paths_with_prefix(&prefix)?.is_empty(),
                )
            }
            None => (None, false),
        };
        let at = |p: &Option<String>| p.as_deref().map(|p| point::resolve(p, history)).transpose();
        Ok(Resolved {
            change: self.change,
            session,
            agent,
            turn,
            to_turn,
            path,
            below,
            after: match (&self.since, &self.from) {
                (Some(p), _) => Some(point::resolve_since(p, history)?),
                (None, from) => at(from)?,
            },
            until: at(&self.until)?,
        })
    }
}

impl Resolved {
    /// What one turn did (bounded by its end, as it is over or still open).
    pub fn of_turn(turn: &Turn) -> Resolved {
        Resolved {
            turn: Some(turn.clone()),
            until: turn.end_id,
            ..Resolved::default()
        }
    }

    /// The session the changes are in: a turn's, or the one given.
    pub fn in_session(&self) -> Option<&str> {
        self.turn
            .as_ref()
            .or(self.to_turn.as_ref())
            .map(|t| t.session.as_str())
            .or(self.session.as_deref())
    }

    /// Whether it names whose changes (one change, a session, an agent, a turn) rather than
    /// only where or when.
    pub fn names_changes(&self) -> bool {
        self.change.is_some()
            || self.session.is_some()
            || self.agent.is_some()
            || self.turn.is_some()
            || self.to_turn.is_some()
    }

    /// The store query that finds a superset of the selection (see [`Resolved::admits`]).
    fn query(&self, order: Order) -> Query {
        let start = self
            .turn
            .as_ref()
            .or(self.to_turn.as_ref())
            .map(|t| t.start_id);
        let after = match (start, self.after) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Query {
            path: self.path.clone().filter(|_| !self.below),
            session: self.in_session().map(str::to_string),
            agent: self.agent.clone(),
            after_id: after,
            until_id: self.until,
            order,
            ..Query::default()
        }
    }

    /// Whether a change the query found is selected: of the turn, below the folder.
    fn admits(&self, c: &Change) -> bool {
        self.turn.as_ref().is_none_or(|t| c.turn == Some(t.number))
            && self
                .to_turn
                .as_ref()
                .is_none_or(|t| c.turn.is_none_or(|n| n >= t.number))
            && (!self.below || self.path.as_deref().is_none_or(|d| touches(c, d)))
    }

    /// Visit the selected changes in `order` until `visit` returns false.
    pub fn for_each(
        &self,
        history: &History,
        order: Order,
        mut visit: impl FnMut(Change) -> bool,
    ) -> Result<()> {
        if let Some(id) = self.change {
            visit(history.get(id)?);
            return Ok(());
        }
        history.for_each(&self.query(order), |c| !self.admits(&c) || visit(c))
    }

    /// The selected changes, oldest first.
    pub fn changes(&self, history: &History) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        self.for_each(history, Order::OldestFirst, |c| {
            out.push(c);
            true
        })?;
        Ok(out)
    }

    /// What to say beside a listing or diff of a selection gc cut (shown, but as a part).
    pub fn cut_note(&self, history: &History) -> Result<Option<String>> {
        let turn = self.turn.as_ref().map(|t| t.number);
        history.cut_note(self.in_session(), self.agent.as_deref(), turn)
    }

    /// Refuse a selection gc cut, for what would pass the rest off as the whole (a rollback,
    /// an export).
    pub fn check_whole(&self, history: &History) -> Result<()> {
        match (&self.turn, self.in_session()) {
            (Some(t), _) => history.check_whole_turn(&t.session, t.number)?,
            (None, Some(s)) if self.to_turn.is_none() => history.check_whole(false, s)?,
            _ => {}
        }
        if let Some(a) = &self.agent {
            history.check_whole(true, a)?;
        }
        if let Some(t) = &self.to_turn {
            history.check_kept(
                t.start_id.saturating_sub(1),
                &format!("the start of turn {}:{}", t.session, t.number),
            )?;
        }
        Ok(())
    }
}

/// Whether change `c` touches folder `dir` or anything below it, under any of its names.
fn touches(c: &Change, dir: &[u8]) -> bool {
    std::iter::once(&c.path)
        .chain(&c.from)
        .chain(&c.links)
        .any(|n| {
            dir.is_empty() || n.starts_with(dir) && matches!(n.get(dir.len()), None | Some(b'/'))
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::history::change::ChangeKind;
    use crate::history::db::Extra;
    use crate::store::Store;

    /// A history of two sessions, each with a turn 1 and a change outside it.
    fn history(dir: &std::path::Path) -> History {
        let history = History::new(Arc::new(Store::open(dir).unwrap()));
        let extra = Extra {
            finish_episode: None,
            manifest: &[],
            move_under: None,
            content: None,
            marker: None,
        };
        for (session, turn, path) in [
            ("fix-login", Some(1), "src/a"),
            ("fix-login", None, "src/b"),
            ("other", Some(1), "src/a"),
            ("other", None, "README"),
        ] {
            if turn.is_some() {
                let start_id = history.last_id().unwrap();
                history
                    .put_turn(&Turn {
                        session: session.into(),
                        number: 1,
                        prompt: "p".into(),
                        prompt_id: None,
                        agent: "claude".into(),
                        start_time_ns: 1,
                        start_id,
                        end_time_ns: None,
                        end_id: None,
                        conversation: None,
                    })
                    .unwrap();
            }
            let c = Change {
                id: 0,
                time_ns: 1,
                kind: ChangeKind::Mkdir,
                path: path.into(),
                from: None,
                before: None,
                after: None,
                session: session.into(),
                agent: "claude".into(),
                pid: 1,
                process: "sh".into(),
                links: Vec::new(),
                groups: Vec::new(),
                turn,
                tool: None,
                uid: None,
            };
            history.record(c, &extra).unwrap();
        }
        history
    }

    fn ids(r: &Resolved, history: &History) -> Vec<u64> {
        r.changes(history).unwrap().iter().map(|c| c.id).collect()
    }

    #[test]
    fn one_resolution_for_every_caller() {
        let dir = tempfile::tempdir().unwrap();
        let history = history(dir.path());
        let select = |s: Selection| s.resolve(&history);
        // A bare turn number in two sessions needs one; a session prefix narrows it.
        let both = select(Selection {
            turn: Some("1".into()),
            ..Selection::default()
        });
        assert!(matches!(both, Err(Error::Usage(ref m)) if m.contains("several sessions")));
        let r = select(Selection {
            session: Some("fix".into()),
            turn: Some("1".into()),
            ..Selection::default()
        })
        .unwrap();
        assert_eq!(r.session.as_deref(), Some("fix-login"));
        assert_eq!(ids(&r, &history), [1]);
        // A folder is everything below it; the whole workspace, everything.
        let below = |p: &str| Selection {
            path: Some(p.into()),
            ..Selection::default()
        };
        assert_eq!(ids(&select(below("src")).unwrap(), &history), [1, 2, 3]);
        assert_eq!(ids(&select(below("")).unwrap(), &history), [1, 2, 3, 4]);
        assert_eq!(ids(&select(below("src/a")).unwrap(), &history), [1, 3]);
        // Points become ids; a change stands alone.
        let since = Selection {
            session: Some("other".into()),
            since: Some("2".into()),
            until: Some("3".into()),
            ..Selection::default()
        };
        assert_eq!(ids(&select(since).unwrap(), &history), [3]);
        let crowded = select(Selection {
            change: Some(1),
            agent: Some("claude".into()),
            ..Selection::default()
        });
        assert!(matches!(crowded, Err(Error::Usage(_))));
        assert!(select(Selection::default()).unwrap() == Resolved::default());
    }

    #[test]
    fn a_rollback_names_one_thing() {
        let dir = tempfile::tempdir().unwrap();
        let history = history(dir.path());
        let rollback = |s: Selection| crate::history::rollback::select(&history, &s);
        let two = rollback(Selection {
            session: Some("other".into()),
            agent: Some("claude".into()),
            ..Selection::default()
        });
        assert!(matches!(two, Err(Error::Usage(ref m)) if m.contains("say one thing")));
        let none = rollback(Selection::default());
        assert!(matches!(none, Err(Error::Usage(ref m)) if m.contains("say what")));
        let turn = rollback(Selection {
            turn: Some("oth:1".into()),
            ..Selection::default()
        })
        .unwrap();
        assert_eq!(turn.iter().map(|c| c.id).collect::<Vec<_>>(), [3]);
        // One file alone is its newest change; with a point, its changes since.
        let file = |since: Option<&str>| {
            rollback(Selection {
                path: Some("src/a".into()),
                since: since.map(str::to_string),
                ..Selection::default()
            })
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
        };
        assert_eq!(file(None), [3]);
        assert_eq!(file(Some("0")), [1, 3]);
    }
}
