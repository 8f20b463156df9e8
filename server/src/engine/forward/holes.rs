//! A connection's holes: the places in its output where replies from other workers go, in
//! request order, and the connections that went away with requests still out (departures).

use super::*;

/// A hole in a connection's output: replies still to come for one request.
#[derive(Debug)]
pub(crate) struct Hole {
    pub seq: u64,
    /// Where the reply goes in the connection's output buffer.
    pub at: usize,
    /// Replies still expected.
    pub awaiting: usize,
    /// False while the adapter may still add parts (a multi-key request part-way): the hole
    /// is not filled before it is sealed, however many replies arrived.
    pub sealed: bool,
    /// Combines several workers' answers; `None`: the one reply is spliced as it is.
    pub gather: Option<Box<dyn Gather>>,
    /// The worker executing the request; `None` for a gather (charged nothing: its parts'
    /// credit is due as they arrive).
    pub owner: Option<usize>,
    /// Bytes of the forwarded request, counted until its reply arrives.
    pub request_len: usize,
    /// When the request arrived and its kind, for the latency instrument (set by the
    /// adapter's [`Holes::stamp_last`]; forwarding only hands it back when the hole fills).
    pub stamp: Option<Stamp>,
}

/// When a forwarded request arrived (monotonic nanoseconds), its kind, the samples it stands
/// for (one request; a multi-key request's parts other workers answered) and the count of
/// `stats reset`s before it (the latency instrument's), handed back with its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub arrived_ns: u64,
    pub kind: u8,
    pub count: u32,
    pub resets: u32,
}

/// Reply bytes from one owner in the output, not sent yet: their credit goes back once they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unsent {
    /// Where the bytes end in the output buffer.
    pub(super) end: usize,
    pub(super) owner: usize,
    pub(super) charge: usize,
}

/// Connections that went away while owners may keep state for them, for the engine to tell
/// those owners. Shared by the engine and the sessions that forwarded (a table drops a session
/// wherever the connection ends, without the engine).
#[derive(Debug, Clone, Default)]
pub(crate) struct Departures(Arc<DepartureList>);

#[derive(Debug, Default)]
pub(super) struct DepartureList {
    /// (connection, owner) pairs to tell.
    pub(super) list: Mutex<Vec<(Token, usize)>>,
    /// Set while `list` may hold entries: the engine looks at it every loop without locking.
    pub(super) waiting: AtomicBool,
}

impl Departures {
    pub(super) fn push(&self, token: Token, owners: &[usize]) {
        if let Ok(mut list) = self.0.list.lock() {
            list.extend(owners.iter().map(|&owner| (token, owner)));
            self.0.waiting.store(true, Ordering::Release);
        }
    }

    pub(super) fn waiting(&self) -> bool {
        self.0.waiting.load(Ordering::Acquire)
    }

    pub(super) fn take(&self, mut f: impl FnMut(Token, usize)) {
        if !self.waiting() {
            return;
        }
        let taken = match self.0.list.lock() {
            Ok(mut list) => {
                self.0.waiting.store(false, Ordering::Release);
                std::mem::take(&mut *list)
            }
            Err(_) => return,
        };
        for (token, owner) in taken {
            f(token, owner);
        }
    }
}

/// The forwarding state of one connection, kept in its [`Session`](super::Session): the holes
/// in its output, the forwarded request bytes awaiting replies, and the reply bytes whose
/// credit is to go back to their owners.
#[derive(Debug, Default)]
pub(crate) struct Holes {
    pub token: Token,
    pub(super) next_seq: u64,
    /// Unfilled holes, in output order.
    pub(super) pending: VecDeque<Hole>,
    /// Filled replies not yet sent, in output order.
    pub(super) unsent: VecDeque<Unsent>,
    /// Request bytes of the unfilled holes.
    pub(super) request_bytes: usize,
    /// Credit to hand back: (owner, bytes) of replies that were sent.
    pub(super) credit_due: Vec<(usize, usize)>,
    /// Every owner this connection forwarded to: told when it goes.
    pub(super) owners: Vec<usize>,
    pub(super) departures: Option<Departures>,
}

