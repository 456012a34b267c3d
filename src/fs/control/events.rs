//! `.rewind/events`: reading blocks until the next change. A blocked read must not hold a FUSE
//! worker (there are few, and a later request may be what it waits for), so a read with nothing
//! to say keeps its reply and returns; the dispatcher thread answers it when a change comes.
//! FUSE interrupts are not delivered to the daemon, so the dispatcher also looks at each waiting
//! reader every [`CHECK`]: one that is gone or has a signal to take (a killed reader waits for
//! our answer before it can die) is answered `EINTR`. Each reader's queue is bounded (see the
//! journal); one that falls behind is told how many changes it missed. Once the daemon is told
//! to stop ([`stop_readers`]), a read with nothing left to say gets the end of the file: a
//! reader waiting for the next change would otherwise keep a lazily detached mount, and so the
//! daemon, alive for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Receiver;
use fuser::{Errno, PollEvents, PollNotifier, ReplyData};

use crate::history::Recorder;
use crate::history::format::change_json;
use crate::history::recorder::{Next, Subscription};

/// How often waiting readers are checked for being gone or signalled.
const CHECK: Duration = Duration::from_millis(100);

/// Set when the daemon is told to stop (SIGTERM, SIGINT, SIGHUP): no change is waited for
/// any more.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// End every read of `.rewind/events` that has nothing left to say, now (within [`CHECK`])
/// and from now on.
pub fn stop_readers() {
    STOPPING.store(true, Ordering::SeqCst);
}

fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

struct Waiting {
    reply: ReplyData,
    size: usize,
    /// The thread that reads (FUSE gives the thread, not the process).
    tid: u32,
}

struct Reader {
    sub: Arc<Subscription>,
    /// What is left of a line longer than a read asked for.
    partial: Vec<u8>,
    waiting: Vec<Waiting>,
    poller: Option<PollNotifier>,
}

impl Reader {
    fn has_data(&self) -> bool {
        !self.partial.is_empty() || !self.sub.is_empty()
    }

    /// Up to `size` bytes of whole lines (or the rest of a long one), if there are any.
    fn take(&mut self, size: usize) -> Option<Vec<u8>> {
        let mut out = std::mem::take(&mut self.partial);
        while out.len() < size {
            let line = match self.sub.next() {
                Some(Next::Change(c)) => change_json(&c).to_string(),
                Some(Next::Missed(n)) => serde_json::json!({"missed": n}).to_string(),
                None => break,
            };
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        if out.is_empty() {
            return None;
        }
        if out.len() > size {
            self.partial = out.split_off(size);
        }
        Some(out)
    }
}

#[derive(Clone)]
pub(super) struct Events {
    readers: Arc<Mutex<HashMap<u64, Reader>>>,
}

fn lock(m: &Mutex<HashMap<u64, Reader>>) -> std::sync::MutexGuard<'_, HashMap<u64, Reader>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Events {
    /// Start the dispatcher, woken by every change `recorder` publishes.
    pub(super) fn start(recorder: &Recorder) -> Events {
        let (wake, woken) = crossbeam_channel::bounded(1);
        let events = Events {
            readers: Arc::new(Mutex::new(HashMap::new())),
        };
        // Woken only while someone reads `.rewind/events`: waking the thread for nobody cost a
        // futex wake and a context switch per recorded change. A reader that opens after
        // the check still gets the change: its subscription took it before, and a read looks
        // there first.
        let readers = events.readers.clone();
        recorder.on_publish(move || {
            if !lock(&readers).is_empty() {
                let _ = wake.try_send(());
            }
        });
        let dispatcher = events.clone();
        let spawned = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || dispatcher.run(woken));
        if let Err(e) = spawned {
            tracing::error!("cannot start the events thread: {e}");
        }
        events
    }

    pub(super) fn open(&self, fh: u64, sub: Arc<Subscription>) {
        lock(&self.readers).insert(
            fh,
            Reader {
                sub,
                partial: Vec::new(),
                waiting: Vec::new(),
                poller: None,
            },
        );
    }

    pub(super) fn release(&self, fh: u64) {
        if let Some(reader) = lock(&self.readers).remove(&fh) {
            for w in reader.waiting {
                w.reply.error(Errno::EINTR);
            }
        }
    }

    /// A read: answered now if there is something to read, else kept for the dispatcher.
    pub(super) fn read(&self, fh: u64, size: u32, tid: u32, reply: ReplyData) {
        let mut readers = lock(&self.readers);
        let Some(reader) = readers.get_mut(&fh) else {
            return reply.error(Errno::EBADF);
        };
        match reader.take(size as usize) {
            Some(data) => reply.data(&data),
            None if stopping() => reply.data(&[]),
            None => reader.waiting.push(Waiting {
                reply,
                size: size as usize,
                tid,
            }),
        }
    }

    /// A poll: remember who to wake, say whether there is something to read now.
    pub(super) fn poll(&self, fh: u64, ph: PollNotifier) -> PollEvents {
        let mut readers = lock(&self.readers);
        let Some(reader) = readers.get_mut(&fh) else {
            return PollEvents::POLLERR;
        };
        // Registered before looking: a change in between still wakes the poller.
        reader.poller = Some(ph);
        if reader.has_data() || stopping() {
            PollEvents::POLLIN | PollEvents::POLLRDNORM
        } else {
            PollEvents::empty()
        }
    }

    fn run(&self, woken: Receiver<()>) {
        loop {
            let _ = woken.recv_timeout(CHECK);
            // Replies are sent outside the lock: sending may wait on the kernel.
            let mut answers: Vec<(ReplyData, Result<Vec<u8>, Errno>)> = Vec::new();
            let mut pollers = Vec::new();
            {
                let mut readers = lock(&self.readers);
                for reader in readers.values_mut() {
                    let waiting = std::mem::take(&mut reader.waiting);
                    for w in waiting {
                        if let Some(data) = reader.take(w.size) {
                            answers.push((w.reply, Ok(data)));
                        } else if stopping() {
                            answers.push((w.reply, Ok(Vec::new())));
                        } else if interrupted(w.tid) {
                            answers.push((w.reply, Err(Errno::EINTR)));
                        } else {
                            reader.waiting.push(w);
                        }
                    }
                    if (reader.has_data() || stopping())
                        && let Some(p) = reader.poller.take()
                    {
                        pollers.push(p);
                    }
                }
            }
            for (reply, answer) in answers {
                match answer {
                    Ok(data) => reply.data(&data),
                    Err(e) => reply.error(e),
                }
            }
            for p in pollers {
                let _ = p.notify();
            }
        }
    }
}

/// Whether thread `tid` is gone, or has a signal to take that it neither blocks nor ignores
/// (a killed reader among them: it cannot die until its read is answered).
fn interrupted(tid: u32) -> bool {
    let Some(status) = crate::procfs::status(tid) else {
        return true;
    };
    let pending = status.mask("SigPnd") | status.mask("ShdPnd");
    pending & !status.mask("SigBlk") & !status.mask("SigIgn") != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_quiet_thread_is_not_interrupted_and_a_missing_one_is() {
        assert!(!interrupted(std::process::id()));
        assert!(interrupted(u32::MAX - 1));
    }
}
