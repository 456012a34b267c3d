//! The sixteenth hostile pass (round 12), on "gc: plan without the writer lock": gc plans
//! while recording goes on, and under the writer lock keeps what was recorded, pinned or
//! unpinned meanwhile. Every attack here names, while gc's plan is paused
//! (`REWIND_TEST_SLOW_GC_PLAN`), content the plan found unreferenced, in another way the daemon
//! can: a rollback to an old point, a new file, a rename over, a hard link, `sed -i`, a file
//! of more than a chunk, a new file whose delta base is an old version, a file held open
//! across the gc; two gcs and a dry run at once; a SIGKILL during the pause. Afterwards every
//! content the store's changes, markers and turns name reads back whole from the store, the
//! counts equal a recount, and every session's summary equals a recount of `log --json`.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Workspace, noise, ok, rw, sh, wait_for};
use crate::scale::{recount, status_counts};
use rewind::store::{Hash, Query, Store};

/// How long the daemon's gcs pause between plan and commit.
pub(crate) const PAUSE_MS: u64 = 4000;

pub(crate) fn mount_slow(ws: &mut Workspace, extra: &[&str]) {
    ws.mount_with_env(
        extra,
        &[("REWIND_TEST_SLOW_GC_PLAN", &PAUSE_MS.to_string())],
    );
}

