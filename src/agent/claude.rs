//! Claude Code: `.claude/settings.json` (project settings, shared) or `.claude/settings.local.json`
//! (the user's own for this project, not committed), nested layout.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::{Hooks, Meaning, Payload, ToolName};
use super::{Agent, Error, HookEvent, hook_command};

pub const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SessionEnd",
];

/// Seconds. Claude Code's default is 600; SessionEnd is additionally capped at
/// 1.5 s overall unless CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS is set.
pub const TIMEOUT_SECS: u64 = 5;

fn path(ws: &Path) -> PathBuf {
    ws.join(".claude").join("settings.json")
}

fn local_path(ws: &Path) -> PathBuf {
    ws.join(".claude").join("settings.local.json")
}

fn specs(rewind: &str) -> Vec<Spec> {
    EVENTS
        .iter()
        .map(|&event| {
            let handler = json!({
                "type": "command",
                "command": hook_command(Agent::Claude, rewind, event),
                "timeout": TIMEOUT_SECS,
            });
            // Tool events take a tool-name matcher ("*" = all tools); the others
            // ignore matchers (SessionStart: omitted = every source).
            let entry = if matches!(event, "PreToolUse" | "PostToolUse") {
                json!({ "matcher": "*", "hooks": [handler] })
            } else {
                json!({ "hooks": [handler] })
            };
            Spec { event, entry }
        })
        .collect()
}

pub fn install(ws: &Path, rewind: &str, local: bool) -> Result<Vec<PathBuf>, Error> {
    let file = if local { local_path(ws) } else { path(ws) };
    Ok(install_file(
        ws,
        &file,
        Agent::Claude,
        Layout::Nested,
        &specs(rewind),
        &[],
    )?
    .into_iter()
    .collect())
}

/// From both the project and the local settings.
pub fn uninstall(ws: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut done = Vec::new();
    for file in [path(ws), local_path(ws)] {
        done.extend(uninstall_file(
            ws,
            &file,
            Agent::Claude,
            Layout::Nested,
            &[],
        )?);
    }
    Ok(done)
}

/// Claude Code's hook payloads.
pub const HOOKS: Hooks = Hooks {
    session: &["session_id"],
    prompt_id: Some("prompt_id"),
    tool: "tool_name",
    tool_id: Some("tool_use_id"),
    events: &[
        ("SessionStart", Meaning::SessionStart),
        ("UserPromptSubmit", Meaning::Prompt),
        ("PreToolUse", Meaning::ToolStart(ToolName::Field)),
        ("PostToolUse", Meaning::ToolEnd(ToolName::Field)),
        ("PostToolUseFailure", Meaning::ToolEnd(ToolName::Field)),
        ("Stop", Meaning::Stop),
        ("SessionEnd", Meaning::SessionEnd),
    ],
};

pub fn parse(p: &Payload) -> Result<HookEvent, Error> {
    // Cursor can run Claude Code hooks from .claude/settings.json ("third-party
    // hooks"); such a run is Cursor's, not Claude's, and the Cursor hooks record it.
    if p.has("cursor_version") {
        return Ok(HookEvent::Ignored);
    }
    HOOKS.event(p)
}
