//! History that never lies: gc removes exactly what its dry run said, and no question about
//! the past is answered from what gc left incomplete; change ids follow the order operations
//! happened in, held-back creates included, so an exported session builds at every commit.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Workspace, noise, ok, rw, sh};

/// Exit 2 with a message containing `want` on stderr.
fn refused(out: Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected exit 2\nstdout:\n{}\nstderr:\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(want), "expected {want:?} in:\n{err}");
    err
}

/// The numbers after "remove"/"removed" on gc's first line.
fn gc_counts(out: &str) -> (u64, u64) {
    let line = out.lines().next().unwrap();
    let rest = line.split("remove").nth(1).unwrap();
    let n: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    (n[0], n[1])
}

/// The id printed after "oldest point still kept: ".
fn oldest_kept(out: &str) -> u64 {
    let rest = out.split("oldest point still kept: ").nth(1).expect(out);
    rest.split(' ').next().unwrap().parse().unwrap()
}

/// Write `content` to `path` in the workspace and wait until it is recorded.
fn write(ws: &Workspace, path: &str, content: &[u8]) {
    std::fs::write(ws.path().join(path), content).unwrap();
    ok(rw(ws, &["sync"]));
}

#[test]
fn gc_never_lets_a_point_answer_from_incomplete_history() {
    let mut ws = Workspace::new();
    ws.mount();
    write(&ws, "f", b"v1\n");
    ok(rw(&ws, &["checkpoint", "cp"]));
    for v in 2..=5 {
        write(&ws, "f", format!("v{v}\n").as_bytes());
    }
    // 300 KB that does not compress: more than --max-size on its own.
    let big: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write(&ws, "big", &big);

    let dry = ok(rw(&ws, &["gc", "--max-size", "1000", "--dry-run"]));
    assert!(dry.starts_with("dry run: would remove "), "{dry}");
    let would = gc_counts(&dry);
    // Nothing was removed by the dry run.
    assert_eq!(ok(rw(&ws, &["cat", "f", "--at", "cp"])), "v1\n");
    let run = ok(rw(&ws, &["gc", "--max-size", "1000"]));
    assert!(run.starts_with("removed "), "{run}");
    assert_eq!(gc_counts(&run), would, "dry run:\n{dry}\nrun:\n{run}");
    // f's first four versions go; the newest change of each path stays.
    assert_eq!(would.0, 4, "{run}");
    assert!(run.contains("cannot reach --max-size 1000"), "{run}");
    assert!(run.contains("store on disk "), "{run}");
    let oldest = oldest_kept(&run);
    // The time gc names as the oldest point kept is itself a point that answers.
    let time = run
        .split(&format!("oldest point still kept: {oldest} ("))
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_string();

    // The checkpoint is older than what is kept: refused everywhere, never answered with v4.
    let err = refused(
        rw(&ws, &["cat", "f", "--at", "cp"]),
        "oldest point still kept",
    );
    assert!(err.contains(&format!("kept is {oldest} ")), "{err}");
    refused(
        rw(&ws, &["rollback", "--to", "cp", "--dry-run"]),
        "oldest point still kept",
    );
    refused(
        rw(&ws, &["diff", "--from", "cp", "--stat"]),
        "oldest point still kept",
    );
    refused(rw(&ws, &["log", "--since", "0"]), "oldest point still kept");
    assert!(std::fs::symlink_metadata(ws.path().join(".rewind/at/cp")).is_err());
    assert!(std::fs::symlink_metadata(ws.path().join(".rewind/at/1")).is_err());
    // The oldest point kept answers exactly: right after the last removed change, f was v4.
    assert_eq!(
        ok(rw(&ws, &["cat", "f", "--at", &oldest.to_string()])),
        "v4\n"
    );
    assert_eq!(ok(rw(&ws, &["cat", "f", "--at", &time])), "v4\n");
    assert_eq!(
        std::fs::read(ws.path().join(format!(".rewind/at/{oldest}/f"))).unwrap(),
        b"v4\n"
    );
    let status = ok(rw(&ws, &["status"]));
    assert!(
        status.contains(&format!("oldest point still kept: {oldest} ")),
        "{status}"
    );
    // A removed change says so.
    refused(rw(&ws, &["show", "1"]), "removed by retention");

    // The horizon survives a remount and applies unmounted too.
    ws.unmount();
    refused(
        rw(&ws, &["cat", "f", "--at", "cp"]),
        "oldest point still kept",
    );
    ws.mount();
    refused(
        rw(&ws, &["cat", "f", "--at", "cp"]),
        "oldest point still kept",
    );
    assert_eq!(ok(rw(&ws, &["cat", "f"])), "v5\n");
}

