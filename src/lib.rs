//! rewind: a FUSE filesystem mounted over a project directory that records every change made
//! through it, so that what agents (and people) did can be read, diffed and rolled back.
//!
//! Layers, each depending only on the ones below it:
//!
//! - [`cli`]: the binary's commands; decides where each runs (on the store, or in the daemon
//!   through `.rewind/ctl`) and maps errors to exit statuses.
//! - [`daemon`]: assembling and running a mount: threads, signals, readiness.
//! - [`fs`]: the FUSE filesystem. A passthrough over a directory fd opened before mounting;
//!   data I/O goes through the kernel (FUSE passthrough), so the daemon sees only the edges of
//!   a write episode, which is exactly where history is taken. The control directory
//!   `.rewind/` lives here; errors become errno values here (`fs::errno`).
//! - [`command`]: the command grammar, shared by the CLI and `.rewind/ctl`, and the verbs that
//!   read or change history, which run wherever the history is.
//! - [`history`]: what a change means: domain types, names, attribution, recording, points in
//!   time, the tree at a past point, rollback, agent turns, diffs.
//! - [`store`]: RocksDB. Content blobs (zstd, BLAKE3-addressed), versioned records and their
//!   indexes. It knows nothing about files.
//!
//! Beside them: [`agent`] (agents' hook configurations and payloads), [`export`] (a selection
//! as git commits), [`mcp`] (the MCP server), [`config`] (`rewind.toml`), [`logging`], [`ui`] (the review page, `rewind ui`).
//!
//! `docs/design.md` has the change model, the key schema, the inode model, the lock order and
//! the crash semantics.

pub mod agent;
pub mod cli;
pub mod command;
pub mod config;
pub mod daemon;
pub mod export;
pub mod fs;
pub mod history;
pub mod logging;
pub mod mcp;
pub mod procfs;
pub mod store;
pub mod ui;

/// Tests only: a pause the environment variable `var` asks for (in milliseconds), read once.
/// The daemon's tests widen a race window with one (`REWIND_TEST_SLOW_RELEASE`,
/// `REWIND_TEST_SLOW_PENDING`); unset, it costs one atomic load.
pub(crate) struct TestDelay {
    var: &'static str,
    ms: std::sync::OnceLock<Option<u64>>,
}

impl TestDelay {
    pub(crate) const fn new(var: &'static str) -> TestDelay {
        TestDelay {
            var,
            ms: std::sync::OnceLock::new(),
        }
    }

    /// Sleep as long as the variable says, if it is set.
    pub(crate) fn pause(&self) {
        if let Some(ms) = self.get() {
            std::thread::sleep(ms);
        }
    }

    /// How long the variable says, if it is set.
    pub(crate) fn get(&self) -> Option<std::time::Duration> {
        let ms = self
            .ms
            .get_or_init(|| std::env::var(self.var).ok()?.parse().ok());
        ms.map(std::time::Duration::from_millis)
    }
}
