//! How a change looks: one aligned line for people, one JSON object for programs. Shared by
//! the CLI and the control directory, so both print the same.

use serde_json::{Value, json};

use super::time;
use crate::store::{Change, FileState};

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

pub fn change_json(c: &Change) -> Value {
    json!({
        "id": c.id,
        "time": time::rfc3339(c.time_ns),
        "kind": c.kind.as_str(),
        "path": String::from_utf8_lossy(&c.path),
        "from": c.from.as_ref().map(|f| String::from_utf8_lossy(f).into_owned()),
        "session": c.session,
        "agent": c.agent,
        "pid": c.pid,
        "process": c.process,
        "before": state_json(&c.before),
        "after": state_json(&c.after),
    })
}

/// `  12  2026-11-22 03:04:05  modify   src/main.rs  claude@s1  sed[4242]`
pub fn change_line(c: &Change) -> String {
    let path = String::from_utf8_lossy(&c.path);
    let path = match &c.from {
        Some(from) => format!("{} <- {}", path, String::from_utf8_lossy(from)),
        None => path.into_owned(),
    };
    format!(
        "{:>6}  {}  {:<7}  {}  {}@{}  {}[{}]",
        c.id,
        time::short(c.time_ns),
        c.kind.as_str(),
        path,
        c.agent,
        c.session,
        c.process,
        c.pid
    )
}
