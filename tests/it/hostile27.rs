//! Hostile tests, round 27: is the recorded history always true? Several processes and threads
//! at once through the mount (save-by-rename, rename-away saves, hard links, O_TRUNC rewrites,
//! exchanges, folders renamed with files open below them, fsync, `rewind sync` in the middle),
//! then: every path's changes form an unbroken chain ending at what it holds now, and every
//! answer about a past point (`cat --at`, `.rewind/at/ID/`, `rollback --to ID`, after `gc` too)
//! agrees with that chain.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Workspace, daemon_pid, python_command, rw, rw_ok, stderr, stdout, wait_for};
use crate::record::log;

/// A path's state: (type, hash, mode) — the mode only for files, the hash only for files.
type State = (String, Option<String>, Option<String>);
type Chain = BTreeMap<String, State>;

fn side(v: &Value) -> Option<State> {
    if v.is_null() {
        return None;
    }
    let kind = v["type"].as_str().unwrap().to_string();
    let file = kind == "file";
    let hash = if file {
        v["hash"].as_str().map(str::to_string)
    } else {
        None
    };
    let mode = file.then(|| v["mode"].as_str().unwrap().to_string());
    Some((kind, hash, mode))
}

fn under(p: &str, dir: &str) -> Option<String> {
    p.strip_prefix(dir)
        .and_then(|r| r.strip_prefix('/'))
        .map(str::to_string)
}

/// Move everything recorded below `from/` to below `to/`.
fn move_subtree(chain: &mut Chain, from: &str, to: &str) {
    let moved: Vec<(String, State)> = chain
        .iter()
        .filter_map(|(p, s)| under(p, from).map(|r| (format!("{to}/{r}"), s.clone())))
        .collect();
    chain.retain(|p, _| under(p, from).is_none());
    for (p, s) in moved {
        chain.insert(p, s);
    }
}

fn expect(
    chain: &Chain,
    path: &str,
    want: &Option<State>,
    c: &Value,
    what: &str,
) -> Result<(), String> {
    let prev = chain.get(path).cloned();
    if &prev != want {
        return Err(format!(
            "change {} ({} {}) breaks the chain of {path} ({what}): it was {prev:?}, the change says {want:?}",
            c["id"], c["kind"], c["path"]
        ));
    }
    Ok(())
}

fn set(chain: &mut Chain, path: &str, s: Option<State>) {
    match s {
        Some(s) => {
            chain.insert(path.to_string(), s);
        }
        None => {
            chain.remove(path);
        }
    }
}

fn is_exchange(c: &Value, d: Option<&Value>) -> bool {
    let Some(d) = d else { return false };
    c["kind"] == "rename"
        && d["kind"] == "rename"
        && !c["from"].is_null()
        && d["path"] == c["from"]
        && d["from"] == c["path"]
        && d["time"] == c["time"]
}

/// Fold the changes into each path's state, checking the chain at every step; `until`: stop
/// after the change with that id (the second half of an exchange goes with its first).
pub(crate) fn fold(changes: &[Value], until: u64) -> Result<Chain, String> {
    let mut chain = Chain::new();
    fold_onto(&mut chain, changes, until, true)?;
    Ok(chain)
}

/// [`fold`] onto `chain`; `modes`: whether modes count (else `chain` has none).
fn fold_onto(chain: &mut Chain, changes: &[Value], until: u64, modes: bool) -> Result<(), String> {
    let side = |v: &Value| side(v).map(|(t, h, m)| (t, h, if modes { m } else { None }));
    let mut i = 0;
    while i < changes.len() {
        let c = &changes[i];
        if c["id"].as_u64().unwrap() > until {
            break;
        }
        let path = c["path"].as_str().unwrap();
        let (before, after) = (side(&c["before"]), side(&c["after"]));
        if is_exchange(c, changes.get(i + 1)) {
            let d = &changes[i + 1];
            let from = c["from"].as_str().unwrap();
            expect(chain, path, &before, c, "exchange, its own side")?;
            expect(chain, from, &after, c, "exchange, moved away")?;
            expect(chain, from, &side(&d["before"]), d, "exchange, other side")?;
            expect(chain, path, &side(&d["after"]), d, "exchange, moved back")?;
            let (a, b) = (chain.get(path).cloned(), chain.get(from).cloned());
            let tmp = "\u{1}exchange";
            move_subtree(chain, path, tmp);
            move_subtree(chain, from, path);
            move_subtree(chain, tmp, from);
            set(chain, path, b);
            set(chain, from, a);
            i += 2;
            continue;
        }
        expect(chain, path, &before, c, "its own before")?;
        if let Some(from) = c["from"].as_str() {
            expect(chain, from, &after, c, "renamed from")?;
            chain.remove(from);
            chain.retain(|p, _| under(p, path).is_none());
            move_subtree(chain, from, path);
        } else if after.is_none() {
            chain.retain(|p, _| under(p, path).is_none());
        }
        for l in c["links"].as_array().into_iter().flatten() {
            let l = l.as_str().unwrap();
            expect(chain, l, &before, c, "a hard link of it")?;
            set(chain, l, after.clone());
        }
        set(chain, path, after);
        i += 1;
    }
    Ok(())
}

/// The tree below `root` (not `.rewind`) as states: files with their hash and mode, folders.
pub(crate) fn tree(root: &Path) -> Chain {
    fn walk(root: &Path, dir: &Path, out: &mut Chain) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".rewind" {
                continue;
            }
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                out.insert(rel, ("dir".into(), None, None));
                walk(root, &p, out);
            } else if m.is_file() {
                let Ok(bytes) = fs::read(&p) else { continue };
                out.insert(
                    rel,
                    (
                        "file".into(),
                        Some(blake3::hash(&bytes).to_hex().to_string()),
                        Some(format!("{:o}", m.mode() & 0o7777)),
                    ),
                );
            }
        }
    }
    let mut out = Chain::new();
    walk(root, root, &mut out);
    out
}

