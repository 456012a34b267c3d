//! Signals: SIGTERM, SIGINT and SIGHUP unmount (lazily if files are still open), which ends
//! the serving loop; the rest of the shutdown follows from there.

use std::path::PathBuf;

use sd_notify::NotifyState;

use crate::fs;

/// Block SIGTERM, SIGINT and SIGHUP in this thread (and the threads it starts), so that only
/// the signal thread receives them, with `sigwait`.
pub fn block() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on a local set, then pthread_sigmask with it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Start the thread that waits for those signals and unmounts.
pub fn unmount_on_signal(set: libc::sigset_t, workspace: PathBuf) {
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                let mut sig = 0;
                // SAFETY: sigwait on a set blocked in every thread.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                tracing::info!(signal = sig, "unmounting");
                let _ = sd_notify::notify(&[NotifyState::Stopping]);
                // A reader of `.rewind/events` would keep a lazily detached mount alive.
                fs::control::stop_readers();
                match fs::unmount(&workspace, false) {
                    Ok(()) => return,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        tracing::warn!("files are still open; detaching the mount lazily");
                        if fs::unmount(&workspace, true).is_ok() {
                            return;
                        }
                    }
                    Err(e) => tracing::error!("unmount failed: {e}"),
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the signal thread: {e}");
    }
}
