//! The `rewind` binary: parse arguments, run the command, map failure to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = rewind::cli::Cli::parse();
    match rewind::cli::run(cli) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("rewind: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