pub(crate) fn whole(changes: &[Value]) -> String {
    changes
        .iter()
        .map(|c| {
            format!(
                "{} {} {} <- {} pid {} {} before {} after {} links {}",
                c["id"],
                c["kind"],
                c["path"],
                c["from"],
                c["pid"],
                c["process"],
                short(&c["before"]),
                short(&c["after"]),
                c["links"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn short(v: &Value) -> String {
    if v.is_null() {
        return "-".into();
    }
    format!(
        "{}:{}:{}",
        v["type"].as_str().unwrap_or("?"),
        v["hash"].as_str().map_or("", |h| &h[..8]),
        v["mode"].as_str().unwrap_or("")
    )
}

pub(crate) fn differences(want: &Chain, got: &Chain) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            Some(g) if g == w => {}
            g => out.push(format!("{p}: history says {w:?}, found {g:?}")),
        }
    }
    for (p, g) in got {
        if !want.contains_key(p) {
            out.push(format!("{p}: history says absent, found {g:?}"));
        }
    }
    out
}

/// The history is an unbroken chain that ends at the tree as it is: the log, or the breach.
#[track_caller]
pub(crate) fn assert_chain_ends_in_the_present(ws: &Workspace, what: &str) -> Vec<Value> {
    let changes = log(ws);
    let chain = match fold(&changes, u64::MAX) {
        Ok(c) => c,
        Err(e) => panic!("{what}: {e}\n{}", whole(&changes)),
    };
    let now = tree(&ws.path());
    let diff = differences(&chain, &now);
    assert!(
        diff.is_empty(),
        "{what}: the history does not end at the tree:\n{}\n{}",
        diff.join("\n"),
        whole(&changes)
    );
    changes
}

/// The modes as a read-only view shows them (`.rewind/at/` has no write bits).
fn read_only(chain: Chain) -> Chain {
    chain
        .into_iter()
        .map(|(p, (t, h, m))| {
            let m = m.map(|m| format!("{:o}", u32::from_str_radix(&m, 8).unwrap() & !0o222));
            (p, (t, h, m))
        })
        .collect()
}

/// `.rewind/at/ID/` and `rewind cat --at ID` of every file agree with the chain folded to `id`.
fn past_disagrees(ws: &Workspace, changes: &[Value], id: u64) -> Vec<String> {
    past_disagrees_with(ws, changes, id, true)
}

/// [`past_disagrees`], asking `cat --at` too only if `cat`.
pub(crate) fn past_disagrees_with(
    ws: &Workspace,
    changes: &[Value],
    id: u64,
    cat: bool,
) -> Vec<String> {
    let want = read_only(fold(changes, id).unwrap());
    let at = read_only(tree(&ws.path().join(format!(".rewind/at/{id}"))));
    let mut wrong: Vec<String> = differences(&want, &at)
        .into_iter()
        .map(|d| format!(".rewind/at/{id}: {d}"))
        .collect();
    for (p, s) in want.iter().filter(|(_, s)| cat && s.0 == "file") {
        let o = rw(ws, &["cat", p, "--at", &id.to_string()]);
        let got = o
            .status
            .success()
            .then(|| blake3::hash(&o.stdout).to_hex().to_string());
        if got != s.1 {
            wrong.push(format!(
                "cat {p} --at {id}: {got:?}, the chain says {:?} ({})",
                s.1,
                stderr(&o).trim()
            ));
        }
    }
    wrong
}

/// `rollback --to ID`, previewed then run: the tree is then what the chain says at `id`.
fn rollback_disagrees(ws: &Workspace, changes: &[Value], id: u64) -> Vec<String> {
    let want = fold(changes, id).unwrap();
    let ids = id.to_string();
    let dry = rw(ws, &["rollback", "--to", &ids, "--dry-run", "--force"]);
    let run = rw(ws, &["rollback", "--to", &ids, "--force"]);
    let got = tree(&ws.path());
    let mut wrong: Vec<String> = differences(&want, &got)
        .into_iter()
        .map(|d| format!("after rollback --to {id}: {d}"))
        .collect();
    if !run.status.success() || !dry.status.success() {
        wrong.push(format!(
            "rollback --to {id}: {} / {}\n{}{}",
            dry.status,
            run.status,
            stderr(&dry),
            stderr(&run)
        ));
    }
    if !wrong.is_empty() {
        wrong.push(format!(
            "dry run:\n{}\nrun:\n{}",
            stdout(&dry),
            stdout(&run)
        ));
    }
    wrong
}

/// For each seed, a fresh mount runs [`workload`] (seeds from `base`), and the history is an
/// unbroken chain ending at the tree.
fn chain_holds_under_workloads(base: u64, workers: u32, rounds: u32, threads: bool, flags: &str) {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        workload(&ws, base + seed, workers, rounds, threads, flags);
        assert_chain_ends_in_the_present(&ws, &format!("seed {seed}"));
        ws.unmount();
    }
}

/// The workload: `workers` processes (or threads), each doing `rounds` random steps from a
/// seeded generator on its own files, and on three files all of them share.
pub(crate) const WORKLOAD: &str = r#"
import ctypes, os, random, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
seed, workers, rounds, threads, flags = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "threads", sys.argv[5]
def exchange(a, b):
    return libc.renameat2(-100, a.encode(), -100, b.encode(), 2)
def wr(p, data, fsync=False, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(p, flags, 0o644)
    os.write(fd, data)
    if fsync: os.fsync(fd)
    os.close(fd)
def step(r, w, i):
    own = ["w%d_%d" % (w, k) for k in range(3)]
    f = r.choice(own)
    data = ("w%d r%d %d\n" % (w, i, r.randrange(1000))).encode() * r.randrange(1, 4)
    fs = "fsync" in flags and r.random() < 0.3
    k = r.randrange(15 if "shared" in flags else 13)
    if k == 0:  # O_TRUNC rewrite
        wr(f, data, fs)
    elif k == 1:  # append
        wr(f, data, fs, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    elif k == 2:  # save by rename (sed -i)
        t = ".%s.tmp%d" % (f, i)
        wr(t, data, fs)
        os.rename(t, f)
    elif k == 3:  # rename-away save, backup deleted (vim)
        if os.path.exists(f):
            os.rename(f, f + "~")
            wr(f, data, fs)
            os.unlink(f + "~")
    elif k == 4:  # rename-away save keeping the backup
        if os.path.exists(f):
            if os.path.exists(f + "~"): os.unlink(f + "~")
            os.rename(f, f + "~")
            wr(f, data, fs)
    elif k == 5:  # hard link, written through the link, link removed or kept
        if os.path.exists(f):
            l = f + ".lnk"
            if os.path.exists(l): os.unlink(l)
            os.link(f, l)
            wr(l, data, fs, os.O_WRONLY | os.O_APPEND)
            if r.random() < 0.5: os.unlink(l)
    elif k == 6:  # exchange two own files
        exchange(own[0], r.choice(own[1:]))
    elif k == 7:  # chmod
        if os.path.exists(f): os.chmod(f, r.choice([0o600, 0o644, 0o755]))
    elif k == 8:  # unlink
        if os.path.exists(f): os.unlink(f)
    elif k == 9:  # a new file written and renamed within the half second it is held back
        t = "w%d_new%d" % (w, i)
        wr(t, data, fs)
        os.rename(t, f)
    elif k == 10:  # a folder renamed with a file open below it
        d, e = "dir%d" % w, "dir%d_b" % w
        if os.path.isdir(e): os.rename(e, d)
        os.makedirs(d, exist_ok=True)
        fd = os.open(d + "/x", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, data)
        os.rename(d, e)
        os.write(fd, data)
        if fs: os.fsync(fd)
        os.close(fd)
    elif k == 11:  # a new file written, renamed twice, then over the target
        t = "w%d_n%d" % (w, i)
        wr(t, data, fs)
        os.rename(t, t + "b")
        wr(t + "b", data, False, os.O_WRONLY | os.O_APPEND)
        os.rename(t + "b", f)
    elif k == 12:  # copy a file to another and truncate the first
        if os.path.exists(f):
            g = r.choice(own)
            with open(f, "rb") as h: b = h.read()
            wr(g, b + data, fs)
            os.truncate(f, len(b) // 2)
    elif k == 13:  # append to a shared file
        wr("shared%d" % r.randrange(3), data, fs, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    elif k == 14:  # save by rename of a shared file, or an exchange of two
        s = "shared%d" % r.randrange(3)
        if r.random() < 0.5 or "exchange" not in flags:
            t = ".%s.w%d.%d" % (s, w, i)
            wr(t, data, fs)
            os.rename(t, s)
        else:
            exchange(s, "shared%d" % r.randrange(3))
def run(w):
    r = random.Random(seed * 1000 + w)
    for i in range(rounds):
        try:
            step(r, w, i)
        except OSError:
            pass
        if r.random() < 0.2: time.sleep(r.random() * 0.05)
if threads:
    ts = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for t in ts: t.start()
    for t in ts: t.join()
else:
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:
            try: run(w)
            finally: os._exit(0)
        pids.append(pid)
    for p in pids: os.waitpid(p, 0)
"#;

pub(crate) fn workload(
    ws: &Workspace,
    seed: u64,
    workers: u32,
    rounds: u32,
    threads: bool,
    flags: &str,
) {
    let out = python_command(&ws.path(), WORKLOAD)
        .args([
            seed.to_string(),
            workers.to_string(),
            rounds.to_string(),
            if threads { "threads" } else { "procs" }.to_string(),
            flags.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the workload failed: {}",
        stderr(&out)
    );
}

fn seeds() -> Vec<u64> {
    let n: u64 = std::env::var("H27_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    (1..=n).collect()
}

/// Several processes, each on its own files, with the save patterns the recorder recognises,
/// hard links, exchanges, folder renames with a file open below: the chain holds and ends at
/// the tree.
#[test]
fn processes_each_on_their_own_files_keep_an_unbroken_chain() {
    chain_holds_under_workloads(0, 4, 40, false, "");
}

/// Files all of them share, exchanged (`RENAME_EXCHANGE`) while the others write them. Failed
/// in CI twice (seed 1) and here 2 runs in 10 with `H27_SEEDS=8`: an exchange's rename said the
/// file it moved away held content no change left there. An open for writing had begun the
/// episode of the file the exchange had just moved away from the name it opened
/// (`an_open_racing_an_exchange_records_the_file_it_opened`); 10 runs of 8 seeds pass since.
#[test]
fn processes_exchanging_files_others_write_keep_an_unbroken_chain() {
    chain_holds_under_workloads(100, 4, 40, false, "shared fsync exchange");
}

/// An open for writing of a file an exchange moves away before the daemon holds it
/// (`REWIND_TEST_SLOW_NAMED` holds the open between looking its inode's name up and holding
/// it): it opens the file the process looked up, where it went, as on disk, and its episode is
/// that file's, at its new name. Before, the episode was the moved file's under the name it
/// had lost, and the daemon opened the other file, which the name held by then: its end found
/// another file there and recorded nothing of what was written, so the history no longer ended
/// at the tree (what broke the exchange workload).
#[test]
fn an_open_racing_an_exchange_records_the_file_it_opened() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_NAMED", "400")]);
    let dir = ws.path();
    fs::write(dir.join("a"), "a\n").unwrap();
    fs::write(dir.join("b"), "b\n").unwrap();
    let script = r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
def append():
    fd = os.open("a", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"more\n")
    os.close(fd)
t = threading.Thread(target=append)
t.start()
time.sleep(0.15)
assert libc.renameat2(-100, b"a", -100, b"b", 2) == 0, ctypes.get_errno()
t.join()
"#;
    let out = python_command(&dir, script).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The process looked `a` up before the exchange: it wrote that file, now at `b`.
    assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "b\n");
    assert_eq!(fs::read_to_string(dir.join("b")).unwrap(), "a\nmore\n");
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "an open racing an exchange");
    let last = changes.last().unwrap();
    assert_eq!(last["kind"], "modify", "{}", whole(&changes));
    assert_eq!(last["path"], "b", "{}", whole(&changes));
    ws.unmount();
}

/// A rollback deleting a file a process has open and goes on writing
/// (`REWIND_TEST_SLOW_CUT` holds the rollback between recording what the writer wrote so far,
/// the cut, and its unlink). The delete carries the content the cut recorded. Before, it read
/// the file again and carried the writes made since, which no change recorded, so the file's
/// chain broke (what `rollbacks_deleting_files_an_open_writer_appends_to_keep_the_chain` saw).
/// A rollback is not a FUSE request: the kernel does not hold the file's lock over its unlink,
/// as it does over a process's, so writes go on meanwhile. What is written after the cut to a
/// file the rollback deletes is in no tree.
#[test]
fn a_rollback_deleting_a_file_being_written_carries_what_the_cut_recorded() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_CUT", "400")]);
    let dir = ws.path();
    fs::write(dir.join("p"), "point\n").unwrap();
    let point = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(dir.join("f"), "start\n").unwrap();
    let script = r#"
import os, subprocess, sys, threading, time
fd = os.open("f", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"one\n")
t = threading.Thread(target=lambda: subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], check=True, capture_output=True))
t.start()
time.sleep(0.2)
os.write(fd, b"two\n")
t.join()
os.close(fd)
"#;
    let out = python_command(&dir, script)
        .arg(env!("CARGO_BIN_EXE_rewind"))
        .arg(&point)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!dir.join("f").exists());
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "a rollback deleting a file being written");
    let restore = changes.last().unwrap();
    assert_eq!(restore["kind"], "restore", "{}", whole(&changes));
    assert_eq!(restore["path"], "f", "{}", whole(&changes));
    ws.unmount();
}

