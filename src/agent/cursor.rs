//! Cursor: `.cursor/hooks.json` (`{"version": 1, "hooks": {...}}`), flat layout,
//! timeouts in seconds.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::{Hooks, Meaning, ToolName};
use super::{Agent, Error, hook_command};

/// The generic tool hooks (preToolUse/postToolUse, Cursor >= 2.4) carry a
/// `tool_use_id` and cover Shell, MCP, Read, Write, ...; the older
/// before/afterShellExecution and before/afterMCPExecution would fire for the
/// same calls again, so they are parsed but not installed. beforeReadFile and
/// beforeMCPExecution are also avoided because they are fail-closed.
pub const EVENTS: &[&str] = &[
    "sessionStart",
    "beforeSubmitPrompt",
    "preToolUse",
    "postToolUse",
    "postToolUseFailure",
    "afterFileEdit",
    "stop",
    "sessionEnd",
];

/// Seconds.
pub const TIMEOUT_SECS: u64 = 5;

fn path(ws: &Path) -> PathBuf {
    ws.join(".cursor").join("hooks.json")
}

fn specs(rewind: &str) -> Vec<Spec> {
    EVENTS
        .iter()
        .map(|&event| Spec {
            event,
            entry: json!({
                "command": hook_command(Agent::Cursor, rewind, event),
                "timeout": TIMEOUT_SECS,
            }),
        })
        .collect()
}

pub fn install(ws: &Path, rewind: &str) -> Result<Vec<PathBuf>, Error> {
    let init = [("version", json!(1))];
    Ok(install_file(
        ws,
        &path(ws),
        Agent::Cursor,
        Layout::Flat,
        &specs(rewind),
        &init,
    )?
    .into_iter()
    .collect())
}

pub fn uninstall(ws: &Path) -> Result<Vec<PathBuf>, Error> {
    Ok(
        uninstall_file(ws, &path(ws), Agent::Cursor, Layout::Flat, &["version"])?
            .into_iter()
            .collect(),
    )
}

/// The no-op reply. `{"continue": true}` is the documented "let the prompt
/// through" for beforeSubmitPrompt; for every other event an empty object
/// expresses no decision. We never answer `"permission": "allow"`: on the
/// permission hooks that is an approval and would skip Cursor's own prompt.
pub fn reply(event: &str) -> &'static str {
    match event {
        "beforeSubmitPrompt" => r#"{"continue":true}"#,
        _ => "{}",
    }
}

/// Cursor's hook payloads. conversation_id is stable across the conversation; generation_id
/// changes with every user message.
pub const HOOKS: Hooks = Hooks {
    session: &["conversation_id", "session_id"],
    prompt_id: Some("generation_id"),
    tool: "tool_name",
    tool_id: Some("tool_use_id"),
    events: &[
        ("sessionStart", Meaning::SessionStart),
        ("beforeSubmitPrompt", Meaning::Prompt),
        ("preToolUse", Meaning::ToolStart(ToolName::Field)),
        ("postToolUse", Meaning::ToolEnd(ToolName::Field)),
        ("postToolUseFailure", Meaning::ToolEnd(ToolName::Field)),
        (
            "beforeShellExecution",
            Meaning::ToolStart(ToolName::Fixed("Shell")),
        ),
        (
            "afterShellExecution",
            Meaning::ToolEnd(ToolName::Fixed("Shell")),
        ),
        (
            "beforeMCPExecution",
            Meaning::ToolStart(ToolName::FieldOr("MCP")),
        ),
        (
            "afterMCPExecution",
            Meaning::ToolEnd(ToolName::FieldOr("MCP")),
        ),
        ("afterFileEdit", Meaning::ToolEnd(ToolName::Fixed("edit"))),
        ("stop", Meaning::Stop),
        ("sessionEnd", Meaning::SessionEnd),
    ],
};
