//! Filesystem benchmark: the same workloads on a native directory, on rewind (recording on and
//! off), and on bindfs (a reference FUSE passthrough) where installed, in one run. Prints one
//! table of times and ratios to native.
//!
//! - W1 agent workload: untar a source tree of 8,000 files, `sed -i` 300 of them, `grep -r`,
//!   `rm -rf`. Each run's tree has content of its own (the store would take a second copy of
//!   the same tree for free, which a new tree does not get). Also the CPU time it costs: the
//!   workload's processes, and the daemon's until the history holds all of it (`rewind sync`).
//! - W2 2,000 small-file edits (open, read, modify, write, close): total, p50 and p99; and the
//!   p50 of 500 more with 1 ms between one and the next (the recording of the one before is
//!   done by then, as when a person or an agent edits).
//! - W3 create, stat and unlink 20,000 empty files.
//! - W4 sequential write, then read (page cache dropped), of 1 GiB; the write also until
//!   `rewind sync` returns (the new file's content is captured after its close).
//! - W5 npm-like: W1's tree untarred into `node_modules/` (ignored, not recorded), read back
//!   with `grep -r`, `rm -rf`: what passing through ignored paths costs.
//!
//! `cargo bench --bench fs [-- --quick] [--only W1,W2] [--runs N]` (median of N runs, default 3,
//! interleaved across targets). Needs root (drop_caches, mounts).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const REWIND: &str = env!("CARGO_BIN_EXE_rewind");

struct Target {
    name: &'static str,
    dir: PathBuf,
    /// The FUSE daemon serving `dir`, if any: its CPU time is part of what a workload costs.
    daemon: Option<u32>,
    cleanup: Option<Box<dyn FnOnce()>>,
}

/// A benchmark that fails part way still unmounts what it mounted.
impl Drop for Target {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup.take() {
            c();
        }
    }
}

/// CPU time (user and system), in seconds, of the processes this one has waited for.
fn children_cpu() -> f64 {
    // SAFETY: rusage is plain data, valid all zero; the kernel fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage for the kernel to fill.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU time (user and system), in seconds, of the process `pid` (0 if none).
fn daemon_cpu(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else {
        return 0.0;
    };
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis come fields 3 on; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// `rewind sync` in `dir`: returns once the history holds every change made before.
fn rewind_sync(dir: &Path) {
    let ok = Command::new(REWIND)
        .arg("sync")
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "rewind sync failed in {}", dir.display());
}

fn sh(dir: &Path, script: &str) {
    let ok = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "failed in {}: {script}", dir.display());
}

/// Start each run from the same state. On these VMs, creating and deleting thousands of files
/// makes later creates in the same filesystem much slower until the caches are dropped (a
/// native untar of W1's tree went from 0.25 s to 7 s over a few rounds), which swamped every
/// comparison before this was done before each run of every target.
fn drop_caches() {
    let _ = Command::new("sync").status();
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
}

/// A source-like tree of `n` files: nested folders, a few KiB each; `run` makes every file's
/// content differ from the other runs' trees.
fn make_tarball(work: &Path, n: usize, run: usize) -> PathBuf {
    let src = work.join("tree-src");
    for i in 0..n {
        let dir = src.join(format!("pkg{}/mod{}/sub{}", i % 20, i % 7, i % 3));
        fs::create_dir_all(&dir).unwrap();
        let body: String = (0..(20 + i % 80))
            .map(|l| format!("fn item_{i}_{l}(x: u32) -> u32 {{ x * {l} + {i} }} // keep {run}\n"))
            .collect();
        fs::write(dir.join(format!("file{i}.rs")), body).unwrap();
    }
    let tar = work.join(format!("tree-{run}.tar"));
    sh(work, &format!("tar cf tree-{run}.tar -C tree-src ."));
    fs::remove_dir_all(&src).unwrap();
    tar
}

