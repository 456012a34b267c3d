//! Merging rewind's entries into JSON hook configs.
//!
//! Two layouts exist:
//! * nested (Claude Code, Codex `hooks.json`, Gemini CLI):
//!   `"hooks": { "<Event>": [ { "matcher"?: "...", "hooks": [ {handler}, ... ] } ] }`
//! * flat (Cursor): `"hooks": { "<event>": [ {handler}, ... ] }`
//!
//! A handler is ours when its `command` is a rewind hook command for the agent
//! (see [`super::command::is_rewind_command`]). Everything else is left alone,
//! including the position of the user's own entries (Codex keys hook trust by
//! position, so we never insert before user entries).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::command::is_rewind_command;
use super::fsutil::{JsonDoc, exists, hooks_mut, remove_empty_dirs, remove_file};
use super::{Agent, Error};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Nested,
    Flat,
}

/// One event we install: its name and the exact entry to place in its array
/// (a matcher group for [`Layout::Nested`], a handler for [`Layout::Flat`]).
pub struct Spec {
    pub event: &'static str,
    pub entry: Value,
}

fn handler_is_ours(h: &Value, agent: Agent) -> bool {
    h.get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| is_rewind_command(c, agent))
}

/// A matcher group consisting of exactly one handler, which is ours.
fn group_is_own(g: &Value, agent: Agent) -> bool {
    g.get("hooks")
        .and_then(Value::as_array)
        .is_some_and(|hs| hs.len() == 1 && handler_is_ours(&hs[0], agent))
}

/// Remove our handlers from a group. Returns (removed_any, group_now_empty).
fn strip_group(g: &mut Value, agent: Agent) -> (bool, bool) {
    let Some(hs) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
        return (false, false);
    };
    let before = hs.len();
    hs.retain(|h| !handler_is_ours(h, agent));
    (hs.len() != before, hs.is_empty())
}

/// Make `arr` contain our entry exactly once, keeping its position if present.
fn ensure(arr: &mut Vec<Value>, agent: Agent, layout: Layout, desired: &Value) {
    let mut out = Vec::with_capacity(arr.len() + 1);
    let mut placed = false;
    for mut e in arr.drain(..) {
        match layout {
            Layout::Flat => {
                if handler_is_ours(&e, agent) {
                    if !placed {
                        out.push(desired.clone());
                        placed = true;
                    }
                    continue;
                }
            }
            Layout::Nested => {
                if !placed && group_is_own(&e, agent) {
                    out.push(desired.clone());
                    placed = true;
                    continue;
                }
                let (removed, empty) = strip_group(&mut e, agent);
                if removed && empty {
                    continue;
                }
            }
        }
        out.push(e);
    }
    if !placed {
        out.push(desired.clone());
    }
    *arr = out;
}

/// Remove all our entries from `arr`. Returns whether anything was removed.
fn remove(arr: &mut Vec<Value>, agent: Agent, layout: Layout) -> bool {
    let before = arr.clone();
    match layout {
        Layout::Flat => arr.retain(|h| !handler_is_ours(h, agent)),
        Layout::Nested => {
            let mut out = Vec::with_capacity(arr.len());
            for mut g in arr.drain(..) {
                let (removed, empty) = strip_group(&mut g, agent);
                if !(removed && empty) {
                    out.push(g);
                }
            }
            *arr = out;
        }
    }
    *arr != before
}

/// Remove our entries under every event key. Keys emptied by the removal go.
pub fn remove_all(hooks: &mut Map<String, Value>, agent: Agent, layout: Layout) -> bool {
    let mut changed = false;
    let keys: Vec<String> = hooks.keys().cloned().collect();
    for k in keys {
        if let Some(Value::Array(arr)) = hooks.get_mut(&k)
            && remove(arr, agent, layout)
        {
            changed = true;
            if arr.is_empty() {
                hooks.shift_remove(&k);
            }
        }
    }
    changed
}

/// Install `specs` into `hooks`; stale entries of ours under other keys are removed.
pub fn ensure_all(
    hooks: &mut Map<String, Value>,
    agent: Agent,
    layout: Layout,
    specs: &[Spec],
    path: &Path,
) -> Result<(), Error> {
    let keys: Vec<String> = hooks.keys().cloned().collect();
    for k in keys {
        if specs.iter().any(|s| s.event == k) {
            continue;
        }
        if let Some(Value::Array(arr)) = hooks.get_mut(&k)
            && remove(arr, agent, layout)
            && arr.is_empty()
        {
            hooks.shift_remove(&k);
        }
    }
    for s in specs {
        let v = hooks
            .entry(s.event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let arr = v.as_array_mut().ok_or_else(|| Error::Shape {
            path: path.to_path_buf(),
            reason: format!("\"hooks.{}\" is not an array", s.event),
        })?;
        ensure(arr, agent, layout, &s.entry);
    }
    Ok(())
}

/// Install into a JSON file below workspace `ws`. `init` is inserted at the top of a new file.
/// Returns the path if the file was written.
pub fn install_file(
    ws: &Path,
    path: &Path,
    agent: Agent,
    layout: Layout,
    specs: &[Spec],
    init: &[(&str, Value)],
) -> Result<Option<PathBuf>, Error> {
    let mut doc = JsonDoc::load(ws, path)?;
    if !doc.existed() {
        for (k, v) in init {
            doc.root.insert((*k).to_string(), v.clone());
        }
    }
    let hooks = hooks_mut(&mut doc)?;
    ensure_all(hooks, agent, layout, specs, path)?;
    if doc.changed() {
        doc.save()?;
        Ok(Some(path.to_path_buf()))
    } else {
        Ok(None)
    }
}

/// Remove our entries from a JSON file. `residual_keys` are top-level keys that
/// do not count as content (Cursor's `version`): a file left with nothing else
/// is deleted, and its directory too if that ends up empty.
pub fn uninstall_file(
    ws: &Path,
    path: &Path,
    agent: Agent,
    layout: Layout,
    residual_keys: &[&str],
) -> Result<Option<PathBuf>, Error> {
    if !exists(ws, path)? {
        return Ok(None);
    }
    let mut doc = JsonDoc::load(ws, path)?;
    let Some(Value::Object(hooks)) = doc.root.get_mut("hooks") else {
        return Ok(None);
    };
    if !remove_all(hooks, agent, layout) {
        return Ok(None);
    }
    if hooks.is_empty() {
        doc.root.shift_remove("hooks");
    }
    if doc.root.keys().all(|k| residual_keys.contains(&k.as_str())) {
        remove_file(ws, path)?;
        if let Some(dir) = path.parent() {
            remove_empty_dirs(ws, &[dir.to_path_buf()]);
        }
    } else {
        doc.save()?;
    }
    Ok(Some(path.to_path_buf()))
}
