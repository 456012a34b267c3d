//! The repack gc runs: older versions re-encoded as deltas on newer ones (`store/repack.rs`),
//! against a real store, a real mount and a real SIGKILL.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::process::Command;

use proptest::prelude::*;
use rewind::history::History;
use rewind::history::db::GcPolicy;
use rewind::store::{Hash, Query, Store};

use crate::common::{Workspace, damage_blob, noise, rw, rw_ok, sync};
use crate::store::{base_of, depths, open, source};

/// Record `data` as the new content of `path`, as the recorder does: what it stores is pinned
/// only until its change is written (a repack leaves pinned content as it is).
fn version(h: &History, path: &str, t: u64, data: &[u8]) -> Hash {
    let _pins = h.store().pin_scope();
    crate::store::version(h, path, t, data)
}

fn delete(h: &History, path: &str, t: u64, content: &[u8], hash: Hash) {
    let _pins = h.store().pin_scope();
    crate::store::delete(h, path, t, content, hash);
}

/// gc that removes nothing but repacks (`before`: remove changes older than that).
fn gc(h: &History, before: Option<u64>) -> rewind::history::GcReport {
    h.gc(&GcPolicy {
        older_than_ns: before,
        max_bytes: None,
        dry_run: false,
        repack: true,
    })
    .unwrap()
}

/// Every blob's delta chain ends, without meeting a blob twice: no blob is ever its own base.
fn assert_no_cycle(store: &Store) {
    for (hash, _, _) in store.blob_depths().unwrap() {
        let mut seen = HashSet::from([hash]);
        let mut at = hash;
        while let Some(base) = base_of(store, &at) {
            assert!(seen.insert(base), "{hash:?} reaches {base:?} twice");
            at = base;
        }
    }
}

/// Every content a change refers to reads back and matches its hash.
fn assert_all_read(h: &History) {
    for c in h.query(&Query::default()).unwrap() {
        for s in [c.before, c.after].into_iter().flatten() {
            h.store().verify_blob(&s.hash.unwrap()).unwrap();
        }
    }
}

/// Versions of a file, each a delta on the one before as recorded: after gc's repack the
/// newest is stored whole and every older one is a delta on the next newer, the store is
/// smaller, and every version reads back byte-exact; then after a gc removed the older half
/// of the history (which now frees those versions whole), and after the store is reopened.
#[test]
fn every_version_reads_back_after_a_repack_a_gc_around_it_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let count = 30;
    let versions: Vec<(Hash, Vec<u8>)> = {
        let h = open(dir.path());
        let versions: Vec<(Hash, Vec<u8>)> = (0..count)
            .map(|v| {
                let data = source(400, v);
                (version(&h, "src/lib.rs", v as u64 + 1, &data), data)
            })
            .collect();
        let other = version(&h, "notes.txt", 100, &noise(3000, 3));
        let store = h.store();
        assert_eq!(base_of(store, &versions[1].0), Some(versions[0].0));
        let before = store.stats().unwrap().blob_bytes;

        let report = gc(&h, None);
        assert_eq!(report.changes_removed, 0);
        assert!(report.repacked >= count as u64 - 1, "{report:?}");
        let after = store.stats().unwrap().blob_bytes;
        assert!(after < before, "{before} -> {after} bytes");
        assert_eq!(report.bytes_after, after);
        let depth = depths(store);
        assert_eq!(depth[&versions[count - 1].0], 0, "the newest is whole");
        for v in 0..count - 1 {
            assert_eq!(
                base_of(store, &versions[v].0),
                Some(versions[v + 1].0),
                "version {v} is a delta on the next"
            );
            assert_eq!(depth[&versions[v].0], (count - 1 - v) as u32);
        }
        assert_eq!(base_of(store, &other), None);
        for (hash, data) in &versions {
            assert!(store.read_blob(hash).unwrap() == *data);
        }
        assert_no_cycle(store);
        // A second gc finds nothing more to do.
        assert_eq!(gc(&h, None).repacked, 0);
        versions
    };
    {
        // The first half of the history goes: those versions are tails of the new chains,
        // nothing needs them, and they are freed.
        let h = open(dir.path());
        let keep_from = count / 2;
        let report = gc(&h, Some(keep_from as u64 + 1));
        assert_eq!(report.changes_removed, keep_from as u64);
        for (v, (hash, data)) in versions.iter().enumerate() {
            // The oldest kept change's content before is version keep_from - 1.
            let kept = v + 1 >= keep_from;
            assert_eq!(h.store().has_blob(hash).unwrap(), kept, "version {v}");
            if kept {
                assert!(h.store().read_blob(hash).unwrap() == *data, "version {v}");
            }
        }
        assert_all_read(&h);
    }
    let h = open(dir.path());
    for (hash, data) in versions.iter().skip(count / 2 - 1) {
        assert!(h.store().read_blob(hash).unwrap() == *data);
    }
    assert_no_cycle(h.store());
}