#[test]
fn a_session_gc_cut_is_never_shown_or_undone_as_a_whole() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let as_session = |session: &str, script: &str| {
        let out = Command::new("bash")
            .arg("-ec")
            .arg(script)
            .current_dir(&root)
            .env("REWIND_SESSION", session)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        ok(rw(&ws, &["sync"]));
    };
    ok(rw(
        &ws,
        &[
            "turn",
            "begin",
            "--session",
            "s1",
            "--agent",
            "a1",
            "--prompt",
            "p",
        ],
    ));
    as_session("s1", "echo one > a");
    as_session("s1", "echo two > a; echo b > b");
    ok(rw(&ws, &["turn", "end", "--session", "s1"]));
    as_session("s2", "echo three > c");
    // s1's create of a is the only change that is not the newest of its path.
    let dry = ok(rw(&ws, &["gc", "--max-size", "0", "--dry-run"]));
    assert!(dry.contains("session s1: 1 change would go"), "{dry}");
    let run = ok(rw(&ws, &["gc", "--max-size", "0"]));
    assert_eq!(gc_counts(&run), gc_counts(&dry));
    assert!(run.contains("session s1: 1 change removed"), "{run}");

    let log = ok(rw(&ws, &["log", "--session", "s1"]));
    assert!(log.contains("note: session s1 is incomplete"), "{log}");
    // Wherever the session's changes are listed, and in the whole history's log.
    let listed = std::fs::read_to_string(root.join(".rewind/sessions/s1/log")).unwrap();
    assert!(
        listed.starts_with("note: session s1 is incomplete"),
        "{listed}"
    );
    let listed = std::fs::read_to_string(root.join(".rewind/sessions/s2/log")).unwrap();
    assert!(!listed.contains("note:"), "{listed}");
    let turns = ok(rw(&ws, &["turns"]));
    assert!(
        turns.starts_with("note: session s1 is incomplete"),
        "{turns}"
    );
    assert!(turns.contains("(gc removed part of it)"), "{turns}");
    let listed = std::fs::read_to_string(root.join(".rewind/turns/s1/1/log")).unwrap();
    assert!(
        listed.starts_with("note: turn s1:1 is incomplete"),
        "{listed}"
    );
    for args in [&["log"][..], &["log", "a"]] {
        let log = ok(rw(&ws, args));
        assert!(
            log.starts_with("note: oldest point still kept"),
            "{args:?}: {log}"
        );
    }
    let last = changes(&ws).last().unwrap().0.to_string();
    assert!(!ok(rw(&ws, &["log", "--since", &last])).contains("note:"));
    let diff = ok(rw(&ws, &["diff", "--session", "s1"]));
    assert!(diff.starts_with("note: session s1 is incomplete"), "{diff}");
    let before = std::fs::read(root.join("a")).unwrap();
    refused(rw(&ws, &["rollback", "--session", "s1"]), "is incomplete");
    refused(
        rw(&ws, &["rollback", "--session", "s1", "--dry-run"]),
        "is incomplete",
    );
    assert_eq!(std::fs::read(root.join("a")).unwrap(), before);
    sh(
        &root,
        "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
    );
    refused(
        rw(&ws, &["export", "--session", "s1", "--branch", "review"]),
        "is incomplete",
    );
    // s2 lost nothing: it is whole.
    let log = ok(rw(&ws, &["log", "--session", "s2"]));
    assert!(!log.contains("note:"), "{log}");
    ok(rw(&ws, &["rollback", "--session", "s2", "--dry-run"]));
}

