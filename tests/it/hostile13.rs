//! The thirteenth hostile pass (round 11): small edits ended while the store's disk is full
//! (their content goes in their change's batch), gc beside small edits and new files, a write
//! handle passed to another process over a unix socket, versions around zstd's 16 KiB level
//! bound with bases in other folders, and files named as the default-ignored folders.

use std::fs;
use std::io::Write;
use std::time::Duration;

use crate::common::{Workspace, noise, ok, python, sh, wait_for};
use crate::edges::{Contents, assert_true_chain, contents};
use crate::full_store_hostile::mounted_on_small_ext4;
use crate::scale::{recount, status_counts};
use crate::trust::{changes, every_file_is_in_the_history, rw_within};

/// Fill the store's disk to its last byte (root may use ext4's reserved blocks too).
fn fill_to_the_last_byte(small: &crate::common::SmallFs) -> std::path::PathBuf {
    use std::os::fd::AsRawFd;
    let filler = small.path().join("filler");
    let mut f = fs::File::create(&filler).unwrap();
    let most = small.available().saturating_sub(4 << 20);
    // SAFETY: fallocate on a file we own, with a length from the disk's own figure.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, most as libc::off_t) };
    assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
    let chunk = vec![0x5au8; 16 << 10];
    while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
    let small_chunk = [0x5au8; 512];
    while f
        .write_all(&small_chunk)
        .and_then(|()| f.sync_all())
        .is_ok()
    {}
    filler
}

/// Every change `rewind log` lists names content the mount's `.rewind/versions/` serves, equal
/// to its hash.
pub(crate) fn every_listed_version_reads_back(ws: &Workspace) -> usize {
    let root = ws.path();
    let mut read = 0;
    let mut wrong = Vec::new();
    for c in changes(ws) {
        let Some(hash) = c["after"]["hash"].as_str() else {
            continue;
        };
        if c["after"]["type"] != "file" {
            continue;
        }
        let path = c["path"].as_str().unwrap();
        let id = c["id"].as_u64().unwrap();
        match fs::read(root.join(format!(".rewind/versions/{path}/{id}"))) {
            Ok(data) if rewind::store::Hash::of(&data).to_string() == hash => read += 1,
            Ok(data) => wrong.push(format!(
                "{path}@{id}: {} bytes of other content",
                data.len()
            )),
            Err(e) => wrong.push(format!("{path}@{id}: {e}")),
        }
    }
    assert!(wrong.is_empty(), "versions not readable: {wrong:#?}");
    read
}

/// Forty small edits, begun while there was room, end after the store's disk filled to the last
/// byte; more edits and new files follow while it is full. Whatever the history lists then names
/// stored content, `status` counts what a recount finds, and once the disk has room again every
/// file is in the history with its content.
#[test]
fn small_edits_ended_on_a_full_store_disk_are_recorded_with_their_content_later() {
    let (small, mut ws) = mounted_on_small_ext4(&[]);
    let root = ws.path();
    for i in 0..40 {
        fs::write(
            root.join(format!("f{i}.txt")),
            format!("line of file {i}\n").repeat(40 + i),
        )
        .unwrap();
    }
    ok(rw_within(&ws, &["sync"]));
    let mut held: Vec<fs::File> = (0..40)
        .map(|i| {
            fs::OpenOptions::new()
                .append(true)
                .open(root.join(format!("f{i}.txt")))
                .unwrap()
        })
        .collect();
    for (i, f) in held.iter_mut().enumerate() {
        f.write_all(format!("edited {i} before the disk filled\n").as_bytes())
            .unwrap();
    }
    let filler = fill_to_the_last_byte(&small);
    eprintln!("free after filling: {} bytes", small.available());
    for (i, mut f) in held.drain(..).enumerate() {
        // Each a little different and small: stored in its change's batch.
        let _ = f.write_all(
            format!("and {i} after it filled\n")
                .repeat(i + 1)
                .as_bytes(),
        );
        drop(f);
        std::thread::sleep(Duration::from_millis(20));
    }
    // More while it is full: edits (an open for writing may be refused) and new files.
    let mut refused = 0;
    let mut done = 0;
    for i in 0..40 {
        let edit = fs::OpenOptions::new()
            .append(true)
            .open(root.join(format!("f{i}.txt")))
            .and_then(|mut f| f.write_all(format!("full {i}\n").as_bytes()));
        let new = fs::write(
            root.join(format!("n{i}.txt")),
            format!("new {i}\n").repeat(i + 3),
        );
        for r in [edit, new] {
            match r {
                Ok(()) => done += 1,
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                    refused += 1;
                }
            }
        }
    }
    eprintln!("while full: {done} done, {refused} refused with ENOSPC");
    let status = ok(rw_within(&ws, &["status"]));
    eprintln!("{status}");
    // While full: what is listed reads back, and the counts are a recount's.
    let read = every_listed_version_reads_back(&ws);
    eprintln!("while full: {read} listed versions read back");
    let store = small.path().join("store");
    assert_eq!(
        status_counts(&ws).0,
        changes(&ws).len() as u64,
        "while full"
    );
    assert_eq!(status_counts(&ws), recount(&store), "while full");

    fs::remove_file(&filler).unwrap();
    assert!(
        wait_for(60, || ok(rw_within(&ws, &["status"]))
            .lines()
            .any(|l| l == "recording: recording")),
        "recording did not resume: {}",
        ok(rw_within(&ws, &["status"]))
    );
    ok(rw_within(&ws, &["sync"]));
    every_file_is_in_the_history(&ws);
    let read = every_listed_version_reads_back(&ws);
    eprintln!("after: {read} listed versions read back");
    assert_eq!(status_counts(&ws), recount(&store), "after room came back");
    ws.unmount();
}

