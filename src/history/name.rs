//! Names of checkpoints, sessions and agents: one validated kind of name everywhere (the CLI,
//! `.rewind/ctl`, the environment, the store), so a name that was accepted can always be used
//! again — as a folder under `.rewind/`, and as a point without being taken for another.

use std::fmt;
use std::str::FromStr;

use super::time;

/// Longest name, in bytes.
pub const MAX_LEN: usize = 128;

/// How a name mapped from an id that is not a name begins ([`Name::from_id`]).
const MAPPED: char = '%';

/// Hex digits of the hash that ends a mapped name cut for length.
const HASHED: usize = 16;

/// The agent of a rollback's changes.
pub const ROLLBACK_AGENT: &str = "rewind";

/// The agent of changes made while nothing was mounted (found by the scan at the next mount).
pub const EXTERNAL_AGENT: &str = "external";

/// The agent names that are rewind's own: an agent named so from outside (`REWIND_AGENT`,
/// `rewind run --agent`, a ctl `session start --agent`) is recorded under its mapping
/// ([`Name::from_id`]), so its changes never pass for a rollback's or an unmounted edit's.
pub const SYSTEM_AGENTS: [&str; 2] = [ROLLBACK_AGENT, EXTERNAL_AGENT];

/// A checkpoint, session or agent name: 1 to 128 bytes of printable text, not `.` or `..`,
/// without `/`, not starting with `-`, `%` or a space, and not something that reads as a point
/// (a change id, `now`, a duration such as `5m`, or a time), which it would shadow.
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
        if s.starts_with(MAPPED) {
            return bad("it starts with %, which marks an id mapped to a name");
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return bad("it is a number, which reads as a change id");
        }
        if time::duration_shaped(s) {
            return bad("it reads as a duration (a time ago)");
        }
        if time::time_shaped(s) {
            return bad("it reads as a time");
        }
        if s == "now" {
            return bad("it reads as the point `now`");
        }
        Ok(Name(s.to_string()))
    }

    /// The name an id from outside (`REWIND_SESSION`, `REWIND_AGENT`) is recorded under: the id
    /// itself when it is a valid name (and, for an agent, not one of [`SYSTEM_AGENTS`]),
    /// otherwise `%` and the id with `%`, `/`, `#`, spaces, control characters and every byte
    /// above ASCII written `%XX`. That is one-to-one, and no valid name starts with `%`, so a
    /// mapped id never joins a name given as it is. An escaped form longer than [`MAX_LEN`]
    /// keeps what fits and ends in `#` and a hash of the whole id.
    pub fn from_id(what: &'static str, id: &[u8]) -> Name {
        let system = what == "agent" && SYSTEM_AGENTS.iter().any(|a| a.as_bytes() == id);
        if !system
            && let Ok(s) = std::str::from_utf8(id)
            && let Ok(name) = Name::parse(what, s)
        {
            return name;
        }
        let mut out = String::from(MAPPED);
        for &b in id {
            if b <= b' ' || b >= 0x7f || b"%/#".contains(&b) {
                out += &format!("%{b:02X}");
            } else {
                out.push(char::from(b));
            }
        }
        if out.len() > MAX_LEN {
            let hash = blake3::hash(id).to_hex();
            let mut cut = MAX_LEN - 1 - HASHED;
            // Never in the middle of a %XX.
            while out.as_bytes()[..cut]
                .iter()
                .rev()
                .take(2)
                .any(|&b| b == b'%')
            {
                cut -= 1;
            }
            out.truncate(cut);
            out.push('#');
            out.push_str(&hash[..HASHED]);
        }
        Name(out)
    }

    /// The id a mapped name was made from ([`Name::from_id`]), as text (`None` for a name given
    /// as it is). An id cut short for length ends in `…`.
    pub fn given(&self) -> Option<String> {
        let escaped = self.0.strip_prefix(MAPPED)?;
        let (escaped, cut) = match escaped.rsplit_once('#') {
            Some((head, _)) => (head, true),
            None => (escaped, false),
        };
        let mut bytes = Vec::with_capacity(escaped.len());
        let mut rest = escaped.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            let hex = tail.get(..2).and_then(|h| std::str::from_utf8(h).ok());
            match hex.map(|h| u8::from_str_radix(h, 16)) {
                Some(Ok(v)) if b == b'%' => {
                    bytes.push(v);
                    rest = &tail[2..];
                }
                _ => {
                    bytes.push(b);
                    rest = tail;
                }
            }
        }
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if cut {
            text.push('…');
        }
        Some(text)
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
            "now",
            "%2F",
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

    #[test]
    fn ids_that_are_not_names_map_one_to_one_and_give_the_id_back() {
        assert_eq!(Name::from_id("session", b"fix-42").as_str(), "fix-42");
        assert_eq!(Name::from_id("session", b"fix-42").given(), None);
        let long_a = "a/".repeat(100);
        let long_b = format!("{}b", "a/".repeat(99));
        let ids: Vec<&[u8]> = vec![
            b"a/b",
            b"%a%2Fb",
            b"now",
            b"5",
            b"10m",
            b"",
            b"..",
            b" x",
            b"-x",
            b"tab\there",
            b"\xff\xfe",
            "na\u{85}ve".as_bytes(),
            long_a.as_bytes(),
            long_b.as_bytes(),
        ];
        let mut seen = std::collections::HashSet::new();
        for id in &ids {
            let name = Name::from_id("session", id);
            assert!(Name::parse("session", name.as_str()).is_err(), "{name}");
            assert!(name.as_str().starts_with('%') && name.as_str().len() <= MAX_LEN);
            assert!(!name.as_str().contains('/') && !name.as_str().contains(char::is_control));
            assert!(seen.insert(name.clone()), "{name} twice");
            let given = name.given().unwrap();
            if id.len() < 40 {
                assert_eq!(given.as_bytes(), String::from_utf8_lossy(id).as_bytes());
            } else {
                assert!(
                    given.ends_with('…') && id.starts_with(given.trim_end_matches('…').as_bytes())
                );
            }
        }
        assert_eq!(Name::from_id("session", b"a/b").as_str(), "%a%2Fb");
        // rewind's own agent names, given from outside, are mapped too; as sessions they are
        // names like any other.
        for system in SYSTEM_AGENTS {
            let name = Name::from_id("agent", system.as_bytes());
            assert_eq!(name.as_str(), format!("%{system}"));
            assert_eq!(name.given().as_deref(), Some(system));
            assert_eq!(Name::from_id("session", system.as_bytes()).as_str(), system);
        }
        assert_eq!(Name::from_id("agent", b"rewinder").as_str(), "rewinder");
        // A valid name with % in it stays as it is: only mapped names start with %.
        assert_eq!(Name::from_id("session", b"a%2Fb").as_str(), "a%2Fb");
    }
}
