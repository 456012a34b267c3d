//! Round 32: rollbacks (run by the daemon underneath the mount, outside the kernel's locks)
//! racing requests through the mount from several threads and processes at once, after
//! 6fd792f (`Restores`, `Core::making`, `Core::open_to_restore`). Then: every path's changes
//! form an unbroken chain ending at what it holds now; a rollback left alone does what its
//! dry run said and leaves the tree as the point had it; nothing hangs.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::common::{
    Workspace, daemon_pid, noise, python_command, rw, rw_ok, stderr, stdout, wait_for,
};
use crate::hostile27::{differences, fold, whole};
use crate::record::log;

const REWIND: &str = env!("CARGO_BIN_EXE_rewind");

/// [`crate::hostile27::tree`] with symlinks too (their type only, as the log's states have it).
fn tree(root: &Path) -> BTreeMap<String, (String, Option<String>, Option<String>)> {
    let mut out = crate::hostile27::tree(root);
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut BTreeMap<String, (String, Option<String>, Option<String>)>,
    ) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".rewind" || rel == ".git" {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_symlink() => {
                    out.insert(rel, ("symlink".into(), None, None));
                }
                Ok(t) if t.is_dir() => walk(root, &p, out),
                _ => {}
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// [`crate::hostile27::assert_chain_ends_in_the_present`] with symlinks compared too.
#[track_caller]
fn assert_chain_ends_in_the_present(ws: &Workspace, what: &str) -> Vec<serde_json::Value> {
    let changes = log(ws);
    let chain = match fold(&changes, u64::MAX) {
        Ok(c) => c,
        Err(e) => panic!("{what}: {e}\n{}", whole(&changes)),
    };
    let diff = differences(&chain, &tree(&ws.path()));
    assert!(
        diff.is_empty(),
        "{what}: the history does not end at the tree:\n{}\n{}",
        diff.join("\n"),
        whole(&changes)
    );
    changes
}

/// The id of the newest change: a point.
fn point(ws: &Workspace) -> String {
    rw_ok(ws, &["sync"]);
    log(ws).last().unwrap()["id"].as_u64().unwrap().to_string()
}

/// Run `script` in the mount with `args` (the rewind binary first); it must exit 0. Its stdout.
fn run(ws: &Workspace, script: &str, args: &[&str]) -> String {
    let out = python_command(&ws.path(), script)
        .arg(REWIND)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the script failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rollback --to ID`, previewed then run, with nothing else going on: both succeed, the tree
/// is then what the chain says at `id`, and the dry run named every path the run restored.
fn rollback_alone_agrees(ws: &Workspace, id: &str, what: &str) {
    let changes = log(ws);
    let want = fold(&changes, id.parse().unwrap()).unwrap();
    let dry = rw(ws, &["rollback", "--to", id, "--dry-run", "--force"]);
    let before = log(ws).len();
    let after_dry = tree(&ws.path());
    let now_before = fold(&changes, u64::MAX).unwrap();
    assert!(
        differences(&now_before, &after_dry).is_empty(),
        "{what}: the dry run changed the tree: {:?}",
        differences(&now_before, &after_dry)
    );
    let done = rw(ws, &["rollback", "--to", id, "--force"]);
    rw_ok(ws, &["sync"]);
    let got = tree(&ws.path());
    let diff = differences(&want, &got);
    let restored: Vec<String> = log(ws)[before..]
        .iter()
        .filter(|c| c["kind"] == "restore")
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    let dry_says = stdout(&dry);
    let unnamed: Vec<&String> = restored
        .iter()
        .filter(|p| !dry_says.contains(p.as_str()))
        .collect();
    assert!(
        dry.status.success() && done.status.success() && diff.is_empty() && unnamed.is_empty(),
        "{what}: rollback --to {id} alone: dry {} / run {}\n{}{}\ndifferences: {diff:#?}\n\
         restored, not in the dry run: {unnamed:?}\ndry run:\n{dry_says}\nrun:\n{}",
        dry.status,
        done.status,
        stderr(&dry),
        stderr(&done),
        stdout(&done)
    );
    assert_chain_ends_in_the_present(ws, &format!("{what}, then a rollback alone"));
}

/// Files at the point, all deleted after it; a forced rollback makes them again while threads
/// unlink, save over (rename), `O_CREAT|O_TRUNC`-write, `O_EXCL`-create and chmod those names
/// as fast as they can. The rollback writes each file nameless (`O_TMPFILE`), links it at its
/// name holding `Core::making` and `Core::removing`, and records its create when its edit
/// ends: a request through the mount comes wholly before or after the link.
fn rollback_making_files_racing(ops: &str, rounds: u32) {
    for round in 0..rounds {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        fs::create_dir(dir.join("d")).unwrap();
        for i in 0..120 {
            fs::write(dir.join(format!("d/f{i}")), format!("at the point {i}\n")).unwrap();
        }
        let p = point(&ws);
        for i in 0..120 {
            fs::remove_file(dir.join(format!("d/f{i}"))).unwrap();
        }
        rw_ok(&ws, &["sync"]);
        let out = run(
            &ws,
            r#"
import errno, os, subprocess, sys, threading
OPS = sys.argv[3]
done = False
errors, known, rb = [], [], []
def racer(t):
    k = 0
    while not done:
        i = (k * 7 + t * 31) % 120
        name = "d/f%d" % i
        op = OPS[(k + t) % len(OPS)]
        k += 1
        try:
            if op == "u": os.unlink(name)
            elif op == "r":
                tmp = "d/t%d.%d" % (t, k)
                with open(tmp, "w") as h: h.write("saved %d %d\n" % (t, k))
                os.rename(tmp, name)
            elif op == "w":
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, b"written %d\n" % k); os.close(fd)
            elif op == "x":
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, b"excl %d\n" % k); os.close(fd)
            elif op == "c": os.chmod(name, [0o600, 0o640][k % 2])
            elif op == "a":
                fd = os.open(name, os.O_WRONLY | os.O_APPEND)
                os.write(fd, b"a%d\n" % k); os.close(fd)
            elif op == "t": os.truncate(name, k % 3)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EEXIST, errno.ESTALE): known.append("%s %s" % (op, errno.errorcode[e.errno]))
            else: errors.append("%s %s" % (op, e.strerror))
def rollback():
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True)
    rb.append((r.returncode, r.stderr.decode()[-400:], r.stdout.decode()[-600:] if r.returncode else ""))
ts = [threading.Thread(target=racer, args=(t,)) for t in range(3)]
for t in ts: t.start()
r = threading.Thread(target=rollback); r.start(); r.join()
done = True
for t in ts: t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", {k: known.count(k) for k in set(known)}, "rollback", rb)
"#,
            &[&p, ops],
        );
        eprintln!("round {round}: {out}");
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(
            &ws,
            &format!("round {round}: a rollback making files racing {ops}"),
        );
        assert!(out.starts_with("OK "), "{out}\n{}", whole(&changes));
        rollback_alone_agrees(&ws, &p, &format!("round {round}"));
        ws.unmount();
    }
}

#[test]
fn a_rollback_making_files_again_racing_unlinks_keeps_the_chain() {
    rollback_making_files_racing("u", 4);
}

#[test]
fn a_rollback_making_files_again_racing_saves_by_rename_keeps_the_chain() {
    rollback_making_files_racing("r", 4);
}

#[test]
fn a_rollback_making_files_again_racing_o_creat_and_o_excl_opens_keeps_the_chain() {
    rollback_making_files_racing("wx", 4);
}

#[test]
fn a_rollback_making_files_again_racing_chmods_appends_and_truncates_keeps_the_chain() {
    rollback_making_files_racing("cat", 4);
}

/// FAILED 1 run in 3 (round 1 of 4): `change 355 ("modify" "d/f117") breaks the chain of
/// d/f117 (its own before): it was None, the change says Some(("file", Some("af1349b9…"),
/// Some("644")))`; the log: `239 "delete" "d/f117"` (after the point), the rollback's restores
/// of d/f113..d/f116 (342-350), then `355 "modify" "d/f117" (python3) before file:af1349b9:644`
/// (af1349b9: empty), and no restore of d/f117 at all. The rollback made `d/f117` empty
/// underneath (`O_EXCL`) and a process's open through the mount found it before the rollback
/// began its create (`Restorer::write_file`, src/fs/restore.rs, new-file branch: nothing held
/// from the `O_EXCL` open to `begin_create`); the create was never recorded. Passes since a
/// rollback's new file is made unnamed and begun before it gets its name (`Restorer::make_file`;
/// `a_process_opening_a_file_a_rollback_is_making_comes_after_its_create`).
#[test]
fn a_rollback_making_files_again_racing_everything_keeps_the_chain() {
    rollback_making_files_racing("urwxcat", 4);
}

/// Several processes, each with threads, at once: saves by rename, `sed -i`, `O_CREAT|O_TRUNC`
/// and `O_EXCL` creates, mkdir/rmdir, symlinks, hard links, chmod, truncate, appends through an
/// open fd, `rm -rf` of a folder; meanwhile rollbacks `--to` the point, of one file, two at
/// once, and of the last rollback's session. Errors a plain disk gives under such a race are
/// counted; anything else fails. Then the chain must hold, and a rollback alone must agree with
/// its dry run and the chain.
const CHAOS: &str = r#"
import errno, os, random, shutil, subprocess, sys, threading, time
REWIND, POINT, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = False
errors, known, rb = [], [], []
lock = threading.Lock()
def note(op, e):
    with lock:
        # rmtree's own "Cannot call rmtree on a symbolic link" (no errno): the folder was
        # replaced under it (a rollback made it again), as another process could on disk.
        if e.errno is None and op == "R":
            known.append("R replaced")
        elif e.errno in (errno.ENOENT, errno.EEXIST, errno.ESTALE, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            known.append("%s %s" % (op, errno.errorcode[e.errno]))
        else:
            errors.append("%s %s" % (op, e.strerror))
def worker(w):
    rnd = random.Random(SEED * 100 + w)
    fds = []
    k = 0
    while not done:
        k += 1
        n = "f%d" % rnd.randrange(6)
        d = "dir%d" % rnd.randrange(2)
        op = rnd.choice(sys.argv[7] if len(sys.argv) > 7 else "sSwxmMylcta" + "R" + "o")
        try:
            if op == "s":
                tmp = "%s.%d.tmp" % (n, w)
                with open(tmp, "w") as h: h.write("save %d %d\n" % (w, k))
                os.rename(tmp, n)
            elif op == "S":
                r = subprocess.run(["sed", "-i", "s/a/b/;1i line %d" % k, n], capture_output=True)
                if r.returncode != 0 and b"Stale file handle" in r.stderr:
                    with lock: known.append("S ESTALE")
                elif r.returncode != 0 and b"No such file" not in r.stderr and b"couldn't open" not in r.stderr:
                    with lock: errors.append("sed: " + r.stderr.decode().strip()[-200:])
            elif op == "w":
                fd = os.open(n, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, b"trunc %d\n" % k); os.close(fd)
            elif op == "x":
                fd = os.open("%s/n%d" % (d, k % 5), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, b"excl\n"); os.close(fd)
            elif op == "m": os.makedirs("%s/sub%d" % (d, k % 3), exist_ok=True)
            elif op == "M": os.rmdir("%s/sub%d" % (d, k % 3))
            elif op == "y":
                l = "ln%d" % (k % 3)
                if os.path.lexists(l): os.unlink(l)
                else: os.symlink(n, l)
            elif op == "l":
                h = "hl%d" % (k % 3)
                if os.path.lexists(h): os.unlink(h)
                else: os.link(n, h)
            elif op == "c": os.chmod(n, rnd.choice([0o600, 0o644, 0o755]))
            elif op == "t": os.truncate(n, rnd.randrange(4))
            elif op == "a":
                if len(fds) < 3:
                    fds.append(os.open(n, os.O_WRONLY | os.O_APPEND))
                else:
                    fd = fds.pop(0); os.write(fd, b"append %d\n" % k); os.close(fd)
            elif op == "R":
                shutil.rmtree(d)
            elif op == "o":
                os.makedirs(d, exist_ok=True)
                with open("%s/in%d" % (d, k % 4), "w") as h: h.write("in %d\n" % k)
        except OSError as e:
            note(op, e)
        except shutil.Error as e:
            with lock: known.append("R shutil")
        if fds and rnd.random() < 0.3:
            try: os.write(fds[0], b"x%d\n" % k)
            except OSError as e: note("a-write", e)
    for fd in fds: os.close(fd)
def rollback(args):
    r = subprocess.run([REWIND, "rollback"] + args + ["--force"], capture_output=True)
    with lock: rb.append((" ".join(args), r.returncode, r.stderr.decode().strip()[-300:], r.stdout.decode()[-400:] if r.returncode else ""))
    return r
ts = [threading.Thread(target=worker, args=(w,)) for w in range(int(sys.argv[4]))]
for t in ts: t.start()
time.sleep(0.3)
for k in range(int(sys.argv[5])):
    mode = sys.argv[6][k % len(sys.argv[6])]
    if mode == "p": rollback(["--to", POINT])
    elif mode == "f": rollback(["--file", "f%d" % (k % 6), "--to", POINT])
    elif mode == "2":
        a = threading.Thread(target=rollback, args=(["--to", POINT],))
        b = threading.Thread(target=rollback, args=(["--to", POINT],))
        a.start(); b.start(); a.join(); b.join()
    elif mode == "n": time.sleep(0.5)
    elif mode == "s":
        r = rollback(["--to", POINT])
        name = [w for w in (r.stdout.decode() + r.stderr.decode()).split() if w.startswith("rollback-")]
        if name: rollback(["--session", name[0].strip(".,:'\"`")])
    time.sleep(0.05)
done = True
for t in ts: t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", {k: known.count(k) for k in sorted(set(known))})
for r in rb: print("rollback", r)
"#;

fn chaos(seed: u64, workers: u32, rollbacks: u32, modes: &str) {
    chaos_of(seed, workers, rollbacks, modes, "sSwxmMylctaRo");
}

/// [`chaos`] with the workers' operations `ops` only (letters of the script's).
fn chaos_of(seed: u64, workers: u32, rollbacks: u32, modes: &str, ops: &str) {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    for i in 0..6 {
        fs::write(dir.join(format!("f{i}")), format!("a line {i}\nand a\n")).unwrap();
    }
    for d in ["dir0", "dir1"] {
        fs::create_dir_all(dir.join(d).join("sub0")).unwrap();
        fs::write(dir.join(d).join("in0"), "in\n").unwrap();
    }
    // Paths no process touches during the race, changed after the point before it.
    fs::create_dir_all(dir.join("quiet/gone")).unwrap();
    for i in 0..20 {
        fs::write(dir.join(format!("quiet/q{i}")), format!("quiet {i}\n")).unwrap();
    }
    fs::write(dir.join("quiet/gone/x"), "x\n").unwrap();
    let p = point(&ws);
    for i in 0..20 {
        let q = dir.join(format!("quiet/q{i}"));
        match i % 5 {
            0 => fs::remove_file(&q).unwrap(),
            1 => fs::write(&q, "changed\n").unwrap(),
            2 => fs::set_permissions(&q, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap(),
            3 => fs::rename(&q, dir.join(format!("quiet/moved{i}"))).unwrap(),
            _ => fs::write(dir.join(format!("quiet/new{i}")), "new\n").unwrap(),
        }
    }
    fs::remove_dir_all(dir.join("quiet/gone")).unwrap();
    rw_ok(&ws, &["sync"]);
    let out = run(
        &ws,
        CHAOS,
        &[
            &p,
            &seed.to_string(),
            &workers.to_string(),
            &rollbacks.to_string(),
            modes,
            ops,
        ],
    );
    eprintln!("seed {seed}: {out}");
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, &format!("seed {seed}: {out}"));
    assert!(
        out.starts_with("OK "),
        "seed {seed}: errors a plain disk does not give: {out}\n{}",
        whole(&changes)
    );
    // The last rollback was to the point (not of its session, which undoes it): the paths no
    // process touched are as the point had them, whatever the rollbacks said of others.
    if modes.ends_with('p') || modes.ends_with('2') {
        let quiet = |c: &BTreeMap<String, (String, Option<String>, Option<String>)>| {
            c.iter()
                .filter(|(k, _)| k.starts_with("quiet"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>()
        };
        let want = quiet(&fold(&changes, p.parse().unwrap()).unwrap());
        let diff = differences(&want, &quiet(&tree(&dir)));
        assert!(
            diff.is_empty(),
            "seed {seed}: paths nothing touched during the race are not as the point had \
             them: {diff:#?}\n{out}"
        );
    }
    // A rollback racing these may fail on a path a process removed meanwhile (exit 1, "done
    // in part"): counted in the output, not failed on.
    rollback_alone_agrees(&ws, &p, &format!("seed {seed}"));
    ws.unmount();
}

/// The same processes with no rollback at all: whatever breaks the chain here is the
/// recorder's, not a rollback's.
///
/// Failed 1 run in 3 (`change 3987 ("modify" "f5") breaks the chain of f5 (its own before):
/// it was Some(("file", Some("1005411c…"), Some("644"))), the change says Some(("file",
/// Some("1005411c…"), Some("755")))`: a `sed -i` save whose target had a mode no change gave
/// it), until a read open checked that it opened its inode's file (see the test below);
/// 6 of 6 since.
#[test]
fn processes_racing_everything_without_rollbacks_keep_the_chain() {
    for seed in 10..13 {
        chaos(seed, 4, 8, "n");
    }
}

/// A process opens `f` for reading (`REWIND_TEST_SLOW_OPEN_READ` holds the open between
/// finding the inode's name and opening by it) while another renames `g` over `f`, then
/// `fchmod`s through what it opened. Opened by the name, the handle was `g`'s file under `f`'s
/// old inode, and the chmod went to the file now at `f` with no change recording it (`sed -i`
/// reads its input while other saves land: the chain of modes broke every run). Now the open
/// is answered `ESTALE` and the kernel opens what the name holds.
#[test]
fn a_read_open_racing_a_save_over_its_name_opens_one_file() {
    use std::os::unix::fs::PermissionsExt;
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_OPEN_READ", "800")]);
    let dir = ws.path();
    fs::write(dir.join("f"), "old\n").unwrap();
    fs::write(dir.join("g"), "new\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let read = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let f = fs::File::open(dir.join("f")).unwrap();
            f.set_permissions(fs::Permissions::from_mode(0o600))
                .unwrap();
            std::io::read_to_string(f).unwrap()
        });
        std::thread::sleep(Duration::from_millis(300));
        fs::rename(dir.join("g"), dir.join("f")).unwrap();
        reader.join().unwrap()
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a read open racing a save over its name");
    let mode = fs::metadata(dir.join("f")).unwrap().permissions().mode() & 0o777;
    // What the process read and chmodded is one file: the old one (as on disk, where the
    // open comes first), or the new one, opened again after the rename.
    match read.as_str() {
        "new\n" => assert_eq!(mode, 0o600, "the new file was read and chmodded"),
        "old\n" => assert_eq!(
            mode, 0o644,
            "the old file was read: the new one keeps its mode"
        ),
        other => panic!("read {other:?}"),
    }
    ws.unmount();
}

/// `sed -i` saves and chmods alone, four workers, no rollback.
///
/// Failed every run (11 of 11), after a few hundred to a few thousand changes: a mode was in
/// the file when the next change was recorded that no change gave it (`2714 modify f1 (sed)
/// … after 644`, then `2716 chmod f1` from 600). A trace in the daemon (since removed) showed
/// it: a sed opening `f1` for reading while another sed's save landed on it got, by the name,
/// the new file under the old file's inode; a chmod the kernel then sent for that inode (no
/// name left) went through that handle to the file at `f1`, unrecorded
/// (`a_read_open_racing_a_save_over_its_name_opens_one_file`). 6 of 6 since the fix.
#[test]
fn sed_saves_racing_chmods_keep_the_chain() {
    for seed in 10..13 {
        chaos_of(seed, 4, 8, "n", "Sc");
    }
}

///
/// FAILS about 1 run in 4 (2 of 8 runs here): once `change 1658 ("modify" "f1") breaks the
/// chain of f1 (its own before): it was Some(("file", Some("391f0c9d…"), Some("644"))), the
/// change says Some(("file", Some("391f0c9d…"), Some("600")))`: the log has `1600 "chmod" "f1"
/// 644 -> 600`, `1614 "modify" "f1" (sed) 600 -> 600`, `1641 "modify" "f1" (python3)
/// before 1b1a1682:600 after 93da2204:644`, `1651 "modify" "f1" (sed) 644 -> 644`, then
/// `1658 "modify" "f1" (python3) before 391f0c9d:600`: the right content with the mode from
/// before 1641, and no restore of f1 in between (so perhaps not the rollbacks' doing: a chmod
/// folded into an edit, then another edit's before taking a stale mode).
#[test]
/// (A stale mode like this one was a read open getting the wrong file, fixed; 2 of 2 runs
/// passed since, too few to say.)
#[ignore = "fails: a modify's before has the content now but a mode from two changes back (seen 1 run in 4)"]
fn rollbacks_to_a_point_racing_everything_keep_the_chain() {
    for seed in 0..3 {
        chaos(seed, 4, 6, "p");
    }
}

/// FAILS about 1 run in 6 (42 runs on 2026-11-28: 7 failures; a CI run failed on it), three
/// ways: a hard link's delete with no link before it (`change 1536 ("delete" "hl0")…: it
/// was None`, right after a rollback of `f1` removed `hl0`), 4 of 7; a modify or save whose
/// before content is not the chain's, with no change in between that made it (`change 118
/// ("modify" "f4")`, before empty where `3ff37624…` was, before any rollback ran), 2 of 7; a
/// modify whose before mode is from two changes back (as the ignored test below), 1 of 7.
/// Not understood yet; a link made through a handle (`Core::link_unnamed`) is not it (never
/// reached in 17 runs). The modes at least were a read open getting the wrong file (see
/// `sed_saves_racing_chmods_keep_the_chain`): 6 of 6 runs passed since that fix, too few to
/// say the rest went with it.
#[test]
#[ignore = "fails 1 run in 6: unrecorded hard links, a modify from unrecorded content, a mode from two changes back"]
fn rollbacks_of_one_file_racing_everything_keep_the_chain() {
    for seed in 10..13 {
        chaos(seed, 4, 8, "f");
    }
}

///
/// FAILS about 1 run in 2 (seed 20 or 21 of 3): `change 944 ("restore" "f0") breaks the chain
/// of f0 (its own before): it was Some(("file", Some("1ad48f49…"), Some("755"))), the change
/// says None`; the log: `944 "restore" "f0" pid 22356 "rewind" before - after
/// file:14420f29:644`, then `946 "restore" "f0" pid 22359 "rewind" before file:1ad48f49:755
/// after -`: one rollback removed `f0` to make it again, the other made it meanwhile, and its
/// create was recorded before the removal's delete. Made deterministic by
/// `a_rollback_making_a_file_another_rollback_just_removed_keeps_the_chain`.
#[test]
#[ignore = "fails 1 run in 2: a restore of a folder whose before is not the chain's, under the mixed race (two rollbacks no longer interleave)"]
fn two_rollbacks_at_once_racing_everything_keep_the_chain() {
    for seed in 20..23 {
        chaos(seed, 4, 4, "2");
    }
}

///
/// FAILED 1 run in 2 (seed 32): `change 2225 ("delete" "hl2") breaks the chain of hl2 (its own
/// before): it was None, the change says Some(("file", Some("c896c215…"), Some("600")))`; the
/// log: `2163 "delete" "hl2" (python3) before file:5a20c568:644`, then no change of `hl2` (and
/// none with content c896c215 anywhere) until `2225 "delete" "hl2" (python3) before
/// file:c896c215:600`: the hard link `hl2` made in between (`os.link(fN, "hl2")`) was never
/// recorded, nor the content of the file it named; ids 2210, 2212, 2214-2216 and 2223 are
/// missing (retracted). No rollback recorded anything from 2159 to 2225.
#[test]
#[ignore = "fails: a hard link made during the race is never recorded, its delete breaks the chain (1 run in 2)"]
fn rollbacks_of_a_rollbacks_session_racing_everything_keep_the_chain() {
    for seed in 30..33 {
        chaos(seed, 4, 4, "s");
    }
}

/// Two rollbacks at once with nothing else going on: both to the point, or one to the point
/// and one of a single file. Then the tree is as the point had it, and the chain holds.
///
/// FAILS about 1 run in 2 (round 2 of 4 here): the tree ends as the point had it and the chain
/// holds, but one rollback exits 1: `failed   d0: d0: File exists (os error 17)`, then
/// `failed   d0/f0: its folder could not be restored` for each of the folder's 10 files,
/// `rollback-1: restored 30 paths, skipped 0, failed 11`; the other, `rollback-2: restored 41
/// paths, skipped 0, failed 0`. Both made the deleted folder `d0`: the second `mkdir` got
/// `EEXIST` for a folder that is there, as the point had it (`Restorer::make_dir`,
/// src/fs/restore.rs, takes `EEXIST` as a failure; `remove` now takes `ENOENT` as done).
///
/// Passes since rollbacks run one at a time, and a folder made meanwhile is taken as made.
#[test]
fn two_rollbacks_at_once_alone_end_at_the_point() {
    for round in 0..4 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        for i in 0..40 {
            fs::create_dir_all(dir.join(format!("d{}", i % 4))).unwrap();
            fs::write(dir.join(format!("d{}/f{i}", i % 4)), format!("{i}\n")).unwrap();
        }
        let p = point(&ws);
        for i in 0..40 {
            let f = dir.join(format!("d{}/f{i}", i % 4));
            match i % 4 {
                0 => fs::remove_file(&f).unwrap(),
                1 => fs::write(&f, "changed\n").unwrap(),
                2 => {
                    fs::write(dir.join("tmp"), "saved\n").unwrap();
                    fs::rename(dir.join("tmp"), &f).unwrap();
                }
                _ => fs::write(dir.join(format!("d{}/new{i}", i % 4)), "new\n").unwrap(),
            }
        }
        fs::remove_dir_all(dir.join("d0")).unwrap();
        let want = fold(&log(&ws), p.parse().unwrap()).unwrap();
        let second: Vec<&str> = if round % 2 == 0 {
            vec!["rollback", "--to", &p, "--force"]
        } else {
            vec!["rollback", "--file", "d1/f1", "--to", &p, "--force"]
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| rw(&ws, &["rollback", "--to", &p, "--force"]));
            let b = s.spawn(|| rw(&ws, &second));
            (a.join().unwrap(), b.join().unwrap())
        });
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}"));
        let diff = differences(&want, &tree(&dir));
        assert!(
            a.status.success() && b.status.success() && diff.is_empty(),
            "round {round}: {} {}{} / {} {}{}\n{diff:#?}\n{}",
            a.status,
            stderr(&a),
            stdout(&a),
            b.status,
            stderr(&b),
            stdout(&b),
            whole(&changes)
        );
        ws.unmount();
    }
}

