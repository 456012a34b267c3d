//! The twenty-fifth hostile pass, on a82d867 and 5ad730e: at a turn's begin or end the files
//! the session has open for writing are cut (recorded as a change of the old turn), the bound
//! taken, the turn switched, and the files still open relabelled with the new turn; hook
//! commands no longer queue for the command threads; a save-by-rename is labelled with the
//! turn at the rename; a reopened store hands out ids after every turn's bounds.
//!
//! Each attack checks a change's label against its id (`hostile24::misplaced`) and what a
//! turn's changes restore, export and diff to, with files open across many turns.
//!
//! Failed at 5ad730e, passing since: a large open file's cut held the bound past the hook's
//! budget (now a file over 16 MiB is not cut: its whole edit is the turn it is closed in); a
//! cut's marker kept the old turn across a SIGKILL (the relabel now rewrites it); a cut the
//! full store refused kept the turn from ending (the turn now ends anyway); an operation that
//! raced a bound (opened after the cut, closed between the bound and the switch) kept the old
//! turn with an id past its end (now a change is labelled again as its id is handed out,
//! under the lock the bound is taken and the turn switched under); a child of the agent naming
//! the agent's session id took the session over (`who.rs` `claim`, older than these changes;
//! now it is registered apart like any other process).

use std::fs;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Workspace, daemon_pid, rw, rw_ok, sh, sync, wait_for};
use crate::hostile18::{cat_at, lines};
use crate::hostile24::{SESSION, agent, hook_log, misplaced, mounted, turn_log, turns};
use crate::record::log;

pub(crate) fn paths(t: &[Value]) -> Vec<String> {
    let mut p: Vec<String> = t
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    p.sort();
    p.dedup();
    p
}

/// What a rollback's output says it does (or would do) path by path, without its summary.
pub(crate) fn planned(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.is_empty() && !l.starts_with("dry run:") && !l.starts_with("rollback-"))
        .map(str::to_string)
        .collect()
}

pub(crate) fn bounds(ws: &Workspace, n: usize) -> (u64, u64) {
    let ts = turns(ws);
    (
        ts[n - 1]["start_id"].as_u64().unwrap(),
        ts[n - 1]["end_id"].as_u64().unwrap(),
    )
}

/// The agent keeps a 256 MiB file open for writing across its Stop and next prompt (a build
/// artefact, a database it writes): each bound first cuts it, which reads and stores all of
/// it. The Stop's and the prompt's hooks may give up (800 ms); the agent's edit of `c.txt`
/// right after the prompt must still be in turn 2, and its edit of `b.txt` between the Stop
/// and the prompt in no turn.
// Fails at 5ad730e: the bound is not taken at once: `bound_turn` cuts the open 256 MiB file
// first (reads and stores all of it, seconds), all three hooks give up at 800 ms, and the
// agent's edits meanwhile keep turn 1's label: seen turn 1 (3, 7] with a.txt, b.txt (between
// turns), c.txt (prompt 2's) and big.bin; turn 2 (8, open] with no files, the rest of big.bin
// (#8, written in turn 2) labelled with no turn; Stop 2's `turn end` never ended turn 2.
#[test]
fn a_huge_file_open_across_a_stop_and_the_next_prompt_at_once() {
    open_file_of_mib_across_a_stop_and_the_next_prompt(256);
}

/// The same with a 64 MiB file (a SQLite database, a build log): 32 MiB held in a debug build.
// Fails at 5ad730e the same way (see above): seen turn 1 (3, 6] with a.txt, b.txt (#5, the edit
// between turns) and big.bin; turn 2 (6, 8] with big.bin only: c.txt's edit (#7, prompt 2's)
// labelled with no turn, as the prompt's bound had not been taken when it was opened.
#[test]
fn a_64_mib_file_open_across_a_stop_and_the_next_prompt_at_once() {
    open_file_of_mib_across_a_stop_and_the_next_prompt(64);
}

fn open_file_of_mib_across_a_stop_and_the_next_prompt(mib: usize) {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
        &[],
    );
    let out = agent(
        &ws,
        &(format!("MIB = {mib}\n")
            + r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
big = open("big.bin", "wb")
chunk = os.urandom(1 << 20)
for i in range(MIB):
    big.write(chunk[i:] + chunk[:i])
big.flush()
edit("a.txt", "turn one\n")
t1 = stop(1)
edit("b.txt", "between turns\n")
t2 = prompt(2)
edit("c.txt", "turn two\n")
big.write(b"more in turn two\n"); big.close()
time.sleep(1)
t3 = stop(2)
print(json.dumps([t1, t2, t3]))
"#),
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced(&ws);
    let what = format!(
        "hooks took {out}\n{}\nmisplaced: {wrong:?}\n{what}",
        lines(&all[first..]),
    );
    let b = all.iter().rfind(|c| c["path"] == "b.txt").expect(&what);
    assert!(b["turn"].is_null(), "b.txt's edit between turns: {what}");
    // A file this large is not cut at a bound (reading it would hold the bound past the
    // hook's budget): its whole create is the turn it is closed in.
    assert_eq!(paths(&turn_log(&ws, 1)), ["a.txt"], "turn 1: {what}");
    assert_eq!(
        paths(&turn_log(&ws, 2)),
        ["big.bin", "c.txt"],
        "turn 2: {what}"
    );
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// Three files open for writing across five turns at once, one of them through two hard
/// links (`h1.txt`, `h2.txt`, written through both names): every turn cuts each, and what
/// each holds at turn N's end (`cat --at END`) is what the agent wrote up to then; each turn
/// lists the three files (the linked one under one of its names) and no change is misplaced.
#[test]
fn several_files_and_a_hard_link_open_across_five_turns() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("f1.txt", "f1\n"), ("f2.txt", "f2\n"), ("h1.txt", "h\n")],
        &[],
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
os.link("h1.txt", "h2.txt")
prompt(1)
fs = [open("f1.txt", "w"), open("f2.txt", "w"), open("h1.txt", "w"), open("h2.txt", "a")]
for n in range(1, 6):
    if n > 1:
        prompt(n)
    for i, f in enumerate(fs):
        f.write("turn %d via %d\n" % (n, i)); f.flush()
    stop(n)
for f in fs:
    f.close()
time.sleep(0.5)
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    for n in 1..=5u64 {
        let t = turn_log(&ws, n);
        let p = paths(&t);
        assert_eq!(p.len(), 3, "turn {n} lists {p:?}\n{what}");
        let (_, end) = bounds(&ws, n as usize);
        let upto = |i: usize| -> String {
            (1..=n)
                .map(|k| format!("turn {k} via {i}\n"))
                .collect::<String>()
        };
        assert_eq!(cat_at(&ws, "f1.txt", end), upto(0), "turn {n}\n{what}");
        assert_eq!(cat_at(&ws, "f2.txt", end), upto(1), "turn {n}\n{what}");
        // h1.txt and h2.txt are one file, written through both handles in turn: the two
        // handles share no offset, so "w" (offset from 0) and "a" (at the end) interleave.
        let h = fs::read_to_string(ws.path().join("h1.txt")).unwrap();
        assert_eq!(
            cat_at(&ws, "h1.txt", end),
            cat_at(&ws, "h2.txt", end),
            "turn {n}: the two names of one file differ at its end\n{h:?}\n{what}"
        );
    }
    ws.unmount();
}

