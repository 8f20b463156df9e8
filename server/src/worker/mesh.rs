//! The queues between worker cores: forwarded requests one way, their replies the other.
//!
//! ```text
//! worker A ──(A, Batch)──▶ worker B's request queue    (bounded crossbeam channels, one per
//! worker A ◀──Replies───── worker B                     worker and direction)
//! ```
//!
//! Each loop iteration a worker offers every non-empty outgoing batch to its destination (one
//! message per destination, however many requests it holds), then drains its own queues:
//! replies are delivered to their connections, requests are executed against its shard and
//! answered in one message per batch. A worker that parks (the `park` idle policy) says so in
//! a flag and sleeps on its queue's descriptor and its eventfd; a sender that finds the flag
//! set writes the eventfd, so a parked worker wakes for forwarded work as it does for frames.
//!
//! Every queue holds at most [`QUEUE_MESSAGES`] messages, and no worker ever waits on another:
//! sends are `try_send`. A batch a full queue refuses stays in the sender's engine, whose
//! connections stop forwarding to that worker until it is taken (`engine/forward.rs`): the
//! push-back lands on the clients' connections, not on the other worker. Replies a full queue
//! refuses stay in the owner, which takes no new requests until they are handed back. Replies
//! are always taken (delivering one only splices it into its connection's output, bounded by
//! the connection's credit), so the two directions cannot wait on each other.
//!
//! The one exception is a hold (`control::holds`): a request asking this worker to hold for
//! another's Redis transaction is answered, then the worker runs only that transaction's
//! jobs until it is released (within time bounds), right after the batch that asked.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use store::Now;

use crate::engine::{Batch, Engine, Replies};

/// Messages one worker's queue (of requests, or of replies) holds at most.
pub const QUEUE_MESSAGES: usize = 64;

/// Messages of each kind handled per loop iteration, so a flood from other cores cannot
/// starve the worker's own queue.
const MESSAGES_PER_ITERATION: usize = 64;

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
    /// Times a full queue refused a batch (kept and offered again on the next loop).
    pub batches_refused: u64,
    /// Times a full queue refused a reply message (kept and offered again).
    pub replies_refused: u64,
}

/// One worker's end of the mesh.
#[derive(Debug)]
pub struct Mesh {
    me: usize,
    requests_to: Vec<Sender<(usize, Batch)>>,
    replies_to: Vec<Sender<Replies>>,
    requests_in: Receiver<(usize, Batch)>,
    replies_in: Receiver<Replies>,
    peers: Arc<[Peer]>,
    /// Between `park` and `unpark`.
    parking: bool,
    /// Replies taken during a hold, delivered on the next [`Mesh::receive`].
    stashed: Vec<Replies>,
    stats: MeshStats,
}

/// Builds the endpoints of `workers` workers, index `i` for worker `i`.
///
/// # Errors
/// When an eventfd cannot be created.
pub fn build(workers: usize) -> Result<Vec<Mesh>, String> {
    build_with_capacity(workers, QUEUE_MESSAGES)
}

