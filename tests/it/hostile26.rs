//! The twenty-sixth hostile pass, on 711bd3d: every id is handed out under the journal's
//! `deferred` lock, a turn's bound is taken and the turn switched under it (`at_point`), and
//! a change is labelled again with its session's turn (and newest tool call) as its id is
//! handed out (`label_now`; an id set aside notes it, `take_label`).
//!
//! Each attack races operations against bounds (exchanges, renames, hard links, rm -rf of
//! trees, held-back creates and saves-by-rename by a background process of the agent), checks
//! a change's label against its id (`hostile24::misplaced`), its tool call against its turn,
//! and that `log --turn`, `turns`, `diff --turn`, `rollback --turn`/`--to-turn` (preview and
//! run) agree; a turn switched while the store refuses writes; SIGKILL right after a bound;
//! hooks and `.rewind/events` readers during a big rollback.
//!
//! `misplaced_files` checks both ways: a change labelled N has its id in N's bounds (as
//! `hostile24::misplaced`), and, since every id is now handed out with the session's turn of
//! that moment, a change of the session whose id is in N's bounds is labelled N.
//!
//! Held at 711bd3d: exchanges (files and folders) of open files across turns, a background
//! tree churn (mkdir, hard links, saves by rename, exchanges, rm -rf, deletes of open files)
//! across twelve quick turns with tool calls, edits closed just after prompts and tool calls
//! (and `.rewind/events` gives the labels `log` has), hard links and folder renames around
//! open names, saves by rename across bounds, prompts without Stops, SessionEnd with a
//! background writer, checkpoints in a loop, rollbacks run by the agent while its turns
//! switch, hooks from many threads during a big rollback, during gc and with stopped events
//! readers (no deadlock, no hook gave up), SIGKILL right after a bound with held creates.
//!
//! Failed at 711bd3d, each with what it showed, and passing since: a turn switch the refusing
//! store fails (also right after a refused cut of an open file under 16 MiB: the refusal
//! outlasts the cut) (`Turns::end`/`begin` dropped or skipped the open turn, then `put_turn` was
//! refused and never retried: a Stop left turn 1 open in `turns` for good, and open again after
//! a remount; a prompt began no turn) -- now a turn's record is written from the store's
//! reserve, and a turn whose record cannot be written at all stays open in the daemon as in
//! the store; and changes recovered after a SIGKILL got fresh ids and were relabelled by
//! `label_now` with the turn open at recovery (no turn, or a reopened turn 2, whose rollback
//! would then undo turn 1's work) -- now an edit's marker notes the id set aside at its close,
//! which the recovery records it with, and recovered changes keep their marker's label.

use std::fs;
use std::io::BufRead;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::sync;
use crate::common::{Workspace, daemon_pid, path_with_rewind, python_command, rw, rw_ok, sh};
use crate::hostile18::lines;
use crate::hostile24::{PY, SESSION, agent, data_home, misplaced, mounted, turn_log, turns};
use crate::hostile25::{bounds, paths, planned};
use crate::record::log;

/// `hostile24::misplaced`, less its complaints about `turns --json`'s file count, which
/// counts files and not folders: those are checked here with the folders left out (a path
/// that another listed path is below).
fn misplaced_files(ws: &Workspace) -> (Vec<String>, String) {
    let (wrong, what) = misplaced(ws);
    let mut out: Vec<String> = wrong
        .into_iter()
        .filter(|w| !w.contains("`turns --json` says"))
        .collect();
    // The other way round: since 711bd3d every id is handed out with the session's turn of
    // that moment, so a change of the session whose id is within turn N's bounds is turn
    // N's, and one labelled no turn has an id in no turn's bounds.
    let ts = turns(ws);
    for c in log(ws).iter().filter(|c| c["session"] == SESSION) {
        let id = c["id"].as_u64().unwrap();
        let inside = ts.iter().find(|t| {
            id > t["start_id"].as_u64().unwrap() && t["end_id"].as_u64().is_none_or(|e| id <= e)
        });
        if let Some(t) = inside
            && c["turn"] != t["turn"]
        {
            out.push(format!(
                "#{id} {} {} labelled turn {} within turn {}'s bounds",
                c["kind"].as_str().unwrap_or_default(),
                c["path"].as_str().unwrap_or_default(),
                c["turn"],
                t["turn"]
            ));
        }
    }
    for t in ts {
        let n = t["turn"].as_u64().unwrap();
        let p = paths(&turn_log(ws, n));
        let files: Vec<&String> = p
            .iter()
            .filter(|a| !p.iter().any(|b| b.starts_with(&format!("{a}/"))))
            .collect();
        if t["files"].as_u64() != Some(files.len() as u64) {
            out.push(format!(
                "turn {n}: `turns --json` says {} files, `log --turn` lists {files:?}",
                t["files"]
            ));
        }
    }
    (out, what)
}

/// Roll back to turn `n`'s start (`--to-turn`, and `extra`), previewed first: the preview and
/// the run name the same paths, and the tree is then what `.rewind/at/` showed of the turn's
/// start before it. Returns that tree.
fn rollback_to_turn_as_previewed(ws: &Workspace, n: usize, extra: &[&str], what: &str) -> String {
    let (start, _) = bounds(ws, n);
    let want = tree(&ws.path().join(format!(".rewind/at/{start}")));
    let turn = format!("{SESSION}:{n}");
    let args = |dry: bool| {
        let mut a = vec!["rollback", "--to-turn", &turn];
        a.extend(dry.then_some("--dry-run"));
        a.extend_from_slice(extra);
        a
    };
    let dry = rw_ok(ws, &args(true));
    let run = rw_ok(ws, &args(false));
    let got = tree(&ws.path());
    let what = format!("turn {n}\nwant:\n{want}\ngot:\n{got}\ndry:\n{dry}\nrun:\n{run}\n{what}");
    assert_eq!(planned(&dry), planned(&run), "{what}");
    assert_eq!(got, want, "{what}");
    want
}