/// The same with fsync here and there, and files all of them share.
#[test]
fn processes_sharing_files_with_fsync_keep_an_unbroken_chain() {
    chain_holds_under_workloads(100, 4, 40, false, "shared fsync");
}

/// Threads of one process (one pid for the recorder's save rules, each its own thread id).
#[test]
fn threads_of_one_process_keep_an_unbroken_chain() {
    chain_holds_under_workloads(200, 4, 40, true, "shared fsync");
}

/// `rewind sync` and `rewind log` run over and over while the workload runs.
#[test]
fn syncs_and_logs_in_the_middle_keep_an_unbroken_chain() {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = rw(&ws, &["sync"]);
                    let _ = rw(&ws, &["log", "--json", "-n", "5"]);
                    std::thread::sleep(Duration::from_millis(30));
                }
            });
            workload(&ws, 300 + seed, 3, 40, false, "shared fsync");
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_chain_ends_in_the_present(&ws, &format!("seed {seed}"));
        ws.unmount();
    }
}

/// After a concurrent workload, every past point answers what the chain says: `.rewind/at/ID`,
/// `cat --at ID` at a few ids, and `rollback --to ID` (previewed, then run) restores it.
#[test]
fn past_points_and_rollbacks_agree_with_the_chain_after_concurrent_work() {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        workload(&ws, 400 + seed, 3, 30, false, "shared fsync");
        let changes = assert_chain_ends_in_the_present(&ws, &format!("seed {seed}"));
        let ids: Vec<u64> = changes.iter().map(|c| c["id"].as_u64().unwrap()).collect();
        let pick = |f: f64| ids[((ids.len() - 1) as f64 * f) as usize];
        let mut wrong = Vec::new();
        for f in [0.2, 0.5, 0.8] {
            wrong.extend(past_disagrees(&ws, &changes, pick(f)));
        }
        assert!(
            wrong.is_empty(),
            "seed {seed}:\n{}\n{}",
            wrong.join("\n"),
            whole(&changes)
        );
        for f in [0.7, 0.3] {
            let id = pick(f);
            let wrong = rollback_disagrees(&ws, &changes, id);
            assert!(
                wrong.is_empty(),
                "seed {seed}:\n{}\n{}",
                wrong.join("\n"),
                whole(&changes)
            );
            // The rollback's own changes continue the chain.
            assert_chain_ends_in_the_present(&ws, &format!("seed {seed}, after rollback to {id}"));
        }
        ws.unmount();
    }
}