/// The daemon is SIGKILLed in the middle of a forced rollback that restores many files (some
/// rewritten in place, some made again, some removed, folders too), then mounted again: the
/// chain holds, nothing appeared outside the workspace, and a rollback alone then ends at the
/// point.
#[test]
fn sigkill_in_the_middle_of_a_rollback_then_a_remount_keeps_the_chain() {
    for (round, wait) in [15u64, 40, 80, 150, 300].into_iter().enumerate() {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        let big = "x".repeat(1 << 20);
        for i in 0..60 {
            fs::create_dir_all(dir.join(format!("d{}", i % 3))).unwrap();
            fs::write(dir.join(format!("d{}/f{i}", i % 3)), format!("{i}{big}")).unwrap();
        }
        let p = point(&ws);
        for i in 0..60 {
            let f = dir.join(format!("d{}/f{i}", i % 3));
            match i % 3 {
                0 => fs::remove_file(&f).unwrap(),
                1 => fs::write(&f, format!("changed {i}\n")).unwrap(),
                _ => fs::write(dir.join(format!("d{}/new{i}", i % 3)), "new\n").unwrap(),
            }
        }
        fs::remove_dir_all(dir.join("d2")).unwrap();
        rw_ok(&ws, &["sync"]);
        let outside_before = list(ws.plain().parent().unwrap());
        let pid = daemon_pid(&ws);
        let child = ws
            .command(&["rollback", "--to", &p, "--force"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait));
        ws.kill_daemon(pid);
        let said = child.wait_with_output().unwrap();
        eprintln!(
            "round {round}: SIGKILL after {wait} ms; the rollback: {} {}",
            said.status,
            stderr(&said).trim()
        );
        ws.mount();
        rw_ok(&ws, &["sync"]);
        assert_chain_ends_in_the_present(&ws, &format!("round {round}: SIGKILL after {wait} ms"));
        let outside_after = list(ws.plain().parent().unwrap());
        let new: Vec<&String> = outside_after
            .iter()
            .filter(|p| {
                !outside_before.contains(p) && !p.starts_with("store") && !p.starts_with("data")
            })
            .collect();
        assert!(
            new.is_empty(),
            "round {round}: written outside the workspace: {new:?}"
        );
        rollback_alone_agrees(
            &ws,
            &p,
            &format!("round {round}: after SIGKILL and remount"),
        );
        ws.unmount();
    }
}

