//! Hook integration for AI coding agents: install/uninstall rewind's hook
//! configuration in a workspace, and parse the payloads the agents send.
//!
//! Each installed hook runs `<rewind> hook <agent> <EVENT>` with the agent's
//! JSON payload on stdin. The hook process must print exactly [`reply`] (or
//! nothing when it is `None`) on stdout, nothing on stderr but a line when no
//! daemon took the event (or the payload or event was not one rewind knows), and exit 0.
//! See `NOTES.md` beside this file for the per-agent protocol details and sources.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod claude;
mod codex;
mod command;
mod cursor;
mod fsutil;
mod gemini;
mod jsonhooks;
mod opencode;
mod payload;
pub mod transcript;

pub use command::{hook_command, is_rewind_command, shell_quote};
pub use opencode::plugin_source as opencode_plugin_source;

/// A supported coding agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    Claude,
    Codex,
    Gemini,
    Cursor,
    Opencode,
}

impl Agent {
    pub const ALL: [Agent; 5] = [
        Agent::Claude,
        Agent::Codex,
        Agent::Gemini,
        Agent::Cursor,
        Agent::Opencode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Cursor => "cursor",
            Agent::Opencode => "opencode",
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Agent {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Agent::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| Error::UnknownAgent(s.to_string()))
    }
}

/// What a hook invocation tells rewind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookEvent {
    SessionStart {
        session_id: String,
    },
    /// `prompt_id`: the agent's own prompt/turn/generation id if it has one
    /// (Claude Code `prompt_id`, Codex `turn_id`, Cursor `generation_id`,
    /// OpenCode user message id; Gemini CLI has none).
    Prompt {
        session_id: String,
        prompt: String,
        prompt_id: Option<String>,
    },
    ToolStart {
        session_id: String,
        tool: String,
        tool_id: Option<String>,
    },
    ToolEnd {
        session_id: String,
        tool: String,
        tool_id: Option<String>,
    },
    /// The agent finished its turn (not the end of the session).
    Stop {
        session_id: String,
    },
    SessionEnd {
        session_id: String,
    },
    /// A valid payload for an event rewind does not act on.
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown agent {0:?} (expected claude, codex, gemini, cursor or opencode)")]
    UnknownAgent(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: refused: a symlink on the way leads outside the workspace (nothing written or removed there)",
        path.display()
    )]
    Outside { path: PathBuf },
    #[error("{}: cannot parse: {reason} (file left unchanged)", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("{}: unexpected content: {reason} (file left unchanged)", path.display())]
    Shape { path: PathBuf, reason: String },
    #[error("invalid {agent} {event} hook payload: {reason}")]
    Payload {
        agent: &'static str,
        event: String,
        reason: String,
    },
}

/// Write/merge this agent's hook config under `workspace` so each hook runs
/// `<rewind> hook <agent> <EVENT>`. The user's own hooks and settings are kept
/// (positions included); installing twice leaves one entry per event; a file
/// that does not parse is an error and is not overwritten. Every file is opened beneath
/// `workspace`: a symlink that leads out of it is refused ([`Error::Outside`]).
/// Returns the files created or modified (empty when already up to date).
pub fn install(agent: Agent, workspace: &Path, rewind: &str) -> Result<Vec<PathBuf>, Error> {
    match agent {
        Agent::Claude => claude::install(workspace, rewind, false),
        Agent::Codex => codex::install(workspace, rewind),
        Agent::Gemini => gemini::install(workspace, rewind),
        Agent::Cursor => cursor::install(workspace, rewind),
        Agent::Opencode => opencode::install(workspace, rewind),
    }
}

/// The agent's local settings file (beside the project one, not meant to be committed), where
/// it has one.
pub fn local_settings(agent: Agent) -> Option<&'static str> {
    match agent {
        Agent::Claude => Some(".claude/settings.local.json"),
        Agent::Codex | Agent::Gemini | Agent::Cursor | Agent::Opencode => None,
    }
}

/// Like [`install`], into the agent's local settings ([`local_settings`]); `Ok(None)` when the
/// agent has none.
pub fn install_local(
    agent: Agent,
    workspace: &Path,
    rewind: &str,
) -> Result<Option<Vec<PathBuf>>, Error> {
    match agent {
        Agent::Claude => claude::install(workspace, rewind, true).map(Some),
        Agent::Codex | Agent::Gemini | Agent::Cursor | Agent::Opencode => Ok(None),
    }
}