/// gc keeps the newest change of each path and refuses points older than the oldest kept: every
/// id either is refused (exit 2) or answers what the chain said before gc.
#[test]
fn after_gc_every_point_is_refused_or_what_the_chain_says() {
    let mut ws = Workspace::new();
    ws.mount();
    workload(&ws, 500, 3, 25, false, "shared fsync");
    std::thread::sleep(Duration::from_secs(4));
    workload(&ws, 501, 3, 10, false, "shared");
    let changes = assert_chain_ends_in_the_present(&ws, "before gc");
    let gc = rw_ok(&ws, &["gc", "--keep", "3s"]);
    let oldest: u64 = gc
        .lines()
        .find_map(|l| l.trim().strip_prefix("oldest point still kept: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("gc says no oldest point: {gc}"));
    let last = changes.last().unwrap()["id"].as_u64().unwrap();
    let mut wrong = Vec::new();
    let mut refused = 0;
    let mut points: Vec<u64> = (1..=last).step_by(3).collect();
    points.extend([oldest.saturating_sub(1), oldest, oldest + 1]);
    for id in points {
        let at = ws.path().join(format!(".rewind/at/{id}"));
        let readable = fs::read_dir(&at).is_ok();
        if !readable {
            refused += 1;
            let o = rw(&ws, &["cat", "shared0", "--at", &id.to_string()]);
            if o.status.code() != Some(2) && id < oldest {
                wrong.push(format!(
                    "{id}: .rewind/at refused, cat --at gave {} {}",
                    o.status,
                    stderr(&o)
                ));
            }
            continue;
        }
        if id < oldest {
            wrong.push(format!(
                "{id}: .rewind/at/{id} answers although gc kept only from {oldest}"
            ));
        }
        wrong.extend(past_disagrees(&ws, &changes, id));
    }
    assert!(
        wrong.is_empty(),
        "gc: {gc}\noldest kept {oldest}, {refused} refused\n{}\n{}",
        wrong.join("\n"),
        whole(&changes)
    );
    // What gc kept is what was there, and it kept everything from the oldest point on.
    let by_id: BTreeMap<u64, &Value> = changes
        .iter()
        .map(|c| (c["id"].as_u64().unwrap(), c))
        .collect();
    let kept = log(&ws);
    for c in &kept {
        let id = c["id"].as_u64().unwrap();
        assert_eq!(Some(&c), by_id.get(&id), "change {id} changed across gc");
    }
    let kept_ids: Vec<u64> = kept.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    for id in by_id.keys().filter(|id| **id > oldest) {
        assert!(
            kept_ids.contains(id),
            "gc removed {id}, after the oldest point {oldest}"
        );
    }
    ws.unmount();
}

/// SIGKILL of the daemon in the middle of the workload, a remount: the chain still holds and
/// ends at the tree (what the killed daemon had not recorded comes back as `external`).
#[test]
fn sigkill_mid_workload_then_a_remount_keeps_an_unbroken_chain() {
    signal_mid_workload_then_a_remount(libc::SIGKILL);
}

/// The same with SIGTERM: the daemon ends by itself, recording what it holds.
#[test]
fn sigterm_mid_workload_then_a_remount_keeps_an_unbroken_chain() {
    signal_mid_workload_then_a_remount(libc::SIGTERM);
}

fn signal_mid_workload_then_a_remount(signal: i32) {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        let pid = daemon_pid(&ws);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let _ = python_command(&ws.path(), WORKLOAD)
                    .args([
                        (600 + seed).to_string(),
                        "3".into(),
                        "200".into(),
                        "procs".into(),
                        "shared fsync exchange".into(),
                    ])
                    .output();
            });
            std::thread::sleep(Duration::from_millis(1500 + 300 * seed));
            // SAFETY: kill(2) of the daemon this test started.
            unsafe { libc::kill(pid, signal) };
            h.join().unwrap();
        });
        // SAFETY: signal 0 only asks whether the process exists.
        assert!(wait_for(10, || unsafe { libc::kill(pid, 0) } != 0));
        ws.mount();
        assert_chain_ends_in_the_present(&ws, &format!("seed {seed}, after the remount"));
        ws.unmount();
    }
}

/// Small sequences around the recorder's save rules, each in a folder of its own, run one after
/// the other by one python process (`child` runs a step in a forked process: another pid).
const SCENARIOS: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    assert libc.renameat2(-100, a.encode(), -100, b.encode(), 2) == 0
def wr(p, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fsync=False):
    fd = os.open(p, flags, 0o644)
    os.write(fd, data)
    if fsync: os.fsync(fd)
    os.close(fd)
def child(f):
    pid = os.fork()
    if pid == 0:
        try: f()
        finally: os._exit(0)
    os.waitpid(pid, 0)
def settle():
    time.sleep(0.7)
S = {}
def s(f): S[f.__name__] = f; return f
@s
def backup_renamed_back_over_the_new_file():
    os.rename("a", "a~"); wr("a", b"new\n"); os.rename("a~", "a")
@s
def backup_exchanged_with_the_new_file_then_deleted():
    os.rename("a", "a~"); wr("a", b"new\n"); exchange("a", "a~"); os.unlink("a~")
@s
def backup_chmodded_before_the_new_file_is_recorded():
    os.rename("a", "a~"); wr("a", b"new\n"); os.chmod("a~", 0o600)
@s
def backup_deleted_by_another_process():
    os.rename("a", "a~"); wr("a", b"new\n"); child(lambda: os.unlink("a~"))
@s
def new_file_written_by_another_process():
    os.rename("a", "a~"); child(lambda: wr("a", b"new\n")); os.unlink("a~")
@s
def backup_hard_linked_then_deleted():
    os.rename("a", "a~"); wr("a", b"new\n"); os.link("a~", "keep"); os.unlink("a~")
@s
def backup_hard_linked_and_kept():
    os.rename("a", "a~"); os.link("a~", "keep"); wr("a", b"new\n")
@s
def backup_written_through_a_hard_link_then_deleted():
    os.link("a", "keep"); os.rename("a", "a~"); wr("a", b"new\n")
    wr("keep", b"more\n", os.O_WRONLY | os.O_APPEND); os.unlink("a~")
@s
def two_saves_in_a_row_over_the_same_backup():
    os.rename("a", "a~"); wr("a", b"one\n"); os.unlink("a~")
    os.rename("a", "a~"); wr("a", b"two\n"); os.unlink("a~")
@s
def two_saves_keeping_the_backup_in_a_row():
    os.rename("a", "a~"); wr("a", b"one\n")
    os.rename("a", "a~"); wr("a", b"two\n")