/// `path` as of change `id`, or `None` if it did not exist then.
fn cat_opt(ws: &Workspace, path: &str, id: u64) -> Option<String> {
    let o = rw(ws, &["cat", path, "--at", &id.to_string()]);
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Every regular file of the tree below `dir` (not `.rewind`), with a hash of its content.
fn tree(dir: &std::path::Path) -> String {
    sh(
        dir,
        "find . -path ./.rewind -prune -o -path ./.git -prune -o -type f -print | LC_ALL=C sort \
         | while read -r f; do printf '%s %s\\n' \"$f\" \"$(md5sum < \"$f\" | cut -c1-8)\"; done",
    )
}

/// The same check as `misplaced`, for tool calls: a change labelled with a tool call
/// `toolu_N_K` (begun in turn N by the scripts here) must be labelled turn N.
fn tools_out_of_turn(all: &[Value]) -> Vec<String> {
    let mut wrong = Vec::new();
    for c in all.iter().filter(|c| c["session"] == SESSION) {
        let Some(id) = c["tool"]["id"].as_str() else {
            continue;
        };
        let Some(n) = id.strip_prefix("toolu_").and_then(|r| r.split('_').next()) else {
            continue;
        };
        if c["turn"].as_u64().map(|t| t.to_string()).as_deref() != Some(n) {
            wrong.push(format!(
                "#{} {} {} labelled turn {} with tool {id}",
                c["id"], c["kind"], c["path"], c["turn"]
            ));
        }
    }
    wrong
}

/// A `.rewind/events` reader (`cat` under `timeout 120`): its pid, and a thread that gives
/// every change it read once it is ended.
fn events_reader(ws: &Workspace) -> (u32, std::thread::JoinHandle<Vec<Value>>) {
    let mut c = std::process::Command::new("timeout")
        .args(["120", "cat"])
        .arg(ws.path().join(".rewind/events"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.id();
    let out = std::io::BufReader::new(c.stdout.take().unwrap());
    let t = std::thread::spawn(move || {
        let v = out
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect();
        let _ = c.wait();
        v
    });
    std::thread::sleep(Duration::from_millis(200));
    (pid, t)
}

/// The changes the events reader saw whose turn or tool call differ from what `log` says of
/// the same id, and the log's changes of the agent's session it never saw.
fn labels_differ(all: &[Value], seen: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for c in all.iter().filter(|c| c["session"] == SESSION) {
        match seen.iter().find(|e| e["id"] == c["id"]) {
            None => out.push(format!("#{} {} never seen", c["id"], c["path"])),
            Some(e) => {
                if e["turn"] != c["turn"] || e["tool"] != c["tool"] {
                    out.push(format!(
                        "#{} {}: events say turn {} tool {}, log says turn {} tool {}",
                        c["id"], c["path"], e["turn"], e["tool"], c["turn"], c["tool"]
                    ));
                }
            }
        }
    }
    out
}

/// Python: `xchg(a, b)` swaps two names with `renameat2(RENAME_EXCHANGE)`; `tool_begin(n, k)`
/// and `tool_end(n, k)` send a PreToolUse and PostToolUse for tool call `toolu_N_K`.
const MORE: &str = r#"
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
def xchg(a, b):
    if _libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e), a, b)
def tool_begin(n, k):
    hook("PreToolUse", prompt_id="p-%d" % n, tool_name="Bash",
         tool_input={"command": "t%d" % k}, tool_use_id="toolu_%d_%d" % (n, k))
def tool_end(n, k):
    hook("PostToolUse", prompt_id="p-%d" % n, tool_name="Bash",
         tool_input={"command": "t%d" % k}, tool_response={"stdout": ""},
         tool_use_id="toolu_%d_%d" % (n, k))
"#;

fn agent2(ws: &Workspace, script: &str) -> String {
    agent(ws, &format!("{MORE}\n{script}"))
}

/// Two files swapped with `renameat2(RENAME_EXCHANGE)` in turn 1, in turn 2 while one of them
/// is held open and written through (the handle follows the file to the other name), and
/// between turns. No change may be misplaced; `diff --turn S:2` names exactly the files `log
/// --turn S:2` lists; `rollback --to-turn S:2` (preview, then run) gives back both files as
/// they were at turn 2's start.
#[test]
fn exchanges_of_an_open_file_across_turns() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("x.txt", "x\n"), ("y.txt", "y\n")], &[]);
    sh(
        &ws.path(),
        "git init -q . && git -c user.email=t@t -c user.name=t add -A \
         && git -c user.email=t@t -c user.name=t commit -qm base",
    );
    agent2(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("x.txt", "x in one\n")
xchg("x.txt", "y.txt")
o = open("y.txt", "a")
o.write("open in one\n"); o.flush()
stop(1)
prompt(2)
xchg("x.txt", "y.txt")
o.write("two through the handle\n"); o.flush()
edit("y.txt", "y in two\n")
stop(2)
xchg("x.txt", "y.txt")
prompt(3)
o.write("three\n"); o.close()
time.sleep(0.3)
stop(3)
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("{}\n{wrong:?}\n{what}", lines(&all));
    assert!(wrong.is_empty(), "{what}");
    let (s2, e2) = bounds(&ws, 2);
    let x2 = cat_opt(&ws, "x.txt", s2);
    let y2 = cat_opt(&ws, "y.txt", s2);
    // At turn 2's start: x.txt holds y's old content, y.txt the edited x plus the open write.
    assert_eq!(x2.as_deref(), Some("y\nagain\n"), "{what}");
    assert_eq!(y2.as_deref(), Some("x in one\nopen in one\n"), "{what}");
    assert_eq!(
        cat_opt(&ws, "x.txt", e2).as_deref(),
        Some("x in one\nopen in one\ntwo through the handle\n"),
        "{what}"
    );
    let turn = format!("{SESSION}:2");
    let listed = paths(&turn_log(&ws, 2));
    let diff = rw_ok(&ws, &["diff", "--turn", &turn, "--stat"]);
    for p in ["x.txt", "y.txt"] {
        assert_eq!(
            listed.iter().any(|l| l == p),
            diff.contains(p),
            "{p}: log --turn lists {listed:?}, diff --turn --stat:\n{diff}\n{what}"
        );
    }
    // `export --turn` writes the same files, with what they held at the turn's end.
    let export = rw(&ws, &["export", "--turn", &turn, "--branch", "t2"]);
    let exported = sh(
        &ws.path(),
        "git diff --name-only t2~1 t2 2>&1; echo ---; git show t2:x.txt 2>&1",
    );
    let what =
        format!("export: {export:?}\nexported: {exported}\nlog --turn lists {listed:?}\n{what}");
    assert!(export.status.success(), "{what}");
    let (names, xt) = exported.split_once("---\n").unwrap();
    let mut names: Vec<&str> = names.lines().collect();
    names.sort();
    assert_eq!(names, listed, "{what}");
    assert_eq!(Some(xt), cat_opt(&ws, "x.txt", e2).as_deref(), "{what}");
    let dry = rw_ok(&ws, &["rollback", "--to-turn", &turn, "--dry-run"]);
    let run = rw_ok(&ws, &["rollback", "--to-turn", &turn]);
    let what = format!("dry:\n{dry}\nrun:\n{run}\n{what}");
    assert_eq!(planned(&dry), planned(&run), "{what}");
    let x = fs::read_to_string(ws.path().join("x.txt")).ok();
    let y = fs::read_to_string(ws.path().join("y.txt")).ok();
    assert_eq!((x, y), (x2, y2), "{what}");
    ws.unmount();
}

/// A background process of the agent churns a tree as fast as it can (mkdir of a tree, files
/// written, a hard link, a save-by-rename, an exchange, a rename of a folder, `rm -rf` of the
/// tree, and a file deleted while still open) while the agent runs twelve quick turns, each
/// with two tool calls. Bounds must be in order, no change misplaced, every change's tool call
/// one of its own turn's, and `rollback --to-turn S:6` (preview, then run, after the churn
/// stops) must give the tree at turn 6's start.
#[test]
fn a_tree_churned_in_the_background_across_twelve_quick_turns() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("keep.txt", "k\n")], &[]);
    let out = agent2(
        &ws,
        &r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", MORE_SRC + '''
import os, shutil, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    d = "t%d" % (i % 3)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d + "/sub/deep", exist_ok=True)
    for k in range(4):
        with open("%s/sub/f%d.txt" % (d, k), "w") as f:
            f.write("%d %d\\n" % (i, k))
    os.link(d + "/sub/f0.txt", d + "/sub/deep/h.txt")
    with open(d + "/save.tmp", "w") as f:
        f.write("saved %d\\n" % i)
    os.rename(d + "/save.tmp", d + "/saved.txt")
    xchg(d + "/sub/f1.txt", d + "/sub/f2.txt")
    o = open(d + "/sub/f3.txt", "a"); o.write("open\\n"); o.flush()
    os.unlink(d + "/sub/f3.txt"); o.write("after unlink\\n"); o.close()
    os.rename(d + "/sub", d + "/moved")
    if i % 2:
        shutil.rmtree(d)
    with open("keep.txt", "a") as f:
        f.write("%d\\n" % i)
