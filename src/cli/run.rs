//! `rewind run`.

use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{CliResult, Failure};
use crate::command::RunArgs;

pub fn run(args: &RunArgs) -> CliResult {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    // Names were validated by the parser.
    if let Some(s) = &args.session {
        cmd.env("REWIND_SESSION", s.as_str());
    }
    if let Some(a) = &args.agent {
        cmd.env("REWIND_AGENT", a.as_str());
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
