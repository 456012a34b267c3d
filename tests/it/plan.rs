//! One rollback plan: what the dry run prints is what the run does, path for path, and what
//! would stand in the way (a folder that still holds others' entries, a file another process
//! holds open for writing) is a skip in both, saying why and by whom.

use std::fs;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::common::{Workspace, python_command, rw, stdout, sync};

/// Run a shell script in the workspace as a process of `session`.
fn as_session(ws: &Workspace, session: &str, script: &str) {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(ws.path())
        .env("REWIND_SESSION", session)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

/// The per-path lines of a rollback's output (its last line is the summary).
pub fn plan_lines(out: &Output) -> Vec<String> {
    let text = stdout(out);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.last().is_some_and(|l| {
        l.starts_with("dry run: ") || l.contains(": restored ") || l.starts_with("nothing to")
    }) {
        lines.pop();
    }
    lines
}

#[test]
fn a_folder_that_still_holds_others_entries_is_skipped_in_the_dry_run_and_the_run() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    as_session(
        &ws,
        "s1",
        "mkdir -p src/extra && printf 'mod a;\\n' > src/extra/mod.rs && printf 'x\\n' > top.txt",
    );
    as_session(&ws, "s2", "printf 'mod b;\\n' >> src/extra/mod.rs");
    as_session(&ws, "s3", "printf 'theirs\\n' > src/extra/other.rs");

    let dry = rw(&ws, &["rollback", "--session", "s1", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{dry:?}");
    let text = stdout(&dry);
    // The file s2 changed later, and the folders that still hold it and s3's file, are skips;
    // only top.txt goes. Nothing plans to remove src/extra.
    assert!(
        text.contains("skip     src/extra/mod.rs: changed later by change"),
        "{text}"
    );
    assert!(
        text.contains(
            "skip     src/extra: still holds src/extra/mod.rs, src/extra/other.rs, which the \
             rollback leaves"
        ),
        "{text}"
    );
    assert!(
        text.contains("skip     src: still holds src/extra"),
        "{text}"
    );
    assert!(text.contains("remove   top.txt"), "{text}");
    assert!(!text.contains("remove   src"), "{text}");

    let run = rw(&ws, &["rollback", "--session", "s1"]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let report = stdout(&run);
    assert!(!report.contains("\nfailed "), "{report}");
    assert!(report.contains(", failed 0 "), "{report}");
    assert_eq!(plan_lines(&run), plan_lines(&dry), "{report}");
    assert!(!root.join("top.txt").exists());
    assert_eq!(
        fs::read_to_string(root.join("src/extra/mod.rs")).unwrap(),
        "mod a;\nmod b;\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("src/extra/other.rs")).unwrap(),
        "theirs\n"
    );

    // Once the others' files are gone, the folders go too.
    as_session(&ws, "s2", "rm src/extra/mod.rs src/extra/other.rs");
    let dry = rw(
        &ws,
        &["rollback", "--session", "s1", "--dry-run", "--force"],
    );
    let text = stdout(&dry);
    assert!(text.contains("remove   src/extra\n"), "{text}");
    assert!(text.contains("remove   src\n"), "{text}");
    let run = rw(&ws, &["rollback", "--session", "s1", "--force"]);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    assert!(!root.join("src").exists());
}

/// A writer of session `second` that appends `v2` to w.txt and then waits for a line on its
/// stdin before appending `v3` and closing.
fn open_writer(ws: &Workspace) -> std::process::Child {
    let mut child = python_command(
        &ws.path(),
        "import os, sys\n\
             f = os.open('w.txt', os.O_WRONLY | os.O_APPEND)\n\
             os.write(f, b'v2\\n')\n\
             print('open', flush=True)\n\
             sys.stdin.readline()\n\
             os.write(f, b'v3\\n')\n\
             os.close(f)\n",
    )
    .env("REWIND_SESSION", "second")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "open\n");
    child
}

fn finish(mut child: std::process::Child) {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_file_open_for_writing_is_skipped_with_its_writer_unless_forced() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    as_session(&ws, "first", "printf 'v1\\n' > w.txt");
    sync(&ws);
    let writer = open_writer(&ws);
    let pid = writer.id();

    // Not forced: skipped, with who holds it, in the dry run and the run alike.
    let dry = rw(&ws, &["rollback", "--session", "first", "--dry-run"]);
    let run = rw(&ws, &["rollback", "--session", "first"]);
    for out in [&dry, &run] {
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let text = stdout(out);
        assert!(
            text.contains(&format!(
                "skip     w.txt: held open for writing by process {pid} (python3) of session \
                 second; use --force"
            )),
            "{text}"
        );
    }
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    assert!(stdout(&run).contains("or skipped"), "{}", stdout(&run));
    // The writer's later write is not lost.
    finish(writer);
    assert_eq!(
        fs::read_to_string(root.join("w.txt")).unwrap(),
        "v1\nv2\nv3\n"
    );
    sync(&ws);
    let log = stdout(&rw(&ws, &["log", "w.txt", "--session", "second"]));
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[test]
fn a_forced_rollback_of_an_open_file_records_the_writer_first_and_keeps_its_later_writes() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    as_session(&ws, "first", "printf 'v1\\n' > w.txt");
    sync(&ws);
    as_session(&ws, "first", "printf 'v1 first edit\\n' > w.txt");
    sync(&ws);
    let writer = open_writer(&ws);
    let pid = writer.id();
    // Back to before first's edit (v1), in place: the writer goes on writing to the file.
    let last = stdout(&rw(
        &ws,
        &["log", "w.txt", "--session", "first", "-n", "1", "--json"],
    ));
    let id: String = last
        .split("\"id\":")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let dry = rw(&ws, &["undo", &id, "--dry-run", "--force"]);
    let run = rw(&ws, &["undo", &id, "--force"]);
    let note = format!("process {pid} (python3) of session second holds it open for writing");
    for out in [&dry, &run] {
        assert!(stdout(out).contains(&note), "{out:?}");
    }
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    let session = stdout(&run)
        .lines()
        .last()
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(fs::read_to_string(root.join("w.txt")).unwrap(), "v1\n");
    finish(writer);
    assert_eq!(fs::read_to_string(root.join("w.txt")).unwrap(), "v1\nv3\n");
    sync(&ws);
    // Three changes, each its own: the writer's v2, the rollback's restore, the writer's v3.
    let log = stdout(&rw(&ws, &["log", "w.txt", "--json"]));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 5, "{log}");
    let tail = &lines[2..];
    assert!(
        tail[0].contains("\"session\":\"second\"") && tail[0].contains("\"kind\":\"modify\""),
        "{log}"
    );
    assert!(
        tail[1].contains(&format!("\"session\":\"{session}\""))
            && tail[1].contains("\"kind\":\"restore\""),
        "{log}"
    );
    assert!(
        tail[2].contains("\"session\":\"second\"") && tail[2].contains("\"kind\":\"modify\""),
        "{log}"
    );
    assert_eq!(
        stdout(&rw(&ws, &["cat", "w.txt", "--at", &id])),
        "v1 first edit\n"
    );
}

#[test]
fn a_forced_removal_of_an_open_file_says_where_its_writer_writes() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    as_session(&ws, "first", "printf 'v1\\n' > w.txt");
    sync(&ws);
    let writer = open_writer(&ws);
    let pid = writer.id();
    let dry = rw(
        &ws,
        &["rollback", "--session", "first", "--dry-run", "--force"],
    );
    let run = rw(&ws, &["rollback", "--session", "first", "--force"]);
    for out in [&dry, &run] {
        let text = stdout(out);
        assert!(
            text.contains(&format!(
                "remove   w.txt [process {pid} (python3) of session second holds it open for \
                 writing: what it writes from now on goes to the removed file]"
            )),
            "{text}"
        );
    }
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    finish(writer);
    assert!(!root.join("w.txt").exists());
    // What it wrote before the rollback is its own change, and can be had back.
    sync(&ws);
    let log = stdout(&rw(&ws, &["log", "w.txt", "--session", "second", "--json"]));
    assert!(log.contains("\"kind\":\"modify\""), "{log}");
}

