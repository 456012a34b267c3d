//! The twenty-fourth hostile pass, on a82d867 ("a hook's turn or tool command bounds the turn
//! first, then records what came before"): a change belongs to turn N of session S when it is
//! labelled N (the label is taken when the change is made) and its id is in (start_id, end_id]
//! of turn N. Each attack looks for a change whose label and id disagree (in no turn, or in the
//! wrong one), a turn bound that covers a change made after the turn, and the order of ctl
//! commands against a burst of closed edits.
//!
//! Failed at a82d867 (each with what it showed), all passing since:
//! - a change whose label is taken before a hook's bound and whose id after it is in no turn
//!   (`turns --json` leaves it out, `log --turn` lists it: its query has no upper bound): an
//!   edit open across a Stop, the edit in flight of a background writer at each Stop, a
//!   save-by-rename whose temporary file was written before a Stop that gave up (`record_save`
//!   takes the temporary's label and a fresh id), and `rollback --to-turn` that stops short
//!   of the turn's start for the same reason.
//! - a hook command that waits for one of the daemon's four command threads runs after the
//!   hook gave up and killed its exchange: a prompt's `turn begin` is never sent (no turn), a
//!   Stop's `turn end` is refused as another process's (`own`), and turn 1 stays open; with
//!   the hold knob and without it (four reads waiting for a held create).
//! - `point_now` waits (2 s) for the RELEASE of a handle a background process inherited: the
//!   next prompt's edit, made meanwhile, lands in turn 1; or the late Stop ends turn 2.
//! - a turn bound on an id that is then given back (an unchanged rewrite): after a remount the
//!   store hands it out again (it does not count turns' bounds), inside turn 1's end or at
//!   turn 2's start.
//!
//! Held at a82d867 already: `checkpoint`, `sync`, `log` and `rollback --to` through ctl right
//! after held bursts; `gc --keep 1s` through ctl right after held changes.
//!
//! The fixes: a hook's `turn begin`/`turn end` first records what the session's open files hold
//! so far as the turn's (`Recorder::cut_episodes_of`, as a checkpoint cuts every open edit),
//! takes the bound without waiting for RELEASEs (`point_now`), switches the turn, and labels the
//! files still open with the new one (`relabel_episodes_of`); a save-by-rename is labelled with
//! its session's turn when it lands; hook commands do not queue for the four command threads;
//! and a reopened store hands out ids after every turn's bounds.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::common::{Workspace, path_with_rewind, python_command, rw_ok, sync};
use crate::hostile18::{cat_at, lines};
use crate::record::log;

/// Python helpers (as hostile23's): `edit(path, text)` rewrites a file in place (no O_TRUNC);
/// `hook(event, **kw)` runs `rewind hook claude EVENT` as Claude Code would (this process is
/// the agent), with the payload of session `SID`, and returns how long it took; the events
/// whose hook said something on stderr (it gave up, or was refused) are listed in `MISSED`.
pub(crate) const PY: &str = r#"
import json, os, signal, subprocess, sys, threading, time
def edit(p, text):
    with open(p, "r+") as f:
        f.write(text); f.truncate()
SID = "5e55a0b1-0000-4000-8000-00000000bbbb"
MISSED = []
def hook(event, **kw):
    p = {"session_id": SID, "transcript_path": "/tmp/none.jsonl", "cwd": os.getcwd(),
         "hook_event_name": event}
    p.update(kw)
    t = time.monotonic()
    r = subprocess.run(["rewind", "hook", "claude", event], input=json.dumps(p).encode(),
                       capture_output=True, timeout=30)
    took = time.monotonic() - t
    assert r.returncode == 0, (event, r)
    if r.stderr:
        MISSED.append(event)
    return took
def prompt(n):
    return hook("UserPromptSubmit", prompt=f"prompt {n}", prompt_id=f"p-{n}",
                permission_mode="default")
def stop(n):
    return hook("Stop", prompt_id=f"p-{n}", stop_hook_active=False,
                last_assistant_message="done")
"#;

pub(crate) const SESSION: &str = "claude-5e55a0b1-0000-4000-8000-00000000bbbb";

pub(crate) fn data_home(ws: &Workspace) -> PathBuf {
    ws.store().parent().unwrap().join("data")
}