/// A write handle passed over a unix socket (SCM_RIGHTS) to another process, which writes and
/// closes it after the sender closed its own: one change per episode, with what both wrote, in
/// order.
#[test]
fn a_handle_passed_over_a_unix_socket_ends_its_episode_where_the_receiver_closes_it() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("f"), "start\n").unwrap();
    ws.mount();
    let root = ws.path();
    let rounds = 30;
    python(
        &root,
        &format!(
            r#"
import os, socket, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    a.close()
    for r in range({rounds}):
        msg, fds, flags, addr = socket.recv_fds(b, 16, 4)
        fd = fds[0]
        time.sleep(0.02)
        os.write(fd, f"receiver {{r}}\n".encode())
        os.close(fd)
        b.send(b"k")
    os._exit(0)
b.close()
for r in range({rounds}):
    fd = os.open("f", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, f"sender {{r}}\n".encode())
    socket.send_fds(a, [b"x"], [fd])
    os.close(fd)
    assert a.recv(1) == b"k"
os.waitpid(pid, 0)
"#
        ),
    );
    let last = fs::read(root.join("f")).unwrap();
    assert_eq!(
        last,
        format!("sender {r}\nreceiver {r}\n", r = rounds - 1).into_bytes()
    );
    let all = contents(&mut ws);
    assert_one_change_a_round(&all, rounds, last);
}

