//! Plumbing for agents and scripts: attributing a process tree to a session, and telling the
//! daemon where an agent's turns and tool calls begin and end (what `rewind hook` writes).
//! They run in the daemon only.

use clap::Subcommand;

use crate::history::Name;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Attribute a process and its children to session NAME: the writer of .rewind/ctl, the
    /// shell `rewind session start` runs in, or --pid.
    Start {
        #[arg(value_parser = |s: &str| Name::parse("session", s))]
        name: Name,
        #[arg(long, value_parser = |s: &str| Name::parse("agent", s))]
        agent: Option<Name>,
        /// The process to attribute (default: the one that wrote the command).
        #[arg(long)]
        pid: Option<u32>,
        /// The session belongs to this process tree (an agent's session id, as `rewind hook`
        /// registers it): while it runs, another tree naming NAME is registered apart, as
        /// `NAME~pidPID`, and its turn and tool commands go to that session.
        #[arg(long)]
        exclusive: bool,
    },
    /// End the session started by this process or its nearest ancestor.
    End {
        #[arg(long)]
        pid: Option<u32>,
        /// Only this session (what `rewind hook` registered at the agent's session start): a
        /// registration of another session is left, and none is not an error.
        #[arg(long, value_parser = |s: &str| Name::parse("session", s))]
        session: Option<Name>,
        /// Only a registration of --pid itself (as `rewind hook` ends what its agent's session
        /// start registered): a process under the agent that never registered ends nothing.
        #[arg(long, requires = "session")]
        exclusive: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TurnCommand {
    /// A prompt was given: the session's next turn begins.
    Begin {
        #[arg(long)]
        session: String,
        #[arg(long)]
        agent: String,
        /// The prompt (its first line is kept).
        #[arg(long, default_value = "")]
        prompt: String,
        /// The agent's own id for the prompt.
        #[arg(long)]
        prompt_id: Option<String>,
        /// The agent's process (what `rewind hook` found above itself): only a claim of the
        /// session by it, or by a process between it and the writer, counts.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// The agent stopped: the session's open turn ends.
    End {
        #[arg(long)]
        session: String,
        /// The agent's transcript (a file in its own folder in the workspace owner's home),
        /// kept with the turn as its conversation.
        #[arg(long)]
        transcript: Option<std::path::PathBuf>,
        /// The agent's process (what `rewind hook` found above itself): only a claim of the
        /// session by it, or by a process between it and the writer, counts.
        #[arg(long)]
        pid: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// A tool call began: changes of the session carry it until it ends.
    Begin {
        #[arg(long)]
        session: String,
        name: String,
        #[arg(long)]
        id: Option<String>,
        /// The agent's process (what `rewind hook` found above itself): only a claim of the
        /// session by it, or by a process between it and the writer, counts.
        #[arg(long)]
        pid: Option<u32>,
    },
    End {
        #[arg(long)]
        session: String,
        name: String,
        #[arg(long)]
        id: Option<String>,
        /// The agent's process (what `rewind hook` found above itself): only a claim of the
        /// session by it, or by a process between it and the writer, counts.
        #[arg(long)]
        pid: Option<u32>,
    },
}