/// A file open for writing is renamed (`r.txt` to `s.txt`) in turn 2 and written on in turn
/// 3; another (`d.txt`) is deleted while open in turn 2 and written on after. Every change
/// is in the turn it was made in, the renamed file's content at each turn's end is what it
/// held then, and `rollback --turn S:3` (dry run and run) puts `s.txt` back to its end of turn
/// 2.
#[test]
fn files_renamed_and_deleted_while_open_across_turns() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("r.txt", "r\n"), ("d.txt", "d\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
r = open("r.txt", "w"); d = open("d.txt", "w")
r.write("one\n"); r.flush(); d.write("one\n"); d.flush()
stop(1)
prompt(2)
os.rename("r.txt", "s.txt")
r.write("two\n"); r.flush()
d.write("two\n"); d.flush()
os.unlink("d.txt")
d.write("two after unlink\n"); d.flush()
stop(2)
prompt(3)
r.write("three\n"); r.flush()
d.write("three\n"); d.close()
time.sleep(0.3)
stop(3)
r.close()
time.sleep(0.5)
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    let (_, e1) = bounds(&ws, 1);
    let (_, e2) = bounds(&ws, 2);
    let (_, e3) = bounds(&ws, 3);
    assert_eq!(cat_at(&ws, "r.txt", e1), "one\n", "{what}");
    assert_eq!(cat_at(&ws, "d.txt", e1), "one\n", "{what}");
    assert_eq!(cat_at(&ws, "s.txt", e2), "one\ntwo\n", "{what}");
    assert_eq!(cat_at(&ws, "s.txt", e3), "one\ntwo\nthree\n", "{what}");
    assert_eq!(paths(&turn_log(&ws, 1)), ["d.txt", "r.txt"], "{what}");
    assert_eq!(paths(&turn_log(&ws, 3)), ["s.txt"], "{what}");
    let turn = format!("{SESSION}:3");
    let dry = rw_ok(&ws, &["rollback", "--turn", &turn, "--dry-run"]);
    let run = rw_ok(&ws, &["rollback", "--turn", &turn]);
    let now = fs::read_to_string(ws.path().join("s.txt")).unwrap();
    assert_eq!(
        planned(&dry),
        planned(&run),
        "dry:\n{dry}\nrun:\n{run}\n{what}"
    );
    assert_eq!(
        now, "one\ntwo\n",
        "after rollback --turn {turn}\ndry:\n{dry}\nrun:\n{run}\n{what}"
    );
    ws.unmount();
}

/// Ten turns in each of which a child of the agent writes `eN.txt` and exits just before the
/// Stop (its RELEASE still in flight when the hook's command comes): each `eN.txt` must be
/// in turn N.
#[test]
fn an_opener_that_exits_just_before_each_stop() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("seed.txt", "s\n")], &[]);
    let mut files = Vec::new();
    for n in 1..=10 {
        let p = ws.path().join(format!("e{n}.txt"));
        fs::write(&p, "before\n").unwrap();
        files.push(p);
    }
    sync(&ws);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
for n in range(1, 11):
    prompt(n)
    subprocess.run([sys.executable, "-c",
                    "f = open('e%d.txt', 'r+'); f.write('turn %d\\n' + 'x' * 100000); f.flush()"
                    % (n, n)], check=True)
    stop(n)
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    for n in 1..=10u64 {
        assert_eq!(
            paths(&turn_log(&ws, n)),
            [format!("e{n}.txt")],
            "turn {n}\n{wrong:?}\n{what}"
        );
    }
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}

fn threads_of(pid: i32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(|t| t.trim().parse().unwrap())
        .unwrap_or(0)
}

