//! Assembling and running a mount: open the store, recover what happened while nothing was
//! mounted, mount, say ready (to `rewind mount` through a pipe, and to systemd), serve until
//! unmounted or signalled, and flush the store on the way out. The recorder depends on the
//! threads started here: the writer (queued deletes), the pending ticker (held-back creates),
//! the store's recovery after a failed write, and background retention.

mod signals;
mod threads;

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use sd_notify::NotifyState;

use crate::fs::{self, MountConfig, MountState};
use crate::history::retention::Retention;
use crate::history::{History, Name, Recorder, Result};
use crate::store::Store;

/// Everything a mount needs, validated.
pub struct Daemon {
    pub mount: MountConfig,
    pub store_dir: PathBuf,
    /// The default session (else `mount-<time>`).
    pub session: Option<Name>,
    pub retention: Retention,
    /// Record changes (off only to measure what recording costs).
    pub record: bool,
    /// Where to say "ready" (or why not): the pipe from `rewind mount`.
    pub ready: Option<File>,
}

/// Where `rewind mount` notes which store serves a workspace.
pub type Register = Box<dyn Fn(u32) -> std::io::Result<()>>;

impl Daemon {
    /// Mount and serve in this process until unmounted or signalled. `register` records the
    /// mount (with the daemon's pid, then 0 when it ends) so commands find the store.
    pub fn serve(mut self, register: Register) -> Result<()> {
        let result = self.serve_inner(&register);
        if let (Err(e), Some(pipe)) = (&result, self.ready.as_mut()) {
            let _ = writeln!(pipe, "error: {e}");
        }
        result
    }

    fn serve_inner(&mut self, register: &Register) -> Result<()> {
        // Before any thread exists (RocksDB starts its own), so every thread inherits the mask
        // and only the signal thread ever takes these signals.
        let signals = signals::block();
        bound_malloc_arenas();
        // The store's database creates files as long as it runs: all of them private. (The
        // FUSE threads create the workspace's files under a umask of their own.)
        crate::store::private_files();
        let state = Arc::new(MountState::new(self.retention.clone()));
        let store = Arc::new(Store::open_outside(&self.store_dir, &self.mount.workspace)?);
        threads::halt_on_panic(store.clone());
        crate::config::write_template(&self.store_dir);
        store.put_meta(
            b"workspace",
            self.mount.workspace.as_os_str().as_encoded_bytes(),
        )?;
        register(std::process::id()).map_err(|source| crate::history::Error::Io {
            path: self.store_dir.clone(),
            source,
        })?;
        let history = History::new(store.clone());
        let backing = fs::backing(&self.mount)?;
        let session = match &self.session {
            Some(s) => s.to_string(),
            None => default_session(),
        };
        let recorder = if self.record {
            Some(Arc::new(Recorder::new(
                history.clone(),
                backing.clone(),
                session,
            )?))
        } else {
            None
        };
        if let Some(rec) = &recorder {
            let found = rec.recover()?;
            if found.episodes + found.external > 0 {
                tracing::info!(
                    interrupted = found.episodes,
                    external = found.external,
                    "recorded changes made while not mounted"
                );
            }
            threads::pending(rec.clone());
            threads::writer(rec.clone());
            threads::store_recovery(store.clone());
        }
        threads::trim_memory();
        let fs = fs::filesystem(&self.mount, backing, recorder.clone(), state.clone())?;
        let core = fs.core().clone();
        let workspace = self.mount.workspace.clone();
        let ready_state = state.clone();
        fs.on_ready(move |passthrough| {
            ready_state.set_passthrough(passthrough);
            tracing::info!(workspace = %workspace.display(), passthrough, "serving");
        });
        // Asked before the mount covers the workspace.
        let readahead = fs::disk_readahead(&self.mount.workspace);
        // Returns once FUSE_INIT has been answered and the kernel has taken the answer.
        let mounted = fs::mount(&self.mount, fs)?;
        core.set_notifier(mounted.notifier());
        // After INIT: the kernel sets the mount's readahead from INIT's answer, so not before.
        if let Some(kb) = &readahead {
            fs::match_readahead(&self.mount.workspace, kb);
        }
        if let Some(pipe) = self.ready.as_mut() {
            let _ = writeln!(pipe, "ready passthrough={}", state.passthrough());
        }
        // Under systemd (Type=notify): the mount answers now.
        let status = format!("recording {}", self.mount.workspace.display());
        if let Err(e) = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&status)]) {
            tracing::warn!("cannot tell systemd the mount is ready: {e}");
        }
        signals::unmount_on_signal(signals, self.mount.workspace.clone());
        if recorder.is_some() {
            threads::retention(history.clone(), state);
        }
        let served = mounted.run();
        if let Some(rec) = &recorder {
            rec.sync()?;
            if let Err(e) = rec.save_known() {
                tracing::warn!("the next mount reads recorded files again: {e}");
            }
        }
        store.sync()?;
        // Keep the registration (commands find the store through it while unmounted); only
        // the daemon is gone.
        let _ = register(0);
        tracing::info!("unmounted");
        served.map_err(|source| crate::history::Error::Io {
            path: self.mount.workspace.clone(),
            source,
        })
    }
}

/// The mount's default session: named after the time the mount started (UTC).
fn default_session() -> String {
    let t = crate::history::time::rfc3339(crate::history::time::now_ns());
    format!("mount-{}-{}", &t[..10], t[11..19].replace(':', ""))
}

/// glibc gives each thread that allocates an arena of its own (up to eight per core), and each
/// keeps what it freed: with the FUSE workers, the recorder's threads and RocksDB's, that was
/// a third of the daemon's resident memory after 100,000 recorded changes. Two arenas are
/// plenty for a daemon whose threads mostly wait on the kernel or the store. Set before any
/// thread starts.
fn bound_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes a malloc parameter; no thread allocates concurrently yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
