//! The `rewind` binary: parse arguments, run the command, map failure to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match rewind::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refused(e),
    };
    match rewind::cli::run(cli) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("rewind: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Arguments clap refused: its message and status 2, except for `rewind hook`, which never
/// fails the agent's action (to Claude Code, status 2 means "block it"): a hook naming an
/// agent or event this rewind does not know says so on stderr and exits 0.
fn refused(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let hook = std::env::args_os().nth(1).is_some_and(|a| a == "hook");
    if hook && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    e.exit()
}