/// `rewind ARGS` started in the background from inside the workspace.
pub(crate) fn spawn(ws: &Workspace, args: &[&str]) -> Child {
    ws.command(args)
        .current_dir(ws.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for `child`, which must succeed: its stdout.
#[track_caller]
pub(crate) fn finished(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Start `rewind gc --keep 0s` (and `extra`) and wait until its plan is made and it pauses
/// (the plan of these small stores takes milliseconds).
pub(crate) fn gc_paused(ws: &Workspace, extra: &[&str]) -> (Child, Instant) {
    let mut args = vec!["gc", "--keep", "0s"];
    args.extend_from_slice(extra);
    let gc = spawn(ws, &args);
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    (gc, started)
}

/// The attack must have happened within the pause: gc still running, and time left.
#[track_caller]
pub(crate) fn still_planning(gc: &mut Child, started: Instant) {
    assert!(
        gc.try_wait().unwrap().is_none(),
        "gc ended before the attack was over"
    );
    assert!(
        started.elapsed() < Duration::from_millis(PAUSE_MS),
        "the attack took {:?}, longer than gc's pause",
        started.elapsed()
    );
}

pub(crate) fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Every content that a change (before and after), an open-episode marker or a turn's
/// conversation names reads back whole from the store (chunks and delta bases included), read
/// through a read-only instance of it. Returns how many contents were read.
pub(crate) fn every_named_content_reads_back(ws: &Workspace) -> usize {
    let store = Store::open_read_only(&ws.store()).unwrap();
    let mut named: Vec<(String, [u8; 32])> = Vec::new();
    for c in store.query(&Query::default()).unwrap() {
        for (side, s) in [("before", &c.before), ("after", &c.after)] {
            if let Some(h) = s.as_ref().and_then(|s| s.hash) {
                named.push((
                    format!(
                        "change {} {side} ({})",
                        c.id,
                        String::from_utf8_lossy(&c.path)
                    ),
                    h,
                ));
            }
        }
    }
    for (path, e) in store.open_episodes().unwrap() {
        if let Some(h) = e.before.and_then(|b| b.hash) {
            named.push((format!("marker of {}", String::from_utf8_lossy(&path)), h));
        }
    }
    for t in store.turns(None).unwrap() {
        if let Some(h) = t.conversation {
            named.push((format!("turn {}:{}", t.session, t.number), h));
        }
    }
    let broken: Vec<String> = named
        .iter()
        .filter_map(|(what, h)| {
            store
                .verify_blob(&Hash(*h))
                .err()
                .map(|e| format!("{what}: {}: {e}", Hash(*h).to_hex()))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "content named but not readable: {broken:#?}"
    );
    named.len()
}

/// Every listed version and every named content reads back from the store, and the counts
/// and session summaries equal a recount.
fn the_store_is_whole(ws: &Workspace) {
    crate::hostile13::every_listed_version_reads_back(ws);
    every_named_content_reads_back(ws);
    counts_and_sessions_hold(ws);
}

/// `status`'s counts equal a recount of the store, and every session's summary (changes,
/// first and last id and time, agents) equals a recount of `log --json`.
pub(crate) fn counts_and_sessions_hold(ws: &Workspace) {
    ok(rw(ws, &["sync"]));
    assert_eq!(
        status_counts(ws),
        recount(&ws.store()),
        "status vs a recount"
    );
    let changes = json_lines(&ok(rw(ws, &["log", "--json"])));
    let sessions = json_lines(&ok(rw(ws, &["sessions", "--json"])));
    let mut wrong = Vec::new();
    for s in &sessions {
        let mine: Vec<&serde_json::Value> = changes
            .iter()
            .filter(|c| c["session"] == s["name"])
            .collect();
        let first = mine.iter().min_by_key(|c| c["id"].as_u64());
        let last = mine.iter().max_by_key(|c| c["id"].as_u64());
        let mut agents: Vec<&str> = mine.iter().filter_map(|c| c["agent"].as_str()).collect();
        agents.sort();
        agents.dedup();
        let want = (
            mine.len() as u64,
            first.map(|c| (c["id"].clone(), c["time"].clone())),
            last.map(|c| (c["id"].clone(), c["time"].clone())),
            agents,
        );
        let mut got_agents: Vec<&str> = s["agents"]
            .as_array()
            .map(|a| a.iter().filter_map(|a| a.as_str()).collect())
            .unwrap_or_default();
        got_agents.sort();
        let got = (
            s["changes"].as_u64().unwrap_or(u64::MAX),
            Some((s["first_id"].clone(), s["first_time"].clone())),
            Some((s["last_id"].clone(), s["last_time"].clone())),
            got_agents,
        );
        if want != got {
            wrong.push(format!("{}: summary {got:?}, log {want:?}", s["name"]));
        }
    }
    let listed: u64 = sessions
        .iter()
        .map(|s| s["changes"].as_u64().unwrap_or(0))
        .sum();
    assert!(wrong.is_empty(), "session summaries: {wrong:#?}");
    assert_eq!(listed, changes.len() as u64, "sessions list every change");
}

/// Versions 1 to 3 of `a.txt` and of a 2 MiB `big.bin` (chunked), each a change of its own;
/// gc --keep 0s removes versions 1 and 2. Returns big.bin's three versions.
pub(crate) fn three_versions(ws: &Workspace) -> Vec<Vec<u8>> {
    let dir = ws.path();
    let mut bigs = Vec::new();
    for v in 1..=3u64 {
        // Text long enough to be stored as a delta on the version before.
        let text: String = (0..400)
            .map(|i| format!("line {i} of version {v}\n"))
            .collect();
        fs::write(dir.join("a.txt"), text).unwrap();
        let big = noise(2 << 20, v);
        fs::write(dir.join("big.bin"), &big).unwrap();
        bigs.push(big);
        ok(rw(ws, &["sync"]));
    }
    bigs
}

pub(crate) fn a_text(v: u64) -> String {
    (0..400)
        .map(|i| format!("line {i} of version {v}\n"))
        .collect()
}

/// The id of the oldest change of `path` that `log --json` lists.
fn first_change_of(ws: &Workspace, path: &str) -> u64 {
    json_lines(&ok(rw(ws, &["log", "--json", path])))
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .min()
        .unwrap()
}

/// A rollback to a point gc is about to remove, made while gc plans: the rollback restores
/// version 1 of a text file and of a chunked file (content only the doomed changes name), and
/// records that. gc must keep that content (the rollback's changes name it), so the files, their
/// versions and every content the store names read back afterwards.
#[test]
fn a_rollback_to_a_doomed_point_made_while_gc_plans_keeps_what_it_restored() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let bigs = three_versions(&ws);
    let point = first_change_of(&ws, "big.bin").max(first_change_of(&ws, "a.txt"));
    let (mut gc, started) = gc_paused(&ws, &[]);
    let said = ok(rw(&ws, &["rollback", "--to", &point.to_string()]));
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    let out = finished(gc);
    assert!(out.contains("removed"), "{out}");
    ok(rw(&ws, &["sync"]));
    let dir = ws.path();
    assert_eq!(
        fs::read_to_string(dir.join("a.txt")).unwrap(),
        a_text(1),
        "{said}"
    );
    assert!(
        fs::read(dir.join("big.bin")).unwrap() == bigs[0],
        "big.bin is not version 1"
    );
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(1));
    let read = crate::hostile13::every_listed_version_reads_back(&ws);
    assert!(read >= 4, "{read} versions read");
    let named = every_named_content_reads_back(&ws);
    assert!(named >= 4, "{named}");
    counts_and_sessions_hold(&ws);
}

/// While gc plans, doomed content is named again in every way a shell can: a new file with
/// version 1's text, a rename over a file, a hard link to a file with version 1's content,
/// `sed -i` that makes version 1 again, version 1 of the chunked file written to a new path
/// (its chunks and manifest reused), a new file with another name of the same extension whose
/// delta base may be an old version, and a file opened for writing before gc and closed after
/// it with version 1's text. Every content named reads back afterwards.
#[test]
fn doomed_content_named_again_in_every_way_while_gc_plans_stays_whole() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let bigs = three_versions(&ws);
    let dir = ws.path();
    fs::write(dir.join("over.txt"), "to be replaced\n").unwrap();
    fs::write(
        dir.join("sed.txt"),
        a_text(3).replace("version 3", "version 1x"),
    )
    .unwrap();
    fs::write(dir.join("held.txt"), "held before\n").unwrap();
    ok(rw(&ws, &["sync"]));
    // Held open for writing across the whole gc: its episode's marker is there all along.
    let mut held = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("held.txt"))
        .unwrap();
    let (mut gc, started) = gc_paused(&ws, &[]);
    fs::write(dir.join("plain-v1.txt"), a_text(1)).unwrap();
    fs::write(dir.join("tmp-v1"), a_text(1)).unwrap();
    fs::rename(dir.join("tmp-v1"), dir.join("over.txt")).unwrap();
    fs::write(dir.join("linked.txt"), a_text(2)).unwrap();
    fs::hard_link(dir.join("linked.txt"), dir.join("link2.txt")).unwrap();
    sh(&dir, "sed -i 's/version 1x/version 1/' sed.txt");
    fs::write(dir.join("big-v1.bin"), &bigs[0]).unwrap();
    // A new .txt path: its delta base may be a recent .txt content, version 1 or 2 of a.txt.
    fs::write(
        dir.join("similar.txt"),
        a_text(2).replace("line 7 of", "line seven of"),
    )
    .unwrap();
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    let out = finished(gc);
    assert!(out.contains("removed"), "{out}");
    {
        use std::io::Write;
        held.write_all(a_text(1).as_bytes()).unwrap();
    }
    drop(held);
    ok(rw(&ws, &["sync"]));
    for (path, want) in [
        ("plain-v1.txt", a_text(1)),
        ("over.txt", a_text(1)),
        ("linked.txt", a_text(2)),
        ("link2.txt", a_text(2)),
        ("sed.txt", a_text(3).replace("version 3", "version 1")),
        (
            "similar.txt",
            a_text(2).replace("line 7 of", "line seven of"),
        ),
        ("held.txt", a_text(1)),
    ] {
        assert_eq!(ok(rw(&ws, &["cat", path])), want, "{path}");
    }
    let read = crate::hostile13::every_listed_version_reads_back(&ws);
    assert!(read >= 8, "{read} versions read");
    every_named_content_reads_back(&ws);
    assert!(
        fs::read(
            dir.join(".rewind/versions/big-v1.bin")
                .join(first_change_of(&ws, "big-v1.bin").to_string())
        )
        .unwrap()
            == bigs[0]
    );
    counts_and_sessions_hold(&ws);
}

