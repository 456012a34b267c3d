//! Races a hostile review tried: rule files made, linked, renamed and removed by many
//! processes at once beside writes (the mount must keep answering: a watchdog fails the test
//! instead of hanging); handles of one file closed at once by threads and by forked children;
//! identical content written by many threads at once; `gc --repack` beside edits.

use std::sync::mpsc;
use std::time::Duration;

use crate::common::{Workspace, sh};
use crate::edges::{Contents, assert_true_chain, contents};

/// Eight shell loops race in four folders: `.gitignore`, `.rewindignore`, `pyvenv.cfg` made by
/// write, hard link, mknod (mkfifo), rename over and away, removed; files written beside them.
/// All must finish within two minutes, and a `stat` through the mount must answer afterwards.
#[test]
fn rule_files_churned_by_many_processes_never_hang_the_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let script = r#"
set +e
for d in a b c d; do mkdir -p $d/sub; done
churn() {
  d=$1
  for i in $(seq 1 60); do
    echo "sub/" > $d/g.$i && ln -f $d/g.$i $d/.gitignore 2>/dev/null
    echo "x$i" >> $d/.gitignore
    mv -f $d/.gitignore $d/gone.$i 2>/dev/null
    echo "*.log" > $d/r.$i && mv -f $d/r.$i .rewindignore 2>/dev/null
    rm -f .rewindignore
    mkfifo $d/sub/pyvenv.cfg 2>/dev/null; rm -f $d/sub/pyvenv.cfg
    ln -f $d/g.$i $d/sub/.gitignore 2>/dev/null; rm -f $d/sub/.gitignore
    echo $i > $d/sub/f.$i; echo $i > $d/f.$i.log
    mv -f $d/sub $d/sub2 2>/dev/null; mv -f $d/sub2 $d/sub 2>/dev/null
    mkdir -p $d/sub
  done
}
writer() {
  d=$1
  for i in $(seq 1 200); do echo $i >> $d/sub/w; echo $i > $d/w.$i; cat $d/.gitignore >/dev/null 2>&1; done
}
for d in a b c d; do churn $d & writer $d & done
wait
"#
    .to_string();
    let (tx, rx) = mpsc::channel();
    let dir = root.clone();
    std::thread::spawn(move || {
        sh(&dir, &script);
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the churn did not finish in 120 s: the mount hangs")
        }
        Err(e) => panic!("the churn script failed: {e}"),
    }
    let (tx, rx) = mpsc::channel();
    let dir = root.clone();
    std::thread::spawn(move || {
        let ok = std::fs::metadata(dir.join("a")).is_ok()
            && std::fs::write(dir.join("after"), "x").is_ok();
        let _ = tx.send(ok);
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)),
        Ok(true),
        "the mount does not answer after the churn"
    );
    ws.unmount();
}

/// 8a862d1: two handles of one file, written through both, closed at the same moment by two
/// threads, forty rounds: the changes of the file form a true chain (each one's before is the
/// last one's after, none unchanged) ending at the last round's content, and the mount answers
/// throughout.
#[test]
fn two_handles_closed_at_once_many_rounds_keep_a_true_chain() {
    use std::io::Write;
    use std::sync::{Arc, Barrier};
    let mut ws = Workspace::new();
    std::fs::write(ws.path().join("f"), "start\n").unwrap();
    ws.mount();
    let f = ws.path().join("f");
    let rounds = 40;
    for r in 0..rounds {
        let mut a = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        let mut b = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        a.set_len(0).unwrap();
        a.write_all(format!("round {r} a\n").as_bytes()).unwrap();
        b.write_all(format!("round {r} b\n").as_bytes()).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let (b1, b2) = (barrier.clone(), barrier);
        let t1 = std::thread::spawn(move || {
            b1.wait();
            drop(a);
        });
        let t2 = std::thread::spawn(move || {
            b2.wait();
            drop(b);
        });
        t1.join().unwrap();
        t2.join().unwrap();
    }
    let last = std::fs::read(&f).unwrap();
    let all = contents(&mut ws);
    assert!(all.iter().any(|c| c.1 == "f"), "no change of f: {all:?}");
    assert_true_chain(&all, "f", b"start\n", last);
}