/// A flood: 48 threads of the agent each run a PreToolUse and a PostToolUse hook at once
/// (parallel tool calls), twice, while the agent keeps `w.txt` open and writes it. The daemon
/// must still answer (`rewind status` within 10 s during the flood), its threads come back
/// down, and the turn's changes stay in it: a Stop after the flood ends turn 1, the edit
/// after the Stop is in no turn.
#[test]
fn a_flood_of_tool_hooks_from_many_threads_at_once() {
    let mut ws = Workspace::new();
    let first = mounted(&mut ws, &[("w.txt", "w\n"), ("z.txt", "z\n")], &[]);
    let pid = daemon_pid(&ws);
    let base = threads_of(pid);
    let stop_flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = {
        let stop_flag = stop_flag.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(threads_of(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let (out, slowest) = std::thread::scope(|s| {
        let status = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            let mut slowest = Duration::ZERO;
            while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let o = rw(&ws, &["status"]);
                assert!(o.status.success(), "{o:?}");
                slowest = slowest.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(200));
            }
            slowest
        });
        let out = agent(
            &ws,
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
w = open("w.txt", "w")
def tool(i, k):
    tid = "toolu_%d_%d" % (k, i)
    t = {"command": "echo %d" % i}
    hook("PreToolUse", prompt_id="p-1", tool_name="Bash", tool_input=t, tool_use_id=tid)
    w.write("%d %d\n" % (k, i)); w.flush()
    hook("PostToolUse", prompt_id="p-1", tool_name="Bash", tool_input=t,
         tool_response={"stdout": ""}, tool_use_id=tid)
took = []
for k in range(2):
    t = time.monotonic()
    ths = [threading.Thread(target=tool, args=(i, k)) for i in range(48)]
    for th in ths: th.start()
    for th in ths: th.join()
    took.append(time.monotonic() - t)
w.write("end of turn one\n"); w.flush()
s = stop(1)
edit("z.txt", "between turns\n")
w.close()
time.sleep(1)
print(json.dumps([took, s]))
"#,
        );
        stop_flag.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, status.join().unwrap())
    });
    stop_flag.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = peak.join().unwrap();
    sync(&ws);
    assert!(
        wait_for(10, || threads_of(pid) <= base + 4),
        "daemon threads: {base} before, {} after",
        threads_of(pid)
    );
    let t0 = Instant::now();
    rw_ok(&ws, &["status"]);
    let all = log(&ws);
    let (wrong, what) = misplaced(&ws);
    let gave_up = hook_log(&ws).matches("no answer within").count();
    let what = format!(
        "hooks took {out}; daemon threads {base} before, peak {peak}; slowest read {slowest:?}; \
         {gave_up} hooks gave up\n{}\n{wrong:?}\n{what}",
        lines(&all[first..])
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{what}");
    let z = all.iter().rfind(|c| c["path"] == "z.txt").expect(&what);
    assert!(z["turn"].is_null(), "{what}");
    let one = turn_log(&ws, 1);
    assert_eq!(paths(&one), ["w.txt"], "{what}");
    let (_, end) = bounds(&ws, 1);
    assert!(
        cat_at(&ws, "w.txt", end).ends_with("end of turn one\n"),
        "{what}"
    );
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// A flood of prompts and Stops: 24 threads of the agent each send a UserPromptSubmit then a
/// Stop at once while a background writer of the agent edits `bg.txt`. Whatever turns come
/// of it, their bounds must not overlap (turn N ends at or before turn N+1 starts) and no
/// change may be misplaced.
// Passed for the helper and in two CI runs; failed in the CI run of e50e4c3 on the known race
// below: "#100 modify bg.txt labelled turn 23: outside its bounds (99, Some(99)]" (an edit of
// the background writer opened after the bound's cut and closed between the bound and the
// switch). Passes since the change's label is taken again with its id (`label_now`).
#[test]
fn a_flood_of_prompts_and_stops_at_once_keeps_bounds_in_order() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("bg.txt", "0\n")], &[]);
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
        f.write("%d\\n" % i); f.flush(); time.sleep(0.002); f.truncate()
