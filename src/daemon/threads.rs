//! The daemon's background threads.

use std::sync::Arc;
use std::time::Duration;

use crate::fs::MountState;
use crate::history::recorder::PENDING_FOR;
use crate::history::{History, Recorder};
use crate::store::Store;

/// Start a background thread, watched: if it panics, the panic hook has stopped recording
/// (see [`halt_on_panic`]) and the log says the thread is gone.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    let watched = {
        let name = name.to_string();
        move || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                tracing::error!("the {name} thread stopped after a panic");
            }
        }
    };
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(watched) {
        tracing::error!("cannot start the {name} thread: {e}");
    }
}

/// The panic policy (docs/design.md, "Panics"): a panic anywhere in the daemon — a FUSE
/// request, a ctl command, a background thread — may have left the recorder's state (and the
/// locks it poisoned) half updated, so from then on nothing is recorded: the store refuses
/// writes for good ([`Store::halt`]), operations that would be recorded fail with `EIO`,
/// reads go on, `status` says so, and this log says why. A remount starts afresh.
pub fn halt_on_panic(store: Arc<Store>) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let why = format!("{} thread: {info}", thread.name().unwrap_or("a")).replace('\n', " ");
        tracing::error!(
            "panic in the {why}; recording stopped: operations that would be recorded now \
             fail with EIO (reads go on) until the workspace is remounted"
        );
        store.halt(why);
        default(info);
    }));
}

/// How long the writer thread lets deletes and closed edits gather after the first before it
/// records them. Written one by one, an `rm -rf` of 8,000 files took the daemon 830 ms of CPU
/// against 350 ms with recording off (a RocksDB write, a wake-up and a context switch each);
/// gathered for 2 ms, 540 to 630 ms. W2's small edit back to back, its end recorded on the
/// RELEASE's thread beside the next edit: 196–206 µs (p50; off 133–141); gathered for 1, 2 and
/// 5 ms: 149–151, 132–143 and 139–148 µs. Whatever reads the history records them first
/// (`Recorder::settle`).
const GATHER: Duration = Duration::from_millis(2);

/// Tests only: `REWIND_TEST_SLOW_CLOSED=MS` makes the writer thread wait that long before it
/// records the closed edits it gathered, so that many more close meanwhile.
static SLOW_CLOSED: crate::TestDelay = crate::TestDelay::new("REWIND_TEST_SLOW_CLOSED");

/// Write deferred changes (deletes) and record closed edits as they come, batched (see
/// `Recorder::defer`, `Recorder::finish_closed`).
pub fn writer(recorder: Arc<Recorder>) {
    let wakeups = recorder.wakeups();
    spawn("writer", move || {
        for () in &wakeups {
            std::thread::sleep(GATHER);
            if let Err(e) = recorder.drain() {
                tracing::error!("cannot record deletes: {e}");
                std::thread::sleep(Duration::from_secs(1));
            }
            SLOW_CLOSED.pause();
            if let Err(e) = recorder.finish_closed() {
                tracing::error!("cannot record the end of an edit: {e}");
            }
        }
    });
}

/// Record held-back creates once they are old enough, and what the store could not take
/// before (see `Recorder::flush_pending_older`); note the edits that last in the store
/// (`Recorder::mark_open_episodes`).
pub fn pending(recorder: Arc<Recorder>) {
    spawn("pending", move || {
        loop {
            std::thread::sleep(PENDING_FOR / 2);
            // While the store cannot take writes (a full disk), what is held back waits for
            // the store-recovery thread.
            if !recorder.history().store().writable() {
                continue;
            }
            if let Err(e) = recorder.flush_pending_older(false) {
                tracing::error!("cannot record new files: {e}");
                std::thread::sleep(Duration::from_secs(1));
            }
            if let Err(e) = recorder.mark_open_episodes() {
                tracing::warn!("cannot note the files being written: {e}");
            }
        }
    });
}

/// After a failed write (a full disk), try to write again every second; recording resumes by
/// itself once it works.
pub fn store_recovery(store: Arc<Store>) {
    spawn("store-recovery", move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if !store.writable()
                && let Err(e) = store.recover()
            {
                tracing::debug!("the store still cannot be written: {e}");
            }
        }
    });
}

/// How often the trim thread looks at the daemon's resident memory.
const TRIM_EVERY: Duration = Duration::from_secs(5);
/// Growth of resident memory since the last trim worth giving back.
const TRIM_ABOVE: u64 = 16 << 20;

/// Give the system back the memory a burst of work freed. glibc keeps freed heap pages (and
/// after a large free raises its mmap threshold, so even big tables freed later stay on the
/// heap): a daemon that recorded a burst would keep its peak for good. Once resident memory
/// has grown by [`TRIM_ABOVE`] since the last trim and then stopped growing for
/// [`TRIM_EVERY`] (the burst is over), or grown by four times that during a long burst,
/// `malloc_trim` returns what is free; memory still in use stays, and is not trimmed again
/// until it grows further.
pub fn trim_memory() {
    #[cfg(target_env = "gnu")]
    spawn("trim", move || {
        let mut base = resident();
        let mut last = base;
        loop {
            std::thread::sleep(TRIM_EVERY);
            let now = resident();
            base = base.min(now);
            if now >= base + TRIM_ABOVE && (now <= last || now >= base + 4 * TRIM_ABOVE) {
                // SAFETY: malloc_trim only returns free pages; it is safe at any time.
                unsafe { libc::malloc_trim(0) };
                base = resident();
            }
            last = now;
        }
    });
}

/// The daemon's resident memory in bytes (0 if `/proc` cannot say).
#[cfg(target_env = "gnu")]
fn resident() -> u64 {
    crate::procfs::status_of_self()
        .and_then(|s| {
            s.field("VmRSS")?
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib << 10)
}

/// How long after mounting retention first runs.
const FIRST_GC: Duration = Duration::from_secs(60);

/// Apply the retention limits in the background: soon after mounting (so short mounts get
/// it too), then every `retention.every`.
pub fn retention(history: History, state: Arc<MountState>) {
    if !state.retention.is_set() {
        return;
    }
    spawn("retention", move || {
        let mut wait = state.retention.every.min(FIRST_GC);
        loop {
            std::thread::sleep(wait);
            wait = state.retention.every;
            let result = history.gc(&state.retention.policy());
            match &result {
                Ok(r) if r.changes_removed + r.blobs_removed > 0 => tracing::info!(
                    changes = r.changes_removed,
                    blobs = r.blobs_removed,
                    bytes = r.bytes_after,
                    "retention: removed old history"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!("retention: gc failed: {e}"),
            }
            state.gc_done(&result);
        }
    });
}
