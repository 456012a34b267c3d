//! Trust I (issue 10), items 2 and 3: POSIX holds through the mount as on the disk underneath.
//!
//! - pjdfstest, the public POSIX conformance suite (shared/pjdfstest), runs whole through a
//!   mount, with passthrough and without, and must fail nothing that docs/design.md does not
//!   list, with its reason, under "POSIX conformance (pjdfstest)".
//! - Hard links behave as on disk (every remaining name keeps working when one goes, writes
//!   through one name are seen through all) and their history is right: `rewind log NAME` of
//!   every name shows the content changes made through any name, and a rollback (of one name,
//!   or of a session) restores the content seen through all of them. Links made before the
//!   mount are learnt by the scan at mount.
//! - Backing inode numbers freed by one process and reused by another's new file at the same
//!   time (which pjdfstest found when two of its scripts ran side by side).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsString};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Workspace, is_mounted, python, rw_ok, sh};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// How file data moves through the mount.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    /// FUSE passthrough (root's default): the kernel reads and writes the backing file itself.
    Passthrough,
    /// `--no-passthrough`: the writeback cache, data through the daemon (a plain user's mount).
    Writeback,
}

const BOTH: [Data; 2] = [Data::Passthrough, Data::Writeback];

/// Mount `ws` with `data` (and `extra` options), and check that the mount really uses it.
fn mount(ws: &mut Workspace, data: Data, extra: &[&str]) {
    let mut args: Vec<&str> = extra.to_vec();
    if data == Data::Writeback {
        args.push("--no-passthrough");
    }
    ws.mount_with(&args);
    let status = rw_ok(ws, &["status"]);
    let want = match data {
        Data::Passthrough => "data path: passthrough",
        Data::Writeback => "data path: writeback",
    };
    assert!(
        status.contains(want),
        "the mount should use {data:?}; `rewind status` says:\n{status}"
    );
}

fn mounted(data: Data) -> Workspace {
    let mut ws = Workspace::new();
    mount(&mut ws, data, &[]);
    ws
}

/// `rewind log --json [NAME]`.
fn log(ws: &Workspace, name: Option<&str>) -> Vec<Value> {
    let mut args = vec!["log", "--json"];
    args.extend(name);
    rw_ok(ws, &args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The changes of `kind` in `changes`.
fn of_kind<'a>(changes: &'a [Value], kind: &str) -> Vec<&'a Value> {
    changes.iter().filter(|c| c["kind"] == kind).collect()
}

/// A change's path and its `links` (the file's other names).
fn names(change: &Value) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = change["links"]
        .as_array()
        .unwrap_or_else(|| panic!("no links in {change}"))
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    names.insert(change["path"].as_str().unwrap().to_string());
    names
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The hash history records for this content.
fn hash(content: &str) -> String {
    blake3::hash(content.as_bytes()).to_hex().to_string()
}