/// FIFOs and device nodes come back with their type, mode and device number (the daemon is
/// root here; a plain user's daemon skips device nodes, in the dry run already).
#[test]
fn special_files_are_restored_and_the_dry_run_says_so() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    as_session(
        &ws,
        "first",
        "mkdir d && mkfifo -m 0640 d/pipe && mknod -m 0600 d/null c 1 3 && printf 'x\\n' > d/file",
    );
    sync(&ws);
    let out = rw(&ws, &["checkpoint", "before"]);
    assert!(out.status.success(), "{out:?}");
    as_session(&ws, "second", "rm -r d");
    sync(&ws);
    let dry = rw(&ws, &["rollback", "--to", "before", "--dry-run"]);
    let run = rw(&ws, &["rollback", "--to", "before"]);
    for out in [&dry, &run] {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = stdout(out);
        assert!(text.contains("restore  d/pipe (fifo)"), "{text}");
        assert!(text.contains("restore  d/null (char)"), "{text}");
        assert!(text.contains("restore  d/file (file)"), "{text}");
    }
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    assert_eq!(fs::read_to_string(root.join("d/file")).unwrap(), "x\n");
    let pipe = fs::symlink_metadata(root.join("d/pipe")).unwrap();
    assert!(pipe.file_type().is_fifo());
    assert_eq!(pipe.permissions().mode() & 0o7777, 0o640);
    let null = fs::symlink_metadata(root.join("d/null")).unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(null.permissions().mode() & 0o7777, 0o600);
    assert_eq!(null.rdev(), libc::makedev(1, 3));
}

