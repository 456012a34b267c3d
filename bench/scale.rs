//! Scale benchmark: the figures of "history at scale" that depend on how much was recorded, not
//! on how fast, each printed beside its target.
//!
//! - `mem`: the daemon's resident memory after 5 rounds (`--rounds N`) of writing 20,000 small
//!   files (`--files N`) through a mount (100,000 recorded changes).
//! - `cdc`: stored content growth when 10 bytes are inserted in the middle of a 256 MiB file,
//!   and when 2 bytes are appended to it three times.
//! - `gc`: what `rewind gc --max-size 1M` gives back on disk (`du` of the store) after a 256
//!   MiB file written through a mount was overwritten twice (its 256 MiB now only history).
//! - `gc-mounted`: the same with the workspace mounted, gc run through the daemon.
//! - `read`: reading commands (`log -n 5`, `status`, `cat --at`, `turns`, a file under
//!   `.rewind/at/`) on a store with `--changes N` live changes and as many removed by gc,
//!   beside the same on a store of 1,000 (500 live, 500 removed).
//! - `delta`: the worst case of reading a version stored as a delta: versions of a text file
//!   (64 KiB, 256 KiB, 1 MiB) until its chain is as long as it may be, then the deepest one
//!   read back, beside a version of the same size stored whole.
//! - `git`: a real repository's first-parent history replayed with `git checkout -f` in a
//!   mount (this project's own, or `--repo PATH`; `--commits N` takes the newest N): the
//!   content rewind stored, as recorded and after a `rewind gc --repack` through the daemon (which
//!   removes nothing and repacks), beside the pack `git gc --aggressive` makes of the same
//!   commits, and how long the slowest version takes to read back.
//!
//! - `capture`: storing a new `--mib` MiB file (W4's repeating block, then noise) as the
//!   recorder does after a create: wall and CPU time.
//!
//! - `tree`: `rm -rf` of a tree of 50,000 small files through a mount, and its rollback, beside
//!   a native `cp -a` of the same tree (caches dropped before each).
//!
//! - `gc-stall`: how long a change waits to be recorded while gc runs on a store of
//!   `--changes N` changes: a thread records one every millisecond during a gc that removes
//!   nothing, then during one that removes half of them, beside the same thread with no gc.
//!
//! `cargo bench --bench scale [-- --only mem,cdc,capture,gc,gc-mounted,read,delta,git,tree,gc-stall] [--files N]
//! [--rounds N] [--mib N] [--changes N] [--repo PATH] [--commits N] [--tree N]`. `mem`, `gc`,
//! `read`, `git` and `tree` need FUSE (`tree` root, to drop caches).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rewind::history::History;
use rewind::history::change::{Change, ChangeKind, FileKind, FileState};
use rewind::store::{Hash, Store};

