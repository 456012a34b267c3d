//! OpenAI Codex CLI: `.codex/hooks.json` (nested layout, like Claude Code), or
//! inline `[[hooks.<Event>]]` tables in `.codex/config.toml` when the user
//! already keeps their hooks there (Codex warns when one layer has both).

use std::path::{Path, PathBuf};

use serde_json::json;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, TableLike, Value as TomlValue, value};

use super::command::is_rewind_command;
use super::fsutil::{exists, read_opt, remove_empty_dirs, remove_file, write_atomic};
use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::{Hooks, Meaning, ToolName};
use super::{Agent, Error, hook_command};

pub const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SessionEnd",
];

/// Seconds (Codex default 600).
pub const TIMEOUT_SECS: u64 = 5;
/// Codex clamps SessionEnd hooks to 3 s and warns at every start when more is declared.
pub const SESSION_END_TIMEOUT_SECS: u64 = 3;

fn timeout(event: &str) -> u64 {
    if event == "SessionEnd" {
        SESSION_END_TIMEOUT_SECS
    } else {
        TIMEOUT_SECS
    }
}

fn json_path(ws: &Path) -> PathBuf {
    ws.join(".codex").join("hooks.json")
}

fn toml_path(ws: &Path) -> PathBuf {
    ws.join(".codex").join("config.toml")
}

fn specs(rewind: &str) -> Vec<Spec> {
    EVENTS
        .iter()
        .map(|&event| Spec {
            event,
            // No matcher: an omitted matcher matches every tool / source.
            entry: json!({ "hooks": [{
                "type": "command",
                "command": hook_command(Agent::Codex, rewind, event),
                "timeout": timeout(event),
            }]}),
        })
        .collect()
}

pub fn install(ws: &Path, rewind: &str) -> Result<Vec<PathBuf>, Error> {
    let jp = json_path(ws);
    let tp = toml_path(ws);
    let toml = TomlFile::load(ws, &tp)?;
    let json_exists = exists(ws, &jp)?;
    let mut written = Vec::new();
    match toml {
        Some(mut t) if !json_exists && t.has_user_aot_hooks() => {
            t.ensure(rewind)?;
            if t.save_if_changed()? {
                written.push(tp);
            }
        }
        toml => {
            written.extend(install_file(
                ws,
                &jp,
                Agent::Codex,
                Layout::Nested,
                &specs(rewind),
                &[],
            )?);
            // Entries of ours left in config.toml by an earlier install would run twice.
            if let Some(mut t) = toml
                && t.remove_all()
                && t.save_if_changed()?
            {
                written.push(tp);
            }
        }
    }
    Ok(written)
}

pub fn uninstall(ws: &Path) -> Result<Vec<PathBuf>, Error> {
    let tp = toml_path(ws);
    // Load (and fail on) config.toml before touching hooks.json.
    let toml = TomlFile::load(ws, &tp)?;
    let mut out: Vec<PathBuf> =
        uninstall_file(ws, &json_path(ws), Agent::Codex, Layout::Nested, &[])?
            .into_iter()
            .collect();
    if let Some(mut t) = toml
        && t.remove_all()
    {
        if t.doc.to_string().trim().is_empty() {
            remove_file(ws, &tp)?;
            if let Some(dir) = tp.parent() {
                remove_empty_dirs(ws, &[dir.to_path_buf()]);
            }
        } else {
            t.save_if_changed()?;
        }
        out.push(tp);
    }
    Ok(out)
}

/// Codex's hook payloads.
pub const HOOKS: Hooks = Hooks {
    session: &["session_id"],
    prompt_id: Some("turn_id"),
    tool: "tool_name",
    tool_id: Some("tool_use_id"),
    events: &[
        ("SessionStart", Meaning::SessionStart),
        ("UserPromptSubmit", Meaning::Prompt),
        ("PreToolUse", Meaning::ToolStart(ToolName::Field)),
        ("PostToolUse", Meaning::ToolEnd(ToolName::Field)),
        ("Stop", Meaning::Stop),
        ("SessionEnd", Meaning::SessionEnd),
    ],
};