/// Two gcs and a dry run queued behind each other, with `rewind run --session` writers naming
/// what each one's plan dooms while it pauses: the first gc's plan dooms version 1 of `a.txt`,
/// written again to new files (in new sessions) during its pause; the second's dooms the older
/// versions of `w.txt` made during the first's pause, written again during the second's pause
/// while a dry run waits behind it. Afterwards the store holds everything it names and the
/// summaries equal a recount.
#[test]
fn two_gcs_and_a_dry_run_queued_beside_new_sessions_keep_the_store_whole() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    three_versions(&ws);
    let dir = ws.path();
    let run = |session: &str, script: &str| {
        let out = ws
            .command(&["run", "--session", session, "--", "sh", "-c", script])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let (mut a, started) = gc_paused(&ws, &[]);
    // Queued behind `a` (gc_lock).
    let b = spawn(&ws, &["gc", "--keep", "0s", "--max-size", "1K"]);
    for i in 0..3 {
        fs::write(dir.join(format!("v1-{i}.txt")), a_text(1)).unwrap();
        run(&format!("writer-{i}"), &format!("cp v1-{i}.txt s{i}.txt"));
    }
    for v in 1..=3 {
        run("w-writer", &format!("printf 'w %s\\n' {v} > w.txt"));
        ok(rw(&ws, &["sync"]));
    }
    still_planning(&mut a, started);
    let said_a = finished(a);
    // `b` plans now (milliseconds) and pauses.
    std::thread::sleep(Duration::from_millis(1000));
    let b_started = Instant::now();
    let dry = spawn(&ws, &["gc", "--keep", "0s", "--dry-run"]);
    run(
        "w-copier",
        "printf 'w %s\\n' 1 > w1.txt; printf 'w %s\\n' 2 > w2.txt",
    );
    fs::write(dir.join("v1-late.txt"), a_text(1)).unwrap();
    ok(rw(&ws, &["sync"]));
    assert!(
        b_started.elapsed() < Duration::from_millis(PAUSE_MS - 1500),
        "the second round took {:?}",
        b_started.elapsed()
    );
    let said_b = finished(b);
    let said_dry = finished(dry);
    eprintln!("gc a: {said_a}\ngc b: {said_b}\ndry run: {said_dry}");
    assert!(said_b.contains("removed"), "{said_b}");
    ok(rw(&ws, &["sync"]));
    for i in 0..3 {
        assert_eq!(ok(rw(&ws, &["cat", &format!("s{i}.txt")])), a_text(1));
    }
    assert_eq!(ok(rw(&ws, &["cat", "w1.txt"])), "w 1\n");
    assert_eq!(ok(rw(&ws, &["cat", "w2.txt"])), "w 2\n");
    assert_eq!(ok(rw(&ws, &["cat", "v1-late.txt"])), a_text(1));
    the_store_is_whole(&ws);
}

