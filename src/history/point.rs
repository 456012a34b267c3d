//! Points in history: a change id, a checkpoint name, an RFC 3339 time or a relative time
//! (`15m` ago). A point resolves to the id of the last change at or before it, so "the state at
//! a point" is the state right after that change (0: before any recorded change).

use super::time;
use crate::error::{Error, Result};
use crate::store::Store;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Point {
    Id(u64),
    Checkpoint(String),
    Time(u64),
}

impl Point {
    /// Parse what a user wrote. Checkpoint names win over relative times (`rewind checkpoint 5m`
    /// is allowed, if odd); anything else that is not a number or a time is a checkpoint name.
    pub fn parse(s: &str, store: &Store) -> Result<Point> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::Invalid(
                "an empty point; give a change id, checkpoint or time".into(),
            ));
        }
        if let Ok(id) = s.parse::<u64>() {
            return Ok(Point::Id(id));
        }
        if store.checkpoint(s)?.is_some() {
            return Ok(Point::Checkpoint(s.to_string()));
        }
        if let Some(ns) = time::parse_rfc3339(s) {
            return Ok(Point::Time(ns));
        }
        if let Some(ago) = time::parse_duration(s) {
            return Ok(Point::Time(time::now_ns().saturating_sub(ago)));
        }
        Err(Error::NotFound(format!(
            "{s:?} is not a change id, a checkpoint, an RFC 3339 time or a duration like 15m"
        )))
    }

    /// The id of the last change at or before this point.
    pub fn resolve(&self, store: &Store) -> Result<u64> {
        match self {
            Point::Id(id) => {
                let last = store.last_id()?;
                if *id > last {
                    return Err(Error::NotFound(format!(
                        "there is no change {id}; the newest is {last}"
                    )));
                }
                Ok(*id)
            }
            Point::Checkpoint(name) => store
                .checkpoint(name)?
                .map(|c| c.id)
                .ok_or_else(|| Error::NotFound(format!("no checkpoint named {name:?}"))),
            Point::Time(ns) => store.id_at_time(*ns),
        }
    }
}

/// Parse and resolve in one step.
pub fn resolve(s: &str, store: &Store) -> Result<u64> {
    Point::parse(s, store)?.resolve(store)
}