// ---------------------------------------------------------------------------
// config.toml, edited with toml_edit so comments and layout survive.

/// `[hooks]` keys that are not events.
const NON_EVENT_KEYS: &[&str] = &["state"];

struct TomlFile {
    ws: PathBuf,
    path: PathBuf,
    original: String,
    doc: DocumentMut,
}

fn ours(t: &dyn TableLike) -> bool {
    t.get("command")
        .and_then(Item::as_str)
        .is_some_and(|c| is_rewind_command(c, Agent::Codex))
}

fn value_is_ours(v: &TomlValue) -> bool {
    v.as_inline_table().is_some_and(|t| ours(t))
}

/// A matcher group consisting of exactly one handler, which is ours.
fn group_is_own(g: &Table) -> bool {
    match g.get("hooks") {
        Some(Item::ArrayOfTables(a)) => a.len() == 1 && a.get(0).is_some_and(|t| ours(t)),
        Some(Item::Value(TomlValue::Array(a))) => {
            a.len() == 1 && a.get(0).is_some_and(value_is_ours)
        }
        _ => false,
    }
}

/// Remove our handlers from a group: (removed_any, now_empty).
fn strip_group(g: &mut Table) -> (bool, bool) {
    match g.get_mut("hooks") {
        Some(Item::ArrayOfTables(a)) => {
            let before = a.len();
            a.retain(|t| !ours(t));
            (a.len() != before, a.is_empty())
        }
        Some(Item::Value(TomlValue::Array(a))) => {
            let before = a.len();
            a.retain(|v| !value_is_ours(v));
            (a.len() != before, a.is_empty())
        }
        _ => (false, false),
    }
}

/// Strip our handlers from every group; drop groups emptied by that. Returns removed_any.
fn strip_aot(aot: &mut ArrayOfTables) -> bool {
    let mut removed_any = false;
    let mut drop = Vec::new();
    for (i, g) in aot.iter_mut().enumerate() {
        let (removed, empty) = strip_group(g);
        removed_any |= removed;
        if removed && empty {
            drop.push(i);
        }
    }
    for i in drop.into_iter().rev() {
        aot.remove(i);
    }
    removed_any
}

fn set_if_differs(t: &mut dyn TableLike, key: &str, want: TomlValue) {
    let same = t
        .get(key)
        .and_then(Item::as_value)
        .is_some_and(|v| v.to_string().trim() == want.to_string().trim());
    if !same {
        t.insert(key, Item::Value(want));
    }
}

fn new_group(cmd: &str, secs: u64) -> Table {
    let mut h = Table::new();
    h.insert("type", value("command"));
    h.insert("command", value(cmd));
    h.insert("timeout", value(secs as i64));
    let mut hs = ArrayOfTables::new();
    hs.push(h);
    let mut g = Table::new();
    g.insert("hooks", Item::ArrayOfTables(hs));
    g
}

