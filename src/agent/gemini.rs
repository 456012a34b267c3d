//! Gemini CLI: `.gemini/settings.json` (project settings), nested layout,
//! timeouts in milliseconds.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::Payload;
use super::{Agent, Error, HookEvent, hook_command};

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

pub fn parse(p: &Payload) -> Result<HookEvent, Error> {
    let session = || p.req(&["session_id"]);
    Ok(match p.event {
        "SessionStart" => HookEvent::SessionStart {
            session_id: session()?,
        },
        // Gemini has no prompt/turn id.
        "BeforeAgent" => HookEvent::Prompt {
            session_id: session()?,
            prompt: p.req_allow_empty("prompt")?,
            prompt_id: None,
        },
        // Gemini has no tool call id either.
        "BeforeTool" => HookEvent::ToolStart {
            session_id: session()?,
            tool: p.req(&["tool_name"])?,
            tool_id: None,
        },
        "AfterTool" => HookEvent::ToolEnd {
            session_id: session()?,
            tool: p.req(&["tool_name"])?,
            tool_id: None,
        },
        "AfterAgent" => HookEvent::Stop {
            session_id: session()?,
        },
        "SessionEnd" => HookEvent::SessionEnd {
            session_id: session()?,
        },
        _ => HookEvent::Ignored,
    })
}
