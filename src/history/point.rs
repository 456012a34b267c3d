//! Points in history: a change id, a checkpoint name, `now`, a time (RFC 3339 or as `rewind
//! log` prints it; see [`time::parse_point_time`]) or a relative time (`15m` ago). A point resolves to the id of the last change at or before it, so "the state at
//! a point" is the state right after that change (0: before any recorded change). Checkpoint
//! names never read as ids or times ([`super::Name`]), so the order of the tests below cannot
//! hide a checkpoint.

use super::{Error, History, Result, time};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Point {
    /// The newest change.
    Now,
    Id(u64),
    Checkpoint(String),
    Time(u64),
}

impl Point {
    /// Parse what a user wrote.
    pub fn parse(s: &str) -> Result<Point> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::BadPoint(s.to_string()));
        }
        if s == "now" {
            return Ok(Point::Now);
        }
        // Digits only: `u64::from_str` also takes `+12`, a name a checkpoint may have.
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<u64>() {
                Ok(id) => Ok(Point::Id(id)),
                Err(_) => Err(Error::NotAPoint {
                    point: s.to_string(),
                    why: "no change id is that large",
                }),
            };
        }
        if let Some(ns) = time::parse_point_time(s) {
            return Ok(Point::Time(ns));
        }
        if time::time_shaped(s) {
            return Err(Error::NotAPoint {
                point: s.to_string(),
                why: time::why_not_a_time(s),
            });
        }
        if time::duration_shaped(s) {
            // Longer ago than nanoseconds since 1970 count: before anything was recorded.
            let ago = time::parse_duration(s).unwrap_or(u64::MAX);
            return Ok(Point::Time(time::now_ns().saturating_sub(ago)));
        }
        Ok(Point::Checkpoint(s.to_string()))
    }

    /// The id of the last change at or before this point; an error if the history from there
    /// on is no longer whole (gc removed changes after it).
    pub fn resolve(&self, history: &History) -> Result<u64> {
        // Between the two halves of an exchange is a state that never was.
        let mut id = history.exchange_end(self.resolve_id(history)?)?;
        // A time at or after the newest removed change is after the horizon, although the last
        // change still stored at or before it may be an older one gc kept.
        if let Point::Time(ns) = self
            && let Some(h) = history.horizon()?
            && *ns >= h.time_ns
        {
            id = id.max(h.id);
        }
        history.check_kept(id, &self.to_string())
    }

    fn resolve_id(&self, history: &History) -> Result<u64> {
        match self {
            Point::Now => history.last_id(),
            Point::Id(id) => {
                let newest = history.last_id()?;
                if *id > newest {
                    return Err(Error::NoChange { id: *id, newest });
                }
                Ok(*id)
            }
            Point::Checkpoint(name) => match history.checkpoint(name)? {
                Some(c) => Ok(c.id),
                None if name.contains(char::is_whitespace) || name.starts_with('-') => {
                    Err(Error::BadPoint(name.clone()))
                }
                None => Err(Error::NoCheckpoint(name.clone())),
            },
            Point::Time(ns) => history.id_at_time(*ns),
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::Id(id) => write!(f, "{id}"),
            Point::Now => write!(f, "now"),
            Point::Checkpoint(name) => write!(f, "{name}"),
            Point::Time(ns) => write!(f, "{}", time::rfc3339(*ns)),
        }
    }
}

/// Resolve the point a range starts from (`--since`): everything after it is selected. A
/// time written to the second (as `rewind log` prints it) names that whole second here too,
/// so the range starts before it: `--since` with the time `log` printed for a change
/// includes that change.
pub fn resolve_since(s: &str, history: &History) -> Result<u64> {
    let point = match Point::parse(s)? {
        Point::Time(end) if time::parse_point_time(s.trim()) == Some(end) => {
            Point::Time(time::start_of_point_time(s.trim()).unwrap_or(end + 1) - 1)
        }
        p => p,
    };
    point.resolve(history)
}

/// Parse and resolve in one step.
pub fn resolve(s: &str, history: &History) -> Result<u64> {
    Point::parse(s)?.resolve(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_times_and_names_are_told_apart() {
        assert_eq!(Point::parse("12").unwrap(), Point::Id(12));
        assert!(matches!(Point::parse("15m").unwrap(), Point::Time(_)));
        assert_eq!(
            Point::parse("2000-02-29T00:00:00.5Z").unwrap(),
            Point::Time(951_782_400_500_000_000)
        );
        assert_eq!(
            Point::parse("2000-02-29 00:00:00").unwrap(),
            Point::Time(951_782_400_999_999_999)
        );
        assert_eq!(Point::parse("now").unwrap(), Point::Now);
        assert_eq!(
            Point::parse("before-refactor").unwrap(),
            Point::Checkpoint("before-refactor".into())
        );
        assert!(Point::parse("  ").is_err());
    }

    /// What only looks like an id, a time or a duration: a name, an error saying why, or the
    /// time it means.
    #[test]
    fn near_points_are_names_errors_or_the_time_they_mean() {
        assert_eq!(Point::parse("+1").unwrap(), Point::Checkpoint("+1".into()));
        let why = |s| match Point::parse(s) {
            Err(Error::NotAPoint { why, .. }) => why,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(why("99999999999999999999"), "no change id is that large");
        assert!(why("2999-01-01T00:00:00Z").contains("1970 to 2554"));
        assert!(why("2026-02-30T00:00:00Z").contains("no valid RFC 3339 time"));
        assert!(why("2026-02-30 00:00:00").contains("no valid RFC 3339 time"));
        assert!(why("2026-03-01T10:22:33").contains("no time zone"));
        // jiff reads a leap second as :59; rewind refuses it.
        assert!(why("2026-03-01T10:22:60Z").contains("leap second"));
        assert!(why("2026-03-01 10:22:60").contains("leap second"));
        assert_eq!(Point::parse("1000000d").unwrap(), Point::Time(0));
        // Names that only start with a date stay names.
        for name in [
            "2026-03-01 refactor",
            "2026-03-01T10-22-33",
            "2026-03-01 before deploy",
        ] {
            assert_eq!(Point::parse(name).unwrap(), Point::Checkpoint(name.into()));
            assert!(
                crate::history::Name::parse("checkpoint", name).is_ok(),
                "{name}"
            );
        }
    }
}
