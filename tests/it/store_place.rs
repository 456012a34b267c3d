//! Where the store lives and who can read it (issue 25, items 2, 5 and 9): never inside the
//! workspace, also through a symlink; private to its owner whatever the umask; and reading the
//! history changes nothing in it.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{REWIND, Workspace, is_mounted, rw_ok, sh, stderr, wait_for};

const NOBODY: u32 = 65534;

/// `rewind mount WS --store STORE` under umask 022, killed (and the test failed) if it takes
/// more than a minute.
fn mount_with_store(ws: &Workspace, store: &Path) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg("umask 022; exec \"$@\"")
        .arg("bash")
        .arg(REWIND)
        .arg("mount")
        .arg(ws.path())
        .arg("--store")
        .arg(store)
        .env("XDG_DATA_HOME", ws.path().parent().unwrap().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("rewind mount --store {} hung", store.display());
}

/// A store that leads into the workspace is refused, whichever way it gets there: a symlink
/// to a folder inside (the daemon would write to its own mount and wait on itself for good), a
/// symlink to a folder inside that does not exist yet, a symlinked folder on the way. The
/// refusal names both paths, and nothing is mounted.
#[test]
fn a_store_reached_through_a_symlink_into_the_workspace_is_refused() {
    let mut ws = Workspace::new();
    let top = ws.path().parent().unwrap().to_path_buf();
    fs::create_dir(ws.path().join("inside")).unwrap();
    symlink(ws.path().join("inside"), top.join("link")).unwrap();
    symlink(ws.path().join("not-yet"), top.join("dangling")).unwrap();
    symlink(ws.path(), top.join("ws-link")).unwrap();
    let cases: Vec<PathBuf> = vec![
        top.join("link"),
        top.join("link/deeper"),
        top.join("dangling"),
        top.join("ws-link/store"),
        ws.path().join("plainly-inside"),
    ];
    for store in &cases {
        let out = mount_with_store(&ws, store);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", store.display());
        assert!(
            err.contains("must not be inside the workspace")
                && err.contains(&store.display().to_string())
                && err.contains(&ws.path().display().to_string()),
            "{}: {err}",
            store.display()
        );
        assert!(!is_mounted(&ws.path()), "{}", store.display());
    }
    assert!(!ws.path().join("not-yet").exists());
    // A symlink that leads outside is fine, and the mount works through it.
    fs::create_dir(top.join("elsewhere")).unwrap();
    symlink(top.join("elsewhere"), top.join("good-link")).unwrap();
    let out = mount_with_store(&ws, &top.join("good-link"));
    assert!(out.status.success(), "{}", stderr(&out));
    ws.mark_mounted();
    sh(&ws.path(), "echo hello > a.txt");
    // The file's last RELEASE reaches the daemon after the shell's close returned: under load
    // the create may come after this read. Wait for it (bounded).
    assert!(
        wait_for(10, || rw_ok(&ws, &["log"]).contains("a.txt")),
        "{}",
        rw_ok(&ws, &["log"])
    );
    assert!(top.join("elsewhere/CURRENT").exists());
}

/// A store that holds the workspace (an ancestor of it, directly or through a symlink) is
/// refused like one inside it, and its folder is left as it was.
#[test]
fn a_store_that_holds_the_workspace_is_refused() {
    let ws = Workspace::new();
    let top = ws.path().parent().unwrap().to_path_buf();
    symlink(&top, top.join("plain/up")).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let before = mode(&top);
    for store in [top.clone(), top.join("plain/up")] {
        let out = mount_with_store(&ws, &store);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", store.display());
        assert!(
            err.contains("must not hold the workspace")
                && err.contains(&ws.path().display().to_string()),
            "{}: {err}",
            store.display()
        );
        assert!(!is_mounted(&ws.path()), "{}", store.display());
    }
    assert_eq!(mode(&top), before);
    assert!(!top.join("CURRENT").exists());
}

/// Every file and folder under `dir` (itself included), with its mode.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = vec![(
        dir.to_path_buf(),
        fs::symlink_metadata(dir).unwrap().permissions().mode(),
    )];
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            out.extend(modes(&entry.path()));
        } else {
            out.push((entry.path(), meta.permissions().mode()));
        }
    }
    out
}

#[track_caller]
fn assert_private(dir: &Path) {
    let all = modes(dir);
    let names: Vec<String> = all
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for (path, mode) in &all {
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(
            mode & 0o7777,
            want,
            "{} is {:o} (store: {names:?})",
            path.display(),
            mode & 0o7777
        );
    }
}