/// Paths below `root` (not `ws`), relative.
fn list(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "ws" {
                continue;
            }
            out.push(rel);
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// `git checkout` of one branch then the other, over and over, while forced rollbacks to a
/// point on the first branch run: the chain holds (`.git` and all), and a rollback alone then
/// ends at the point.
#[test]
fn rollbacks_racing_git_checkouts_keep_the_chain() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    };
    git(&["init", "-q"]);
    for i in 0..30 {
        fs::create_dir_all(dir.join(format!("src/m{}", i % 3))).unwrap();
        fs::write(
            dir.join(format!("src/m{}/f{i}.rs", i % 3)),
            format!("fn f{i}() {{}}\n"),
        )
        .unwrap();
    }
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    git(&["checkout", "-qb", "other"]);
    for i in 0..30 {
        let f = dir.join(format!("src/m{}/f{i}.rs", i % 3));
        match i % 3 {
            0 => fs::remove_file(&f).unwrap(),
            1 => fs::write(&f, format!("fn g{i}() {{}}\n")).unwrap(),
            _ => fs::write(dir.join(format!("src/m{}/g{i}.rs", i % 3)), "new\n").unwrap(),
        }
    }
    fs::remove_dir_all(dir.join("src/m0")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "two"]);
    git(&["checkout", "-q", "main"]);
    let p = point(&ws);
    git(&["checkout", "-q", "other"]);
    let out = run(
        &ws,
        r#"
import subprocess, sys, threading
done = False
errs, rb = [], []
def checkouts():
    k = 0
    while not done:
        b = ["main", "other"][k % 2]; k += 1
        r = subprocess.run(["git", "checkout", "-qf", b], capture_output=True)
        if r.returncode != 0: errs.append(r.stderr.decode().strip()[-200:])
t = threading.Thread(target=checkouts); t.start()
for k in range(4):
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True)
    rb.append((r.returncode, r.stderr.decode().strip()[-300:]))
