//! The queues between worker cores: forwarded requests one way, their replies the other.
//!
//! ```text
//! worker A ──Requests{from: A, Batch}──▶ worker B's inbox    (crossbeam channel, one per worker)
//! worker A ◀──────────Replies────────── worker B
//! ```
//!
//! Each loop iteration a worker hands every non-empty outgoing batch to its destination (one
//! message per destination, however many requests it holds), then drains its own inbox:
//! requests are executed against its shard and answered in one message, replies are delivered
//! to their connections. A worker that parks (the `park` idle policy) says so in a flag and
//! sleeps on its queue's descriptor and its eventfd; a sender that finds the flag set writes
//! the eventfd, so a parked worker wakes for forwarded work as it does for frames.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::engine::{Batch, Engine, Replies};

/// Messages handled per loop iteration, so a flood from other cores cannot starve the queue.
const MESSAGES_PER_ITERATION: usize = 64;

/// What one worker sends another.
#[derive(Debug)]
pub enum Message {
    /// Requests for keys the receiver owns, from worker `from`.
    Requests {
        /// The sender, who gets the replies.
        from: usize,
        /// The requests.
        batch: Batch,
    },
    /// Replies to requests the receiver forwarded.
    Replies(Replies),
}

/// What every worker can see of one worker.
#[derive(Debug)]
struct Peer {
    /// Set while the worker sleeps (or is about to): senders then write `wake`.
    parked: AtomicBool,
    /// An eventfd the worker sleeps on beside its queue.
    wake: OwnedFd,
}

/// Counters of one worker's mesh endpoint.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MeshStats {
    /// Request messages sent (batches).
    pub batches_out: u64,
    /// Requests forwarded to other workers.
    pub requests_out: u64,
    /// Requests executed for other workers.
    pub requests_in: u64,
    /// Replies delivered back to this worker's connections.
    pub replies_in: u64,
    /// Wake-ups written to parked workers.
    pub wakeups: u64,
}

/// One worker's end of the mesh.
#[derive(Debug)]
pub struct Mesh {
    me: usize,
    senders: Vec<Sender<Message>>,
    inbox: Receiver<Message>,
    peers: Arc<[Peer]>,
    /// Between `park` and `unpark`.
    parking: bool,
    stats: MeshStats,
}

