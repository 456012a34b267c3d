//! Times as users write and read them: RFC 3339 in UTC, and relative durations (`15m`, `2h`,
//! `3d`). The calendar is jiff's.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `2026-11-22T03:04:05.123456789Z`
pub fn rfc3339(ns: u64) -> String {
    // Every u64 of nanoseconds (up to the year 2554) is a valid timestamp.
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S.%NZ").to_string())
        .unwrap_or_default()
}

/// `2026-11-22 03:04:05`, for people.
pub fn short(ns: u64) -> String {
    let full = rfc3339(ns);
    format!("{} {}", &full[..10], &full[11..19])
}

/// Parse an RFC 3339 time (`2026-11-22T03:04:05Z`, fractional seconds and offsets allowed).
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    // The shape first (so nothing else jiff would read as a time is taken for one), then
    // jiff, which knows the calendar: 2026-02-31 is no date.
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    // jiff reads a leap second, `:60`, as `:59`: the same written point would name two
    // instants. rewind's clock (Unix time) has no leap seconds.
    if leap_second(b) {
        return None;
    }
    let t: jiff::Timestamp = s.parse().ok()?;
    u64::try_from(t.as_nanosecond()).ok()
}

/// Parse a time as a user may write it: RFC 3339, or the time `rewind log` prints
/// (`2026-11-22 03:04:05`, UTC). The answer is the last instant the written time names: a time
/// written to the second names that whole second, as `log` shows a change made at
/// `03:04:05.6` at `03:04:05`, so copying a time from `log` names the state after that change.
pub fn parse_point_time(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let ns = if b.len() == 19 && b[10] == b' ' {
        parse_rfc3339(&format!("{s}Z"))?
    } else {
        parse_rfc3339(s)?
    };
    let whole_seconds = b.get(19) != Some(&b'.');
    Some(if whole_seconds {
        ns.saturating_add(999_999_999)
    } else {
        ns
    })
}

/// The first instant a time written as [`parse_point_time`] takes names (the start of its
/// second when written to the second).
pub fn start_of_point_time(s: &str) -> Option<u64> {
    let end = parse_point_time(s)?;
    Some(if s.as_bytes().get(19) != Some(&b'.') {
        end - 999_999_999
    } else {
        end
    })
}

/// Whether `s` has the shape [`parse_point_time`] reads (`YYYY-MM-DDTHH:MM:SS…`, or the
/// 19-character form `log` prints), valid or not: such a string is a time or a mistake, never a
/// name. (A name that merely starts with a date, `2026-03-01 refactor` or
/// `2026-03-01T10-22-33`, is a name.)
pub fn time_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
}

/// The seconds of a time written `YYYY-MM-DDTHH:MM:SS…` are `60`.
fn leap_second(b: &[u8]) -> bool {
    b.get(17..19) == Some(b"60")
}

/// Why a [`time_shaped`] string is no time [`parse_point_time`] takes.
pub fn why_not_a_time(s: &str) -> &'static str {
    let b = s.as_bytes();
    if leap_second(b) {
        return "its seconds are 60: a leap second, which rewind's clock (Unix time) does not \
                have";
    }
    if b.len() == 19 && b[10] != b' ' {
        return "it has no time zone: add Z (UTC) or an offset, or write it as `log` prints \
                times (a space, not T: UTC)";
    }
    let full = if b.len() == 19 {
        format!("{s}Z")
    } else {
        s.to_string()
    };
    match full.parse::<jiff::Timestamp>() {
        Ok(_) => "rewind's times run from 1970 to 2554",
        Err(_) => "it is no valid RFC 3339 time (a date that does not exist, or a part missing)",
    }
}

/// Whether `s` has the shape of a duration (digits, then one of `s`, `m`, `h`, `d`, `w`),
/// whether or not [`parse_duration`] can count it in nanoseconds.
pub fn duration_shaped(s: &str) -> bool {
    s.find(|c: char| !c.is_ascii_digit())
        .is_some_and(|at| at > 0 && matches!(&s[at..], "s" | "m" | "h" | "d" | "w"))
}

/// Parse a duration such as `90s`, `15m`, `2h`, `3d`, `1w` into nanoseconds.
pub fn parse_duration(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(secs)?.checked_mul(1_000_000_000)
}

/// A duration as `parse_duration` reads it, in its largest whole unit: `1h`, `90m`, `45s`.
pub fn short_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    for (unit, n) in [("w", 7 * 86_400), ("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs >= n && secs.is_multiple_of(n) {
            return format!("{}{unit}", secs / n);
        }
    }
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        for ns in [
            0u64,
            1_700_000_000_123_456_789,
            951_782_400_000_000_000,
            4_102_444_799_999_999_999,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(ns)), Some(ns), "{}", rfc3339(ns));
        }
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T01:00:00+01:00"),
            Some(951_782_400_000_000_000)
        );
        assert_eq!(short(951_782_400_000_000_000), "2000-02-29 00:00:00");
    }

    #[test]
    fn a_time_as_log_prints_it_names_its_whole_second() {
        let ns = 1_700_000_000_123_456_789;
        let end = 1_700_000_000_999_999_999;
        assert_eq!(parse_point_time(&short(ns)), Some(end));
        assert_eq!(parse_point_time("2023-11-14T22:13:20Z"), Some(end));
        assert_eq!(parse_point_time(&rfc3339(ns)), Some(ns));
        assert_eq!(
            parse_point_time("2023-11-14 23:13:20+01:00"),
            Some(end),
            "an offset after the printed form"
        );
        for bad in [
            "2023-11-14 22:13",
            "2023-11-14  22:13:20",
            "2023-11-14 22:13:20x",
        ] {
            assert_eq!(parse_point_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T25:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-02-31T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert!(parse_rfc3339("2028-02-29T00:00:00Z").is_some());
        assert_eq!(parse_duration("15m"), Some(900_000_000_000));
        assert_eq!(parse_duration("2h"), Some(7_200_000_000_000));
        for bad in ["", "m", "15", "15x", "-1h", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
