//! `rewind agent install|uninstall AGENT`.

use std::path::Path;
use std::process::ExitCode;

use super::{CliResult, Failure};
use crate::agent::{self, Agent};
use crate::command::{AgentAction, AgentArgs, AgentName};

pub fn agent_of(name: AgentName) -> Agent {
    match name {
        AgentName::Claude => Agent::Claude,
        AgentName::Codex => Agent::Codex,
        AgentName::Gemini => Agent::Gemini,
        AgentName::Cursor => Agent::Cursor,
        AgentName::Opencode => Agent::Opencode,
    }
}

pub fn run(cwd: &Path, args: &AgentArgs) -> CliResult {
    // The workspace this folder is in, or the folder itself (hooks can be set up before the
    // first mount).
    let workspace = super::find_workspace(cwd).or_else(|_| {
        cwd.canonicalize()
            .map_err(|e| Failure::usage(format!("{}: {e}", cwd.display())))
    })?;
    let fail = |e: agent::Error| Failure::usage(e.to_string());
    match &args.action {
        AgentAction::Install { agent: name } => {
            let agent = agent_of(*name);
            let exe = std::env::current_exe()
                .and_then(|p| p.canonicalize())
                .map_err(|e| Failure::failed(format!("cannot find the rewind binary: {e}")))?;
            let exe = exe
                .to_str()
                .ok_or_else(|| Failure::usage("the rewind binary's path is not UTF-8"))?;
            let files = agent::install(agent, &workspace, exe).map_err(fail)?;
            if files.is_empty() {
                println!(
                    "{agent}: rewind's hooks are already set up in {}",
                    workspace.display()
                );
            }
            for f in &files {
                println!("{agent}: wrote {}", f.display());
            }
            if crate::fs::is_rewind_mount(&workspace) {
                println!(
                    "{agent}: each prompt now opens a turn; see `rewind turns`, and undo one with \
                     `rewind rollback --turn SESSION:N`"
                );
            } else {
                // The hooks talk to the daemon: until the workspace is mounted they record
                // nothing.
                eprintln!(
                    "warning: {} is not mounted, so nothing is recorded yet; once it is (`rewind \
                     mount {}`), each prompt opens a turn",
                    workspace.display(),
                    workspace.display()
                );
            }
            if agent == Agent::Codex {
                println!(
                    "codex: project hooks run once you trust them: open Codex here and approve \
                     rewind's hooks under /hooks"
                );
            }
        }
        AgentAction::Uninstall { agent: name } => {
            let agent = agent_of(*name);
            let files = agent::uninstall(agent, &workspace).map_err(fail)?;
            if files.is_empty() {
                println!("{agent}: no rewind hooks in {}", workspace.display());
            }
            for f in &files {
                // A configuration that held only rewind's hooks is deleted, not emptied.
                let done = if f.exists() { "updated" } else { "removed" };
                println!("{agent}: {done} {}", f.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