/// Rename-away saves (vim's: `a.txt` renamed to `a.txt~`, the new content written as `a.txt`,
/// the backup deleted, by one process) over and over while gc plans: each folds its rename into
/// a modify by taking the rename back. A change taken back that the plan never saw (recorded
/// while it planned) changes nothing in the plan, so gc does not plan again: it ends after one
/// pause (it took four, 16 s, and held a save up for 4 s, when any change taken back made it
/// plan again). The saves write version 1 (content the plan dooms). The saves all succeed,
/// none waits for gc, and the store is whole.
#[test]
fn rename_away_saves_all_through_gc_neither_wait_nor_make_it_plan_again() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    three_versions(&ws);
    let dir = ws.path();
    let (mut gc, started) = gc_paused(&ws, &[]);
    let mut saves = 0;
    let mut slowest = Duration::ZERO;
    while gc.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "gc did not end in 60 s"
        );
        let t = Instant::now();
        let out = crate::common::python(
            &dir,
            &format!(
                "import os\n\
                 os.rename('a.txt', 'a.txt~')\n\
                 with open('a.txt', 'w') as f: f.write({:?})\n\
                 os.remove('a.txt~')\n\
                 print('saved')\n",
                if saves % 2 == 0 { a_text(1) } else { a_text(2) }
            ),
        );
        assert_eq!(out.trim(), "saved");
        slowest = slowest.max(t.elapsed());
        saves += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    let took = started.elapsed();
    let said = finished(gc);
    eprintln!("{saves} saves, the slowest {slowest:?}; gc took {took:?}: {said}");
    assert!(
        took < Duration::from_secs(10),
        "gc took {took:?}: it planned again"
    );
    assert!(
        slowest < Duration::from_secs(2),
        "a save waited {slowest:?}"
    );
    ok(rw(&ws, &["sync"]));
    let want = if saves % 2 == 1 { a_text(1) } else { a_text(2) };
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), want);
    let kinds: Vec<String> = json_lines(&ok(rw(&ws, &["log", "--json", "a.txt~"])))
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.is_empty(), "the backup is in the history: {kinds:?}");
    the_store_is_whole(&ws);
}

/// A new file's create is held back (its id set aside when it was made); then another file
/// gets two versions; gc plans (the create not recorded yet), dooms the older of those, whose
/// id is above the create's, and the create is recorded while gc pauses. The create then has an
/// id below gc's horizon, the oldest point still answered (as the newest change of a path kept
/// from before it has): its version still reads back through `.rewind/versions/`, the oldest
/// point kept has the file (`cat --at`, `.rewind/at/`), and its session's summary is whole.
#[test]
fn a_held_back_create_recorded_while_gc_plans_below_its_horizon() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    fs::write(dir.join("o.txt"), "o 0\n").unwrap();
    ok(rw(&ws, &["sync"]));
    // Held back for 500 ms: made first, recorded last.
    fs::write(dir.join("new.txt"), "new\n").unwrap();
    fs::write(dir.join("o.txt"), "o 1\n").unwrap();
    fs::write(dir.join("o.txt"), "o 2\n").unwrap();
    let gc = spawn(&ws, &["gc", "--keep", "0s"]);
    std::thread::sleep(Duration::from_millis(1500));
    let said = finished(gc);
    ok(rw(&ws, &["sync"]));
    let log = json_lines(&ok(rw(&ws, &["log", "--json"])));
    let lines: Vec<String> = log
        .iter()
        .map(|c| format!("{} {} {}", c["id"], c["kind"], c["path"]))
        .collect();
    eprintln!("gc: {said}\nlog: {lines:#?}");
    let create = log
        .iter()
        .find(|c| c["path"] == "new.txt")
        .unwrap_or_else(|| panic!("no change of new.txt: {lines:#?}"));
    let id = create["id"].as_u64().unwrap();
    assert_eq!(ok(rw(&ws, &["cat", "new.txt"])), "new\n");
    the_store_is_whole(&ws);
    // Its own id is below the horizon, as the newest change of a path kept from before it is:
    // refused, as they are. The oldest point kept has the file.
    let horizon: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("oldest point still kept: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no horizon in {said}"));
    assert!(
        id < horizon,
        "the create {id}, the horizon {horizon}: no longer below it"
    );
    assert_eq!(
        ok(rw(&ws, &["cat", "new.txt", "--at", &horizon.to_string()])),
        "new\n"
    );
    assert!(
        fs::read_dir(dir.join(format!(".rewind/at/{horizon}")))
            .unwrap()
            .any(|e| e.unwrap().file_name() == "new.txt")
    );
}