/// `(id, kind, path)` of every change, oldest first.
fn changes(ws: &Workspace) -> Vec<(u64, String, String)> {
    ok(rw(ws, &["log", "--json"]))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_u64().unwrap(),
                v["kind"].as_str().unwrap().to_string(),
                v["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_file_created_before_another_is_edited_has_the_smaller_id() {
    let mut ws = Workspace::new();
    std::fs::write(ws.path().join("lib.rs"), "pub fn a() {}\n").unwrap();
    ws.mount();
    // The new file's create is held back (is it a temporary file?) while sed edits lib.rs.
    sh(
        &ws.path(),
        "printf 'pub fn b() {}\\n' > mod2.rs; sed -i 's/a()/a2()/' lib.rs",
    );
    ok(rw(&ws, &["sync"]));
    let all = changes(&ws);
    let kinds: Vec<(&str, &str)> = all
        .iter()
        .map(|(_, k, p)| (k.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("create", "mod2.rs"), ("modify", "lib.rs")],
        "{all:?}"
    );
    // sed's temporary file recorded nothing and left no gap.
    assert_eq!(all[1].0, all[0].0 + 1, "{all:?}");
}

fn cargo_build(dir: &Path) -> Output {
    Command::new("cargo")
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        // A shared build folder (dev.env's) would queue this build behind every other on its lock.
        .env_remove("CARGO_BUILD_BUILD_DIR")
        .output()
        .unwrap()
}

#[test]
fn an_exported_session_builds_at_every_commit() {
    let mut ws = Workspace::new();
    let root = ws.path();
    sh(
        &root,
        "mkdir src
         printf '[package]\\nname = \"tiny\"\\nversion = \"0.1.0\"\\nedition = \"2021\"\\n' > Cargo.toml
         printf 'pub fn a() -> u32 { 1 }\\n' > src/lib.rs
         printf 'target/\\n' > .gitignore
         git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
    );
    ws.mount();
    // An agent's script: a new module, then `mod` lines added to lib.rs with sed, at once.
    let out = Command::new("bash")
        .arg("-ec")
        .arg(
            "printf 'pub fn b() -> u32 { 2 }\\n' > src/extra.rs
             sed -i '1i mod extra;' src/lib.rs
             printf 'pub fn c() -> u32 { crate::extra::b() }\\n' > src/more.rs
             sed -i '1i mod more;' src/lib.rs",
        )
        .current_dir(&root)
        .env("REWIND_SESSION", "agent1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    ok(rw(&ws, &["sync"]));
    let out = ok(rw(
        &ws,
        &["export", "--session", "agent1", "--branch", "review"],
    ));
    assert!(out.contains("4 changes"), "{out}");
    let commits = sh(&root, "git rev-list --reverse review");
    let commits: Vec<&str> = commits.lines().collect();
    assert!(commits.len() >= 4, "{out}\n{commits:?}");
    let scratch = tempfile::tempdir().unwrap();
    for (n, commit) in commits.iter().enumerate() {
        let dir = scratch.path().join(n.to_string());
        std::fs::create_dir(&dir).unwrap();
        sh(
            &root,
            &format!(
                "git archive {commit} | tar -x -C '{}'",
                String::from_utf8_lossy(dir.as_os_str().as_bytes())
            ),
        );
        let build = cargo_build(&dir);
        assert!(
            build.status.success(),
            "commit {n} ({commit}) does not build:\n{}\nlib.rs:\n{}",
            String::from_utf8_lossy(&build.stderr),
            std::fs::read_to_string(dir.join("src/lib.rs")).unwrap()
        );
    }
}

/// `rewind status`'s `on disk:` figure.
fn on_disk(ws: &Workspace) -> u64 {
    let status = ok(rw(ws, &["status"]));
    status
        .lines()
        .find_map(|l| l.strip_prefix("on disk: "))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no on-disk line:\n{status}"))
}

fn du(dir: &Path) -> u64 {
    let out = Command::new("du").arg("-sB1").arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The case, smaller: content that is only history any more (a large file overwritten
/// twice), then `gc --max-size 1M`: the store's size on disk, as `status` and `du` say, gives
/// back at least 90 % of it.
#[test]
fn status_reports_the_size_on_disk_and_gc_gives_back_deleted_history() {
    let mut ws = Workspace::new();
    ws.mount();
    let big = noise(16 << 20, 0x9E37_79B9_7F4A_7C15u64);
    write(&ws, "big.bin", &big);
    write(&ws, "big.bin", b"small\n");
    write(&ws, "big.bin", b"smaller\n");
    let mounted = on_disk(&ws);
    assert!(mounted >= big.len() as u64, "{mounted} bytes on disk");
    // Unmounted (the mounted case is the next test).
    ws.unmount();
    let before = on_disk(&ws);
    let du_before = du(&ws.store());
    assert!(
        before.abs_diff(du_before) <= 64 << 10,
        "status says {before} bytes on disk, du {du_before}"
    );
    ok(rw(&ws, &["gc", "--max-size", "1M"]));
    let after = on_disk(&ws);
    assert!(
        after.abs_diff(du(&ws.store())) <= 64 << 10,
        "status says {after} bytes on disk"
    );
    let freed = before.saturating_sub(after);
    assert!(
        freed * 10 >= big.len() as u64 * 9,
        "gc gave back {freed} of {} bytes ({before} -> {after})",
        big.len()
    );
    assert_eq!(ok(rw(&ws, &["cat", "big.bin"])), "smaller\n");
}

/// The same, mounted: the daemon keeps from gc only what a capture in flight has stored for a
/// change not written yet (`store/pins.rs`), not everything stored lately, so gc run through
/// the mount gives the space back as well, and the file reads back whole afterwards.
#[test]
fn gc_while_mounted_gives_back_deleted_history() {
    let mut ws = Workspace::new();
    ws.mount();
    let big = noise(16 << 20, 0x2545_F491_4F6C_DD1Du64);
    write(&ws, "big.bin", &big);
    write(&ws, "big.bin", b"small\n");
    write(&ws, "big.bin", b"smaller\n");
    write(&ws, "kept.bin", &big[..3 << 20]);
    let before = du(&ws.store());
    assert!(before >= big.len() as u64, "{before} bytes on disk");
    let out = ok(rw(&ws, &["gc", "--max-size", "1M"]));
    let after = du(&ws.store());
    // The content itself is gone, not only the log that held it too: what stays stored is
    // kept.bin's (and a few small versions).
    let status = ok(rw(&ws, &["status"]));
    let stored: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("stored: "))
        .and_then(|rest| rest.split(", ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no stored line:\n{status}"));
    assert!(
        stored < (3 << 20) + (64 << 10),
        "{stored} bytes still stored after gc:\n{out}"
    );
    let freed = before.saturating_sub(after);
    assert!(
        freed * 10 >= big.len() as u64 * 9,
        "gc gave back {freed} of {} bytes ({before} -> {after}):\n{out}",
        big.len()
    );
    assert_eq!(
        std::fs::read(ws.path().join("big.bin")).unwrap(),
        b"smaller\n"
    );
    assert_eq!(ok(rw(&ws, &["cat", "big.bin"])), "smaller\n");
    // The newest content of every file stays, chunks and all.
    let kept = rw(&ws, &["cat", "kept.bin"]);
    assert!(kept.status.success(), "{kept:?}");
    assert!(kept.stdout == big[..3 << 20], "kept.bin reads back whole");
    // Recording goes on as before.
    write(&ws, "big.bin", b"after gc\n");
    assert_eq!(ok(rw(&ws, &["cat", "big.bin"])), "after gc\n");
}

/// gc lets recording go on while RocksDB compacts what it deleted (seconds on a big store):
/// with that part slowed down (`REWIND_TEST_SLOW_COMPACT`), a `mkdir` and a write made while
/// gc is still running are recorded at once instead of waiting for it.
#[test]
fn recording_goes_on_while_gc_compacts() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_COMPACT", "8000")]);
    for v in ["one\n", "two\n", "three\n"] {
        write(&ws, "a.txt", v.as_bytes());
    }
    // The deletes are written (the two older versions gone from the log) before the pause.
    let before = log_lines(&ws);
    let mut gc = until_swept(&ws, before, spawn_gc(&ws));
    let start = std::time::Instant::now();
    std::fs::create_dir(ws.path().join("made-during-gc")).unwrap();
    write(&ws, "b.txt", b"written during gc\n");
    let took = start.elapsed();
    assert!(
        gc.try_wait().unwrap().is_none(),
        "gc ended before the mkdir and the write returned ({took:?}): they waited for it"
    );
    assert!(
        took < std::time::Duration::from_secs(4),
        "they took {took:?}"
    );
    let log = ok(rw(&ws, &["log"]));
    assert!(log.contains("made-during-gc"), "{log}");
    assert!(log.contains("b.txt"), "{log}");
    let out = gc.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), "three\n");
}