/// What [`Holes::deliver`] did with a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivered {
    /// Bytes put into the output (the reply, or a gathered reply once complete).
    pub spliced: usize,
    /// The request asked to close the connection.
    pub close: bool,
    /// The stamp of the request whose hole this reply filled.
    pub stamp: Option<Stamp>,
}

impl Holes {
    /// Opens a hole at `at` expecting `awaiting` replies from `owner` (`None`: a gather) for a
    /// request of `request_len` bytes; returns its sequence number.
    pub(super) fn open(
        &mut self,
        at: usize,
        awaiting: usize,
        gather: Option<Box<dyn Gather>>,
        owner: Option<usize>,
        request_len: usize,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(owner) = owner {
            self.note_owner(owner);
        }
        self.request_bytes += request_len;
        self.pending.push_back(Hole {
            seq,
            at,
            awaiting,
            sealed: true,
            gather,
            owner,
            request_len,
            stamp: None,
        });
        seq
    }

    /// Stamps the hole opened last with its request's arrival and kind.
    pub fn stamp_last(&mut self, stamp: Stamp) {
        if let Some(hole) = self.pending.back_mut() {
            hole.stamp = Some(stamp);
        }
    }

    /// Counts one more sample in the stamp of hole `seq` (a part another worker answers).
    pub fn count_part(&mut self, seq: u64) {
        if let Some(index) = self.find(seq)
            && let Some(stamp) = self.pending[index].stamp.as_mut()
        {
            stamp.count += 1;
        }
    }

    /// Remembers that this connection forwarded to `owner`, to tell it when the connection goes.
    pub(super) fn note_owner(&mut self, owner: usize) {
        if !self.owners.contains(&owner) {
            self.owners.push(owner);
        }
    }

    /// Unfilled holes.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// True when no more may be forwarded until replies arrive: too many holes, or too many
    /// request bytes awaiting replies.
    pub fn full(&self) -> bool {
        self.pending.len() >= MAX_FORWARDS_IN_FLIGHT
            || self.request_bytes >= FORWARD_REQUEST_HIGH_WATER_BYTES
    }

    /// The end of the sendable output: the first hole, or `len`.
    pub fn sendable_end(&self, len: usize) -> usize {
        self.pending.front().map_or(len, |p| p.at)
    }

    /// Output bytes before every hole and every unsent reply were dropped from the front of
    /// the buffer.
    pub fn shift_back(&mut self, dropped: usize) {
        for hole in &mut self.pending {
            hole.at -= dropped;
        }
        for unsent in &mut self.unsent {
            unsent.end -= dropped;
        }
    }

    /// The index of the hole `seq`.
    pub(super) fn find(&self, seq: u64) -> Option<usize> {
        // Holes are opened in sequence order and replies mostly arrive in it.
        self.pending.iter().position(|p| p.seq == seq)
    }

    /// Puts a reply from another worker in its place in `out`: spliced into its hole, or
    /// added to its gather (which writes the reply once its last part is in and the hole is
    /// sealed). A reply whose request is not pending here is ignored.
    pub fn deliver(&mut self, out: &mut Vec<u8>, delivery: Delivery<'_>) -> Delivered {
        let mut delivered = Delivered {
            spliced: 0,
            close: false,
            stamp: None,
        };
        let Some(index) = self.find(delivery.seq) else {
            return delivered;
        };
        let hole = &mut self.pending[index];
        let mut bytes: &[u8] = &[];
        match (hole.gather.as_mut(), delivery.payload) {
            (None, Part::Bytes(reply)) => bytes = reply,
            (None, _) => {}
            (Some(gather), part) => {
                gather.add(part);
                // The part's request no longer waits: its share of the hole's request bytes
                // stops counting (parts are alike; the last takes what is left), so a request
                // of many parts that is still adding them is not held up by its own answers.
                let share = hole.request_len / hole.awaiting.max(1);
                hole.request_len -= share;
                self.request_bytes -= share;
                // The part's bytes are used up here: their credit is due at once.
                if let Part::Bytes(reply) = part {
                    self.add_credit_due(delivery.from, reply_charge(reply.len()));
                }
            }
        }
        delivered.close = delivery.close;
        let hole = &mut self.pending[index];
        hole.awaiting = hole.awaiting.saturating_sub(1);
        if hole.awaiting > 0 || !hole.sealed {
            return delivered;
        }
        delivered.stamp = hole.stamp;
        delivered.spliced = self.fill_at(index, out, bytes);
        delivered
    }