/// [`build`] with queues of `capacity` messages (tests use tiny ones).
///
/// # Errors
/// When an eventfd cannot be created.
pub fn build_with_capacity(workers: usize, capacity: usize) -> Result<Vec<Mesh>, String> {
    let (requests_to, requests_in): (Vec<_>, Vec<_>) = (0..workers)
        .map(|_| crossbeam_channel::bounded(capacity))
        .unzip();
    let (replies_to, replies_in): (Vec<_>, Vec<_>) = (0..workers)
        .map(|_| crossbeam_channel::bounded(capacity))
        .unzip();
    let peers: Arc<[Peer]> = (0..workers)
        .map(|_| {
            Ok(Peer {
                parked: AtomicBool::new(false),
                wake: eventfd()?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?
        .into();
    Ok(requests_in
        .into_iter()
        .zip(replies_in)
        .enumerate()
        .map(|(me, (requests_in, replies_in))| Mesh {
            me,
            requests_to: requests_to.clone(),
            replies_to: replies_to.clone(),
            requests_in,
            replies_in,
            peers: Arc::clone(&peers),
            parking: false,
            stashed: Vec::new(),
            stats: MeshStats::default(),
        })
        .collect())
}

fn eventfd() -> Result<OwnedFd, String> {
    crate::sys::eventfd().map_err(|e| format!("eventfd: {e}"))
}

impl Mesh {
    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.me
    }

    /// Workers in the mesh.
    pub fn workers(&self) -> usize {
        self.requests_to.len()
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

    /// Offers every batch of requests the engine forwarded (and every batch a full queue
    /// refused before) to its destination's queue. Returns whether any was taken.
    pub fn send_forwards(&mut self, engine: &mut Engine) -> bool {
        if !engine.has_forwards() {
            return false;
        }
        let me = self.me;
        engine.take_forwards(|dest, batch| {
            let requests = batch.requests() as u64;
            match self.requests_to[dest].try_send((me, batch)) {
                Ok(()) => {
                    self.stats.batches_out += 1;
                    self.stats.requests_out += requests;
                    self.wake(dest);
                    Ok(())
                }
                Err(TrySendError::Full((_, batch))) => {
                    self.stats.batches_refused += 1;
                    Err(batch)
                }
                // The receiver is gone only once the server is stopping.
                Err(TrySendError::Disconnected(_)) => Ok(()),
            }
        })
    }

    /// Offers the replies the engine produced for other workers to their queues. Returns
    /// whether any were taken.
    fn send_replies(&mut self, engine: &mut Engine) -> bool {
        engine.take_replies(
            |dest, replies| match self.replies_to[dest].try_send(replies) {
                Ok(()) => {
                    self.wake(dest);
                    Ok(())
                }
                Err(TrySendError::Full(replies)) => {
                    self.stats.replies_refused += 1;
                    Err(replies)
                }
                Err(TrySendError::Disconnected(_)) => Ok(()),
            },
        )
    }

    /// Handles, while every reply can be handed back, up to 64 request messages, executing them
    /// and sending their replies; then up to 64 reply messages, handing each to `deliver` (which
    /// puts them in their connections) before recycling it. Replies are taken whatever else
    /// happens. (Delivering late in the loop, right before egress, lets replies that arrive
    /// together leave in the same segments.) Returns how many messages were handled.
    pub fn receive(
        &mut self,
        engine: &mut Engine,
        now: impl Into<Now>,
        mut deliver: impl FnMut(&mut Engine, &Replies),
    ) -> usize {
        let now = now.into();
        if engine.has_replies() {
            self.send_replies(engine);
        }
        let mut requests = 0;
        while requests < MESSAGES_PER_ITERATION && !self.requests_in.is_empty() {
            if engine.replies_held() {
                // A worker that cannot hand back replies takes no new requests.
                break;
            }
            let Ok((from, batch)) = self.requests_in.try_recv() else {
                break;
            };
            requests += 1;
            self.stats.requests_in += batch.requests() as u64;
            engine.serve_forwarded(from, batch, now);
            self.send_replies(engine);
            if engine.holding() {
                self.hold(engine);
            }
        }
        let mut handled = 0;
        for replies in std::mem::take(&mut self.stashed) {
            handled += 1;
            self.stats.replies_in += replies.len() as u64;
            deliver(engine, &replies);
            engine.recycle(replies);
        }
        while handled < MESSAGES_PER_ITERATION && !self.replies_in.is_empty() {
            let Ok(replies) = self.replies_in.try_recv() else {
                break;
            };
            handled += 1;
            self.stats.replies_in += replies.len() as u64;
            deliver(engine, &replies);
            engine.recycle(replies);
        }
        handled + requests
    }

    /// Holds for another worker's cross-worker transaction (`control::holds`): runs its jobs
    /// and nothing else, handing back the replies that answered the hold, until released.
    fn hold(&mut self, engine: &mut Engine) {
        let mut spins = 0u32;
        while engine.hold_step() {
            if engine.has_replies() {
                self.send_replies(engine);
            }
            // Replies from other workers are taken (to be delivered after the hold), so a
            // worker with replies for this one does not stop taking requests meanwhile.
            while let Ok(replies) = self.replies_in.try_recv() {
                self.stashed.push(replies);
            }
            crate::control::holds::pause(&mut spins);
        }
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
        self.requests_in.is_empty() && self.replies_in.is_empty()
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
        crate::sys::eventfd_take(peer.wake.as_fd());
    }

    /// Wakes worker `dest` if it sleeps.
    fn wake(&mut self, dest: usize) {
        fence(Ordering::SeqCst);
        let peer = &self.peers[dest];
        if peer.parked.load(Ordering::SeqCst) {
            self.stats.wakeups += 1;
            crate::sys::eventfd_add_one(peer.wake.as_fd());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::ClientConn;
    use crate::engine::{EngineConfig, Stop, owner_of};

    const NOW: u64 = 1_700_000_000;

    fn engine(worker: usize) -> Engine {
        Engine::new(EngineConfig {
            started_unix_secs: NOW,
            threads: 2,
            worker,
            conn_limit: 16,
            ..EngineConfig::new(
                store::ShardConfig {
                    memory_limit_bytes: 16 << 20,
                    max_item_size: 1 << 20,
                },
                crate::control::Control::new(Default::default(), 0),
            )
        })
    }

    /// A key worker `owner` of two owns.
    fn key_of(owner: usize, n: usize) -> String {
        (0..)
            .map(|i| format!("key:{n}:{i}"))
            .find(|k| owner_of(k.as_bytes(), 2) == owner)
            .unwrap()
    }

    /// A connection on worker 0 with `request` buffered, executed once.
    fn conn_with(token: u128, home: &mut Engine, request: &str) -> (ClientConn, Stop) {
        let mut conn = ClientConn::default();
        conn.session.set_token(token);
        conn.input.extend(request.as_bytes());
        let stop = conn.execute_buffered(home, NOW).stop;
        (conn, stop)
    }

    #[test]
    fn a_full_queue_keeps_the_batch_and_stops_the_connections_that_feed_it() {
        let mut meshes = build_with_capacity(2, 1).unwrap();
        let (mut mb, mut ma) = (meshes.pop().unwrap(), meshes.pop().unwrap());
        let (mut a, mut b) = (engine(0), engine(1));
        let remote = key_of(1, 0);
        let local = key_of(0, 0);
        let (mut c1, _) = conn_with(1, &mut a, &format!("set {remote} 0 0 2\r\nv1\r\n"));
        assert!(ma.send_forwards(&mut a), "the queue takes the first batch");
        let (mut c2, _) = conn_with(2, &mut a, &format!("get {remote}\r\n"));
        assert!(!ma.send_forwards(&mut a), "a full queue refuses the second");
        assert_eq!(ma.stats().batches_refused, 1);
        // The batch stays here: connections that would feed it stop, the others go on.
        let get = format!("get {remote}\r\n");
        let (mut c3, stop) = conn_with(3, &mut a, &get);
        assert_eq!(
            (stop, c3.input.len()),
            (Stop::Blocked, get.len()),
            "nothing consumed"
        );
        let (c4, stop) = conn_with(4, &mut a, &format!("get {local}\r\n"));
        assert_eq!(stop, Stop::Input);
        assert_eq!(c4.pending_output(), b"END\r\n");
        // The owner takes the first batch; the held one goes on the next offer.
        assert_eq!(
            mb.receive(&mut b, NOW, |_, _| panic!("no replies for b")),
            1
        );
        assert!(ma.send_forwards(&mut a));
        assert_eq!(c3.execute_buffered(&mut a, NOW).stop, Stop::Input);
        assert!(
            !ma.send_forwards(&mut a),
            "the queue holds the second batch again"
        );
        // Every reply comes back to its connection, in order.
        let mut conns = [&mut c1, &mut c2, &mut c3];
        let mut delivered = 0;
        for _ in 0..10 {
            ma.send_forwards(&mut a);
            mb.receive(&mut b, NOW, |_, _| {});
            ma.receive(&mut a, NOW, |a, replies| {
                for i in 0..replies.len() {
                    let token = replies.token(i).unwrap() as usize;
                    conns[token - 1].deliver(a, replies.get(i).unwrap());
                    delivered += 1;
                }
            });
        }
        assert_eq!(delivered, 3);
        assert!(!a.holds_refused() && !b.holds_refused());
        assert_eq!(c1.pending_output(), b"STORED\r\n");
        let value = format!("VALUE {remote} 0 2\r\nv1\r\nEND\r\n");
        assert_eq!(c2.pending_output(), value.as_bytes());
        assert_eq!(c3.pending_output(), value.as_bytes());
    }

    #[test]
    fn an_owner_that_cannot_hand_back_replies_takes_no_new_requests() {
        let mut meshes = build_with_capacity(2, 1).unwrap();
        let (mut mb, mut ma) = (meshes.pop().unwrap(), meshes.pop().unwrap());
        let (mut a, mut b) = (engine(0), engine(1));
        let remote = key_of(1, 1);
        let mut conns = Vec::new();
        for token in 0..3 {
            let (conn, _) = conn_with(token, &mut a, &format!("get {remote}\r\n"));
            conns.push(conn);
            assert!(ma.send_forwards(&mut a));
            // b executes and answers; the second answer finds a's reply queue full.
            assert_eq!(mb.receive(&mut b, NOW, |_, _| {}), usize::from(token < 2));
        }
        assert_eq!(mb.stats().replies_refused, 2, "refused, and refused again");
        assert!(b.replies_held());
        assert_eq!(
            mb.stats().requests_in,
            2,
            "the third request waits in the queue"
        );
        // a takes its replies: b hands back the held ones and takes the third request.
        let mut delivered = 0;
        ma.receive(&mut a, NOW, |_, replies| delivered += replies.len());
        assert_eq!(mb.receive(&mut b, NOW, |_, _| {}), 1);
        assert_eq!(
            mb.stats().replies_refused,
            3,
            "its answer waits behind the second"
        );
        assert!(b.replies_held());
        for _ in 0..3 {
            ma.receive(&mut a, NOW, |_, replies| delivered += replies.len());
            mb.receive(&mut b, NOW, |_, _| {});
        }
        assert_eq!(delivered, 3);
        assert_eq!(mb.stats().requests_in, 3);
    }

    #[test]
    fn a_parked_worker_is_woken_through_its_eventfd() {
        let mut meshes = build(2).unwrap();
        let mut b = meshes.pop().unwrap();
        let mut a = meshes.pop().unwrap();
        assert!(b.park(), "nothing queued: b may sleep");
        let readable = |mesh: &Mesh| {
            crate::sys::poll_readable([mesh.wake_fd()], Some(std::time::Duration::ZERO)).unwrap()
                == 1
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
