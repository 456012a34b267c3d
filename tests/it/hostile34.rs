//! Round 34: what a rollback's preview says against what its run does, on 7aaf953. Each test
//! failed before the fix named in its comment.

use std::fs;

use crate::common::{Workspace, rw, rw_ok, stderr, stdout, sync};

/// A rollback to a point where a file was recorded, when the ignore rules have come to leave
/// its path unrecorded and a build has made it again, says in its preview what its run does:
/// it leaves the unrecorded file alone, as a skip that names why.
// Failed before the plan asked whether something unrecorded is at the path (`View::now`):
// the dry run said `restore out/x`, and the run failed with `File exists: made since the
// rollback was planned`.
#[test]
fn a_rollback_over_a_file_the_ignore_rules_left_unrecorded_skips_it_in_preview_and_run() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    fs::create_dir(p("out")).unwrap();
    fs::write(p("out/x"), "recorded\n").unwrap();
    sync(&ws);
    // A checkpoint keeps `out`'s history from being taken back when `.gitignore` names it.
    rw_ok(&ws, &["checkpoint", "c1"]);
    fs::remove_file(p("out/x")).unwrap();
    fs::write(p(".gitignore"), "out/\n").unwrap();
    sync(&ws);
    fs::write(p("out/x"), "built\n").unwrap();
    sync(&ws);
    let args = ["rollback", "--file", "out/x", "--to", "c1"];
    let dry = rw(&ws, &[&args[..], &["--dry-run"]].concat());
    let run = rw(&ws, &args);
    let said = |o: &std::process::Output| format!("{}{}", stdout(o), stderr(o));
    let (dry_said, run_said) = (said(&dry), said(&run));
    assert_eq!(dry.status.code(), Some(1), "{dry_said}");
    assert_eq!(run.status.code(), Some(1), "{run_said}");
    for out in [&dry_said, &run_said] {
        assert!(
            out.contains("out/x") && out.contains("unrecorded") && !out.contains("failed"),
            "{out}"
        );
    }
    assert_eq!(fs::read_to_string(p("out/x")).unwrap(), "built\n");
    ws.unmount();
}