/// A damaged version that older ones are now stored on: reading an older version is the
/// clear error naming it as the damaged base and the path whose content needs it.
#[test]
fn a_damaged_base_after_a_repack_names_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    let versions: Vec<Hash> = {
        let h = open(dir.path());
        let versions = (0..5)
            .map(|v| version(&h, "src/a.rs", v + 1, &source(300, v as usize)))
            .collect::<Vec<_>>();
        version(&h, "notes.txt", 9, &noise(2000, 7));
        gc(&h, None);
        assert_eq!(base_of(h.store(), &versions[1]), Some(versions[2]));
        versions
    };
    damage_blob(dir.path(), &versions[3]);
    let h = open(dir.path());
    let msg = h.store().read_blob(&versions[0]).unwrap_err().to_string();
    assert!(msg.contains(&versions[0].to_hex()), "{msg}");
    assert!(
        msg.contains(&format!("delta base {}", versions[3].to_hex())),
        "{msg}"
    );
    assert!(msg.contains("src/a.rs"), "{msg}");
    assert!(!msg.contains("notes.txt"), "{msg}");
    // The newest does not need it.
    assert!(h.store().read_blob(&versions[4]).unwrap() == source(300, 4));
}

/// The child half of the SIGKILL test: a gc whose repack kills its own process
/// (`REWIND_TEST_REPACK_KILL`). Only the parent test runs it.
#[test]
#[ignore = "the child process of a_sigkill_during_a_repack_loses_nothing"]
fn repack_child() {
    let Ok(dir) = std::env::var("REWIND_TEST_REPACK_CHILD") else {
        return;
    };
    gc(&open(std::path::Path::new(&dir)), None);
}

/// A repack killed with SIGKILL after a few re-encodings: every version still reads back,
/// no blob is its own base, and the next gc finishes the repack.
#[test]
fn a_sigkill_during_a_repack_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<(Hash, Vec<u8>)> = Vec::new();
    {
        let h = open(dir.path());
        for v in 0..20usize {
            for (i, path) in ["a.rs", "b.rs", "c/a.rs"].iter().enumerate() {
                let data = source(200 + 50 * i, v + i);
                all.push((version(&h, path, (v * 3 + i) as u64 + 1, &data), data));
            }
        }
    }
    for kill_after in [1, 7, 25] {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "repack::repack_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REWIND_TEST_REPACK_CHILD", dir.path())
            .env("REWIND_TEST_REPACK_KILL", kill_after.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "killed at {kill_after}"
        );
        let h = open(dir.path());
        for (hash, data) in &all {
            assert!(h.store().read_blob(hash).unwrap() == *data);
        }
        assert_no_cycle(h.store());
    }
    let h = open(dir.path());
    let report = gc(&h, None);
    assert!(report.repacked > 0, "{report:?}");
    assert_eq!(gc(&h, None).repacked, 0, "the repack is complete");
    for (hash, data) in &all {
        assert!(h.store().read_blob(hash).unwrap() == *data);
    }
    assert_no_cycle(h.store());
}