/// The daemon SIGKILLed during gc's pause (its plan made, nothing written), with writes made
/// during the pause naming doomed content; a remount: every content named reads back, the
/// counts equal a recount, the summaries equal a recount of the log, and a later gc (not
/// slowed) leaves the store whole too.
#[test]
fn a_sigkill_while_gc_plans_then_a_remount_leaves_the_store_whole() {
    use crate::trust::{exited, signal};
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let bigs = three_versions(&ws);
    let dir = ws.path();
    let pid = crate::common::daemon_pid(&ws) as u32;
    let (mut gc, started) = gc_paused(&ws, &[]);
    fs::write(dir.join("v1.txt"), a_text(1)).unwrap();
    fs::write(dir.join("big-v1.bin"), &bigs[0]).unwrap();
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    signal(pid, libc::SIGKILL);
    assert!(wait_for(30, || exited(pid)), "the daemon did not die");
    let _ = gc.wait();
    let _ = Command::new("fusermount3").arg("-uz").arg(&dir).status();
    ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    ok(rw(&ws, &["sync"]));
    assert_eq!(ok(rw(&ws, &["cat", "v1.txt"])), a_text(1));
    the_store_is_whole(&ws);
    ok(rw(&ws, &["gc", "--keep", "0s"]));
    the_store_is_whole(&ws);
    assert!(fs::read(dir.join("big-v1.bin")).unwrap() == bigs[0]);
}

/// Wait for `threads` until `secs`; panics naming what has not ended (a deadlock, or a write
/// that waits for ever).
fn join_within<T>(secs: u64, threads: Vec<(String, std::thread::JoinHandle<T>)>) -> Vec<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while threads.iter().any(|(_, t)| !t.is_finished()) {
        if Instant::now() > deadline {
            let stuck: Vec<&String> = threads
                .iter()
                .filter(|(_, t)| !t.is_finished())
                .map(|(n, _)| n)
                .collect();
            panic!("not ended after {secs} s: {stuck:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    threads
        .into_iter()
        .map(|(_, t)| t.join().unwrap())
        .collect()
}

/// gcs one after another (each pausing 30 ms between plan and commit) for 10 s, beside three
/// writers that cycle their files through four versions (so every gc dooms versions the
/// writers write again), save by rename over, make and remove hard links, write a file of more
/// than a chunk in four versions, and save the rename-away way (taking changes back). Nothing
/// waits for ever, every gc succeeds, and afterwards the store holds everything it names,
/// the files read back as the workspace has them, and the counts and summaries hold.
#[test]
fn gcs_in_a_row_beside_writers_naming_old_content_keep_the_store_whole() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_GC_PLAN", "30")]);
    let dir = ws.path();
    let until = Instant::now() + Duration::from_secs(10);
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let dir = dir.clone();
        threads.push((
            format!("writer {t}"),
            std::thread::spawn(move || {
                let mut i = 0u64;
                while Instant::now() < until {
                    let v = i % 4;
                    let text = a_text(v + 10 * t);
                    fs::write(dir.join(format!("f{t}.txt")), &text).unwrap();
                    if i.is_multiple_of(3) {
                        fs::write(dir.join(format!("r{t}.tmp")), &text).unwrap();
                        fs::rename(dir.join(format!("r{t}.tmp")), dir.join(format!("r{t}.txt")))
                            .unwrap();
                    }
                    if i.is_multiple_of(5) {
                        let link = dir.join(format!("l{t}-{i}.txt"));
                        fs::hard_link(dir.join(format!("f{t}.txt")), &link).unwrap();
                        if i >= 5 {
                            let _ = fs::remove_file(dir.join(format!("l{t}-{}.txt", i - 5)));
                        }
                    }
                    if i.is_multiple_of(7) {
                        fs::write(
                            dir.join(format!("big{t}.bin")),
                            noise((1 << 20) + 4096, v + 100 * t),
                        )
                        .unwrap();
                    }
                    if i.is_multiple_of(11) {
                        let out = crate::common::python(
                            &dir,
                            &format!(
                                "import os\n\
                                 os.rename('f{t}.txt', 'f{t}.txt~')\n\
                                 with open('f{t}.txt', 'w') as f: f.write({:?})\n\
                                 os.remove('f{t}.txt~')\n\
                                 print('saved')\n",
                                a_text((v + 1) % 4 + 10 * t)
                            ),
                        );
                        assert_eq!(out.trim(), "saved");
                    }
                    i += 1;
                }
                i
            }),
        ));
    }
    let gcs = {
        let data = dir.parent().unwrap().join("data");
        let ws_cmd = move || {
            let mut c = Command::new(crate::common::REWIND);
            c.env("XDG_DATA_HOME", &data)
                .env("PATH", crate::common::path_with_rewind())
                .env_remove("REWIND_SESSION")
                .env_remove("REWIND_AGENT");
            c
        };
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut runs = 0;
            let mut slowest = Duration::ZERO;
            while Instant::now() < until {
                let t = Instant::now();
                let out = ws_cmd()
                    .args(["gc", "--keep", "0s"])
                    .current_dir(&dir)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "gc {runs}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                slowest = slowest.max(t.elapsed());
                runs += 1;
            }
            (runs, slowest)
        })
    };
    let rounds = join_within(90, threads);
    let (runs, slowest) = join_within(90, vec![("gcs".to_owned(), gcs)])
        .pop()
        .unwrap();
    eprintln!("writers' rounds {rounds:?}; {runs} gcs, the slowest {slowest:?}");
    assert!(runs >= 3, "{runs} gcs");
    ok(rw(&ws, &["sync"]));
    let mut wrong = Vec::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with('.') {
            continue;
        }
        let on_disk = fs::read(dir.join(&name)).unwrap();
        let out = rw(&ws, &["cat", &name]);
        if !out.status.success() || out.stdout != on_disk {
            wrong.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "files not as the history has them: {wrong:#?}"
    );
    the_store_is_whole(&ws);
}

