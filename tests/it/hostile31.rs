//! Round 31: a rollback works on the directory underneath, outside the kernel's locks, so its
//! steps can land between what a request through the mount looks at and what it holds. What
//! hostile30's rollback race found, each made deterministic with `REWIND_TEST_SLOW_LOOKED` (the
//! request waits between taking the `stat` of its file and holding it) and a forced rollback
//! that changes the file's mode in that window.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::{Workspace, rw_ok};
use crate::hostile27::assert_chain_ends_in_the_present;
use crate::record::log;

/// `s` as "one" with mode 644 at the point; then chmodded to 600. `op` runs on another thread
/// through the mount, slowed between its look at `s` and its hold; a forced rollback to the
/// point gives `s` its mode 644 back meanwhile. The chain must hold: what `op` records begins
/// from the mode the rollback left.
fn rollback_in_the_window_of(what: &str, op: fn(&std::path::Path)) {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_LOOKED", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("s"), "one\n").unwrap();
    fs::write(dir.join("s.tmp"), "two\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::set_permissions(dir.join("s"), fs::Permissions::from_mode(0o600)).unwrap();
    rw_ok(&ws, &["sync"]);
    let at = dir.clone();
    let slow = std::thread::spawn(move || op(&at));
    std::thread::sleep(Duration::from_millis(400));
    rw_ok(&ws, &["rollback", "--to", &point, "--force"]);
    slow.join().unwrap();
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, what);
    ws.unmount();
}

/// FAILED before: the save recorded `s` as going from mode 600 (its look, before the
/// rollback's chmod) while the change before it, the rollback's, left 644.
#[test]
fn a_save_whose_target_a_rollback_chmods_before_it_holds_it_keeps_the_chain() {
    rollback_in_the_window_of("a save racing a rollback's chmod", |dir| {
        fs::rename(dir.join("s.tmp"), dir.join("s")).unwrap();
    });
}

/// FAILED before: the delete said `s` had mode 600 when it went.
#[test]
fn an_unlink_of_a_file_a_rollback_chmods_before_it_holds_it_keeps_the_chain() {
    rollback_in_the_window_of("an unlink racing a rollback's chmod", |dir| {
        fs::remove_file(dir.join("s")).unwrap();
    });
}

/// The other way round: the rollback rewrites `s` in place, slowed between its look at `s` and
/// its hold, and a process chmods `s` meanwhile.
///
/// FAILED before: the rollback's rewrite began from mode 644, looked at before the chmod to
/// 600 that was recorded in between, and its restore said so.
#[test]
fn a_rollback_rewriting_a_file_a_process_chmods_before_it_holds_it_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_LOOKED", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("s"), "one\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(dir.join("s"), "two\n").unwrap();
    rw_ok(&ws, &["sync"]);
    std::thread::scope(|scope| {
        let rollback = scope.spawn(|| rw_ok(&ws, &["rollback", "--to", &point, "--force"]));
        std::thread::sleep(Duration::from_millis(400));
        fs::set_permissions(dir.join("s"), fs::Permissions::from_mode(0o600)).unwrap();
        rollback.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a rollback's rewrite racing a chmod");
    assert_eq!(fs::read_to_string(dir.join("s")).unwrap(), "one\n");
    ws.unmount();
}

/// A rollback rewrites `s` in place (slowed once written, before its edit ends); a save puts
/// another file at `s` meanwhile, and a new file `n` is made.
///
/// FAILED before: the rollback closed its descriptor of the old `s` before its edit ended, so
/// the file, with no name left, was freed; ext4 gave its number to `n` at once, and `n`'s create
/// joined the rollback's edit as if it were the same file: it was never recorded (hostile30's
/// rollback race: a save's temporary file renamed, or removed by the rollback, with no create).
#[test]
fn a_new_file_made_while_a_rollback_ends_its_rewrite_of_a_file_saved_over_is_recorded() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RESTORE_END", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("s"), "one\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(dir.join("s"), "two\n").unwrap();
    rw_ok(&ws, &["sync"]);
    std::thread::scope(|scope| {
        let rollback = scope.spawn(|| rw_ok(&ws, &["rollback", "--to", &point, "--force"]));
        std::thread::sleep(Duration::from_millis(500));
        fs::write(dir.join("s.tmp"), "saved\n").unwrap();
        fs::rename(dir.join("s.tmp"), dir.join("s")).unwrap();
        for k in 0..4 {
            fs::write(dir.join(format!("n{k}")), "new\n").unwrap();
        }
        rollback.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "new files made while a rollback ends its rewrite");
    let changes = log(&ws);
    for k in 0..4 {
        let name = format!("n{k}");
        assert!(
            changes
                .iter()
                .any(|c| c["path"] == name.as_str() && c["kind"] == "create"),
            "{name} has no create: {changes:?}"
        );
    }
    ws.unmount();
}

/// A rollback removes `n` (made and deleted after the point) just as a process creates it
/// again: the file is made underneath, slowed (`REWIND_TEST_SLOW_MADE`) before the daemon
/// begins its edit.
///
/// FAILED before: the rollback's removal found a file the daemon knew nothing of yet (no
/// edit begun, nothing held back) and recorded the delete of a file no change had made; the
/// chain of `n` broke. It now waits for the create to be in place (`Core::making`).
#[test]
fn a_rollback_removing_a_name_a_process_is_creating_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_MADE", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("p"), "p\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(dir.join("n"), "made after the point\n").unwrap();
    rw_ok(&ws, &["sync"]);
    fs::remove_file(dir.join("n")).unwrap();
    rw_ok(&ws, &["sync"]);
    std::thread::scope(|scope| {
        let creator = scope.spawn(|| {
            use std::io::Write;
            let mut f = fs::File::create(dir.join("n")).unwrap();
            f.write_all(b"again\n").unwrap();
        });
        std::thread::sleep(Duration::from_millis(400));
        rw_ok(&ws, &["rollback", "--to", &point, "--force"]);
        creator.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a rollback's removal racing a create");
    ws.unmount();
}
