//! Scale benchmark: the figures of "history at scale" that depend on how much was recorded, not
//! on how fast, each printed beside its target.
//!
//! - `mem`: the daemon's resident memory after 5 rounds of writing 20,000 small files through
//!   a mount (100,000 recorded changes).
//! - `cdc`: stored content growth when 10 bytes are inserted in the middle of a 256 MiB file,
//!   and when 2 bytes are appended to it three times.
//!
//! - `gc`: what `rewind gc --max-size 1M` gives back on disk (`du` of the store) after a 256
//!   MiB file written through a mount was overwritten twice (its 256 MiB now only history).
//!
//! - `tree`: `rm -rf` of a tree of 50,000 small files through a mount, and its rollback, beside
//!   a native `cp -a` of the same tree (caches dropped before each).
//!
//! `cargo bench --bench scale [-- --only mem,cdc,gc,tree] [--files N] [--mib N] [--tree N]`.
//! `mem`, `gc` and `tree` need FUSE (`tree` root, to drop caches).

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
        let (rss, peak) = memory(&work.join("mem"), files);
        rows.push((
            format!(
                "daemon RSS after {} recorded changes (5 × {files} small files)",
                5 * files
            ),
            format!(
                "{:.0} MiB (peak {:.0} MiB)",
                rss as f64 / MIB,
                peak as f64 / MIB
            ),
            "≤ 100 MiB",
        ));
    }
    if want("gc") {
        let (before, after, history) = gc(&work.join("gc"), mib);
        let freed = before as f64 - after as f64;
        rows.push((
            format!(
                "delete {mib} MiB of history, then `gc --max-size 1M`: disk freed (`du` of the store)"
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
fn gc(work: &Path, mib: usize) -> (u64, u64, u64) {
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
    // Unmounted: a running daemon keeps content it stored within the hour from gc (a change
    // may be about to use it), which would keep the big content here.
    rewind(work, &data, &["unmount".as_ref(), ws.as_os_str()]);
    let before = du(&store);
    rewind(
        &ws,
        &data,
        &["gc".as_ref(), "--max-size".as_ref(), "1M".as_ref()],
    );
    let after = du(&store);
    (before, after, big.len() as u64)
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

/// The daemon's resident and peak resident memory after `5 * files` recorded changes.
fn memory(work: &Path, files: usize) -> (u64, u64) {
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
    for round in 0..5 {
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