'''])
time.sleep(0.2)
for n in range(1, 13):
    prompt(n)
    tool_begin(n, 1)
    time.sleep(0.03)
    tool_end(n, 1)
    tool_begin(n, 2)
    time.sleep(0.03)
    tool_end(n, 2)
    stop(n)
    time.sleep(0.02)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
"#
        .replace("MORE_SRC", &format!("{:?}", format!("{PY}\n{MORE}"))),
    );
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let tools = tools_out_of_turn(&all);
    let what = format!("{out}\nmisplaced: {wrong:?}\ntools: {tools:?}\n{what}");
    assert_eq!(ts.len(), 12, "{what}");
    let mut last_end = 0;
    for t in &ts {
        let start = t["start_id"].as_u64().unwrap();
        let end = t["end_id"].as_u64().expect(&what);
        assert!(start >= last_end && end >= start, "{what}");
        last_end = end;
    }
    assert!(wrong.is_empty(), "{what}");
    assert!(tools.is_empty(), "{what}");
    assert!(
        all.iter().any(|c| c["tool"]["id"].is_string()),
        "no change carries a tool call: {what}"
    );
    rollback_to_turn_as_previewed(&ws, 6, &[], &what);
    ws.unmount();
}

/// Edits closed and creates made by a background process of the agent just after each prompt
/// and each tool call's begin (the writer's close racing the hook's bound), over fifteen
/// turns: each change's turn and tool call must agree with its id (the tool call's turn is
/// the change's), and `turns`' file counts with `log --turn`.
#[test]
fn edits_closed_just_after_prompts_and_tool_calls() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("w.txt", "w\n")], &[]);
    let (reader, events) = events_reader(&ws);
    agent2(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("w.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); time.sleep(0.001); f.truncate()
    with open("n%d.txt" % (i % 5), "w") as f:
        f.write("%d\\n" % i)
    if i % 5 == 4:
        for k in range(5):
            try: os.unlink("n%d.txt" % k)
            except FileNotFoundError: pass
'''])
time.sleep(0.1)
for n in range(1, 16):
    prompt(n)
    tool_begin(n, 1)
    tool_end(n, 1)
    tool_begin(n, 2)
    time.sleep(0.01)
    tool_end(n, 2)
    stop(n)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let tools = tools_out_of_turn(&all);
    crate::trust::signal(reader, libc::SIGTERM);
    let seen = events.join().unwrap();
    let differ = labels_differ(&all, &seen);
    let what = format!(
        "misplaced: {wrong:?}\ntools: {tools:?}\nevents ({} seen) that differ from the log: \
         {differ:?}\n{what}",
        seen.len()
    );
    assert!(wrong.is_empty(), "{what}");
    assert!(differ.is_empty(), "{what}");
    assert!(tools.is_empty(), "{what}");
    assert!(
        all.iter().any(|c| c["tool"]["id"].is_string()),
        "no change carries a tool call: {what}"
    );
    ws.unmount();
}

/// The store refuses writes (a file larger than what is left of its 64 MiB disk, closed in
/// turn 1) when the agent stops: the bound and the switch are taken while every write is
/// refused. Then the disk is freed. The daemon must go on (status answers, the deferred lock
/// is not left held), turn 1 must have ended at the Stop (the edit between turns in no turn),
/// the next prompt's edit must be in turn 2, and nothing misplaced.
// Fails at 711bd3d: the Stop hook gets "store: cannot write (the disk of ... is too full to
// store the content of big.bin ...); changes that cannot be recorded are refused; nothing
// recorded"; turn 1 stays (0, null] in `turns` for good (never ended: its record is not
// written), yet the daemon dropped it from its open turns (the delete of big.bin and b.txt's
// edit after it are labelled no turn), and turn 2 begins (4, 5] inside turn 1's open bounds.
// `Turns::end` (src/history/turns.rs) takes the turn out of the open table before `finish`'s
// `put_turn`, which the refusing store fails; `at_point` hands the error back.
// Passes since a turn's record is written from the reserve (fails again without it).
#[test]
fn a_stop_while_the_store_refuses_every_write() {
    let small = crate::full_disk::small_ext4();
    let reserve = crate::full_disk::reserve_of(small.size());
    let mut ws = Workspace::new();
    for (p, c) in [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "d\n"),
    ] {
        fs::write(ws.path().join(p), c).unwrap();
    }
    let store = small.path().join("store");
    let mut cmd = ws.command(&[std::ffi::OsStr::new("mount"), ws.path().as_os_str()]);
    cmd.arg("--store").arg(&store);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    ws.mark_mounted();
    sync(&ws);
    let filler = small.path().join("filler");
    crate::full_disk::write_noise(&filler, 30 << 20);
    let big = small.available() - reserve / 2;
    let out = agent(
        &ws,
        &format!(
            "FILLER = {:?}\nBIG = {big}\n{}",
            filler.display().to_string(),
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
fd = os.open("big.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
left, wrote = BIG, None
try:
    while left > 0:
        n = min(left, 1 << 20)
        left -= os.write(fd, os.urandom(n))
except OSError as e:
    wrote = str(e)
try:
    os.close(fd)
except OSError as e:
    wrote = "%s; close: %s" % (wrote, e)
# Wait until the store refuses (status says so).
for i in range(100):
    s = subprocess.run(["rewind", "status"], capture_output=True, text=True).stdout
    if "NOT RECORDING" in s:
        break
    time.sleep(0.2)
refused = "NOT RECORDING" in s
try:
    os.unlink("d.txt"); unlinked = True
except OSError as e:
    unlinked = str(e)
t1 = stop(1)
os.unlink(FILLER)
time.sleep(2)
for i in range(20):
    try:
        os.unlink("big.bin"); break
    except FileNotFoundError:
        break
    except OSError:
        time.sleep(0.5)
for i in range(20):
    try:
        edit("b.txt", "between turns\n"); break
    except OSError:
        time.sleep(0.5)
t2 = prompt(2)
edit("c.txt", "turn two\n")
time.sleep(0.5)
t3 = stop(2)
print(json.dumps([refused, unlinked, wrote, t1, t2, t3]))
"#
        ),
    );
    let t = Instant::now();
    let status = rw(&ws, &["status"]);
    let took = t.elapsed();
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let daemon = fs::read_to_string(store.join("daemon.log")).unwrap_or_default();
    let what = format!(
        "agent printed {out}\nstatus took {took:?}: {}\n{}\n{wrong:?}\n{what}\ndaemon.log (last 25):\n{}",
        String::from_utf8_lossy(&status.stdout),
        lines(&all),
        daemon.lines().rev().take(25).collect::<Vec<_>>().join("\n")
    );
    assert!(out.starts_with("[true"), "the store never refused: {what}");
    assert!(
        status.status.success() && took < Duration::from_secs(5),
        "{what}"
    );
    assert_eq!(ts.len(), 2, "{what}");
    assert!(
        ts[0]["end_id"].as_u64().is_some(),
        "turn 1 never ended: {what}"
    );
    let b = all.iter().rfind(|c| c["path"] == "b.txt").expect(&what);
    assert!(b["turn"].is_null(), "b.txt between turns: {what}");
    assert!(
        paths(&turn_log(&ws, 2)).contains(&"c.txt".to_string()),
        "c.txt in turn 2: {what}"
    );
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// SIGKILL of the daemon right after a Stop's bound, with a held-back create (`n.txt`, made
/// just before the Stop), a save-by-rename and an exchange just before it, and a file still
/// open; then a remount. Turn 1 keeps its bounds, every change of it is still in it (none
/// after its end), and changes after the remount fall after its end.
#[test]
fn sigkill_right_after_a_bound_with_held_creates_and_exchanges_then_a_remount() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("x.txt", "x\n"), ("y.txt", "y\n"), ("s.txt", "s\n")],
        &[],
    );
    let dir = ws.path();
    let mut writer = python_command(
        &dir,
        &format!(
            "{PY}\n{MORE}\n{}",
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
xchg("x.txt", "y.txt")
with open("s.tmp", "w") as f:
    f.write("saved in one\n")
os.rename("s.tmp", "s.txt")
k = open("k.txt", "w"); k.write("open at the stop\n"); k.flush()
with open("n.txt", "w") as f:
    f.write("new in one\n")
stop(1)
print("stopped", flush=True)
k.write("after the stop\n"); k.flush()
time.sleep(30)
"#
        ),
    )
    .env("PATH", path_with_rewind())
    .env("XDG_DATA_HOME", data_home(&ws))
    .env_remove("REWIND_SESSION")
    .env_remove("REWIND_AGENT")
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = std::io::BufReader::new(writer.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "stopped\n");
    let before = turns(&ws);
    let pid = daemon_pid(&ws);
    ws.kill_daemon(pid);
    let _ = writer.kill();
    let _ = writer.wait();
    ws.mount();
    fs::write(dir.join("x.txt"), "after the remount\n").unwrap();
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!(
        "turns before the kill: {before:?}\nafter: {ts:?}\n{}\n{wrong:?}\n{what}",
        lines(&all)
    );
    assert_eq!(ts.len(), 1, "{what}");
    let end = ts[0]["end_id"].as_u64().expect(&what);
    assert_eq!(Some(end), before[0]["end_id"].as_u64(), "{what}");
    assert!(wrong.is_empty(), "{what}");
    let one = paths(&turn_log(&ws, 1));
    for p in ["k.txt", "n.txt", "s.txt", "x.txt", "y.txt"] {
        assert!(
            one.iter().any(|l| l == p),
            "{p} not in turn 1 {one:?}: {what}"
        );
    }
    assert_eq!(
        cat_opt(&ws, "n.txt", end).as_deref(),
        Some("new in one\n"),
        "{what}"
    );
    assert_eq!(
        cat_opt(&ws, "s.txt", end).as_deref(),
        Some("saved in one\n"),
        "{what}"
    );
    assert_eq!(
        cat_opt(&ws, "x.txt", end).as_deref(),
        Some("y\nagain\n"),
        "{what}"
    );
    let last = all.iter().rfind(|c| c["path"] == "x.txt").expect(&what);
    assert!(last["id"].as_u64().unwrap() > end, "{what}");
    ws.unmount();
}