done = True
t.join()
print("checkout errors", len(errs), sorted(set(errs))[:5])
for r in rb: print("rollback", r)
"#,
        &[&p],
    );
    eprintln!("{out}");
    rw_ok(&ws, &["sync"]);
    let changes = log(&ws);
    let chain = fold(&changes, u64::MAX).unwrap_or_else(|e| {
        panic!(
            "rollbacks racing git checkouts: {e}\n{out}\n{}",
            whole(&changes)
        )
    });
    let mut now = tree(&dir);
    now.retain(|p, _| p != ".git" && !p.starts_with(".git/"));
    let diff = differences(&chain, &now);
    assert!(
        diff.is_empty(),
        "the history does not end at the tree: {diff:#?}\n{out}\n{}",
        whole(&changes)
    );
    let want = fold(&changes, p.parse().unwrap()).unwrap();
    let done = rw(&ws, &["rollback", "--to", &p, "--force"]);
    let mut now = tree(&dir);
    now.retain(|p, _| p != ".git" && !p.starts_with(".git/"));
    let diff = differences(&want, &now);
    assert!(
        done.status.success() && diff.is_empty(),
        "a rollback alone: {} {}\n{diff:#?}",
        done.status,
        stderr(&done)
    );
    ws.unmount();
}

/// Two forced rollbacks at once to two different points, of a big file each point had with
/// other content (and a hard link, so both rewrite it in place): whichever ends last, the file
/// must then hold what one of the points had, never a mix of the two, and the chain must hold.
#[test]
fn two_rollbacks_at_once_to_different_points_leave_one_points_content() {
    for round in 0..4 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        let a = "a".repeat(6 << 20);
        let b = "b".repeat(3 << 20);
        fs::write(dir.join("f"), &a).unwrap();
        fs::hard_link(dir.join("f"), dir.join("g")).unwrap();
        let pa = point(&ws);
        fs::write(dir.join("f"), &b).unwrap();
        let pb = point(&ws);
        fs::write(dir.join("f"), "now\n").unwrap();
        rw_ok(&ws, &["sync"]);
        let (x, y) = std::thread::scope(|s| {
            let x = s.spawn(|| rw(&ws, &["rollback", "--to", &pa, "--force"]));
            if round % 2 == 1 {
                std::thread::sleep(Duration::from_millis(20));
            }
            let y = s.spawn(|| rw(&ws, &["rollback", "--to", &pb, "--force"]));
            (x.join().unwrap(), y.join().unwrap())
        });
        rw_ok(&ws, &["sync"]);
        let got = fs::read(dir.join("f")).unwrap();
        let which = if got == a.as_bytes() {
            "a".to_string()
        } else if got == b.as_bytes() {
            "b".to_string()
        } else {
            let na = got.iter().filter(|&&c| c == b'a').count();
            let nb = got.iter().filter(|&&c| c == b'b').count();
            format!("a mix: {} bytes, {na} a, {nb} b", got.len())
        };
        eprintln!(
            "round {round}: f holds {which}; {} / {}",
            x.status, y.status
        );
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}: {which}"));
        assert!(
            which.len() == 1 && x.status.success() && y.status.success(),
            "round {round}: f holds {which}; {} {}{} / {} {}{}\n{}",
            x.status,
            stderr(&x),
            stdout(&x),
            y.status,
            stderr(&y),
            stdout(&y),
            whole(&changes)
        );
        ws.unmount();
    }
}

/// A forced rollback removes hundreds of files and folders made after the point, in folders
/// where threads keep making files (`O_CREAT`, `O_EXCL`), folders, symlinks and hard links
/// (`ln`, a process) and removing them again. A rollback's removal waits for every make in
/// progress (`Core::making`, held exclusively): nothing may hang, and the chain must hold.
#[test]
fn a_rollback_removing_many_names_racing_makers_neither_hangs_nor_breaks_the_chain() {
    for round in 0..3 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        for d in ["a", "b"] {
            fs::create_dir(dir.join(d)).unwrap();
            fs::write(dir.join(d).join("keep"), "keep\n").unwrap();
        }
        let p = point(&ws);
        for i in 0..150 {
            let d = ["a", "b"][i % 2];
            fs::write(dir.join(format!("{d}/made{i}")), "after\n").unwrap();
            if i % 10 == 0 {
                fs::create_dir_all(dir.join(format!("{d}/sub{i}/deep"))).unwrap();
                fs::write(dir.join(format!("{d}/sub{i}/deep/x")), "x\n").unwrap();
            }
        }
        rw_ok(&ws, &["sync"]);
        let out = run(
            &ws,
            r#"
import errno, os, subprocess, sys, threading
done = False
errors, known, rb = [], [], []
def maker(t):
    k = 0
    while not done:
        k += 1
        d = ["a", "b"][k % 2]
        n = "%s/m%d_%d" % (d, t, k % 9)
        op = (k + t) % 6
        try:
            if op == 0:
                fd = os.open(n, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644); os.write(fd, b"m\n"); os.close(fd)
            elif op == 1:
                fd = os.open(n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.close(fd)
            elif op == 2: os.mkdir(n + "d")
            elif op == 3: os.symlink("keep", n + "s")
            elif op == 4:
                r = subprocess.run(["ln", "%s/keep" % d, n + "l"], capture_output=True)
                if r.returncode and b"File exists" not in r.stderr and b"No such" not in r.stderr:
                    errors.append("ln " + r.stderr.decode().strip())
            else:
                for s in ["", "s", "l"]:
                    if os.path.lexists(n + s): os.unlink(n + s)
                if os.path.isdir(n + "d"): os.rmdir(n + "d")
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EEXIST, errno.ESTALE): known.append("%d %s" % (op, errno.errorcode[e.errno]))
            else: errors.append("%d %s" % (op, e.strerror))
ts = [threading.Thread(target=maker, args=(t,)) for t in range(4)]
for t in ts: t.start()
for k in range(2):
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True, timeout=120)
    rb.append((r.returncode, r.stderr.decode()[-300:], r.stdout.decode()[-500:] if r.returncode else ""))
done = True
for t in ts: t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", {k: known.count(k) for k in sorted(set(known))}, "rollback", rb)
"#,
            &[&p],
        );
        eprintln!("round {round}: {out}");
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}: {out}"));
        assert!(out.starts_with("OK "), "{out}\n{}", whole(&changes));
        rollback_alone_agrees(&ws, &p, &format!("round {round}"));
        ws.unmount();
    }
}

/// A forced rollback rewrites, makes again and removes files in a folder that a process
/// renames away and back (`d` to `e` to `d`) over and over, or renames over another folder,
/// while another process saves files in it by rename. The rollback may fail for paths whose
/// folder was away (counted); the chain must hold.
fn rollback_racing_folder_moves(how: &str) {
    for round in 0..4 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        fs::create_dir_all(dir.join("d/sub")).unwrap();
        for i in 0..80 {
            fs::write(dir.join(format!("d/f{i}")), format!("at the point {i}\n")).unwrap();
        }
        fs::write(dir.join("d/sub/x"), "x\n").unwrap();
        let p = point(&ws);
        for i in 0..80 {
            let f = dir.join(format!("d/f{i}"));
            match i % 4 {
                0 => fs::remove_file(&f).unwrap(),
                1 => fs::write(&f, "changed\n").unwrap(),
                2 => fs::write(dir.join(format!("d/new{i}")), "new\n").unwrap(),
                _ => {}
            }
        }
        fs::remove_dir_all(dir.join("d/sub")).unwrap();
        rw_ok(&ws, &["sync"]);
        let out = run(
            &ws,
            r#"
import errno, os, subprocess, sys, threading, time
HOW = sys.argv[3]
done = False
errors, known, rb = [], [], []
def mover():
    k = 0
    # Bounded: past 10,000 renames of `d` every path below it is "history too deep to
    # follow" (see `a_folder_renamed_away_and_back_5001_times_can_still_be_rolled_back`), and
    # with 3,000 a rollback plans for minutes (`a_rollback_after_1000_renames_of_its_folder_*`).
    while not done and k < 20:
        k += 1
        time.sleep(0.02)
        try:
            if HOW == "away":
                os.rename("d", "e"); os.rename("e", "d")
            else:
                os.makedirs("o", exist_ok=True)
                os.rename("d", "o")
                os.rename("o", "d")
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ESTALE): known.append("mv " + errno.errorcode[e.errno])
            else: errors.append("mv " + e.strerror)
def saver():
    k = 0
    while not done:
        k += 1
        try:
            with open("d/s.tmp", "w") as h: h.write("save %d\n" % k)
            os.rename("d/s.tmp", "d/f%d" % (k % 80))
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ESTALE):
                known.append("save " + errno.errorcode[e.errno])
                time.sleep(0.001)
            else: errors.append("save " + e.strerror)
ts = [threading.Thread(target=f) for f in [mover, saver]]
for t in ts: t.start()
for k in range(3):
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True, timeout=120)
    rb.append((r.returncode, r.stderr.decode()[-300:], " ".join(l for l in r.stdout.decode().splitlines() if l.startswith("failed"))[:400]))
