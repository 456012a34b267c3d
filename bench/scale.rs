//! Scale benchmark: the figures of "history at scale" that depend on how much was recorded, not
//! on how fast, each printed beside its target.
//!
//! - `mem`: the daemon's resident memory after 5 rounds (`--rounds N`) of writing 20,000 small
//!   files (`--files N`) through a mount (100,000 recorded changes).
//! - `cdc`: stored content growth when 10 bytes are inserted in the middle of a 256 MiB file,
//!   and when 2 bytes are appended to it three times.
//!
//! - `gc`: what `rewind gc --max-size 1M` gives back on disk (`du` of the store) after a 256
//!   MiB file written through a mount was overwritten twice (its 256 MiB now only history).
//!
//! - `gc-mounted`: the same with the workspace mounted, gc run through the daemon.
//! - `read`: reading commands (`log -n 5`, `status`, `cat --at`, `turns`, a file under
//!   `.rewind/at/`) on a store with `--changes N` live changes and as many removed by gc,
//!   beside the same on a store of 1,000 (500 live, 500 removed).
//!
//! `cargo bench --bench scale [-- --only mem,cdc,gc,gc-mounted,read] [--files N] [--rounds N]
//! [--mib N] [--changes N]`. `mem`, `gc` and `read` need FUSE.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rewind::store::Store;

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
    if want("mem") {
        let (rss, peak) = memory(&work.join("mem"), files, rounds);
        rows.push((
            format!(
                "daemon RSS after {} recorded changes ({rounds} × {files} small files)",
                rounds * files
            ),
            format!(
                "{:.0} MiB (peak {:.0} MiB)",
                rss as f64 / MIB,
                peak as f64 / MIB
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
    rewind(
        work,
        &data,
        &[
            "mount".as_ref(),
            ws.as_os_str(),
            "--store".as_ref(),
            store.as_os_str(),
        ],
    );
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
    use rewind::history::History;
    use rewind::history::change::{Change, ChangeKind, FileKind, FileState};
    use rewind::history::db::{Extra, GcPolicy};
    use std::sync::Arc;

    let ws = work.join("ws");
    let store_dir = work.join("store");
    let data = work.join("data");
    fs::create_dir_all(&ws).unwrap();
    let mount = |ws: &Path| {
        rewind(
            work,
            &data,
            &[
                "mount".as_ref(),
                ws.as_os_str(),
                "--store".as_ref(),
                store_dir.as_os_str(),
            ],
        );
    };
    mount(&ws);
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
    let state = |content: &[u8]| FileState {
        kind: FileKind::File,
        size: content.len() as u64,
        mode: 0o644,
        hash: Some(history.store().put_blob(content).unwrap()),
        owner: None,
    };
    let mut split = 0;
    for round in 0..2u64 {
        for batch in (0..live).collect::<Vec<_>>().chunks(1000) {
            let _pins = history.store().pin_scope();
            let changes: Vec<Change> = batch
                .iter()
                .map(|&i| {
                    let path = format!("d{}/f{i}.txt", i % 100);
                    let after = format!("round {round} of file {i}\n");
                    Change {
                        id: 0,
                        time_ns: start + (round * live as u64 + i as u64) * 1000,
                        kind: if round == 0 {
                            ChangeKind::Create
                        } else {
                            ChangeKind::Modify
                        },
                        path: path.into_bytes(),
                        from: None,
                        before: (round == 1)
                            .then(|| state(format!("round 0 of file {i}\n").as_bytes())),
                        after: Some(state(after.as_bytes())),
                        session: format!("s{}", i % 10),
                        agent: "bench".into(),
                        pid: 1,
                        process: "bench".into(),
                        links: Vec::new(),
                        turn: None,
                        tool: None,
                        uid: None,
                    }
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
    mount(&ws);
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

/// What `du` counts: allocated blocks of every file below `dir`.
fn du(dir: &Path) -> u64 {
    let out = Command::new("du").arg("-sB1").arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
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

/// The daemon's resident and peak resident memory after `rounds * files` recorded changes.
fn memory(work: &Path, files: usize, rounds: usize) -> (u64, u64) {
    let ws = work.join("ws");
    let store = work.join("store");
    let data = work.join("data");
    fs::create_dir_all(&ws).unwrap();
    rewind(
        work,
        &data,
        &[
            "mount".as_ref(),
            ws.as_os_str(),
            "--store".as_ref(),
            store.as_os_str(),
        ],
    );
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
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    figures
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