/// W1 in `t`'s folder: its time, and the CPU time it cost: its processes', and the daemon's
/// until the history holds all of it.
fn w1(t: &Target, tar: &Path) -> (Duration, f64) {
    let dir = &t.dir;
    let (children, daemon) = (children_cpu(), daemon_cpu(t.daemon));
    let start = Instant::now();
    sh(dir, &format!("mkdir w1 && tar xf {} -C w1", tar.display()));
    sh(
        dir,
        "find w1 -name '*.rs' | head -300 | xargs sed -i 's/keep/kept/'",
    );
    sh(dir, "grep -r -c kept w1 > /dev/null");
    sh(dir, "rm -rf w1");
    let time = start.elapsed();
    let children = children_cpu() - children;
    // With recording off there is nothing to wait for (and no `.rewind/` to ask).
    if t.name == "rewind" {
        rewind_sync(dir);
    }
    (time, children + daemon_cpu(t.daemon) - daemon)
}

fn w5(dir: &Path, tar: &Path) -> Duration {
    let t = Instant::now();
    sh(
        dir,
        &format!(
            "mkdir -p node_modules/w5 && tar xf {} -C node_modules/w5",
            tar.display()
        ),
    );
    sh(dir, "grep -r -c keep node_modules/w5 > /dev/null");
    sh(dir, "rm -rf node_modules/w5");
    t.elapsed()
}

/// W2: `n` edits, each `pause` after the one before (none: back to back).
fn w2(dir: &Path, n: usize, pause: Duration) -> (Duration, Duration, Duration) {
    let root = dir.join("w2");
    fs::create_dir(&root).unwrap();
    for i in 0..100 {
        fs::write(
            root.join(format!("f{i}.txt")),
            format!("counter 0 file {i}\n").repeat(20),
        )
        .unwrap();
    }
    let mut lat = Vec::with_capacity(n);
    let total = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let path = root.join(format!("f{}.txt", i % 100));
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        let edited = s.replacen("counter", "Counter", 1);
        let f2 = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        drop(f);
        (&f2).write_all(edited.as_bytes()).unwrap();
        drop(f2);
        lat.push(t.elapsed());
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    let total = total.elapsed();
    fs::remove_dir_all(&root).unwrap();
    lat.sort();
    (total, lat[n / 2], lat[n * 99 / 100])
}

fn w3(dir: &Path, n: usize) -> Duration {
    let root = dir.join("w3");
    fs::create_dir(&root).unwrap();
    let t = Instant::now();
    for i in 0..n {
        File::create(root.join(format!("e{i}"))).unwrap();
    }
    for i in 0..n {
        fs::metadata(root.join(format!("e{i}"))).unwrap();
    }
    for i in 0..n {
        fs::remove_file(root.join(format!("e{i}"))).unwrap();
    }
    let t = t.elapsed();
    fs::remove_dir(&root).unwrap();
    t
}

/// Write `mib` MiB, then read them back with the page cache dropped. Returns the write's
/// MiB/s up to its close, the same up to when the history holds the new file (`rewind sync`
/// after the close, where `recorded` is set: the create's content is captured after the close,
/// off the writer's time, and this shows what that capture costs), and the read's MiB/s.
fn w4(dir: &Path, mib: usize, recorded: bool) -> (f64, f64, f64) {
    let path = dir.join("big.bin");
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let t = Instant::now();
    let mut f = File::create(&path).unwrap();
    for _ in 0..mib {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let write = mib as f64 / t.elapsed().as_secs_f64();
    if recorded {
        rewind_sync(dir);
    }
    let with_recording = mib as f64 / t.elapsed().as_secs_f64();
    // After the capture: it reads the file, and would otherwise warm the cache for the read.
    drop_caches();
    let t = Instant::now();
    let mut f = File::open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf).unwrap() > 0 {}
    let read = mib as f64 / t.elapsed().as_secs_f64();
    fs::remove_file(&path).unwrap();
    (write, with_recording, read)
}