const REWIND: &str = env!("CARGO_BIN_EXE_rewind");
const MIB: f64 = (1 << 20) as f64;

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only: Option<String> = arg(&args, "--only");
    let want = |w: &str| only.as_ref().is_none_or(|o| o.split(',').any(|x| x == w));
    let files: usize = arg(&args, "--files").unwrap_or(20_000);
    let rounds: usize = arg(&args, "--rounds").unwrap_or(5);
    let mib: usize = arg(&args, "--mib").unwrap_or(256);
    let work = std::env::var_os("REWIND_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rewind-bench-scale"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();

    let mut rows: Vec<(String, String, &str)> = Vec::new();
    if want("cdc") {
        let (insert, appends) = cdc(&work.join("cdc"), mib);
        rows.push((
            format!("insert 10 bytes in the middle of a {mib} MiB file: stored content growth"),
            format!("{:.2} MiB", insert as f64 / MIB),
            "≤ 8 MiB",
        ));
        rows.push((
            format!("three 2-byte appends to a {mib} MiB file: stored content growth"),
            format!("{:.2} MiB", appends as f64 / MIB),
            "≤ 8 MiB",
        ));
    }
    if want("capture") {
        for (what, data) in [
            ("W4's repeating 1 MiB block", pattern(mib << 20)),
            ("noise", noise(mib << 20, 0x2545_f491_4f6c_dd1d)),
        ] {
            let (wall, cpu) = capture(&work.join("capture"), &data);
            rows.push((
                format!("store a new {mib} MiB file ({what}) as a create's capture does"),
                format!(
                    "{:.0} MiB/s ({wall:.2} s, {cpu:.2} s of CPU)",
                    mib as f64 / wall
                ),
                "",
            ));
        }
    }
    if want("mem") {
        let (rss, peak, idle) = memory(&work.join("mem"), files, rounds);
        rows.push((
            format!(
                "daemon RSS after {} recorded changes ({rounds} × {files} small files)",
                rounds * files
            ),
            format!(
                "{:.0} MiB (peak {:.0} MiB; {:.0} MiB idle 15 s later)",
                rss as f64 / MIB,
                peak as f64 / MIB,
                idle as f64 / MIB
            ),
            "≤ 100 MiB",
        ));
    }
    for mounted in [false, true] {
        if !want(if mounted { "gc-mounted" } else { "gc" }) {
            continue;
        }
        let (before, after, history) = gc(&work.join("gc"), mib, mounted);
        let freed = before as f64 - after as f64;
        rows.push((
            format!(
                "delete {mib} MiB of history, then `gc --max-size 1M` {}: disk freed (`du` of the store)",
                if mounted { "mounted" } else { "unmounted" }
            ),
            format!(
                "{:.1} MiB of {:.0} MiB ({:.0} %; {:.1} → {:.1} MiB)",
                freed / MIB,
                history as f64 / MIB,
                100.0 * freed / history as f64,
                before as f64 / MIB,
                after as f64 / MIB
            ),
            "≥ 90 % of it",
        ));
    }
    if want("gc-stall") {
        let changes: usize = arg(&args, "--changes").unwrap_or(120_000);
        for (what, gc_time, stall) in gc_stall(&work.join("gc-stall"), changes) {
            rows.push((
                format!("the longest a change waited to be recorded, {what}, {changes} changes"),
                match gc_time {
                    Some(t) => format!("{:.1} ms (gc: {:.2} s)", stall * 1e3, t),
                    None => format!("{:.1} ms", stall * 1e3),
                },
                "",
            ));
        }
    }
    if want("read") {
        let changes: usize = arg(&args, "--changes").unwrap_or(120_000);
        let small = reading(&work.join("read-1k"), 500);
        let large = reading(&work.join("read"), changes);
        for ((what, t1), (_, tn)) in small.iter().zip(&large) {
            rows.push((
                format!("`{what}` after gc, {changes} live and {changes} removed changes"),
                format!(
                    "{:.1} ms (1k changes: {:.1} ms, {:.1}×)",
                    tn * 1e3,
                    t1 * 1e3,
                    tn / t1
                ),
                "≤ 2× its time at 1k",
            ));
        }
    }
    if want("delta") {
        for kib in [64, 256, 1024] {
            let (depth, deepest, whole, per_version) = delta_read(&work.join("delta"), kib << 10);
            rows.push((
                format!(
                    "read the deepest version of a {kib} KiB text file (a chain of {depth} \
                     deltas; each version stored in {per_version} bytes)"
                ),
                format!(
                    "{:.2} ms (a version stored whole: {:.2} ms)",
                    deepest.as_secs_f64() * 1e3,
                    whole.as_secs_f64() * 1e3
                ),
                "fast",
            ));
        }
    }
    if want("git") {
        let repo: PathBuf =
            arg(&args, "--repo").unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let commits: usize = arg(&args, "--commits").unwrap_or(usize::MAX);
        let r = replay(&work.join("git"), &repo, commits);
        for (when, st) in [
            ("as recorded", &r.before_gc),
            ("after `rewind gc --repack`", &r.after_gc),
        ] {
            rows.push((
                format!(
                    "{} commits of {} replayed with `git checkout -f` in the mount, {when}: \
                     stored content vs `git gc --aggressive` of the same commits",
                    r.commits,
                    repo.display()
                ),
                format!(
                    "{:.2}× git ({:.2} MiB stored in {} blobs, {} of them deltas in {:.2} MiB; \
                     git's pack {:.2} MiB with {} blobs; store on disk {:.2} MiB)",
                    st.stored as f64 / r.pack as f64,
                    st.stored as f64 / MIB,
                    st.blobs,
                    st.deltas,
                    st.delta_bytes as f64 / MIB,
                    r.pack as f64 / MIB,
                    r.versions,
                    st.disk as f64 / MIB,
                ),
                "≤ 0.8× git",
            ));
            rows.push((
                format!("reading every version stored, {when}: slowest (deepest delta chain)"),
                format!(
                    "{:.2} ms ({} bytes, chain of {}; read again: {:.2} ms); the deepest \
                     chain ({}) read again: {:.2} ms; all {} in {:.2} s",
                    st.slowest.as_secs_f64() * 1e3,
                    st.slowest_size,
                    st.slowest_depth,
                    st.slowest_again.as_secs_f64() * 1e3,
                    st.deepest.1,
                    st.deepest.0.as_secs_f64() * 1e3,
                    st.blobs,
                    st.read_all.as_secs_f64()
                ),
                "fast",
            ));
        }
        rows.push((
            "that `rewind gc --repack` (mounted; removes nothing, repacks)".to_string(),
            format!("{:.2} s", r.gc_time.as_secs_f64()),
            "",
        ));
    }
    if want("tree") {
        let n: usize = arg(&args, "--tree").unwrap_or(50_000);
        let (rm, rollback, cp) = tree(&work.join("tree"), n);
        rows.push((
            format!("`rm -rf` of a {n}-file tree through the mount, then its rollback, vs `cp -a`"),
            format!(
                "rm -rf {rm:.2} s; rollback {rollback:.2} s; cp -a {cp:.2} s: {:.2}× cp -a",
                rollback / cp
            ),
            "rollback ≤ 3× cp -a",
        ));
    }
    println!("| measured | now | target |");
    println!("|---|---|---|");
    for (what, now, target) in rows {
        println!("| {what} | {now} | {target} |");
    }
    let _ = fs::remove_dir_all(&work);
}

