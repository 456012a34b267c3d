//! What a running mount says about itself in `.rewind/status`: how data moves, and what its
//! background retention has done.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::history::GcReport;
use crate::history::format::count;
use crate::history::retention::Retention;
use crate::history::time;

#[derive(Debug, Default)]
pub struct MountState {
    passthrough: AtomicBool,
    pub retention: Retention,
    last_gc: Mutex<Option<String>>,
}

impl MountState {
    pub fn new(retention: Retention) -> MountState {
        MountState {
            retention,
            ..MountState::default()
        }
    }

    pub fn set_passthrough(&self, on: bool) {
        self.passthrough.store(on, Ordering::Relaxed);
    }

    pub fn passthrough(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    /// Note the outcome of a background gc.
    pub fn gc_done(&self, result: &crate::history::Result<GcReport>) {
        let when = time::short(time::now_ns());
        let line = match result {
            Ok(r) => format!(
                "{when}: removed {} and {} ({} -> {} bytes)",
                count(r.changes_removed as usize, "change"),
                count(r.blobs_removed as usize, "blob"),
                r.bytes_before,
                r.bytes_after
            ),
            Err(e) => format!("{when}: failed: {e}"),
        };
        *self.last_gc.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
    }

    /// Lines for `.rewind/status`.
    pub fn describe(&self) -> String {
        let data = if self.passthrough() {
            "passthrough (file data never goes through the daemon)"
        } else {
            "writeback cache (no FUSE passthrough: not root, or the kernel lacks it)"
        };
        let mut out = format!(
            "daemon: pid {}\ndata path: {data}\nretention: {}\n",
            std::process::id(),
            self.retention.describe()
        );
        if let Some(gc) = &*self.last_gc.lock().unwrap_or_else(|e| e.into_inner()) {
            out += &format!("last gc: {gc}\n");
        }
        out
    }
}