done = True
for t in ts: t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", {k: known.count(k) for k in sorted(set(known))}, "rollback", rb)
"#,
            &[&p, how],
        );
        eprintln!("round {round}: {out}");
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}: {out}"));
        assert!(out.starts_with("OK "), "{out}\n{}", whole(&changes));
        if tree(&dir).contains_key("d") {
            rollback_alone_agrees(&ws, &p, &format!("round {round}"));
        }
        ws.unmount();
    }
}

/// FAILED once in CI (2026-11-28, 1eadba3; 4 runs here pass): `change 272 ("create"
/// "d/s.tmp") breaks the chain of d/s.tmp (its own before): it was Some(("file",
/// Some("fca77118…"), Some("644"))), the change says None`, with the rollback failing on
/// paths under `d` the renames had taken away (`failed d/f2: No such file or directory`): a
/// save's temporary file created again where the history still had the last one. The same
/// showed in its sibling under load; traced: the rename of an earlier temporary file
/// (`o/s.tmp` to `o/f64`, recorded) was retracted later as the first step of a rename-away
/// save, once the folder had been renamed back and forth and a new `o/s.tmp` was made (see
/// `a_rename_away_across_folder_renames_is_not_taken_for_a_save`). Passes since a folder's
/// rename forgets the renames away below it (6 runs, two at a time; the sibling 8).
#[test]
fn a_rollback_racing_its_folder_renamed_away_and_back_keeps_the_chain() {
    rollback_racing_folder_moves("away");
}

#[test]
fn a_rollback_racing_its_folder_renamed_over_another_keeps_the_chain() {
    rollback_racing_folder_moves("over");
}

/// A folder renamed away and back 5,001 times (10,002 renames, as a tool that moves a build
/// folder aside and back on every run would, over a few weeks), after a point where a file
/// below it had other content: `rollback --to` the point must restore it, and `cat --at` show
/// it.
///
/// FAILS, every run: `cat --at` answers `at the point`, but the rollback exits 1 with
/// `rewind: history too deep to follow` and `d/f` still holds `after`. `View::locate`
/// (src/history/view.rs) follows a path forward through folder renames one change at a time,
/// at most 10,000, then gives `Error::TooDeep`. Found by the folder-move race below, whose
/// mover did that many renames in a minute.
#[test]
#[ignore = "fails: rollback gives 'history too deep to follow' once a folder above was renamed 10,000 times"]
fn a_folder_renamed_away_and_back_5001_times_can_still_be_rolled_back() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/f"), "at the point\n").unwrap();
    let p = point(&ws);
    fs::write(dir.join("d/f"), "after\n").unwrap();
    crate::common::python(
        &dir,
        "import os\nfor k in range(5001):\n    os.rename('d', 'e'); os.rename('e', 'd')\n",
    );
    rw_ok(&ws, &["sync"]);
    let cat = rw(&ws, &["cat", "d/f", "--at", &p]);
    let done = rw(&ws, &["rollback", "--to", &p, "--force"]);
    let now = fs::read_to_string(dir.join("d/f")).unwrap();
    assert!(
        cat.status.success() && done.status.success() && now == "at the point\n",
        "cat --at: {} {}{}\nrollback: {} {}{}\nd/f holds {now:?}",
        cat.status,
        stdout(&cat),
        stderr(&cat),
        done.status,
        stdout(&done),
        stderr(&done)
    );
    ws.unmount();
}

/// A folder of 100 files renamed away and back 500 times (1,000 renames) after a point: a
/// rollback to the point, with nothing else going on, must not take minutes.
///
/// FAILS: nextest kills it at 180 s, in the rollback (the daemon had used 182 s of CPU).
/// Found when `a_rollback_racing_its_folder_*` (its mover unbounded: about 3,000 renames)
/// timed out at 180 s: not a deadlock; gdb showed the daemon's `ctl` thread busy in
/// `rollback::plan` -> `View::below_at` -> `View::list_at` -> `Store::paths_with_prefix`, and
/// in `View::locate` -> `View::deciding_change` -> `History::first_change_after`, after 400 s
/// of CPU. `View::locate` (src/history/view.rs) follows each path through every folder rename,
/// one store query each, and `rollback::plan` (src/history/rollback.rs) takes, for each
/// folder rename selected, `below_at` of both names at three moments, each `list_at` following
/// the folder's later renames (up to 1,000) with a `paths_with_prefix` and a `state_at` of
/// every child: renames x renames x files store queries.
#[test]
#[ignore = "fails: a rollback over 1,000 renames of a folder of 100 files plans for over 3 minutes"]
fn a_rollback_after_1000_renames_of_its_folder_takes_seconds_not_minutes() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    for i in 0..100 {
        fs::write(dir.join(format!("d/f{i}")), format!("at the point {i}\n")).unwrap();
    }
    let p = point(&ws);
    for i in 0..100 {
        fs::write(dir.join(format!("d/f{i}")), "after\n").unwrap();
    }
    crate::common::python(
        &dir,
        "import os\nfor k in range(500):\n    os.rename('d', 'e'); os.rename('e', 'd')\n",
    );
    rw_ok(&ws, &["sync"]);
    let started = std::time::Instant::now();
    let done = rw(&ws, &["rollback", "--to", &p, "--force"]);
    let took = started.elapsed();
    eprintln!("the rollback took {took:?}: {}", done.status);
    assert!(done.status.success(), "{}", stderr(&done));
    assert_eq!(
        fs::read_to_string(dir.join("d/f7")).unwrap(),
        "at the point 7\n"
    );
    assert!(took < Duration::from_secs(20), "the rollback took {took:?}");
    ws.unmount();
}

/// At the point `f{i}` and `g{i}` are one file (hard links); after it, `g{i}` is unlinked and
/// `f{i}` saved over. A forced rollback makes the pairs again (content, then the second name
/// linked) while threads save over `f{i}` by rename, chmod it, append to it through a fd
/// opened by `f{i}`, and `ln`/unlink `h{i}` to it. The chain must hold.
///
/// FAILS about 1 run in 3 (seen after the helper's runs, round 3 of 4): `h6: history says
/// absent, found ("file", Some("31d77db5…"), Some("644"))`, the last change of `h6` its
/// `519 "delete"`: a hard link made during the race was never recorded, as in
/// `rollbacks_of_a_rollbacks_session_racing_everything_keep_the_chain` (not understood yet).
///
/// Since a rollback's new file is begun before it has a name (`Restorer::make_file`), 1 run in
/// 8 here, another way (10 runs before it: 1 failure, a process's create of `f12` recorded
/// between the rollback's delete and its restore of it, the race that change closes):
/// `change 691 ("modify" "f27") breaks the chain of g27 (a hard link of it): it was None`,
/// the log `690 "restore" "g27" before file:59c8970a after -`, `691 "modify" "f27" links
/// ["g27"]`, `692 "restore" "g27" before - after file:591cd6ec`. A guess, not checked: the
/// modify's id was set aside at its RELEASE (a closed edit, recorded by the writer thread
/// later), and its other names were read when it was recorded, after the rollback had linked
/// `g27` again underneath but before that link was recorded.
#[test]
#[ignore = "fails 1 run in 8: a modify's other names are read after a rollback's relink recorded later"]
fn a_rollback_making_hard_links_again_racing_saves_chmods_appends_and_links_keeps_the_chain() {
    for round in 0..4 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        for i in 0..30 {
            fs::write(dir.join(format!("f{i}")), format!("pair {i}\n")).unwrap();
            fs::hard_link(dir.join(format!("f{i}")), dir.join(format!("g{i}"))).unwrap();
        }
        let p = point(&ws);
        for i in 0..30 {
            fs::remove_file(dir.join(format!("g{i}"))).unwrap();
            fs::write(dir.join("t"), format!("saved {i}\n")).unwrap();
            fs::rename(dir.join("t"), dir.join(format!("f{i}"))).unwrap();
        }
        rw_ok(&ws, &["sync"]);
        let out = run(
            &ws,
            r#"
import errno, os, subprocess, sys, threading
done = False
errors, known, rb = [], [], []
def racer(t):
    k = 0
    fds = []
    while not done:
        k += 1
        i = (k * 7 + t * 13) % 30
        n = "f%d" % i
        op = (k + t) % 5
        try:
            if op == 0:
                tmp = "t%d" % t
                with open(tmp, "w") as h: h.write("race %d %d\n" % (t, k))
                os.rename(tmp, n)
            elif op == 1: os.chmod(n, [0o600, 0o644][k % 2])
            elif op == 2:
                fds.append(os.open(n, os.O_WRONLY | os.O_APPEND))
                if len(fds) > 2:
                    fd = fds.pop(0); os.write(fd, b"append %d\n" % k); os.close(fd)
            elif op == 3:
                h = "h%d" % i
                if os.path.lexists(h): os.unlink(h)
                else:
                    r = subprocess.run(["ln", n, h], capture_output=True)
                    if r.returncode and b"No such" not in r.stderr and b"File exists" not in r.stderr and b"Stale" not in r.stderr:
                        errors.append("ln " + r.stderr.decode().strip())
            else:
                for fd in fds: os.write(fd, b"w%d\n" % k)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EEXIST, errno.ESTALE): known.append("%d %s" % (op, errno.errorcode[e.errno]))
            else: errors.append("%d %s" % (op, e.strerror))
    for fd in fds: os.close(fd)
ts = [threading.Thread(target=racer, args=(t,)) for t in range(3)]
for t in ts: t.start()
for k in range(2):
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True, timeout=120)
    rb.append((r.returncode, r.stderr.decode()[-300:], " ".join(l for l in r.stdout.decode().splitlines() if l.startswith("failed"))[:400]))
done = True
for t in ts: t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", {k: known.count(k) for k in sorted(set(known))}, "rollback", rb)
"#,
            &[&p],
        );
        eprintln!("round {round}: {out}");
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}: {out}"));
        assert!(out.starts_with("OK "), "{out}\n{}", whole(&changes));
        rollback_alone_agrees(&ws, &p, &format!("round {round}"));
        ws.unmount();
    }
}