/// Builds the endpoints of `workers` workers, index `i` for worker `i`.
///
/// # Errors
/// When an eventfd cannot be created.
pub fn build(workers: usize) -> Result<Vec<Mesh>, String> {
    let mut senders = Vec::with_capacity(workers);
    let mut receivers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, rx) = crossbeam_channel::unbounded();
        senders.push(tx);
        receivers.push(rx);
    }
    let peers: Arc<[Peer]> = (0..workers)
        .map(|_| {
            Ok(Peer {
                parked: AtomicBool::new(false),
                wake: eventfd()?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?
        .into();
    Ok(receivers
        .into_iter()
        .enumerate()
        .map(|(me, inbox)| Mesh {
            me,
            senders: senders.clone(),
            inbox,
            peers: Arc::clone(&peers),
            parking: false,
            stats: MeshStats::default(),
        })
        .collect())
}

fn eventfd() -> Result<OwnedFd, String> {
    // SAFETY: eventfd(2) with constant flags; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Mesh {
    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.me
    }

    /// Workers in the mesh.
    pub fn workers(&self) -> usize {
        self.senders.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> &MeshStats {
        &self.stats
    }

    /// The descriptor a parked worker also sleeps on; `None` with one worker.
    pub fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        (self.workers() > 1).then(|| {
            use std::os::fd::AsFd;
            self.peers[self.me].wake.as_fd()
        })
    }

    /// Sends every batch of requests the engine forwarded since the last call. Returns
    /// whether anything was sent.
    pub fn send_forwards(&mut self, engine: &mut Engine) -> bool {
        if !engine.has_forwards() {
            return false;
        }
        let me = self.me;
        engine.take_forwards(|dest, batch| {
            self.stats.batches_out += 1;
            self.stats.requests_out += batch.len() as u64;
            // A send fails only once the receiver is gone, i.e. the server is stopping.
            let _ = self.senders[dest].send(Message::Requests { from: me, batch });
            self.wake(dest);
        });
        true
    }

    /// Handles up to [`MESSAGES_PER_ITERATION`] messages from the inbox: executes requests
    /// and sends their replies, and hands replies to `deliver` (which puts them in their
    /// connections) before recycling them. Returns how many messages were handled.
    pub fn receive(
        &mut self,
        engine: &mut Engine,
        now: u64,
        mut deliver: impl FnMut(&mut Engine, &Replies),
    ) -> usize {
        let mut handled = 0;
        while handled < MESSAGES_PER_ITERATION {
            let message = match self.inbox.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            };
            handled += 1;
            match message {
                Message::Requests { from, batch } => {
                    self.stats.requests_in += batch.len() as u64;
                    let replies = engine.serve_forwarded(batch, now);
                    let _ = self.senders[from].send(Message::Replies(replies));
                    self.wake(from);
                }
                Message::Replies(replies) => {
                    self.stats.replies_in += replies.len() as u64;
                    deliver(engine, &replies);
                    engine.recycle(replies);
                }
            }
        }
        handled
    }

    /// Announces that this worker is about to sleep. Returns false if a message arrived in
    /// the meantime (do not sleep); either way call [`Mesh::unpark`] afterwards.
    pub fn park(&mut self) -> bool {
        if self.workers() == 1 {
            return true;
        }
        self.parking = true;
        self.peers[self.me].parked.store(true, Ordering::SeqCst);
        // Pairs with the fence in `wake`: either the sender sees the flag, or this sees the
        // message.
        fence(Ordering::SeqCst);
        self.inbox.is_empty()
    }

    /// Back from sleep (or from deciding not to): clears the flag and drains the eventfd. Free
    /// when the worker did not park.
    pub fn unpark(&mut self) {
        if !self.parking {
            return;
        }
        self.parking = false;
        let peer = &self.peers[self.me];
        peer.parked.store(false, Ordering::SeqCst);
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a u64 from our own non-blocking eventfd; EAGAIN (nothing
        // written) is the common and harmless outcome.
        let _ = unsafe {
            libc::read(
                peer.wake.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                size_of::<u64>(),
            )
        };
    }

    /// Wakes worker `dest` if it sleeps.
    fn wake(&mut self, dest: usize) {
        fence(Ordering::SeqCst);
        let peer = &self.peers[dest];
        if peer.parked.load(Ordering::SeqCst) {
            self.stats.wakeups += 1;
            let one = 1u64;
            // SAFETY: writes 8 bytes from a u64 to an eventfd we keep open for the mesh's
            // lifetime; a full counter (EAGAIN) still leaves the descriptor readable.
            let _ = unsafe {
                libc::write(
                    peer.wake.as_raw_fd(),
                    (&one as *const u64).cast(),
                    size_of::<u64>(),
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_worker_is_woken_through_its_eventfd() {
        let mut meshes = build(2).unwrap();
        let mut b = meshes.pop().unwrap();
        let mut a = meshes.pop().unwrap();
        assert!(b.park(), "nothing queued: b may sleep");
        let readable = |mesh: &Mesh| {
            let mut pfd = libc::pollfd {
                fd: mesh.wake_fd().unwrap().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
        };
        assert!(!readable(&b));
        a.wake(1);
        assert!(readable(&b));
        assert_eq!(a.stats().wakeups, 1);
        b.unpark();
        assert!(!readable(&b), "unpark drains the eventfd");
        // Not parked: no wake-up is written.
        a.wake(1);
        assert!(!readable(&b));
        assert_eq!(a.stats().wakeups, 1);
    }
}
