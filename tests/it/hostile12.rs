//! Hostile round 12: ignore rules read again (mknod, link, names changed) under concurrency.
//! Many processes make, link, rename and remove rule files and write in their folders at once;
//! the mount must keep answering (a watchdog fails the test instead of hanging).

use std::sync::mpsc;
use std::time::Duration;

use crate::common::{Workspace, sh};

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
