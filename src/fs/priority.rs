//! The end of a write episode, recorded at a lower priority than the requests around it.
//!
//! The kernel does not wait for a RELEASE: it queues it before the writer's `close()` returns
//! and goes on. The FUSE thread that takes it then records the episode's end (reads what was
//! written, hashes it, compresses it, writes the store), and on two cores that work competed at
//! the writer's own priority with the FUSE threads serving the writer's next requests: a small
//! edit took about a quarter longer with recording on (W2 in `bench/fs.rs`). Lowered by
//! [`END_NICE`] for that work, the thread yields to them, and uses what the writer leaves idle.
//!
//! Only where the daemon may raise the thread's priority back afterwards (root, or
//! `CAP_SYS_NICE`, or an `RLIMIT_NICE` that allows it; probed once at mount): a FUSE thread
//! left lowered would serve every later request at that priority. Not lower than that: the
//! end takes store locks that other FUSE threads wait for, and a thread holding one must
//! still get the CPU soon on a busy machine (at nice +5 a thread gets about a quarter of a
//! core that a nice-0 thread also wants, at +19 about one part in seventy).

/// How much lower than the daemon's own the priority of a FUSE thread recording an end is.
const END_NICE: libc::c_int = 5;

/// The daemon's nice value, if a thread may be lowered by [`END_NICE`] and raised back.
pub(super) fn probe() -> Option<libc::c_int> {
    // On a thread of its own, which is what is lowered (and may stay so if raising it back
    // fails).
    std::thread::spawn(|| {
        let base = nice()?;
        let low = (base + END_NICE).min(19);
        (low > base && set_nice(low) && set_nice(base)).then_some(base)
    })
    .join()
    .ok()
    .flatten()
}

/// The calling thread's nice value.
fn nice() -> Option<libc::c_int> {
    // getpriority may return -1 as a nice value: errno tells an error apart.
    // SAFETY: errno is this thread's; getpriority only reads the calling thread's priority
    // (PRIO_PROCESS with who 0 is the calling thread on Linux).
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, 0);
        (n != -1 || *libc::__errno_location() == 0).then_some(n)
    }
}

fn set_nice(n: libc::c_int) -> bool {
    // SAFETY: sets the calling thread's nice value (see `nice`); no memory is involved.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) == 0 }
}

/// The calling thread lowered by [`END_NICE`] from `base` (given by [`probe`]) until dropped.
pub(super) struct Lowered(libc::c_int);

impl Lowered {
    pub(super) fn new(base: libc::c_int) -> Lowered {
        set_nice((base + END_NICE).min(19));
        Lowered(base)
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        if !set_nice(self.0) {
            tracing::warn!(
                "a FUSE thread stays at a lower priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_is_raised_back() {
        let Some(base) = probe() else {
            // Not allowed here (not root, no CAP_SYS_NICE): nothing is lowered at all.
            return;
        };
        std::thread::spawn(move || {
            assert_eq!(nice(), Some(base));
            {
                let _low = Lowered::new(base);
                assert_eq!(nice(), Some((base + END_NICE).min(19)));
            }
            assert_eq!(nice(), Some(base));
        })
        .join()
        .unwrap();
    }
}