/// `renameat2(RENAME_EXCHANGE)` of two paths in the workspace, through the mount.
fn exchange(a: &std::path::Path, b: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let (a, b) = (c(a), c(b));
    // SAFETY: two valid NUL-terminated paths; renameat2 reads them and nothing else.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

#[test]
fn a_rollback_never_writes_through_a_name_the_plan_leaves_alone() {
    // Found by the model test: `d1/b` is a second name of a's file; after `d0/b` and `a` are
    // exchanged, `d0/b` is that file. Rewriting `d0/b` in place to its earlier content would
    // change `d1/b`, which the rollback does not touch.
    let mut ws = Workspace::new();
    let root = ws.path();
    fs::write(root.join("a"), "AAA\n").unwrap();
    fs::create_dir(root.join("d0")).unwrap();
    ws.mount();
    fs::hard_link(root.join("a"), root.join("d0/b")).unwrap();
    fs::rename(root.join("d0"), root.join("d1")).unwrap();
    fs::create_dir(root.join("d0")).unwrap();
    fs::write(root.join("d0/b"), "BBB\n").unwrap();
    assert!(rw(&ws, &["checkpoint", "cp"]).status.success());
    exchange(&root.join("d0/b"), &root.join("a"));
    let out = rw(&ws, &["rollback", "--to", "cp"]);
    assert!(out.status.success(), "{out:?}");
    let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
    assert_eq!(
        [read("a"), read("d0/b"), read("d1/b")],
        ["AAA\n", "BBB\n", "AAA\n"],
        "{}",
        stdout(&out)
    );
}

/// `line` written to `.rewind/ctl` on one open file, and what it answered.
fn ctl(ws: &Workspace, line: &str) -> String {
    use std::io::Read;
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.path().join(".rewind/ctl"))
        .unwrap();
    f.write_all(line.as_bytes()).unwrap();
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    out
}

/// The text of `rewind mcp`'s answer to one call of `tool` with `arguments`.
fn mcp_call(ws: &Workspace, tool: &str, arguments: serde_json::Value) -> String {
    use std::io::BufRead;
    let mut child = ws
        .command(&["mcp"])
        .current_dir(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    let mut answers = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = loop {
        let line = answers.next().expect("an answer to the call").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 2 {
            break v;
        }
    };
    drop(stdin);
    assert!(child.wait().unwrap().success());
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

/// Without passthrough (a mount by a user other than root) the kernel keeps its own size of a
/// file open for writing, so a rollback never rewrites one in place, even forced. The plan
/// knows it: the dry run skips the file with its writer, exit status 1, exactly as the run
/// does, and so do the dry runs through `.rewind/ctl` and MCP (one plan). Nothing is touched.
#[test]
fn without_passthrough_a_forced_dry_run_skips_an_open_file_as_the_run_does() {
    let mut ws = Workspace::new();
    ws.mount_with(&["--no-passthrough"]);
    let root = ws.path();
    as_session(&ws, "zero", "printf 'v0\\n' > w.txt");
    sync(&ws);
    as_session(&ws, "first", "printf 'v1\\n' > w.txt");
    sync(&ws);
    let writer = open_writer(&ws);
    let pid = writer.id();
    let skip = format!(
        "skip     w.txt: held open for writing by process {pid} (python3) of session second, \
         and without passthrough (a mount by a user other than root) the kernel would keep its \
         old size for that process; stop it, or roll back once it has closed the file"
    );
    let dry = rw(
        &ws,
        &["rollback", "--session", "first", "--force", "--dry-run"],
    );
    let by_ctl = ctl(&ws, "rollback --session first --force --dry-run");
    let by_mcp = mcp_call(
        &ws,
        "rollback",
        serde_json::json!({"session": "first", "force": true}),
    );
    let run = rw(&ws, &["rollback", "--session", "first", "--force"]);
    for out in [&dry, &run] {
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(stdout(out).contains(&skip), "{out:?}");
    }
    assert_eq!(plan_lines(&run), plan_lines(&dry));
    assert!(stdout(&run).contains("or skipped"), "{}", stdout(&run));
    for text in [&by_ctl, &by_mcp] {
        assert!(text.contains(&skip), "{text}");
        assert!(text.contains("nothing to roll back"), "{text}");
    }
    assert_eq!(fs::read_to_string(root.join("w.txt")).unwrap(), "v1\nv2\n");
    finish(writer);
    assert_eq!(
        fs::read_to_string(root.join("w.txt")).unwrap(),
        "v1\nv2\nv3\n"
    );
    // Once the writer has closed it, the same rollback puts it back.
    sync(&ws);
    let run = rw(&ws, &["rollback", "--session", "first", "--force"]);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(fs::read_to_string(root.join("w.txt")).unwrap(), "v0\n");
}
