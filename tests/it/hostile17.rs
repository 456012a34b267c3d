//! The seventeenth hostile pass (round 12), on "gc: plan again only when a change the plan
//! counted is taken back" (e4beadb) and "capture cache: leave the next mount only what no gc
//! may have deleted" (de51352). While gc's plan is paused (`REWIND_TEST_SLOW_GC_PLAN`),
//! changes the plan did not see are recorded and taken back: backup-keeping saves (the rename
//! retracted, a create of the backup recorded), renames and chmods the disk refuses (an
//! immutable file), a burst taken back when its folder moves to an ignored name. After each gc
//! every listed version reads back, the counts and session summaries equal a recount, and every
//! file in the workspace still has its newest change, naming what the file holds. Then a gc
//! races an unmount, and the next mount deletes and moves files it has not read.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Workspace, ok, python, rw};
use crate::hostile16::{
    a_text, counts_and_sessions_hold, every_named_content_reads_back, finished, gc_paused,
    json_lines, mount_slow, still_planning, three_versions,
};

/// Every regular file under the workspace (but `.rewind`, `.git`, `target` and `skip`) has a
/// history, and its newest change names what the file holds (`rewind cat` gives it back).
pub(crate) fn every_file_has_its_newest_change(ws: &Workspace, skip: &[&str]) -> usize {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if dir == root && [".rewind", ".git", "target"].contains(&name.as_str()) {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_dir() {
                walk(root, &e.path(), out);
            } else if t.is_file() {
                out.push(
                    e.path()
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let root = ws.path();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.retain(|f| !skip.contains(&f.as_str()));
    let mut wrong = Vec::new();
    for f in &files {
        let log = json_lines(&ok(rw(ws, &["log", "--json", f])));
        if log.is_empty() {
            wrong.push(format!("{f}: no history"));
            continue;
        }
        let out = rw(ws, &["cat", f]);
        let on_disk = fs::read(root.join(f)).unwrap();
        if !out.status.success() {
            wrong.push(format!(
                "{f}: cat: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        } else if out.stdout != on_disk {
            wrong.push(format!(
                "{f}: cat gives {} bytes, the file has {}",
                out.stdout.len(),
                on_disk.len()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "files without their newest change: {wrong:#?}"
    );
    files.len()
}

/// The ids taken back so far (tombstones in the store), read through a read-only instance.
fn retracted_ids(ws: &Workspace) -> Vec<u64> {
    let store = rewind::store::Store::open_read_only(&ws.store()).unwrap();
    let last = store.last_id().unwrap();
    (1..=last)
        .filter(|&id| store.was_retracted(id).unwrap())
        .collect()
}

/// All the checks after a gc.
fn store_holds(ws: &Workspace, skip: &[&str]) {
    ok(rw(ws, &["sync"]));
    let versions = crate::hostile13::every_listed_version_reads_back(ws);
    let named = every_named_content_reads_back(ws);
    counts_and_sessions_hold(ws);
    let files = every_file_has_its_newest_change(ws, skip);
    eprintln!("{versions} versions, {named} contents named, {files} files: whole");
}

/// vim with `set backup`, three saves while gc plans: each removes the old backup, renames the
/// file to `a.txt~` and writes a new `a.txt`; the rename (recorded while gc planned, unseen by
/// it) is taken back and the save recorded as a create of the backup and a modify of the file.
/// gc does not plan again (it ends within one pause), and after it, and after a second gc,
/// both names have their newest change and the store is whole.
#[test]
fn backup_keeping_saves_while_gc_plans_keep_both_names() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    three_versions(&ws);
    let dir = ws.path();
    let before = retracted_ids(&ws).len();
    let (mut gc, started) = gc_paused(&ws, &[]);
    for v in 4..=6u64 {
        let out = python(
            &dir,
            &format!(
                "import os\n\
                 if os.path.exists('a.txt~'): os.remove('a.txt~')\n\
                 os.rename('a.txt', 'a.txt~')\n\
                 with open('a.txt', 'w') as f: f.write({:?})\n\
                 print('saved')\n",
                a_text(v)
            ),
        );
        assert_eq!(out.trim(), "saved");
        std::thread::sleep(Duration::from_millis(700));
    }
    ok(rw(&ws, &["sync"]));
    let taken_back = retracted_ids(&ws).len() - before;
    still_planning(&mut gc, started);
    let said = finished(gc);
    let took = started.elapsed();
    eprintln!("{taken_back} taken back while gc planned; gc took {took:?}: {said}");
    assert!(taken_back >= 3, "the saves' renames were not taken back");
    ok(rw(&ws, &["sync"]));
    let kinds = |p: &str| -> Vec<String> {
        json_lines(&ok(rw(&ws, &["log", "--json", p])))
            .iter()
            .map(|c| format!("{} {}", c["id"], c["kind"]))
            .collect()
    };
    eprintln!("a.txt: {:?}\na.txt~: {:?}", kinds("a.txt"), kinds("a.txt~"));
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(6));
    assert_eq!(ok(rw(&ws, &["cat", "a.txt~"])), a_text(5));
    store_holds(&ws, &[]);
    assert!(
        took < Duration::from_secs(10),
        "gc took {took:?}: it planned again"
    );
    // A second gc, with nothing going on: what the first kept of the saves may go now, but
    // not the newest change of either name.
    let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
    eprintln!("second gc: {said}");
    store_holds(&ws, &[]);
}

/// Makes a file deletable again when dropped, so that the workspace can go (as in
/// `full_store_hostile`).
struct Immutable(PathBuf);

impl Drop for Immutable {
    fn drop(&mut self) {
        let ws = self.0.parent().unwrap();
        if crate::common::is_mounted(ws) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(ws)
                .status();
        }
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// While gc plans: a recorded file `l.txt` made immutable on the disk is renamed (the rename is
/// recorded, the disk refuses it with EPERM, the rename is taken back) and chmod-ed (the same,
/// through setattr), over and over, between edits of `a.txt`. Every one taken back was recorded
/// after the plan was made: gc does not plan again, and afterwards `l.txt` still has its
/// newest change (its create, older than the plan, and with --keep 0s doomed but for being
/// the newest of its path), the moved-to name has nothing, and the store is whole.
#[test]
fn refused_renames_and_chmods_while_gc_plans_keep_the_newest_change() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    fs::write(dir.join("l.txt"), "locked v1\n").unwrap();
    ok(rw(&ws, &["sync"]));
    fs::write(dir.join("l.txt"), "locked v2\n").unwrap();
    three_versions(&ws);
    // chattr on the workspace's backing file, through the mount (FS_IOC_SETFLAGS).
    let chattr = std::process::Command::new("chattr")
        .arg("+i")
        .arg(dir.join("l.txt"))
        .output()
        .unwrap();
    let _immutable = Immutable(dir.join("l.txt"));
    if !chattr.status.success() {
        // Through the mount the ioctl may not pass: unmount, set it underneath, mount again.
        ws.unmount();
        let out = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir.join("l.txt"))
            .output()
            .unwrap();
        assert!(out.status.success(), "chattr +i: {out:?}");
        mount_slow(&mut ws, &[]);
    }
    let before = retracted_ids(&ws).len();
    let (mut gc, started) = gc_paused(&ws, &[]);
    let out = python(
        &dir,
        &format!(
            "import os, errno\n\
             refused = 0\n\
             for i in range(6):\n\
             \x20   with open('a.txt', 'w') as f: f.write({:?} + str(i))\n\
             \x20   try:\n\
             \x20       os.rename('l.txt', 'moved.txt')\n\
             \x20   except OSError as e:\n\
             \x20       refused += e.errno == errno.EPERM\n\
             \x20   try:\n\
             \x20       os.chmod('l.txt', 0o600 if i % 2 else 0o640)\n\
             \x20   except OSError as e:\n\
             \x20       refused += e.errno == errno.EPERM\n\
             print(refused)\n",
            a_text(9)
        ),
    );
    assert_eq!(out.trim(), "12", "the disk refused every rename and chmod");
    ok(rw(&ws, &["sync"]));
    let taken_back = retracted_ids(&ws).len() - before;
    eprintln!(
        "retracted: {:?}\nlog:\n{}",
        retracted_ids(&ws),
        ok(rw(&ws, &["log"]))
    );
    still_planning(&mut gc, started);
    let said = finished(gc);
    let took = started.elapsed();
    eprintln!("{taken_back} taken back while gc planned; gc took {took:?}: {said}");
    // 10 of the 12 in the runs so far: two refused operations record nothing at all.
    assert!(
        taken_back >= 6,
        "the refused operations were not taken back ({taken_back})"
    );
    ok(rw(&ws, &["sync"]));
    let moved = json_lines(&ok(rw(&ws, &["log", "--json", "moved.txt"])));
    assert!(
        moved.is_empty(),
        "a refused rename is in the history: {moved:?}"
    );
    assert_eq!(ok(rw(&ws, &["cat", "l.txt"])), "locked v2\n");
    store_holds(&ws, &[]);
    assert!(
        took < Duration::from_secs(10),
        "gc took {took:?}: it planned again"
    );
}

/// A build folder made, written and moved to an ignored name (`target`) while gc plans: its
/// burst, recorded after the plan, is taken back. Then a second gc, which deletes that content
/// (nothing names it), is started and the workspace unmounted while it plans (the capture cache
/// knows the file; `save_known` runs beside the gc). After a remount, without reading them:
/// the file moves out of `target`, a file recorded before is deleted and another overwritten.
/// Every change names content that reads back, and the moved file's content is its own.
#[test]
fn a_burst_taken_back_while_gc_plans_then_a_gc_racing_the_unmount() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    fs::write(dir.join("keep.txt"), a_text(11)).unwrap();
    fs::write(dir.join("gone.txt"), a_text(12)).unwrap();
    ok(rw(&ws, &["sync"]));
    let (mut gc, started) = gc_paused(&ws, &[]);
    fs::create_dir(dir.join("tbuild")).unwrap();
    fs::write(dir.join("tbuild/out.bin"), a_text(77)).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    assert!(log.contains("tbuild/out.bin"), "{log}");
    fs::rename(dir.join("tbuild"), dir.join("target")).unwrap();
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    let said = finished(gc);
    eprintln!("first gc ({:?}): {said}", started.elapsed());
    let log = ok(rw(&ws, &["log"]));
    assert!(
        !log.contains("tbuild/out.bin"),
        "the burst is not taken back: {log}"
    );
    store_holds(&ws, &[]);
    // The second gc, from outside the workspace, and the unmount while it plans.
    let mut gc = ws
        .command(&["gc", "-C", dir.to_str().unwrap(), "--keep", "0s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    still_planning(&mut gc, started);
    let unmount = ws
        .command(&["unmount", "--force", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let gc_out = gc.wait_with_output().unwrap();
    eprintln!(
        "unmount {:?}: {}; second gc {:?}: {}{}",
        unmount.status,
        String::from_utf8_lossy(&unmount.stderr),
        gc_out.status,
        String::from_utf8_lossy(&gc_out.stdout),
        String::from_utf8_lossy(&gc_out.stderr),
    );
    assert!(unmount.status.success(), "the unmount failed");
    assert!(!crate::common::is_mounted(&dir));
    ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    let second = String::from_utf8_lossy(&gc_out.stdout).into_owned();
    if !gc_out.status.success() || second.contains("and 0 blobs") {
        // The second gc did not get to delete the content: a third, in this mount, does, and
        // the next mount is the one that must not trust what it was left.
        let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
        eprintln!("third gc: {said}");
        ws.unmount();
        ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    }
    fs::rename(dir.join("target/out.bin"), dir.join("out.bin")).unwrap();
    fs::remove_file(dir.join("gone.txt")).unwrap();
    fs::write(dir.join("keep.txt"), a_text(13)).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    eprintln!("log:\n{log}");
    assert!(log.contains("out.bin"), "{log}");
    assert_eq!(ok(rw(&ws, &["cat", "out.bin"])), a_text(77));
    store_holds(&ws, &[]);
}

/// A build folder made and a file written in it before gc plans (the plan counts them), more
/// files written while it plans, then the folder moved to an ignored name: the burst taken back
/// holds changes the plan counted, so gc plans again. Meanwhile other files are edited. After
/// it the store is whole, every file outside `target` has its newest change, and a second gc,
/// then a remount and the folder's files moved out of `target` unread, name readable content.
#[test]
fn a_burst_the_plan_counted_taken_back_makes_gc_plan_again_and_the_store_holds() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    three_versions(&ws);
    fs::create_dir(dir.join("tbuild")).unwrap();
    fs::write(dir.join("tbuild/one.bin"), a_text(21)).unwrap();
    ok(rw(&ws, &["sync"]));
    let before = retracted_ids(&ws).len();
    let (mut gc, started) = gc_paused(&ws, &[]);
    fs::write(dir.join("tbuild/two.bin"), a_text(22)).unwrap();
    fs::write(dir.join("a.txt"), a_text(1)).unwrap();
    ok(rw(&ws, &["sync"]));
    fs::rename(dir.join("tbuild"), dir.join("target")).unwrap();
    fs::write(dir.join("b.txt"), a_text(2)).unwrap();
    ok(rw(&ws, &["sync"]));
    let taken_back = retracted_ids(&ws).len() - before;
    still_planning(&mut gc, started);
    let said = finished(gc);
    let took = started.elapsed();
    eprintln!("{taken_back} taken back while gc planned; gc took {took:?}: {said}");
    assert!(
        taken_back >= 3,
        "the burst was not taken back ({taken_back})"
    );
    let log = ok(rw(&ws, &["log"]));
    assert!(
        !log.contains("tbuild/"),
        "the burst is not taken back: {log}"
    );
    store_holds(&ws, &[]);
    let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
    eprintln!("second gc: {said}");
    store_holds(&ws, &[]);
    ws.unmount();
    ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    fs::rename(dir.join("target/one.bin"), dir.join("one.bin")).unwrap();
    fs::rename(dir.join("target/two.bin"), dir.join("two.bin")).unwrap();
    ok(rw(&ws, &["sync"]));
    assert_eq!(ok(rw(&ws, &["cat", "one.bin"])), a_text(21));
    assert_eq!(ok(rw(&ws, &["cat", "two.bin"])), a_text(22));
    store_holds(&ws, &[]);
}

/// A rename-away save that spans a whole gc: `a.txt` renamed to `a.txt~` (recorded), then gc
/// (not slowed) with --keep 0s, which counts the rename as the newest change of both names and
/// so lets every older change of `a.txt` go; then the save ends (a new `a.txt`, `a.txt~`
/// deleted) and the rename is taken back, after the gc. The point gc left as the oldest kept
/// (its horizon) had `a.txt` with version 3: it must still answer that, and `a.txt` must still
/// have a history whose versions read back.
#[test]
fn a_rename_away_save_spanning_a_gc_leaves_the_oldest_point_its_file() {
    let mut ws = Workspace::new();
    ws.mount();
    three_versions(&ws);
    let dir = ws.path();
    let save = crate::common::python_command(
        &dir,
        &format!(
            "import os, time\n\
             os.rename('a.txt', 'a.txt~')\n\
             time.sleep(3)\n\
             with open('a.txt', 'w') as f: f.write({:?})\n\
             os.remove('a.txt~')\n\
             print('saved')\n",
            a_text(4)
        ),
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    ok(rw(&ws, &["sync"]));
    let before = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let t = Instant::now();
    let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
    let took = t.elapsed();
    let out = save.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "saved");
    ok(rw(&ws, &["sync"]));
    let log = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let lines = |l: &[serde_json::Value]| -> Vec<String> {
        l.iter()
            .map(|c| format!("{} {} {}", c["id"], c["kind"], c["path"]))
            .collect()
    };
    eprintln!(
        "before gc: {:#?}\ngc ({took:?}): {said}\nafter the save: {:#?}\nretracted: {:?}",
        lines(&before),
        lines(&log),
        retracted_ids(&ws)
    );
    assert!(
        took < Duration::from_millis(2500),
        "gc took {took:?}: the save's end may have come before it"
    );
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(4));
    store_holds(&ws, &[]);
    let horizon: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("oldest point still kept: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no horizon in {said}"));
    let at = rw(&ws, &["cat", "a.txt", "--at", &horizon.to_string()]);
    assert!(
        at.status.success() && at.stdout == a_text(3).as_bytes(),
        "cat a.txt --at {horizon} (the horizon; a.txt had version 3): {}, {} bytes, {}",
        at.status,
        at.stdout.len(),
        String::from_utf8_lossy(&at.stderr).trim()
    );
    let listed: Vec<String> = fs::read_dir(dir.join(format!(".rewind/at/{horizon}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        listed.iter().any(|n| n == "a.txt"),
        ".rewind/at/{horizon}: {listed:?}"
    );
}

/// A backup-keeping save whose rename the plan counted: `a.txt` renamed to `a.txt~`, then gc
/// plans (paused), and meanwhile the new `a.txt` is written: the rename, counted by the plan,
/// is taken back (the save recorded as a create of the backup and a modify), so gc plans
/// again. Afterwards the store is whole, both names have their newest change, and the horizon
/// still answers `a.txt`.
#[test]
fn a_backup_save_whose_rename_the_plan_counted_makes_gc_plan_again_and_holds() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    three_versions(&ws);
    let dir = ws.path();
    let save = crate::common::python_command(
        &dir,
        &format!(
            "import os, time\n\
             os.rename('a.txt', 'a.txt~')\n\
             time.sleep(2)\n\
             with open('a.txt', 'w') as f: f.write({:?})\n\
             print('saved')\n",
            a_text(4)
        ),
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    ok(rw(&ws, &["sync"]));
    let (gc, started) = gc_paused(&ws, &[]);
    let out = save.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "saved");
    let said = finished(gc);
    let took = started.elapsed();
    ok(rw(&ws, &["sync"]));
    let log: Vec<String> = json_lines(&ok(rw(&ws, &["log", "--json"])))
        .iter()
        .map(|c| format!("{} {} {}", c["id"], c["kind"], c["path"]))
        .collect();
    eprintln!(
        "gc ({took:?}): {said}\nlog: {log:#?}\nretracted: {:?}",
        retracted_ids(&ws)
    );
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(4));
    assert_eq!(ok(rw(&ws, &["cat", "a.txt~"])), a_text(3));
    store_holds(&ws, &[]);
    let horizon: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("oldest point still kept: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no horizon in {said}"));
    let at = rw(&ws, &["cat", "a.txt", "--at", &horizon.to_string()]);
    assert!(
        at.status.success() && at.stdout == a_text(3).as_bytes(),
        "cat a.txt --at {horizon} (the horizon; a.txt had version 3): {}, {} bytes, {}",
        at.status,
        at.stdout.len(),
        String::from_utf8_lossy(&at.stderr).trim()
    );
}