/// gc plans without holding up recording: the plan reads every change and every blob (seconds
/// on a big store), and every write through the mount used to wait for it. With the plan
/// slowed down (`REWIND_TEST_SLOW_GC_PLAN`), writes made while gc plans return before it is
/// done, and what they recorded stays whole although it names content the plan found
/// unreferenced (a version of `a.txt` that gc removes, written again to another file). The
/// counts equal a recount of the store, and every session's summary counts the changes the
/// log lists for it, first and last id included.
#[test]
fn recording_goes_on_while_gc_plans_and_keeps_what_it_names() {
    use crate::scale::{recount, status_counts};
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_GC_PLAN", "5000")]);
    for v in ["one\n", "two\n", "three\n"] {
        write(&ws, "a.txt", v.as_bytes());
    }
    write(&ws, "b.txt", b"b\n");
    write(&ws, "d.txt", b"d\n");
    ok(rw(&ws, &["sync"]));
    let mut gc = spawn_gc(&ws);
    // gc's plan of this small store takes milliseconds; then it pauses for 5 s.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let start = std::time::Instant::now();
    write(&ws, "b.txt", b"one\n");
    sh(
        &ws.path(),
        "echo two > d.txt && mkdir made-during-gc && cp a.txt c.txt",
    );
    // The new file's create is recorded now, not after gc.
    ok(rw(&ws, &["sync"]));
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "the writes took {took:?}: they waited for gc's plan"
    );
    assert!(
        gc.try_wait().unwrap().is_none(),
        "gc ended before the writes were made"
    );
    let out = gc.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("removed 2 changes"), "{said}");
    ok(rw(&ws, &["sync"]));
    // Read from the store (the workspace has them too): before anything writes the files again,
    // which would store their content anew.
    let read = crate::hostile13::every_listed_version_reads_back(&ws);
    assert!(read >= 5, "{read} versions read");
    for (path, content) in [
        ("a.txt", "three\n"),
        ("b.txt", "one\n"),
        ("c.txt", "three\n"),
        ("d.txt", "two\n"),
    ] {
        assert_eq!(ok(rw(&ws, &["cat", path])), content, "{path}");
    }
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    assert!(log.contains("made-during-gc"), "{log}");
    assert_eq!(status_counts(&ws), recount(&ws.store()));
    // Each session's summary, as a recount of the log gives it.
    let changes = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let sessions = json_lines(&ok(rw(&ws, &["sessions", "--json"])));
    assert!(!sessions.is_empty());
    for s in &sessions {
        let ids: Vec<u64> = changes
            .iter()
            .filter(|c| c["session"] == s["name"])
            .map(|c| c["id"].as_u64().unwrap())
            .collect();
        assert_eq!(s["changes"], ids.len() as u64, "{s}");
        assert_eq!(s["first_id"], *ids.iter().min().unwrap(), "{s}");
        assert_eq!(s["last_id"], *ids.iter().max().unwrap(), "{s}");
    }
    let listed: usize = sessions
        .iter()
        .map(|s| s["changes"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(listed, changes.len());
}

/// What is recorded while gc compacts (the writer lock let go) stays whole, with hostile
/// timing: files written and edited during the compaction of one gc read back and are counted
/// (`status` equals a recount of the store); two gcs at once beside a writer; then the daemon
/// SIGKILLed during a compaction while a writer goes on, and a remount: nothing recorded is
/// lost, every file is in the history, and the counts still equal a recount.
#[test]
fn what_is_recorded_while_gc_compacts_survives_two_gcs_and_a_sigkill() {
    use crate::scale::{recount, status_counts};
    use crate::trust::{every_file_is_in_the_history, exited, signal};
    use std::fs;
    use std::time::Duration;
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_COMPACT", "3000")]);
    let dir = ws.path();
    sh(
        &dir,
        "for v in 1 2 3; do for i in $(seq 30); do seq $v$i 400 > old$i.txt; done; done",
    );
    ok(rw(&ws, &["sync"]));
    // One gc; new files and edits while it compacts.
    let before = log_lines(&ws);
    let mut gc = until_swept(&ws, before, spawn_gc(&ws));
    for i in 1..=30 {
        fs::write(dir.join(format!("during{i}.txt")), format!("during {i}\n")).unwrap();
        fs::write(dir.join(format!("old{i}.txt")), format!("edited {i}\n")).unwrap();
    }
    assert!(
        gc.try_wait().unwrap().is_none(),
        "gc ended before the writes"
    );
    assert!(gc.wait().unwrap().success());
    ok(rw(&ws, &["sync"]));
    for i in 1..=30 {
        assert_eq!(
            ok(rw(&ws, &["cat", &format!("during{i}.txt")])),
            format!("during {i}\n")
        );
        assert_eq!(
            ok(rw(&ws, &["cat", &format!("old{i}.txt")])),
            format!("edited {i}\n")
        );
    }
    assert_eq!(status_counts(&ws), recount(&ws.store()), "after one gc");

    // Two gcs at once, a writer beside them.
    rewrite_old(&ws, 4..=5);
    let (mut a, mut b) = (spawn_gc(&ws), spawn_gc(&ws));
    for i in 1..=30 {
        fs::write(dir.join(format!("two{i}.txt")), format!("two {i}\n")).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    ok(rw(&ws, &["sync"]));
    for i in 1..=30 {
        assert_eq!(
            ok(rw(&ws, &["cat", &format!("two{i}.txt")])),
            format!("two {i}\n")
        );
    }
    assert_eq!(
        status_counts(&ws),
        recount(&ws.store()),
        "after two gcs at once"
    );

    // SIGKILL during a compaction, a writer going on.
    rewrite_old(&ws, 6..=7);
    let pid = crate::common::daemon_pid(&ws) as u32;
    let before = log_lines(&ws);
    let mut gc = until_swept(&ws, before, spawn_gc(&ws));
    let writer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut done = 0;
            for i in 1..=200 {
                // After the kill the mount is gone: the writes fail.
                if fs::write(dir.join(format!("k{i}.txt")), format!("k {i}\n")).is_err() {
                    break;
                }
                done = i;
                std::thread::sleep(Duration::from_millis(5));
            }
            done
        })
    };
    std::thread::sleep(Duration::from_millis(400));
    signal(pid, libc::SIGKILL);
    assert!(
        crate::common::wait_for(30, || exited(pid)),
        "the daemon did not die"
    );
    let written = writer.join().unwrap();
    let _ = gc.wait();
    assert!(written > 0, "nothing was written during the compaction");
    eprintln!("{written} files written before the SIGKILL");
    let _ = Command::new("fusermount3").arg("-uz").arg(&dir).status();
    ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    ok(rw(&ws, &["sync"]));
    every_file_is_in_the_history(&ws);
    for i in 1..=written {
        let name = format!("k{i}.txt");
        if dir.join(&name).exists() {
            assert_eq!(ok(rw(&ws, &["cat", &name])), format!("k {i}\n"), "{name}");
        }
    }
    for i in 1..=30 {
        assert_eq!(
            ok(rw(&ws, &["cat", &format!("during{i}.txt")])),
            format!("during {i}\n")
        );
    }
    assert_eq!(
        status_counts(&ws),
        recount(&ws.store()),
        "after SIGKILL and remount"
    );
    // A later gc compacts what the killed one left, and the counts still hold.
    ok(rw(&ws, &["gc", "--keep", "0s"]));
    ok(rw(&ws, &["sync"]));
    assert_eq!(status_counts(&ws), recount(&ws.store()), "after a later gc");
}