/// `gc --max-size` and `gc --repack` one after the other in a loop while small files are edited
/// and new ones made beside them: each gc succeeds, and afterwards every change the history
/// lists has its content, before and after.
#[test]
fn gc_max_size_and_repack_in_a_loop_beside_small_edits_keep_every_listed_content() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let stop = stop.clone();
        let ws_cmd = |args: &[&str]| {
            let mut c = ws.command(args);
            c.current_dir(ws.path());
            c
        };
        let mut cmds = [
            ws_cmd(&["gc", "--max-size", "300K"]),
            ws_cmd(&["gc", "--repack"]),
            ws_cmd(&["gc", "--max-size", "150K"]),
            ws_cmd(&["gc", "--repack"]),
        ];
        std::thread::spawn(move || {
            let mut runs = 0;
            let mut outs = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let cmd = &mut cmds[runs % 4];
                let out = cmd.output().unwrap();
                assert!(
                    out.status.success(),
                    "gc run {runs}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                outs.push(String::from_utf8_lossy(&out.stdout).into_owned());
                runs += 1;
            }
            (runs, outs)
        })
    };
    python(
        &root,
        r#"
import os, random
random.seed(7)
os.makedirs("a/b", exist_ok=True)
words = [f"word{i}" for i in range(300)]
for r in range(500):
    i = random.randrange(40)
    d = ["", "a/", "a/b/"][i % 3]
    path = f"{d}f{i}.rs"
    if r % 5 == 0:
        path = f"{d}new{r}.rs"
    lines = [" ".join(random.choice(words) for _ in range(8)) for _ in range(random.randrange(5, 200))]
    with open(path, "w") as f:
        f.write("\n".join(lines) + f"\n// round {r}\n")
    if r % 17 == 0 and os.path.exists(f"f{(i + 1) % 40}.rs"):
        os.remove(f"f{(i + 1) % 40}.rs")
"#,
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (runs, outs) = gc.join().unwrap();
    for (i, o) in outs.iter().enumerate() {
        eprintln!("gc run {i}: {o}");
    }
    assert!(runs >= 2, "gc ran {runs} times");
    ok(rw_within(&ws, &["sync"]));
    // Quiet now: a repack only shrinks what is stored.
    let before = status_counts(&ws);
    let out = ok(rw_within(&ws, &["gc", "--repack"]));
    let after = status_counts(&ws);
    eprintln!("quiet repack: {before:?} -> {after:?}: {out}");
    assert!(after.2 <= before.2, "a quiet repack grew the store: {out}");
    every_file_is_in_the_history(&ws);
    let read = every_listed_version_reads_back(&ws);
    eprintln!("{read} listed versions read back");
    assert_eq!(status_counts(&ws), recount(&ws.store()));
    // Before and after of every change, from the store itself.
    let all = contents(&mut ws);
    for c in &all {
        if c.0 == "modify" {
            assert!(c.2.is_some() && c.3.is_some(), "{} {}", c.0, c.1);
        }
    }
}

/// Content `len` bytes long: lines that share most words with `seed`'s other versions.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        let line = format!(
            "fn item_{i}(x: u32) -> u32 {{ x.wrapping_mul({}) ^ {} }}\n",
            i * 7 + 3,
            (i * 13) ^ seed.wrapping_mul(u64::from(i.is_multiple_of(11)))
        );
        out.extend_from_slice(line.as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Versions whose size, alone and with their base's, lies on each side of 16 KiB (zstd's level
/// 8 below, 9 above): a first version in one folder, then a new file of the same name in
/// another (whose base is the first), then edits of each that cross the bound. Every version
/// reads back exact through `cat --at`, `.rewind/versions/`, and again after `gc --repack`.
#[test]
fn versions_around_the_16k_level_bound_read_back_exact_before_and_after_a_repack() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::create_dir_all(root.join("one")).unwrap();
    fs::create_dir_all(root.join("two")).unwrap();
    fs::create_dir_all(root.join("three")).unwrap();
    let k = 16 << 10;
    let sizes = [
        100,
        k / 2 - 1,
        k / 2,
        k / 2 + 1,
        k - 1,
        k,
        k + 1,
        k - 200,
        2 * k,
        k + 1,
        k - 1,
        5000,
        11_000,
        k - 5000,
        128 << 10,
        (128 << 10) + 1,
        k,
    ];
    let mut written: Vec<(String, Vec<u8>)> = Vec::new();
    for (n, &len) in sizes.iter().enumerate() {
        for (d, seed) in [("one", 1u64), ("two", 2), ("three", 3)] {
            let mut data = text(len, seed + n as u64);
            if d == "three" && n % 2 == 0 {
                // Some incompressible bytes in the middle.
                let at = len / 2;
                let end = (at + 300).min(len);
                data[at..end].copy_from_slice(&noise(end - at, n as u64));
            }
            let name = if n % 3 == 0 { "lib.rs" } else { "main.rs" };
            let path = format!("{d}/{name}");
            fs::write(root.join(&path), &data).unwrap();
            written.push((path, data));
        }
        ok(rw_within(&ws, &["sync"]));
    }
    let check = |ws: &Workspace, when: &str| {
        let all = changes(ws);
        let mut checked = 0;
        for c in &all {
            let Some(hash) = c["after"]["hash"].as_str() else {
                continue;
            };
            let path = c["path"].as_str().unwrap();
            let id = c["id"].as_u64().unwrap();
            let want = written
                .iter()
                .find(|(p, d)| p == path && rewind::store::Hash::of(d).to_string() == hash)
                .unwrap_or_else(|| panic!("{when}: {path}@{id}: content never written"));
            let at = ws.rewind(&[
                "-C",
                ws.path().to_str().unwrap(),
                "cat",
                path,
                "--at",
                &id.to_string(),
            ]);
            assert!(at.status.success(), "{when}: cat {path} --at {id}");
            assert!(at.stdout == want.1, "{when}: cat {path} --at {id} differs");
            let v = fs::read(ws.path().join(format!(".rewind/versions/{path}/{id}"))).unwrap();
            assert!(v == want.1, "{when}: versions/{path}/{id} differs");
            checked += 1;
        }
        eprintln!("{when}: {checked} versions exact");
        assert!(checked >= sizes.len() * 2, "{checked}");
    };
    check(&ws, "as captured");
    let before = status_counts(&ws);
    let out = ok(rw_within(&ws, &["gc", "--repack"]));
    eprintln!("{out}");
    let after = status_counts(&ws);
    assert!(
        after.2 <= before.2,
        "repack grew the store: {before:?} -> {after:?}"
    );
    check(&ws, "after repack");
    ws.unmount();
    ws.mount();
    check(&ws, "after a remount");
    ws.unmount();
}

