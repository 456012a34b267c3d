//! Review page benchmark: a store of 100k changes (20 sessions, 1000 paths), served by the real
//! `rewind ui` (unmounted: read-only on the store), and the time its answers take over HTTP:
//! the first view (the whole page with the sidebar and the newest page of the timeline), an
//! older page of the timeline, the line stats of a page, and one change's diff.
//!
//! `cargo bench --bench ui [-- N]`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rewind::history::History;
use rewind::history::change::{Change, ChangeKind, FileKind, FileState, Owner};
use rewind::history::db::Extra;
use rewind::store::Store;

fn get(port: u16, token: &str, path: &str) -> (u16, usize) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: rewind_ui={token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out.len())
}

/// Median and worst of `runs` requests, in milliseconds.
fn time(port: u16, token: &str, path: &str, runs: usize) -> (f64, f64, usize) {
    let mut ms = Vec::new();
    let mut size = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let (status, len) = get(port, token, path);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(status, 200, "{path}");
        size = len;
    }
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1], size)
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let data = root.path().join("data");
    std::fs::create_dir_all(&ws).unwrap();
    // SAFETY: set before any thread is started; `default_store` reads it.
    unsafe { std::env::set_var("XDG_DATA_HOME", &data) };
    let store_dir = rewind::cli::default_store(&ws.canonicalize().unwrap());
    std::fs::create_dir_all(&store_dir).unwrap();

    let history = History::new(Arc::new(Store::open(&store_dir).unwrap()));
    let template: String = (0..40)
        .map(|i| format!("    let value_{i} = compute({i});\n"))
        .collect();
    let fill = Instant::now();
    for i in 0..n {
        let path = format!("src/module_{}/file_{}.rs", i % 37, i % 1000);
        let content = format!("// revision {i}\n{template}");
        let hash = history.store().put_blob(content.as_bytes()).unwrap();
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
        history
            .record(
                Change {
                    id: 0,
                    time_ns: 1_700_000_000_000_000_000 + i * 1_000_000,
                    kind: ChangeKind::Modify,
                    path: path.into_bytes(),
                    from: None,
                    before: None,
                    after: Some(state),
                    session: format!("session-{}", i * 20 / n),
                    agent: ["claude", "codex"][(i % 2) as usize].into(),
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
    history.store().sync().unwrap();
    drop(history);
    let filled = fill.elapsed();

    let mut child = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .arg("-C")
        .arg(&ws)
        .args(["ui", "--no-open"])
        .env("XDG_DATA_HOME", &data)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    out.read_line(&mut url).unwrap();
    let url = url.trim();
    let port: u16 = url["http://127.0.0.1:".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let token = url.split("token=").nth(1).unwrap().to_string();

    let (first, _, _) = time(port, &token, "/", 1);
    let (view, view_max, view_size) = time(port, &token, "/", 10);
    let older = format!("/frag/changes?before={}", n / 2);
    let (page, page_max, _) = time(port, &token, &older, 10);
    let ids: Vec<String> = (n - 99..=n).map(|i| i.to_string()).collect();
    let stats = format!("/frag/stats?ids={}", ids.join(","));
    let (stat, _, _) = time(port, &token, &stats, 5);
    let (diff, _, _) = time(port, &token, &format!("/frag/diff?id={}", n / 3), 10);
    let _ = child.kill();
    let _ = child.wait();

    println!(
        "ui benchmark: {n} changes in the store (filled in {:.1}s), `rewind ui` unmounted",
        filled.as_secs_f64()
    );
    println!(
        "  first view  GET /             first request {first:.1} ms; then median {view:.1} ms, worst {view_max:.1} ms ({} KiB)",
        view_size / 1024
    );
    println!(
        "  timeline    GET {older:<14} median {page:.1} ms, worst {page_max:.1} ms (100 rows)"
    );
    println!("  line stats  100 changes       median {stat:.1} ms");
    println!("  one diff    GET /frag/diff    median {diff:.1} ms");
}