/// The number of changes `rewind log` lists.
fn log_lines(ws: &Workspace) -> usize {
    ok(rw(ws, &["log"])).lines().count()
}

/// `rewind gc --keep 0s`, started in the background.
fn spawn_gc(ws: &Workspace) -> std::process::Child {
    ws.command(&["gc", "--keep", "0s"])
        .current_dir(ws.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until `gc` has written its deletes (the log shorter than `before` lines), with the
/// daemon's `REWIND_TEST_SLOW_COMPACT` pause still ahead of it; panics if gc ends first.
fn until_swept(ws: &Workspace, before: usize, mut gc: std::process::Child) -> std::process::Child {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while log_lines(ws) >= before {
        assert!(std::time::Instant::now() < deadline, "gc removed nothing");
        if gc.try_wait().unwrap().is_some() {
            let out = gc.wait_with_output().unwrap();
            panic!(
                "gc ended before its pause (log: {} lines, {before} before): {out:?}",
                log_lines(ws)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    gc
}

/// Write a new version of `old1.txt` to `old30.txt` for each of `versions`, settling after
/// each round (two writes in quick succession may be one save).
fn rewrite_old(ws: &Workspace, versions: std::ops::RangeInclusive<u32>) {
    for v in versions {
        sh(
            &ws.path(),
            &format!("for i in $(seq 30); do seq {v}$i 400 > old$i.txt; done"),
        );
        ok(rw(ws, &["sync"]));
    }
    ok(rw(ws, &["sync"]));
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}
