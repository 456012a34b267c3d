//! Names of checkpoints, sessions and agents: one validated kind of name everywhere (the CLI,
//! `.rewind/ctl`, the environment, the store), so a name that was accepted can always be used
//! again — as a folder under `.rewind/`, and as a point without being taken for another.

use std::fmt;
use std::str::FromStr;

use super::time;

/// Longest name, in bytes.
pub const MAX_LEN: usize = 128;

/// A checkpoint, session or agent name: 1 to 128 bytes of printable text, not `.` or `..`,
/// without `/`, not starting with `-` or a space, and not something that reads as a point (a change id, a duration such as `5m`,
/// or a time), which it would shadow.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

/// Why a name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} name {given:?} is not allowed: {why}")]
pub struct BadName {
    pub what: &'static str,
    pub given: String,
    pub why: &'static str,
}

impl Name {
    /// Validate `s` as a name of `what` ("checkpoint", "session", "agent").
    pub fn parse(what: &'static str, s: &str) -> Result<Name, BadName> {
        let bad = |why| {
            Err(BadName {
                what,
                given: s.to_string(),
                why,
            })
        };
        if s.is_empty() {
            return bad("it is empty");
        }
        if s.len() > MAX_LEN {
            return bad("it is longer than 128 bytes");
        }
        if s == "." || s == ".." {
            return bad("it names a folder");
        }
        if s.contains('/') {
            return bad("it contains /");
        }
        if s.chars().any(char::is_control) {
            return bad("it contains a control character");
        }
        if s.trim() != s {
            return bad("it starts or ends with a space");
        }
        if s.starts_with('-') {
            return bad("it starts with -, which reads as an option");
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return bad("it is a number, which reads as a change id");
        }
        if time::parse_duration(s).is_some() {
            return bad("it reads as a duration (a time ago)");
        }
        if time::parse_point_time(s).is_some() {
            return bad("it reads as a time");
        }
        if s == "now" {
            return bad("it reads as the point `now`");
        }
        Ok(Name(s.to_string()))
    }

    /// A name as stored by an earlier rewind, trusted as it is (for reading old stores).
    pub fn stored(s: String) -> Name {
        Name(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// For clap: a name of unknown kind (the message says "name").
impl FromStr for Name {
    type Err = BadName;

    fn from_str(s: &str) -> Result<Name, BadName> {
        Name::parse("a", s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_pass() {
        for ok in [
            "before-refactor",
            "fix-42",
            "claude",
            "rollback-3",
            "claude-7f3a9c1e",
            "v1.2",
            "naïve",
            "a_b",
            "x",
            "before the big refactor",
        ] {
            assert_eq!(Name::parse("checkpoint", ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn names_that_break_folders_or_points_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "/",
            "a\nb",
            "tab\there",
            "esc\x1b[31m",
            "5",
            "0012",
            "1h",
            "90s",
            "3d",
            "2026-11-22T03:04:05Z",
            "2026-11-22 03:04:05",
            "now",
            " padded",
            "padded ",
            "--force",
            &"x".repeat(129),
        ] {
            assert!(Name::parse("checkpoint", bad).is_err(), "{bad:?}");
        }
        let e = Name::parse("session", "a/b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "session name \"a/b\" is not allowed: it contains /"
        );
    }
}
