//! The application's side of a connection: [`ConnTable::serve`] and
//! [`ConnTable::with_conn`] call it with a [`Conn`], its state and its [`Io`], and then
//! apply what it did (bytes written, a close, a wish to write more).
//!
//! [`Io`] is smoltcp's TCP socket calls with the table told about every change that needs
//! egress: a read frees window, a write queues data, a close queues a FIN. So only
//! connections the application touched make their bucket dirty, and [`ConnTable::serve`]
//! costs what the connections with work cost.

use smoltcp::socket::tcp;
use smoltcp::wire::IpEndpoint;

#[cfg(doc)]
use super::TableConfig;
use super::{ConnEvent, ConnId, ConnTable, Phase, Stamps};

impl<S: Default> ConnTable<S> {
    /// Calls `f` for every open connection that may have work: new data received, send
    /// space freed while the application asked for it ([`Io::want_write`]), or a state
    /// change such as the peer closing. Cost is proportional to the connections with work.
    /// Returns how many connections `f` was called for.
    pub fn serve(&mut self, mut f: impl FnMut(&mut Conn<'_, S>)) -> usize {
        self.refresh_touched();
        let mut batch = std::mem::take(&mut self.ready);
        let mut calls = 0;
        for &(bucket, slot) in &batch {
            let bucket = bucket as usize;
            let slot = slot as usize;
            self.buckets[bucket].slots[slot].queued = false;
            if self.run(bucket, slot, &mut f).is_some() {
                calls += 1;
            }
        }
        batch.clear();
        batch.append(&mut self.ready);
        self.ready = batch;
        calls
    }

    /// Runs `f` on the connection `id` if it is still open (for replies produced later,
    /// e.g. by another core); `None` if it closed meanwhile.
    pub fn with_conn<R>(&mut self, id: ConnId, f: impl FnOnce(&mut Conn<'_, S>) -> R) -> Option<R> {
        let (bucket, slot) = (id.bucket as usize, id.slot as usize);
        let current = self.buckets.get(bucket)?.slots.get(slot)?;
        if current.generation != id.generation {
            return None;
        }
        self.run(bucket, slot, f)
    }

    /// Runs the application on one open connection and applies what it did.
    fn run<R>(
        &mut self,
        bucket_index: usize,
        index: usize,
        f: impl FnOnce(&mut Conn<'_, S>) -> R,
    ) -> Option<R> {
        let now = self.now;
        let bucket = &mut self.buckets[bucket_index];
        let slot = &mut bucket.slots[index];
        if slot.phase != Phase::Open {
            return None;
        }
        let (Some(handle), Some(session)) = (slot.handle, slot.session.as_mut()) else {
            return None;
        };
        let id = ConnId {
            bucket: bucket_index as u32,
            slot: index as u32,
            generation: slot.generation,
        };
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        let queued_before = socket.send_queue();
        let mut conn = Conn {
            state: session,
            io: Io {
                socket,
                dirty: false,
                closed: false,
                want_write: false,
            },
            id,
            stamps: &slot.stamps,
        };
        let result = f(&mut conn);
        let Io {
            socket,
            dirty,
            closed,
            want_write,
        } = conn.io;
        slot.want_write = want_write;
        slot.seen_recv = socket.recv_queue();
        slot.life
            .wrote(socket.send_queue().saturating_sub(queued_before));
        if closed {
            slot.session = None;
            slot.phase = Phase::Done;
            slot.life.next_stage(now);
            self.stats.closed += 1;
            self.stats.active -= 1;
            if slot.client {
                self.events.push((id, ConnEvent::Closed));
            }
        }
        if dirty || closed {
            self.mark_dirty(bucket_index);
        }
        Some(result)
    }
}

/// One open connection, as the application sees it inside [`ConnTable::serve`].
///
/// The two public fields borrow separately, so `conn.io.recv(|buf| ...)` can update
/// `conn.state` from inside the closure.
pub struct Conn<'a, S> {
    /// The application's state for this connection.
    pub state: &'a mut S,
    /// The connection's socket.
    pub io: Io<'a>,
    pub(super) id: ConnId,
    pub(super) stamps: &'a Stamps,
}

impl<S> Conn<'_, S> {
    /// This connection's id, for [`ConnTable::with_conn`].
    pub fn id(&self) -> ConnId {
        self.id
    }

    /// When this connection's latest new data went to the device and came from it, as poll
    /// clocks, for a connection the table opened ([`ConnTable::connect`]); both `None` for
    /// an accepted one. Read while parsing a reply: `received` is the poll that read it.
    pub fn stamps(&self) -> Stamps {
        *self.stamps
    }
}

/// The socket of a [`Conn`]: smoltcp's TCP socket calls, with the table told about writes.
pub struct Io<'a> {
    pub(super) socket: &'a mut tcp::Socket<'static>,
    pub(super) dirty: bool,
    pub(super) closed: bool,
    pub(super) want_write: bool,
}