'''])
time.sleep(0.2)
def one(n):
    prompt(n); time.sleep(0.01); stop(n)
ths = [threading.Thread(target=one, args=(n,)) for n in range(1, 25)]
for th in ths: th.start()
for th in ths: th.join()
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
"#,
    );
    sync(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced(&ws);
    let what = format!("{out}\n{wrong:?}\n{what}");
    let mut last_end = 0;
    for t in &ts {
        let start = t["start_id"].as_u64().unwrap();
        let end = t["end_id"].as_u64();
        assert!(start >= last_end, "turn {} overlaps: {what}", t["turn"]);
        if let Some(e) = end {
            assert!(e >= start, "{what}");
            last_end = e;
        }
    }
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// Two agents in one workspace (two Claude Code sessions, each its own process), each keeping
/// a file open across its own turns, interleaved: neither's bound cuts or relabels the other's
/// file. Each session's turn N lists just its own file, with what it held at that turn's end.
#[test]
fn two_agents_each_with_a_file_open_across_their_own_turns() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("one.txt", "1\n"), ("two.txt", "2\n")], &[]);
    let script = |sid: &str, file: &str, delay: f64| {
        format!(
            r#"
SID = "{sid}"
time.sleep({delay})
hook("SessionStart", source="startup", model="m")
f = open("{file}", "w")
for n in range(1, 6):
    prompt(n)
    f.write("turn %d\n" % n); f.flush()
    time.sleep(0.13)
    stop(n)
    time.sleep(0.07)
f.close()
time.sleep(0.3)
"#
        )
    };
    let a = "5e55a0b1-0000-4000-8000-0000000000a1";
    let b = "5e55a0b1-0000-4000-8000-0000000000b2";
    let (sa, sb) = (script(a, "one.txt", 0.0), script(b, "two.txt", 0.1));
    std::thread::scope(|s| {
        let t1 = s.spawn(|| agent(&ws, &sa));
        let t2 = s.spawn(|| agent(&ws, &sb));
        t1.join().unwrap();
        t2.join().unwrap();
    });
    sync(&ws);
    let all = log(&ws);
    for (sid, file) in [(a, "one.txt"), (b, "two.txt")] {
        let session = format!("claude-{sid}");
        let ts: Vec<Value> = rw_ok(&ws, &["turns", "--session", &session, "--json"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let what = format!("{session}: {ts:?}\n{}", lines(&all));
        assert_eq!(ts.len(), 5, "{what}");
        for t in &ts {
            let n = t["turn"].as_u64().unwrap();
            let listed: Vec<Value> =
                rw_ok(&ws, &["log", "--turn", &format!("{session}:{n}"), "--json"])
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            assert_eq!(paths(&listed), [file], "turn {n}\n{what}");
            let end = t["end_id"].as_u64().unwrap();
            let want: String = (1..=n).map(|k| format!("turn {k}\n")).collect();
            assert_eq!(cat_at(&ws, file, end), want, "turn {n}\n{what}");
        }
        for c in all.iter().filter(|c| c["session"] == session.as_str()) {
            assert_eq!(c["path"], file, "{what}");
        }
    }
    ws.unmount();
}

/// Turns cut this way, reviewed: a file open across three turns plus a small edit in each.
/// For turn 2, `diff --turn`, `export --turn` and `rollback --turn` (dry run, then run) must
/// cover exactly the files `log --turn` lists; `rollback --to-turn S:2` must give the tree at
/// turn 2's start.
#[test]
fn diff_export_and_rollback_of_cut_turns_agree_with_log() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("o.txt", "o\n"), ("k1.txt", "k\n"), ("k2.txt", "k\n")],
        &[],
    );
    sh(
        &ws.path(),
        "git init -q . && git -c user.email=t@t -c user.name=t add -A \
         && git -c user.email=t@t -c user.name=t commit -qm base",
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
o = open("o.txt", "w")
for n in range(1, 4):
    prompt(n)
    o.write("turn %d\n" % n); o.flush()
    edit("k%d.txt" % min(n, 2), "k in turn %d\n" % n)
    stop(n)
o.close()
time.sleep(0.5)
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    let turn = format!("{SESSION}:2");
    let listed = paths(&turn_log(&ws, 2));
    assert_eq!(listed, ["k2.txt", "o.txt"], "{what}");
    let diff = rw_ok(&ws, &["diff", "--turn", &turn, "--stat"]);
    for p in &listed {
        assert!(diff.contains(p.as_str()), "diff --turn: {diff}\n{what}");
    }
    assert!(!diff.contains("k1.txt"), "diff --turn: {diff}\n{what}");
    let full = rw_ok(&ws, &["diff", "--turn", &turn]);
    assert!(full.contains("+turn 2"), "{full}");
    assert!(
        !full.contains("+turn 1") && !full.contains("+turn 3"),
        "{full}"
    );
    let export = rw(&ws, &["export", "--turn", &turn, "--branch", "t2"]);
    let exported = sh(
        &ws.path(),
        "git diff --name-only t2~1 t2 2>&1; echo ---; git show t2:o.txt 2>&1",
    );
    let what = format!(
        "export: {}{}\nexported: {exported}\n{what}",
        String::from_utf8_lossy(&export.stdout),
        String::from_utf8_lossy(&export.stderr)
    );
    assert!(export.status.success(), "{what}");
    let (names, o) = exported.split_once("---\n").unwrap();
    let mut names: Vec<&str> = names.lines().collect();
    names.sort();
    assert_eq!(names, ["k2.txt", "o.txt"], "{what}");
    assert_eq!(o, "turn 1\nturn 2\n", "{what}");
    let (start, _) = bounds(&ws, 2);
    let at_start = cat_at(&ws, "o.txt", start);
    let dry = rw_ok(&ws, &["rollback", "--to-turn", &turn, "--dry-run"]);
    let run = rw_ok(&ws, &["rollback", "--to-turn", &turn]);
    let now = fs::read_to_string(ws.path().join("o.txt")).unwrap();
    let k2 = fs::read_to_string(ws.path().join("k2.txt")).unwrap();
    let what = format!("dry:\n{dry}\nrun:\n{run}\n{what}");
    assert_eq!(
        planned(&dry),
        planned(&run),
        "the preview is not the run: {what}"
    );
    assert_eq!(now, at_start, "{what}");
    assert_eq!(at_start, "turn 1\n", "{what}");
    assert_eq!(k2, "k\nagain\n", "{what}");
    ws.unmount();
}

/// SIGKILL of the daemon right after a Stop cut a file the agent still has open, then a
/// remount: turn 1 keeps its bounds and its cut change, and what the file holds after (the
/// scan's `external` change, an edit after the remount) falls after every turn's bound.
// Fails at 5ad730e: the cut's marker keeps the old turn's label (`relabel_episodes_of` changes
// only the episode in memory), so after the SIGKILL the next mount records what the file got
// after the Stop as the agent's turn 1 change with an id past turn 1's end: seen turn 1
// (2, 3], "#4 modify k.txt labelled turn 1: outside its bounds (2, Some(3)], so in no turn".
#[test]
fn sigkill_right_after_a_cut_then_a_remount() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("k.txt", "k\n"), ("a.txt", "a\n")], &[]);
    let dir = ws.path();
    let mut writer = crate::common::python_command(
        &dir,
        &format!(
            "{}\n{}",
            crate::hostile24::PY,
            r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
f = open("k.txt", "w")
f.write("cut at the stop\n"); f.flush()
stop(1)
print("stopped", flush=True)
try:
    f.write("after the stop\n"); f.flush()
except OSError:
    pass
time.sleep(30)
"#
        ),
    )
    .env("PATH", crate::common::path_with_rewind())
    .env("XDG_DATA_HOME", ws.store().parent().unwrap().join("data"))
    .env_remove("REWIND_SESSION")
    .env_remove("REWIND_AGENT")
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = std::io::BufReader::new(writer.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "stopped\n");
    std::thread::sleep(Duration::from_millis(100));
    let before = turns(&ws);
    let pid = daemon_pid(&ws);
    ws.kill_daemon(pid);
    let _ = writer.kill();
    let _ = writer.wait();
    ws.mount();
    fs::write(dir.join("a.txt"), "after the remount\n").unwrap();
    sync(&ws);
    let all = log(&ws);
    let ts = turns(&ws);
    let (wrong, what) = misplaced(&ws);
    let what = format!(
        "turns before the kill: {before:?}\nafter: {ts:?}\n{}\n{wrong:?}\n{what}",
        lines(&all)
    );
    assert_eq!(ts.len(), 1, "{what}");
    let end = ts[0]["end_id"].as_u64().expect(&what);
    assert_eq!(Some(end), before[0]["end_id"].as_u64(), "{what}");
    assert_eq!(paths(&turn_log(&ws, 1)), ["k.txt"], "{what}");
    assert_eq!(cat_at(&ws, "k.txt", end), "cut at the stop\n", "{what}");
    let after_remount = all.iter().rfind(|c| c["path"] == "a.txt").expect(&what);
    assert!(after_remount["id"].as_u64().unwrap() > end, "{what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// An editor's save-by-rename whose temporary file is open across the Stop: `t.tmp` is made
/// and written in turn 1 and still open at the Stop (the cut records its create as turn 1's),
/// then finished in turn 2 and renamed over `c.txt`. No change may be misplaced, `rollback
/// --turn S:2` (dry run, then run) must leave `c.txt` as it was at turn 2's start, and
/// `rollback --to-turn S:1` must give back the tree before turn 1: `c.txt` as it was, no
/// `t.tmp`.
#[test]
fn a_save_by_rename_whose_temp_file_is_open_across_the_stop() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("c.txt", "before\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
t = open("t.tmp", "w")
t.write("saved in turn one\n"); t.flush()
stop(1)
prompt(2)
t.write("and two\n"); t.close()
os.rename("t.tmp", "c.txt")
time.sleep(0.3)
stop(2)
"#,
    );
    sync(&ws);
    let all = log(&ws);
    let (wrong, what) = misplaced(&ws);
    let what = format!("{wrong:?}\n{what}");
    assert!(wrong.is_empty(), "{what}");
    let (s2, _) = bounds(&ws, 2);
    let (s1, _) = bounds(&ws, 1);
    let c_at_2 = cat_at(&ws, "c.txt", s2);
    let dry = rw_ok(
        &ws,
        &["rollback", "--turn", &format!("{SESSION}:2"), "--dry-run"],
    );
    let run = rw(&ws, &["rollback", "--turn", &format!("{SESSION}:2")]);
    let now = fs::read_to_string(ws.path().join("c.txt")).ok();
    let what = format!(
        "c.txt at turn 2's start #{s2}: {c_at_2:?}\ndry:\n{dry}\nrun: {run:?}\n{}\n{what}",
        lines(&all)
    );
    assert!(run.status.success(), "{what}");
    assert_eq!(
        planned(&dry),
        planned(&String::from_utf8_lossy(&run.stdout)),
        "the preview is not the run: {what}"
    );
    assert_eq!(now.as_deref(), Some(c_at_2.as_str()), "{what}");
    let c_at_1 = cat_at(&ws, "c.txt", s1);
    let run = rw(
        &ws,
        &["rollback", "--to-turn", &format!("{SESSION}:1"), "--force"],
    );
    let now = fs::read_to_string(ws.path().join("c.txt")).ok();
    let what = format!("to-turn 1: {run:?}\n{what}");
    assert_eq!(now.as_deref(), Some(c_at_1.as_str()), "{what}");
    assert!(!ws.path().join("t.tmp").exists(), "{what}");
    ws.unmount();
}

/// The store's disk is full when the Stop cuts a file the agent has open (a 64 MiB ext4 for
/// the store, a filler beside it, the open file larger than what is left): the cut fails.
/// The agent then frees the disk, truncates the big file to 16 bytes and closes it (nothing
/// slow left to cut), edits `b.txt` between turns, sends its next prompt and edits `c.txt`. The Stop happened: `b.txt`'s edit must be in no turn, `c.txt`'s in turn 2,
/// and no change misplaced.
// Fails at 5ad730e: the Stop's cut of big.bin is refused (the store's disk too full), so
// `bound_turn` returns the error before it switches the turn: the Stop hook gets "store:
// cannot write (... too full to store the content of big.bin ...) nothing recorded", turn 1
// stays open, and once the disk has room (the daemon logs "the store accepts writes again")
// the agent's edit between turns is labelled turn 1 and within its bounds: seen turn 1
// (0, 3] with a.txt, big.bin and b.txt (#3, between turns), turn 2 (3, 4] with c.txt.
#[test]
fn a_stop_whose_cut_fails_on_a_full_store_disk() {
    let small = crate::full_disk::small_ext4();
    let reserve = crate::full_disk::reserve_of(small.size());
    let mut ws = Workspace::new();
    for (p, c) in [("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")] {
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
f = open("big.bin", "wb")
left = BIG
while left > 0:
    n = min(left, 1 << 20)
    f.write(os.urandom(n)); left -= n
f.flush()
t1 = stop(1)
os.unlink(FILLER)
f.truncate(16); f.close()
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
    let (wrong, what) = misplaced(&ws);
    let daemon = fs::read_to_string(store.join("daemon.log")).unwrap_or_default();
    let what = format!(
        "hooks took {out}\n{}\n{wrong:?}\n{what}\ndaemon.log (last 20):\n{}",
        lines(&all),
        daemon.lines().rev().take(20).collect::<Vec<_>>().join("\n")
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

/// A flood of hooks from 64 other processes at once, all naming the agent's session id (tool
/// subprocesses that run `rewind hook` themselves, a copied hook config): each is registered
/// apart (`NAME~pidPID`), and none of their prompts or Stops may open or close the agent's
/// own turns. The agent, meanwhile, keeps `w.txt` open and writes it: its turn 1 holds it,
/// its edit after its own Stop is in no turn, the daemon keeps answering and its threads come
/// back down.
// Fails at 5ad730e: the first of the 64 children to send SessionStart takes the agent's
// session over (`who.rs` `claim`: a claimer that descends from the owner gets `Claim::Own` and
// becomes the owner), the others are then told "session ... belongs to process 17121" (a
// child, not the agent), and the child's prompt and Stop open and close the agent's turns:
// seen 4 turns of the agent's session, turn 1 (2, 3] ended by a child's prompt, the agent's
// own w.txt in turn 2 (3, 15] beside c17121.txt, c17158.txt in turn 3, c17241.txt in turn 4.
// Passes since a process under the owner is registered apart too.
#[test]
fn a_flood_of_hooks_from_64_processes_naming_the_agents_session() {
    let mut ws = Workspace::new();
    let first = mounted(&mut ws, &[("w.txt", "w\n"), ("z.txt", "z\n")], &[]);
    let pid = daemon_pid(&ws);
    let base = threads_of(pid);
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
w = open("w.txt", "w")
w.write("before the flood\n"); w.flush()
child = PY_SRC + '''
import random
hook("SessionStart", source="startup", model="m")
n = random.randint(100, 1000)
prompt(n)
open("c%d.txt" % os.getpid(), "w").write("x\\n")
stop(n)
if MISSED:
    print("gave up: c%d.txt %s" % (os.getpid(), " ".join(MISSED)), flush=True)