/// Deterministic incompressible bytes (xorshift), so compression cannot hide what is stored.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// W4's content: one 1 MiB block, repeated.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i % (1 << 20)) * 7 % 251) as u8)
        .collect()
}

/// This process's CPU time (user and system, every thread's), in seconds, from
/// `/proc/self/stat` (in ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // utime and stime are fields 14 and 15; the state (field 3) is the first after the name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Store `data`, written to a file first (and read back from the page cache, as the recorder
/// reads a file just written), into a new store: wall time and CPU time.
fn capture(dir: &Path, data: &[u8]) -> (f64, f64) {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    let file = dir.join("new.bin");
    fs::write(&file, data).unwrap();
    let store = Store::open(&dir.join("store")).unwrap();
    let _pins = store.pin_scope();
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let (_, size) = store
        .put_file_reader(b"new.bin", fs::File::open(&file).unwrap())
        .unwrap();
    let out = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    assert_eq!(size, data.len() as u64);
    out
}

/// Store growth (the bytes of stored blob values) for an insert in the middle and for appends.
fn cdc(dir: &Path, mib: usize) -> (u64, u64) {
    let store = Store::open(dir).unwrap();
    let stored = |store: &Store| store.stats().unwrap().blob_bytes;
    let mut data = noise(mib << 20, 0x9e37_79b9_7f4a_7c15);
    let t = Instant::now();
    store.put_blob_reader(&data[..]).unwrap();
    eprintln!(
        "stored {mib} MiB in {:.1} s ({:.0} MiB/s)",
        t.elapsed().as_secs_f64(),
        mib as f64 / t.elapsed().as_secs_f64()
    );
    let before = stored(&store);
    let middle = data.len() / 2;
    data.splice(middle..middle, *b"0123456789");
    store.put_blob_reader(&data[..]).unwrap();
    let insert = stored(&store) - before;

    let before = stored(&store);
    for _ in 0..3 {
        data.extend_from_slice(b"+\n");
        store.put_blob_reader(&data[..]).unwrap();
    }
    let appends = stored(&store) - before;
    (insert, appends)
}

/// `du` of the store before and after gc, and the bytes of history gc may remove.
fn gc(work: &Path, mib: usize, mounted: bool) -> (u64, u64, u64) {
    let _ = fs::remove_dir_all(work);
    let ws = work.join("ws");
    let store = work.join("store");
    let data = work.join("data");
    fs::create_dir_all(&ws).unwrap();
    mount(work, &data, &ws, &store);
    let big = noise(mib << 20, 0x2545_f491_4f6c_dd1d);
    fs::write(ws.join("big.bin"), &big).unwrap();
    rewind(&ws, &data, &["sync".as_ref()]);
    // Overwritten twice: the newest change (small to small) no longer needs the big content.
    fs::write(ws.join("big.bin"), "small\n").unwrap();
    rewind(&ws, &data, &["sync".as_ref()]);
    fs::write(ws.join("big.bin"), "smaller\n").unwrap();
    rewind(&ws, &data, &["sync".as_ref()]);
    if !mounted {
        rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    }
    let before = du(&store);
    rewind(
        &ws,
        &data,
        &["gc".as_ref(), "--max-size".as_ref(), "1M".as_ref()],
    );
    let after = du(&store);
    if mounted {
        rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    }
    (before, after, big.len() as u64)
}

