//! The hostile pass's findings (issues 21 and 25): each test is the finding's reproduction,
//! through the real binary, the real mount and real programs, and fails without its fix.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Workspace, ok, rw, rw_ok, sync};

/// A shell script in `dir` with no REWIND_SESSION/REWIND_AGENT inherited from the test runner.
fn bash(dir: &Path, script: &str) -> Output {
    Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .output()
        .unwrap()
}

/// The session and agent `log --json` gives the last change of `path`.
fn attribution(ws: &Workspace, path: &str) -> (String, String) {
    let out = rw_ok(ws, &["log", path, "--json", "-n", "1"]);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    (
        v["session"].as_str().unwrap().to_string(),
        v["agent"].as_str().unwrap().to_string(),
    )
}

/// F3: a process that wrote and then exec'd a program with its own REWIND_SESSION/REWIND_AGENT
/// (`exec env REWIND_SESSION=Y tool`, or the last command of `bash -c`) is attributed by the new
/// program's environment, not the one cached for its pid.
#[test]
fn an_exec_is_attributed_by_the_new_programs_environment() {
    let mut ws = Workspace::new();
    ws.mount();
    // The sleep keeps the exec out of the few milliseconds in which a pid's answer is reused
    // without reading /proc (a burst of changes by one process): what is checked is the cache.
    let out = bash(
        &ws.path(),
        "echo a > x; sleep 0.2; exec env REWIND_SESSION=Y REWIND_AGENT=ag \
         python3 -c 'open(\"y\", \"w\").write(\"y\")'",
    );
    ok(out);
    sync(&ws);
    let (x_session, x_agent) = attribution(&ws, "x");
    assert_ne!(x_session, "Y");
    assert_eq!(x_agent, "unknown");
    assert_eq!(
        attribution(&ws, "y"),
        ("Y".to_string(), "ag".to_string()),
        "{}",
        rw_ok(&ws, &["log"])
    );
    let plan = rw(&ws, &["rollback", "--session", "Y", "--dry-run"]);
    assert!(ok(plan).contains('y'));
}
