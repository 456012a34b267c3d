//! One file larger than what the store's disk has free (issue 25): storing it stops at the
//! reserve, recording is refused with the file named, gc and mount still work on that disk,
//! and recording resumes by itself once there is room.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{Disk, SmallFs, Workspace, ok, ok_bytes, stderr, wait_for};

/// Run `cmd` to the end, failing the test (and killing it) after `secs`: nothing may hang.
pub(crate) fn run_within(mut cmd: Command, secs: u64, what: &str) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what} did not finish within {secs} s");
        }
    }
}

/// `rewind ARGS` from inside the workspace (mounted or not), killed after a minute.
pub(crate) fn rw(ws: &Workspace, args: &[&str]) -> Output {
    let mut cmd = ws.command(args);
    cmd.current_dir(ws.path());
    run_within(cmd, 60, &format!("rewind {}", args.join(" ")))
}

/// The reserve rewind keeps on a disk of `size` bytes (a tenth, 2 to 128 MiB: see SPEC,
/// Durability).
pub(crate) fn reserve_of(size: u64) -> u64 {
    (size / 10).clamp(2 << 20, 128 << 20)
}

/// A file of `bytes` incompressible bytes at `path`.
pub(crate) fn write_noise(path: &Path, bytes: usize) {
    let mut f = fs::File::create(path).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for b in block.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            b.copy_from_slice(&seed.to_le_bytes()[..b.len()]);
        }
        let n = left.min(block.len());
        f.write_all(&block[..n]).unwrap();
        left -= n;
    }
    f.sync_all().unwrap();
}

fn mount_on(ws: &mut Workspace, store: &Path) -> Output {
    let mut cmd = ws.command(&[OsStr::new("mount"), ws.path().as_os_str()]);
    cmd.arg("--store").arg(store);
    let out = run_within(cmd, 60, "mount");
    if out.status.success() {
        ws.mark_mounted();
    }
    out
}

/// A 64 MiB ext4 for the store (the tests need root to make one).
pub(crate) fn small_ext4() -> SmallFs {
    SmallFs::of(Disk::Ext4, 64).expect("cannot mount a small ext4 for the store (needs root)")
}

/// A workspace mounted with its store on `small`, holding one recorded file `a`; and the
/// store's path.
pub(crate) fn mounted_with_one_file(small: &SmallFs) -> (Workspace, PathBuf) {
    let mut ws = Workspace::new();
    let store = small.path().join("store");
    ok(mount_on(&mut ws, &store));
    fs::write(ws.path().join("a"), "a\n").unwrap();
    ok(rw(&ws, &["sync"]));
    (ws, store)
}