/// Seconds each reading command takes (median of 5 runs, the first run not counted) on a
/// store with `live` changes kept and as many removed by gc: `live` files each created, then
/// modified, and gc told to remove everything older than the modifications.
fn reading(work: &Path, live: usize) -> Vec<(String, f64)> {
    use rewind::history::db::{Extra, GcPolicy};
    use std::sync::Arc;

    let ws = work.join("ws");
    let store_dir = work.join("store");
    let data = work.join("data");
    fs::create_dir_all(&ws).unwrap();
    mount(work, &data, &ws, &store_dir);
    fs::write(ws.join("seed.txt"), "seed\n").unwrap();
    // The folders are made through the mount, so views of the past have them.
    for d in 0..100 {
        fs::create_dir(ws.join(format!("d{d}"))).unwrap();
    }
    rewind(&ws, &data, &["sync".as_ref()]);
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);

    let t = Instant::now();
    let history = History::new(Arc::new(Store::open(&store_dir).unwrap()));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let start = now - 3_600_000_000_000;
    let mut split = 0;
    for round in 0..2u64 {
        for batch in (0..live).collect::<Vec<_>>().chunks(1000) {
            let _pins = history.store().pin_scope();
            let changes: Vec<Change> = batch
                .iter()
                .map(|&i| {
                    let content = |round: u64| format!("round {round} of file {i}\n");
                    bench_change(
                        if round == 0 {
                            ChangeKind::Create
                        } else {
                            ChangeKind::Modify
                        },
                        format!("d{}/f{i}.txt", i % 100),
                        start + (round * live as u64 + i as u64) * 1000,
                        (round == 1).then(|| stored_file(&history, content(0).as_bytes())),
                        Some(stored_file(&history, content(round).as_bytes())),
                        i as u64,
                    )
                })
                .collect();
            let extra = Extra::default();
            history
                .record_many(changes.into_iter().map(|c| (c, &extra)).collect())
                .unwrap();
        }
        if round == 0 {
            split = start + live as u64 * 1000;
        }
    }
    let report = history
        .gc(&GcPolicy {
            older_than_ns: Some(split),
            max_bytes: None,
            dry_run: false,
            repack: false,
        })
        .unwrap();
    let last = history.store().stats().unwrap().last_id;
    drop(history);
    eprintln!(
        "{live} live changes: recorded and gc'd ({} removed) in {:.0} s",
        report.changes_removed,
        t.elapsed().as_secs_f64()
    );

    let at = (last - live as u64 / 2).to_string();
    let probe = format!("d{}/f{}.txt", (live / 2) % 100, live / 2);
    let commands: Vec<(String, Vec<String>)> = vec![
        (
            "log -n 5".into(),
            vec!["log".into(), "-n".into(), "5".into()],
        ),
        ("status".into(), vec!["status".into()]),
        (
            "cat --at".into(),
            vec!["cat".into(), "--at".into(), at.clone(), probe.clone()],
        ),
        ("turns".into(), vec!["turns".into()]),
    ];
    let time = |dir: &Path, args: &[String]| -> f64 {
        let mut runs: Vec<f64> = (0..6)
            .map(|_| {
                let t = Instant::now();
                let a: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
                rewind(dir, &data, &a);
                t.elapsed().as_secs_f64()
            })
            .skip(1)
            .collect();
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let mut out = Vec::new();
    for (name, args) in &commands {
        out.push((format!("rewind {name}"), time(&ws, args)));
        eprintln!("{live}: {:?}", out.last().unwrap());
    }
    mount(work, &data, &ws, &store_dir);
    for (name, args) in &commands[..1] {
        out.push((format!("rewind {name}, mounted"), time(&ws, args)));
    }
    let file = ws.join(".rewind/at").join(&at).join(&probe);
    let mut runs: Vec<f64> = (0..6)
        .map(|_| {
            let t = Instant::now();
            fs::read(&file).unwrap();
            t.elapsed().as_secs_f64()
        })
        .skip(1)
        .collect();
    runs.sort_by(f64::total_cmp);
    out.push(("read .rewind/at/ID/FILE".into(), runs[runs.len() / 2]));
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    out
}

