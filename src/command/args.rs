//! The arguments of the verbs that run only in a shell (their `run` is in `cli/`).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::history::Name;

/// Mount rewind over DIR: from now on every change made in DIR is recorded first.
///
/// Returns once the mount answers (the daemon keeps running in the background); with
/// --foreground it stays attached and logs to stderr until unmounted or sent SIGTERM/SIGINT.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The project directory to mount over.
    pub dir: PathBuf,
    /// Where the history store lives (default: $XDG_DATA_HOME/rewind/<name>-<hash>).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Stay in the foreground and log to stderr.
    #[arg(long)]
    pub foreground: bool,
    /// The default session for changes made by processes with no other attribution.
    #[arg(long, value_name = "NAME")]
    pub session: Option<Name>,
    /// Let other users use the mount (normal permission checks apply).
    #[arg(long)]
    pub allow_other: bool,
    /// Remove history older than this in the background (e.g. 30d; overrides rewind.toml).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep stored content under this size in the background (e.g. 2G; overrides rewind.toml).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Serve file data through the daemon instead of FUSE passthrough (for comparison).
    #[arg(long, hide = true)]
    pub no_passthrough: bool,
    /// Record nothing (for measuring what recording costs).
    #[arg(long, hide = true)]
    pub no_record: bool,
}

/// Unmount a workspace. The directory is left exactly as it was last written.
#[derive(Debug, Args)]
pub struct UnmountArgs {
    /// The workspace (default: the one the current directory is in).
    pub dir: Option<PathBuf>,
    /// Detach even if files are still open (they keep working until closed).
    #[arg(long)]
    pub force: bool,
}

/// Run a command with its changes (and its children's) attributed to a session and an agent.
///
/// Sets REWIND_SESSION and REWIND_AGENT for the command, which rewind reads from the
/// environment of whatever process makes a change.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The session (default: the one already set, or the mount's default).
    #[arg(long)]
    pub session: Option<Name>,
    /// The agent.
    #[arg(long)]
    pub agent: Option<Name>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Write what a session (or agent, or everything since a point) did as commits on a new branch
/// of the workspace's git repository, one commit per change, without touching the working
/// tree, the index or HEAD. Push the branch to review an agent's work as a pull request.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["session", "agent", "turn", "since"])))]
pub struct ExportArgs {
    #[command(flatten)]
    pub select: super::select::SelectArgs,
    /// The branch to create (it must not exist).
    #[arg(long, value_name = "NAME")]
    pub branch: String,
    /// One commit per change, even where the changes carry agent turns (by default each
    /// turn is one commit, its prompt the message).
    #[arg(long)]
    pub per_change: bool,
    /// Add each turn's conversation (what the agent's transcript gained in it) to its commit
    /// message.
    #[arg(long, conflicts_with = "per_change")]
    pub with_conversation: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AgentName {
    Claude,
    Codex,
    Gemini,
    Cursor,
    Opencode,
}

/// Set an agent's hooks up for this workspace, so that its sessions, prompts and tool calls
/// are known to rewind (each prompt becomes a turn you can diff and roll back).
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub action: AgentAction,
}

#[derive(Debug, Subcommand)]
pub enum AgentAction {
    /// Add rewind's hooks to the agent's configuration in this workspace (merged with yours).
    /// The hooks run `rewind hook ...`, found on PATH, so the file does not depend on where the
    /// binary lives.
    Install {
        agent: AgentName,
        /// Write the agent's local settings instead, which are not meant to be committed
        /// (Claude Code: `.claude/settings.local.json`; the other agents have none).
        #[arg(long)]
        local: bool,
    },
    /// Remove rewind's hooks (and only them).
    Uninstall { agent: AgentName },
}

/// Run by an agent's hooks: read the hook's JSON payload on stdin and tell the daemon. Never
/// fails the agent's action: problems are logged and the exit status is 0.
#[derive(Debug, Args)]
pub struct HookArgs {
    pub agent: AgentName,
    pub event: String,
    /// Internal: the hook's own child, which sends the command lines on stdin (NUL-separated)
    /// to the daemon, so that a daemon that never answers holds it and not the hook.
    #[arg(long, hide = true)]
    pub exchange: bool,
}

/// Serve rewind over MCP on stdin/stdout: history, diffs, turns, checkpoints and rollback
/// (rollback previews unless asked to apply).
#[derive(Debug, Args)]
pub struct McpArgs {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// Print a completion script for a shell (e.g. `rewind completions bash >
/// ~/.local/share/bash-completion/completions/rewind`).
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: Shell,
}

/// Print the manual page (roff): `rewind man | man -l -`.
#[derive(Debug, Args)]
pub struct ManArgs {}

/// Say whether the workspace is mounted (and healthy), where its store is, and what it holds.
/// Outside any workspace, list every workspace rewind knows.
#[derive(Debug, Args)]
pub struct StatusArgs {}

/// Print each change as it happens (from `.rewind/events`), until interrupted.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// Serve the review page for this workspace on 127.0.0.1: the timeline of sessions, agent
/// turns and changes (live while mounted), their diffs, the tree at any point, and rollback
/// with its plan shown first. Prints the page's address, with its secret token, first.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// The port (default: a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Do not open the browser.
    #[arg(long)]
    pub no_open: bool,
}