/// A big rollback (1,500 files back to before they were written) runs while the agent sends
/// prompts, Stops and tool hooks from eight threads at once and two `.rewind/events` readers
/// follow along. Nothing may deadlock: the rollback, the agent and a `status` finish in
/// time; the readers see the restores; the restores carry no turn; no agent change is
/// misplaced.
#[test]
fn hooks_from_many_threads_and_events_readers_during_a_big_rollback() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("a.txt", "a\n")], &[]);
    let root = ws.path();
    fs::create_dir(root.join("many")).unwrap();
    sync(&ws);
    let base = log(&ws).last().unwrap()["id"].as_u64().unwrap();
    for i in 0..1500 {
        fs::write(
            root.join(format!("many/f{i}.txt")),
            format!("{i}\n").repeat(50),
        )
        .unwrap();
    }
    sync(&ws);
    let readers: Vec<(u32, std::thread::JoinHandle<usize>)> = (0..2)
        .map(|_| {
            let mut c = std::process::Command::new("timeout")
                .args(["60", "cat"])
                .arg(root.join(".rewind/events"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = c.id();
            let out = std::io::BufReader::new(c.stdout.take().unwrap());
            let t = std::thread::spawn(move || {
                let n = out
                    .lines()
                    .map_while(Result::ok)
                    .filter(|l| l.contains("\"kind\":\"restore\""))
                    .count();
                let _ = c.wait();
                n
            });
            (pid, t)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (rollback, out, took) = std::thread::scope(|s| {
        let rb = s.spawn(|| {
            let t = Instant::now();
            let o = rw(&ws, &["rollback", "--to", &base.to_string(), "--force"]);
            (o, t.elapsed())
        });
        let out = agent2(
            &ws,
            r#"
hook("SessionStart", source="startup", model="m")
def calls(n, th):
    for k in range(3):
        tool_begin(n, th * 10 + k)
        edit("a.txt", "turn %d thread %d call %d\n" % (n, th, k))
        tool_end(n, th * 10 + k)
t = time.monotonic()
for n in range(1, 6):
    prompt(n)
    ths = [threading.Thread(target=calls, args=(n, th)) for th in range(8)]
    for th in ths: th.start()
    for th in ths: th.join()
    stop(n)
print(time.monotonic() - t)
"#,
        );
        let (o, took) = rb.join().unwrap();
        (o, out, took)
    });
    let t = Instant::now();
    let status = rw(&ws, &["status"]);
    let status_took = t.elapsed();
    sync(&ws);
    let mut seen = Vec::new();
    std::thread::sleep(Duration::from_millis(500));
    for (pid, t) in readers {
        crate::trust::signal(pid, libc::SIGTERM);
        seen.push(t.join().unwrap());
    }
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let tools = tools_out_of_turn(&all);
    let restores: Vec<&Value> = all.iter().filter(|c| c["kind"] == "restore").collect();
    let what = format!(
        "rollback took {took:?}: {rollback:?}\nagent took {out}\nstatus took {status_took:?}\n\
         readers saw {seen:?} restores, the log has {}\nmisplaced: {wrong:?}\ntools: {tools:?}\n{what}",
        restores.len()
    );
    // Exit 1 (done in part) is allowed: the agent edits a.txt, which the rollback also restores.
    assert!(matches!(rollback.status.code(), Some(0 | 1)), "{what}");
    assert!(
        status.status.success() && status_took < Duration::from_secs(5),
        "{what}"
    );
    assert!(restores.len() >= 1500, "{what}");
    assert!(seen.iter().all(|&n| n == restores.len()), "{what}");
    assert!(restores.iter().all(|c| c["turn"].is_null()), "{what}");
    assert_eq!(turns(&ws).len(), 5, "{what}");
    assert!(wrong.is_empty(), "{what}");
    assert!(tools.is_empty(), "{what}");
    for n in 1..=5 {
        assert_eq!(paths(&turn_log(&ws, n)), ["a.txt"], "turn {n}: {what}");
    }
    ws.unmount();
}

/// The store on a 64 MiB disk: mounted, with `files` written first. The store's path.
fn mounted_on_small(
    ws: &mut Workspace,
    small: &crate::common::SmallFs,
    files: &[(&str, &str)],
) -> std::path::PathBuf {
    for (p, c) in files {
        fs::write(ws.path().join(p), c).unwrap();
    }
    let store = small.path().join("store");
    remount_on(ws, &store);
    store
}

fn remount_on(ws: &mut Workspace, store: &std::path::Path) {
    let mut cmd = ws.command(&[std::ffi::OsStr::new("mount"), ws.path().as_os_str()]);
    cmd.arg("--store").arg(store);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    ws.mark_mounted();
    sync(ws);
}

/// Python: `fill(BIG)` writes `big.bin` (closed) until the store refuses, and waits until
/// status says it does; `free(FILLER)` removes the filler, then `big.bin` once the store
/// lets it.
const FILL: &str = r#"
def fill(big):
    fd = os.open("big.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    left = big
    try:
        while left > 0:
            left -= os.write(fd, os.urandom(min(left, 1 << 20)))
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass
    for i in range(100):
        s = subprocess.run(["rewind", "status"], capture_output=True, text=True).stdout
        if "NOT RECORDING" in s:
            return True
        time.sleep(0.2)
    return False
def free(filler):
    os.unlink(filler)
    for i in range(40):
        try:
            os.unlink("big.bin"); return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)
"#;

/// The store refuses writes when the agent's next prompt comes (turn 1 ended normally
/// before): the prompt's bound is taken and its turn begun while every write is refused.
/// Then the disk is freed and the agent edits `c.txt` for that prompt. Its edit must be in
/// turn 2 (a turn for the prompt exists and holds it), turn 1 must keep its end, and after a
/// remount the turns read the same.
// Fails at 711bd3d: the UserPromptSubmit hook gets "store: cannot write (the disk of ... is too
// full to store the content of big.bin ...); changes that cannot be recorded are refused;
// recorded in part (1 of 2 requests)": no turn 2 is begun (`Turns::begin`'s `put_turn` is
// refused, and nothing retries it once "the store accepts writes again" 0.6 s later), so the
// prompt's edit of c.txt (#3) is labelled no turn and `turns` lists turn 1 (0, 1] only.
// Passes since a turn's record is written from the reserve (fails again without it).
#[test]
fn a_prompt_while_the_store_refuses_every_write() {
    let small = crate::full_disk::small_ext4();
    let reserve = crate::full_disk::reserve_of(small.size());
    let mut ws = Workspace::new();
    let store = mounted_on_small(&mut ws, &small, &[("a.txt", "a\n"), ("c.txt", "c\n")]);
    let filler = small.path().join("filler");
    crate::full_disk::write_noise(&filler, 30 << 20);
    let big = small.available() - reserve / 2;
    let out = agent(
        &ws,
        &format!(
            "{FILL}\nFILLER = {:?}\nBIG = {big}\n{}",
            filler.display().to_string(),
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
stop(1)
refused = fill(BIG)
t2 = prompt(2)
free(FILLER)
time.sleep(1)
for i in range(20):
    try:
        edit("c.txt", "turn two\n"); break
    except OSError:
        time.sleep(0.5)
time.sleep(0.3)
t3 = stop(2)
print(json.dumps([refused, t2, t3]))
"#
        ),
    );
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let daemon = fs::read_to_string(store.join("daemon.log")).unwrap_or_default();
    let what = format!(
        "agent printed {out}\n{}\n{wrong:?}\n{what}\ndaemon.log (last 15):\n{}",
        lines(&all),
        daemon.lines().rev().take(15).collect::<Vec<_>>().join("\n")
    );
    assert!(out.starts_with("[true"), "the store never refused: {what}");
    assert_eq!(ts.len(), 2, "{what}");
    assert!(ts[0]["end_id"].as_u64().is_some(), "{what}");
    let c = all.iter().rfind(|c| c["path"] == "c.txt").expect(&what);
    assert_eq!(c["turn"].as_u64(), Some(2), "c.txt's edit: {what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
    remount_on(&mut ws, &store);
    assert_eq!(turns(&ws), ts, "turns after a remount: {what}");
    ws.unmount();
}

/// After a Stop that the refusing store failed, a remount, and the agent's session start
/// (resumed) and an edit without a prompt: that edit is in no turn (turn 1 ended at the
/// Stop), and `turns` lists no turn still open.
// Fails at 711bd3d: the Stop hook gets "store: cannot write (...) nothing recorded"; turn 1's
// record keeps no end, so the next mount opens it again, and the agent's edit of b.txt after
// the remount, with no prompt (#2), is labelled turn 1 and inside its bounds: `turns` shows
// turn 1 (0, null] with a.txt and b.txt. Same cause: `Turns::end` (src/history/turns.rs) drops
// the turn from the open table, then `finish`'s `put_turn` is refused and never retried.
// Passes since a turn's record is written from the reserve (fails again without it).
#[test]
fn a_remount_after_a_stop_the_refusing_store_failed() {
    let small = crate::full_disk::small_ext4();
    let reserve = crate::full_disk::reserve_of(small.size());
    let mut ws = Workspace::new();
    let store = mounted_on_small(&mut ws, &small, &[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let filler = small.path().join("filler");
    crate::full_disk::write_noise(&filler, 30 << 20);
    let big = small.available() - reserve / 2;
    let out = agent(
        &ws,
        &format!(
            "{FILL}\nFILLER = {:?}\nBIG = {big}\n{}",
            filler.display().to_string(),
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
refused = fill(BIG)
t1 = stop(1)
free(FILLER)
print(json.dumps([refused, t1]))
"#
        ),
    );
    sync(&ws);
    ws.unmount();
    remount_on(&mut ws, &store);
    agent(
        &ws,
        r#"
hook("SessionStart", source="resume", model="m")
edit("b.txt", "after the remount, no prompt\n")
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("agent printed {out}\n{}\n{wrong:?}\n{what}", lines(&all));
    assert!(out.starts_with("[true"), "the store never refused: {what}");
    assert_eq!(ts.len(), 1, "{what}");
    assert!(
        ts[0]["end_id"].as_u64().is_some(),
        "turn 1 still open: {what}"
    );
    let b = all.iter().rfind(|c| c["path"] == "b.txt").expect(&what);
    assert!(b["turn"].is_null(), "{what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// `rewind gc` runs (twice, keeping nothing older than a second) while the agent sends
/// prompts, Stops and tool hooks from six threads and a background writer edits: nothing
/// deadlocks (gc, the agent and a `status` finish in time), and no change is misplaced.
#[test]
fn hooks_from_many_threads_while_gc_runs() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("a.txt", "a\n"), ("bg.txt", "0\n")], &[]);
    for i in 0..400 {
        fs::write(ws.path().join(format!("g{i}.txt")), "x\n".repeat(i + 1)).unwrap();
        fs::write(ws.path().join(format!("g{i}.txt")), "y\n".repeat(i + 1)).unwrap();
    }
    sync(&ws);
    std::thread::sleep(Duration::from_millis(1100));
    let (gcs, out) = std::thread::scope(|s| {
        let g = s.spawn(|| {
            (0..2)
                .map(|_| {
                    let t = Instant::now();
                    let o = rw(&ws, &["gc", "--keep", "1s"]);
                    (
                        o.status.success(),
                        t.elapsed(),
                        String::from_utf8_lossy(&o.stderr).into_owned(),
                    )
                })
                .collect::<Vec<_>>()
        });
        let out = agent2(
            &ws,
            r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); f.truncate()
'''])
def calls(n, th):
    for k in range(3):
        tool_begin(n, th * 10 + k)
        edit("a.txt", "turn %d thread %d call %d\n" % (n, th, k))
        tool_end(n, th * 10 + k)
t = time.monotonic()
for n in range(1, 7):
    prompt(n)
    ths = [threading.Thread(target=calls, args=(n, th)) for th in range(6)]
    for th in ths: th.start()
    for th in ths: th.join()
    stop(n)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
print(time.monotonic() - t)
"#,
        );
        (g.join().unwrap(), out)
    });
    let t = Instant::now();
    let status = rw(&ws, &["status"]);
    let status_took = t.elapsed();
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let tools = tools_out_of_turn(&all);
    let what = format!(
        "gc: {gcs:?}\nagent took {out}\nstatus took {status_took:?}\nmisplaced: {wrong:?}\n\
         tools: {tools:?}\n{what}"
    );
    assert!(gcs.iter().all(|g| g.0), "{what}");
    assert!(
        status.status.success() && status_took < Duration::from_secs(5),
        "{what}"
    );
    assert_eq!(turns(&ws).len(), 6, "{what}");
    assert!(wrong.is_empty(), "{what}");
    assert!(tools.is_empty(), "{what}");
    ws.unmount();
}

/// The agent itself runs rollbacks as tool calls: in turn 2 it undoes turn 1 (`rollback
/// --turn S:1`) while a background process of the agent keeps editing, then starts a rollback
/// of a 600-file tree in the background and stops and prompts again at once, while that
/// rollback's restores go on. The restores are in the rollbacks' sessions with no turn; the
/// agent's changes keep their turns both ways (`misplaced_files`); `rollback --session` of
/// the first rollback (preview, then run) puts back what turn 1 wrote.
#[test]
fn rollbacks_run_by_the_agent_while_its_turns_switch() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("f.txt", "f\n"), ("bg.txt", "0\n")], &[]);
    let root = ws.path();
    fs::create_dir(root.join("tree")).unwrap();
    sync(&ws);
    let base = log(&ws).last().unwrap()["id"].as_u64().unwrap();
    for i in 0..600 {
        fs::write(root.join(format!("tree/t{i}.txt")), format!("{i}\n")).unwrap();
    }
    sync(&ws);
    let out = agent2(
        &ws,
        &format!(
            "BASE = {base}\n{}",
            r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); f.truncate()
    time.sleep(0.003)
'''])
prompt(1)
edit("f.txt", "turn one\n")
stop(1)
prompt(2)
tool_begin(2, 1)
r1 = subprocess.run(["rewind", "rollback", "--turn", "claude-" + SID + ":1"],
                    capture_output=True, text=True)
tool_end(2, 1)
tool_begin(2, 2)
big = subprocess.Popen(["rewind", "rollback", "--to", str(BASE), "--force"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
tool_end(2, 2)
stop(2)
prompt(3)
edit("f.txt", "turn three\n")
stop(3)
o, e = big.communicate(timeout=120)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
print(json.dumps([r1.returncode, r1.stdout, r1.stderr, big.returncode, o[-300:], e[-300:]]))
"#
        ),
    );
    sync(&ws);
    let res: Value = serde_json::from_str(out.trim()).unwrap();
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let tools = tools_out_of_turn(&all);
    let restores: Vec<&Value> = all.iter().filter(|c| c["kind"] == "restore").collect();
    let what = format!(
        "agent printed {res}\n{} restores\nmisplaced: {wrong:?}\ntools: {tools:?}\n{what}",
        restores.len()
    );
    // Exit 1 (done in part): turn 1 has bg.txt too, which the background writer changed since.
    assert!(matches!(res[0].as_i64(), Some(0 | 1)), "{what}");
    assert!(
        res[1].as_str().unwrap().contains("revert   f.txt"),
        "{what}"
    );
    assert!(matches!(res[3].as_i64(), Some(0 | 1)), "{what}");
    assert!(restores.len() >= 600, "{what}");
    for c in &restores {
        assert!(c["turn"].is_null(), "a restore with a turn: {c}\n{what}");
        assert!(
            c["session"].as_str().unwrap().starts_with("rollback-"),
            "{c}\n{what}"
        );
    }
    assert!(wrong.is_empty(), "{what}");
    assert!(tools.is_empty(), "{what}");
    assert_eq!(turns(&ws).len(), 3, "{what}");
    // The first rollback's session: the one whose restore put f.txt back.
    let first = restores.iter().find(|c| c["path"] == "f.txt").expect(&what)["session"]
        .as_str()
        .unwrap()
        .to_string();
    for n in 1..=3 {
        let p = paths(&turn_log(&ws, n));
        assert!(
            p.iter().all(|p| p == "bg.txt" || p == "f.txt"),
            "turn {n} lists {p:?}: {what}"
        );
    }
    let dry = rw_ok(
        &ws,
        &["rollback", "--session", &first, "--dry-run", "--force"],
    );
    let run = rw_ok(&ws, &["rollback", "--session", &first, "--force"]);
    let f = fs::read_to_string(ws.path().join("f.txt")).unwrap();
    let what = format!("dry:\n{dry}\nrun: {run}\n{what}");
    assert_eq!(planned(&dry), planned(&run), "{what}");
    assert_eq!(f, "turn one\n", "{what}");
    ws.unmount();
}

/// A file with two names (`h1.txt`, `h2.txt`): `h1.txt` is open for writing across the Stop
/// and the next prompt; right after the Stop, `h2.txt` is unlinked and linked again as
/// `h3.txt`, and in turn 2 `h1.txt` is exchanged with `other.txt`. Both ways, every change is
/// in the turn its id falls in, and `rollback --to-turn S:2` (preview, then run) gives the tree
/// at turn 2's start.
#[test]
fn hard_links_changed_around_an_open_name_across_a_stop() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("h1.txt", "h\n"), ("other.txt", "o\n")], &[]);
    agent2(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
os.link("h1.txt", "h2.txt")
prompt(1)
f = open("h1.txt", "a")
f.write("one\n"); f.flush()
stop(1)
os.unlink("h2.txt")
os.link("h1.txt", "h3.txt")
f.write("between\n"); f.flush()
prompt(2)
xchg("h1.txt", "other.txt")
f.write("two\n"); f.flush()
os.unlink("h3.txt")
stop(2)
f.close()
time.sleep(0.3)
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("{}\nmisplaced: {wrong:?}\n{what}", lines(&all));
    assert!(wrong.is_empty(), "{what}");
    rollback_to_turn_as_previewed(&ws, 2, &[], &what);
    ws.unmount();
}

/// The writer thread holds closed edits (`REWIND_TEST_SLOW_END=1500`): the agent edits
/// `a.txt` in turn 1 (fsynced, open 600 ms: its marker written) and stops at once; the
/// Stop's bound falls after the edit's id (set aside at its close), the hook gives up
/// waiting for the edit to be recorded (800 ms), and the
/// daemon is SIGKILLed before it is. After a remount the edit is recovered: it was made in
/// turn 1, before the Stop, so turn 1 must list it, within its bounds, and nothing may be
/// misplaced.
// Fails at 711bd3d: the Stop gives up ("no answer within 800 ms; gave up"), turn 1 is stored
// as (2, 4] (the bound on a.txt's edit's set-aside id 4), and after the SIGKILL the next mount
// recovers the edit from its marker as "#5 modify a.txt claude-... turn null": a fresh id past
// turn 1's end, and `label_now` (journal.rs) relabels it with the session's turn at recovery
// (none), so turn 1 lists b.txt only and `cat a.txt --at 4` gives "a\nagain\n". Before
// 711bd3d it would have kept turn 1's label outside turn 1's bounds: in no turn either way.
// The set-aside id is not kept with the marker (recovery.rs), so the recovered change cannot
// take its place inside the turn. (Without the fsync, an edit under 100 ms has no marker and
// comes back as `external`: documented, design.md, Crash semantics.)
// Passes since an edit's marker notes its set-aside id (fails again without it).
#[test]
fn sigkill_while_an_edit_before_the_stop_is_still_being_recorded() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n")],
        &[("REWIND_TEST_SLOW_END", "1500")],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("b.txt", "turn one, early\n")
time.sleep(2)
# fsynced and open 600 ms, so that its marker is written (an edit under 100 ms has none:
# after a crash the scan records it as `external`, design.md, Crash semantics).
with open("a.txt", "r+") as f:
    f.write("turn one\n"); f.truncate(); f.flush(); os.fsync(f.fileno()); time.sleep(0.6)
print(stop(1))
"#,
    );
    let before = "(not read: a read could wait for the edit)";
    let pid = daemon_pid(&ws);
    ws.kill_daemon(pid);
    ws.mount();
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!(
        "stop took {out}turns before the kill: {before:?}\n{}\n{wrong:?}\n{what}",
        lines(&all)
    );
    // The attack: the Stop gave up waiting for a.txt's edit to be recorded.
    assert!(out.trim().parse::<f64>().unwrap() > 0.7, "{what}");
    assert_eq!(ts.len(), 1, "{what}");
    let end = ts[0]["end_id"].as_u64().expect(&what);
    assert_eq!(
        cat_opt(&ws, "a.txt", end).as_deref(),
        Some("turn one\n"),
        "a.txt at turn 1's end: {what}"
    );
    assert_eq!(paths(&turn_log(&ws, 1)), ["a.txt", "b.txt"], "{what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// An editor's temporary file written and closed in turn 1 (a held-back create) and renamed
/// over `c.txt` only after the Stop, then again in turn 2 with the rename right after the
/// prompt: both ways every change is in the turn its id falls in, and `rollback --to-turn
/// S:1` and `S:2` (preview, then run) each give the tree at that turn's start.
#[test]
fn saves_by_rename_whose_temp_files_are_closed_before_a_bound_and_renamed_after() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("c.txt", "c\n"), ("d.txt", "d\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("d.txt", "turn one\n")
with open("c.tmp", "w") as f:
    f.write("saved after the stop\n")
stop(1)
os.rename("c.tmp", "c.txt")
with open("c.tmp", "w") as f:
    f.write("saved after prompt two\n")
prompt(2)
os.rename("c.tmp", "c.txt")
edit("d.txt", "turn two\n")
stop(2)
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("{}\nmisplaced: {wrong:?}\n{what}", lines(&all));
    assert!(wrong.is_empty(), "{what}");
    for n in [2usize, 1] {
        // --force: turn 2's rollback is a later change of the paths turn 1's goes back over.
        rollback_to_turn_as_previewed(&ws, n, &["--force"], &what);
    }
    ws.unmount();
}

/// Checkpoints taken in a loop (`rewind checkpoint`, which cuts every open edit as a bound
/// does) while the agent runs ten quick turns with a file held open and a background writer:
/// both ways every change is in the turn its id falls in, and each checkpoint's tree is
/// whole (`.rewind/at/NAME` lists `o.txt` and `bg.txt`).
#[test]
fn checkpoints_in_a_loop_while_turns_switch_with_files_open() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("o.txt", "o\n"), ("bg.txt", "0\n")], &[]);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (names, out) = std::thread::scope(|s| {
        let c = s.spawn(|| {
            let mut names = Vec::new();
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) && i < 200 {
                let name = format!("cp{i}");
                let o = rw(&ws, &["checkpoint", &name]);
                assert!(o.status.success(), "{o:?}");
                names.push(name);
                i += 1;
            }
            names
        });
        let out = agent(
            &ws,
            r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); f.truncate()
'''])
o = open("o.txt", "w")
for n in range(1, 11):
    prompt(n)
    o.write("turn %d\n" % n); o.flush()
    stop(n)
o.close()
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
"#,
        );
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (c.join().unwrap(), out)
    });
    sync(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!(
        "{out}\n{} checkpoints\nmisplaced: {wrong:?}\n{what}",
        names.len()
    );
    assert!(names.len() >= 3, "{what}");
    assert!(wrong.is_empty(), "{what}");
    for n in names.iter().step_by(5) {
        let listing = sh(&ws.path(), &format!("ls .rewind/at/{n}/"));
        assert!(
            listing.contains("o.txt") && listing.contains("bg.txt"),
            "{n}: {listing}\n{what}"
        );
    }
    ws.unmount();
}

/// Prompts with no Stop between them (an agent interrupted, whose Stop hook never ran), a
/// file held open across all of them and a background writer: each prompt ends the turn before
/// at its own bound. Turn N ends where N+1 begins, both ways every change is in the turn its id
/// falls in, and what the held file holds at each turn's end is what was written by then.
#[test]
fn prompts_without_stops_with_a_file_held_open_and_a_writer() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("o.txt", "o\n"), ("bg.txt", "0\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); f.truncate()
'''])
o = open("o.txt", "w")
for n in range(1, 9):
    prompt(n)
    o.write("turn %d\n" % n); o.flush()
    time.sleep(0.02)
stop(8)
o.close()
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
"#,
    );
    sync(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("misplaced: {wrong:?}\n{what}");
    assert_eq!(ts.len(), 8, "{what}");
    for w in ts.windows(2) {
        assert_eq!(w[0]["end_id"], w[1]["start_id"], "{what}");
    }
    assert!(wrong.is_empty(), "{what}");
    for n in 1..=8u64 {
        let (_, end) = bounds(&ws, n as usize);
        let want: String = (1..=n).map(|k| format!("turn {k}\n")).collect();
        assert_eq!(
            cat_opt(&ws, "o.txt", end).as_deref(),
            Some(want.as_str()),
            "turn {n}: {what}"
        );
    }
    ws.unmount();
}