fn lib_text(v: u64) -> String {
    (0..300)
        .map(|i| {
            format!(
                "    let value_{i} = compute({i}, \"{i:x}\"); // {}\n",
                i * v % 7
            )
        })
        .collect()
}

/// `gc --repack` (both its sweeps pause between plan and commit, and the repack between them
/// rewrites older versions as deltas on newer ones) while a writer goes on all through it:
/// `a.txt` gets new versions cycling through old ones (each stored as a delta on the newest,
/// which the repack may make a base too), old versions are written to new files, and version 1
/// of the chunked file comes back, while the repack rewrites `lib.rs`'s older versions.
/// Afterwards everything named reads back. (Old versions of `lib.rs` copied to new paths
/// instead make the repack rewrite nothing: every version is then another path's head.)
#[test]
fn gc_repack_beside_a_writer_cycling_old_versions_keeps_the_store_whole() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let bigs = three_versions(&ws);
    let dir = ws.path();
    // A history a repack stores smaller (as `repack::a_mounted_gc_repacks_...` makes it).
    for v in 0..8 {
        fs::write(dir.join("lib.rs"), lib_text(v)).unwrap();
        ok(rw(&ws, &["sync"]));
    }
    let mut gc = spawn(&ws, &["gc", "--keep", "3650d", "--repack"]);
    let started = Instant::now();
    let mut i = 0u64;
    while gc.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "gc --repack ran 60 s"
        );
        let v = 1 + i % 4;
        fs::write(dir.join("a.txt"), a_text(v)).unwrap();
        fs::write(dir.join(format!("c{i}.txt")), a_text(1 + (i + 2) % 4)).unwrap();
        if i == 3 {
            fs::write(dir.join("big.bin"), &bigs[0]).unwrap();
        }
        ok(rw(&ws, &["sync"]));
        i += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let said = finished(gc);
    eprintln!(
        "{i} rounds during gc --repack ({:?}): {said}",
        started.elapsed()
    );
    assert!(i >= 10, "{i} rounds");
    assert!(said.contains("repacked"), "{said}");
    ok(rw(&ws, &["sync"]));
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(1 + (i - 1) % 4));
    assert!(fs::read(dir.join("big.bin")).unwrap() == bigs[0]);
    the_store_is_whole(&ws);
    // And once more, not slowed: what the first left is still whole after a gc that removes.
    ok(rw(&ws, &["gc", "--keep", "0s", "--repack"]));
    the_store_is_whole(&ws);
}

