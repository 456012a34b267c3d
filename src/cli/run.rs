//! `rewind run`.

use std::os::unix::process::CommandExt;
use std::process::Command;

use clap::Args;

use super::{CliResult, Failure};

/// Run a command with its changes (and its children's) attributed to a session and an agent.
///
/// Sets REWIND_SESSION and REWIND_AGENT for the command, which rewind reads from the
/// environment of whatever process makes a change.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The session (default: the one already set, or the mount's default).
    #[arg(long)]
    pub session: Option<String>,
    /// The agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(args: RunArgs) -> CliResult {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if let Some(s) = &args.session {
        crate::store::validate_name("session", s)?;
        cmd.env("REWIND_SESSION", s);
    }
    if let Some(a) = &args.agent {
        crate::store::validate_name("agent", a)?;
        cmd.env("REWIND_AGENT", a);
    }
    let err = cmd.exec();
    Err(Failure {
        code: if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
        message: format!("cannot run {}: {err}", args.command[0]),
    })
}
