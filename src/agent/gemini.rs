//! Gemini CLI: `.gemini/settings.json` (project settings), nested layout,
//! timeouts in milliseconds.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::{Hooks, Meaning, ToolName};
use super::{Agent, Error, hook_command};

pub const EVENTS: &[&str] = &[
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "SessionEnd",
];

/// Milliseconds (Gemini CLI default: 60000).
pub const TIMEOUT_MS: u64 = 5000;

fn path(ws: &Path) -> PathBuf {
    ws.join(".gemini").join("settings.json")
}

fn specs(rewind: &str) -> Vec<Spec> {
    EVENTS
        .iter()
        .map(|&event| Spec {
            event,
            // No matcher: Gemini runs a definition without matcher for every
            // tool / source (hookPlanner.matchesContext).
            entry: json!({ "hooks": [{
                "name": "rewind",
                "type": "command",
                "command": hook_command(Agent::Gemini, rewind, event),
                "timeout": TIMEOUT_MS,
            }]}),
        })
        .collect()
}

pub fn install(ws: &Path, rewind: &str) -> Result<Vec<PathBuf>, Error> {
    Ok(install_file(
        ws,
        &path(ws),
        Agent::Gemini,
        Layout::Nested,
        &specs(rewind),
        &[],
    )?
    .into_iter()
    .collect())
}

pub fn uninstall(ws: &Path) -> Result<Vec<PathBuf>, Error> {
    Ok(
        uninstall_file(ws, &path(ws), Agent::Gemini, Layout::Nested, &[])?
            .into_iter()
            .collect(),
    )
}

/// Gemini CLI's hook payloads: no prompt id, no tool call id.
pub const HOOKS: Hooks = Hooks {
    session: &["session_id"],
    prompt_id: None,
    tool: "tool_name",
    tool_id: None,
    events: &[
        ("SessionStart", Meaning::SessionStart),
        ("BeforeAgent", Meaning::Prompt),
        ("BeforeTool", Meaning::ToolStart(ToolName::Field)),
        ("AfterTool", Meaning::ToolEnd(ToolName::Field)),
        ("AfterAgent", Meaning::Stop),
        ("SessionEnd", Meaning::SessionEnd),
    ],
};
