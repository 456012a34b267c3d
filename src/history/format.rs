//! How a change looks: one line for people, one JSON object for programs. `rewind log`,
//! `rewind watch`, `.rewind/log` and `.rewind/sessions/*/log` print the line;
//! `--json`, `.rewind/log.json` and `.rewind/events` the object. Both are made here and nowhere
//! else.
//!
//! Paths are bytes. For people, a path that holds control characters, quotes, backslashes or
//! bytes that are not UTF-8 is quoted and escaped (as git quotes names), so a file name can
//! never move the cursor or fake a line. In JSON, `path` is the readable form and a path that
//! is not UTF-8 also carries its exact bytes, base64-encoded, in `path_bytes` (`from_bytes`,
//! `links_bytes` likewise).

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::change::{Change, FileState};
use super::time;

/// A change as JSON, field for field in the order printed; `change_json` and
/// `change_from_json` are its two directions. A name is its readable text, plus its exact
/// bytes in base64 (`*_bytes`) when it is not UTF-8.
#[derive(Serialize, Deserialize)]
struct ChangeJson {
    id: u64,
    time: String,
    kind: String,
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_bytes: Option<String>,
    from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from_bytes: Option<String>,
    session: String,
    agent: String,
    pid: u32,
    process: String,
    before: Option<StateJson>,
    after: Option<StateJson>,
    #[serde(default)]
    links: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    links_bytes: Option<Vec<String>>,
    turn: Option<u32>,
    tool: Option<ToolJson>,
    uid: Option<u32>,
}