/// What a random history does next.
#[derive(Clone, Debug)]
enum Step {
    /// Path `p` gets content variant `v` (variants are shared by every path: the same
    /// content under several paths, and reverts).
    Write(usize, usize),
    Delete(usize),
    /// Path `p` gets its content with one line more (a write-time delta a repack may find
    /// cheaper to keep, newest on older, than to rewrite).
    Edit(usize),
    /// gc removing the changes older than this share (in eighths) of the history, then
    /// repacking.
    Gc(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..4usize, 0..6usize).prop_map(|(p, v)| Step::Write(p, v)),
        1 => (0..4usize).prop_map(Step::Delete),
        4 => (0..4usize).prop_map(Step::Edit),
        2 => (0..5u64).prop_map(Step::Gc),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random histories of four paths over six shared contents and small edits of them (which
    /// a repack often keeps as recorded, each on the one before, beside paths it rewrites),
    /// gc and repack in between: no blob is ever its own base, every content a kept change
    /// names reads back, and the repack never makes the stored content larger.
    #[test]
    fn no_blob_is_ever_its_own_base(steps in proptest::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let h = open(dir.path());
        let paths = ["a/lib.rs", "b/lib.rs", "a/main.rs", "c.rs"];
        let variant = |v: usize| source(150 + 20 * (v % 3), v);
        let mut current: HashMap<usize, (Hash, Vec<u8>)> = HashMap::new();
        let mut t = 0u64;
        for s in steps {
            t += 1;
            match s {
                Step::Write(p, v) => {
                    let data = variant(v);
                    let hash = version(&h, paths[p], t, &data);
                    current.insert(p, (hash, data));
                }
                Step::Delete(p) => {
                    if let Some((hash, data)) = current.remove(&p) {
                        delete(&h, paths[p], t, &data, hash);
                    }
                }
                Step::Edit(p) => {
                    let mut data = current.get(&p).map_or_else(|| variant(p), |c| c.1.clone());
                    data.extend_from_slice(format!("let edit_{t} = {p};\n").as_bytes());
                    let hash = version(&h, paths[p], t, &data);
                    current.insert(p, (hash, data));
                }
                Step::Gc(eighths) => {
                    // gc's removal, then its repack alone: the stored content never grows.
                    h.gc(&GcPolicy {
                        older_than_ns: Some(t * eighths / 8),
                        max_bytes: None,
                        dry_run: false,
                        repack: false,
                    })
                    .unwrap();
                    let before = h.store().stats().unwrap().blob_bytes;
                    gc(&h, None);
                    let after = h.store().stats().unwrap().blob_bytes;
                    prop_assert!(after <= before, "{before} -> {after}");
                }
            }
            assert_no_cycle(h.store());
        }
        gc(&h, None);
        assert_no_cycle(h.store());
        assert_all_read(&h);
        for (hash, data) in current.values() {
            prop_assert!(h.store().read_blob(hash).unwrap() == *data);
        }
    }
}

/// Through a real mount: versions of a file saved through it, `rewind gc` through the
/// daemon repacks them, and every version reads back with `rewind cat --at`, before and after
/// a remount.
#[test]
fn a_mounted_gc_repacks_and_every_version_reads_back_across_a_remount() {
    let mut ws = Workspace::new();
    ws.mount();
    let mut texts = Vec::new();
    for v in 0..8 {
        let text: String = (0..300)
            .map(|i| {
                format!(
                    "    let value_{i} = compute({i}, \"{i:x}\"); // {}\n",
                    i * v % 7
                )
            })
            .collect();
        fs::write(ws.path().join("lib.rs"), &text).unwrap();
        sync(&ws);
        texts.push(text);
    }
    let out = rw_ok(&ws, &["gc", "--keep", "3650d", "--repack"]);
    assert!(out.contains("repacked"), "{out}");
    let ids: Vec<String> = rw_ok(&ws, &["log", "--json"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|c| c["path"] == "lib.rs")
        .map(|c| c["id"].to_string())
        .collect();
    assert_eq!(ids.len(), texts.len(), "one change per save");
    let check = |ws: &Workspace| {
        let mut shown: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| {
                let out = rw(ws, &["cat", "lib.rs", "--at", id]);
                assert!(out.status.success(), "{out:?}");
                out.stdout
            })
            .collect();
        shown.sort();
        let mut expected: Vec<Vec<u8>> = texts.iter().map(|t| t.clone().into_bytes()).collect();
        expected.sort();
        assert!(shown == expected, "every version reads back");
    };
    check(&ws);
    ws.unmount();
    {
        let h = open(&ws.store());
        assert_no_cycle(h.store());
        assert_all_read(&h);
        let deltas = depths(h.store()).values().filter(|d| **d > 0).count();
        assert!(deltas >= 6, "{deltas} deltas");
    }
    ws.mount();
    check(&ws);
}

/// Enough files for the repack's dictionary (trained on the newest versions of 48 files that
/// share most of their lines, each with an extension of its own, so that each was stored
/// whole at first: the dictionary pays against that): the files are stored as deltas on it,
/// everything reads back after a reopen, and a damaged dictionary is an error naming it and
/// every path that needs it.
#[test]
fn files_stored_on_the_repacks_dictionary_read_back_and_a_damaged_one_names_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    // Each file: 120 lines drawn from a pool of 400 that all files share, in an order of
    // its own, and 30 lines of its own. No other single file holds much of it; the pool is
    // what a dictionary learns.
    let pool: Vec<String> = (0..400)
        .map(|k| {
            format!(
                "    let shared_{k} = table.lookup({k}, \"{:x}\");\n",
                k * 7919
            )
        })
        .collect();
    let text = |i: usize, v: usize| {
        let mut t = format!("//! File {i}, version {v}.\n");
        let mut seed = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for n in 0..150 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            if n % 5 == 4 {
                t.push_str(&format!("    let own_{i}_{n}_{v} = {:x};\n", seed >> 20));
            } else {
                t.push_str(&pool[(seed >> 33) as usize % pool.len()]);
            }
        }
        t.into_bytes()
    };
    let mut newest = Vec::new();
    let stored_before;
    {
        let h = open(dir.path());
        for i in 0..48 {
            for v in 0..2 {
                let data = text(i, v);
                let hash = version(&h, &format!("src/m{i}.r{i}"), (i * 2 + v) as u64 + 1, &data);
                if v == 1 {
                    newest.push((hash, data));
                }
            }
        }
        stored_before = h.store().stats().unwrap().blob_bytes;
    }
    let dictionary = {
        let h = open(dir.path());
        let report = gc(&h, None);
        assert!(report.bytes_after < stored_before, "{report:?}");
        let store = h.store();
        let bases: HashSet<Hash> = newest
            .iter()
            .filter_map(|(hash, _)| base_of(store, hash))
            .collect();
        let dictionary: Vec<Hash> = bases
            .into_iter()
            .filter(|b| {
                store
                    .read_blob(b)
                    .unwrap()
                    .starts_with(&[0x37, 0xA4, 0x30, 0xEC])
            })
            .collect();
        assert_eq!(dictionary.len(), 1, "one dictionary");
        let on_it = newest
            .iter()
            .filter(|(hash, _)| base_of(store, hash) == Some(dictionary[0]))
            .count();
        assert!(on_it >= 10, "{on_it} files on the dictionary");
        dictionary[0]
    };
    {
        let h = open(dir.path());
        for (hash, data) in &newest {
            assert!(h.store().read_blob(hash).unwrap() == *data);
        }
        assert_all_read(&h);
        assert_no_cycle(h.store());
        // The dictionary is kept by gc (no change names it), and a gc after that one has
        // nothing to do.
        let report = gc(&h, None);
        assert_eq!(
            (report.repacked, report.blobs_removed, report.repack_freed),
            (0, 0, 0),
            "{report:?}"
        );
        assert!(h.store().has_blob(&dictionary).unwrap());
    }
    damage_blob(dir.path(), &dictionary);
    let h = open(dir.path());
    let (hash, _) = newest
        .iter()
        .find(|(hash, _)| base_of(h.store(), hash) == Some(dictionary))
        .unwrap();
    let msg = h.store().read_blob(hash).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("delta base {}", dictionary.to_hex())),
        "{msg}"
    );
    let needing = h.store().paths_needing(&dictionary).unwrap();
    assert!(needing.len() >= 10, "{needing:?}");
    for path in &needing {
        assert!(path.starts_with(b"src/m"), "{path:?}");
    }
    assert!(
        msg.contains(std::str::from_utf8(&needing[0]).unwrap()),
        "{msg}"
    );
}