@s
def new_file_renamed_away_before_the_backup_goes():
    os.rename("a", "a~"); wr("a", b"new\n"); os.rename("a", "b"); wr("a", b"newer\n"); os.unlink("a~")
@s
def new_file_is_a_hard_link():
    wr("b", b"bee\n"); settle(); os.rename("a", "a~"); os.link("b", "a"); os.unlink("a~")
@s
def new_file_is_a_hard_link_written_after():
    wr("b", b"bee\n"); settle(); os.rename("a", "a~"); os.link("b", "a")
    wr("a", b"more\n", os.O_WRONLY | os.O_APPEND); os.unlink("a~")
@s
def backup_written_and_put_back_then_deleted():
    os.rename("a", "a~"); wr("a", b"new\n")
    wr("a~", b"x", os.O_WRONLY | os.O_APPEND); os.truncate("a~", 4); os.unlink("a~")
@s
def folder_renamed_between_rename_away_and_delete():
    os.mkdir("d"); os.rename("a", "d/a~"); wr("a", b"new\n"); os.rename("d", "e"); os.unlink("e/a~")
@s
def backup_renamed_into_a_folder_renamed_back():
    os.mkdir("d"); os.rename("a", "d/a"); wr("a", b"new\n"); os.rename("d", "e"); os.rename("e", "d"); os.unlink("d/a")
@s
def held_new_file_below_a_folder_renamed():
    os.mkdir("d"); settle(); wr("d/n", b"n\n"); os.rename("d", "e")
@s
def held_new_file_below_a_folder_renamed_twice_and_written():
    os.mkdir("d"); settle(); wr("d/n", b"n\n"); os.rename("d", "e"); wr("e/n", b"m\n", os.O_WRONLY | os.O_APPEND); os.rename("e", "f")
@s
def held_new_file_below_a_folder_exchanged():
    os.mkdir("d"); os.mkdir("e"); settle(); wr("d/n", b"n\n"); wr("e/n", b"e\n"); exchange("d", "e")
@s
def held_new_file_hard_linked_and_first_name_deleted():
    wr("n", b"n\n"); os.link("n", "m"); wr("m", b"more\n", os.O_WRONLY | os.O_APPEND); os.unlink("n")
@s
def held_new_file_exchanged_with_a_recorded_one():
    wr("n", b"n\n"); exchange("n", "a")
@s
def held_new_file_renamed_over_then_backup_kept():
    wr("t", b"tmp\n"); os.rename("a", "a~"); os.rename("t", "a")
@s
def save_by_rename_with_the_temp_in_another_folder():
    os.mkdir("tmp"); settle(); wr("tmp/x", b"new\n"); os.rename("tmp/x", "a")
@s
def save_by_rename_then_rename_away_of_the_result():
    wr("t", b"tmp\n"); os.rename("t", "a"); os.rename("a", "a~"); wr("a", b"new\n"); os.unlink("a~")
@s
def rename_away_then_exchange_of_old_and_new_names_twice():
    os.rename("a", "a~"); wr("a", b"new\n"); exchange("a", "a~"); exchange("a", "a~"); os.unlink("a~")
@s
def new_file_open_while_backup_deleted():
    os.rename("a", "a~"); fd = os.open("a", os.O_WRONLY | os.O_CREAT, 0o644); os.write(fd, b"new\n")
    os.unlink("a~"); os.write(fd, b"more\n"); os.close(fd)
@s
def new_file_open_while_backup_deleted_by_another_handle_writer():
    os.rename("a", "a~"); fd = os.open("a", os.O_WRONLY | os.O_CREAT, 0o644); os.write(fd, b"new\n")
    child(lambda: wr("a", b"child\n", os.O_WRONLY | os.O_APPEND)); os.unlink("a~"); os.close(fd)
@s
def truncated_by_path_while_held():
    wr("n", b"hello\n"); os.truncate("n", 2); os.rename("n", "a")
@s
def fsynced_new_file_renamed_over_and_backup_kept():
    os.rename("a", "a~"); wr("a", b"new\n", fsync=True)
@s
def chmod_of_the_new_file_before_the_backup_goes():
    os.rename("a", "a~"); wr("a", b"new\n"); os.chmod("a", 0o755); os.unlink("a~")
@s
def mode_of_the_backup_differs_from_the_new_file():
    os.chmod("a", 0o600); settle(); os.rename("a", "a~"); wr("a", b"new\n"); os.unlink("a~")
@s
def rename_onto_another_name_of_the_same_file():
    os.link("a", "a2"); os.rename("a", "a2")
@s
def rename_onto_itself():
    os.rename("a", "a")
@s
def exchange_with_itself():
    libc.renameat2(-100, b"a", -100, b"a", 2)
@s
def exchange_two_names_of_one_file():
    os.link("a", "a2"); exchange("a", "a2"); wr("a2", b"more\n", os.O_WRONLY | os.O_APPEND)
@s
def exchange_a_file_and_a_folder():
    os.mkdir("d"); wr("d/x", b"x\n"); exchange("a", "d"); wr("d", b"more\n", os.O_WRONLY | os.O_APPEND)
@s
def rename_noreplace_refused():
    wr("b", b"bee\n"); settle(); libc.renameat2(-100, b"b", -100, b"a", 1); wr("b", b"more\n", os.O_WRONLY | os.O_APPEND)
@s
def rename_noreplace_of_a_held_file_refused():
    wr("b", b"bee\n"); libc.renameat2(-100, b"b", -100, b"a", 1)
@s
def folder_renamed_over_an_empty_folder():
    os.mkdir("d"); os.mkdir("e"); wr("d/x", b"x\n"); settle(); os.rename("d", "e")
@s
def folder_renamed_over_an_empty_folder_while_held():
    os.mkdir("d"); os.mkdir("e"); wr("d/x", b"x\n"); os.rename("d", "e")
@s
def unlinked_while_open_then_written_and_name_reused():
    fd = os.open("a", os.O_WRONLY | os.O_APPEND); os.write(fd, b"one\n"); os.unlink("a")
    os.write(fd, b"two\n"); wr("a", b"reborn\n"); os.write(fd, b"three\n"); os.close(fd)
@s
def renamed_while_open_new_file_at_the_name():
    fd = os.open("a", os.O_WRONLY | os.O_APPEND); os.write(fd, b"one\n"); os.rename("a", "b")
    wr("a", b"second\n"); os.write(fd, b"two\n"); os.close(fd)
@s
def hard_link_name_replaced_then_first_written():
    os.link("a", "b"); wr("c", b"cee\n"); settle(); os.rename("c", "b"); wr("a", b"more\n", os.O_WRONLY | os.O_APPEND)
@s
def hard_link_first_name_deleted_then_other_written():
    os.link("a", "b"); os.unlink("a"); wr("b", b"more\n", os.O_WRONLY | os.O_APPEND); wr("a", b"new a\n")
@s
def hard_link_chmod_through_second_name():
    os.link("a", "b"); os.chmod("b", 0o600); wr("a", b"x\n", os.O_WRONLY | os.O_APPEND)
@s
def hard_link_renamed_over_first_name_held():
    wr("n", b"n\n"); os.link("n", "m"); os.rename("m", "a"); wr("n", b"more\n", os.O_WRONLY | os.O_APPEND)
