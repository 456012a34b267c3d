//! `rewind rollback --hunk`: one hunk of an agent's change or turn put back in the file as it
//! is now, through the real mount, recorded as a `restore` in a `rollback-N` session.

use std::io::{Read, Write};
use std::process::Output;

use crate::common::{Workspace, rw, sh, stderr, stdout};

/// The stdout of a command that must exit with `code`.
fn expect(o: Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// What the agent makes of the file: three hunks far apart.
fn agents_version(before: &str) -> String {
    before
        .replace("line 3\n", "LINE 3\n")
        .replace("line 20\n", "line 20\nadded 20b\n")
        .replace("line 35\n", "")
}

fn read(ws: &Workspace, name: &str) -> String {
    std::fs::read_to_string(ws.path().join(name)).unwrap()
}

/// A mounted workspace where `f.txt` was written by the user, then changed by session `s1`
/// (agent claude) in one change with three hunks. Returns that change's id.
fn scene(ws: &mut Workspace) -> u64 {
    ws.mount();
    std::fs::write(ws.path().join("f.txt"), numbered(40)).unwrap();
    let new = agents_version(&numbered(40));
    std::fs::write(ws.plain().join("new"), &new).unwrap();
    let script = format!("cp {} f.txt", ws.plain().join("new").display());
    expect(
        rw(
            ws,
            &[
                "run",
                "--session",
                "s1",
                "--agent",
                "claude",
                "--",
                "bash",
                "-c",
                &script,
            ],
        ),
        0,
    );
    expect(rw(ws, &["sync"]), 0);
    let log = expect(rw(ws, &["log", "--session", "s1", "--json"]), 0);
    let last = log.lines().last().expect("the agent's change");
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["path"], "f.txt");
    v["id"].as_u64().unwrap()
}

/// The lines of a rollback's output that are its plan (all but the summary line).
fn plan(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    lines.join("\n")
}

#[test]
fn the_middle_hunk_of_three_goes_back_and_undo_brings_it_again() {
    let mut ws = Workspace::new();
    let id = scene(&mut ws);
    let diff = expect(rw(&ws, &["diff", &id.to_string()]), 0);
    assert_eq!(diff.matches("\n@@ ").count(), 3, "{diff}");
    let agents = agents_version(&numbered(40));
    assert_eq!(read(&ws, "f.txt"), agents);

    let n = id.to_string();
    let dry = expect(
        rw(
            &ws,
            &["rollback", "--change", &n, "--hunk", "2", "--dry-run"],
        ),
        0,
    );
    assert!(
        dry.starts_with(&format!(
            "revert   f.txt lines 18-24: hunk 2 of 3 of change {id}\n@@ -18,7 +18,6 @@\n line 18\n"
        )),
        "{dry}"
    );
    assert!(dry.contains("\n-added 20b\n"), "{dry}");
    assert!(
        dry.ends_with("dry run: 1 hunk would be reverted\n"),
        "{dry}"
    );
    assert_eq!(read(&ws, "f.txt"), agents, "a dry run changed the file");

    // `--path` may be left out: the change has one file.
    let run = expect(rw(&ws, &["rollback", "--change", &n, "--hunk", "2"]), 0);
    assert_eq!(plan(&run), plan(&dry), "the run did what the dry run said");
    assert!(
        run.lines()
            .last()
            .unwrap()
            .starts_with("rollback-1: reverted 1 hunk"),
        "{run}"
    );
    let want = numbered(40)
        .replace("line 3\n", "LINE 3\n")
        .replace("line 35\n", "");
    assert_eq!(read(&ws, "f.txt"), want, "hunks 1 and 3 stay");

    // Recorded like any rollback: a restore by rewind in rollback-1.
    let log = expect(rw(&ws, &["log", "--session", "rollback-1", "--json"]), 0);
    let restores: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(restores.len(), 1, "{log}");
    assert_eq!(restores[0]["kind"], "restore");
    assert_eq!(restores[0]["agent"], "rewind");
    assert_eq!(restores[0]["path"], "f.txt");

    // Undone by rolling back its session.
    expect(rw(&ws, &["rollback", "--session", "rollback-1"]), 0);
    assert_eq!(read(&ws, "f.txt"), agents);

    // And by `undo` of its one change, after reverting again.
    expect(rw(&ws, &["rollback", "--change", &n, "--hunk", "2"]), 0);
    assert_eq!(read(&ws, "f.txt"), want);
    let log = expect(rw(&ws, &["log", "--json", "-n", "1"]), 0);
    let last: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
    assert_eq!(last["kind"], "restore");
    expect(
        rw(&ws, &["undo", &last["id"].as_u64().unwrap().to_string()]),
        0,
    );
    assert_eq!(read(&ws, "f.txt"), agents);
}

