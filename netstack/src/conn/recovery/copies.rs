//! The copies of one connection's unacknowledged frames ([`Copies`]), each with what
//! recovery knows of it ([`Sent`]).

use std::collections::VecDeque;

use smoltcp::time::Instant;

/// Copy storage a connection keeps when it ends (more is freed).
const RETAINED_COPY_BYTES: usize = 32 * 1024;

/// One kept frame that took sequence space `seq..end`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub(super) seq: u32,
    pub(super) end: u32,
    /// Frame bytes in `Flight::copies`.
    pub(super) len: u32,
    /// Last time it went out (by smoltcp or by us).
    pub(super) sent_at: Instant,
    /// When smoltcp sent it (first, or again itself): what a probe's wait and an ACK delay
    /// are measured from.
    pub(super) first_sent: Instant,
    /// Sent more than once: no RTT sample from it (Karn).
    pub(super) resent: bool,
    /// Sent again by us, outcome not yet known (SACK peers only).
    pub(super) ours: bool,
    /// SND.MAX when we last sent it again: an ACK beyond it acknowledges data sent after
    /// the copy, so the peer had the copy before it.
    pub(super) settle: u32,
    /// The peer SACKed it.
    pub(super) sacked: bool,
    /// A SYN or SYN-ACK.
    pub(super) syn: bool,
    /// The acknowledgment number it carried when it first went out.
    pub(super) peer_ack: u32,
    /// Last sent again by a probe (rather than a re-send of a copy found lost).
    pub(super) probed: bool,
    /// The peer sent again data this copy acknowledged: it never arrived.
    pub(super) lost: bool,
    /// The peer reported it as a duplicate (D-SACK) since we sent it again.
    pub(super) duplicate: bool,
}

/// Frame bytes kept beside a connection's other recovery state for its oldest copy (see
/// [`Copies`]): a reply of up to about 200 bytes over IPv4 (a GET hit of a small value).
pub(super) const INLINE_FRAME_BYTES: usize = 256;

/// A connection's kept copies, oldest first. A copy whose frame fits
/// [`INLINE_FRAME_BYTES`] and that is the only one when it is sent is kept inline, in
/// [`Flight`]'s own memory: in request/response use with small replies, every copy. So
/// keeping a reply and dropping it when its ACK comes touch no memory of their own (at
/// many connections, a heap allocation per copy is a cache and TLB miss). Other copies, and
/// every copy sent while one is kept, go to heap queues (`more`, and their frames back to
/// back in `bytes`), which a slot keeps (up to [`RETAINED_COPY_BYTES`]) for its next
/// connections.
#[derive(Debug)]
pub(super) struct Copies {
    /// The oldest copy, kept inline; `None`: all copies are in `more`.
    pub(super) first: Option<Sent>,
    /// The frame of `first` (its first `first.len` bytes).
    pub(super) first_frame: [u8; INLINE_FRAME_BYTES],
    /// The copies after `first` (or all of them), oldest first.
    pub(super) more: VecDeque<Sent>,
    /// The frames of `more`, back to back, oldest first.
    pub(super) bytes: VecDeque<u8>,
}

impl Default for Copies {
    fn default() -> Self {
        Copies {
            first: None,
            first_frame: [0; INLINE_FRAME_BYTES],
            more: VecDeque::new(),
            bytes: VecDeque::new(),
        }
    }
}

impl Copies {
    #[inline]
    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&Sent> {
        self.first.as_ref().or_else(|| self.more.front())
    }

    pub(super) fn back(&self) -> Option<&Sent> {
        self.more.back().or(self.first.as_ref())
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Sent> {
        self.first.iter_mut().chain(self.more.iter_mut())
    }

    /// Keeps `sent` and its `frame` as the newest copy; heap queues that are still empty
    /// reserve `reserve_bytes` (at least the frame).
    pub(super) fn push_back(&mut self, sent: Sent, frame: &[u8], reserve_bytes: usize) {
        if self.is_empty() && frame.len() <= INLINE_FRAME_BYTES {
            self.first_frame[..frame.len()].copy_from_slice(frame);
            self.first = Some(sent);
            return;
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(reserve_bytes.max(frame.len()));
            self.more.reserve(4);
        }
        self.more.push_back(sent);
        self.bytes.extend(frame);
    }

    /// Drops the oldest copy.
    pub(super) fn pop_front(&mut self) {
        if self.first.take().is_some() {
            return;
        }
        if let Some(copy) = self.more.pop_front() {
            if self.more.is_empty() {
                self.bytes.clear();
            } else {
                self.bytes.drain(..copy.len as usize);
            }
        }
    }

    /// Drops the newest copy.
    pub(super) fn pop_back(&mut self) {
        if let Some(copy) = self.more.pop_back() {
            let new_len = self.bytes.len() - copy.len as usize;
            self.bytes.truncate(new_len);
        } else {
            self.first = None;
        }
    }

    /// The frame of copy `index`, in at most two pieces.
    pub(super) fn frame(&self, index: usize) -> (&[u8], &[u8]) {
        let index = match &self.first {
            Some(first) if index == 0 => return (&self.first_frame[..first.len as usize], &[]),
            Some(_) => index - 1,
            None => index,
        };
        let start: usize = self.more.iter().take(index).map(|c| c.len as usize).sum();
        let end = start + self.more[index].len as usize;
        let (a, b) = self.bytes.as_slices();
        if end <= a.len() {
            (&a[start..end], &[])
        } else if start >= a.len() {
            (&b[start - a.len()..end - a.len()], &[])
        } else {
            (&a[start..], &b[..end - a.len()])
        }
    }

    /// Drops every copy; keeps the heap queues' storage up to [`RETAINED_COPY_BYTES`].
    pub(super) fn clear(&mut self) {
        self.first = None;
        self.more.clear();
        self.bytes.clear();
        if self.bytes.capacity() > RETAINED_COPY_BYTES {
            self.bytes = VecDeque::new();
        }
    }
}

impl std::ops::Index<usize> for Copies {
    type Output = Sent;

    fn index(&self, index: usize) -> &Sent {
        match &self.first {
            Some(first) if index == 0 => first,
            Some(_) => &self.more[index - 1],
            None => &self.more[index],
        }
    }
}

impl std::ops::IndexMut<usize> for Copies {
    fn index_mut(&mut self, index: usize) -> &mut Sent {
        match &mut self.first {
            Some(first) if index == 0 => first,
            Some(_) => &mut self.more[index - 1],
            None => &mut self.more[index],
        }
    }
}