/// A change recorded every millisecond on another thread, while nothing else runs, during a gc
/// of a store of `changes` changes that removes none, then during one that removes half: the
/// longest a record took, and how long each gc took.
fn gc_stall(work: &Path, changes: usize) -> Vec<(&'static str, Option<f64>, f64)> {
    use rewind::history::db::{Extra, GcPolicy};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fs::create_dir_all(work).unwrap();
    let history = Arc::new(History::new(Arc::new(
        Store::open(&work.join("store")).unwrap(),
    )));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let start = now - 3_600_000_000_000;
    let change = |i: u64, time_ns: u64| {
        let content = format!("version {i}\n");
        bench_change(
            ChangeKind::Modify,
            format!("d{}/f{}.txt", i % 100, i % 5000),
            time_ns,
            None,
            Some(stored_file(&history, content.as_bytes())),
            i,
        )
    };
    let extra = Extra::default();
    for batch in (0..changes as u64).collect::<Vec<_>>().chunks(1000) {
        let _pins = history.store().pin_scope();
        let batch: Vec<Change> = batch.iter().map(|&i| change(i, start + i * 1000)).collect();
        history
            .record_many(batch.into_iter().map(|c| (c, &extra)).collect())
            .unwrap();
    }
    let half = start + changes as u64 / 2 * 1000;
    // One change a millisecond; the longest a record took while `busy` ran.
    let longest_during = |busy: &dyn Fn()| -> f64 {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (history, stop) = (history.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut longest = 0f64;
                let mut i = 1u64 << 40;
                while !stop.load(Ordering::Relaxed) {
                    let extra = Extra::default();
                    let _pins = history.store().pin_scope();
                    let content = format!("version {i}\n");
                    let c = bench_change(
                        ChangeKind::Modify,
                        format!("d{}/f{}.txt", i % 100, i % 5000),
                        now + i,
                        None,
                        Some(stored_file(&history, content.as_bytes())),
                        i,
                    );
                    let t = Instant::now();
                    history.record_many(vec![(c, &extra)]).unwrap();
                    longest = longest.max(t.elapsed().as_secs_f64());
                    i += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                longest
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        busy();
        std::thread::sleep(std::time::Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    };
    let gc = |older_than_ns: u64| {
        let t = Instant::now();
        let report = history
            .gc(&GcPolicy {
                older_than_ns: Some(older_than_ns),
                max_bytes: None,
                dry_run: false,
                repack: false,
            })
            .unwrap();
        eprintln!("gc-stall: gc removed {} changes", report.changes_removed);
        t.elapsed().as_secs_f64()
    };
    let idle = longest_during(&|| std::thread::sleep(std::time::Duration::from_secs(1)));
    let took = std::cell::Cell::new(0.0);
    let none = longest_during(&|| took.set(gc(start)));
    let none_took = took.get();
    let half_stall = longest_during(&|| took.set(gc(half)));
    vec![
        ("no gc (1 s)", None, idle),
        ("during a gc that removes none", Some(none_took), none),
        (
            "during a gc that removes half",
            Some(took.get()),
            half_stall,
        ),
    ]
}

/// A change of a file by agent `bench`, as the benchmarks record them straight into a store,
/// in session `s{n % 10}`.
fn bench_change(
    kind: ChangeKind,
    path: String,
    time_ns: u64,
    before: Option<FileState>,
    after: Option<FileState>,
    n: u64,
) -> Change {
    Change {
        id: 0,
        time_ns,
        kind,
        path: path.into_bytes(),
        from: None,
        before,
        after,
        session: format!("s{}", n % 10),
        agent: "bench".into(),
        pid: 1,
        process: "bench".into(),
        links: Vec::new(),
        groups: Vec::new(),
        turn: None,
        tool: None,
        uid: None,
    }
}

/// `content` stored, as the state of a file holding it.
fn stored_file(history: &History, content: &[u8]) -> FileState {
    FileState {
        kind: FileKind::File,
        size: content.len() as u64,
        mode: 0o644,
        hash: Some(history.store().put_blob(content).unwrap()),
        owner: None,
    }
}

/// What `du` counts: allocated blocks of every file below `dir`.
fn du(dir: &Path) -> u64 {
    let out = Command::new("du").arg("-sB1").arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// `rewind mount WS --store STORE`, run in `work`.
fn mount(work: &Path, data: &Path, ws: &Path, store: &Path) {
    rewind(
        work,
        data,
        &[
            "mount".as_ref(),
            ws.as_os_str(),
            "--store".as_ref(),
            store.as_os_str(),
        ],
    );
}

fn rewind(dir: &Path, data: &Path, args: &[&std::ffi::OsStr]) {
    let out = Command::new(REWIND)
        .args(args)
        .current_dir(dir)
        .env("XDG_DATA_HOME", data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rewind {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Text of `len` bytes in 64-byte lines as of `version` (each version edits every 50th line).
fn text(len: usize, version: usize) -> Vec<u8> {
    let mut out = String::with_capacity(len);
    for i in 0..len / 64 {
        let edited = match version.checked_sub(i % 50) {
            Some(since) => format!(" // v{}", version - since % 50),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:<63}\n",
            format!("let v{i} = f({i:x});{edited}")
        ));
    }
    out.into_bytes()
}

/// Store versions of a `len`-byte text file until its delta chain is as long as it may be;
/// the time to read the deepest version (median of 5) and a version stored whole, the chain's
/// length and the bytes stored per delta.
fn delta_read(dir: &Path, len: usize) -> (u32, std::time::Duration, std::time::Duration, u64) {
    use rewind::store::blobs::max_depth;
    let _ = fs::remove_dir_all(dir);
    let store = Store::open(dir).unwrap();
    let depth = u32::from(max_depth(len));
    let mut hashes = Vec::new();
    for v in 0..=depth as usize {
        let data = text(len, v);
        let (hash, _) = store.put_file_reader(b"f.rs", &data[..]).unwrap();
        record_version(&store, hash, data.len() as u64);
        hashes.push(hash);
    }
    let depths: std::collections::HashMap<_, _> = store
        .blob_depths()
        .unwrap()
        .into_iter()
        .map(|(h, d, size)| (h, (d, size)))
        .collect();
    let (first, last) = (hashes[0], *hashes.last().unwrap());
    assert_eq!(depths[&first].0, 0);
    assert_eq!(depths[&last].0, depth, "the chain reaches its bound");
    let per_version = depths[&last].1;
    let time = |hash| {
        let mut runs: Vec<_> = (0..5)
            .map(|_| {
                let t = Instant::now();
                store.verify_blob(&hash).unwrap();
                t.elapsed()
            })
            .collect();
        runs.sort();
        runs[2]
    };
    (depth, time(last), time(first), per_version)
}

/// Record a change whose content is `hash`, so the next version of `f.rs` finds it.
fn record_version(store: &Store, hash: Hash, size: u64) {
    use rewind::store::{ChangeRecord, Extra, StateRecord};
    let change = ChangeRecord {
        id: 0,
        time_ns: 1,
        kind: 1,
        path: b"f.rs".to_vec(),
        from: None,
        before: None,
        after: Some(StateRecord {
            kind: 0,
            size,
            mode: 0o644,
            hash: Some(hash.0),
            owner: None,
        }),
        session: "bench".into(),
        agent: "bench".into(),
        pid: 1,
        process: "bench".into(),
        links: Vec::new(),
        groups: Vec::new(),
        turn: None,
        tool: None,
        uid: None,
    };
    store
        .record_many(vec![(change, &Extra::default())])
        .unwrap();
}

/// What [`replay`] measured.
struct Replay {
    commits: usize,
    /// The store as the replay left it, and after `rewind gc --repack`.
    before_gc: Stored,
    after_gc: Stored,
    gc_time: std::time::Duration,
    /// The pack of the same commits after `git gc --aggressive`, and how many file versions
    /// (blobs) it holds.
    pack: u64,
    versions: usize,
}

/// What a store holds.
struct Stored {
    /// Stored content (the bytes of the store's blob values) and the store's files (`du`).
    stored: u64,
    disk: u64,
    blobs: u64,
    deltas: u64,
    delta_bytes: u64,
    /// The slowest blob to read back, its size and delta chain; all blobs read once.
    slowest: std::time::Duration,
    slowest_size: u64,
    slowest_depth: u32,
    /// The slowest one read again (median of 5), and the one with the deepest chain (its
    /// depth).
    slowest_again: std::time::Duration,
    deepest: (std::time::Duration, u32),
    read_all: std::time::Duration,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Replay the newest `limit` first-parent commits of `repo` in a mount, each checked out with
/// `git checkout -f` (git's own directory outside the mount, so only the tracked files are
/// written through it), and compare the content rewind stored with git's pack of the same
/// commits (the same trees, in a linear history, `git gc --aggressive`).
fn replay(work: &Path, repo: &Path, limit: usize) -> Replay {
    let ws = work.join("ws");
    let store = work.join("store");
    let data = work.join("data");
    let clone = work.join("clone");
    fs::create_dir_all(&ws).unwrap();
    git(
        work,
        &[
            "clone",
            "-q",
            "--no-checkout",
            repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let mut commits: Vec<String> = git(&clone, &["rev-list", "--first-parent", "HEAD"])
        .lines()
        .take(limit)
        .map(str::to_owned)
        .collect();
    commits.reverse();

    mount(work, &data, &ws, &store);
    let git_dir = format!("--git-dir={}", clone.join(".git").display());
    let work_tree = format!("--work-tree={}", ws.display());
    let t = Instant::now();
    for (i, commit) in commits.iter().enumerate() {
        git(&ws, &[&git_dir, &work_tree, "checkout", "-q", "-f", commit]);
        // Every commit's files recorded before the next checkout replaces them (a new file's
        // create is held back for a moment, and one replaced meanwhile is never recorded).
        rewind(&ws, &data, &["sync".as_ref()]);
        if i % 20 == 19 {
            eprintln!(
                "replayed {} of {} commits at {:.0} s",
                i + 1,
                commits.len(),
                t.elapsed().as_secs_f64()
            );
        }
    }
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    let before_gc = stored(&store, "as recorded");
    // Then `rewind gc --repack` through the daemon, as a user would run it: it removes nothing here
    // (everything is newer than its --keep) and repacks (older versions as deltas on newer).
    mount(work, &data, &ws, &store);
    let t = Instant::now();
    rewind(
        &ws,
        &data,
        &[
            "gc".as_ref(),
            "--keep".as_ref(),
            "36500d".as_ref(),
            "--repack".as_ref(),
        ],
    );
    let gc_time = t.elapsed();
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    let after_gc = stored(&store, "after `rewind gc --repack`");

    // The same trees as a linear history of their own, fetched alone into an empty repository.
    let mut parent: Option<String> = None;
    for (i, commit) in commits.iter().enumerate() {
        let tree = format!("{commit}^{{tree}}");
        let message = format!("replay {i}");
        let mut args = vec!["commit-tree", &tree, "-m", &message];
        if let Some(p) = &parent {
            args.extend(["-p", p]);
        }
        parent = Some(git(&clone, &args).trim().to_owned());
    }
    let head = parent.unwrap();
    git(&clone, &["update-ref", "refs/heads/replay", &head]);
    let packed = work.join("packed");
    git(work, &["init", "-q", "--bare", packed.to_str().unwrap()]);
    git(
        &packed,
        &[
            "fetch",
            "-q",
            clone.to_str().unwrap(),
            "refs/heads/replay:refs/heads/replay",
        ],
    );
    git(&packed, &["gc", "-q", "--aggressive", "--prune=now"]);
    let versions = git(&packed, &["rev-list", "--objects", "--all"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|object| git(&packed, &["cat-file", "-t", object]).trim() == "blob")
        .count();
    let pack = fs::read_dir(packed.join("objects/pack"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    Replay {
        commits: commits.len(),
        before_gc,
        after_gc,
        gc_time,
        pack,
        versions,
    }
}

/// The content a store holds (closed), and how long reading each version back takes.
fn stored(store: &Path, when: &str) -> Stored {
    let disk = du(store);
    let store = Store::open_read_only(store).unwrap();
    let stats = store.stats().unwrap();
    let (mut slowest, mut slowest_size, mut slowest_depth) = (Default::default(), 0, 0);
    let mut slowest_hash = None;
    let mut deltas = 0;
    let t = Instant::now();
    let mut delta_bytes = 0;
    for (hash, depth, stored) in store.blob_depths().unwrap() {
        deltas += u64::from(depth > 0);
        if depth > 0 {
            delta_bytes += stored;
        }
        let one = Instant::now();
        let size = store.verify_blob(&hash).unwrap();
        if one.elapsed() > slowest {
            (slowest, slowest_size, slowest_depth) = (one.elapsed(), size, depth);
            slowest_hash = Some(hash);
        }
    }
    let read_all = t.elapsed();
    // One read each, in hash order, on a shared machine: the slowest may be a moment the
    // process was not running. Read again (median of 5) it says what the read itself costs,
    // and so for the version with the deepest chain.
    let again = |hash: &Hash| {
        let mut times: Vec<_> = (0..5)
            .map(|_| {
                let one = Instant::now();
                store.verify_blob(hash).unwrap();
                one.elapsed()
            })
            .collect();
        times.sort();
        times[2]
    };
    let depths = store.blob_depths().unwrap();
    let slowest_again = slowest_hash.as_ref().map_or(Default::default(), again);
    let (deepest_hash, deepest_depth, _) = depths
        .iter()
        .max_by_key(|(_, d, _)| *d)
        .copied()
        .expect("a blob");
    let deepest = (again(&deepest_hash), deepest_depth);
    eprintln!(
        "{when}: {deltas} deltas: {:.2} MiB; the rest stored whole: {:.2} MiB",
        delta_bytes as f64 / MIB,
        (stats.blob_bytes - delta_bytes) as f64 / MIB
    );
    Stored {
        stored: stats.blob_bytes,
        disk,
        blobs: stats.blobs,
        deltas,
        delta_bytes,
        slowest,
        slowest_size,
        slowest_depth,
        slowest_again,
        deepest,
        read_all,
    }
}

/// The daemon's resident and peak resident memory after `rounds * files` recorded changes, and
/// its resident memory 15 s later, idle.
fn memory(work: &Path, files: usize, rounds: usize) -> (u64, u64, u64) {
    let ws = work.join("ws");
    let store = work.join("store");
    let data = work.join("data");
    fs::create_dir_all(&ws).unwrap();
    mount(work, &data, &ws, &store);
    let pid = daemon_pid(&data);
    let t = Instant::now();
    for round in 0..rounds {
        for i in 0..files {
            let dir = ws.join(format!("d{}", i % 100));
            if round == 0 && i < 100 {
                fs::create_dir(&dir).unwrap();
            }
            fs::write(
                dir.join(format!("f{i}.txt")),
                format!("round {round} of file {i}\n"),
            )
            .unwrap();
        }
        rewind(&ws, &data, &["sync".as_ref()]);
        eprintln!(
            "round {} done at {:.0} s: RSS {:.0} MiB",
            round + 1,
            t.elapsed().as_secs_f64(),
            status_kib(pid, "VmRSS:") as f64 / 1024.0
        );
    }
    let figures = (
        status_kib(pid, "VmRSS:") * 1024,
        status_kib(pid, "VmHWM:") * 1024,
    );
    // The daemon gives freed memory back once a burst is over (its trim thread looks every 5
    // s): what it keeps while idle.
    std::thread::sleep(std::time::Duration::from_secs(15));
    let idle = status_kib(pid, "VmRSS:") * 1024;
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    (figures.0, figures.1, idle)
}

fn drop_caches() {
    let _ = Command::new("sync").status();
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
}

fn timed(dir: &Path, script: &str) -> f64 {
    let t = Instant::now();
    let ok = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "failed in {}: {script}", dir.display());
    t.elapsed().as_secs_f64()
}

/// Seconds for `rm -rf` of an `n`-file tree (100 folders) recorded through a mount, for its
/// rollback, and for a native `cp -a` of the same tree.
fn tree(work: &Path, n: usize) -> (f64, f64, f64) {
    let ws = work.join("ws");
    let store = work.join("store");
    let data = work.join("data");
    let native = work.join("native");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(native.join("t")).unwrap();
    for d in 0..100 {
        fs::create_dir(native.join(format!("t/d{d}"))).unwrap();
    }
    for i in 0..n {
        fs::write(
            native.join(format!("t/d{}/f{i}.txt", i % 100)),
            format!("file {i}\n").repeat(1 + i % 50),
        )
        .unwrap();
    }
    drop_caches();
    let cp = timed(work, "cp -a native/t native/copy");
    mount(work, &data, &ws, &store);
    timed(work, "cp -a native/t ws/t");
    rewind(&ws, &data, &["sync".as_ref()]);
    rewind(&ws, &data, &["checkpoint".as_ref(), "tree".as_ref()]);
    drop_caches();
    let rm = timed(&ws, "rm -rf t");
    rewind(&ws, &data, &["sync".as_ref()]);
    drop_caches();
    let t = Instant::now();
    rewind(
        &ws,
        &data,
        &["rollback".as_ref(), "--to".as_ref(), "tree".as_ref()],
    );
    let rollback = t.elapsed().as_secs_f64();
    // Every file is back.
    timed(&ws, &format!("test $(find t -type f | wc -l) = {n}"));
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    (rm, rollback, cp)
}

/// The daemon's pid, from the registration `rewind mount` wrote.
fn daemon_pid(data: &Path) -> u32 {
    let entry = fs::read_dir(data.join("rewind/mounts"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let reg: serde_json::Value = serde_json::from_str(&fs::read_to_string(entry).unwrap()).unwrap();
    reg["pid"].as_u64().unwrap() as u32
}

/// A `/proc/PID/status` figure in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
