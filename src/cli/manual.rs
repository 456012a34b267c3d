//! `rewind completions` and `rewind man`: generated from the clap definitions, so they never
//! disagree with the commands.

use std::process::ExitCode;

use clap::CommandFactory;

use super::{CliResult, Failure};
use crate::command::{Cli, CompletionsArgs, Shell};

pub fn completions(args: &CompletionsArgs) -> CliResult {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
        Shell::Elvish => clap_complete::Shell::Elvish,
        Shell::Powershell => clap_complete::Shell::PowerShell,
    };
    clap_complete::generate(shell, &mut Cli::command(), "rewind", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

pub fn man() -> CliResult {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Failure::failed(format!("cannot render the manual: {e}")))?;
    // Each subcommand gets its section in the same page.
    for sub in Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
    {
        let name = format!("rewind-{}", sub.get_name());
        let sub = sub.clone().name(name.leak() as &str);
        clap_mangen::Man::new(sub)
            .render(&mut out)
            .map_err(|e| Failure::failed(format!("cannot render the manual: {e}")))?;
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), &out);
    Ok(ExitCode::SUCCESS)
}