/// A FILE named `.git`, `node_modules` or `__pycache__` (a git worktree's `.git` file) is
/// recorded, in the workspace and below; what is below such a FOLDER is not, unless
/// `.rewindignore` says `!name/`; `status` counts what passed through.
#[test]
fn files_named_as_the_default_folders_are_recorded_and_what_is_below_those_folders_is_not() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    fs::write(root.join(".rewindignore"), "!__pycache__/\n").unwrap();
    sh(
        &root,
        "echo 'gitdir: /elsewhere' > .git && mkdir -p sub deep/er && \
         echo x > sub/node_modules && echo y > deep/er/__pycache__ && echo z > deep/.git && \
         mkdir -p w/node_modules/pkg w/.git p/__pycache__ && echo 1 > w/node_modules/pkg/i.js && \
         echo 2 > w/.git/HEAD && echo 3 > p/__pycache__/m.pyc && \
         echo more >> .git && echo more >> sub/node_modules",
    );
    ok(rw_within(&ws, &["sync"]));
    sh(&root, "rm deep/.git");
    ok(rw_within(&ws, &["sync"]));
    let all = changes(&ws);
    let paths: Vec<&str> = all.iter().map(|c| c["path"].as_str().unwrap()).collect();
    for p in [
        ".git",
        "sub/node_modules",
        "deep/er/__pycache__",
        "deep/.git",
        "p/__pycache__/m.pyc",
    ] {
        assert!(paths.contains(&p), "{p} not recorded: {paths:?}");
    }
    for p in ["w/node_modules/pkg/i.js", "w/.git/HEAD"] {
        assert!(!paths.contains(&p), "{p} recorded: {paths:?}");
    }
    let modifies = all
        .iter()
        .filter(|c| {
            c["kind"] == "modify" && (c["path"] == ".git" || c["path"] == "sub/node_modules")
        })
        .count();
    assert_eq!(modifies, 2, "{all:#?}");
    assert!(
        all.iter()
            .any(|c| c["kind"] == "delete" && c["path"] == "deep/.git"),
        "{all:#?}"
    );
    let status = ok(rw_within(&ws, &["status"]));
    eprintln!("{status}");
    // w/node_modules, w/node_modules/pkg, its i.js, w/.git and its HEAD.
    assert!(
        status.contains("unrecorded: 5 paths passed through (.git/node_modules/__pycache__ 5)"),
        "{status}"
    );
    every_file_is_in_the_history_but(&ws, &["w/"]);
    ws.unmount();
}