    /// Fills the hole at `index` (its gather, if any, writes the reply; else `bytes`) and
    /// splices the reply into `out`; returns its length.
    pub(super) fn fill_at(&mut self, index: usize, out: &mut Vec<u8>, bytes: &[u8]) -> usize {
        let mut rendered = Vec::new();
        let bytes = match self.pending[index].gather.as_mut() {
            Some(gather) => {
                gather.finish(&mut rendered);
                &rendered[..]
            }
            None => bytes,
        };
        let Some(hole) = self.fill(index, bytes.len()) else {
            return 0;
        };
        out.splice(hole.at..hole.at, bytes.iter().copied());
        bytes.len()
    }

    /// Removes the hole at `index`, whose `len` reply bytes are being put at its place: every
    /// later hole and unsent reply moves by `len`, and the bytes are recorded as unsent, their
    /// credit due once sent. Returns the hole.
    pub(super) fn fill(&mut self, index: usize, len: usize) -> Option<Hole> {
        let hole = self.pending.remove(index)?;
        let at = hole.at;
        for later in self.pending.iter_mut().skip(index) {
            later.at += len;
        }
        for unsent in self.unsent.iter_mut().rev() {
            if unsent.end <= at {
                break;
            }
            unsent.end += len;
        }
        self.request_bytes -= hole.request_len;
        if let Some(owner) = hole.owner
            && len > 0
        {
            let index = self.unsent.partition_point(|u| u.end <= at);
            self.unsent.insert(
                index,
                Unsent {
                    end: at + len,
                    owner,
                    charge: reply_charge(len),
                },
            );
        }
        Some(hole)
    }

    /// The output before `sent_end` has been sent: credit of the replies in it becomes due.
    pub fn sent_through(&mut self, sent_end: usize) {
        while let Some(&front) = self.unsent.front() {
            if front.end > sent_end {
                break;
            }
            self.unsent.pop_front();
            self.add_credit_due(front.owner, front.charge);
        }
    }

    pub(super) fn add_credit_due(&mut self, owner: usize, charge: usize) {
        if charge == 0 {
            return;
        }
        match self.credit_due.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, bytes)) => *bytes += charge,
            None => self.credit_due.push((owner, charge)),
        }
    }

    /// True when sent replies' credit waits to be handed back.
    pub fn credit_is_due(&self) -> bool {
        !self.credit_due.is_empty()
    }

    /// Hands `f` each owner's credit that became due, once.
    #[cfg(test)]
    pub fn take_credit_due(&mut self, f: impl FnMut(usize, usize)) {
        self.take_credit_due_if(|_, _| true, f);
    }

    /// Hands `f` the credit due to the owners `which(owner, bytes)` picks, once; keeps the rest.
    pub fn take_credit_due_if(
        &mut self,
        mut which: impl FnMut(usize, usize) -> bool,
        mut f: impl FnMut(usize, usize),
    ) {
        self.credit_due.retain(|&(owner, bytes)| {
            if which(owner, bytes) {
                f(owner, bytes);
                false
            } else {
                true
            }
        });
    }

    /// True when nothing of this connection waits on another worker or to be sent: no hole,
    /// no reply from another worker unsent.
    pub(super) fn idle(&self) -> bool {
        self.pending.is_empty() && self.unsent.is_empty()
    }

    /// Records where to report this connection's end.
    pub(super) fn attach(&mut self, departures: &Departures) {
        if self.departures.is_none() {
            self.departures = Some(departures.clone());
        }
    }
}

impl Drop for Holes {
    fn drop(&mut self) {
        if let Some(departures) = &self.departures
            && !self.owners.is_empty()
        {
            departures.push(self.token, &self.owners);
        }
    }
}
