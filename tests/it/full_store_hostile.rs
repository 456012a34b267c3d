//! A full store disk, met the hostile way: nothing reaches the workspace unrecorded, nothing
//! fails after changing the workspace, and nothing the store refused is dropped instead of
//! recorded later. Each test puts the store on a small ext4, fills that disk to the last byte
//! until the store refuses writes, acts through the mount (real syscalls), then frees the disk
//! and checks that every file in the workspace is in the history with its content.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::{Disk, SmallFs, Workspace, noise, ok, wait_for};
use crate::trust::{every_file_is_in_the_history, run_within, rw_within, sh_within};

/// A workspace mounted with its store on a small ext4 (`env`: the daemon's test knobs).
fn mounted_on_small_ext4(env: &[(&str, &str)]) -> (SmallFs, Workspace) {
    let Some(small) = SmallFs::of(Disk::Ext4, 192) else {
        panic!("cannot mount a small ext4 for the store (needs root)");
    };
    let mut ws = Workspace::new();
    let mut cmd = ws.command(&[OsStr::new("mount"), ws.path().as_os_str()]);
    cmd.arg("--store").arg(small.path().join("store"));
    cmd.envs(env.iter().copied());
    ok(run_within(cmd, 60, "mount"));
    ws.mark_mounted();
    (small, ws)
}

/// Fill the store's disk to the last byte, then end `held` (a file opened for writing while
/// there was room) with more than fits: its record fails, and the store refuses writes from
/// then on. Returns the file that fills the disk.
fn fill_until_refused(small: &SmallFs, ws: &Workspace, mut held: fs::File) -> PathBuf {
    let filler = small.path().join("filler");
    {
        use std::os::fd::AsRawFd;
        let mut f = fs::File::create(&filler).unwrap();
        let most = small.available().saturating_sub(4 << 20);
        // SAFETY: fallocate on a file we own, with a length from the disk's own figure.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, most as libc::off_t) };
        assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
        let chunk = vec![0x5au8; 64 << 10];
        while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
    }
    held.write_all(&noise(3 << 20, 7)).unwrap();
    drop(held);
    assert!(
        wait_for(30, || {
            fs::read_to_string(ws.path().join(".rewind/status"))
                .is_ok_and(|s| s.contains("NOT RECORDING"))
        }),
        "the store did not come to refuse writes"
    );
    filler
}

/// Free the store's disk, wait until the store takes writes again, and record everything.
fn free_and_settle(ws: &Workspace, filler: &Path) {
    fs::remove_file(filler).unwrap();
    assert!(
        wait_for(30, || ok(rw_within(ws, &["status"]))
            .lines()
            .any(|l| l == "recording: recording")),
        "recording did not resume: {}",
        ok(rw_within(ws, &["status"]))
    );
    ok(rw_within(ws, &["sync"]));
}

/// The errno of a failed call, for the test's report.
fn errno(r: std::io::Result<()>) -> Result<(), Option<i32>> {
    r.map_err(|e| e.raw_os_error())
}

/// New files that the store could not record yet (still open, or closed and held back) are
/// renamed and deleted while it refuses writes: a save of one over an existing file, a rename
/// of one still open, a delete of one still open. Each such call is refused, and the file it
/// leaves is recorded once there is room. (A refused save used to forget its temporary file's
/// create; a refused rename or delete left the open file's episode moved or orphaned, so its
/// end recorded nothing.)
#[test]
fn new_files_renamed_or_deleted_while_the_store_refuses_writes_are_recorded_later() {
    let (small, mut ws) = mounted_on_small_ext4(&[]);
    let root = ws.path().to_path_buf();
    sh_within(&root, 60, "echo target > target && echo held > held");
    ok(rw_within(&ws, &["sync"]));
    let held = fs::OpenOptions::new()
        .append(true)
        .open(root.join("held"))
        .unwrap();
    // Made while there was room; still open when the store starts refusing.
    let open_new = |name: &str| {
        let mut f = fs::File::create(root.join(name)).unwrap();
        f.write_all(format!("{name}: written while there was room\n").as_bytes())
            .unwrap();
        f
    };
    let saved = open_new("target.tmp");
    let moved = open_new("moved.new");
    let deleted = open_new("deleted.new");

    let filler = fill_until_refused(&small, &ws, held);
    // An editor's save: the temporary file closed (its create cannot be recorded, so it is
    // held back), then renamed over its target.
    drop(saved);
    let save = errno(fs::rename(root.join("target.tmp"), root.join("target")));
    let rename = errno(fs::rename(root.join("moved.new"), root.join("moved")));
    let delete = errno(fs::remove_file(root.join("deleted.new")));
    drop(moved);
    drop(deleted);
    eprintln!(
        "while the store refused writes: save {save:?}, rename {rename:?}, delete {delete:?}"
    );
    for (what, result) in [("save", save), ("rename", rename), ("delete", delete)] {
        // Whichever way each went, the tree below is checked against the history.
        assert!(
            matches!(result, Ok(()) | Err(Some(libc::ENOSPC))),
            "{what}: {result:?}"
        );
    }

    free_and_settle(&ws, &filler);
    every_file_is_in_the_history(&ws);
    ws.unmount();
}
