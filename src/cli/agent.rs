//! `rewind agent install|uninstall AGENT`.

use std::path::Path;
use std::process::ExitCode;

use super::{CliResult, Failure};
use crate::agent::{self, Agent};
use crate::command::{AgentAction, AgentArgs, AgentName};

/// What the hooks run: `rewind`, found on PATH by the agent's shell, so a configuration that
/// is committed works wherever the binary is installed.
const HOOK_COMMAND: &str = "rewind";

/// `rewind` must be on PATH for the hooks to find it: say so now, not by silence later.
fn check_on_path() -> Result<(), Failure> {
    let here = std::env::current_exe().and_then(|p| p.canonicalize()).ok();
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(HOOK_COMMAND))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    });
    let Some(found) = found else {
        return Err(Failure::usage(format!(
            "`rewind` is not on PATH, and the hooks run `rewind hook …` through the agent's \
             shell, which finds it there; put its folder on PATH (for example `ln -s {} \
             ~/.local/bin/rewind`), then install again",
            here.as_deref()
                .map_or("/path/to/rewind".into(), |p| p.display().to_string())
        )));
    };
    if let Some(here) = here
        && found.canonicalize().ok().as_ref() != Some(&here)
    {
        eprintln!(
            "note: the hooks will run {} (the first `rewind` on PATH), not {}",
            found.display(),
            here.display()
        );
    }
    Ok(())
}

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
        AgentAction::Install { agent: name, local } => {
            let agent = agent_of(*name);
            check_on_path()?;
            let files = if *local {
                agent::install_local(agent, &workspace, HOOK_COMMAND)
                    .map_err(fail)?
                    .ok_or_else(|| {
                        Failure::usage(format!(
                            "{agent} has no local settings file; `rewind agent install {agent}` \
                             writes its project configuration (keep it out of commits with \
                             .gitignore if you wish)"
                        ))
                    })?
            } else {
                agent::install(agent, &workspace, HOOK_COMMAND).map_err(fail)?
            };
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
