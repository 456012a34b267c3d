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

/// An unmounted rollback whose dry run refuses (a file changed while the workspace was not
/// mounted) refuses too, with the same words, and neither mounts nor changes anything.
// Failed before the run asked its dry run first (`cli/history.rs` `preview_here`): it
// mounted the workspace, which recorded the outside edit, and rolled it back, exit 0, where
// the dry run had said `f changed while the workspace was not mounted`.
#[test]
fn an_unmounted_rollback_refuses_as_its_dry_run_does() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "v1\n").unwrap();
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "c1"]);
    fs::write(ws.path().join("f"), "v2\n").unwrap();
    sync(&ws);
    ws.unmount();
    fs::write(ws.path().join("f"), "outside\n").unwrap();
    let dry = rw(&ws, &["rollback", "--to", "c1", "--dry-run"]);
    let run = rw(&ws, &["rollback", "--to", "c1"]);
    assert!(
        stderr(&dry).contains("changed while the workspace was not mounted"),
        "{}",
        stderr(&dry)
    );
    assert_eq!(
        (run.status.code(), stderr(&run)),
        (dry.status.code(), stderr(&dry))
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("f")).unwrap(),
        "outside\n"
    );
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(ws.path().to_str().unwrap()),
        "not mounted for the run"
    );
}