@s
def truncate_through_second_name_while_first_open():
    os.link("a", "b"); fd = os.open("a", os.O_WRONLY | os.O_APPEND); os.write(fd, b"one\n")
    os.truncate("b", 3); os.write(fd, b"two\n"); os.close(fd)
@s
def rmdir_then_mkdir_with_held_files():
    os.mkdir("d"); wr("d/x", b"x\n"); os.unlink("d/x"); os.rmdir("d"); os.mkdir("d"); wr("d/x", b"y\n")
@s
def folder_renamed_away_and_another_made_in_its_place_while_a_file_is_open():
    os.mkdir("d"); wr("d/x", b"x\n"); settle(); fd = os.open("d/x", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"one\n"); os.rename("d", "e"); os.mkdir("d"); wr("d/x", b"other\n"); os.write(fd, b"two\n"); os.close(fd)
@s
def exchange_of_folders_with_files_open_in_both():
    os.mkdir("d"); os.mkdir("e"); wr("d/x", b"dx\n"); wr("e/x", b"ex\n"); settle()
    f1 = os.open("d/x", os.O_WRONLY | os.O_APPEND); f2 = os.open("e/x", os.O_WRONLY | os.O_APPEND)
    os.write(f1, b"1\n"); exchange("d", "e"); os.write(f2, b"2\n"); os.close(f1); exchange("d", "e"); os.close(f2)
names = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else list(S)
mode = sys.argv[2] if len(sys.argv) > 2 else ""
if mode == "checkpoints":
    # A checkpoint after every step of the main process, with the tree as it then was.
    import json, subprocess
    root = os.getcwd()
    snaps = {}
    def snapshot():
        out = {}
        for dp, dns, fns in os.walk(root):
            rel = os.path.relpath(dp, root)
            if rel == ".rewind" or rel.startswith(".rewind/"):
                dns[:] = []
                continue
            dns[:] = [d for d in dns if not (rel == "." and d == ".rewind")]
            for d in dns:
                out[os.path.normpath(os.path.join(rel, d))] = None
            for f in fns:
                p = os.path.join(dp, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as h:
                        out[os.path.normpath(os.path.join(rel, f))] = h.read().hex()
        return out
    def cp():
        name = "cp%d" % len(snaps)
        subprocess.run(["rewind", "checkpoint", name], check=True, cwd=root, stdout=subprocess.DEVNULL)
        snaps[name] = snapshot()
    def wrap(f):
        def g(*a, **k):
            r = f(*a, **k)
            if os.getpid() == main_pid: cp()
            return r
        return g
    main_pid = os.getpid()
    for n in ("rename", "unlink", "link", "chmod", "truncate", "mkdir", "rmdir"):
        setattr(os, n, wrap(getattr(os, n)))
    wr = wrap(wr)
    exchange = wrap(exchange)
def one(n):
    os.mkdir(n)
    os.chdir(n)
    wr("a", b"original\n")
    settle()
    S[n]()
    if mode == "settle": settle()
    os.chdir("..")
if mode == "parallel":
    pids = []
    for n in names:
        pid = os.fork()
        if pid == 0:
            try: one(n)
            finally: os._exit(0)
        pids.append(pid)
    for p in pids: os.waitpid(p, 0)
else:
    for n in names: one(n)
if mode == "checkpoints":
    with open(os.environ["H27_SNAPS"], "w") as h:
        json.dump(snaps, h)
"#;

/// Each scenario, then: the chain holds and ends at the tree, and every point answers what the
/// chain says (`.rewind/at/ID` at every id, `cat --at` too).
fn scenarios(pause: &str) {
    let mut ws = Workspace::new();
    ws.mount();
    let out = python_command(&ws.path(), SCENARIOS)
        .args(["", pause])
        .output()
        .unwrap();
    assert!(out.status.success(), "scenarios: {}", stderr(&out));
    let changes = assert_chain_ends_in_the_present(&ws, pause);
    let mut wrong = Vec::new();
    for c in &changes {
        let id = c["id"].as_u64().unwrap();
        wrong.extend(past_disagrees_with(&ws, &changes, id, id % 7 == 0));
    }
    assert!(
        wrong.is_empty(),
        "{}\n{}",
        wrong.join("\n"),
        whole(&changes)
    );
    ws.unmount();
}

#[test]
fn save_rule_scenarios_back_to_back_keep_a_true_history() {
    scenarios("");
}

#[test]
fn save_rule_scenarios_each_settled_keep_a_true_history() {
    scenarios("settle");
}

#[test]
fn save_rule_scenarios_all_at_once_keep_a_true_history() {
    scenarios("parallel");
}

/// The scenarios all at once, then `rollback --to` a few points (previewed, then run), each
/// leaving the tree the chain says, and the rollback's own changes continuing the chain.
#[test]
fn rollbacks_after_the_save_rule_scenarios_restore_what_the_chain_says() {
    let mut ws = Workspace::new();
    ws.mount();
    let out = python_command(&ws.path(), SCENARIOS)
        .args(["", "parallel"])
        .output()
        .unwrap();
    assert!(out.status.success(), "scenarios: {}", stderr(&out));
    for f in [0.9, 0.6, 0.75, 0.3] {
        let changes = assert_chain_ends_in_the_present(&ws, "before a rollback");
        let ids: Vec<u64> = changes.iter().map(|c| c["id"].as_u64().unwrap()).collect();
        let id = ids[((ids.len() - 1) as f64 * f) as usize];
        let wrong = rollback_disagrees(&ws, &changes, id);
        assert!(
            wrong.is_empty(),
            "{}\n{}",
            wrong.join("\n"),
            whole(&changes)
        );
    }
    assert_chain_ends_in_the_present(&ws, "after the rollbacks");
    ws.unmount();
}

/// The scenarios all at once, the daemon SIGKILLed in the middle, a remount: the chain still
/// holds and ends at the tree.
///
/// Failed 1 run in 4: after the remount, the edit of a file unlinked while open (written
/// through its fd after the unlink) came back under the deleted name:
///   214 "modify" ".../a" before 4618385b after 0d9c832c
///   215 "delete" ".../a" before 0d9c832c after -
///   245 "modify" ".../a" before 0d9c832c after 2b92c168   <- a was deleted (the chain says None)
/// (scenario `unlinked_while_open_then_written_and_name_reused`). The unlink's cut wrote the
/// episode's marker at the name, and only the last handle's RELEASE dropped it; the next mount
/// read the new file at the name as that edit going on. The unlink drops it now.
#[test]
fn sigkill_during_the_save_rule_scenarios_then_a_remount() {
    for (i, ms) in [700u64, 1100, 1500].into_iter().enumerate() {
        let mut ws = Workspace::new();
        ws.mount();
        let pid = daemon_pid(&ws);
        let mut child = python_command(&ws.path(), SCENARIOS)
            .args(["", "parallel"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = child.wait();
        // SAFETY: signal 0 only asks whether the process exists.
        assert!(wait_for(10, || unsafe { libc::kill(pid, 0) } != 0));
        ws.mount();
        let changes = assert_chain_ends_in_the_present(&ws, &format!("kill {i} after {ms} ms"));
        let mut wrong = Vec::new();
        for c in changes.iter().step_by(3) {
            wrong.extend(past_disagrees_with(
                &ws,
                &changes,
                c["id"].as_u64().unwrap(),
                false,
            ));
        }
        assert!(
            wrong.is_empty(),
            "{}\n{}",
            wrong.join("\n"),
            whole(&changes)
        );
        ws.unmount();
    }
}

/// `rewind diff --from X --to Y`, applied with `git apply` to a copy of `.rewind/at/X`, gives
/// the files the chain says at Y (content only: git keeps no other modes, nor empty folders).
fn diff_disagrees(ws: &Workspace, changes: &[Value], x: u64, y: u64) -> Vec<String> {
    let files = |c: Chain| -> Chain {
        c.into_iter()
            .filter(|(_, s)| s.0 == "file")
            .map(|(p, (t, h, _))| (p, (t, h, None)))
            .collect()
    };
    let copy = ws.plain().join(format!("diff-{x}-{y}"));
    let at = ws.path().join(format!(".rewind/at/{x}"));
    crate::common::sh(
        &ws.plain(),
        &format!(
            "cp -r '{}' '{}' && chmod -R u+w '{}'",
            at.display(),
            copy.display(),
            copy.display()
        ),
    );
    let diff = rw(
        ws,
        &["diff", "--from", &x.to_string(), "--to", &y.to_string()],
    );
    let patch = copy.with_extension("patch");
    fs::write(&patch, &diff.stdout).unwrap();
    let apply = std::process::Command::new("git")
        .args(["apply", "--whitespace=nowarn"])
        .arg(&patch)
        .current_dir(&copy)
        .output()
        .unwrap();
    let mut wrong: Vec<String> =
        differences(&files(fold(changes, y).unwrap()), &files(tree(&copy)))
            .into_iter()
            .map(|d| format!("diff --from {x} --to {y} applied: {d}"))
            .collect();
    if !diff.status.success() || !apply.status.success() {
        wrong.push(format!(
            "diff --from {x} --to {y}: {} {}; git apply: {}",
            diff.status,
            stderr(&diff),
            stderr(&apply)
        ));
    }
    if !wrong.is_empty() {
        wrong.push(String::from_utf8_lossy(&diff.stdout).into_owned());
    }
    wrong
}

/// After the concurrent workload and after the scenarios, diffs between points agree with the
/// chain.
#[test]
fn diffs_between_points_agree_with_the_chain() {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        workload(&ws, 700 + seed, 3, 30, false, "shared fsync");
        let out = python_command(&ws.path(), SCENARIOS)
            .args(["", "parallel"])
            .output()
            .unwrap();
        assert!(out.status.success(), "scenarios: {}", stderr(&out));
        let changes = assert_chain_ends_in_the_present(&ws, &format!("seed {seed}"));
        let ids: Vec<u64> = changes.iter().map(|c| c["id"].as_u64().unwrap()).collect();
        let pick = |f: f64| ids[((ids.len() - 1) as f64 * f) as usize];
        let mut wrong = Vec::new();
        for (a, b) in [(0.1, 0.4), (0.3, 0.9), (0.5, 1.0), (0.05, 0.6), (0.7, 0.95)] {
            wrong.extend(diff_disagrees(&ws, &changes, pick(a), pick(b)));
        }
        assert!(
            wrong.is_empty(),
            "seed {seed}:\n{}\n{}",
            wrong.join("\n"),
            whole(&changes)
        );
        ws.unmount();
    }
}

/// Rollbacks (`--force`) run while several processes keep changing the files: whatever the
/// tree ends as, the history (the rollbacks' restores among the writers' changes) is an
/// unbroken chain ending at it.
///
/// Failed often with H27_SEEDS=8 (`155 "restore" "w1_2" before file:90e90c5c`, where the chain
/// was at `bf078bc6`): a rollback's delete carried content written after it had recorded the
/// writer's edit (`a_rollback_deleting_a_file_being_written_carries_what_the_cut_recorded`).
#[test]
fn rollbacks_while_processes_write_keep_an_unbroken_chain() {
    for seed in seeds() {
        let mut ws = Workspace::new();
        ws.mount();
        workload(&ws, 800 + seed, 3, 15, false, "shared");
        let first = log(&ws).len() as u64;
        let mut outs = Vec::new();
        std::thread::scope(|s| {
            let h = s.spawn(|| workload(&ws, 900 + seed, 3, 40, false, "shared fsync"));
            for k in 0..4u64 {
                std::thread::sleep(Duration::from_millis(300));
                let to = (first * (k + 1) / 5).max(1).to_string();
                let o = rw(&ws, &["rollback", "--to", &to, "--force"]);
                outs.push(format!("{to}: {} {}", o.status, stderr(&o)));
            }
            h.join().unwrap();
        });
        let changes =
            assert_chain_ends_in_the_present(&ws, &format!("seed {seed}\n{}", outs.join("\n")));
        assert!(
            changes.iter().any(|c| c["kind"] == "restore"),
            "no rollback restored anything: {outs:?}"
        );
        ws.unmount();
    }
}

/// `rewind gc` run while several processes keep changing the files: every change it kept is
/// as it was, and the history from the oldest point on is still an unbroken chain.
#[test]
fn gc_while_processes_write_keeps_what_it_keeps_true() {
    let mut ws = Workspace::new();
    ws.mount();
    workload(&ws, 1000, 3, 20, false, "shared");
    std::thread::sleep(Duration::from_secs(2));
    let before = log(&ws);
    let mut gcs = Vec::new();
    std::thread::scope(|s| {
        let h = s.spawn(|| workload(&ws, 1001, 3, 40, false, "shared fsync"));
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(250));
            gcs.push(rw_ok(&ws, &["gc", "--keep", "1s"]));
        }
        h.join().unwrap();
    });
    let after = log(&ws);
    let by_id: BTreeMap<u64, &Value> = before
        .iter()
        .map(|c| (c["id"].as_u64().unwrap(), c))
        .collect();
    for c in &after {
        if let Some(b) = by_id.get(&c["id"].as_u64().unwrap()) {
            assert_eq!(&c, b, "a change gc kept changed\n{}", gcs.join("\n"));
        }
    }
    // From the oldest point the last gc kept, the chain is whole: fold the changes after it
    // onto what `.rewind/at/OLDEST` shows.
    let oldest: u64 = gcs
        .last()
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("oldest point still kept: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no oldest point: {gcs:?}"));
    let no_modes = |c: Chain| -> Chain {
        c.into_iter()
            .map(|(p, (t, h, _))| (p, (t, h, None)))
            .collect()
    };
    let mut chain = no_modes(tree(&ws.path().join(format!(".rewind/at/{oldest}"))));
    let mut wrong = Vec::new();
    let rest: Vec<Value> = after
        .iter()
        .filter(|c| c["id"].as_u64().unwrap() > oldest)
        .cloned()
        .collect();
    match fold_onto(&mut chain, &rest, u64::MAX, false) {
        Ok(()) => wrong.extend(differences(&chain, &no_modes(tree(&ws.path())))),
        Err(e) => wrong.push(e),
    }
    assert!(
        wrong.is_empty(),
        "oldest {oldest}\n{}\n{}\n{}",
        wrong.join("\n"),
        gcs.join("\n"),
        whole(&after)
    );
    ws.unmount();
}

