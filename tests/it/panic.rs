//! The panic policy (docs/design.md, "Panics"): a panic while recording stops recording for
//! good. Operations that would be recorded fail with EIO, reads go on, the mount keeps
//! answering, `status` and the daemon log say why. Provoked with `REWIND_TEST_PANIC`, which
//! makes the recorder panic (holding one of its locks) while it records a create of that name.

use std::io::ErrorKind;

use crate::common::{Workspace, rw};

fn eio(what: &str, r: std::io::Result<impl std::fmt::Debug>) {
    match r {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
        Ok(v) => panic!("{what} went ahead after the panic: {v:?}"),
    }
}

#[test]
fn a_panic_while_recording_stops_recording_and_refuses_writes_with_eio() {
    let mut ws = Workspace::new();
    let dir = ws.path();
    std::fs::write(dir.join("kept.txt"), "before\n").unwrap();
    let out = ws
        .command(&["mount"])
        .arg(&dir)
        .arg("--store")
        .arg(ws.store())
        .env("REWIND_TEST_PANIC", "boom.txt")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ws.mark_mounted();

    // Recording works until the panic.
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    assert!(rw(&ws, &["sync"]).status.success());
    let status = String::from_utf8_lossy(&rw(&ws, &["status"]).stdout).into_owned();
    assert!(!status.contains("NOT RECORDING"), "{status}");

    // The create that panics is answered EIO (not left hanging), and so is everything after
    // it that would have to be recorded.
    eio(
        "the create that panicked",
        std::fs::write(dir.join("boom.txt"), "x"),
    );
    eio("a new file", std::fs::write(dir.join("new.txt"), "n"));
    eio("a write", std::fs::write(dir.join("kept.txt"), "after\n"));
    eio("a delete", std::fs::remove_file(dir.join("a.txt")));
    eio(
        "a rename",
        std::fs::rename(dir.join("a.txt"), dir.join("b.txt")),
    );
    eio("a mkdir", std::fs::create_dir(dir.join("d")));

    // Reads go on, through the mount and from the history.
    assert_eq!(
        std::fs::read_to_string(dir.join("kept.txt")).unwrap(),
        "before\n"
    );
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "a\n");
    let log = rw(&ws, &["log"]);
    assert!(
        log.status.success(),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    assert!(String::from_utf8_lossy(&log.stdout).contains("a.txt"));
    assert_eq!(
        std::fs::metadata(dir.join("nothing-here"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    // `status` says recording stopped and why; the daemon log says where.
    let status = String::from_utf8_lossy(&rw(&ws, &["status"]).stdout).into_owned();
    assert!(
        status.contains("NOT RECORDING: stopped after a panic")
            && status
                .contains("REWIND_TEST_PANIC: provoked while recording the create of boom.txt"),
        "{status}"
    );
    let daemon_log = std::fs::read_to_string(ws.store().join("daemon.log")).unwrap();
    assert!(
        daemon_log.contains("panic in the")
            && daemon_log.contains("recording stopped")
            && daemon_log.contains("src/history/recorder/episodes.rs"),
        "{daemon_log}"
    );
    // Checkpoints are writes too.
    let cp = rw(&ws, &["checkpoint", "after-panic"]);
    assert!(!cp.status.success());

    // The mount still unmounts cleanly.
    ws.unmount();
}