'''
t = time.monotonic()
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(64)]
for i in range(20):
    w.write("during the flood %d\n" % i); w.flush(); time.sleep(0.02)
for k in kids:
    k.wait()
took = time.monotonic() - t
w.write("end of turn one\n"); w.close()
time.sleep(0.3)
s = stop(1)
edit("z.txt", "between turns\n")
time.sleep(0.5)
print(json.dumps([took, s]))
"#
        .replace("PY_SRC", &format!("{:?}", crate::hostile24::PY))
        .as_str(),
    );
    sync(&ws);
    assert!(
        wait_for(10, || threads_of(pid) <= base + 4),
        "daemon threads: {base} before, {} after",
        threads_of(pid)
    );
    let all = log(&ws);
    let (wrong, what) = misplaced(&ws);
    let sessions = rw_ok(&ws, &["sessions"]);
    let mine: Vec<&Value> = all[first..]
        .iter()
        .filter(|c| c["session"] == SESSION)
        .collect();
    let what = format!(
        "{out}\nthe agent's session's changes:\n{}\n{wrong:?}\n{} sessions\n{}",
        mine.iter()
            .map(|c| format!(
                "#{} {} {} turn {}",
                c["id"], c["kind"], c["path"], c["turn"]
            ))
            .collect::<Vec<_>>()
            .join("\n"),
        sessions.lines().count(),
        what.split("changes:").next().unwrap_or_default()
    ) + "\nhook log:\n"
        + &hook_log(&ws);
    assert_eq!(turns(&ws).len(), 1, "{what}");
    // A child whose hooks gave up waiting (a loaded machine: 64 of them at once) may have
    // made its file before its own session was recorded, and so as a process of the agent's
    // tree, in its turn; no other child's file may be there.
    let gave_up: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("gave up: "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let strays: Vec<String> = paths(&turn_log(&ws, 1))
        .into_iter()
        .filter(|p| p != "w.txt" && !gave_up.contains(&p.as_str()))
        .collect();
    assert!(
        paths(&turn_log(&ws, 1)).contains(&"w.txt".to_string()),
        "{what}"
    );
    assert!(strays.is_empty(), "{strays:?} in turn 1: {what}");
    let (_, end) = bounds(&ws, 1);
    assert!(
        cat_at(&ws, "w.txt", end).ends_with("end of turn one\n"),
        "{what}"
    );
    let z = all.iter().rfind(|c| c["path"] == "z.txt").expect(&what);
    assert!(z["turn"].is_null(), "{what}");
    assert!(wrong.is_empty(), "{what}");
    ws.unmount();
}

/// A process under the agent whose own SessionStart was never recorded (its hook gave up
/// waiting, as 64 at once on a loaded machine do) sends hooks naming the agent's session id:
/// a tool call, a Stop, a SessionEnd. It claimed nothing, so none of them may touch the
/// agent's turn or registration: the agent's turn 1 holds its edits before and after them,
/// and its edit after the child's SessionEnd is still its session's.
// Failed before the hook named its agent's process (`--pid` on turn and tool commands,
// `session end --exclusive`): the daemon looked for a claim from the writer up and found the
// agent's own, so the child's Stop ended the agent's turn 1 (seen in a CI run of
// `a_flood_of_hooks_from_64_processes_naming_the_agents_session`: turn 1 ended by a child,
// the agent's own later write of `w.txt` in no turn) and its SessionEnd unregistered the agent.
#[test]
fn hooks_from_a_process_under_the_agent_that_never_registered_touch_nothing_of_its() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
        &[],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "by the agent in turn one\n")
child = PY_SRC + '''
hook("PreToolUse", tool_name="Bash", tool_use_id="t-1", tool_input={})
hook("PostToolUse", tool_name="Bash", tool_use_id="t-1", tool_input={}, tool_response={})
stop(7)
hook("SessionEnd", reason="other")
'''
subprocess.run([sys.executable, "-c", child], check=True)
edit("b.txt", "by the agent after the child's hooks\n")
time.sleep(0.3)
stop(1)
edit("c.txt", "by the agent between turns\n")
"#
        .replace("PY_SRC", &format!("{:?}", crate::hostile24::PY))
        .as_str(),
    );
    sync(&ws);
    let all = log(&ws);
    let what = format!(
        "{out}\nturns: {:?}\nchanges:\n{}\nhook log:\n{}",
        turns(&ws),
        lines(&all),
        hook_log(&ws)
    );
    assert_eq!(turns(&ws).len(), 1, "{what}");
    assert_eq!(paths(&turn_log(&ws, 1)), ["a.txt", "b.txt"], "{what}");
    let c = all.iter().rfind(|c| c["path"] == "c.txt").expect(&what);
    assert_eq!(
        c["session"], SESSION,
        "the agent is still registered: {what}"
    );
    assert!(c["turn"].is_null(), "{what}");
    assert!(
        hook_log(&ws).contains("never started it"),
        "the child's Stop was refused and logged: {what}"
    );
    let (wrong, _) = misplaced(&ws);
    assert!(wrong.is_empty(), "{what}\n{wrong:?}");
    ws.unmount();
}

/// A background process of the agent keeps one file open and renames it back and forth
/// (`x.txt`, `y.txt`) between writes while the agent goes through twenty prompts and Stops:
/// each bound races the renames (a rename of a file open for writing cuts its episode). Three
/// more such writers (`pK.txt`, `qK.txt`), without pauses, widen the race. No change may be misplaced, and at each turn's end the file (under
/// whichever name it had) holds a whole line count the writer had reached.
// Fails at 5ad730e (3 runs of 3; the six-turn, one-writer version failed 1 run in 7, under
// load): a rename (or the cut a rename makes of the open file) racing the bound is labelled
// with the old turn but takes its id after the bound: seen "#576 rename q2.txt labelled turn
// 2: outside its bounds (400, Some(575)], so in no turn", "#1564 modify q2.txt labelled turn
// 5: outside its bounds (1396, Some(1563)]", and 7 more renames; in the one-writer run "#368
// modify y.txt labelled turn 4: outside its bounds (325, Some(367)]". `before_rename` cuts the
// episode (its label not yet relabelled) and takes `who()` (the turn still open) while
// `bound_turn` is between `point_now` and `relabel_episodes_of`; nothing orders them. Passes
// since the label is taken again with the id (`label_now`); failed 3 runs of 3 without it.
#[test]
fn a_file_renamed_back_and_forth_while_open_across_twenty_turns() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("x.txt", "0\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
f = open("x.txt", "w")
i = 0
names = ["x.txt", "y.txt"]
while not os.path.exists("stop.flag"):
    i += 1
    f.write("%d\\n" % i); f.flush()
    os.rename(names[i % 2 - 1] if False else names[(i + 1) % 2], names[i % 2])
    time.sleep(0.003)
f.close()
'''])
more = [subprocess.Popen([sys.executable, "-c", '''
import os, sys
a, b = sys.argv[1], sys.argv[2]
f = open(a, "w")
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    f.write("%d\\n" % i); f.flush()
    os.rename(a if i % 2 else b, b if i % 2 else a)
f.close()
''', "p%d.txt" % k, "q%d.txt" % k]) for k in range(3)]
time.sleep(0.2)
for n in range(1, 21):
    prompt(n)
    time.sleep(0.03)
    stop(n)
    time.sleep(0.03)