/// Mounted from a shell with umask 022 into an existing folder others could enter, the store
/// comes out private: the folder 0700 and every file 0600 (write-ahead log, tables, manifest,
/// RocksDB's own log and options, the lock, rewind.toml, the daemon's log), also the files made
/// later (after writes, a remount, a gc and a checkpoint on the unmounted store). The user
/// `nobody` cannot read any of it, though the content of a 0600 `.env` is in there.
#[test]
fn the_store_is_private_whatever_the_umask() {
    let mut ws = Workspace::new();
    let top = ws.path().parent().unwrap().to_path_buf();
    // Other users may reach everything around the store; only the store keeps them out.
    fs::set_permissions(&top, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(ws.store(), fs::Permissions::from_mode(0o755)).unwrap();
    let out = mount_with_store(&ws, &ws.store());
    assert!(out.status.success(), "{}", stderr(&out));
    ws.mark_mounted();
    sh(
        &ws.path(),
        "umask 077; echo 'API_KEY=secret-6f1d2a' > .env; echo 'API_KEY=secret-77aa01' > .env
         umask 022; for i in $(seq 1 50); do head -c 20000 /dev/urandom > blob$i; done
         mkdir -p sub; echo x > sub/y; rm blob1",
    );
    rw_ok(&ws, &["sync"]);
    assert_private(&ws.store());
    ws.unmount();
    // Unmounted commands that write the store, from a shell with umask 022.
    for args in [["checkpoint", "c1"], ["gc", "--keep=1s"]] {
        let out = Command::new("bash")
            .arg("-c")
            .arg("umask 022; exec \"$@\"")
            .arg("bash")
            .arg(REWIND)
            .args(args)
            .current_dir(ws.path())
            .env("XDG_DATA_HOME", top.join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let out = mount_with_store(&ws, &ws.store());
    assert!(out.status.success(), "{}", stderr(&out));
    ws.mark_mounted();
    sh(&ws.path(), "echo more >> .env");
    rw_ok(&ws, &["sync"]);
    let names: Vec<String> = fs::read_dir(ws.store())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in [
        "CURRENT",
        "LOCK",
        "LOG",
        "IDENTITY",
        "rewind.toml",
        "daemon.log",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    for prefix in ["MANIFEST-", "OPTIONS-"] {
        assert!(
            names.iter().any(|n| n.starts_with(prefix)),
            "{prefix} in {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.ends_with(".log") && n != "daemon.log")
    );
    assert!(names.iter().any(|n| n.ends_with(".sst")), "{names:?}");
    assert_private(&ws.store());
    // The content is in the store, and another user reads none of it.
    let store_bytes: Vec<u8> = fs::read_dir(ws.store())
        .unwrap()
        .flat_map(|e| fs::read(e.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(
        store_bytes
            .windows(b"secret-6f1d2a".len())
            .any(|w| w == b"secret-6f1d2a"),
        "the .env's first content is stored"
    );
    let store = ws.store().display().to_string();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .args([
            "--",
            "bash",
            "-c",
            "ls \"$1\" || cat \"$1\"/*",
            "bash",
            &store,
        ])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(!out.status.success(), "nobody read the store");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
}

/// A store folder that others could read from is refused, with what to do about it; once
/// closed to them, it mounts. A folder others could enter but nothing in it is readable by
/// them (say, only `rewind.toml` is, which holds settings) is simply closed.
#[test]
fn a_store_others_could_read_is_refused() {
    let ws = Workspace::new();
    let store = ws.store();
    fs::set_permissions(&store, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(store.join("rewind.toml"), "").unwrap();
    fs::set_permissions(store.join("rewind.toml"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(store.join("000004.log"), "history").unwrap();
    fs::set_permissions(store.join("000004.log"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = mount_with_store(&ws, &store);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("other users can read it")
            && err.contains("000004.log")
            && err.contains("chmod -R go="),
        "{err}"
    );
    assert!(!is_mounted(&ws.path()));
    // Nothing was changed or added.
    assert_eq!(
        fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(fs::read_dir(&store).unwrap().count(), 2);

    // Only the settings readable: closed, and mounted.
    fs::remove_file(store.join("000004.log")).unwrap();
    let mut ws = ws;
    let out = mount_with_store(&ws, &store);
    assert!(out.status.success(), "{}", stderr(&out));
    ws.mark_mounted();
    assert_private(&store);
}

/// Reading the history while files are saved does not change what is recorded: 300 `sed -i`
/// (each a temporary file renamed over the target) beside loops of `rewind status`,
/// `rewind log` and reads of `.rewind/log` are 300 modifies of the file, and no temporary
/// name is in the history. (Every read used to record the held-back temporary file early, as
/// a create and a rename.) What was just done still shows in a read at once.
#[test]
fn reading_the_history_never_splits_a_save() {
    let mut ws = Workspace::new();
    ws.mount();
    sh(&ws.path(), "echo 0 > f.txt");
    rw_ok(&ws, &["sync"]);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = [vec!["status"], vec!["log", "-n", "3"], vec!["cat", "f.txt"]]
        .into_iter()
        .map(|args| {
            let stop = stop.clone();
            let mut cmd = ws.command(&args);
            cmd.current_dir(ws.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let _ = cmd.status();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let control = ws.path().join(".rewind/log");
    let stop2 = stop.clone();
    let file_reader = std::thread::spawn(move || {
        let mut n = 0;
        while !stop2.load(Ordering::Relaxed) {
            let _ = fs::read(&control);
            n += 1;
        }
        n
    });
    sh(
        &ws.path(),
        "for i in $(seq 1 300); do sed -i \"s/.*/$i/\" f.txt; done",
    );
    stop.store(true, Ordering::Relaxed);
    let reads: Vec<u32> = readers.into_iter().map(|t| t.join().unwrap()).collect();
    let file_reads = file_reader.join().unwrap();
    assert!(
        reads.iter().all(|&n| n >= 3) && file_reads >= 3,
        "the readers ran: {reads:?} {file_reads}"
    );
    rw_ok(&ws, &["sync"]);
    let log = rw_ok(&ws, &["log", "--json"]);
    let changes: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let odd: Vec<String> = changes
        .iter()
        .filter(|c| c["path"] != "f.txt" || c["kind"] != "modify")
        .filter(|c| !(c["path"] == "f.txt" && c["kind"] == "create"))
        .map(|c| format!("{} {} <- {}", c["kind"], c["path"], c["from"]))
        .collect();
    assert!(odd.is_empty(), "besides modifies of f.txt: {odd:?}");
    let modifies = changes.iter().filter(|c| c["kind"] == "modify").count();
    assert_eq!(modifies, 300, "modifies of f.txt");
    let names: Vec<String> = changes
        .iter()
        .flat_map(|c| [c["path"].to_string(), c["from"].to_string()])
        .filter(|n| n.contains("sed"))
        .collect();
    assert!(names.is_empty(), "temporary names: {names:?}");

    // What was just done shows without an explicit sync (waiting, bounded, for the new file's
    // last RELEASE, which the kernel sends after the shell's close has returned).
    sh(&ws.path(), "echo new > new.txt; rm f.txt");
    let mut log = String::new();
    wait_for(10, || {
        log = rw_ok(&ws, &["log", "-n", "2"]);
        log.contains("new.txt") && log.contains("f.txt")
    });
    assert!(log.contains("new.txt") && log.contains("f.txt"), "{log}");
    assert_eq!(rw_ok(&ws, &["cat", "new.txt"]), "new\n");
}

/// A command run with another data folder than the mount's (`sudo rewind ...`, another
/// `XDG_DATA_HOME`) reads the store the daemon records into, not the one its own registration
/// names. Here that registration names the store an earlier mount of the same workspace left:
/// `status` named it and measured it on disk, and the commands that read beside the daemon
/// (`export`; a read whose words cannot go through `.rewind/ctl`) read its old history, exit 0.
/// `log` and `cat --at` ask the daemon.
#[test]
fn commands_read_the_store_the_daemon_records_into_whatever_their_registration_says() {
    let mut ws = Workspace::new();
    let other = ws.path().parent().unwrap().join("other-data");
    let dir = ws.path();
    let with_other = |args: &[&str]| {
        // From inside the workspace, but for (un)mounting it.
        let cwd = match args[0] {
            "mount" | "unmount" => dir.parent().unwrap(),
            _ => &dir,
        };
        let out = Command::new(REWIND)
            .args(args)
            .current_dir(cwd)
            .env("XDG_DATA_HOME", &other)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    // An earlier mount under the other data folder, with its default store.
    with_other(&["mount", ws.path().to_str().unwrap()]);
    ws.mark_mounted();
    fs::write(ws.path().join("f"), "old\n").unwrap();
    with_other(&["sync"]);
    with_other(&["unmount", ws.path().to_str().unwrap()]);
    // Today's mount: this test's data folder and store.
    ws.mount();
    fs::write(ws.path().join("f"), "new\n").unwrap();
    fs::write(ws.path().join("g"), "g\n").unwrap();
    let last = rw_ok(&ws, &["log", "-n", "1", "--json"]);
    let last: serde_json::Value = serde_json::from_str(last.lines().next().unwrap()).unwrap();
    let id = last["id"].as_u64().unwrap().to_string();
    let log = with_other(&["log"]);
    assert!(log.contains(" g "), "the log of the old store:\n{log}");
    assert_eq!(with_other(&["cat", "f", "--at", &id]), "new\n");
    let status = with_other(&["status"]);
    assert!(
        status.contains(&format!("store: {}", ws.store().display())),
        "{status}"
    );
    ws.unmount();
}
