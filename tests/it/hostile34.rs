//! Round 34: what a rollback's preview says against what its run does, on 7aaf953. Each test
//! failed before the fix named in its comment.

use std::fs;
use std::os::unix::fs::MetadataExt;

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

/// A rollback to a point takes in the edits still in progress since: a file held open for
/// writing, and a new file being written in a new folder, are skipped as held open, the same
/// in the dry run and the run; with `--force`, what they wrote so far is recorded first (the
/// new file's create included), and they are put back as they were at the point.
// Failed before a selection took in open edits (`rollback::open_writes_selected`): the
// rollback left `f` as the writer had made it, even forced, saying nothing; the dry run said
// `remove d` where the run skipped it; and the forced run removed `d/live.log` with no
// history of it at all.
#[test]
fn a_rollback_to_a_point_takes_in_the_edits_in_progress_since() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    fs::write(p("f"), "v1\n").unwrap();
    fs::write(p("g"), "g1\n").unwrap();
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "c1"]);
    let mut f = fs::OpenOptions::new().append(true).open(p("f")).unwrap();
    std::io::Write::write_all(&mut f, b"v2\n").unwrap();
    fs::write(p("g"), "g2\n").unwrap();
    fs::create_dir(p("d")).unwrap();
    let mut live = fs::File::create(p("d/live.log")).unwrap();
    std::io::Write::write_all(&mut live, b"x\n").unwrap();
    sync(&ws);
    let args = ["rollback", "--to", "c1"];
    let lines = |o: &std::process::Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter(|l| !l.starts_with("dry run:") && !l.starts_with("rollback-"))
            .map(String::from)
            .collect()
    };
    let dry = rw(&ws, &[&args[..], &["--dry-run"]].concat());
    let run = rw(&ws, &args);
    assert_eq!(lines(&dry), lines(&run), "{}", stdout(&run));
    assert_eq!(run.status.code(), Some(1), "{}", stdout(&run));
    for held in [
        "skip     f: held open",
        "skip     d/live.log: held open",
        "skip     d: ",
    ] {
        assert!(
            lines(&run).iter().any(|l| l.starts_with(held)),
            "{held}: {}",
            stdout(&run)
        );
    }
    assert_eq!(fs::read_to_string(p("f")).unwrap(), "v1\nv2\n");
    assert_eq!(fs::read_to_string(p("g")).unwrap(), "g1\n");

    let forced = [&args[..], &["--force"]].concat();
    let dry = rw(&ws, &[&forced[..], &["--dry-run"]].concat());
    let run = rw(&ws, &forced);
    assert_eq!(lines(&dry), lines(&run), "{}", stdout(&run));
    assert_eq!(run.status.code(), Some(0), "{}", stdout(&run));
    assert_eq!(fs::read_to_string(p("f")).unwrap(), "v1\n");
    assert!(!p("d").exists());
    drop((f, live));
    sync(&ws);
    let all = crate::record::log(&ws);
    let kinds = |path: &str| -> Vec<String> {
        all.iter()
            .filter(|c| c["path"] == path)
            .map(|c| c["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds("d/live.log"), ["create", "restore"], "{all:?}");
    assert_eq!(kinds("f"), ["create", "modify", "restore"], "{all:?}");
    ws.unmount();
}

/// A FIFO, a socket and a device of the past are shown as what they were: their type (and a
/// device's number) in `.rewind/at/`, and their mode in `rewind show`.
// Failed before the past view and `show` knew special files (`tree::Kind::Special`,
// `diff_mode`): each showed as an empty regular file (`new file mode 100644`).
#[test]
fn special_files_of_the_past_show_as_what_they_were() {
    use std::os::unix::fs::FileTypeExt;
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("a"), "a\n").unwrap();
    crate::common::sh(
        &ws.path(),
        "mkfifo p && mknod cdev c 1 3 && python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')\"",
    );
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "c1"]);
    let fifo = crate::record::log(&ws)
        .iter()
        .find(|c| c["path"] == "p")
        .and_then(|c| c["id"].as_u64())
        .unwrap();
    crate::common::sh(&ws.path(), "rm p cdev sock");
    sync(&ws);
    let at = ws.path().join(".rewind/at/c1");
    let kind = |name: &str| fs::symlink_metadata(at.join(name)).unwrap().file_type();
    assert!(kind("p").is_fifo());
    assert!(kind("sock").is_socket());
    assert!(kind("cdev").is_char_device());
    let dev = fs::symlink_metadata(at.join("cdev")).unwrap();
    assert_eq!(
        (
            libc::major(dev.rdev() as libc::dev_t),
            libc::minor(dev.rdev() as libc::dev_t)
        ),
        (1, 3)
    );
    let show = rw_ok(&ws, &["show", &fifo.to_string()]);
    assert!(show.contains("new file mode 010644"), "{show}");
    ws.unmount();
}