/// Wait until storing `big` has stopped: status says recording is refused and names it.
/// Meanwhile, and after, the disk keeps its reserve.
pub(crate) fn wait_until_refused(ws: &Workspace, small: &SmallFs, reserve: u64) -> String {
    let mut lowest = u64::MAX;
    let mut status = String::new();
    let refused = wait_for(60, || {
        lowest = lowest.min(small.available());
        status = ok(rw(ws, &["status"]));
        status.contains("NOT RECORDING") && status.contains("content of big")
    });
    assert!(
        refused,
        "status does not say big cannot be stored:\n{status}"
    );
    // What was started goes on a moment (a flush): the reserve holds it.
    for _ in 0..20 {
        lowest = lowest.min(small.available());
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("lowest free on the store's disk: {lowest} bytes (reserve {reserve})");
    assert!(
        lowest >= reserve,
        "the store ate the reserve: {lowest} bytes free, the reserve is {reserve}"
    );
    status
}

/// A file that does not fit beside a filler on the store's disk: storing it stops before the
/// reserve, every other change is refused with status naming the file, no view of the past
/// shows it, gc still runs, and once the filler goes recording resumes by itself and the file
/// is in the history.
#[test]
fn a_file_too_large_for_the_store_disk_stops_at_the_reserve_and_recording_resumes() {
    let small = small_ext4();
    let reserve = reserve_of(small.size());
    let (mut ws, _) = mounted_with_one_file(&small);
    let root = ws.path();
    let last = ok(rw(&ws, &["log"])).lines().count().to_string();

    // A filler beside the store leaves less room than the file needs.
    let filler = small.path().join("filler");
    write_noise(&filler, 30 << 20);
    let big = (small.available() - reserve / 2) as usize;
    write_noise(&root.join("big"), big);
    let status = wait_until_refused(&ws, &small, reserve);
    assert!(status.contains("too full"), "{status}");

    // Refused, and not recorded.
    let refused = fs::write(root.join("small"), "x\n");
    assert_eq!(
        refused.as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::ENOSPC),
        "a new file while big cannot be stored: {refused:?}"
    );
    // Deleting it is refused too (and leaves it held back, not half forgotten).
    let rm = fs::remove_file(root.join("big"));
    assert_eq!(
        rm.as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::ENOSPC),
        "rm big while it cannot be stored: {rm:?}"
    );
    // No point of the past answers with big (its create is not recorded): neither a view of
    // it nor `cat --at` run in the daemon, which reads the live tree as the views do.
    assert!(!root.join(format!(".rewind/at/{last}/big")).exists());
    let at = rw(&ws, &["cat", "big", "--at", &last]);
    assert!(
        !at.status.success() && at.stdout.is_empty(),
        "cat big --at {last}: {} bytes",
        at.stdout.len()
    );
    assert!(
        stderr(&at).contains("did not exist"),
        "cat big --at {last}: {}",
        stderr(&at)
    );
    assert!(ok(rw(&ws, &["log", "big"])).trim().is_empty());

    // gc runs on the full disk (and may give back what was stored of big).
    let gc = rw(&ws, &["gc", "--max-size", "100M"]);
    assert!(gc.status.success(), "gc on a full store: {}", stderr(&gc));

    // Room again: big is recorded, and recording goes on, without a remount.
    fs::remove_file(&filler).unwrap();
    assert!(
        wait_for(60, || ok(rw(&ws, &["status"]))
            .lines()
            .any(|l| l.contains("recording") && !l.contains("NOT RECORDING"))
            && !ok(rw(&ws, &["log", "big"])).trim().is_empty()),
        "recording did not resume with big recorded: {}",
        ok(rw(&ws, &["status"]))
    );
    // (RocksDB may still be compacting what it took of big a moment longer.)
    assert!(
        wait_for(20, || fs::write(root.join("small"), "x\n").is_ok()),
        "a new file is refused after recording resumed"
    );
    ok(rw(&ws, &["sync"]));
    assert!(!ok(rw(&ws, &["log", "small"])).trim().is_empty());
    assert!(
        ok_bytes(&rw(&ws, &["cat", "big"])) == fs::read(root.join("big")).unwrap(),
        "big's recorded content is not what it holds"
    );
    ws.unmount();
}

/// A file larger than the whole store disk: storing it stops before the reserve; gc runs
/// mounted and unmounted; with the file moved out of the workspace while unmounted, the
/// store mounts again and records.
#[test]
fn a_file_larger_than_the_store_disk_leaves_gc_and_mount_working() {
    let small = small_ext4();
    let reserve = reserve_of(small.size());
    let (mut ws, store) = mounted_with_one_file(&small);
    let root = ws.path();
    write_noise(&root.join("big"), 60_000_000);
    wait_until_refused(&ws, &small, reserve);

    let gc = rw(&ws, &["gc", "--max-size", "1M"]);
    assert!(gc.status.success(), "mounted gc: {}", stderr(&gc));
    ws.unmount();
    // The file goes elsewhere while the workspace is not mounted.
    let elsewhere = tempfile::tempdir().unwrap();
    fs::rename(root.join("big"), elsewhere.path().join("big")).unwrap();
    let gc = rw(&ws, &["gc", "--max-size", "1M"]);
    assert!(gc.status.success(), "unmounted gc: {}", stderr(&gc));
    assert!(
        small.available() > 40 << 20,
        "gc gave back nothing: {} bytes free",
        small.available()
    );
    let mounted = mount_on(&mut ws, &store);
    assert!(mounted.status.success(), "mount: {}", stderr(&mounted));
    let status = ok(rw(&ws, &["status"]));
    assert!(!status.contains("NOT RECORDING"), "{status}");
    fs::write(root.join("small"), "x\n").unwrap();
    ok(rw(&ws, &["sync"]));
    assert!(!ok(rw(&ws, &["log", "small"])).trim().is_empty());
    ws.unmount();
}