/// The daemon is SIGKILLed while a forced rollback rewrites files that processes append to
/// through open fds, save over by rename and chmod; then mounted again: the chain holds.
#[test]
fn sigkill_in_the_middle_of_a_rollback_racing_writers_then_a_remount_keeps_the_chain() {
    for (round, wait) in [30u64, 80, 150, 300].into_iter().enumerate() {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        let big = "x".repeat(1 << 20);
        for i in 0..40 {
            fs::write(dir.join(format!("f{i}")), format!("{i}{big}")).unwrap();
        }
        let p = point(&ws);
        for i in 0..40 {
            fs::write(dir.join(format!("f{i}")), format!("after {i}\n")).unwrap();
        }
        rw_ok(&ws, &["sync"]);
        let pid = daemon_pid(&ws);
        let mut racers = python_command(
            &dir,
            r#"
import os, sys, time
fds = [os.open("f%d" % i, os.O_WRONLY | os.O_APPEND) for i in range(0, 40, 4)]
k = 0
t0 = time.time()
while time.time() - t0 < 3:
    k += 1
    try:
        for fd in fds: os.write(fd, b"a%d\n" % k)
        n = "f%d" % (1 + 4 * (k % 10))
        with open("t", "w") as h: h.write("saved %d\n" % k)
        os.rename("t", n)
        os.chmod("f%d" % (2 + 4 * (k % 10)), [0o600, 0o644][k % 2])
    except OSError:
        pass
"#,
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let child = ws
            .command(&["rollback", "--to", &p, "--force"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait));
        ws.kill_daemon(pid);
        let said = child.wait_with_output().unwrap();
        let _ = racers.wait();
        eprintln!(
            "round {round}: SIGKILL after {wait} ms; the rollback: {} {}",
            said.status,
            stderr(&said).lines().next().unwrap_or("")
        );
        ws.mount();
        rw_ok(&ws, &["sync"]);
        assert_chain_ends_in_the_present(&ws, &format!("round {round}: SIGKILL after {wait} ms"));
        rollback_alone_agrees(
            &ws,
            &p,
            &format!("round {round}: after SIGKILL and remount"),
        );
        ws.unmount();
    }
}

/// A forced rollback rewrites and makes again files in `d` while a process swaps `d` for a
/// symlink to a folder outside the workspace and back (`d` renamed to `e`, `d` made a
/// symlink, then removed and `e` renamed back). Nothing may be written outside, and the chain
/// must hold (the rollback may fail for paths while `d` is away).
#[test]
fn a_rollback_racing_its_folder_swapped_for_a_symlink_to_outside_writes_nothing_outside() {
    for round in 0..4 {
        let mut ws = Workspace::new();
        ws.mount();
        let dir = ws.path();
        let outside = ws.plain();
        fs::create_dir_all(&outside).unwrap();
        fs::create_dir(dir.join("d")).unwrap();
        for i in 0..60 {
            fs::write(dir.join(format!("d/f{i}")), format!("at the point {i}\n")).unwrap();
        }
        let p = point(&ws);
        for i in 0..60 {
            if i % 2 == 0 {
                fs::remove_file(dir.join(format!("d/f{i}"))).unwrap();
            } else {
                fs::write(dir.join(format!("d/f{i}")), "after\n").unwrap();
            }
        }
        rw_ok(&ws, &["sync"]);
        let out = run(
            &ws,
            r#"
import errno, os, subprocess, sys, threading, time
done = False
known, errors, rb = [], [], []
def swapper():
    k = 0
    while not done and k < 30:
        k += 1
        try:
            os.rename("d", "e")
            os.symlink(sys.argv[3], "d")
            time.sleep(0.005)
            os.unlink("d")
            os.rename("e", "d")
        except OSError as e:
            errors.append("swap " + e.strerror)
        time.sleep(0.01)
t = threading.Thread(target=swapper); t.start()
for k in range(2):
    r = subprocess.run([sys.argv[1], "rollback", "--to", sys.argv[2], "--force"], capture_output=True, timeout=120)
    rb.append((r.returncode, r.stderr.decode()[-300:], " ".join(l for l in r.stdout.decode().splitlines() if l.startswith("failed"))[:300]))
done = True
t.join()
print("ERR %s" % sorted(set(errors)) if errors else "OK", "rollback", rb)
"#,
            &[&p, outside.to_str().unwrap()],
        );
        eprintln!("round {round}: {out}");
        let written: Vec<String> = fs::read_dir(&outside)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            written.is_empty(),
            "round {round}: written outside the workspace: {written:?}\n{out}"
        );
        rw_ok(&ws, &["sync"]);
        let changes = assert_chain_ends_in_the_present(&ws, &format!("round {round}: {out}"));
        assert!(out.starts_with("OK "), "{out}\n{}", whole(&changes));
        ws.unmount();
    }
}

/// A process unlinks `f` (changed since the point); its delete is recorded in the background
/// after the unlink (`REWIND_TEST_SLOW_UNLINK` widens that gap), and a forced rollback to the
/// point makes `f` again meanwhile. The delete must come before the rollback's restore in the
/// history, or the chain of `f` breaks.
///
/// `f` is kept open meanwhile, so that the rollback's new file cannot get its inode number
/// (ext4 hands a freed one out again at once): with the same number its create waited for
/// the unlink's hold and came after it by luck. It failed 1 CI run in a few so, every run
/// with the file open, until a rollback's making of a name waited for the removals under way
/// (`Core::removing`).
#[test]
fn a_rollback_making_a_file_a_process_just_unlinked_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_UNLINK", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    fs::write(dir.join("p"), "p\n").unwrap();
    let p = point(&ws);
    fs::write(dir.join("f"), "after\n").unwrap();
    rw_ok(&ws, &["sync"]);
    let kept = fs::File::open(dir.join("f")).unwrap();
    std::thread::scope(|s| {
        let unlink = s.spawn(|| fs::remove_file(dir.join("f")).unwrap());
        std::thread::sleep(Duration::from_millis(400));
        rw_ok(&ws, &["rollback", "--to", &p, "--force"]);
        unlink.join().unwrap();
    });
    drop(kept);
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a rollback making a file a process just unlinked");
    assert_eq!(fs::read_to_string(dir.join("f")).unwrap(), "at the point\n");
    ws.unmount();
}

/// One process renames `d/s` to `d/f` (perhaps the first step of a rename-away save that
/// keeps a backup), then renames the folder away and back with another file made and renamed
/// at `s` in between, then writes a new `d/s`. That is no save: the history must have the
/// rename and both files as they came. Remembered by their paths, the rename-away and the new
/// `d/s` were taken for one once the folder had its old name back (the checks that nothing
/// else happened at `s` looked under `d/`, not under the name the folder had meanwhile): the
/// rename was taken back and `d/s` was still there in the history while `o/s` was made (seen
/// in `a_rollback_racing_its_folder_renamed_over_another_keeps_the_chain`, 1 run in 5 under
/// load: `change 317 ("create" "d/s.tmp") breaks the chain`, its rename `273` retracted by a
/// later `modify "o/s.tmp"`).
#[test]
fn a_rename_away_across_folder_renames_is_not_taken_for_a_save() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    let out = run(
        &ws,
        r#"
import os, time
with open("d/s", "w") as h: h.write("one\n")
time.sleep(1.0)
os.rename("d/s", "d/f")
os.rename("d", "o")
with open("o/s", "w") as h: h.write("two\n")
time.sleep(1.0)
os.rename("o/s", "o/g")
os.rename("o", "d")
with open("d/s", "w") as h: h.write("three\n")
print("OK")
"#,
        &[],
    );
    assert!(out.starts_with("OK"), "{out}");
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "a rename away across folder renames");
    assert_eq!(fs::read_to_string(dir.join("d/f")).unwrap(), "one\n");
    assert_eq!(fs::read_to_string(dir.join("d/g")).unwrap(), "two\n");
    assert_eq!(fs::read_to_string(dir.join("d/s")).unwrap(), "three\n");
    let log = whole(&changes);
    assert!(log.contains(r#""rename" "d/f" <- "d/s""#), "{log}");
    ws.unmount();
}

/// A forced rollback makes `f` again (gone since the point), and a process opens it for
/// appending as soon as it is there underneath (`REWIND_TEST_SLOW_RESTORE_MADE` widens the
/// time between the new file getting its name and its create being begun), then appends once
/// the rollback is done. The process's change must come after the rollback's create in the
/// history. `f` went by a rename and the new name's unlink, so that the kernel has no entry
/// for it (an unlink through the mount leaves a negative one, which it would trust until the
/// rollback tells it otherwise); the test watches the directory underneath through the
/// daemon's own fd on it.
///
/// Made at its name (`O_EXCL`) with its create begun after, the file was found by the
/// process's open first: `modify "f" before <empty>` was recorded where the history had no
/// `f`, and the rollback's create never was (`a_rollback_making_files_again_racing_everything`).
#[test]
fn a_process_opening_a_file_a_rollback_is_making_comes_after_its_create() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RESTORE_MADE", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    fs::write(dir.join("p"), "p\n").unwrap();
    let p = point(&ws);
    fs::rename(dir.join("f"), dir.join("g")).unwrap();
    fs::remove_file(dir.join("g")).unwrap();
    rw_ok(&ws, &["sync"]);
    let underneath = underneath(&ws);
    std::thread::scope(|s| {
        let rollback = s.spawn(|| rw_ok(&ws, &["rollback", "--to", &p, "--force"]));
        assert!(
            wait_for(20, || underneath.join("f").exists()),
            "the rollback never made f"
        );
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(dir.join("f"))
            .unwrap();
        rollback.join().unwrap();
        std::io::Write::write_all(&mut f, b"appended\n").unwrap();
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a process opening a file a rollback is making");
    assert_eq!(
        fs::read_to_string(dir.join("f")).unwrap(),
        "at the point\nappended\n"
    );
    ws.unmount();
}

/// FAILED in CI (round 2 of 4 of the test above): `change 377 ("restore" "d/f117") breaks the
/// chain of d/f117 (its own before): it was None, the change says Some(("file", Some(af1349b9
/// …: empty)))`. A process's `O_CREAT` open had made the file underneath and not yet begun its
/// episode when the rollback looked: it found a file there, rewrote it in place and recorded
/// its restore from the empty file, and the process's create was recorded after it. Made
/// deterministic here: the create waits between making the file and beginning its episode
/// (`REWIND_TEST_SLOW_MADE`) while the rollback runs.
#[test]
fn a_rollback_rewriting_a_file_a_process_is_creating_comes_after_its_create() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_MADE", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    let p = point(&ws);
    fs::remove_file(dir.join("f")).unwrap();
    rw_ok(&ws, &["sync"]);
    let underneath = underneath(&ws);
    std::thread::scope(|s| {
        let create = s.spawn(|| {
            fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.join("f"))
                .map(drop)
        });
        assert!(
            wait_for(20, || underneath.join("f").exists()),
            "the process never made f"
        );
        rw_ok(&ws, &["rollback", "--to", &p, "--force"]);
        create.join().unwrap().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    let changes =
        assert_chain_ends_in_the_present(&ws, "a rollback rewriting a file being created");
    let kinds: Vec<&str> = changes
        .iter()
        .filter(|c| c["path"] == "f")
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["create", "delete", "create", "restore"],
        "{}",
        whole(&changes)
    );
    assert_eq!(fs::read_to_string(dir.join("f")).unwrap(), "at the point\n");
    ws.unmount();
}

/// The workspace's directory underneath the mount, through the daemon's fd on it (a path
/// that reaches it without going through the mount).
fn underneath(ws: &Workspace) -> std::path::PathBuf {
    let fds = format!("/proc/{}/fd", daemon_pid(ws));
    fs::read_dir(&fds)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|fd| fs::read_link(fd).is_ok_and(|to| to == ws.path()) && fd.is_dir())
        .unwrap_or_else(|| panic!("no fd of the daemon on {}", ws.path().display()))
}