impl Io<'_> {
    /// Calls `f` with the largest contiguous slice of received bytes and dequeues the
    /// count it returns (the receive buffer is a ring: data can be split across two calls).
    ///
    /// # Errors
    /// `RecvError::Finished` after the peer's FIN once all data is read;
    /// `RecvError::InvalidState` if the connection cannot receive.
    pub fn recv<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, tcp::RecvError> {
        let mut taken = 0;
        let result = self.socket.recv(|buf| {
            let (n, r) = f(buf);
            taken = n;
            (n, r)
        })?;
        if taken > 0 {
            self.dirty = true;
        }
        Ok(result)
    }

    /// Dequeues received bytes into `data`; returns how many.
    ///
    /// # Errors
    /// As [`Io::recv`].
    pub fn recv_slice(&mut self, data: &mut [u8]) -> Result<usize, tcp::RecvError> {
        let n = self.socket.recv_slice(data)?;
        if n > 0 {
            self.dirty = true;
        }
        Ok(n)
    }

    /// Copies received bytes into `data` without dequeuing them (across the ring's wrap).
    ///
    /// # Errors
    /// As [`Io::recv`].
    pub fn peek_slice(&mut self, data: &mut [u8]) -> Result<usize, tcp::RecvError> {
        self.socket.peek_slice(data)
    }

    /// Calls `f` with the largest contiguous free slice of the send buffer and enqueues the
    /// count it returns.
    ///
    /// # Errors
    /// `SendError::InvalidState` if the connection cannot send.
    pub fn send<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, tcp::SendError> {
        let mut put = 0;
        let result = self.socket.send(|buf| {
            let (n, r) = f(buf);
            put = n;
            (n, r)
        })?;
        if put > 0 {
            self.dirty = true;
        }
        Ok(result)
    }

    /// Enqueues as much of `data` as fits; returns how many bytes.
    ///
    /// # Errors
    /// As [`Io::send`].
    pub fn send_slice(&mut self, data: &[u8]) -> Result<usize, tcp::SendError> {
        let n = self.socket.send_slice(data)?;
        if n > 0 {
            self.dirty = true;
        }
        Ok(n)
    }

    /// Bytes waiting in the receive buffer.
    pub fn recv_queue(&self) -> usize {
        self.socket.recv_queue()
    }

    /// Bytes in the send buffer (not yet sent or not yet acknowledged).
    pub fn send_queue(&self) -> usize {
        self.socket.send_queue()
    }

    /// Size of the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.socket.send_capacity()
    }

    /// Size of the receive buffer.
    pub fn recv_capacity(&self) -> usize {
        self.socket.recv_capacity()
    }

    /// Free bytes in the send buffer.
    pub fn send_space(&self) -> usize {
        self.socket.send_capacity() - self.socket.send_queue()
    }

    /// True while data may still arrive or is buffered (false once the peer's FIN was read).
    pub fn may_recv(&self) -> bool {
        self.socket.may_recv()
    }

    /// True while the send half is open (ESTABLISHED or CLOSE-WAIT).
    pub fn may_send(&self) -> bool {
        self.socket.may_send()
    }

    /// The TCP state.
    pub fn tcp_state(&self) -> tcp::State {
        self.socket.state()
    }

    /// The peer's address and port.
    pub fn remote_endpoint(&self) -> Option<IpEndpoint> {
        self.socket.remote_endpoint()
    }

    /// The connection's own port: the one it was accepted on ([`TableConfig::port`] or
    /// [`TableConfig::extra_port`]), or the one [`ConnTable::connect`] opened it from; 0
    /// once the socket is closed.
    pub fn local_port(&self) -> u16 {
        self.socket.local_endpoint().map_or(0, |local| local.port)
    }

    /// Asks for a call when send space frees up: use when output is pending because the
    /// send buffer is full. Holds until the next call for this connection.
    pub fn want_write(&mut self) {
        self.want_write = true;
    }

    /// Sends what is queued, then FIN. The table drops the application state after this
    /// call returns and makes no more calls for the connection.
    pub fn close(&mut self) {
        self.socket.close();
        self.closed = true;
    }

    /// Resets the connection (one RST) and drops the application state, like `close`.
    pub fn abort(&mut self) {
        self.socket.abort();
        self.closed = true;
    }
}