/// The repack is only made when asked for (`gc --repack`), never by gc's removal alone (the
/// retention the daemon applies by itself), and a store with more contents than a repack
/// takes on is refused with a line that says so, with nothing re-encoded; one with as many
/// is repacked.
#[test]
fn gc_repacks_only_when_asked_and_refuses_a_store_too_big_for_it() {
    let mut ws = Workspace::new();
    ws.mount();
    for v in 0..6 {
        let text: String = (0..200)
            .map(|i| format!("fn f{i}() -> u32 {{ {} }}\n", i * v))
            .collect();
        fs::write(ws.path().join("lib.rs"), text).unwrap();
        sync(&ws);
    }
    ws.unmount();
    let values = |ws: &Workspace| {
        let h = open(&ws.store());
        h.store().blob_depths().unwrap()
    };
    let before = values(&ws);

    let plain = rw_ok(&ws, &["gc", "--keep", "3650d"]);
    assert!(!plain.contains("repack"), "{plain}");
    assert_eq!(
        values(&ws),
        before,
        "gc without --repack re-encodes nothing"
    );

    let refused =
        crate::common::rw_env(&ws, &["gc", "--repack"], &[("REWIND_TEST_REPACK_MAX", "3")]);
    assert!(refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stdout);
    assert!(
        said.contains("not repacked: the store holds 6 contents, more than the 3"),
        "{said}"
    );
    assert_eq!(values(&ws), before, "a refused repack re-encodes nothing");

    // At the limit exactly, it is made.
    let made = crate::common::rw_env(&ws, &["gc", "--repack"], &[("REWIND_TEST_REPACK_MAX", "6")]);
    let made = crate::common::ok(made);
    assert!(
        made.contains("repacked") && !made.contains("not repacked"),
        "{made}"
    );
    assert_ne!(values(&ws), before, "the repack re-encodes");
    let h = open(&ws.store());
    assert_no_cycle(h.store());
    assert_all_read(&h);
}