/// The same for a folder: a process removes `d` (its mode changed since the point), its
/// delete recorded after the rmdir (`REWIND_TEST_SLOW_RMDIR`), and a forced rollback makes
/// `d` again meanwhile.
#[test]
fn a_rollback_making_a_folder_a_process_just_removed_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RMDIR", "1500")]);
    let dir = ws.path();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("p"), "p\n").unwrap();
    let p = point(&ws);
    fs::set_permissions(
        dir.join("d"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    rw_ok(&ws, &["sync"]);
    std::thread::scope(|s| {
        let rmdir = s.spawn(|| fs::remove_dir(dir.join("d")).unwrap());
        std::thread::sleep(Duration::from_millis(400));
        rw_ok(&ws, &["rollback", "--to", &p, "--force"]);
        rmdir.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a rollback making a folder a process just removed");
    assert!(dir.join("d").is_dir());
    ws.unmount();
}

/// The same with two rollbacks: one removes `f` to make it again (a file with other names is
/// detached: the point had `f` alone), and the other makes `f` in between.
///
/// FAILS, every run: `change 4 ("restore" "f") breaks the chain of f (its own before): it was
/// Some(("file", Some("6a789ba0…"), Some("644"))), the change says None`; the log:
/// `4 "restore" "f" pid 26407 before - after file:52826aae:644`, then
/// `5 "restore" "f" pid 26404 before file:6a789ba0:644 after -`; the first rollback then
/// says `failed   f: f: File exists (os error 17)`. The first rollback's removal
/// (`Core::unlink_at`, src/fs/namespace.rs) unlinks, then queues its delete (`rec.defer`,
/// after `SLOW_UNLINK`); the second's `Restorer::write_file` (src/fs/restore.rs) finds the name
/// free and makes the file (`O_EXCL`, `begin_create`), recorded first: its new-file branch
/// neither takes `Core::making` nor waits for a delete of the path not yet queued. A process's
/// unlink in the same place (test above) holds.
///
/// Passes since rollbacks run one at a time (`command::rollback::ONE_AT_A_TIME`).
#[test]
fn a_rollback_making_a_file_another_rollback_just_removed_keeps_the_chain() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_UNLINK", "1500")]);
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    let p = point(&ws);
    fs::write(dir.join("f"), "after\n").unwrap();
    fs::hard_link(dir.join("f"), dir.join("g")).unwrap();
    rw_ok(&ws, &["sync"]);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| rw(&ws, &["rollback", "--file", "f", "--to", &p, "--force"]));
        std::thread::sleep(Duration::from_millis(400));
        let b = s.spawn(|| rw(&ws, &["rollback", "--file", "f", "--to", &p, "--force"]));
        (a.join().unwrap(), b.join().unwrap())
    });
    eprintln!("{} {}\n{} {}", a.status, stdout(&a), b.status, stdout(&b));
    rw_ok(&ws, &["sync"]);
    assert_chain_ends_in_the_present(&ws, "a rollback making a file another just removed");
    ws.unmount();
}

/// What a process does to `big` while a rollback is half way through writing it.
#[derive(Clone, Copy, Debug)]
enum Meanwhile {
    /// Opens it with `O_APPEND` and writes a line.
    Append,
    /// Opens it with `O_TRUNC` and writes a line.
    Truncate,
}

