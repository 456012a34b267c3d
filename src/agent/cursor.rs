//! Cursor: `.cursor/hooks.json` (`{"version": 1, "hooks": {...}}`), flat layout,
//! timeouts in seconds.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::jsonhooks::{Layout, Spec, install_file, uninstall_file};
use super::payload::Payload;
use super::{Agent, Error, HookEvent, hook_command};

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

pub fn parse(p: &Payload) -> Result<HookEvent, Error> {
    // conversation_id is stable across the conversation; generation_id changes
    // with every user message.
    let session = || p.req(&["conversation_id", "session_id"]);
    Ok(match p.event {
        "sessionStart" => HookEvent::SessionStart {
            session_id: session()?,
        },
        "beforeSubmitPrompt" => HookEvent::Prompt {
            session_id: session()?,
            prompt: p.req_allow_empty("prompt")?,
            prompt_id: p.opt(&["generation_id"]),
        },
        "preToolUse" => HookEvent::ToolStart {
            session_id: session()?,
            tool: p.req(&["tool_name"])?,
            tool_id: p.opt(&["tool_use_id"]),
        },
        "postToolUse" | "postToolUseFailure" => HookEvent::ToolEnd {
            session_id: session()?,
            tool: p.req(&["tool_name"])?,
            tool_id: p.opt(&["tool_use_id"]),
        },
        "beforeShellExecution" => HookEvent::ToolStart {
            session_id: session()?,
            tool: "Shell".into(),
            tool_id: None,
        },
        "afterShellExecution" => HookEvent::ToolEnd {
            session_id: session()?,
            tool: "Shell".into(),
            tool_id: None,
        },
        "beforeMCPExecution" => HookEvent::ToolStart {
            session_id: session()?,
            tool: p.opt(&["tool_name"]).unwrap_or_else(|| "MCP".into()),
            tool_id: None,
        },
        "afterMCPExecution" => HookEvent::ToolEnd {
            session_id: session()?,
            tool: p.opt(&["tool_name"]).unwrap_or_else(|| "MCP".into()),
            tool_id: None,
        },
        "afterFileEdit" => HookEvent::ToolEnd {
            session_id: session()?,
            tool: "edit".into(),
            tool_id: None,
        },
        "stop" => HookEvent::Stop {
            session_id: session()?,
        },
        "sessionEnd" => HookEvent::SessionEnd {
            session_id: session()?,
        },
        _ => HookEvent::Ignored,
    })
}