open("stop.flag", "w").close()
bg.wait()
for m in more:
    m.wait()
os.unlink("stop.flag")
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(
        wrong.is_empty(),
        "{} misplaced:\n{}\n{what}",
        wrong.len(),
        wrong.join("\n")
    );
    for n in 1..=20 {
        let (_, end) = bounds(&ws, n);
        let x = rw(&ws, &["cat", "x.txt", "--at", &end.to_string()]);
        let y = rw(&ws, &["cat", "y.txt", "--at", &end.to_string()]);
        let held: Vec<String> = [x, y]
            .iter()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .collect();
        assert_eq!(held.len(), 1, "turn {n}: {held:?}\n{what}");
        // Before the writer's first open (it may start late on a busy machine): as mounted.
        if held[0] == "0\nagain\n" {
            continue;
        }
        let k = held[0].lines().count();
        let want: String = (1..=k).map(|i| format!("{i}\n")).collect();
        assert_eq!(held[0], want, "turn {n}\n{what}");
    }
    ws.unmount();
}

/// The next prompt's bound falls on an unchanged rewrite's id, which is then given back (the
/// writer thread holds the ends, `REWIND_TEST_SLOW_END=1500`), and the daemon is SIGKILLed
/// during turn 2 (no unmount: nothing flushed on the way out). After a remount the agent
/// resumes and edits `c.txt` in turn 2: it must be in turn 2, above its start.
#[test]
fn sigkill_during_a_turn_begun_on_a_given_back_id_then_a_remount() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
        &[("REWIND_TEST_SLOW_END", "1500")],
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
edit("b.txt", "b\nagain\n")
prompt(2)
time.sleep(4)
"#,
    );
    let before = turns(&ws);
    let pid = daemon_pid(&ws);
    ws.kill_daemon(pid);
    ws.mount();
    agent(
        &ws,
        r#"
hook("SessionStart", source="resume", model="m")
edit("c.txt", "turn two\n")
time.sleep(0.5)
stop(2)
"#,
    );
    let (wrong, what) = misplaced(&ws);
    let what = format!("turns before the kill: {before:?}\n{what}");
    let two = turn_log(&ws, 2);
    assert_eq!(paths(&two), ["c.txt"], "{wrong:?}\n{what}");
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}