/// File `i` as of version `v`, as the hostile pass wrote them (`big.py`, with 20 lines
/// instead of 60): lines much like every other file's, one of them replaced at each version
/// by a line of its own.
fn small_file(i: usize, v: usize) -> Vec<u8> {
    let mut lines: Vec<String> = (0..20)
        .map(|k| format!("line {k} of file {i}: value = {}\n", (k * i) % 977))
        .collect();
    let seed = ((i * 3 + v) as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    lines[(seed >> 40) as usize % 20] = format!("edited in version {v} {:x}\n", seed >> 8);
    lines.concat().into_bytes()
}

/// The blobs holding a zstd dictionary (the repack's).
fn dictionaries(store: &Store) -> Vec<Hash> {
    store
        .blob_depths()
        .unwrap()
        .into_iter()
        .filter(|(hash, depth, _)| {
            *depth == 0
                && store
                    .read_blob(hash)
                    .is_ok_and(|c| c.starts_with(&[0x37, 0xA4, 0x30, 0xEC]))
        })
        .map(|(hash, ..)| hash)
        .collect()
}

/// The shape a repack had made larger (3.6 %, on 20,000 small files written three times,
/// mounted), scaled down: 2,000 files, each written three times with a line changed, each
/// newer version a small delta on the one before as recorded and each first version mostly
/// a delta on a similar file. After `gc --repack` the stored content is no larger than before
/// (it was 675,944 -> 691,911 bytes before each path's chain was weighed as a whole and the
/// dictionary against what is stored), no dictionary was made (the heads' paths pay little
/// for a version of their own: it would not be used), both plans were taken (some paths kept
/// as recorded, newest on older; others rewritten, older on newer), every version reads back
/// and no blob is its own base; a second repack changes nothing.
#[test]
fn a_repack_never_makes_a_store_of_small_forward_deltas_larger() {
    let dir = tempfile::tempdir().unwrap();
    let h = open(dir.path());
    let files = 2000;
    let mut versions: Vec<Vec<(Hash, Vec<u8>)>> = vec![Vec::new(); files];
    let mut t = 0;
    for v in 0..3 {
        for (i, file) in versions.iter_mut().enumerate() {
            t += 1;
            let data = small_file(i, v);
            let path = format!("d{}/m{i}.py", i % 100);
            file.push((version(&h, &path, t, &data), data));
        }
    }
    let store = h.store();
    let before = store.stats().unwrap().blob_bytes;
    let report = gc(&h, None);
    let after = store.stats().unwrap().blob_bytes;
    assert!(after <= before, "{before} -> {after} bytes: {report:?}");
    assert_eq!(report.bytes_after, after);
    assert!(report.repacked > 0, "{report:?}");
    assert_eq!(dictionaries(store), Vec::<Hash>::new(), "no dictionary");
    let kept = versions
        .iter()
        .filter(|f| base_of(store, &f[2].0) == Some(f[1].0))
        .count();
    let rewritten = versions
        .iter()
        .filter(|f| base_of(store, &f[1].0) == Some(f[2].0))
        .count();
    assert!(
        kept > 0 && rewritten > 0,
        "{kept} kept, {rewritten} rewritten"
    );
    for (hash, data) in versions.iter().flatten() {
        assert!(store.read_blob(hash).unwrap() == *data);
    }
    assert_no_cycle(store);
    assert_eq!(gc(&h, None).repacked, 0, "a second repack changes nothing");
}
