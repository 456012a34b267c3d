//! Reading benchmark: how long a reading command takes against how much history RocksDB holds
//! unflushed in its write-ahead log. For each size: `rewind cat` of a small file (while mounted
//! it is answered by the daemon, which has the store open), and, for comparison, what a reader
//! beside the daemon pays just to open the store (a RocksDB secondary instance replays the
//! whole log; every CLI read did this before). Prints one table, with the log's real size.
//!
//! `cargo bench --bench read [-- --runs N] [--sizes 1,30,100]` (MiB of new content written
//! through the mount before each row; content is incompressible, so the log grows by about as
//! much, until RocksDB flushes it). Needs FUSE (root, or fusermount3).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rewind::store::Store;

const REWIND: &str = env!("CARGO_BIN_EXE_rewind");

struct Mounted {
    root: tempfile::TempDir,
}

impl Mounted {
    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.root.path().join("store")
    }

    fn rewind(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new(REWIND)
            .args(args)
            .current_dir(self.ws())
            .env("XDG_DATA_HOME", self.root.path().join("data"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rewind {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let ws = self.ws();
        let _ = Command::new(REWIND)
            .arg("unmount")
            .arg(&ws)
            .env("XDG_DATA_HOME", self.root.path().join("data"))
            .output();
    }
}

/// The size of RocksDB's write-ahead log files in `store`.
fn wal_bytes(store: &Path) -> u64 {
    std::fs::read_dir(store)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".log") && name != "daemon.log"
        })
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// `n` bytes no compressor can shrink.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let runs: usize = value("--runs").and_then(|r| r.parse().ok()).unwrap_or(20);
    let sizes: Vec<u64> = value("--sizes")
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 30, 100]);

    let m = Mounted {
        root: tempfile::Builder::new()
            .prefix("rewind-bench-read-")
            .tempdir()
            .unwrap(),
    };
    for sub in ["ws", "store", "data"] {
        std::fs::create_dir(m.root.path().join(sub)).unwrap();
    }
    let ws = m.ws();
    let store = m.store();
    let out = Command::new(REWIND)
        .arg("mount")
        .arg(&ws)
        .arg("--store")
        .arg(&store)
        .env("XDG_DATA_HOME", m.root.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(ws.join("small.txt"), "a small file\n").unwrap();
    m.rewind(&["sync"]);

    println!(
        "| content written | WAL | `rewind cat` (median, max of {runs}) | opening the store beside the daemon (median) |"
    );
    println!("|---|---|---|---|");
    let mut written = 0u64;
    let mut file = 0u64;
    for &mib in &sizes {
        while written < mib << 20 {
            let chunk = 1 << 20;
            std::fs::write(ws.join(format!("noise-{file}.bin")), noise(file, chunk)).unwrap();
            file += 1;
            written += chunk as u64;
        }
        m.rewind(&["sync"]);
        let wal = wal_bytes(&store);
        let mut cat = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            let out = m.rewind(&["cat", "small.txt"]);
            cat.push(start.elapsed());
            assert_eq!(out.stdout, b"a small file\n");
        }
        let mut open = Vec::new();
        for _ in 0..runs.min(10) {
            let start = Instant::now();
            let s = Store::open_read_only(&store).unwrap();
            let _ = s.last_id().unwrap();
            drop(s);
            open.push(start.elapsed());
        }
        let max = *cat.iter().max().unwrap();
        println!(
            "| {} MiB | {:.1} MiB | {}, {} | {} |",
            written >> 20,
            wal as f64 / f64::from(1 << 20),
            ms(median(cat)),
            ms(max),
            ms(median(open))
        );
    }
}