/// `rewind hook` with an agent or event it does not know says so and exits 0: a hook never
/// fails the agent's action (to Claude Code, exit status 2 means "block it").
// Failed before `main` let a hook's bad arguments through (`refused`): clap exited 2.
#[test]
fn a_hook_with_arguments_it_does_not_know_exits_zero() {
    let ws = Workspace::new();
    for args in [&["hook", "nosuchagent", "Stop"][..], &["hook", "claude"]] {
        let out = ws.rewind(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{args:?}: it says why");
    }
    let out = ws.rewind(&["rollback", "--nonsense"]);
    assert_eq!(out.status.code(), Some(2), "other commands still refuse");
}

/// A hook payload longer than a hook reads (a huge prompt) is said to be cut off, not to be
/// something that is not JSON.
// Failed before `Payload::read` told an early end from bad JSON: it said `not JSON: EOF while
// parsing a string at line 1 column 4194304` of a valid payload.
#[test]
fn a_hook_payload_too_long_to_read_is_said_to_be_cut_off() {
    use std::io::Write;
    let mut ws = Workspace::new();
    ws.mount();
    let mut payload = br#"{"session_id": "s", "prompt": ""#.to_vec();
    payload.extend(std::iter::repeat_n(b'a', 5 << 20));
    payload.extend_from_slice(br#""}"#);
    let mut child = ws
        .command(&["-C"])
        .arg(ws.path())
        .args(["hook", "claude", "UserPromptSubmit"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&payload);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("longer than the 4 MiB"), "{err}");
    ws.unmount();
}

/// Undoing an edit of a file whose folder was renamed since says that the file moved, and
/// where to, not that something outside the history changed it.
// Failed before the skip asked where the file went (`View::place_now` in `conflict`): it said
// `changed since, outside the history`, of a rename the history holds.
#[test]
fn undo_of_an_edit_in_a_folder_renamed_since_says_where_it_went() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::create_dir(ws.path().join("d")).unwrap();
    fs::write(ws.path().join("d/f"), "x\n").unwrap();
    sync(&ws);
    fs::write(ws.path().join("d/f"), "y\n").unwrap();
    sync(&ws);
    let edit = crate::record::log(&ws).last().unwrap()["id"].to_string();
    fs::rename(ws.path().join("d"), ws.path().join("e")).unwrap();
    sync(&ws);
    let out = rw(&ws, &["undo", &edit, "--dry-run"]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("skip     d/f: moved since to e/f"), "{said}");
    ws.unmount();
}

/// A session rolled back in part (its last change undone) and then whole puts the file back
/// without `--force`: the only change since is the first rollback's, which left the file as
/// the session had it at one of its steps.
// Failed before such a change counted as no one's work in the way (`conflict`): the file
// was skipped as `changed later by change N (rewind@rollback-1); use --force`.
#[test]
fn a_session_rolled_back_in_part_then_whole_needs_no_force() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "A\n").unwrap();
    sync(&ws);
    for v in ["B", "C"] {
        crate::common::sh(
            &ws.path(),
            &format!("REWIND_SESSION=s REWIND_AGENT=claude sh -c 'echo {v} > f'"),
        );
        sync(&ws);
    }
    let last = crate::record::log(&ws).last().unwrap()["id"].to_string();
    rw_ok(&ws, &["undo", &last]);
    assert_eq!(fs::read_to_string(ws.path().join("f")).unwrap(), "B\n");
    let out = rw(&ws, &["rollback", "--session", "s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(fs::read_to_string(ws.path().join("f")).unwrap(), "A\n");
    // Undoing the first rollback now would take back the second's work on `f`: skipped.
    let out = rw(&ws, &["rollback", "--session", "rollback-1", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("skip     f: changed later"),
        "{}",
        stdout(&out)
    );
    ws.unmount();
}

/// A file open for writing that the selection changed and left as it was, and a folder whose
/// file someone else deleted since: the dry run and the run say the same of both, and the
/// empty folder is removed.
// Failed before a file with an open writer was always taken as being written (`plan`: its
// `now` from `Writer::now`): the dry run, which reads it as recorded, kept it and said
// nothing, and the run skipped it as held open. And before `keep_tree_whole` counted only
// files being written among the skipped paths below a folder: the deleted file, skipped,
// kept its empty folder.
#[test]
fn files_being_written_and_folders_emptied_since_plan_alike_in_dry_run_and_run() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    fs::write(p("f"), "A\n").unwrap();
    sync(&ws);
    rw_ok(&ws, &["checkpoint", "c1"]);
    fs::write(p("f"), "B\n").unwrap();
    sync(&ws);
    fs::write(p("f"), "A\n").unwrap();
    crate::common::sh(
        &ws.path(),
        "REWIND_SESSION=s REWIND_AGENT=claude sh -c 'mkdir d && echo x > d/f'",
    );
    sync(&ws);
    fs::remove_file(p("d/f")).unwrap();
    sync(&ws);
    let mut writer = fs::OpenOptions::new().append(true).open(p("f")).unwrap();
    std::io::Write::write_all(&mut writer, b"more\n").unwrap();
    let steps = |o: &std::process::Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter(|l| !l.starts_with("dry run:") && !l.starts_with("rollback-"))
            .map(String::from)
            .collect()
    };
    let args = ["rollback", "--file", "f", "--to", "c1"];
    let dry = rw(&ws, &[&args[..], &["--dry-run"]].concat());
    let run = rw(&ws, &args);
    assert_eq!(steps(&dry), steps(&run), "{}", stdout(&run));
    assert!(
        steps(&run)
            .iter()
            .any(|l| l.starts_with("skip     f: held open")),
        "{}",
        stdout(&run)
    );
    let dry = rw(&ws, &["rollback", "--session", "s", "--dry-run"]);
    let run = rw(&ws, &["rollback", "--session", "s"]);
    assert_eq!(steps(&dry), steps(&run), "{}", stdout(&run));
    assert!(!p("d").exists(), "{}", stdout(&run));
    drop(writer);
    ws.unmount();
}