/// `rewind unmount --force` while gc pauses between its plan and its commit (a plain unmount
/// is refused: gc's request through `.rewind/ctl` keeps the mount busy), right after a new
/// file with doomed content (its create perhaps still held back) and a chunked one: the
/// unmount and the gc both end (whatever the gc says), and after a remount the store is
/// whole, the counts and summaries hold, and the files read back.
#[test]
fn an_unmount_while_gc_plans_leaves_the_store_whole() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let bigs = three_versions(&ws);
    let dir = ws.path();
    // Started outside the workspace (a process whose folder is in it keeps the mount busy).
    let mut gc = ws
        .command(&["gc", "-C", dir.to_str().unwrap(), "--keep", "0s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    fs::write(dir.join("v1.txt"), a_text(1)).unwrap();
    fs::write(dir.join("big-v1.bin"), &bigs[0]).unwrap();
    still_planning(&mut gc, started);
    let t = Instant::now();
    let unmount = ws
        .command(&["unmount", "--force", dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = join_within(
        60,
        vec![
            (
                "unmount".to_owned(),
                std::thread::spawn(move || unmount.wait_with_output().unwrap()),
            ),
            (
                "gc".to_owned(),
                std::thread::spawn(move || gc.wait_with_output().unwrap()),
            ),
        ],
    );
    eprintln!(
        "after {:?}: unmount {:?}: {}; gc {:?}: {}{}",
        t.elapsed(),
        out[0].status,
        String::from_utf8_lossy(&out[0].stderr),
        out[1].status,
        String::from_utf8_lossy(&out[1].stdout),
        String::from_utf8_lossy(&out[1].stderr),
    );
    assert!(out[0].status.success(), "the unmount failed");
    assert!(!crate::common::is_mounted(&dir));
    ws.mount_with_env(&[] as &[&str], &[] as &[(&str, &str)]);
    ok(rw(&ws, &["sync"]));
    assert_eq!(ok(rw(&ws, &["cat", "v1.txt"])), a_text(1));
    assert!(fs::read(dir.join("big-v1.bin")).unwrap() == bigs[0]);
    the_store_is_whole(&ws);
}

/// What the mount knows to be stored outlives a gc that deletes it. A new folder's file is
/// recorded (its content stored, and the capture cache knows the file has it), then the folder
/// is renamed to an ignored name (`target`, as cargo moves its build folder into place): what
/// was recorded of it is taken back, so its content is referred to by nothing, and gc removes
/// it. The unmount leaves the capture cache for the next mount (`save_known`), the file still
/// as it was. After a remount the file is renamed out of the ignored folder: the file's create must
/// name content the store has (read again, or stored again).
#[test]
fn content_gc_removed_is_not_taken_as_stored_by_the_next_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    fs::create_dir(dir.join("tbuild")).unwrap();
    fs::write(dir.join("tbuild/out.bin"), a_text(77)).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    assert!(log.contains("tbuild/out.bin"), "{log}");
    fs::rename(dir.join("tbuild"), dir.join("target")).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    assert!(
        !log.contains("tbuild/out.bin"),
        "the burst is not taken back: {log}"
    );
    let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
    assert!(
        !said.contains("and 0 blobs"),
        "gc removed no content: {said}"
    );
    ws.unmount();
    ws.mount();
    fs::rename(dir.join("target/out.bin"), dir.join("out.bin")).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    assert!(log.contains("out.bin"), "{log}");
    every_named_content_reads_back(&ws);
    assert_eq!(ok(rw(&ws, &["cat", "out.bin"])), a_text(77));
}

/// The same within one mount (no unmount between the gc and the rename): the capture cache
/// sees that a gc deleted content since (`sweeps`), and the file is read again.
#[test]
fn content_gc_removed_is_read_again_within_the_same_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    fs::create_dir(dir.join("tbuild")).unwrap();
    fs::write(dir.join("tbuild/out.bin"), a_text(77)).unwrap();
    ok(rw(&ws, &["sync"]));
    fs::rename(dir.join("tbuild"), dir.join("target")).unwrap();
    ok(rw(&ws, &["sync"]));
    let said = ok(rw(&ws, &["gc", "--keep", "0s"]));
    assert!(
        !said.contains("and 0 blobs"),
        "gc removed no content: {said}"
    );
    fs::rename(dir.join("target/out.bin"), dir.join("out.bin")).unwrap();
    ok(rw(&ws, &["sync"]));
    let log = ok(rw(&ws, &["log"]));
    eprintln!("gc: {said}\nlog:\n{log}");
    assert!(log.contains("out.bin"), "{log}");
    every_named_content_reads_back(&ws);
    assert_eq!(ok(rw(&ws, &["cat", "out.bin"])), a_text(77));
}

/// `git checkout` of an old commit while gc plans: git writes back versions 1 of `a.txt` and
/// of the chunked `big.bin`, which gc's plan dooms (git's own copy is in `.git`, which is not
/// recorded). Afterwards both files, their versions and every content named read back.
#[test]
fn a_git_checkout_of_doomed_versions_while_gc_plans_keeps_them() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    sh(
        &dir,
        "git init -q . && git config user.email t@t && git config user.name t",
    );
    let mut bigs = Vec::new();
    for v in 1..=3u64 {
        fs::write(dir.join("a.txt"), a_text(v)).unwrap();
        let big = noise(2 << 20, v);
        fs::write(dir.join("big.bin"), &big).unwrap();
        bigs.push(big);
        sh(
            &dir,
            &format!("git add a.txt big.bin && git commit -qm v{v}"),
        );
        ok(rw(&ws, &["sync"]));
    }
    let (mut gc, started) = gc_paused(&ws, &[]);
    sh(&dir, "git checkout -q HEAD~2 -- a.txt big.bin");
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    let said = finished(gc);
    assert!(said.contains("removed"), "{said}");
    ok(rw(&ws, &["sync"]));
    assert_eq!(ok(rw(&ws, &["cat", "a.txt"])), a_text(1));
    let big = rw(&ws, &["cat", "big.bin"]);
    assert!(big.status.success() && big.stdout == bigs[0], "big.bin");
    the_store_is_whole(&ws);
}