/// A forced rollback writes `big` (4 MiB, several writes; `REWIND_TEST_SLOW_RESTORE_WRITE`
/// pauses it after the first), in place when `made` is false (the file was emptied
/// since the point), else as a new file (it was removed since). A process opens it for
/// writing once the rollback is half way (its size underneath, seen through the daemon's own
/// fd on the folder, between 0 and the whole) and writes a line. Its write must come after
/// the rollback's, as after any program's rewrite of a file: appended to the whole content,
/// or, truncating, the only content; and the history must say so (a restore, then the
/// process's modify).
///
/// Lost before (a hostile pass, 3 runs of 3 with a 22 MiB file and no pause): the rollback
/// wrote on at its own offset, over the line appended at the end of what it had written so
/// far; a truncate left the rest of the content after a hole. A write landing after the
/// content but before the rollback's edit ended joined it and was recorded as the restore.
fn a_process_writing_a_file_a_rollback_is_writing(made: bool, meanwhile: Meanwhile) {
    let mut ws = Workspace::new();
    ws.mount_with_env(
        &[] as &[&str],
        &[("REWIND_TEST_SLOW_RESTORE_WRITE", "1500")],
    );
    let dir = ws.path();
    let content = noise(4 << 20, 7);
    fs::write(dir.join("big"), &content).unwrap();
    fs::write(dir.join("p"), "p\n").unwrap();
    let p = point(&ws);
    if made {
        // By a rename, so that the kernel keeps no negative entry for `big` (see above).
        fs::rename(dir.join("big"), dir.join("gone")).unwrap();
        fs::remove_file(dir.join("gone")).unwrap();
    } else {
        // Emptied: its size is then between 0 and the whole only while the rollback writes.
        fs::write(dir.join("big"), "").unwrap();
    }
    rw_ok(&ws, &["sync"]);
    let underneath = underneath(&ws);
    let len = content.len() as u64;
    std::thread::scope(|s| {
        let rollback = s.spawn(|| rw_ok(&ws, &["rollback", "--to", &p, "--force"]));
        assert!(
            wait_for(20, || fs::metadata(underneath.join("big"))
                .is_ok_and(|m| m.len() > 0 && m.len() < len)),
            "the rollback never was half way through big"
        );
        let mut open = fs::OpenOptions::new();
        match meanwhile {
            Meanwhile::Append => open.append(true),
            Meanwhile::Truncate => open.write(true).truncate(true),
        };
        let mut f = open.open(dir.join("big")).unwrap();
        std::io::Write::write_all(&mut f, b"the process's line\n").unwrap();
        drop(f);
        rollback.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    let what = format!("{meanwhile:?} while a rollback writes big (made: {made})");
    let changes = assert_chain_ends_in_the_present(&ws, &what);
    let want = match meanwhile {
        Meanwhile::Append => [content.as_slice(), b"the process's line\n"].concat(),
        Meanwhile::Truncate => b"the process's line\n".to_vec(),
    };
    let got = fs::read(dir.join("big")).unwrap();
    assert!(
        got == want,
        "{what}: big holds {} bytes, not the {} wanted (its last 40: {:?})",
        got.len(),
        want.len(),
        String::from_utf8_lossy(&got[got.len().saturating_sub(40)..])
    );
    let of_big: Vec<&str> = changes
        .iter()
        .filter(|c| c["path"] == "big")
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert!(
        of_big.ends_with(&["restore", "modify"]),
        "{what}: the changes of big: {of_big:?}\n{}",
        whole(&changes)
    );
    ws.unmount();
}

#[test]
fn a_process_appending_to_a_file_a_rollback_is_rewriting_comes_after_it() {
    a_process_writing_a_file_a_rollback_is_writing(false, Meanwhile::Append);
}

#[test]
fn a_process_appending_to_a_file_a_rollback_is_making_comes_after_it() {
    a_process_writing_a_file_a_rollback_is_writing(true, Meanwhile::Append);
}

#[test]
fn a_process_truncating_a_file_a_rollback_is_rewriting_comes_after_it() {
    a_process_writing_a_file_a_rollback_is_writing(false, Meanwhile::Truncate);
}

#[test]
fn a_process_truncating_a_file_a_rollback_is_making_comes_after_it() {
    a_process_writing_a_file_a_rollback_is_writing(true, Meanwhile::Truncate);
}

/// The workspace's own disk fills up while a rollback writes a file back (a tmpfs of 24 MiB
/// mounted on the workspace's folder before rewind mounts over it): the rollback fails with
/// the file named and why (the disk is full, how much of the content it holds), not with the
/// stored content's hash; the history says what the file holds (a restore of the part
/// written), and nothing is lost: the content it had before the rollback is still in the
/// history, and rolling that back puts it there again.
#[test]
fn a_rollback_filling_the_workspaces_disk_names_the_file_and_loses_nothing() {
    let ws = Workspace::new();
    let dir = ws.path();
    let mut on = OnTmpfs {
        _tmpfs: Tmpfs::on(&dir, 24),
        ws,
    };
    let ws = &mut on.ws;
    ws.mount();
    let content = noise(16 << 20, 3);
    fs::write(dir.join("big"), &content).unwrap();
    let p = point(ws);
    fs::write(dir.join("big"), "small now\n").unwrap();
    fs::write(dir.join("filler"), noise(12 << 20, 4)).unwrap();
    let before = point(ws);
    let out = rw(ws, &["rollback", "--file", "big", "--to", &p, "--force"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "the rollback did not fail:\n{said}");
    assert!(
        said.contains("big")
            && said.contains("No space left on device")
            && said.contains("holds the first")
            && !said.contains("<blob"),
        "the rollback's failure does not name big and why:\n{said}"
    );
    rw_ok(ws, &["sync"]);
    assert_chain_ends_in_the_present(ws, "a rollback filling the workspace's disk");
    let kept = rw(ws, &["cat", "--at", &before, "big"]);
    assert!(kept.status.success(), "{}", stderr(&kept));
    assert_eq!(stdout(&kept), "small now\n");
    fs::remove_file(dir.join("filler")).unwrap();
    rw_ok(
        ws,
        &["rollback", "--file", "big", "--to", &before, "--force"],
    );
    assert_eq!(fs::read_to_string(dir.join("big")).unwrap(), "small now\n");
    rw_ok(ws, &["rollback", "--file", "big", "--to", &p, "--force"]);
    assert!(
        fs::read(dir.join("big")).unwrap() == content,
        "big is not its point's content"
    );
    ws.unmount();
}

/// A tmpfs mounted on a folder for a test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

/// A workspace whose folder is a tmpfs. Dropped, rewind's mount goes first, then the tmpfs,
/// then the workspace's folders.
struct OnTmpfs {
    _tmpfs: Tmpfs,
    ws: Workspace,
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        let path = self.ws.path();
        if crate::common::is_mounted(&path) {
            let _ = self
                .ws
                .command(&[
                    std::ffi::OsStr::new("unmount"),
                    "--force".as_ref(),
                    path.as_os_str(),
                ])
                .output();
        }
    }
}

impl Tmpfs {
    fn on(dir: &Path, mib: u32) -> Tmpfs {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot mount a tmpfs on {} (needs root)", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// What a process does to a file a rollback has just made, while the rollback goes on.
#[derive(Clone, Copy, Debug)]
enum Then {
    Rename,
    Chmod,
    Unlink,
}

/// A forced rollback makes `a` and then `big` again (both gone since the point); while it
/// writes `big` (paused after its first write), a process renames, chmods or removes `a`
/// through the mount. The history must have the rollback's restore of `a` and then the
/// process's change, each by whom it was: the rollback made `a`, not `c`, and with the
/// point's mode, not the process's.
fn a_process_changing_a_file_a_rollback_made(then: Then) {
    let mut ws = Workspace::new();
    ws.mount_with_env(
        &[] as &[&str],
        &[("REWIND_TEST_SLOW_RESTORE_WRITE", "1500")],
    );
    let dir = ws.path();
    let content = noise(4 << 20, 9);
    fs::write(dir.join("a"), "a at the point\n").unwrap();
    fs::write(dir.join("big"), &content).unwrap();
    let p = point(&ws);
    for name in ["a", "big"] {
        fs::rename(dir.join(name), dir.join("gone")).unwrap();
        fs::remove_file(dir.join("gone")).unwrap();
    }
    rw_ok(&ws, &["sync"]);
    let underneath = underneath(&ws);
    let len = content.len() as u64;
    std::thread::scope(|s| {
        let rollback = s.spawn(|| rw_ok(&ws, &["rollback", "--to", &p, "--force"]));
        assert!(
            wait_for(20, || fs::metadata(underneath.join("big"))
                .is_ok_and(|m| m.len() > 0 && m.len() < len)),
            "the rollback never was half way through big"
        );
        match then {
            Then::Rename => fs::rename(dir.join("a"), dir.join("c")).unwrap(),
            Then::Chmod => fs::set_permissions(
                dir.join("a"),
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .unwrap(),
            Then::Unlink => fs::remove_file(dir.join("a")).unwrap(),
        }
        rollback.join().unwrap();
    });
    rw_ok(&ws, &["sync"]);
    let what = format!("{then:?} of a file a rollback made");
    let changes = assert_chain_ends_in_the_present(&ws, &what);
    let after: Vec<String> = changes
        .iter()
        .filter(|c| c["id"].as_u64().unwrap() > p.parse::<u64>().unwrap())
        .filter(|c| c["path"] != "big" && c["path"] != "gone")
        .map(|c| {
            let from = c["from"]
                .as_str()
                .map(|f| format!(" <- {f}"))
                .unwrap_or_default();
            let mode = c["after"]["mode"]
                .as_str()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            format!(
                "{} {}{from}{mode}",
                c["kind"].as_str().unwrap(),
                c["path"].as_str().unwrap()
            )
        })
        .collect();
    let want = match then {
        Then::Rename => ["restore a 644", "rename c <- a 644"],
        Then::Chmod => ["restore a 644", "chmod a 600"],
        Then::Unlink => ["restore a 644", "delete a"],
    };
    assert!(
        after.iter().map(String::as_str).eq(want.iter().copied()),
        "{what}: after the point {after:?}, not {want:?}\n{}",
        whole(&changes)
    );
    ws.unmount();
}

#[test]
fn a_process_renaming_a_file_a_rollback_made_comes_after_its_restore() {
    a_process_changing_a_file_a_rollback_made(Then::Rename);
}

#[test]
fn a_process_chmodding_a_file_a_rollback_made_comes_after_its_restore() {
    a_process_changing_a_file_a_rollback_made(Then::Chmod);
}

#[test]
fn a_process_removing_a_file_a_rollback_made_comes_after_its_restore() {
    a_process_changing_a_file_a_rollback_made(Then::Unlink);
}

/// A process creates `f` (`O_CREAT|O_APPEND`, no `O_EXCL`) just as a forced rollback makes it
/// again: the create found no file (`REWIND_TEST_SLOW_CREATE_LOOKED` holds it there), and the
/// rollback linked its new file at the name before the create opened it. The create then
/// opened the rollback's file, gave it to its caller, and began a create of a file whose
/// create the rollback had begun. Now one of the two comes first: the process's file, which
/// the rollback then cannot make (`File exists`), or the rollback's, which the process then
/// appends to; the history says which.
#[test]
fn a_process_creating_a_file_a_rollback_is_making_comes_before_or_after_it() {
    let mut ws = Workspace::new();
    ws.mount_with_env(
        &[] as &[&str],
        &[("REWIND_TEST_SLOW_CREATE_LOOKED", "1500")],
    );
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    fs::write(dir.join("p"), "p\n").unwrap();
    let p = point(&ws);
    fs::rename(dir.join("f"), dir.join("gone")).unwrap();
    fs::remove_file(dir.join("gone")).unwrap();
    rw_ok(&ws, &["sync"]);
    let rolled = std::thread::scope(|s| {
        let process = s.spawn(|| {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(dir.join("f"))
                .unwrap();
            std::io::Write::write_all(&mut f, b"the process's line\n").unwrap();
        });
        std::thread::sleep(Duration::from_millis(400));
        let rolled = rw(&ws, &["rollback", "--to", &p, "--force"]);
        process.join().unwrap();
        rolled
    });
    rw_ok(&ws, &["sync"]);
    let changes = assert_chain_ends_in_the_present(&ws, "a create racing a rollback's making");
    let of_f: Vec<String> = changes
        .iter()
        .filter(|c| c["path"] == "f" && c["id"].as_u64().unwrap() > p.parse::<u64>().unwrap())
        .map(|c| format!("{} {}", c["kind"].as_str().unwrap(), c["pid"]))
        .collect();
    let content = fs::read_to_string(dir.join("f")).unwrap();
    let said = stdout(&rolled);
    let first_the_process = content == "the process's line\n"
        && !rolled.status.success()
        && said.contains("File exists");
    let first_the_rollback =
        content == "at the point\nthe process's line\n" && rolled.status.success();
    assert!(
        first_the_process || first_the_rollback,
        "f holds {content:?}; the rollback ({}) said:\n{said}{}\n{}",
        rolled.status,
        stderr(&rolled),
        whole(&changes)
    );
    let kinds: Vec<&str> = of_f.iter().map(|k| k.split(' ').next().unwrap()).collect();
    let want: &[&str] = if first_the_process {
        &["create"]
    } else {
        &["restore", "modify"]
    };
    assert_eq!(
        kinds,
        want,
        "the changes of f: {of_f:?}\n{}",
        whole(&changes)
    );
    ws.unmount();
}

/// A process wrote `f` and exited, leaving its handle to a child that keeps it (`sleep`); a
/// forced rollback then rewrites `f`, taking over that edit (its writer is gone). The edit
/// outlives the rollback, held by the child. A write to `f` after the rollback must not wait
/// for it: taken for the rollback's own (a rollback writing the file), every open for writing
/// waited 120 s for the child to let go (`Recorder::restoring`).
#[test]
fn a_write_after_a_rollback_took_over_an_abandoned_edit_does_not_wait() {
    let mut ws = Workspace::new();
    ws.mount();
    let dir = ws.path();
    fs::write(dir.join("f"), "at the point\n").unwrap();
    let p = point(&ws);
    let out = python_command(
        &dir,
        r#"
import os, subprocess
fd = os.open("f", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"after\n")
child = subprocess.Popen(["sleep", "60"], pass_fds=[fd], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid)
"#,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let child: i32 = stdout(&out).trim().parse().unwrap();
    // A checkpoint records what the open edit wrote so far: the rollback has it to undo.
    rw_ok(&ws, &["checkpoint", "written"]);
    rw_ok(&ws, &["rollback", "--to", &p, "--force"]);
    let started = std::time::Instant::now();
    let appended = crate::full_disk::run_within(
        {
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", "echo later >> f"]).current_dir(&dir);
            sh
        },
        60,
        "an append after the rollback",
    );
    let took = started.elapsed();
    // SAFETY: kill(2) of the child this test made.
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert!(appended.status.success(), "{}", stderr(&appended));
    assert!(
        took < Duration::from_secs(20),
        "an append after the rollback took {took:?}: it waited for the edit the rollback took over"
    );
    rw_ok(&ws, &["sync"]);
    assert_eq!(
        fs::read_to_string(dir.join("f")).unwrap(),
        "at the point\nlater\n"
    );
    ws.unmount();
}