/// What a path held: its type, size, mode (octal) and content hash (hex).
#[derive(Serialize, Deserialize)]
struct StateJson {
    #[serde(rename = "type")]
    kind: String,
    size: u64,
    mode: String,
    hash: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct ToolJson {
    name: String,
    id: Option<String>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `bytes` in base64 when they are not UTF-8 (their text then lost some).
fn exact(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes)
        .is_err()
        .then(|| base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The exact bytes of a name: from base64 when given, else its text.
fn name_bytes(text: String, exact: Option<String>) -> Option<Vec<u8>> {
    match exact {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
        None => Some(text.into_bytes()),
    }
}

impl From<&FileState> for StateJson {
    fn from(s: &FileState) -> StateJson {
        StateJson {
            kind: s.kind.as_str().to_string(),
            size: s.size,
            mode: format!("{:o}", s.mode),
            hash: s.hash.map(|h| h.to_hex()),
        }
    }
}

impl StateJson {
    fn state(self) -> Option<FileState> {
        use super::change::{FileKind, Hash, Node};
        let kind = match self.kind.as_str() {
            "file" => FileKind::File,
            "dir" => FileKind::Dir,
            "symlink" => FileKind::Symlink,
            "fifo" => FileKind::Special(Node::Fifo),
            "socket" => FileKind::Special(Node::Socket),
            // The device number is not in the JSON shape.
            _ => FileKind::Special(Node::Unknown),
        };
        Some(FileState {
            kind,
            size: self.size,
            mode: u32::from_str_radix(&self.mode, 8).ok()?,
            hash: self.hash.as_deref().and_then(Hash::from_hex),
            owner: None,
        })
    }
}

impl From<&Change> for ChangeJson {
    fn from(c: &Change) -> ChangeJson {
        let links_exact = c.links.iter().any(|l| std::str::from_utf8(l).is_err());
        ChangeJson {
            id: c.id,
            time: time::rfc3339(c.time_ns),
            kind: c.kind.as_str().to_string(),
            path: text(&c.path),
            path_bytes: exact(&c.path),
            from: c.from.as_deref().map(text),
            from_bytes: c.from.as_deref().and_then(exact),
            session: c.session.clone(),
            agent: c.agent.clone(),
            pid: c.pid,
            process: c.process.clone(),
            before: c.before.as_ref().map(StateJson::from),
            after: c.after.as_ref().map(StateJson::from),
            links: c.links.iter().map(|l| text(l)).collect(),
            links_bytes: links_exact.then(|| {
                c.links
                    .iter()
                    .map(|l| base64::engine::general_purpose::STANDARD.encode(l))
                    .collect()
            }),
            turn: c.turn,
            tool: c.tool.as_ref().map(|t| ToolJson {
                name: t.name.clone(),
                id: t.id.clone(),
            }),
            uid: c.uid,
        }
    }
}

impl ChangeJson {
    fn change(self) -> Option<Change> {
        use super::change::{ChangeKind, Tool};
        let links = match self.links_bytes {
            Some(all) => all
                .into_iter()
                .filter_map(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .collect(),
            None => self.links.into_iter().map(String::into_bytes).collect(),
        };
        Some(Change {
            id: self.id,
            time_ns: time::parse_rfc3339(&self.time)?,
            kind: ChangeKind::ALL
                .into_iter()
                .find(|k| k.as_str() == self.kind)?,
            path: name_bytes(self.path, self.path_bytes)?,
            from: match self.from {
                Some(from) => Some(name_bytes(from, self.from_bytes)?),
                None => None,
            },
            before: self.before.and_then(StateJson::state),
            after: self.after.and_then(StateJson::state),
            session: self.session,
            agent: self.agent,
            pid: self.pid,
            process: self.process,
            links,
            groups: Vec::new(),
            turn: self.turn,
            tool: self.tool.map(|t| Tool {
                name: t.name,
                id: t.id,
            }),
            uid: self.uid,
        })
    }
}

/// The one JSON shape of a change.
pub fn change_json(c: &Change) -> Value {
    serde_json::to_value(ChangeJson::from(c)).unwrap_or(Value::Null)
}

/// A change back from its JSON shape (for `rewind watch`, which reads `.rewind/events`).
pub fn change_from_json(v: &Value) -> Option<Change> {
    ChangeJson::deserialize(v).ok()?.change()
}

/// A line for people:
/// `    12  2026-11-22 03:04:05  modify   src/main.rs  claude@fix-42:3  sed[4242]`
/// (`:3` is the agent turn, when there was one), ending in `  uid 1001` when a user other than
/// the mounting one (the one reading the store) made it.
pub fn change_line(c: &Change) -> String {
    change_line_for(c, rustix::process::geteuid().as_raw())
}

fn change_line_for(c: &Change, mounting: u32) -> String {
    let mut path = escape_path(&c.path);
    if let Some(from) = &c.from {
        path = format!("{path} <- {}", escape_path(from));
    }
    for l in &c.links {
        path = format!("{path} (= {})", escape_path(l));
    }
    let turn = c.turn.map(|n| format!(":{n}")).unwrap_or_default();
    let uid = match c.uid {
        Some(uid) if uid != mounting => format!("  uid {uid}"),
        _ => String::new(),
    };
    format!(
        "{:>6}  {}  {:<7}  {}  {}@{}{turn}  {}[{}]{uid}",
        c.id,
        time::short(c.time_ns),
        c.kind.as_str(),
        path,
        escape_text(&c.agent),
        escape_text(&c.session),
        escape_text(&c.process),
        c.pid
    )
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || c == '"'
        || c == '\\'
        // Bidirectional overrides and isolates: they reorder what a terminal shows.
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A path for people: as it is when that is safe to print, else quoted with escapes (`\n`,
/// `\t`, `\"`, `\\`, `\ooo` for other bytes, `\u{...}` for invisible characters).
pub fn escape_path(path: &[u8]) -> String {
    match std::str::from_utf8(path) {
        Ok(s) if !s.chars().any(needs_escape) && !s.is_empty() => s.to_string(),
        _ => quote(path),
    }
}

/// A count and its noun, in the singular for one: `1 path`, `3 paths`, `0 changes`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Text (a session or process name) for people, escaped the same way.
pub fn escape_text(s: &str) -> String {
    if s.chars().any(needs_escape) {
        quote(s.as_bytes())
    } else {
        s.to_string()
    }
}

fn quote(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x80 && c.is_control() => {
                    out.push_str(&format!("\\{:03o}", c as u32));
                }
                c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('"');
    out
}

/// The checkpoints as `status` lists them: `name@id ...`, or how to make one.
pub fn checkpoint_list(checkpoints: &[super::change::Checkpoint]) -> String {
    if checkpoints.is_empty() {
        return "none (make one with `rewind checkpoint NAME`)".into();
    }
    checkpoints
        .iter()
        .map(|c| format!("{}@{}", c.name, c.id))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `status`'s line on what gc removed: the oldest point still answered.
pub fn horizon_line(h: &crate::store::Horizon) -> String {
    format!(
        "oldest point still kept: {} ({}); gc removed what came before",
        h.id,
        time::rfc3339(h.time_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_printed_safely() {
        assert_eq!(escape_path(b"src/main.rs"), "src/main.rs");
        assert_eq!(escape_path("naïve ☃.txt".as_bytes()), "naïve ☃.txt");
        assert_eq!(escape_path(b"a\nb"), "\"a\\nb\"");
        assert_eq!(escape_path(b"x\x1b[31mred"), "\"x\\033[31mred\"");
        assert_eq!(escape_path(b"bad\xff\xfe"), "\"bad\\377\\376\"");
        assert_eq!(escape_path(b"q\"uote"), "\"q\\\"uote\"");
        assert_eq!(
            escape_path("rtl\u{202e}gpj.exe".as_bytes()),
            "\"rtl\\u{202e}gpj.exe\""
        );
    }

    #[test]
    fn a_change_reads_back_from_json_to_the_same_line() {
        let c = Change {
            from: Some(b"old\nname".to_vec()),
            before: None,
            links: vec![b"other".to_vec()],
            tool: Some(crate::history::change::Tool {
                name: "Bash".into(),
                id: Some("toolu_1".into()),
            }),
            uid: Some(65534),
            ..full_change()
        };
        let back = change_from_json(&change_json(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(change_line(&back), change_line(&c));
        assert_eq!(change_json(&c)["uid"], 65534);
        assert!(change_line_for(&c, 0).ends_with("mv[7]  uid 65534"));
        assert!(change_line_for(&c, 65534).ends_with("mv[7]"));
    }

    /// A change with every field set, its names not UTF-8.
    fn full_change() -> Change {
        use crate::history::change::{ChangeKind, FileKind, Hash, Tool};
        Change {
            id: 42,
            time_ns: 1_700_000_000_123_456_789,
            kind: ChangeKind::Rename,
            path: b"new\xff name".to_vec(),
            from: Some(b"old\xfe\nname".to_vec()),
            before: Some(FileState {
                kind: FileKind::Symlink,
                size: 0,
                mode: 0o777,
                hash: None,
                owner: None,
            }),
            after: Some(FileState {
                kind: FileKind::File,
                size: 3,
                mode: 0o644,
                hash: Some(Hash::of(b"abc")),
                owner: None,
            }),
            session: "s1".into(),
            agent: "claude".into(),
            pid: 7,
            process: "mv".into(),
            links: vec![b"other".to_vec(), b"x\xff".to_vec()],
            groups: Vec::new(),
            turn: Some(3),
            tool: Some(Tool {
                name: "Bash".into(),
                id: None,
            }),
            uid: None,
        }
    }

    /// The JSON shape is a contract (`--json`, `.rewind/log.json`, `.rewind/events`): these
    /// are its bytes, key order included, as they were when it was built by hand.
    #[test]
    fn the_json_shape_is_kept_byte_for_byte() {
        assert_eq!(
            change_json(&full_change()).to_string(),
            r#"{"id":42,"time":"2023-11-14T22:13:20.123456789Z","kind":"rename","path":"newFFFD name","path_bytes":"bmV3/yBuYW1l","from":"oldFFFD\nname","from_bytes":"b2xk/gpuYW1l","session":"s1","agent":"claude","pid":7,"process":"mv","before":{"type":"symlink","size":0,"mode":"777","hash":null},"after":{"type":"file","size":3,"mode":"644","hash":"6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},"links":["other","xFFFD"],"links_bytes":["b3RoZXI=","eP8="],"turn":3,"tool":{"name":"Bash","id":null},"uid":null}"#
                .replace("FFFD", "\u{fffd}")
        );
        let mut plain = full_change();
        plain.path = b"a".to_vec();
        plain.from = None;
        plain.before = None;
        plain.links = Vec::new();
        plain.tool = None;
        plain.turn = None;
        assert_eq!(
            change_json(&plain).to_string(),
            r#"{"id":42,"time":"2023-11-14T22:13:20.123456789Z","kind":"rename","path":"a","from":null,"session":"s1","agent":"claude","pid":7,"process":"mv","before":null,"after":{"type":"file","size":3,"mode":"644","hash":"6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},"links":[],"turn":null,"tool":null,"uid":null}"#
        );
        for c in [full_change(), plain] {
            assert_eq!(change_from_json(&change_json(&c)), Some(c));
        }
    }

    #[test]
    fn json_keeps_the_exact_bytes_of_names_that_are_not_utf8() {
        let mut c = full_change();
        c.path = b"a\xffb".to_vec();
        let v = change_json(&c);
        assert_eq!(v["path"], "a\u{fffd}b");
        assert_eq!(v["path_bytes"], "Yf9i");
        c.path = b"plain".to_vec();
        assert!(change_json(&c).get("path_bytes").is_none());
    }
}