/// A turn begun before gc plans and ended while it pauses, its transcript kept as the turn's
/// conversation then (stored and named by the turn after the plan read the turns), beside a
/// write of doomed content in the turn's session. The conversation and everything else named
/// read back after the gc.
#[test]
fn a_turn_ended_while_gc_plans_keeps_its_conversation() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    three_versions(&ws);
    let dir = ws.path();
    let home = tempfile::tempdir().unwrap();
    let transcript = home.path().join(".claude/projects/-ws/t1.jsonl");
    fs::create_dir_all(transcript.parent().unwrap()).unwrap();
    let said = |role: &str, text: &str| {
        serde_json::json!({"type": role, "message": {"role": role, "content": text}}).to_string()
    };
    fs::write(
        &transcript,
        format!(
            "{}\n{}\n",
            said("user", "bring version 1 back"),
            said("assistant", "done")
        ),
    )
    .unwrap();
    let h = [("HOME", home.path().to_str().unwrap())];
    ok(crate::common::rw_env(
        &ws,
        &["turn", "begin", "--session", "s1", "--agent", "claude"],
        &h,
    ));
    let (mut gc, started) = gc_paused(&ws, &[]);
    ok(crate::common::rw_env(
        &ws,
        &[
            "run",
            "--session",
            "s1",
            "--agent",
            "claude",
            "--",
            "cp",
            "a.txt",
            "copy.txt",
        ],
        &h,
    ));
    fs::write(dir.join("v1.txt"), a_text(1)).unwrap();
    ok(crate::common::rw_env(
        &ws,
        &[
            "turn",
            "end",
            "--session",
            "s1",
            "--transcript",
            transcript.to_str().unwrap(),
        ],
        &h,
    ));
    let mut kept = None;
    for _ in 0..100 {
        let shown = json_lines(&ok(rw(&ws, &["turns", "--show", "s1:1", "--json"])));
        if let Some(c) = shown[0]["conversation"].as_str() {
            kept = Some(c.to_owned());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    still_planning(&mut gc, started);
    let kept = kept.expect("the conversation was not kept while gc paused");
    assert!(kept.contains("bring version 1 back"), "{kept}");
    let out = finished(gc);
    assert!(out.contains("removed"), "{out}");
    ok(rw(&ws, &["sync"]));
    let shown = json_lines(&ok(rw(&ws, &["turns", "--show", "s1:1", "--json"])));
    assert_eq!(shown[0]["conversation"].as_str(), Some(kept.as_str()));
    let named = every_named_content_reads_back(&ws);
    assert!(named > 3, "{named}");
    counts_and_sessions_hold(&ws);
}

/// While gc plans: a session all of whose changes the plan dooms records a new one (its
/// summary must then count only that), and a file is written back to a doomed version while
/// open and unlinked while still open (its modify and its delete both name that version).
#[test]
fn a_doomed_session_records_again_and_a_file_is_deleted_open_while_gc_plans() {
    let mut ws = Workspace::new();
    mount_slow(&mut ws, &[]);
    let dir = ws.path();
    let run = |session: &str, agent: &str, script: &str| {
        let out = ws
            .command(&[
                "run",
                "--session",
                session,
                "--agent",
                agent,
                "--",
                "sh",
                "-c",
                script,
            ])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    // Every change of `old` is followed by a later one of its path, in another session.
    run("old", "codex", "printf 'old 1\\n' > f.txt");
    ok(rw(&ws, &["sync"]));
    run("new", "claude", "printf 'new 1\\n' > f.txt");
    fs::write(dir.join("d.txt"), a_text(1)).unwrap();
    ok(rw(&ws, &["sync"]));
    fs::write(dir.join("d.txt"), a_text(2)).unwrap();
    ok(rw(&ws, &["sync"]));
    let (mut gc, started) = gc_paused(&ws, &[]);
    run("old", "cursor", "printf 'old again\\n' > g.txt");
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(dir.join("d.txt"))
            .unwrap();
        f.write_all(a_text(1).as_bytes()).unwrap();
        fs::remove_file(dir.join("d.txt")).unwrap();
        f.write_all(b"after the unlink\n").unwrap();
    }
    ok(rw(&ws, &["sync"]));
    still_planning(&mut gc, started);
    let said = finished(gc);
    assert!(said.contains("session old"), "{said}");
    ok(rw(&ws, &["sync"]));
    let sessions = json_lines(&ok(rw(&ws, &["sessions", "--json"])));
    let old = sessions
        .iter()
        .find(|s| s["name"] == "old")
        .unwrap_or_else(|| panic!("no session old: {sessions:?}"));
    assert_eq!(old["changes"], 1, "{old}");
    assert_eq!(old["agents"], serde_json::json!(["cursor"]), "{old}");
    let deleted: Vec<serde_json::Value> = json_lines(&ok(rw(&ws, &["log", "--json", "d.txt"])));
    let last = deleted.last().unwrap();
    assert_eq!(last["kind"], "delete", "{deleted:?}");
    the_store_is_whole(&ws);
}