/// One process rewrites a file over and over (O_TRUNC, write, close) while `rollback --to`
/// (`--force`) runs again and again, deleting it (it was made after the point): every write the rollback's restore replaces or deletes
/// comes before it in the history, so the chain of the file holds.
///
/// Failed: a write whose close came just before the rollback's delete of the file was lost
/// (`96 "restore" "f" before file:71383ae1` where f's chain ended at `4826b754`). A rollback is
/// not a FUSE request: its delete did not record the closed edit first (`before_unlink` does
/// now), and it read the file again after recording the writer's edit, taking in what was
/// written since (`a_rollback_deleting_a_file_being_written_carries_what_the_cut_recorded`).
#[test]
fn a_rollback_racing_a_writers_close_keeps_the_chain() {
    rollbacks_racing_a_closing_writer(true);
}

/// The same, the files there at the point: each rollback rewrites them in place.
#[test]
fn a_rollback_rewriting_a_file_a_writer_just_closed_keeps_the_chain() {
    rollbacks_racing_a_closing_writer(false);
}

fn rollbacks_racing_a_closing_writer(after_point: bool) {
    let mut ws = Workspace::new();
    ws.mount();
    if !after_point {
        fs::write(ws.path().join("f"), "before\n").unwrap();
        fs::write(ws.path().join("g"), "before\n").unwrap();
    }
    // With `after_point`, the point is before f and g exist: each rollback deletes them (as
    // in the workload).
    fs::write(ws.path().join("p"), "point\n").unwrap();
    let first = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(ws.path().join("f"), "start\n").unwrap();
    fs::write(ws.path().join("g"), "start\n").unwrap();
    let script = r#"
import os, time
end = time.time() + 6
i = 0
while time.time() < end:
    for p in ("f", "g"):
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"line %d\n" % i)
            os.close(fd)
        except OSError:
            pass
    i += 1
"#;
    let mut outs = Vec::new();
    std::thread::scope(|s| {
        let h = s.spawn(|| python_command(&ws.path(), script).output().unwrap());
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(200));
            let o = rw(&ws, &["rollback", "--to", &first, "--force"]);
            outs.push(format!("{} {}", o.status, stderr(&o).trim()));
        }
        h.join().unwrap();
    });
    let changes =
        assert_chain_ends_in_the_present(&ws, &format!("rollbacks:\n{}", outs.join("\n")));
    assert!(changes.iter().any(|c| c["kind"] == "restore"), "{outs:?}");
    ws.unmount();
}

/// A writer appending to files it holds open a moment (write, sleep, write, close) while
/// `rollback --to` (`--force`) runs again and again: an open writer's episode is first closed
/// as its own change (SPEC), so the chain holds. `after_point`: the files were made after the
/// point (each rollback deletes them), else before it (each rollback rewrites them).
fn rollbacks_racing_an_open_writer(after_point: bool) {
    let mut ws = Workspace::new();
    ws.mount();
    if !after_point {
        fs::write(ws.path().join("f"), "start\n").unwrap();
        fs::write(ws.path().join("g"), "start\n").unwrap();
    }
    fs::write(ws.path().join("p"), "point\n").unwrap();
    let first = log(&ws).last().unwrap()["id"].as_u64().unwrap().to_string();
    fs::write(ws.path().join("f"), "made\n").unwrap();
    fs::write(ws.path().join("g"), "made\n").unwrap();
    let script = r#"
import os, time
end = time.time() + 6
i = 0
while time.time() < end:
    for p in ("f", "g"):
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(fd, b"line %d\n" % i)
            time.sleep(0.01)
            os.write(fd, b"more %d\n" % i)
            os.close(fd)
        except OSError:
            pass
    i += 1
"#;
    let mut outs = Vec::new();
    std::thread::scope(|s| {
        let h = s.spawn(|| python_command(&ws.path(), script).output().unwrap());
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(200));
            let o = rw(&ws, &["rollback", "--to", &first, "--force"]);
            outs.push(format!("{} {}", o.status, stderr(&o).trim()));
        }
        h.join().unwrap();
    });
    let changes =
        assert_chain_ends_in_the_present(&ws, &format!("rollbacks:\n{}", outs.join("\n")));
    assert!(changes.iter().any(|c| c["kind"] == "restore"), "{outs:?}");
    ws.unmount();
}

#[test]
fn rollbacks_rewriting_files_an_open_writer_appends_to_keep_the_chain() {
    rollbacks_racing_an_open_writer(false);
}

/// Failed at times (1 run in 3): `change 142 ("restore" "f") breaks the chain of f: it was
/// 17c69d7d.., the change says 9f28e97e..`, the loss
/// `a_rollback_deleting_a_file_being_written_carries_what_the_cut_recorded` shows.
#[test]
fn rollbacks_deleting_files_an_open_writer_appends_to_keep_the_chain() {
    rollbacks_racing_an_open_writer(true);
}

/// The scenarios one after the other with a checkpoint after every step: `.rewind/at/NAME` is
/// the tree as it was when the checkpoint was taken (read by the script itself, not derived
/// from the history), and the history is still an unbroken chain.
#[test]
fn a_checkpoint_after_every_step_of_the_scenarios_shows_the_tree_as_it_was() {
    let mut ws = Workspace::new();
    ws.mount();
    let snaps = ws.plain().join("snaps.json");
    let out = python_command(&ws.path(), SCENARIOS)
        .args(["", "checkpoints"])
        .env("H27_SNAPS", &snaps)
        .env("XDG_DATA_HOME", ws.plain().parent().unwrap().join("data"))
        .env("PATH", crate::common::path_with_rewind())
        .output()
        .unwrap();
    assert!(out.status.success(), "scenarios: {}", stderr(&out));
    let changes = assert_chain_ends_in_the_present(&ws, "checkpoints");
    let snaps: BTreeMap<String, BTreeMap<String, Option<String>>> =
        serde_json::from_str(&fs::read_to_string(&snaps).unwrap()).unwrap();
    assert!(snaps.len() > 100, "only {} checkpoints", snaps.len());
    let mut wrong = Vec::new();
    for (name, want) in &snaps {
        let at = ws.path().join(".rewind/at").join(name);
        let got: Chain = tree(&at);
        let want: Chain = want
            .iter()
            .map(|(p, c)| {
                let s = match c {
                    None => ("dir".to_string(), None, None),
                    Some(hex) => {
                        let bytes: Vec<u8> = (0..hex.len())
                            .step_by(2)
                            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                            .collect();
                        (
                            "file".to_string(),
                            Some(blake3::hash(&bytes).to_hex().to_string()),
                            None,
                        )
                    }
                };
                (p.clone(), s)
            })
            .collect();
        let got: Chain = got
            .into_iter()
            .map(|(p, (t, h, _))| (p, (t, h, None)))
            .collect();
        for d in differences(&want, &got) {
            wrong.push(format!(".rewind/at/{name}: {d}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n{}",
        wrong.join("\n"),
        whole(&changes)
    );
    ws.unmount();
}
