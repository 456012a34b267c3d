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
use serde_json::{Map, Value, json};

use super::change::{Change, FileState};
use super::time;

fn state_json(s: &Option<FileState>) -> Value {
    match s {
        None => Value::Null,
        Some(s) => json!({
            "type": s.kind.as_str(),
            "size": s.size,
            "mode": format!("{:o}", s.mode),
            "hash": s.hash.map(|h| h.to_hex()),
        }),
    }
}

/// Put `bytes` under `key` as text, and under `key_bytes` as base64 when it is not UTF-8.
fn put_path(obj: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    obj.insert(
        key.into(),
        Value::String(String::from_utf8_lossy(bytes).into_owned()),
    );
    if std::str::from_utf8(bytes).is_err() {
        obj.insert(
            format!("{key}_bytes"),
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
    }
}

/// The one JSON shape of a change.
pub fn change_json(c: &Change) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), json!(c.id));
    obj.insert("time".into(), json!(time::rfc3339(c.time_ns)));
    obj.insert("kind".into(), json!(c.kind.as_str()));
    put_path(&mut obj, "path", &c.path);
    match &c.from {
        Some(from) => put_path(&mut obj, "from", from),
        None => {
            obj.insert("from".into(), Value::Null);
        }
    }
    obj.insert("session".into(), json!(c.session));
    obj.insert("agent".into(), json!(c.agent));
    obj.insert("pid".into(), json!(c.pid));
    obj.insert("process".into(), json!(c.process));
    obj.insert("before".into(), state_json(&c.before));
    obj.insert("after".into(), state_json(&c.after));
    obj.insert(
        "links".into(),
        Value::Array(
            c.links
                .iter()
                .map(|l| Value::String(String::from_utf8_lossy(l).into_owned()))
                .collect(),
        ),
    );
    if c.links.iter().any(|l| std::str::from_utf8(l).is_err()) {
        obj.insert(
            "links_bytes".into(),
            Value::Array(
                c.links
                    .iter()
                    .map(|l| Value::String(base64::engine::general_purpose::STANDARD.encode(l)))
                    .collect(),
            ),
        );
    }
    obj.insert("turn".into(), json!(c.turn));
    obj.insert(
        "tool".into(),
        match &c.tool {
            Some(t) => json!({"name": t.name, "id": t.id}),
            None => Value::Null,
        },
    );
    obj.insert("uid".into(), json!(c.uid));
    Value::Object(obj)
}

/// A change back from its JSON shape (for `rewind watch`, which reads `.rewind/events`).
pub fn change_from_json(v: &Value) -> Option<Change> {
    use super::change::{ChangeKind, FileKind, Hash, Node, Tool};
    let bytes = |key: &str| -> Option<Vec<u8>> {
        match v.get(format!("{key}_bytes")).and_then(Value::as_str) {
            Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
            None => v.get(key)?.as_str().map(|s| s.as_bytes().to_vec()),
        }
    };
    let state = |key: &str| -> Option<FileState> {
        let s = v.get(key)?;
        let kind = match s.get("type")?.as_str()? {
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
            size: s.get("size")?.as_u64()?,
            mode: u32::from_str_radix(s.get("mode")?.as_str()?, 8).ok()?,
            hash: s
                .get("hash")
                .and_then(Value::as_str)
                .and_then(Hash::from_hex),
            owner: None,
        })
    };
    let links_bytes = v.get("links_bytes").and_then(Value::as_array);
    let links = match links_bytes {
        Some(all) => all
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .collect(),
        None => v
            .get("links")
            .and_then(Value::as_array)
            .map(|all| {
                all.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.as_bytes().to_vec())
                    .collect()
            })
            .unwrap_or_default(),
    };
    Some(Change {
        id: v.get("id")?.as_u64()?,
        time_ns: time::parse_rfc3339(v.get("time")?.as_str()?)?,
        kind: ChangeKind::ALL
            .into_iter()
            .find(|k| Some(k.as_str()) == v.get("kind").and_then(Value::as_str))?,
        path: bytes("path")?,
        from: bytes("from"),
        before: state("before"),
        after: state("after"),
        session: v.get("session")?.as_str()?.to_string(),
        agent: v.get("agent")?.as_str()?.to_string(),
        pid: v.get("pid")?.as_u64()? as u32,
        process: v.get("process")?.as_str()?.to_string(),
        links,
        groups: Vec::new(),
        turn: v.get("turn").and_then(Value::as_u64).map(|n| n as u32),
        tool: v.get("tool").and_then(|t| {
            Some(Tool {
                name: t.get("name")?.as_str()?.to_string(),
                id: t.get("id").and_then(Value::as_str).map(str::to_string),
            })
        }),
        uid: v.get("uid").and_then(Value::as_u64).map(|n| n as u32),
    })
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
        use crate::history::change::{ChangeKind, FileKind, Hash, Tool};
        let c = Change {
            id: 42,
            time_ns: 1_700_000_000_123_456_789,
            kind: ChangeKind::Rename,
            path: b"new\xff name".to_vec(),
            from: Some(b"old\nname".to_vec()),
            before: None,
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
            links: vec![b"other".to_vec()],
            groups: Vec::new(),
            turn: Some(3),
            tool: Some(Tool {
                name: "Bash".into(),
                id: Some("toolu_1".into()),
            }),
            uid: Some(65534),
        };
        let back = change_from_json(&change_json(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(change_line(&back), change_line(&c));
        assert_eq!(change_json(&c)["uid"], 65534);
        assert!(change_line_for(&c, 0).ends_with("mv[7]  uid 65534"));
        assert!(change_line_for(&c, 65534).ends_with("mv[7]"));
    }

    #[test]
    fn json_keeps_the_exact_bytes_of_names_that_are_not_utf8() {
        let mut obj = Map::new();
        put_path(&mut obj, "path", b"a\xffb");
        assert_eq!(obj["path"], "a\u{fffd}b");
        assert_eq!(obj["path_bytes"], "Yf9i");
        let mut obj = Map::new();
        put_path(&mut obj, "path", b"plain");
        assert!(!obj.contains_key("path_bytes"));
    }
}