/// [`every_file_is_in_the_history`] for a tree whose ignored parts are moved aside first.
fn every_file_is_in_the_history_but(ws: &Workspace, ignored: &[&str]) {
    let root = ws.path();
    for p in ignored {
        fs::remove_dir_all(root.join(p)).unwrap();
    }
    ok(rw_within(ws, &["sync"]));
    every_file_is_in_the_history(ws);
}

/// A handle passed over a named unix socket by a sender that exits right after sending (and
/// closing its own): an unrelated, long-lived receiver writes and closes it later. One change
/// per round, with what both wrote, in order; and `rewind log` run while the receiver still
/// holds the handle shows the sender's part at most, never a wrong content.
#[test]
fn a_handle_passed_by_a_sender_that_exits_is_recorded_when_the_receiver_closes_it() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("f"), "start\n").unwrap();
    ws.mount();
    let root = ws.path();
    let sock = tempfile::tempdir().unwrap();
    let sock = sock.path().join("s");
    let rounds = 12;
    let receiver = crate::common::python_command(
        &root,
        &format!(
            r#"
import os, socket, time
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("{sock}")
srv.listen(1)
for r in range({rounds}):
    c, _ = srv.accept()
    msg, fds, flags, addr = socket.recv_fds(c, 16, 4)
    time.sleep(3.0 if r == 3 else 0.1)
    os.write(fds[0], f"receiver {{r}}\n".encode())
    os.close(fds[0])
    c.send(b"k")
    c.close()
"#,
            sock = sock.display()
        ),
    )
    .spawn()
    .unwrap();
    assert!(
        wait_for(10, || sock.exists()),
        "the receiver does not listen"
    );
    for r in 0..rounds {
        python(
            &root,
            &format!(
                r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("{sock}")
fd = os.open("f", os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"sender {r}\n")
socket.send_fds(s, [b"x"], [fd])
os.close(fd)
# Exits without waiting: the receiver writes after this process is gone. The ack is read by
# a child that outlives it.
if os.fork() == 0:
    os.closerange(0, 3)
    s.recv(1)
    os._exit(0)
os._exit(0)
"#,
                sock = sock.display()
            ),
        );
        // While the receiver holds the handle, the sender gone: the history of f so far.
        let t = std::time::Instant::now();
        let seen: Vec<String> = changes(&ws)
            .iter()
            .filter(|c| c["path"] == "f")
            .map(|c| c["after"]["hash"].as_str().unwrap_or("-").to_string())
            .collect();
        eprintln!(
            "round {r}: log took {:?}, {} changes of f, last {:?}, file {:?}",
            t.elapsed(),
            seen.len(),
            seen.last(),
            fs::read_to_string(root.join("f"))
        );
        // Not recorded yet, or recorded whole: never the sender's part alone.
        let want = format!("sender {r}\nreceiver {r}\n");
        let whole = rewind::store::Hash::of(want.as_bytes()).to_string();
        assert!(
            seen.len() == r || seen.len() == r + 1 && seen[r] == whole,
            "round {r}: {seen:?}"
        );
        // Wait for this round's end (the receiver's write), then look at the history.
        assert!(
            wait_for(10, || fs::read_to_string(root.join("f"))
                .is_ok_and(|s| s == want)),
            "round {r}: {:?}",
            fs::read_to_string(root.join("f"))
        );
    }
    let mut receiver = receiver;
    assert!(receiver.wait().unwrap().success());
    let last = fs::read(root.join("f")).unwrap();
    let all = contents(&mut ws);
    assert_one_change_a_round(&all, rounds, last);
}

/// Each of the `rounds` rounds left one change of `f`, whose content is that round's sender's
/// and receiver's lines, and the changes of `f` are a true chain from "start" to `last`.
fn assert_one_change_a_round(all: &[Contents], rounds: usize, last: Vec<u8>) {
    let of_f: Vec<_> = all.iter().filter(|c| c.1 == "f").collect();
    for (r, c) in of_f.iter().enumerate() {
        assert_eq!(
            c.3.as_deref(),
            Some(format!("sender {r}\nreceiver {r}\n").as_bytes()),
            "change {r} of f: {of_f:?}"
        );
    }
    assert_eq!(of_f.len(), rounds, "{of_f:?}");
    assert_true_chain(all, "f", b"start\n", last);
}
