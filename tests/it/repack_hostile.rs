//! The repack as a hostile user meets it: through a real mount and the real `rewind` binary,
//! with the store's values compared byte for byte before and after.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rewind::store::ALL_CFS;

use crate::common::{Workspace, damage_blob, ok, rw, rw_ok, sync};
use crate::trust::{run_within, rw_within};

/// A column family's values by key.
type Values = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every value of the store's `blobs` column family, by key, and the `meta` entry a repack
/// leaves (`repacked`), read with RocksDB itself (the store must not be mounted).
fn blob_values(store: &Path) -> (Values, Option<Vec<u8>>) {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(false);
    let db = rocksdb::DB::open_cf_for_read_only(&opts, store, ALL_CFS, false).unwrap();
    let blobs = db.cf_handle("blobs").unwrap();
    let values = db
        .iterator_cf(blobs, rocksdb::IteratorMode::Start)
        .map(|item| {
            let (k, v) = item.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let meta = db.cf_handle("meta").unwrap();
    let repacked = db.get_cf(meta, b"repacked").unwrap();
    (values, repacked)
}

/// Versions of a few files saved through the mount, each a forward delta as recorded.
fn save_versions(ws: &Workspace, versions: usize) -> Vec<(String, Vec<u8>)> {
    save_versions_from(ws, 0..versions)
}

/// [`save_versions`], these versions.
fn save_versions_from(ws: &Workspace, versions: std::ops::Range<usize>) -> Vec<(String, Vec<u8>)> {
    let mut saved = Vec::new();
    for v in versions {
        for (i, name) in ["lib.rs", "main.rs", "util/mod.rs"].iter().enumerate() {
            let text: String = (0..200)
                .map(|k| format!("    let v_{k} = f({k}, {}); // {i}\n", (k * v) % 11))
                .collect();
            let path = ws.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &text).unwrap();
            saved.push((name.to_string(), text.into_bytes()));
        }
        sync(ws);
    }
    saved
}

/// `gc --dry-run`, with `--keep` and with `--max-size`, through the daemon: not one stored
/// value changes (no re-encoding, no depth byte rewritten), no repack is noted done; the
/// same gc without `--dry-run` then does re-encode (so the comparison can see it).
#[test]
fn a_dry_run_gc_never_re_encodes_a_stored_value() {
    let mut ws = Workspace::new();
    ws.mount();
    save_versions(&ws, 8);
    ws.unmount();
    let before = blob_values(&ws.store());
    assert!(before.0.len() >= 20, "{} blobs", before.0.len());
    assert_eq!(before.1, None, "no repack yet");

    ws.mount();
    let out = rw_ok(&ws, &["gc", "--dry-run", "--repack", "--keep", "3650d"]);
    assert!(out.contains("dry run"), "{out}");
    assert!(!out.contains("repacked"), "{out}");
    assert!(out.contains("the run then repacks"), "{out}");
    let out = rw(&ws, &["gc", "--dry-run", "--repack", "--max-size", "1K"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("repacked"),
        "{out:?}"
    );
    ws.unmount();
    let after = blob_values(&ws.store());
    assert_eq!(before.1, after.1, "a dry run notes no repack");
    assert_eq!(before.0.len(), after.0.len());
    for (key, value) in &before.0 {
        assert!(
            after.0.get(key) == Some(value),
            "a dry run rewrote blob {}",
            rewind::store::Hash(key[..].try_into().unwrap()).to_hex()
        );
    }

    ws.mount();
    let out = rw_ok(&ws, &["gc", "--keep", "3650d", "--repack"]);
    assert!(out.contains("repacked"), "{out}");
    ws.unmount();
    let repacked = blob_values(&ws.store());
    assert!(repacked.1.is_some());
    assert!(
        before.0.iter().any(|(k, v)| repacked.0.get(k) != Some(v)),
        "the real gc re-encodes"
    );
}

/// Every change's content, through `rewind cat --at ID PATH` and `.rewind/at/ID/PATH`,
/// against what was written: each must read back exactly as one of the versions saved to that
/// path.
fn assert_every_version_reads_back(ws: &Workspace, saved: &[(String, Vec<u8>)]) {
    let log = rw_ok(ws, &["log", "--json"]);
    let mut read = 0;
    for line in log.lines() {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let path = c["path"].as_str().unwrap();
        // A delete (a rollback's too) leaves no content at its point.
        if !saved.iter().any(|(p, _)| p == path) || c["after"].is_null() {
            continue;
        }
        let mut versions = saved.iter().filter(|(p, _)| p == path).map(|(_, d)| d);
        let id = c["id"].to_string();
        let out = rw(ws, &["cat", path, "--at", &id]);
        assert!(out.status.success(), "change {id} of {path}: {out:?}");
        assert!(
            versions.any(|d| *d == out.stdout),
            "change {id} of {path} reads back as something never written"
        );
        let at = fs::read(ws.path().join(format!(".rewind/at/{id}/{path}"))).unwrap();
        assert!(
            at == out.stdout,
            ".rewind/at/{id}/{path} differs from `cat --at`"
        );
        read += 1;
    }
    assert!(read >= saved.len(), "{read} versions read back");
}

/// A mounted gc whose repack SIGKILLs the daemon after a few re-encodings
/// (`REWIND_TEST_REPACK_KILL`), three times at three moments: the CLI says the daemon
/// stopped, and after each remount every version ever saved reads back exactly; the next gc
/// (no knob) finishes the repack and everything still reads back.
#[test]
fn a_daemon_killed_during_a_mounted_repack_loses_no_version() {
    let mut ws = Workspace::new();
    ws.mount();
    let mut saved = save_versions(&ws, 1);
    let first_point = newest_id(&ws);
    saved.extend(save_versions_from(&ws, 1..10));
    ws.unmount();
    for kill_after in ["1", "9", "15"] {
        ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_REPACK_KILL", kill_after)]);
        // New versions since the last repack, so that each gc has work to cut short.
        saved.extend(save_versions(&ws, 2));
        let out = rw(&ws, &["gc", "--keep", "3650d", "--repack"]);
        assert!(!out.status.success(), "killed at {kill_after}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("stopped"),
            "{out:?}"
        );
        ws.mount();
        assert_every_version_reads_back(&ws, &saved);
        ws.unmount();
    }
    ws.mount();
    let out = rw_ok(&ws, &["gc", "--keep", "3650d", "--repack"]);
    assert!(out.contains("repacked"), "{out}");
    assert_every_version_reads_back(&ws, &saved);
    // Back to the first versions, which the repacks made deltas on newer ones.
    let out = rw(&ws, &["rollback", "--to", &first_point, "--force"]);
    assert!(out.status.success(), "{out:?}");
    for (name, data) in &saved[..3] {
        assert!(
            fs::read(ws.path().join(name)).unwrap() == *data,
            "{name} after the rollback to {first_point}"
        );
    }
}

/// Mount the workspace on the store at `store`.
fn mount_on(ws: &mut Workspace, store: &Path) {
    let mut cmd = ws.command(&[OsStr::new("mount"), ws.path().as_os_str()]);
    cmd.arg("--store").arg(store);
    ok(run_within(cmd, 60, "mount"));
    ws.mark_mounted();
}

/// Versions of `files` files of about 6 KB saved through the mount, each a forward delta as
/// recorded: enough stored content that a repack of it writes a few hundred KB.
fn save_many(
    ws: &Workspace,
    files: usize,
    versions: std::ops::Range<usize>,
) -> Vec<(String, Vec<u8>)> {
    let mut saved = Vec::new();
    for v in versions {
        for i in 0..files {
            let text: String = (0..120)
                .map(|k| {
                    format!(
                        "    let w_{k}_{i} = g({k}, {}, \"{i}\"); // {}\n",
                        k * i,
                        (k + v) / 7
                    )
                })
                .collect();
            let name = format!("src/f{i}.rs");
            let path = ws.path().join(&name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &text).unwrap();
            saved.push((name, text.into_bytes()));
        }
        sync(ws);
    }
    saved
}

/// `gc --repack` on a store whose disk has little more free than the reserve rewind keeps
/// for recording: the repack is not started, gc says why, not one stored value changes, and
/// the disk never goes below the reserve while gc runs (so the mount records on); once there
/// is room, the same gc repacks and every version reads back. (The repack used to write its
/// new values, and the compaction after them, into the reserve: files could not be created
/// through the mount meanwhile, and on a fuller disk it stopped at a failed write, saying
/// nothing.)
#[test]
fn a_repack_on_a_nearly_full_disk_says_so_and_never_takes_the_reserve() {
    let (small, mut ws) = crate::full_store_hostile::mounted_on_small_ext4(&[]);
    let saved = save_many(&ws, 40, 0..6);
    // The reserve as the store counts it (a tenth of the disk): leave 256 KiB above it.
    let reserve = small.size() / 10;
    let filler = small.path().join("filler");
    let len = small.available() - reserve - (256 << 10);
    ok(std::process::Command::new("fallocate")
        .args(["-l", &len.to_string()])
        .arg(&filler)
        .output()
        .unwrap());
    assert!(small.available() > reserve, "{} free", small.available());
    ok(rw_within(&ws, &["sync"]));
    let store = small.path().join("store");
    ws.unmount();
    let before = blob_values(&store);
    mount_on(&mut ws, &store);

    // The disk's free space, watched while gc runs.
    let (out, least) =
        small.least_available_while(|| rw(&ws, &["gc", "--keep", "3650d", "--repack"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        least >= reserve,
        "the disk went to {least} bytes free during gc, below the {reserve}-byte reserve"
    );
    assert!(
        stdout.contains("not repacked: the disk of") && stdout.contains("reserve"),
        "{stdout}"
    );
    let status = ok(rw_within(&ws, &["status"]));
    assert!(
        status.lines().any(|l| l == "recording: recording"),
        "{status}"
    );
    ws.unmount();
    assert!(
        blob_values(&store) == before,
        "a repack not started changed stored values"
    );

    fs::remove_file(&filler).unwrap();
    mount_on(&mut ws, &store);
    let out = rw_ok(&ws, &["gc", "--keep", "3650d", "--repack"]);
    assert!(
        out.contains("repacked") && !out.contains("not repacked"),
        "{out}"
    );
    assert_every_version_reads_back(&ws, &saved);
}

/// A version damaged in the store before a repack (its stored bytes flipped): `gc --repack`
/// says it left contents it cannot read as they were and names their path, and only that
/// path; every version that read back before the gc still reads back exactly after it
/// (the repack built nothing on the damaged chain), mounted again too.
#[test]
fn a_repack_names_the_paths_of_damaged_contents_and_spreads_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    let saved = save_versions(&ws, 6);
    ws.unmount();
    // The third version of lib.rs, on which the later ones are stored as recorded.
    let damaged = rewind::store::Hash::of(
        &saved
            .iter()
            .filter(|(p, _)| p == "lib.rs")
            .nth(2)
            .unwrap()
            .1,
    );
    damage_blob(&ws.store(), &damaged);
    ws.mount();
    let readable = versions_reading_back(&ws, &saved);
    assert!(
        readable.iter().any(|(_, p)| p == "lib.rs") && readable.len() < saved.len(),
        "{readable:?}"
    );
    let out = rw(&ws, &["gc", "--keep", "3650d", "--repack"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let line = stdout
        .lines()
        .find(|l| l.contains("cannot be read"))
        .unwrap_or_else(|| panic!("no word of the damaged contents: {stdout}"));
    assert!(line.contains("for: lib.rs (the first"), "{line}");
    assert!(
        !line.contains("main.rs") && !line.contains("util/mod.rs"),
        "{line}"
    );
    assert_eq!(versions_reading_back(&ws, &saved), readable);
    ws.unmount();
    ws.mount();
    assert_eq!(versions_reading_back(&ws, &saved), readable);
}

/// The changes (id, path) whose content reads back through `rewind cat --at`, each checked
/// to be one of the versions saved to its path.
fn versions_reading_back(ws: &Workspace, saved: &[(String, Vec<u8>)]) -> Vec<(String, String)> {
    let log = rw_ok(ws, &["log", "--json"]);
    let mut read = Vec::new();
    for line in log.lines() {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let path = c["path"].as_str().unwrap();
        let id = c["id"].to_string();
        let out = rw(ws, &["cat", path, "--at", &id]);
        if out.status.success() {
            assert!(
                saved.iter().any(|(p, d)| p == path && *d == out.stdout),
                "change {id} of {path} reads back as something never written"
            );
            read.push((id, path.to_string()));
        }
    }
    read
}

/// The newest change id.
fn newest_id(ws: &Workspace) -> String {
    let log = rw_ok(ws, &["log", "--json"]);
    log.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .max()
        .unwrap()
        .to_string()
}

/// Two `gc --repack` at once through the mount while an agent saves new versions of the
/// files being repacked (and new files), each synced, and another reads an old version with
/// `rewind cat --at` all along: every read works and is exact, both gcs succeed (one after
/// the other), and afterwards every version ever saved reads back through `cat --at` and
/// `.rewind/at/`, a rollback to a point before the gcs restores it, and a last repack goes on
/// with what was recorded meanwhile.
#[test]
fn a_repack_while_agents_write_and_read_loses_nothing() {
    let mut ws = Workspace::new();
    ws.mount();
    let first = save_many(&ws, 30, 0..1);
    let point = newest_id(&ws);
    let mut saved = first.clone();
    saved.extend(save_many(&ws, 30, 1..4));

    let done = AtomicBool::new(false);
    let (gcs, written, reads) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut written = Vec::new();
            let mut k = 0;
            while !done.load(Ordering::SeqCst) {
                let text = format!(
                    "{}\n",
                    "let changed = true; // while repacking\n".repeat(k % 40 + 1)
                );
                let name = if k % 3 == 0 {
                    format!("new/n{k}.txt")
                } else {
                    format!("src/f{}.rs", k % 30)
                };
                let path = ws.path().join(&name);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                let mut old = fs::read(&path).unwrap_or_default();
                old.extend_from_slice(text.as_bytes());
                fs::write(&path, &old).unwrap();
                sync(&ws);
                written.push((name, old));
                k += 1;
            }
            written
        });
        let reader = s.spawn(|| {
            let mut reads = 0;
            while !done.load(Ordering::SeqCst) {
                let out = rw(&ws, &["cat", "src/f7.rs", "--at", &point]);
                assert!(out.status.success(), "{out:?}");
                assert!(
                    out.stdout == first[7].1,
                    "src/f7.rs at {point} reads back otherwise"
                );
                reads += 1;
            }
            reads
        });
        let gcs: Vec<_> = (0..2)
            .map(|_| s.spawn(|| rw(&ws, &["gc", "--keep", "3650d", "--repack"])))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|g| g.join().unwrap())
            .collect();
        done.store(true, Ordering::SeqCst);
        (gcs, writer.join().unwrap(), reader.join().unwrap())
    });
    for out in &gcs {
        assert!(out.status.success(), "{out:?}");
    }
    assert!(
        gcs.iter()
            .any(|o| String::from_utf8_lossy(&o.stdout).contains("repacked")),
        "{gcs:?}"
    );
    assert!(
        !written.is_empty() && reads > 0,
        "{} written, {reads} reads",
        written.len()
    );
    saved.extend(written);
    assert_every_version_reads_back(&ws, &saved);

    let out = rw_ok(&ws, &["gc", "--keep", "3650d", "--repack"]);
    assert!(!out.contains("not repacked"), "{out}");
    let out = rw(&ws, &["rollback", "--to", &point, "--force"]);
    assert!(out.status.success(), "{out:?}");
    for (name, data) in &first {
        assert!(
            fs::read(ws.path().join(name)).unwrap() == *data,
            "{name} after the rollback to {point}"
        );
    }
    assert_every_version_reads_back(&ws, &saved);
}