/// Remove only rewind's entries (recognised by a command `<…rewind…> hook <agent> …`,
/// any rewind path). Keys, files and agent directories that end up empty are removed.
/// Returns the files modified or deleted.
pub fn uninstall(agent: Agent, workspace: &Path) -> Result<Vec<PathBuf>, Error> {
    match agent {
        Agent::Claude => claude::uninstall(workspace),
        Agent::Codex => codex::uninstall(workspace),
        Agent::Gemini => gemini::uninstall(workspace),
        Agent::Cursor => cursor::uninstall(workspace),
        Agent::Opencode => opencode::uninstall(workspace),
    }
}

/// Parse a hook payload; `event` is the name our config passed on the command line.
/// Unknown events give `Ok(HookEvent::Ignored)`; payloads that are not a JSON
/// object, or lack a required field, give `Err`. Never panics.
pub fn parse(agent: Agent, event: &str, payload: &[u8]) -> Result<HookEvent, Error> {
    event_of(payload::Payload::parse(agent, event, payload)?)
}

/// Like [`parse`], reading the payload from `input`: one JSON value, and not a byte after it
/// (the agent may keep the pipe open), so this returns as soon as the value is complete.
pub fn read(agent: Agent, event: &str, input: impl std::io::Read) -> Result<HookEvent, Error> {
    event_of(payload::Payload::read(agent, event, input)?)
}

/// Like [`read`], with the transcript the payload names (`transcript_path`), if any.
pub fn read_with_transcript(
    agent: Agent,
    event: &str,
    input: impl std::io::Read,
) -> Result<(HookEvent, Option<String>), Error> {
    let p = payload::Payload::read(agent, event, input)?;
    let transcript = transcript::folder(agent).and_then(|_| p.opt(&["transcript_path"]));
    Ok((event_of(p)?, transcript))
}

/// The events of `agent` that rewind acts on (any other is ignored).
pub fn known_events(agent: Agent) -> Vec<&'static str> {
    let hooks = match agent {
        Agent::Claude => &claude::HOOKS,
        Agent::Codex => &codex::HOOKS,
        Agent::Gemini => &gemini::HOOKS,
        Agent::Cursor => &cursor::HOOKS,
        Agent::Opencode => &opencode::HOOKS,
    };
    hooks.events.iter().map(|(name, _)| *name).collect()
}

fn event_of(p: payload::Payload<'_>) -> Result<HookEvent, Error> {
    match p.agent {
        Agent::Claude => claude::parse(&p),
        Agent::Codex => codex::HOOKS.event(&p),
        Agent::Gemini => gemini::HOOKS.event(&p),
        Agent::Cursor => cursor::HOOKS.event(&p),
        Agent::Opencode => opencode::HOOKS.event(&p),
    }
}

/// What the hook must print on stdout for the agent to proceed normally
/// (`None`: print nothing). Always exit 0.
pub fn reply(agent: Agent, event: &str) -> Option<String> {
    match agent {
        Agent::Claude | Agent::Codex | Agent::Opencode => None,
        Agent::Gemini => Some("{}".to_string()),
        Agent::Cursor => Some(cursor::reply(event).to_string()),
    }
}

/// Every event name we install for this agent.
pub fn events(agent: Agent) -> &'static [&'static str] {
    match agent {
        Agent::Claude => claude::EVENTS,
        Agent::Codex => codex::EVENTS,
        Agent::Gemini => gemini::EVENTS,
        Agent::Cursor => cursor::EVENTS,
        Agent::Opencode => opencode::EVENTS,
    }
}

/// Does this agent have a session-start event we install? When `false` (or
/// when the agent version predates it) the first event seen for a session id
/// must register the session lazily.
pub fn has_session_start(agent: Agent) -> bool {
    match agent {
        Agent::Claude | Agent::Codex | Agent::Gemini | Agent::Cursor => true,
        // session.created is forwarded, but the plugin can load after the
        // first session was created and OpenCode v2 has no hook for it.
        Agent::Opencode => false,
    }
}