fn rewind_target(work: &Path, name: &'static str, extra: &[&str]) -> Target {
    let dir = work.join(name);
    let store = work.join(format!("{name}-store"));
    fs::create_dir_all(&dir).unwrap();
    let data = work.join("data");
    let out = Command::new(REWIND)
        .arg("mount")
        .arg(&dir)
        .arg("--store")
        .arg(&store)
        .args(extra)
        .env("XDG_DATA_HOME", &data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = dir.clone();
    // The mount says its daemon's pid; `rewind status` cannot tell it with recording off
    // (there is no `.rewind/` to ask), and without it the CPU row would leave that daemon out.
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let daemon = said
        .split("daemon pid ")
        .nth(1)
        .and_then(|rest| rest.trim_end_matches([')', '\n']).parse().ok());
    assert!(daemon.is_some(), "no daemon pid in: {said}");
    Target {
        name,
        daemon,
        dir,
        cleanup: Some(Box::new(move || {
            let _ = Command::new(REWIND)
                .arg("unmount")
                .arg(&d)
                .env("XDG_DATA_HOME", &data)
                .status();
        })),
    }
}

fn bindfs_target(work: &Path) -> Option<Target> {
    let which = Command::new("which").arg("bindfs").output().ok()?;
    if !which.status.success() {
        return None;
    }
    let src = work.join("bindfs-src");
    let dir = work.join("bindfs");
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("bindfs")
        .arg(&src)
        .arg(&dir)
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let d = dir.clone();
    // bindfs forks into the background: the newest one is this mount's.
    let daemon = Command::new("pgrep")
        .args(["-n", "-x", "bindfs"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    Some(Target {
        name: "bindfs",
        daemon,
        dir,
        cleanup: Some(Box::new(move || {
            let _ = Command::new("fusermount3").arg("-u").arg(&d).status();
        })),
    })
}

/// One measured value: its label and the figure.
type Metric = (String, f64);

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only: Option<String> = args
        .iter()
        .position(|a| a == "--only")
        .map(|i| args[i + 1].clone());
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    let want = |w: &str| only.as_ref().is_none_or(|o| o.split(',').any(|x| x == w));
    let (files, edits, empties, mib) = if quick {
        (2000, 500, 5000, 256)
    } else {
        (8000, 2000, 20000, 1024)
    };

    let work = std::env::var_os("REWIND_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rewind-bench"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    let native = work.join("native");
    fs::create_dir_all(&native).unwrap();

    let mut targets = vec![Target {
        name: "native",
        daemon: None,
        dir: native,
        cleanup: None,
    }];
    targets.push(rewind_target(&work, "rewind", &[]));
    targets.push(rewind_target(&work, "rewind-norecord", &["--no-record"]));
    if let Some(b) = bindfs_target(&work) {
        targets.push(b);
    } else {
        eprintln!("bindfs not installed: no reference FUSE passthrough in this run");
    }

    // Runs are interleaved across targets (run 1 on every target, then run 2, ...), so that
    // the machine drifting over the minutes a run takes weighs on every target alike.
    // samples[target][metric] = one value per run.
    let mut labels: Vec<String> = Vec::new();
    let mut samples: Vec<Vec<Vec<f64>>> = vec![Vec::new(); targets.len()];
    for run in 0..runs {
        // Made for each run and removed after it: a long series (`--runs 40`) keeps one.
        let tar = &make_tarball(&work, files, run);
        for (i, t) in targets.iter().enumerate() {
            eprintln!("run {} of {runs} on {} ...", run + 1, t.name);
            let mut r: Vec<Metric> = Vec::new();
            if want("W1") {
                drop_caches();
                let (time, cpu) = w1(t, tar);
                r.push((
                    format!("W1 agent workload ({files} files), s"),
                    time.as_secs_f64(),
                ));
                r.push((
                    "W1 CPU time, workload and daemon until recorded, s".into(),
                    cpu,
                ));
            }
            if want("W2") {
                drop_caches();
                let (total, p50, p99) = w2(&t.dir, edits, Duration::ZERO);
                r.push((format!("W2 {edits} edits total, s"), total.as_secs_f64()));
                r.push(("W2 edit p50, µs".into(), p50.as_secs_f64() * 1e6));
                r.push(("W2 edit p99, µs".into(), p99.as_secs_f64() * 1e6));
                // As a person or an agent edits: the previous edit's recording is done when
                // the next begins, and the machine may have gone idle in between.
                let (_, p50, _) = w2(&t.dir, edits / 4, Duration::from_millis(1));
                r.push((
                    "W2 edit p50, 1 ms between edits, µs".into(),
                    p50.as_secs_f64() * 1e6,
                ));
            }
            if want("W3") {
                drop_caches();
                r.push((
                    format!("W3 create/stat/unlink {empties}, s"),
                    w3(&t.dir, empties).as_secs_f64(),
                ));
            }
            if want("W4") {
                let (write, recorded, read) = w4(&t.dir, mib, t.name == "rewind");
                r.push((format!("W4 write {mib} MiB, MiB/s"), write));
                r.push((
                    format!("W4 write {mib} MiB until recorded (sync), MiB/s"),
                    recorded,
                ));
                r.push((format!("W4 read {mib} MiB, MiB/s"), read));
            }
            if want("W5") {
                drop_caches();
                r.push((
                    format!("W5 npm-like, {files} files in node_modules/, s"),
                    w5(&t.dir, tar).as_secs_f64(),
                ));
            }
            if labels.is_empty() {
                labels = r.iter().map(|(l, _)| l.clone()).collect();
            }
            if samples[i].is_empty() {
                samples[i] = vec![Vec::new(); r.len()];
            }
            for (m, (_, v)) in r.into_iter().enumerate() {
                samples[i][m].push(v);
            }
        }
        let _ = fs::remove_file(tar);
    }
    let rows: Vec<(String, Vec<Metric>)> = targets
        .iter()
        .zip(&samples)
        .map(|(t, per_metric)| {
            let values = labels
                .iter()
                .zip(per_metric)
                .map(|(l, v)| (l.clone(), median(v.clone())))
                .collect();
            (t.name.to_string(), values)
        })
        .collect();
    for t in &mut targets {
        if let Some(c) = t.cleanup.take() {
            c();
        }
    }

    // One table: each metric, each target's value and its ratio to native (time: lower is
    // better, ratio = target / native; throughput: ratio = target / native, higher is better).
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    println!("| workload | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
    let metrics = rows[0].1.len();
    for m in 0..metrics {
        let (label, base) = &rows[0].1[m];
        let cells: Vec<String> = rows
            .iter()
            .map(|(_, r)| {
                let (_, v) = &r[m];
                let fmt = if *v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.3}")
                };
                format!("{fmt} ({:.2}×)", v / base)
            })
            .collect();
        println!("| {label} | {} |", cells.join(" | "));
    }
    recording_cost(&targets, &labels, &samples);
    let _ = fs::remove_dir_all(&work);
}

/// What recording costs, as robust as a shared machine allows: for each metric, the ratio of
/// recording on to off within each run (the two run one after the other, so the machine's
/// drift over minutes weighs on both alike), and the median of those ratios with their range.
/// With many short runs (`--only W2 --runs 40`) this settles where the medians above do not.
fn recording_cost(targets: &[Target], labels: &[String], samples: &[Vec<Vec<f64>>]) {
    let at = |name: &str| targets.iter().position(|t| t.name == name);
    let (Some(on), Some(off)) = (at("rewind"), at("rewind-norecord")) else {
        return;
    };
    println!();
    println!("| recording on / off, median of each run's ratio [range] | runs |");
    println!("|---|---|");
    for (m, label) in labels.iter().enumerate() {
        let ratios: Vec<f64> = samples[on][m]
            .iter()
            .zip(&samples[off][m])
            .map(|(a, b)| a / b)
            .collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let n = ratios.len();
        println!(
            "| {label} | {:.2}× [{lo:.2}–{hi:.2}] | {n} |",
            median(ratios)
        );
    }
}