/// The agent's session ends (SessionEnd: the open turn ends, the registration goes) while a
/// background process it started keeps a file open and writing, and goes on after: both ways
/// every change is in the turn its id falls in, and turn 1 ends.
#[test]
fn a_session_end_while_a_background_writer_keeps_a_file_open() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("o.txt", "o\n"), ("bg.txt", "0\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
o = open("o.txt", "w")
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    o.write("%d\\n" % i); o.flush()
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); f.truncate()
    time.sleep(0.002)
o.close()
'''])
time.sleep(0.3)
hook("SessionEnd", reason="exit")
time.sleep(0.3)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
time.sleep(0.3)
"#,
    );
    sync(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("misplaced: {wrong:?}\n{what}");
    assert_eq!(ts.len(), 1, "{what}");
    assert!(ts[0]["end_id"].as_u64().is_some(), "{what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// Folders moved around files held open across bounds: `d/f.txt` is open from turn 1; after
/// the Stop `d` is renamed `e`; in turn 2 `e` is exchanged with the folder `g`
/// (`RENAME_EXCHANGE` of two folders) and then a file with a folder (`x.txt` and `g`), while
/// `f.txt` is written between each. Both ways every change is in the turn its id falls in, and
/// `rollback --to-turn S:2` (preview, then run) gives the tree at turn 2's start.
#[test]
fn folders_renamed_and_exchanged_around_a_file_open_across_turns() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("d/f.txt", "f\n"), ("g/k.txt", "k\n"), ("x.txt", "x\n")],
        &[],
    );
    agent2(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
f = open("d/f.txt", "a")
f.write("one\n"); f.flush()
stop(1)
os.rename("d", "e")
f.write("between\n"); f.flush()
prompt(2)
xchg("e", "g")
f.write("two\n"); f.flush()
xchg("x.txt", "g")
f.write("two again\n"); f.flush()
stop(2)
prompt(3)
f.write("three\n"); f.close()
time.sleep(0.3)
stop(3)
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let what = format!("{}\nmisplaced: {wrong:?}\n{what}", lines(&all));
    assert!(wrong.is_empty(), "{what}");
    let want = rollback_to_turn_as_previewed(&ws, 2, &[], &what);
    assert!(want.contains("./e/f.txt"), "{what}");
    ws.unmount();
}

/// As above, at a prompt: the writer thread holds closed edits (`REWIND_TEST_SLOW_END=1500`);
/// in turn 1 the agent edits `a.txt` and makes `n.txt` (both fsynced: their markers are
/// written), and sends its next prompt at once; the hook gives up waiting (800 ms) and the
/// daemon is SIGKILLed with both still unrecorded. After a remount (turn 2 still open), the
/// two changes, made in turn 1, must not be taken for turn 2's: `rollback --turn S:2` must
/// not undo them (a preview lists neither).
// Fails at 711bd3d: the prompt gives up ("no answer within 800 ms; gave up; recorded in
// part (1 of 2 requests)"); turn 2 is stored (5, null]. After the SIGKILL and the remount,
// recovery (`recover`, src/history/recorder/recovery.rs) records both from their markers with
// fresh ids through `record_as(change, .., None)`, and `label_now` (journal.rs, new in
// 711bd3d) relabels them with the session's turn open at recovery, turn 2 (reopened from the
// store): "#6 modify a.txt ... turn 2", "#7 create n.txt ... turn 2"; turn 2 lists a.txt and
// n.txt, and `rollback --turn S:2 --dry-run` says "revert a.txt (file)", "remove n.txt":
// undoing turn 2 would undo turn 1's work. (Before 711bd3d they kept turn 1's label, in no
// turn.) The relabel should not apply to a change recovered after a crash: it was made in
// the turn its marker names.
// Passes since recovered changes keep their marker's label (fails again without it).
#[test]
fn sigkill_after_a_prompt_that_gave_up_then_turn_two_must_not_take_turn_ones_changes() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n")],
        &[("REWIND_TEST_SLOW_END", "1500")],
    );
    let pid = daemon_pid(&ws);
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("b.txt", "turn one, early\n")
time.sleep(2)
with open("n.txt", "w") as f:
    f.write("new in turn one\n"); f.flush(); os.fsync(f.fileno())
with open("a.txt", "r+") as f:
    f.write("turn one\n"); f.truncate(); f.flush(); os.fsync(f.fileno()); time.sleep(0.6)
print(prompt(2))
"#,
    );
    ws.kill_daemon(pid);
    ws.mount();
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let two = paths(&turn_log(&ws, 2));
    let dry = rw(
        &ws,
        &["rollback", "--turn", &format!("{SESSION}:2"), "--dry-run"],
    );
    let what = format!(
        "prompt took {out}turn 2 lists {two:?}\npreview of rollback --turn 2: {}\n{}\n\
         {wrong:?}\n{what}",
        String::from_utf8_lossy(&dry.stdout),
        lines(&all)
    );
    assert!(out.trim().parse::<f64>().unwrap() > 0.7, "{what}");
    assert_eq!(ts.len(), 2, "{what}");
    assert!(two.is_empty(), "{what}");
    let preview = String::from_utf8_lossy(&dry.stdout);
    assert!(
        !preview.contains("a.txt") && !preview.contains("n.txt"),
        "{what}"
    );
    ws.unmount();
}

/// Two `.rewind/events` readers that stop reading (SIGSTOP) while the agent runs six turns,
/// each making and deleting 300 files (deletes are queued and written as a bound is taken,
/// then published with the lock held): the daemon keeps recording, no hook gives up, both
/// ways every change is in the turn its id falls in, and once the readers go on they end
/// cleanly.
#[test]
fn stopped_events_readers_while_turns_switch_over_many_deletes() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("a.txt", "a\n")], &[]);
    let readers: Vec<(u32, std::thread::JoinHandle<Vec<Value>>)> =
        (0..2).map(|_| events_reader(&ws)).collect();
    for (pid, _) in &readers {
        crate::trust::signal(*pid, libc::SIGSTOP);
        // `timeout` runs `cat` as its child: stop that too.
        let kids = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
        for k in kids.split_whitespace() {
            crate::trust::signal(k.parse().unwrap(), libc::SIGSTOP);
        }
    }
    let t = Instant::now();
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
took = []
for n in range(1, 7):
    took.append(prompt(n))
    for i in range(300):
        with open("f%d.txt" % i, "w") as f:
            f.write("%d %d\n" % (n, i))
    time.sleep(0.6)
    for i in range(300):
        os.unlink("f%d.txt" % i)
    edit("a.txt", "turn %d\n" % n)
    took.append(stop(n))
print(json.dumps(took))
"#,
    );
    let took = t.elapsed();
    let status = rw(&ws, &["status"]);
    for (pid, _) in &readers {
        let kids =
            fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for k in kids.split_whitespace() {
            crate::trust::signal(k.parse().unwrap(), libc::SIGCONT);
        }
        crate::trust::signal(*pid, libc::SIGCONT);
        crate::trust::signal(*pid, libc::SIGTERM);
    }
    let seen: Vec<usize> = readers
        .into_iter()
        .map(|(_, t)| t.join().unwrap().len())
        .collect();
    sync(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let hooks: Vec<f64> = serde_json::from_str(out.trim()).unwrap();
    let what = format!(
        "agent took {took:?}, hooks {hooks:?}\nreaders saw {seen:?}\nstatus: {status:?}\n\
         misplaced: {wrong:?}\n{what}"
    );
    assert!(status.status.success(), "{what}");
    assert!(hooks.iter().all(|&h| h < 0.75), "a hook gave up: {what}");
    assert_eq!(turns(&ws).len(), 6, "{what}");
    for n in 1..=6 {
        // (A create deleted before it was recorded, still held back, leaves nothing.)
        let p = paths(&turn_log(&ws, n));
        assert!(
            p.contains(&"a.txt".to_string()) && p.len() > 1,
            "turn {n}: {what}"
        );
    }
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// `hostile25::a_stop_whose_cut_fails_on_a_full_store_disk` with an open file under the
/// 16 MiB a bound cuts (that test's file, about 17 MiB, is no longer cut at all since files
/// over 16 MiB are not: its Stop meets no refusal). Here the open file (12 MiB) is larger
/// than what the store's disk has left above its reserve, so the Stop's cut is refused: the
/// turn must end all the same (design.md: "a cut the store refuses ... is logged and the
/// turn switched anyway"), the edit between turns be in no turn, the next prompt's in turn 2.
// Fails at 711bd3d: the cut is refused ("cannot record what claude-...'s open files hold at
// its turn's bound: store: cannot write (... too full to store the content of big.bin: 3.1
// MiB stored, about 8.9 MiB more needed ...)"), which leaves the store refusing every write
// ("refusing writes until the disk has room for it"); `at_point`'s switch then calls
// `Turns::end`, which drops turn 1 from the open table and fails in `put_turn`: the Stop hook
// gets "store: cannot write ...", `turns` keeps turn 1 (0, null] for good, and turn 2 (3, 4]
// lies inside it: "#2 create big.bin labelled turn null within turn 1's bounds", "#3 modify
// b.txt labelled turn null within turn 1's bounds", "#4 modify c.txt labelled turn 2 within
// turn 1's bounds". The hostile25 fix (`bound_turn` logs a refused cut and goes on) does not
// help, as the refusal outlasts the cut.
// Passes since a turn's record is written from the reserve (fails again without it).
#[test]
fn a_stop_whose_cut_under_16_mib_is_refused_by_a_full_store() {
    let small = crate::full_disk::small_ext4();
    let reserve = crate::full_disk::reserve_of(small.size());
    let mut ws = Workspace::new();
    let store = mounted_on_small(
        &mut ws,
        &small,
        &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
    );
    let filler = small.path().join("filler");
    // Leave about 8 MiB above the reserve.
    let fill = small.available() - reserve - (8 << 20);
    crate::full_disk::write_noise(&filler, fill as usize);
    let out = agent(
        &ws,
        &format!(
            "FILLER = {:?}\n{}",
            filler.display().to_string(),
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
f = open("big.bin", "wb")
for i in range(12):
    f.write(os.urandom(1 << 20))
f.flush()
t1 = stop(1)
os.unlink(FILLER)
f.truncate(16)
try:
    f.close()
except OSError:
    pass
time.sleep(2)
for i in range(20):
    try:
        edit("b.txt", "between turns\n"); break
    except OSError:
        time.sleep(0.5)
t2 = prompt(2)
edit("c.txt", "turn two\n")
time.sleep(1)
t3 = stop(2)
print(json.dumps([t1, t2, t3]))
"#
        ),
    );
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced_files(&ws);
    let daemon = fs::read_to_string(store.join("daemon.log")).unwrap_or_default();
    let refused = daemon.contains("open files hold at its turn's bound");
    let what = format!(
        "hooks took {out}\n{}\n{wrong:?}\n{what}\ndaemon.log (last 20):\n{}",
        lines(&all),
        daemon.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    // The attack: the cut was refused.
    assert!(refused, "the Stop's cut was not refused: {what}");
    assert_eq!(ts.len(), 2, "{what}");
    assert!(
        ts[0]["end_id"].as_u64().is_some(),
        "turn 1 never ended: {what}"
    );
    let b = all.iter().rfind(|c| c["path"] == "b.txt").expect(&what);
    assert!(b["turn"].is_null(), "b.txt between turns: {what}");
    assert!(
        paths(&turn_log(&ws, 2)).contains(&"c.txt".to_string()),
        "c.txt in turn 2: {what}"
    );
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}