#[test]
fn a_hunk_edited_since_is_a_skip_and_a_shifted_one_is_found() {
    let mut ws = Workspace::new();
    let id = scene(&mut ws);
    let n = id.to_string();
    // The user edits the line the agent added.
    sh(
        &ws.path(),
        "sed -i 's/^added 20b$/added 20b, edited/' f.txt",
    );
    let edited = read(&ws, "f.txt");
    for dry in [true, false] {
        let mut args = vec!["rollback", "--change", &n, "--path", "f.txt", "--hunk", "2"];
        if dry {
            args.push("--dry-run");
        }
        let text = expect(rw(&ws, &args), 1);
        assert_eq!(
            text,
            format!("skip     f.txt: hunk 2 of 3 of change {id}: the hunk's lines changed since\n")
        );
    }
    assert_eq!(read(&ws, "f.txt"), edited, "a skip touched the file");
    // --force does not apply.
    let o = rw(&ws, &["rollback", "--change", &n, "--hunk", "2", "--force"]);
    assert_eq!(o.status.code(), Some(2));

    // Two lines put in above: hunk 3 is found two lines further down.
    sh(&ws.path(), "sed -i '1i top 1\\ntop 2' f.txt");
    let text = expect(rw(&ws, &["rollback", "--change", &n, "--hunk", "3"]), 0);
    assert!(
        text.starts_with(&format!(
            "revert   f.txt lines 35-40: hunk 3 of 3 of change {id} (found 2 lines below where the diff puts it)\n"
        )),
        "{text}"
    );
    assert_eq!(
        read(&ws, "f.txt"),
        format!("top 1\ntop 2\n{edited}")
            .replace("line 34\nline 36\n", "line 34\nline 35\nline 36\n")
    );

    // A hunk that is not there, and a change with no such file: clear errors.
    let e = rw(&ws, &["rollback", "--change", &n, "--hunk", "4"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("f.txt has 3 hunks"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    let e = rw(
        &ws,
        &["rollback", "--change", &n, "--path", "g.txt", "--hunk", "1"],
    );
    assert_eq!(e.status.code(), Some(2));
}

#[test]
fn a_turns_hunk_goes_back_through_ctl_too_and_binary_files_are_refused() {
    let mut ws = Workspace::new();
    ws.mount();
    std::fs::write(ws.path().join("a.txt"), numbered(12)).unwrap();
    std::fs::write(ws.path().join("b.bin"), b"\0bin\n").unwrap();
    expect(rw(&ws, &["sync"]), 0);
    let ctl_line = |line: &str| -> String {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(ws.path().join(".rewind/ctl"))
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        text
    };
    ctl_line("turn begin --session s2 --agent codex --prompt 'edit a'");
    let script = "sed -i 's/^line 2$/two/' a.txt && printf '\\0bin\\nmore\\n' > b.bin";
    expect(
        rw(
            &ws,
            &[
                "run",
                "--session",
                "s2",
                "--agent",
                "codex",
                "--",
                "bash",
                "-c",
                script,
            ],
        ),
        0,
    );
    expect(rw(&ws, &["sync"]), 0);
    ctl_line("turn end --session s2");

    // Without --path, a turn that changed two files says which there are.
    let e = rw(&ws, &["rollback", "--turn", "s2:1", "--hunk", "1"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("--path"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    let e = rw(
        &ws,
        &[
            "rollback", "--turn", "s2:1", "--path", "b.bin", "--hunk", "1",
        ],
    );
    assert_eq!(e.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("binary"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );

    let dry = ctl_line("rollback --turn s2:1 --path a.txt --hunk 1 --dry-run");
    assert!(
        dry.starts_with("revert   a.txt lines 1-5: hunk 1 of 1 of turn s2:1\n"),
        "{dry}"
    );
    assert!(dry.contains("\n-two\n+line 2\n"), "{dry}");
    let run = ctl_line("rollback --turn s2:1 --path a.txt --hunk 1");
    assert_eq!(plan(&run), plan(&dry));
    assert_eq!(read(&ws, "a.txt"), numbered(12));
    assert_eq!(
        std::fs::read(ws.path().join("b.bin")).unwrap(),
        b"\0bin\nmore\n"
    );
}

/// A hunk of a file whose folder was renamed since is reverted where the file is now, and the
/// plan names both paths; a folder replaced by a symlink at the old name does not lead it
/// astray.
// Failed before the revert looked for the file where it is now (`View::place_now`): it read
// the old path, and with a symlink there failed with `Too many levels of symbolic links (os
// error 40)` and no plan line.
#[test]
fn a_hunk_of_a_file_whose_folder_moved_is_reverted_where_it_is_now() {
    let mut ws = Workspace::new();
    ws.mount();
    let before = numbered(10);
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/f.txt"), &before).unwrap();
    crate::common::sync(&ws);
    sh(&ws.path(), "sed -i 's/^line 5$/FIVE/' d/f.txt");
    crate::common::sync(&ws);
    let change = crate::record::log(&ws).last().unwrap()["id"].to_string();
    sh(&ws.path(), "mv d e && ln -s e d");
    crate::common::sync(&ws);
    let args = ["rollback", "--change", &change, "--hunk", "1"];
    let dry = expect(rw(&ws, &[&args[..], &["--dry-run"]].concat()), 0);
    assert!(
        dry.starts_with(&format!(
            "revert   e/f.txt lines 2-8: hunk 1 of 1 of change {change}, at d/f.txt then\n"
        )),
        "{dry}"
    );
    let run = expect(rw(&ws, &args), 0);
    assert_eq!(plan(&dry), plan(&run), "dry run:\n{dry}run:\n{run}");
    assert_eq!(read(&ws, "e/f.txt"), before);
    // Taken away since: a skip that says so.
    std::fs::remove_file(ws.path().join("e/f.txt")).unwrap();
    crate::common::sync(&ws);
    let gone = expect(rw(&ws, &[&args[..], &["--dry-run"]].concat()), 1);
    assert!(gone.contains("it does not exist now"), "{gone}");
    ws.unmount();
}