/// `rollback --turn S:1 --force` while the agent still holds the file turn 1 cut open for
/// writing (turn 1 over, the agent idle): the preview and the run must agree, the file must be back
/// to what it was before turn 1, and what the agent writes after is recorded as its own
/// change after the rollback's, in no turn; no change misplaced.
#[test]
fn rollback_of_a_cut_turn_while_its_file_is_still_open() {
    let mut ws = Workspace::new();
    let first = mounted(&mut ws, &[("o.txt", "o\n")], &[]);
    let flag = ws.path().join("..").join("go.flag");
    let flag_s = flag.display().to_string();
    let script = format!(
        "FLAG = {flag_s:?}\n{}",
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
o = open("o.txt", "r+")
o.write("turn one\n"); o.flush()
stop(1)
open(FLAG + ".ready", "w").close()
while not os.path.exists(FLAG):
    time.sleep(0.05)
o.seek(0); o.write("after the rollback\n"); o.truncate(); o.close()
time.sleep(0.5)
"#
    );
    std::thread::scope(|s| {
        let a = s.spawn(|| agent(&ws, &script));
        assert!(wait_for(30, || std::path::Path::new(&format!(
            "{flag_s}.ready"
        ))
        .exists()));
        let turn = format!("{SESSION}:1");
        // Held open for writing by the agent: skipped unless forced.
        let dry = rw(&ws, &["rollback", "--turn", &turn, "--dry-run", "--force"]);
        let run = rw(&ws, &["rollback", "--turn", &turn, "--force"]);
        let now = fs::read_to_string(ws.path().join("o.txt")).unwrap();
        fs::write(&flag, "").unwrap();
        let dry = String::from_utf8_lossy(&dry.stdout).into_owned();
        a.join().unwrap();
        sync(&ws);
        let all = log(&ws);
        let (wrong, what) = misplaced(&ws);
        let run_out = String::from_utf8_lossy(&run.stdout).into_owned();
        let what = format!(
            "dry:\n{dry}\nrun: {run:?}\n{}\n{wrong:?}\n{what}",
            lines(&all[first..])
        );
        assert!(run.status.success(), "{what}");
        assert_eq!(
            planned(&dry),
            planned(&run_out),
            "the preview is not the run: {what}"
        );
        assert_eq!(now, "o\nagain\n", "{what}");
        assert_eq!(paths(&turn_log(&ws, 1)), ["o.txt"], "{what}");
        let last = all.last().unwrap();
        assert_eq!(last["path"], "o.txt", "{what}");
        assert!(last["turn"].is_null(), "{what}");
        assert_eq!(
            cat_at(&ws, "o.txt", last["id"].as_u64().unwrap()),
            "after the rollback\n",
            "{what}"
        );
        assert!(wrong.is_empty(), "{what}");
    });
    ws.unmount();
}