/// The content hash after a change (`None` when the path was gone).
fn after(change: &Value) -> Option<&str> {
    change["after"]["hash"].as_str()
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn ino(p: &Path) -> u64 {
    fs::metadata(p).unwrap().ino()
}

fn nlink(p: &Path) -> u64 {
    fs::metadata(p).unwrap().nlink()
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn mkfifo(p: &Path) -> std::io::Result<()> {
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c(p).as_ptr(), 0o644) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Run `script` (bash) in `dir`: its stdout and stderr together, and its exit status, so that
/// a plain directory and the mount can be compared step by step.
fn run(dir: &Path, script: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("exec 2>&1\n{script}"))
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace(&*dir.to_string_lossy(), "DIR");
    format!("{text}[{}]", out.status.code().unwrap_or(-1))
}

// ---------------------------------------------------------------------------------------------
// pjdfstest
// ---------------------------------------------------------------------------------------------

/// What pjdfstest runs through the mount: the 238 scripts and 8,827 tests of the disk
/// underneath (ext4), less the 29 of rename/22.t ("rename changes ctime"), which the suite runs
/// only on EXT4, UFS and ZFS (on FUSE it is skipped, as on tmpfs);
/// `renaming_updates_ctime_as_on_disk` checks it instead. docs/design.md says the same.
const PJDFSTEST_FILES: usize = 238;
const PJDFSTEST_TESTS: usize = 8_798;

/// The section of docs/design.md that lists the pjdfstest failures allowed, one a line:
/// "- `chmod/12.t` 3 4: reason".
const DESIGN_SECTION: &str = "## POSIX conformance (pjdfstest)";

/// Allowed failures: script, its test numbers, the reason.
type Allowed = BTreeMap<String, (BTreeSet<u32>, String)>;

/// The allowed failures listed in `design` (docs/design.md's text) under [`DESIGN_SECTION`]:
/// every bullet whose first code span names a script (`….t`), followed by its test numbers, a
/// colon and the reason. A malformed entry is an error, not an empty list.
fn allowed_failures(design: &str) -> Result<Allowed, String> {
    let mut lines = design.lines();
    if !lines.any(|l| l.trim_end() == DESIGN_SECTION) {
        return Err(format!("no section {DESIGN_SECTION:?}"));
    }
    let mut allowed = Allowed::new();
    for line in lines.take_while(|l| !l.starts_with("## ")) {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let Some((script, rest)) = rest.split_once('`') else {
            continue;
        };
        if !script.ends_with(".t") {
            continue;
        }
        let bad = || format!("entry {line:?}: want \"- `dir/NN.t` N N: reason\"");
        let (numbers, reason) = rest.split_once(':').ok_or_else(bad)?;
        let numbers: BTreeSet<u32> = numbers
            .split_whitespace()
            .map(|n| n.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        if numbers.is_empty() || reason.trim().is_empty() {
            return Err(bad());
        }
        let entry = allowed
            .entry(script.to_string())
            .or_insert_with(|| (BTreeSet::new(), String::new()));
        entry.0.extend(numbers);
        entry.1.push_str(reason.trim());
    }
    Ok(allowed)
}

#[test]
fn allowed_pjdfstest_failures_are_read_from_the_design() {
    let text = "intro\n## POSIX conformance (pjdfstest)\nText `x.t` here.\n\
                - `chmod/12.t` 3 4: bits stay\n- `link/00.t` 22: name lost\n\
                - other bullet\n## Next\n- `open/02.t` 2: not this section\n";
    let allowed = allowed_failures(text).unwrap();
    assert_eq!(
        allowed.keys().collect::<Vec<_>>(),
        ["chmod/12.t", "link/00.t"]
    );
    assert_eq!(allowed["chmod/12.t"].0, BTreeSet::from([3, 4]));
    assert_eq!(allowed["chmod/12.t"].1, "bits stay");
    assert!(allowed_failures("## POSIX conformance (pjdfstest)\n- `a/01.t`: why\n").is_err());
    assert!(allowed_failures("## POSIX conformance (pjdfstest)\n- `a/01.t` 1\n").is_err());
    assert!(allowed_failures("## POSIX conformance (pjdfstest)\n- `a/01.t` 1:  \n").is_err());
    assert!(allowed_failures("## Other\n").is_err());
    // The real document has the section, and every entry in it is well formed.
    let design = fs::read_to_string(repo().join("docs/design.md")).unwrap();
    allowed_failures(&design).unwrap_or_else(|e| panic!("docs/design.md: {e}"));

    // And the harness's output is read as it prints it.
    let s = summary(
        "FAIL chmod/12.t 3 4\nERROR open/02.t exit=1\nFAIL link/00.t 22\n\
         TOTAL files=238 tests=8798 failed=3 errors=1\n",
    );
    assert_eq!(s.failed["chmod/12.t"], BTreeSet::from([3, 4]));
    assert_eq!(s.failed["link/00.t"], BTreeSet::from([22]));
    assert_eq!(s.errors, ["ERROR open/02.t exit=1"]);
    assert_eq!((s.files, s.tests), (238, 8798));
    let tap = "# ---- a/01.t\n1..3\nok 1\nnot ok 2 - tried x\nnot ok 3 # TODO y\n\
               # ---- b/01.t\nnot ok 1 - other\n";
    assert_eq!(not_ok_lines(tap, "a/01.t"), ["not ok 2 - tried x"]);
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What `scripts/pjdfstest run` printed on stdout.
#[derive(Debug, Default)]
struct Summary {
    failed: BTreeMap<String, BTreeSet<u32>>,
    errors: Vec<String>,
    files: usize,
    tests: usize,
    total: String,
}

fn summary(stdout: &str) -> Summary {
    let mut s = Summary::default();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("FAIL") => {
                let script = words.next().expect("FAIL SCRIPT N...").to_string();
                let numbers = words.map(|n| n.parse::<u32>().expect("a test number"));
                s.failed.entry(script).or_default().extend(numbers);
            }
            Some("ERROR") => s.errors.push(line.to_string()),
            Some("TOTAL") => {
                s.total = line.to_string();
                for word in words {
                    match word.split_once('=') {
                        Some(("files", n)) => s.files = n.parse().unwrap(),
                        Some(("tests", n)) => s.tests = n.parse().unwrap(),
                        _ => {}
                    }
                }
            }
            _ => panic!("unexpected line from scripts/pjdfstest: {line:?}"),
        }
    }
    assert!(!s.total.is_empty(), "no TOTAL line in:\n{stdout}");
    s
}

/// The `not ok` lines (without TODO) of `script` in the suite's TAP log.
fn not_ok_lines(tap: &str, script: &str) -> Vec<String> {
    let header = format!("# ---- {script}");
    tap.lines()
        .skip_while(|l| *l != header)
        .skip(1)
        .take_while(|l| !l.starts_with("# ---- "))
        .filter(|l| l.starts_with("not ok") && !l.contains("# TODO"))
        .map(str::to_string)
        .collect()
}

/// Build pjdfstest (scripts/pjdfstest, into ~/.cache/rewind/pjdfstest; once per source), mount a
/// workspace as root with `--allow-other` (the suite's unprivileged steps, as uid 65534 and
/// others, must reach the mount; the workspace root is searchable by everyone), run the whole
/// suite at the mount's root, two scripts at a time, and compare with docs/design.md.
fn pjdfstest_through_the_mount(data: Data) {
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "pjdfstest needs root: it switches users and makes device nodes"
    );
    let design = fs::read_to_string(repo().join("docs/design.md")).unwrap();
    let allowed = allowed_failures(&design).unwrap_or_else(|e| panic!("docs/design.md: {e}"));
    let script = repo().join("scripts/pjdfstest");
    let built = Command::new(&script).arg("build").output().unwrap();
    assert!(
        built.status.success(),
        "scripts/pjdfstest build failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let mut ws = Workspace::new();
    fs::set_permissions(ws.path(), fs::Permissions::from_mode(0o755)).unwrap();
    mount(&mut ws, data, &["--allow-other"]);
    let tap_log = ws.plain().join("pjdfstest.tap");
    let start = Instant::now();
    let out = Command::new(&script)
        .arg("run")
        .arg(ws.path())
        .env("PJDFSTEST_JOBS", "2")
        .env("PJDFSTEST_LOG", &tap_log)
        .output()
        .unwrap();
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/pjdfstest run could not run the suite ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&stdout);
    eprintln!(
        "pjdfstest through the mount ({data:?}): {} in {took:.0?}",
        s.total
    );

    // Every failure must be listed in docs/design.md; every listed one must still fail.
    let tap = fs::read_to_string(&tap_log).unwrap_or_default();
    let mut unexpected = Vec::new();
    for (file, numbers) in &s.failed {
        let listed = allowed.get(file).map(|a| &a.0);
        let new: Vec<u32> = numbers
            .iter()
            .filter(|n| !listed.is_some_and(|l| l.contains(n)))
            .copied()
            .collect();
        if !new.is_empty() {
            unexpected.push(format!(
                "{file} {new:?}:\n  {}",
                not_ok_lines(&tap, file).join("\n  ")
            ));
        }
    }
    let mut stale = Vec::new();
    for (file, (numbers, reason)) in &allowed {
        let failed = s.failed.get(file);
        let passed: Vec<u32> = numbers
            .iter()
            .filter(|n| !failed.is_some_and(|f| f.contains(n)))
            .copied()
            .collect();
        if !passed.is_empty() {
            stale.push(format!("{file} {passed:?} ({reason})"));
        }
    }
    if !unexpected.is_empty() || !s.errors.is_empty() {
        // The workspace (and the log in it) goes with the test: keep the log.
        let kept = std::env::temp_dir().join(format!(
            "rewind-pjdfstest-{data:?}-{}.tap",
            std::process::id()
        ));
        let _ = fs::copy(&tap_log, &kept);
        panic!(
            "pjdfstest through the mount ({data:?}): {}\nfailures not listed in docs/design.md \
             ({DESIGN_SECTION}):\n{}\nscripts that did not finish cleanly:\n{}\n\
             (full TAP log: {})",
            s.total,
            unexpected.join("\n"),
            s.errors.join("\n"),
            kept.display()
        );
    }
    assert!(
        stale.is_empty(),
        "listed as failing in docs/design.md but passed now ({data:?}), remove them: {stale:?}"
    );
    assert_eq!(
        (s.files, s.tests),
        (PJDFSTEST_FILES, PJDFSTEST_TESTS),
        "pjdfstest ran a different number of scripts or tests than expected ({})",
        s.total
    );

    // The suite cleans up after itself: nothing is left at the mount's root, and the mount
    // still answers and records.
    let left: Vec<String> = fs::read_dir(ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pjdfstest_"))
        .collect();
    assert!(left.is_empty(), "left behind at the mount's root: {left:?}");
    assert!(is_mounted(&ws.path()));
    assert!(
        !log(&ws, None).is_empty(),
        "the suite's changes should be in the history"
    );
    assert!(rw_ok(&ws, &["status"]).contains("state: mounted"));
}

/// The whole of pjdfstest through a mount with FUSE passthrough (root's default). About two
/// minutes here (two scripts at a time); see the override in .config/nextest.toml.
#[test]
fn pjdfstest_passes_through_the_mount_with_passthrough() {
    pjdfstest_through_the_mount(Data::Passthrough);
}

/// The whole of pjdfstest through a mount without passthrough (the writeback cache, as a plain
/// user's mount): set-ID bits are cleared by the daemon here, on `FUSE_WRITE_KILL_SUIDGID`.
#[test]
fn pjdfstest_passes_through_the_mount_without_passthrough() {
    pjdfstest_through_the_mount(Data::Writeback);
}

/// rename(2) updates the ctime of what it moves on ext4 (pjdfstest checks it only on EXT4, UFS
/// and ZFS, so through FUSE its rename/22.t is skipped): the mount does the same as the plain
/// directory beside it, for each type of file.
#[test]
fn renaming_updates_ctime_as_on_disk() {
    let ws = mounted(Data::Passthrough);
    let make = "echo x > f; mkdir d; mkfifo p; ln -s f l";
    let mut results = Vec::new();
    for dir in [ws.plain(), ws.path()] {
        sh(&dir, make);
        let before: Vec<i64> = ["f", "d", "p", "l"]
            .iter()
            .map(|n| fs::symlink_metadata(dir.join(n)).unwrap().ctime())
            .collect();
        results.push((dir, before));
    }
    // A test about time: ctime() is in whole seconds, so the renames come a second later.
    std::thread::sleep(Duration::from_millis(1100));
    let mut grew = Vec::new();
    for (dir, before) in results {
        sh(&dir, "mv f f2; mv d d2; mv p p2; mv l l2");
        let now: Vec<bool> = ["f2", "d2", "p2", "l2"]
            .iter()
            .zip(before)
            .map(|(n, b)| fs::symlink_metadata(dir.join(n)).unwrap().ctime() > b)
            .collect();
        grew.push(now);
    }
    assert_eq!(
        grew[1], grew[0],
        "ctime after rename of a file, folder, fifo, symlink: mount vs disk"
    );
}

// ---------------------------------------------------------------------------------------------
// Reuse of backing inode numbers
// ---------------------------------------------------------------------------------------------

/// A file made while other processes remove files is its own file: the backing filesystem hands
/// the freed inode number to the new file, and the mount must not take the new file for the
/// removed one (which left it nameless: every call on it failed with ENOENT until the kernel
/// forgot it). pjdfstest found it with two scripts side by side (rename/09 and rename/10:
/// `lchown` right after `mkfifo` gave ENOENT).
#[test]
fn new_files_reusing_freed_inode_numbers_are_new_files() {
    let ws = mounted(Data::Passthrough);
    let root = ws.path();
    let rounds = 2000;
    let churners: Vec<_> = (0..2)
        .map(|k| {
            let dir = root.join(format!("churn{k}"));
            fs::create_dir(&dir).unwrap();
            std::thread::spawn(move || {
                let f = dir.join("f");
                for _ in 0..rounds {
                    mkfifo(&f).unwrap();
                    fs::remove_file(&f).unwrap();
                }
            })
        })
        .collect();
    let dir = root.join("check");
    fs::create_dir(&dir).unwrap();
    let g = dir.join("g");
    let mut failures = Vec::new();
    for i in 0..rounds {
        mkfifo(&g).unwrap();
        if let Err(e) = std::os::unix::fs::lchown(&g, Some(65534), Some(65534)) {
            failures.push(format!("round {i}: lchown: {e}"));
        }
        if let Err(e) = fs::remove_file(&g) {
            failures.push(format!("round {i}: unlink: {e}"));
        }
    }
    for t in churners {
        t.join().unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {rounds} new files could not be used: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

// ---------------------------------------------------------------------------------------------
// Hard links: behaviour
// ---------------------------------------------------------------------------------------------

/// `echo A > a; ln a b; rm b; cat a` works, and after `ln a c; rm a`, `c` still reads and
/// writes: the same script gives the same output on the disk and through the mount. `stat(2)`
/// asks for every attribute, so it reaches the daemon (the unlink made the kernel's cached ones
/// stale), which once lost the file's only remaining name.
#[test]
fn every_remaining_name_keeps_working_when_one_goes() {
    let script = r#"
        st() { python3 -c 'import os,sys; s=os.stat(sys.argv[1]); print(sys.argv[1], "nlink", s.st_nlink, "size", s.st_size)' "$1"; }
        echo A > a; ln a b; rm b
        cat a; st a
        ln a c; rm a
        cat c; st c
        echo C >> c; cat c; st c
        ln c d; echo D >> d; rm c; cat d; st d
        mkdir sub; ln d sub/e; rm d; echo E >> sub/e; cat sub/e; st sub/e
        ls -A . sub
    "#;
    for data in BOTH {
        let ws = mounted(data);
        let disk = run(&ws.plain(), script);
        assert!(disk.ends_with("[0]"), "on disk:\n{disk}");
        assert_eq!(run(&ws.path(), script), disk, "{data:?}");
    }
}

/// Writes through one name are seen through all: an open fd on one name sees a write made
/// through the other (by another process), and the other name sees the fd's writes.
#[test]
fn writes_through_one_name_are_seen_through_all() {
    for data in BOTH {
        let ws = mounted(data);
        let (a, b) = (ws.path().join("a"), ws.path().join("b"));
        fs::write(&a, "one\n").unwrap();
        fs::hard_link(&a, &b).unwrap();
        let fa = OpenOptions::new().read(true).write(true).open(&a).unwrap();
        let fb = fs::File::open(&b).unwrap();
        let pread = |f: &fs::File| {
            let mut buf = vec![0; 100];
            let n = f.read_at(&mut buf, 0).unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        sh(&ws.path(), "echo two >> b");
        assert_eq!(pread(&fa), "one\ntwo\n", "{data:?}: fd on a, write via b");
        fa.write_all_at(b"three\n", 8).unwrap();
        assert_eq!(pread(&fb), "one\ntwo\nthree\n", "{data:?}: fd on b");
        assert_eq!(sh(&ws.path(), "cat b"), "one\ntwo\nthree\n", "{data:?}");
        sh(&ws.path(), "printf 'new\\n' > a");
        assert_eq!(pread(&fb), "new\n", "{data:?}: truncated through a");
        assert_eq!(read(&b), "new\n", "{data:?}");
        drop((fa, fb));
        assert_eq!(ino(&a), ino(&b));
        assert_eq!(nlink(&a), 2);
    }
}

// ---------------------------------------------------------------------------------------------
// Hard links: history
// ---------------------------------------------------------------------------------------------

/// `rewind log NAME` of every name shows the content changes made through any name, each
/// carrying all the file's names (path and `links`), in order, with the right content.
#[test]
fn the_history_of_every_name_shows_changes_made_through_any() {
    for data in BOTH {
        let ws = mounted(data);
        let dir = ws.path();
        sh(&dir, "printf '1\\n' > a");
        rw_ok(&ws, &["sync"]);
        sh(&dir, "ln a b; mkdir sub; ln b sub/c");
        sh(&dir, "printf '2\\n' > a");
        sh(&dir, "printf '3\\n' >> b");
        sh(&dir, "printf '4\\n' >> sub/c");
        let all = set(&["a", "b", "sub/c"]);
        let want = [hash("2\n"), hash("2\n3\n"), hash("2\n3\n4\n")];
        let whole = log(&ws, None);
        let links: Vec<&str> = of_kind(&whole, "link")
            .iter()
            .map(|c| c["path"].as_str().unwrap())
            .collect();
        assert_eq!(links, ["b", "sub/c"], "{data:?}: {whole:#?}");
        for name in ["a", "b", "sub/c"] {
            let changes = log(&ws, Some(name));
            let modifies = of_kind(&changes, "modify");
            let got: Vec<&str> = modifies.iter().filter_map(|c| after(c)).collect();
            assert_eq!(
                got, want,
                "{data:?}: modifies in `rewind log {name}`: {changes:#?}"
            );
            for m in modifies {
                assert_eq!(names(m), all, "{data:?}: names of {m}");
            }
        }
        // Each name's content at each change, through the past.
        for name in ["a", "b", "sub/c"] {
            let modifies: Vec<u64> = of_kind(&log(&ws, Some(name)), "modify")
                .iter()
                .map(|c| c["id"].as_u64().unwrap())
                .collect();
            let at = |id: u64| rw_ok(&ws, &["cat", name, "--at", &id.to_string()]);
            assert_eq!(at(modifies[0]), "2\n", "{data:?}: {name}");
            assert_eq!(at(modifies[2]), "2\n3\n4\n", "{data:?}: {name}");
        }
    }
}

/// `rewind rollback --file` of either name puts back the content seen through both, in place
/// (the names stay one file).
#[test]
fn rollback_of_either_name_restores_the_content_of_both() {
    for data in BOTH {
        let ws = mounted(data);
        let dir = ws.path();
        let (a, c) = (dir.join("a"), dir.join("c"));
        sh(&dir, "printf 'v1\\n' > a");
        rw_ok(&ws, &["sync"]);
        sh(&dir, "ln a c; printf 'v2\\n' > c");
        rw_ok(&ws, &["rollback", "--file", "c"]);
        assert_eq!(
            (read(&a), read(&c)),
            ("v1\n".into(), "v1\n".into()),
            "{data:?}"
        );
        assert_eq!(ino(&a), ino(&c), "{data:?}: still one file");
        assert_eq!(nlink(&a), 2, "{data:?}");

        sh(&dir, "printf 'v3\\n' >> a");
        assert_eq!(read(&c), "v1\nv3\n");
        rw_ok(&ws, &["rollback", "--file", "a"]);
        assert_eq!(
            (read(&a), read(&c)),
            ("v1\n".into(), "v1\n".into()),
            "{data:?}"
        );
        assert_eq!(ino(&a), ino(&c), "{data:?}: still one file");
        // Writes after a rollback that shrank the file start at its restored end.
        sh(&dir, "echo more >> c");
        assert_eq!(read(&a), "v1\nmore\n", "{data:?}");
        assert_eq!(fs::metadata(&a).unwrap().len(), 8, "{data:?}");

        // Both rollbacks are in the history of both names.
        for name in ["a", "c"] {
            let restores = of_kind(&log(&ws, Some(name)), "restore").len();
            assert_eq!(restores, 2, "{data:?}: restores in `rewind log {name}`");
        }
    }
}

/// A rollback of a session that modified a linked file (through both names) restores it for
/// both names.
#[test]
fn rollback_of_a_session_restores_a_linked_file_for_every_name() {
    for data in BOTH {
        let ws = mounted(data);
        let dir = ws.path();
        sh(&dir, "printf 'base\\n' > a; ln a b; mkdir d; ln a d/x");
        rw_ok(&ws, &["sync"]);
        let work = format!(
            "cd '{}' && echo more >> b && echo again >> d/x && echo new > n",
            dir.display()
        );
        rw_ok(
            &ws,
            &["run", "--session", "agent-work", "--", "bash", "-c", &work],
        );
        assert_eq!(read(&dir.join("a")), "base\nmore\nagain\n");
        let out = rw_ok(&ws, &["rollback", "--session", "agent-work"]);
        for name in ["a", "b", "d/x"] {
            assert_eq!(read(&dir.join(name)), "base\n", "{data:?}: {name}\n{out}");
        }
        assert!(!dir.join("n").exists(), "{data:?}");
        assert_eq!(nlink(&dir.join("a")), 3, "{data:?}");
        assert_eq!(ino(&dir.join("a")), ino(&dir.join("d/x")), "{data:?}");
    }
}

/// Two files that became two names of one (a rename moved a hard link over one of them) each
/// get their own content back from a rollback to before. Written in place, the last write
/// would have won for both names (found by the model test). The undo of that rollback gives
/// each name back what it undid.
#[test]
fn files_that_became_one_are_rolled_back_to_their_own_contents() {
    for data in BOTH {
        let ws = mounted(data);
        let dir = ws.path();
        let content = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|n| fs::read_to_string(dir.join(n)).unwrap_or_else(|_| "(none)".into()))
                .collect()
        };
        sh(
            &dir,
            "printf 'c\\n' > c; printf 'b\\n' > b; ln b a; printf 'ab\\n' > a",
        );
        rw_ok(&ws, &["checkpoint", "before"]);
        // c is now a's file (and b is gone); a write through c shows through a.
        sh(&dir, "mv b c && printf 'new\\n' > c");
        assert_eq!(content(&["a", "b", "c"]), ["new\n", "(none)", "new\n"]);

        let out = rw_ok(&ws, &["rollback", "--to", "before"]);
        assert_eq!(
            content(&["a", "b", "c"]),
            ["ab\n", "ab\n", "c\n"],
            "{data:?}:\n{out}"
        );
        assert_ne!(ino(&dir.join("a")), ino(&dir.join("c")), "{data:?}");

        let undo = out
            .split("rewind rollback --session ")
            .nth(1)
            .and_then(|t| t.split('`').next())
            .unwrap_or_else(|| panic!("no undo in:\n{out}"));
        let out = rw_ok(&ws, &["rollback", "--session", undo]);
        assert_eq!(
            content(&["a", "b", "c"]),
            ["new\n", "(none)", "new\n"],
            "{data:?}:\n{out}"
        );
    }
}

/// A link made while the file is open for writing: the change written before it is recorded
/// under the names the file had then, so the past shows no new name before it was made (found
/// by the model test: `.rewind/at/POINT/` showed the link's name at a point before it).
#[test]
fn a_link_made_during_a_write_is_not_in_the_past() {
    for data in BOTH {
        let ws = mounted(data);
        let dir = ws.path();
        sh(&dir, "printf 'one two three\\n' > b; mkdir d");
        rw_ok(&ws, &["checkpoint", "before"]);
        let script = "import os\nf = open('b', 'r+')\nf.truncate(4)\nf.flush()\n\
                      os.link('b', 'd/b')\nf.write('x')\nf.close()\n";
        python(&dir, script);
        rw_ok(&ws, &["sync"]);
        assert_eq!(read(&dir.join("d/b")), "xne ");
        assert!(
            !dir.join(".rewind/at/before/d/b").exists(),
            "{data:?}: d/b in the past:\n{}",
            rw_ok(&ws, &["log"])
        );
        assert_eq!(
            read(&dir.join(".rewind/at/before/b")),
            "one two three\n",
            "{data:?}"
        );
        // d/b's history starts with its link: the truncate before it is b's alone.
        let changes = log(&ws, Some("d/b"));
        let links = of_kind(&changes, "link");
        assert_eq!(links.len(), 1, "{data:?}: {changes:#?}");
        let first = changes.iter().filter_map(|c| c["id"].as_u64()).min();
        assert_eq!(first, links[0]["id"].as_u64(), "{data:?}: {changes:#?}");
    }
}

/// Links made before the mount are learnt by the scan at mount: a change through one name is
/// in the history of the others, and a rollback of any name restores all. The same for a link
/// made while unmounted, between two mounts.
#[test]
fn links_made_before_the_mount_are_known() {
    for data in BOTH {
        let mut ws = Workspace::new();
        let dir = ws.path();
        sh(
            &dir,
            "printf 'orig\\n' > a; ln a b; mkdir s t; printf 'deep\\n' > s/x; ln s/x t/y",
        );
        mount(&mut ws, data, &[]);
        sh(&dir, "echo B >> b; echo Y >> t/y");
        for (name, all, content) in [
            ("a", set(&["a", "b"]), "orig\nB\n"),
            ("b", set(&["a", "b"]), "orig\nB\n"),
            ("s/x", set(&["s/x", "t/y"]), "deep\nY\n"),
            ("t/y", set(&["s/x", "t/y"]), "deep\nY\n"),
        ] {
            let changes = log(&ws, Some(name));
            let modifies = of_kind(&changes, "modify");
            assert_eq!(
                modifies.len(),
                1,
                "{data:?}: `rewind log {name}`: {changes:#?}"
            );
            assert_eq!(names(modifies[0]), all, "{data:?}: {name}");
            assert_eq!(after(modifies[0]), Some(hash(content).as_str()), "{data:?}");
        }
        rw_ok(&ws, &["rollback", "--file", "a"]);
        rw_ok(&ws, &["rollback", "--file", "t/y"]);
        for (name, content) in [
            ("a", "orig\n"),
            ("b", "orig\n"),
            ("s/x", "deep\n"),
            ("t/y", "deep\n"),
        ] {
            assert_eq!(read(&dir.join(name)), content, "{data:?}: {name}");
        }
        assert_eq!(ino(&dir.join("a")), ino(&dir.join("b")));

        // A third name made while unmounted.
        ws.unmount();
        sh(&dir, "ln a z");
        mount(&mut ws, data, &[]);
        sh(&dir, "echo Z >> z");
        for name in ["a", "b", "z"] {
            let modifies = log(&ws, Some(name))
                .into_iter()
                .filter(|c| c["kind"] == "modify" && after(c) == Some(&hash("orig\nZ\n")))
                .count();
            assert_eq!(
                modifies, 1,
                "{data:?}: the change through z in `rewind log {name}`"
            );
        }
        rw_ok(&ws, &["rollback", "--file", "b"]);
        for name in ["a", "b", "z"] {
            assert_eq!(read(&dir.join(name)), "orig\n", "{data:?}: {name}");
        }
    }
}

/// One name is removed while a writer has the file open through another (or through the same
/// one): the writes go on, and the change is recorded, whole, under a name that remains, in
/// the history of that name.
#[test]
fn a_write_goes_on_and_is_recorded_when_a_name_is_removed_meanwhile() {
    for data in BOTH {
        // (opened through, removed, remaining)
        for (opened, removed, remains) in [("b", "a", "b"), ("a", "a", "b")] {
            let what = format!("{data:?}: written through {opened}, {removed} removed");
            let ws = mounted(data);
            let dir = ws.path();
            sh(&dir, "printf 'start\\n' > a");
            rw_ok(&ws, &["sync"]);
            sh(&dir, "ln a b");
            let mut w = OpenOptions::new()
                .append(true)
                .open(dir.join(opened))
                .unwrap();
            w.write_all(b"first\n").unwrap();
            sh(&dir, &format!("rm {removed}"));
            w.write_all(b"second\n").unwrap();
            drop(w);
            let content = "start\nfirst\nsecond\n";
            assert_eq!(read(&dir.join(remains)), content, "{what}");
            assert!(!dir.join(removed).exists(), "{what}");

            // The removal cuts the write episode (what was written so far is recorded before
            // the delete); it goes on under the remaining name. In `rewind log` of that name the
            // modifies chain from the first content to the last, the last one under that name.
            let changes = log(&ws, Some(remains));
            let modifies = of_kind(&changes, "modify");
            assert!(!modifies.is_empty(), "{what}: {changes:#?}");
            let mut state = hash("start\n");
            for m in &modifies {
                assert_eq!(m["before"]["hash"], state, "{what}: a chain: {changes:#?}");
                state = after(m).unwrap().to_string();
            }
            assert_eq!(
                state,
                hash(content),
                "{what}: the whole write: {changes:#?}"
            );
            let last = modifies.last().unwrap();
            assert_eq!(
                last["path"], remains,
                "{what}: recorded under a remaining name: {last}"
            );
            let deletes = of_kind(&log(&ws, Some(removed)), "delete").len();
            assert_eq!(deletes, 1, "{what}");
            // And it rolls back, to just after the link was made. The removed name is part of
            // the first modify, and was deleted since by a change outside the selection: it may
            // be skipped (exit status 1), and nothing else.
            let link = of_kind(&changes, "link")[0]["id"].to_string();
            let mut args: Vec<OsString> = vec!["-C".into(), dir.clone().into()];
            args.extend(["rollback", "--file", remains, "--to", &link].map(OsString::from));
            let out = ws.rewind(&args);
            let report = String::from_utf8_lossy(&out.stdout);
            let skips: Vec<&str> = report.lines().filter(|l| l.starts_with("skip")).collect();
            assert!(
                out.status.success() || out.status.code() == Some(1),
                "{what}: {report}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                skips
                    .iter()
                    .all(|l| l.split_whitespace().nth(1) == Some(&format!("{removed}:"))),
                "{what}: {report}"
            );
            assert_eq!(read(&dir.join(remains)), "start\n", "{what}");
        }
    }
}