impl TomlFile {
    fn load(ws: &Path, path: &Path) -> Result<Option<Self>, Error> {
        let Some(text) = read_opt(ws, path)? else {
            return Ok(None);
        };
        let doc: DocumentMut = text
            .parse()
            .map_err(|e: toml_edit::TomlError| Error::Parse {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        Ok(Some(TomlFile {
            ws: ws.to_path_buf(),
            path: path.to_path_buf(),
            original: text,
            doc,
        }))
    }

    fn shape(&self, reason: impl Into<String>) -> Error {
        Error::Shape {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    /// Does the user keep hooks inline as `[[hooks.<Event>]]` tables, in a form
    /// we can extend (every event we install is absent or an array of tables)?
    fn has_user_aot_hooks(&self) -> bool {
        let Some(Item::Table(hooks)) = self.doc.get("hooks") else {
            return false;
        };
        let user_hooks = hooks.iter().any(|(k, item)| {
            !NON_EVENT_KEYS.contains(&k)
                && item
                    .as_array_of_tables()
                    .is_some_and(|a| a.iter().any(|g| !group_is_own(g)))
        });
        let extendable = EVENTS
            .iter()
            .all(|e| hooks.get(e).is_none_or(|i| i.is_array_of_tables()));
        user_hooks && extendable
    }

    fn ensure(&mut self, rewind: &str) -> Result<(), Error> {
        let path = self.path.clone();
        let Item::Table(hooks) = self.doc.as_table_mut().entry("hooks").or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        }) else {
            return Err(Error::Shape {
                path,
                reason: "`hooks` is not a table".into(),
            });
        };
        // Stale entries of ours under events we no longer install.
        let keys: Vec<String> = hooks.iter().map(|(k, _)| k.to_string()).collect();
        for k in &keys {
            if EVENTS.contains(&k.as_str()) || NON_EVENT_KEYS.contains(&k.as_str()) {
                continue;
            }
            if let Some(Item::ArrayOfTables(aot)) = hooks.get_mut(k)
                && strip_aot(aot)
                && aot.is_empty()
            {
                hooks.remove(k);
            }
        }
        for &event in EVENTS {
            let cmd = hook_command(Agent::Codex, rewind, event);
            let secs = timeout(event);
            match hooks.get_mut(event) {
                None => {
                    let mut aot = ArrayOfTables::new();
                    aot.push(new_group(&cmd, secs));
                    hooks.insert(event, Item::ArrayOfTables(aot));
                }
                Some(Item::ArrayOfTables(aot)) => {
                    let own = aot.iter().position(group_is_own);
                    // Strip ours from every other group.
                    let mut drop = Vec::new();
                    for (i, g) in aot.iter_mut().enumerate() {
                        if Some(i) == own {
                            continue;
                        }
                        let (removed, empty) = strip_group(g);
                        if removed && empty {
                            drop.push(i);
                        }
                    }
                    for &i in drop.iter().rev() {
                        aot.remove(i);
                    }
                    match own {
                        None => aot.push(new_group(&cmd, secs)),
                        Some(o) => {
                            let o = o - drop.iter().filter(|&&i| i < o).count();
                            let g = aot.get_mut(o).expect("index adjusted for removals");
                            g.remove("matcher");
                            match g.get_mut("hooks") {
                                Some(Item::ArrayOfTables(a)) => {
                                    let h = a.get_mut(0).expect("own group has one handler");
                                    set_if_differs(h, "type", "command".into());
                                    set_if_differs(h, "command", cmd.as_str().into());
                                    set_if_differs(h, "timeout", (secs as i64).into());
                                }
                                Some(Item::Value(TomlValue::Array(a))) => {
                                    if let Some(h) =
                                        a.get_mut(0).and_then(TomlValue::as_inline_table_mut)
                                    {
                                        set_if_differs(h, "type", "command".into());
                                        set_if_differs(h, "command", cmd.as_str().into());
                                        set_if_differs(h, "timeout", (secs as i64).into());
                                    }
                                }
                                _ => unreachable!("group_is_own checked the shape"),
                            }
                        }
                    }
                }
                Some(_) => {
                    return Err(self.shape(format!(
                        "`hooks.{event}` is not an array of tables ([[hooks.{event}]]); \
                         move the hooks to .codex/hooks.json or to [[hooks.{event}]] tables"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Remove our entries everywhere; emptied event keys and `[hooks]` go too.
    fn remove_all(&mut self) -> bool {
        let Some(Item::Table(hooks)) = self.doc.get_mut("hooks") else {
            return false;
        };
        let mut changed = false;
        let keys: Vec<String> = hooks.iter().map(|(k, _)| k.to_string()).collect();
        for k in keys {
            if let Some(Item::ArrayOfTables(aot)) = hooks.get_mut(&k)
                && strip_aot(aot)
            {
                changed = true;
                if aot.is_empty() {
                    hooks.remove(&k);
                }
            }
        }
        if changed && hooks.is_empty() {
            self.doc.as_table_mut().remove("hooks");
        }
        changed
    }

    fn save_if_changed(&self) -> Result<bool, Error> {
        let text = self.doc.to_string();
        if text == self.original {
            return Ok(false);
        }
        write_atomic(&self.ws, &self.path, text.as_bytes())?;
        Ok(true)
    }
}