/// Four background writers of the agent open, write and close their files without pause
/// (a watcher rebuilding, a dev server's logs) while the agent goes through twenty prompts and
/// Stops: an open racing a bound must be labelled with the turn its id falls in. No change of
/// the session may be misplaced.
// Fails at 5ad730e (1 run of 3): "#872 modify w2.txt labelled turn 1: outside its bounds
// (372, Some(871)], so in no turn", then #873 w3.txt and #874 w2.txt the same: whole edits
// opened (labelled turn 1) and closed (ids 872-874) after `point_now` took turn 1's end and
// before the turn was switched and the open files relabelled (`bound_turn`); the cut before
// the bound cannot see them, and nothing holds the session's new opens meanwhile. Passes
// since the label is taken again with the id, under the lock of the bound and switch.
#[test]
fn four_busy_writers_across_twenty_quick_turns() {
    let mut ws = Workspace::new();
    mounted(
        &mut ws,
        &[
            ("w0.txt", "0\n"),
            ("w1.txt", "0\n"),
            ("w2.txt", "0\n"),
            ("w3.txt", "0\n"),
        ],
        &[],
    );
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
bgs = [subprocess.Popen([sys.executable, "-c", '''
import os, sys
p = sys.argv[1]
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open(p, "r+") as f:
        f.write("%d\\n" % i); f.truncate()
''', "w%d.txt" % k]) for k in range(4)]
time.sleep(0.2)
for n in range(1, 21):
    prompt(n)
    time.sleep(0.03)
    stop(n)
    time.sleep(0.03)
open("stop.flag", "w").close()
for b in bgs:
    b.wait()
os.unlink("stop.flag")
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(
        wrong.is_empty(),
        "{} misplaced:\n{}\n{}",
        wrong.len(),
        wrong.join("\n"),
        what.split("changes:").next().unwrap_or_default()
    );
    ws.unmount();
}

/// An agent run in a PID namespace of its own (in a container whose workspace is the mount, or
/// under `unshare -p`, as sandboxes run tools) names itself to the daemon, in each hook's
/// `--pid`, by the pid it has there: here 1. The daemon takes it as the process the caller
/// knows by that number, the agent, and refuses a number the namespace does not have.
// Failed before pids were translated (`who::pid_as_seen_here`): the agent's SessionStart
// registered the daemon's pid 1, init, so every process on the machine was recorded in the
// agent's session (the test's own write of `c.txt`, after the agent exited, among them), and
// `session start --pid 4242` registered whatever process had that number, or said it was gone.
// Then, through `sh -c`, the hook named the shell rather than the agent, the namespace's pid 1
// (`agent_pid` stopped below init): the agent's edit was the mount's.
#[test]
fn an_agent_in_a_pid_namespace_of_its_own_is_registered_as_itself() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("a.txt", "a\n"), ("b.txt", "b\n")], &[]);
    let script = format!(
        "{}\n{}",
        crate::hostile24::PY,
        r#"
assert os.getpid() == 1, os.getpid()
# Through a shell, as agents run their hooks: the hook walks up past it to the agent.
def hook(event, **kw):
    p = {"session_id": SID, "transcript_path": "/tmp/none.jsonl", "cwd": os.getcwd(),
         "hook_event_name": event}
    p.update(kw)
    r = subprocess.run(["sh", "-c", "rewind hook claude " + event],
                       input=json.dumps(p).encode(), capture_output=True, timeout=30)
    assert r.returncode == 0, (event, r)
    if r.stderr:
        MISSED.append(event)
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "by the agent in turn one\n")
stop(1)
edit("b.txt", "by the agent between turns\n")
r = subprocess.run(["rewind", "session", "start", "stray", "--pid", "4242"],
                   capture_output=True, text=True)
print("stray:", r.returncode, r.stderr.strip())
print("missed:", MISSED)
"#
    );
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "python3", "-c", &script])
        .current_dir(ws.path())
        .env("PATH", crate::common::path_with_rewind())
        .env("XDG_DATA_HOME", crate::hostile24::data_home(&ws))
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the agent failed: {said}");
    fs::write(
        ws.path().join("c.txt"),
        "by the test, outside the namespace\n",
    )
    .unwrap();
    sync(&ws);
    let all = log(&ws);
    let what = format!(
        "{said}\nturns: {:?}\nchanges:\n{}\nhook log:\n{}",
        turns(&ws),
        lines(&all),
        hook_log(&ws)
    );
    assert!(
        said.contains("missed: []"),
        "every hook was answered: {what}"
    );
    assert!(
        said.contains("stray: 2") && said.contains("process 4242"),
        "a pid the namespace does not have is refused: {what}"
    );
    assert_eq!(turns(&ws).len(), 1, "{what}");
    assert_eq!(paths(&turn_log(&ws, 1)), ["a.txt"], "{what}");
    let last = |path: &str| {
        all.iter()
            .rfind(|c| c["path"] == path)
            .expect(&what)
            .clone()
    };
    let b = last("b.txt");
    assert_eq!(b["session"], SESSION, "{what}");
    assert!(b["turn"].is_null(), "{what}");
    let c = last("c.txt");
    assert_ne!(
        c["session"], SESSION,
        "a process outside the namespace: {what}"
    );
    assert_ne!(c["session"], "stray", "{what}");
    assert!(
        !all.iter().any(|c| c["session"] == "stray"),
        "nothing is recorded in the refused session: {what}"
    );
    ws.unmount();
}