pub(crate) fn hook_log(ws: &Workspace) -> String {
    fs::read_to_string(data_home(ws).join("rewind/hook.log")).unwrap_or_default()
}

/// Run `script` (after [`PY`]) in the workspace as an agent whose hooks reach the daemon.
#[track_caller]
pub(crate) fn agent(ws: &Workspace, script: &str) -> String {
    agent_with_env(ws, script, &[])
}

#[track_caller]
pub(crate) fn agent_with_env(ws: &Workspace, script: &str, env: &[(&str, &str)]) -> String {
    let script = format!("{PY}\n{script}");
    let out = python_command(&ws.path(), &script)
        .env("PATH", path_with_rewind())
        .env("XDG_DATA_HOME", data_home(ws))
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the agent failed:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `files` written, mounted with `env` and every edit's end closed (`REWIND_TEST_BURST=1`),
/// each file edited once since the mount and recorded. The number of changes so far.
pub(crate) fn mounted(ws: &mut Workspace, files: &[(&str, &str)], env: &[(&str, &str)]) -> usize {
    for (p, c) in files {
        let p = ws.path().join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, c).unwrap();
    }
    let mut all = vec![("REWIND_TEST_BURST", "1")];
    all.extend_from_slice(env);
    ws.mount_with_env(&[] as &[&str], &all);
    for (p, c) in files {
        fs::write(ws.path().join(p), format!("{c}again\n")).unwrap();
    }
    sync(ws);
    log(ws).len()
}