/// d590aee: eight threads write the same new content to eight files at once, several rounds
/// (small, 1 MiB, just over 1 MiB, and truncated to empty): every change's content is in the
/// store (read back after unmounting) and each file's last change is its content.
#[test]
fn identical_content_written_by_many_threads_at_once_is_all_stored() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let sizes = [100usize, 4096, 1 << 20, (1 << 20) + 1, 0, 2000];
    for (r, size) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..*size).map(|i| (i as u8) ^ (r as u8)).collect();
        let data = std::sync::Arc::new(data);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (data, barrier, root) = (data.clone(), barrier.clone(), root.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    std::fs::write(root.join(format!("f{t}")), &*data).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
    let finals: Vec<Vec<u8>> = (0..8)
        .map(|t| std::fs::read(root.join(format!("f{t}"))).unwrap())
        .collect();
    // Reads every change's content back (a missing blob fails here).
    let all = contents(&mut ws);
    for (t, last) in finals.iter().enumerate() {
        let name = format!("f{t}");
        let of: Vec<&Contents> = all.iter().filter(|c| c.1 == name).collect();
        assert_eq!(
            of.last().and_then(|c| c.3.clone()).as_ref(),
            Some(last),
            "{name}'s last change is not its content ({} changes)",
            of.len()
        );
    }
}

/// d590aee: `rewind gc --repack` run again and again while a file is edited (8 KiB to 64 KiB,
/// each a small edit of the last, so deltas) and a copy made beside it: every change the log
/// still lists has its content in the store afterwards.
#[test]
fn repack_beside_edits_never_removes_content_a_change_needs() {
    let mut ws = Workspace::new();
    ws.mount();
    let root = ws.path();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let (stop, root) = (stop.clone(), root.clone());
        let rewind = crate::common::REWIND;
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = std::process::Command::new(rewind)
                    .args(["-C"])
                    .arg(&root)
                    .args(["gc", "--repack"])
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "gc failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                if runs == 0 {
                    eprintln!("gc said: {}", String::from_utf8_lossy(&out.stdout));
                }
                runs += 1;
            }
            runs
        })
    };
    let mut data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    for r in 0..400u32 {
        if data.len() < 65536 {
            data.extend((0..1400u32).map(|i| ((i * r) % 253) as u8));
        }
        data[(r as usize * 97) % 8000] ^= 0x55;
        std::fs::write(root.join("g"), &data).unwrap();
        std::fs::write(root.join(format!("copy{}", r % 3)), &data).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc.join().unwrap();
    eprintln!("gc ran {runs} times");
    let all = contents(&mut ws);
    let last = all.iter().rev().find(|c| c.1 == "g").unwrap();
    assert_eq!(
        last.3.as_ref(),
        Some(&data),
        "g's last change is not its content"
    );
}

/// 8a862d1: a handle inherited across fork, dup'ed, and closed by parent and child at once,
/// thirty rounds (the child writes after the parent has closed): a true chain ending at the
/// file's content.
#[test]
fn a_handle_shared_by_fork_and_dup_closed_at_once_keeps_a_true_chain() {
    let mut ws = Workspace::new();
    std::fs::write(ws.path().join("f"), "start\n").unwrap();
    ws.mount();
    sh(
        &ws.path(),
        r#"for i in $(seq 1 30); do
  exec 3>f; exec 4>&3
  echo "p$i" >&3
  ( echo "c$i" >&4; exec 3>&- 4>&- ) &
  ( echo "d$i" >&3 ) &
  exec 3>&- 4>&-
  wait
done"#,
    );
    let last = std::fs::read(ws.path().join("f")).unwrap();
    let all = contents(&mut ws);
    assert_true_chain(&all, "f", b"start\n", last);
}
