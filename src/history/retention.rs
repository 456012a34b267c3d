//! Retention: how much history a store keeps, as `rewind gc` takes it and as the daemon applies
//! it in the background (from `rewind.toml` or the mount's `--keep` / `--max-size`).

use std::time::Duration;

use super::db::GcPolicy;
use super::time;

/// A limit that does not read as one: which, as given, and how to write it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadLimit {
    #[error("keep {0:?}: use a duration like 30d, 12h or 90m")]
    Keep(String),
    #[error("max-size {0:?}: use a size like 2G or 500M")]
    MaxSize(String),
    #[error("every {0:?}: use a duration like 1h or 10m")]
    Every(String),
}

/// How often the daemon applies a retention policy unless told otherwise.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(3600);

/// Limits on a store's history. Empty (both limits `None`) keeps everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Remove changes older than this (ns), as given (`30d`).
    pub keep: Option<(String, u64)>,
    /// Then remove the oldest changes until the stored content fits in this many bytes, as
    /// given (`2G`).
    pub max_size: Option<(String, u64)>,
    /// How often the daemon applies the limits.
    pub every: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            keep: None,
            max_size: None,
            every: DEFAULT_EVERY,
        }
    }
}

impl Retention {
    /// Parse the limits as people write them; the error says which value was wrong and why.
    pub fn parse(
        keep: Option<&str>,
        max_size: Option<&str>,
        every: Option<&str>,
    ) -> Result<Retention, BadLimit> {
        let keep = keep
            .map(|k| {
                time::parse_duration(k)
                    .map(|ns| (k.to_string(), ns))
                    .ok_or_else(|| BadLimit::Keep(k.to_string()))
            })
            .transpose()?;
        let max_size = max_size
            .map(|m| {
                parse_size(m)
                    .map(|b| (m.to_string(), b))
                    .ok_or_else(|| BadLimit::MaxSize(m.to_string()))
            })
            .transpose()?;
        let every = match every {
            None => DEFAULT_EVERY,
            Some(e) => match time::parse_duration(e) {
                Some(ns) if ns > 0 => Duration::from_nanos(ns),
                _ => return Err(BadLimit::Every(e.to_string())),
            },
        };
        Ok(Retention {
            keep,
            max_size,
            every,
        })
    }

    /// Whether there is anything to apply.
    pub fn is_set(&self) -> bool {
        self.keep.is_some() || self.max_size.is_some()
    }

    /// The gc policy these limits mean now.
    pub fn policy(&self) -> GcPolicy {
        GcPolicy {
            older_than_ns: self
                .keep
                .as_ref()
                .map(|(_, ns)| time::now_ns().saturating_sub(*ns)),
            max_bytes: self.max_size.as_ref().map(|(_, b)| *b),
            dry_run: false,
            repack: false,
        }
    }

    /// One line for `status`: `keep 30d, max-size 2G, applied every 1h`.
    pub fn describe(&self) -> String {
        if !self.is_set() {
            return "everything kept (no limits set)".into();
        }
        let mut parts = Vec::new();
        if let Some((k, _)) = &self.keep {
            parts.push(format!("keep {k}"));
        }
        if let Some((m, _)) = &self.max_size {
            parts.push(format!("max-size {m}"));
        }
        format!(
            "{}, applied every {}",
            parts.join(", "),
            time::short_duration(self.every)
        )
    }
}

/// `2G`, `500M`, `64KiB`, `1000` (bytes).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_limits_and_says_what_is_wrong() {
        let r = Retention::parse(Some("30d"), Some("2G"), Some("10m")).unwrap();
        assert_eq!(r.keep, Some(("30d".into(), 30 * 86_400 * 1_000_000_000)));
        assert_eq!(r.max_size, Some(("2G".into(), 2 << 30)));
        assert_eq!(r.every, Duration::from_secs(600));
        assert_eq!(r.describe(), "keep 30d, max-size 2G, applied every 10m");
        assert_eq!(
            Retention::parse(None, None, None).unwrap(),
            Retention::default()
        );
        assert!(!Retention::default().is_set());
        let e = Retention::parse(Some("30 days"), None, None).unwrap_err();
        assert_eq!(e, BadLimit::Keep("30 days".into()));
        assert!(e.to_string().contains("keep \"30 days\""), "{e}");
        let e = Retention::parse(None, Some("2Q"), None).unwrap_err();
        assert!(e.to_string().contains("max-size"), "{e}");
        let e = Retention::parse(None, None, Some("0s")).unwrap_err();
        assert!(e.to_string().contains("every"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("500M"), Some(500 << 20));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }
}