/// The changes of turn `n` of the agent's session, as `log --turn --json` gives them.
pub(crate) fn turn_log(ws: &Workspace, n: u64) -> Vec<Value> {
    rw_ok(ws, &["log", "--turn", &format!("{SESSION}:{n}"), "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The agent session's turns, as `turns --json` gives them.
pub(crate) fn turns(ws: &Workspace) -> Vec<Value> {
    rw_ok(ws, &["turns", "--session", SESSION, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every change of the agent's session checked against its turns: one labelled with turn N
/// must have its id within N's bounds (`turns --json`: above `start_id`, at most `end_id`) and
/// be listed by `log --turn S:N`; and for each turn, `turns --json` (its `files`) and `log
/// --turn` (the paths it lists) must agree. What disagrees, and a description of it all.
pub(crate) fn misplaced(ws: &Workspace) -> (Vec<String>, String) {
    let all = log(ws);
    let ts = turns(ws);
    let mut wrong = Vec::new();
    let mut logs = Vec::new();
    for t in &ts {
        let n = t["turn"].as_u64().unwrap();
        let listed = turn_log(ws, n);
        let ids: Vec<u64> = listed.iter().map(|c| c["id"].as_u64().unwrap()).collect();
        let mut paths: Vec<&str> = listed.iter().map(|c| c["path"].as_str().unwrap()).collect();
        paths.sort();
        paths.dedup();
        if t["files"].as_u64() != Some(paths.len() as u64) {
            wrong.push(format!(
                "turn {n}: `turns --json` says {} files, `log --turn` lists {paths:?}",
                t["files"]
            ));
        }
        logs.push((
            n,
            ids,
            t["start_id"].as_u64().unwrap(),
            t["end_id"].as_u64(),
        ));
    }
    for c in all.iter().filter(|c| c["session"] == SESSION) {
        let id = c["id"].as_u64().unwrap();
        let Some(label) = c["turn"].as_u64() else {
            continue;
        };
        let what = format!(
            "#{id} {} {} labelled turn {label}",
            c["kind"].as_str().unwrap_or_default(),
            c["path"].as_str().unwrap_or_default(),
        );
        match logs.iter().find(|(n, ..)| *n == label) {
            None => wrong.push(format!("{what}: no such turn")),
            Some((_, ids, start, end)) => {
                if id <= *start || end.is_some_and(|e| id > e) {
                    wrong.push(format!(
                        "{what}: outside its bounds ({start}, {end:?}], so in no turn"
                    ));
                }
                if !ids.contains(&id) {
                    wrong.push(format!("{what}: not in `log --turn`"));
                }
            }
        }
    }
    let what = format!(
        "turns:\n{}\nchanges:\n{}\nhook log:\n{}",
        ts.iter()
            .map(|t| format!(
                "{}:{} ({}, {}] files {}",
                t["session"], t["turn"], t["start_id"], t["end_id"], t["files"]
            ))
            .collect::<Vec<_>>()
            .join("\n"),
        all.iter()
            .map(|c| format!(
                "#{} {} {} {} turn {}",
                c["id"], c["kind"], c["path"], c["session"], c["turn"]
            ))
            .collect::<Vec<_>>()
            .join("\n"),
        hook_log(ws)
    );
    (wrong, what)
}

/// When `H24_SHOW` is set, fail with what a passing test saw (to check the attack happened).
fn show(what: &str) {
    if std::env::var_os("H24_SHOW").is_some() {
        panic!("shown:\n{what}");
    }
}

/// The agent opens `a.txt` for writing in turn 1 and keeps it open across its Stop and next
/// prompt (a background process of the agent, an editor it left open): written in turn 1,
/// written again and closed in turn 2. A turn's bound cuts the edit there, as a checkpoint
/// does: what the file held at the Stop is turn 1's change, the rest turn 2's, each within its
/// turn's bounds.
// Failed at a82d867: the one `modify` was labelled when the file was opened (turn 1) but took
// its id when it was closed (after turn 1's end): in no turn by `turns`, yet listed by `log
// --turn S:1` (whose query had no upper bound).
#[test]
fn an_edit_held_open_across_a_stop_and_the_next_prompt_is_cut_at_the_bound() {
    let mut ws = Workspace::new();
    let first = mounted(&mut ws, &[("a.txt", "before\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
f = open("a.txt", "r+")
f.write("written in turn one\n"); f.flush()
stop(1)
prompt(2)
f.write("and in turn two\n"); f.truncate(); f.close()
time.sleep(0.5)
stop(2)
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let (wrong, what) = misplaced(&ws);
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    assert_eq!(new.len(), 2, "{what}");
    let one = turn_log(&ws, 1);
    let two = turn_log(&ws, 2);
    assert_eq!((one.len(), two.len()), (1, 1), "{what}");
    assert_eq!(
        cat_at(&ws, "a.txt", one[0]["id"].as_u64().unwrap()),
        "written in turn one\n"
    );
    assert_eq!(
        cat_at(&ws, "a.txt", two[0]["id"].as_u64().unwrap()),
        "written in turn one\nand in turn two\n"
    );
    ws.unmount();
}

/// A background process of the agent (a watcher, a dev server's log) edits `bg.txt` over and
/// over while the agent goes through six prompts and stops. Every change of the session that
/// carries a turn must be listed by `log --turn` of that turn (its id within the turn's
/// bounds), and none by another.
#[test]
// Failed at a82d867: at each of the six Stops, the edit in flight (opened before, closed after
// the bound) is labelled with the turn and has the id right after its end_id (#59 for turn 1
// (21, 58], #143 for turn 2 (102, 142], ...): six changes in no turn.
fn a_background_writer_of_the_agent_across_six_prompts_keeps_each_change_in_its_turn() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("bg.txt", "0\n")], &[]);
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
        f.write("%d\\n" % i); f.flush(); time.sleep(0.002); f.truncate()
'''])
time.sleep(0.2)
for n in range(1, 7):
    prompt(n)
    time.sleep(0.1)
    stop(n)
    time.sleep(0.1)
open("stop.flag", "w").close()
bg.wait()
"#,
    );
    sync(&ws);
    let (wrong, what) = misplaced(&ws);
    assert!(
        wrong.is_empty(),
        "{} changes in the wrong turn or none:\n{}\n{what}",
        wrong.len(),
        wrong.join("\n")
    );
    show(&what);
    ws.unmount();
}

/// A save-by-rename across a Stop that gave up: in turn 1 the agent writes `x1.txt` and
/// `x2.txt` (the pending thread takes one and the Stop's settle the other, each held,
/// `REWIND_TEST_SLOW_PENDING=4000`) and a temporary `t.tmp` (held back behind them); its Stop hook and next prompt give up waiting (their settle
/// waits for the held create), and in turn 2 the agent renames `t.tmp` over `c.txt`: one
/// `modify` of `c.txt`, which must be in one turn (labelled with the one its id falls in).
#[test]
// Failed at a82d867: turn 1 (1, 4], turn 2 (4, 5]; the save is #5 modify c.txt labelled turn 1
// (the temporary file's creator, `record_save` uses `p.who`) with an id taken at the rename,
// in turn 2: in no turn; `turns --json` says turn 1 has 2 files, `log --turn S:1` lists three.
fn a_save_by_rename_whose_temp_file_was_written_before_a_stop_that_gave_up() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("c.txt", "before\n")],
        &[("REWIND_TEST_SLOW_PENDING", "4000")],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
open("x1.txt", "w").write("new in turn one\n")
open("x2.txt", "w").write("new in turn one too\n")
open("t.tmp", "w").write("saved\n")
time.sleep(0.7)
t1 = stop(1)
t2 = prompt(2)
os.rename("t.tmp", "c.txt")
time.sleep(5)
t3 = stop(2)
print(json.dumps([t1, t2, t3]))
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let (wrong, what) = misplaced(&ws);
    let what = format!("hooks took {out}{what}");
    // The attack happened: the Stop hook gave up.
    assert!(hook_log(&ws).contains("Stop: no answer within"), "{what}");
    let saves: Vec<&Value> = new.iter().filter(|c| c["path"] == "c.txt").collect();
    assert_eq!(saves.len(), 1, "{what}");
    assert_eq!(saves[0]["kind"], "modify", "{what}");
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    let in_turns = turn_log(&ws, 1)
        .iter()
        .chain(turn_log(&ws, 2).iter())
        .filter(|c| c["path"] == "c.txt")
        .count();
    assert_eq!(in_turns, 1, "{what}");
    show(&what);
    ws.unmount();
}

/// Four commands hold the daemon's command threads when the agent's next prompt comes: four
/// `log -n 1` through `.rewind/ctl` (a user's terminal, other agents' tools) wait for another
/// process's new file `y.txt`, whose create the pending thread holds
/// (`REWIND_TEST_SLOW_PENDING=3000`), as a read waits for held-back creates. The prompt hook's
/// `session start` and `turn begin` must not queue behind them: turn 2 opens, and the agent's
/// edit after the prompt is in it.
// Failed at a82d867 (with the daemon's commands held by `REWIND_TEST_HOLD_CTL`, which holds a
// hook's command too since hook commands no longer queue): the exchange sends `session start`
// then `turn begin`; the first waited for a command thread, the hook gave up at 800 ms and
// killed the exchange, so `turn begin` was never sent: no turn 2, the edit after prompt 2
// labelled with no turn.
#[test]
fn a_prompt_hook_queued_behind_four_busy_commands_still_opens_its_turn() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n")],
        &[("REWIND_TEST_SLOW_PENDING", "3000")],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
stop(1)
other = dict(os.environ, REWIND_SESSION="other", REWIND_AGENT="someone")
subprocess.run([sys.executable, "-c", 'open("y.txt", "w").write("other new\\n")'],
               env=other, check=True)
time.sleep(0.7)
busy = [subprocess.Popen([sys.executable, "-c", '''
import os
fd = os.open(".rewind/ctl", os.O_RDWR)
os.write(fd, b"log -n 1\\n")
os.read(fd, 65536)
'''], env=other) for _ in range(4)]
time.sleep(0.3)
took = prompt(2)
edit("a.txt", "turn two\n")
for b in busy:
    b.wait()
time.sleep(1)
stop(2)
print(took)
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let (wrong, what) = misplaced(&ws);
    let what = format!("prompt 2 took {out}{what}\nhook log:\n{}", hook_log(&ws));
    let mine: Vec<&Value> = new.iter().filter(|c| c["path"] == "a.txt").collect();
    assert_eq!(mine.len(), 2, "{what}");
    let ts = turns(&ws);
    assert_eq!(ts.len(), 2, "{what}");
    let two = turn_log(&ws, 2);
    assert_eq!(two.len(), 1, "{what}");
    assert_eq!(
        cat_at(&ws, "a.txt", two[0]["id"].as_u64().unwrap()),
        "turn two\n"
    );
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}

/// The agent's last tool call rewrites `b.txt` unchanged after editing `a.txt` (a formatter
/// run over the tree), the writer thread holds both ends (`REWIND_TEST_SLOW_END=1500`), and
/// the Stop hook bounds turn 1 at the unchanged rewrite's id, which is then given back (a gap
/// at the end of the turn). After a remount, someone edits `c.txt`: that change is after turn
/// 1 and must not fall within its bounds, and the tree at turn 1's end (`cat --at END`,
/// `.rewind/at/END`) is the tree the turn left.
#[test]
// Failed at a82d867: turn 1 ends at #5 (the unchanged rewrite's id, given back: a gap, as the
// bound pinned it), the last recorded id is #4; after the remount the store hands out #5 again
// (its reopen takes the largest of the last change, retracted id, horizon and checkpoints, not
// turns' bounds), to c.txt's edit: `.rewind/at/5/c.txt` then reads "after the remount\n", a
// state turn 1 never left.
fn a_turn_ending_on_an_unchanged_rewrite_then_a_remount_keeps_its_bound() {
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
stop(1)
time.sleep(4)
"#,
    );
    sync(&ws);
    let ts = turns(&ws);
    let end = ts[0]["end_id"].as_u64().unwrap();
    let before_remount = log(&ws);
    let last = before_remount.last().unwrap()["id"].as_u64().unwrap();
    ws.unmount();
    ws.mount();
    fs::write(ws.path().join("c.txt"), "after the remount\n").unwrap();
    sync(&ws);
    let all = log(&ws);
    let after: Vec<&Value> = all.iter().filter(|c| c["path"] == "c.txt").collect();
    let id = after.last().unwrap()["id"].as_u64().unwrap();
    let what = format!(
        "turn 1 ended at #{end}, last recorded before the remount #{last}\n{}",
        lines(&all)
    );
    assert_eq!(
        turn_log(&ws, 1)
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["a.txt"],
        "{what}"
    );
    let at_end = fs::read_to_string(ws.path().join(format!(".rewind/at/{end}/c.txt")));
    let what = format!("{what}\n.rewind/at/{end}/c.txt: {at_end:?}");
    assert!(
        id > end,
        "c.txt's change after the remount #{id} is within turn 1's bound: {what}"
    );
    assert_eq!(at_end.ok().as_deref(), Some("c\nagain\n"), "{what}");
    ws.unmount();
}

/// `checkpoint`, `sync` and `rollback --to` through `.rewind/ctl` by the process that just
/// wrote a burst of closed edits the writer thread holds (`REWIND_TEST_SLOW_END=700`) and a
/// new file the pending thread holds (`REWIND_TEST_SLOW_PENDING=700`): each sees everything
/// closed before it. After the checkpoint, another burst; `sync` through ctl then has all of
/// it in `log`; the rollback to the checkpoint gives the tree the checkpoint names.
#[test]
fn ctl_checkpoint_sync_and_rollback_right_after_held_bursts_see_everything_before_them() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
        &[
            ("REWIND_TEST_SLOW_END", "700"),
            ("REWIND_TEST_SLOW_PENDING", "700"),
        ],
    );
    let out = python_command(
        &ws.path(),
        r#"
import os
def edit(p, text):
    with open(p, "r+") as f:
        f.write(text); f.truncate()
def ctl(line):
    fd = os.open(".rewind/ctl", os.O_RDWR)
    os.write(fd, line.encode() + b"\n")
    out = os.read(fd, 1 << 20).decode()
    os.close(fd)
    return out
for p in ["a.txt", "b.txt", "c.txt"]:
    edit(p, "at cp " + p + "\n")
open("n.txt", "w").write("new at cp\n")
print(ctl("checkpoint cp1"), end="")
for p in ["a.txt", "b.txt", "c.txt"]:
    edit(p, "later " + p + "\n")
open("m.txt", "w").write("new later\n")
os.unlink("n.txt")
print(ctl("sync"), end="")
print(ctl("log --json"), end="")
print("---")
print(ctl("rollback --to cp1"), end="")
"#,
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let what = format!("{stdout}\n{}", lines(&log(&ws)[first..]));
    // The log read through ctl right after `sync` has both bursts: 3 edits, a create, 3
    // edits, a create, a delete.
    let logged: Vec<Value> = stdout
        .split("---")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(logged.len() - first, 9, "{what}");
    for p in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(
            rw_ok(&ws, &["cat", p, "--at", "cp1"]),
            format!("at cp {p}\n"),
            "{what}"
        );
        assert_eq!(
            fs::read_to_string(ws.path().join(p)).unwrap(),
            format!("at cp {p}\n"),
            "{what}"
        );
    }
    assert_eq!(
        rw_ok(&ws, &["cat", "n.txt", "--at", "cp1"]),
        "new at cp\n",
        "{what}"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("n.txt")).ok().as_deref(),
        Some("new at cp\n"),
        "{what}"
    );
    assert!(!ws.path().join("m.txt").exists(), "{what}");
    ws.unmount();
}

/// In turn 1 the agent starts a background process that inherits a handle of `out.log` open
/// for writing from a shell that then exits (`exec 3>>out.log; sleep 20 &`): the file's
/// episode has no live opener, so a hook's bound (`point_now`, which waits for the RELEASEs of
/// such episodes first) waits up to 2 s for a RELEASE that never comes. The Stop and the next
/// prompt give up after 800 ms each; the agent then edits `b.txt` for prompt 2. That edit must
/// be in turn 2, and turn 1 hold only its own edit of `a.txt`.
// Failed at a82d867: the Stop's `turn end` takes its bound only after the 2 s wait, after
// prompt 2's edit of b.txt, which is labelled turn 1 (turn 2 had not begun either) and within
// turn 1's bounds: `log --turn S:1` has a.txt and b.txt, turn 2 nothing. The bug a82d867 fixed
// for the writer and pending threads, back through `await_releases` in `point_now`.
#[test]
fn a_background_process_holding_an_inherited_handle_then_stop_and_the_next_prompt_at_once() {
    inherited_handle_then_stop_and_the_next_prompt(false);
}

/// The same with the tool's PreToolUse and PostToolUse hooks around the start of the
/// background process: the PostToolUse's settle waits the 2 s first, and the Stop's and the
/// prompt's commands both wait behind it and then go on together, in either order.
// Failed at a82d867 in 3 runs of 6: when prompt 2's `turn begin` runs before Stop 1's
// `turn end`, the late `turn end` ends turn 2 (it names the session, not the turn): turn 2 is
// (4, 4] and empty, and b.txt's edit, made after it, is labelled with no turn.
#[test]
fn a_background_process_holding_an_inherited_handle_started_by_a_tool_then_stop_and_prompt() {
    inherited_handle_then_stop_and_the_next_prompt(true);
}

fn inherited_handle_then_stop_and_the_next_prompt(tool_hooks: bool) {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[
            ("a.txt", "before\n"),
            ("b.txt", "before\n"),
            ("out.log", ""),
        ],
        &[],
    );
    let out = agent(
        &ws,
        &(format!(
            "TOOL_HOOKS = {}\n",
            if tool_hooks { "True" } else { "False" }
        ) + r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
tool = {"command": "start the server"}
if TOOL_HOOKS:
    hook("PreToolUse", prompt_id="p-1", tool_name="Bash", tool_input=tool,
         tool_use_id="toolu_1")
r = subprocess.run(["sh", "-c", "exec 3>>out.log; sleep 20 >/dev/null 2>&1 & echo $!"],
                   capture_output=True, check=True)
bg = int(r.stdout.decode().split()[0])
if TOOL_HOOKS:
    hook("PostToolUse", prompt_id="p-1", tool_name="Bash", tool_input=tool,
         tool_response={"stdout": ""}, tool_use_id="toolu_1")
edit("a.txt", "turn one\n")
t1 = stop(1)
t2 = prompt(2)
edit("b.txt", "turn two\n")
time.sleep(3)
t3 = stop(2)
os.kill(bg, signal.SIGKILL)
time.sleep(0.5)
print(json.dumps([t1, t2, t3]))
"#),
    );
    let all = log(&ws);
    let new = &all[first..];
    let (wrong, what) = misplaced(&ws);
    let what = format!("hooks took {out}{what}");
    let paths = |t: &[Value]| {
        t.iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(new.len(), 2, "{what}");
    assert_eq!(paths(&turn_log(&ws, 1)), ["a.txt"], "{what}");
    assert_eq!(paths(&turn_log(&ws, 2)), ["b.txt"], "{what}");
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}

/// `gc --keep 1s` through `.rewind/ctl` by the process that just closed an edit of `a.txt`
/// the writer thread holds (`REWIND_TEST_SLOW_END=1500`) and made a new file the pending
/// thread holds (`REWIND_TEST_SLOW_PENDING=1500`), everything before them older than the
/// limit: gc removes the old changes, and the held ones are then recorded whole: `show` gives
/// the edit's diff from the content before it, `cat --at` its content and the new file's, and
/// after a remount nothing is recorded as `external`.
#[test]
fn gc_through_ctl_right_after_held_changes_keeps_what_they_need() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n")],
        &[
            ("REWIND_TEST_SLOW_END", "1500"),
            ("REWIND_TEST_SLOW_PENDING", "1500"),
        ],
    );
    assert!(first > 0);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let out = python_command(
        &ws.path(),
        r#"
import os
with open("a.txt", "r+") as f:
    f.write("held edit\n"); f.truncate()
open("n.txt", "w").write("held new\n")
fd = os.open(".rewind/ctl", os.O_RDWR)
os.write(fd, b"gc --keep 1s\n")
print(os.read(fd, 1 << 16).decode())
os.close(fd)
"#,
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gc = String::from_utf8_lossy(&out.stdout).into_owned();
    sync(&ws);
    let all = log(&ws);
    let what = format!("gc said: {gc}\n{}", lines(&all));
    // The attack happened: gc took the older changes away.
    assert!(all.len() < first + 2, "{what}");
    let edit = all
        .iter()
        .find(|c| c["path"] == "a.txt" && c["kind"] == "modify")
        .expect(&what);
    let create = all
        .iter()
        .find(|c| c["path"] == "n.txt" && c["kind"] == "create")
        .expect(&what);
    let id = edit["id"].as_u64().unwrap();
    assert_eq!(cat_at(&ws, "a.txt", id), "held edit\n", "{what}");
    let nid = create["id"].as_u64().unwrap();
    assert_eq!(cat_at(&ws, "n.txt", nid), "held new\n", "{what}");
    let show = rw_ok(&ws, &["show", &id.to_string()]);
    assert!(show.contains("-before\n"), "{show}\n{what}");
    assert!(show.contains("+held edit\n"), "{show}\n{what}");
    ws.unmount();
    ws.mount();
    let after = log(&ws);
    for c in &after {
        assert_ne!(c["agent"], "external", "{}", lines(&after));
    }
    ws.unmount();
}

/// The user interrupts the agent and types the next prompt (Claude Code sends no Stop then)
/// while a background process of the agent keeps rewriting `bg.txt`; it stops soon after.
/// `rollback --to-turn S:2` ("back to just before that prompt") must leave `bg.txt` as it was
/// at turn 2's start (`cat --at START_ID`), and its dry run must list what the run changes.
// Failed at a82d867: the edit in flight over prompt 2 keeps turn 1's label with an id past
// turn 2's start: `--to-turn` (turn 2 on, or no turn) leaves it out, so bg.txt is put back to
// what that edit wrote, not to what it held when prompt 2 came (seen: turn 2 starts at #102,
// bg.txt then "101\n"; #103 is labelled turn 1; after the rollback bg.txt is "102\n").
#[test]
fn rollback_to_a_turn_begun_while_a_background_writer_edits_gives_the_tree_at_its_start() {
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("bg.txt", "0\n")], &[]);
    agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
bg = subprocess.Popen([sys.executable, "-c", '''
import os, time
i = 0
while not os.path.exists("stop.flag"):
    i += 1
    with open("bg.txt", "r+") as f:
        f.write("%d\\n" % i); f.flush(); time.sleep(0.002); f.truncate()
'''])
time.sleep(0.3)
prompt(2)
time.sleep(0.05)
open("stop.flag", "w").close()
bg.wait()
os.unlink("stop.flag")
stop(2)
"#,
    );
    sync(&ws);
    let ts = turns(&ws);
    let start = ts[1]["start_id"].as_u64().unwrap();
    let expected = cat_at(&ws, "bg.txt", start);
    let (wrong, what) = misplaced(&ws);
    let dry = rw_ok(
        &ws,
        &[
            "rollback",
            "--to-turn",
            &format!("{SESSION}:2"),
            "--dry-run",
        ],
    );
    let run = rw_ok(&ws, &["rollback", "--to-turn", &format!("{SESSION}:2")]);
    let now = fs::read_to_string(ws.path().join("bg.txt")).unwrap();
    let what = format!(
        "turn 2 starts at #{start}; bg.txt then: {expected:?}, after the rollback: {now:?}\n\
         dry run:\n{dry}\nrun:\n{run}\nmisplaced: {wrong:?}\n{}",
        what.lines().take(12).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(now, expected, "{what}");
    ws.unmount();
}

/// The next prompt comes while the last id handed out is an unchanged rewrite's (a formatter
/// run at the end of turn 1, its ends held by the writer thread, `REWIND_TEST_SLOW_END=1500`):
/// turn 2 starts at that id, which is then given back (a gap). The daemon is restarted during
/// turn 2 (unmount, mount; a turn open then stays open), the agent comes back and edits
/// `c.txt` in turn 2: that edit must be in turn 2.
// Failed at a82d867: after the remount the store hands out turn 2's start_id again (its reopen
// does not count turns' bounds), to c.txt's edit, labelled turn 2 but not above its start:
// `log --turn S:2` does not list it, and no turn has it (seen: turn 1 (3, 5], turn 2 (5, 5]
// with 0 files, #5 modify c.txt labelled turn 2).
#[test]
fn a_turn_starting_on_an_unchanged_rewrite_then_a_remount_keeps_its_first_edit() {
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
    sync(&ws);
    let before = turns(&ws);
    ws.unmount();
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
    let what = format!("turns before the remount: {before:?}\n{what}");
    let two = turn_log(&ws, 2);
    assert_eq!(two.len(), 1, "{wrong:?}\n{what}");
    assert_eq!(two[0]["path"], "c.txt", "{what}");
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}

/// The same without the hold knob: another process makes `y.txt`, whose create the pending
/// thread holds (`REWIND_TEST_SLOW_PENDING=3000`), and four `log -n 1` through `.rewind/ctl`
/// (a user's terminal, other agents' tools) wait for it, as a read waits for held-back
/// creates: they take the four command threads when the agent stops. Turn 1 must still end at
/// the Stop: the agent's edit of `b.txt` after it is in no turn.
// Failed at a82d867 as the held one does: the Stop's `turn end` runs once the reads are done,
// after its hook killed the exchange, and is refused (`own`): turn 1 stays open, b.txt's
// edit is labelled turn 1.
#[test]
fn a_stop_hook_behind_four_reads_waiting_for_a_held_create_still_ends_its_turn() {
    let mut ws = Workspace::new();
    let first = mounted(
        &mut ws,
        &[("a.txt", "before\n"), ("b.txt", "before\n")],
        &[("REWIND_TEST_SLOW_PENDING", "3000")],
    );
    let out = agent(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "turn one\n")
other = dict(os.environ, REWIND_SESSION="other", REWIND_AGENT="someone")
subprocess.run([sys.executable, "-c", 'open("y.txt", "w").write("other new\\n")'],
               env=other, check=True)
time.sleep(0.7)
busy = [subprocess.Popen([sys.executable, "-c", '''
import os
fd = os.open(".rewind/ctl", os.O_RDWR)
os.write(fd, b"log -n 1\\n")
os.read(fd, 65536)
'''], env=other) for _ in range(4)]
time.sleep(0.3)
took = stop(1)
for b in busy:
    b.wait()
time.sleep(1)
edit("b.txt", "between turns\n")
time.sleep(0.5)
prompt(2)
edit("a.txt", "turn two\n")
stop(2)
print(took)
"#,
    );
    let all = log(&ws);
    let new = &all[first..];
    let (wrong, what) = misplaced(&ws);
    let daemon = fs::read_to_string(ws.store().join("daemon.log")).unwrap_or_default();
    let refused: Vec<&str> = daemon.lines().filter(|l| l.contains("refused")).collect();
    let what = format!(
        "stop 1 took {out}{what}\ndaemon.log refusals:\n{}",
        refused.join("\n")
    );
    assert!(hook_log(&ws).contains("Stop: no answer within"), "{what}");
    assert_eq!(new.len(), 4, "{what}");
    let between = new.iter().find(|c| c["path"] == "b.txt").expect(&what);
    assert!(between["turn"].is_null(), "{what}");
    let one = turn_log(&ws, 1);
    assert_eq!(one.len(), 1, "{what}");
    assert_eq!(one[0]["path"], "a.txt", "{what}");
    assert!(wrong.is_empty(), "{wrong:?}\n{what}");
    ws.unmount();
}
