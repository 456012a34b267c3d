//! Store benchmark: record 100k small changes, then report throughput, bytes stored per change
//! and the latency of reading one path's history.
//!
//! `cargo bench --bench store [-- N]`

use std::time::Instant;

use std::sync::Arc;

use rewind::history::History;
use rewind::history::change::{Change, ChangeKind, FileKind, FileState, Owner};
use rewind::history::db::{Extra, GcPolicy};
use rewind::store::{Order, Query, Store};

fn open(dir: &std::path::Path) -> History {
    History::new(Arc::new(Store::open(dir).unwrap()))
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let paths = 1000u64;

    // A source-like file of ~2 KiB whose content changes a little at every step.
    let template: String = (0..60)
        .map(|i| format!("    let value_{i} = compute({i});\n"))
        .collect();
    let mut raw_bytes = 0u64;
    let start = Instant::now();
    for i in 0..n {
        let path = format!("src/module_{}/file_{}.rs", i % 37, i % paths);
        let content = format!("// revision {i}\n{template}");
        raw_bytes += content.len() as u64;
        let hash = store.store().put_blob(content.as_bytes()).unwrap();
        let state = FileState {
            kind: FileKind::File,
            size: content.len() as u64,
            mode: 0o644,
            hash: Some(hash),
            owner: Some(Owner {
                uid: 1000,
                gid: 1000,
            }),
        };
        store
            .record(
                Change {
                    id: 0,
                    time_ns: 1_700_000_000_000_000_000 + i * 1_000_000,
                    kind: ChangeKind::Modify,
                    path: path.into_bytes(),
                    from: None,
                    before: None,
                    after: Some(state),
                    session: format!("session-{}", i / 10_000),
                    agent: "bench".into(),
                    pid: 1,
                    process: "bench".into(),
                    links: Vec::new(),
                    groups: Vec::new(),
                    turn: None,
                    tool: None,
                    uid: Some(1000),
                },
                &Extra::default(),
            )
            .unwrap();
    }
    store.store().sync().unwrap();
    let elapsed = start.elapsed();
    drop(store);
    let on_disk = dir_size(dir.path());
    let store = open(dir.path());

    let mut latencies = Vec::new();
    for i in 0..2000u64 {
        let path = format!(
            "src/module_{}/file_{}.rs",
            (i * 7919) % paths % 37,
            (i * 7919) % paths
        );
        let q = Query {
            path: Some(path.into_bytes()),
            order: Order::NewestFirst,
            limit: Some(20),
            ..Query::default()
        };
        let t = Instant::now();
        let found = store.query(&q).unwrap();
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(!found.is_empty());
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];

    println!(
        "store benchmark: {n} changes of ~{} bytes over {paths} paths",
        raw_bytes / n
    );
    println!("| metric | value |");
    println!("|---|---|");
    println!(
        "| record (blob + change, one batch each) | {:.0} changes/s |",
        n as f64 / elapsed.as_secs_f64()
    );
    println!(
        "| bytes on disk per change | {:.0} B (content {} B raw) |",
        on_disk as f64 / n as f64,
        raw_bytes / n
    );
    println!("| path history, newest 20: p50 | {:.1} µs |", pct(0.5));
    println!("| path history, newest 20: p99 | {:.1} µs |", pct(0.99));

    // gc holds the writer lock throughout: while it runs, recording waits. Keep the newest
    // half by age, then (a second run) nothing to remove: the cost of looking alone.
    let t = Instant::now();
    let report = store
        .gc(&GcPolicy {
            older_than_ns: Some(1_700_000_000_000_000_000 + n / 2 * 1_000_000),
            max_bytes: None,
            dry_run: false,
            repack: false,
        })
        .unwrap();
    let gc_half = t.elapsed();
    let t = Instant::now();
    store
        .gc(&GcPolicy {
            older_than_ns: Some(0),
            max_bytes: None,
            dry_run: false,
            repack: false,
        })
        .unwrap();
    let gc_nothing = t.elapsed();
    println!(
        "| gc removing {} of {n} changes | {:.2} s |",
        report.changes_removed,
        gc_half.as_secs_f64()
    );
    println!(
        "| gc with nothing to remove ({} changes) | {:.2} s |",
        n - report.changes_removed,
        gc_nothing.as_secs_f64()
    );
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}
