//! One connection's turn, the same on every packet path: the state machine a worker runs for a
//! connection with work, over a small [`Socket`] trait that smoltcp's [`Io`] (a socket buffer
//! in this core's table) and a kernel TCP stream ([`KernelSocket`]) both implement.
//!
//! ```text
//! ┌▶ send pending output (the bytes before the first hole) ─ socket failed ─▶ Failed
//! │  settle: credit of other workers' replies that left goes back to them
//! │  closing, nothing awaited, all sent ─▶ Close
//! │  output at the high water, forwards full, or closing ─▶ Wait   (send space or a delivery
//! │                                                                  brings it back)
//! │  the engine stopped for its turn or a full queue ─▶ Again       (after the others)
//! │  input buffered and the engine did not just ask for more ─▶ execute it ─┐
//! │  TURN_READ_BYTES read this turn ─▶ Again                                 │
//! │  receive: in place (Ran) or into the input buffer (Buffered) ─────────────┤
//! │           nothing now ─▶ Wait; the peer closed ─▶ close the session ──────┤
//! └───────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Fairness: a turn runs at most [`TURN_REQUESTS`] requests (the engine counts them) and reads
//! at most [`TURN_READ_BYTES`]; a connection with work left ends its turn with
//! [`End::Again`] and each path serves it again on its next pass, after the others. Replies
//! other workers deliver are sent by [`send_delivered`], which never runs the engine: what the
//! connection held back runs in its next turn, so a client whose requests other workers answer
//! gets one turn per loop however many deliveries it receives.
//!
//! What differs between the paths is only what the trait hides: smoltcp lends its receive ring
//! so requests are parsed in place (copied into the input buffer only when one is split across
//! the ring's end or larger than the ring), a kernel socket reads into the input buffer; and
//! what each path does with an [`End`] (smoltcp: mark the socket for writing, list it in the
//! worker's again list, close or abort it; kernel: epoll's next edge, `serve_again`, close).
//! The tests below run the turn over an in-memory socket.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use netstack::Io;

use super::Time;
use crate::conn::ClientConn;
use crate::control::{CloseReason, Control};
use crate::engine::{Engine, Stop, TURN_REQUESTS};

/// Bytes one connection may read per turn. A smoltcp ring holds fewer (nothing arrives in it
/// while the worker serves), so this binds only where the socket keeps filling during the turn:
/// a kernel socket.
pub const TURN_READ_BYTES: usize = 256 * 1024;

/// The socket failed (reset, or not in a state to send or receive): the connection is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken;

/// What one receive did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// The engine ran in place over `bytes` bytes of the socket's buffer and stopped for
    /// `stop` (an incomplete request's start went to the input buffer).
    Ran {
        /// Why the engine stopped.
        stop: Stop,
        /// Bytes taken from the socket.
        bytes: usize,
    },
    /// This many bytes went into the connection's input buffer.
    Buffered(usize),
    /// Nothing to read now: the next readiness brings the connection back.
    Empty,
    /// The peer closed its side and everything it sent has been read.
    Closed,
}

/// A connection's socket as a turn uses it.
pub trait Socket {
    /// Sends as much of `bytes` as the socket takes now; `Ok(0)` when it takes nothing more.
    ///
    /// # Errors
    /// [`Broken`] when the socket failed.
    fn send(&mut self, bytes: &[u8]) -> Result<usize, Broken>;

    /// Takes what arrived for `client`: runs the engine over it in place where the socket can
    /// lend its buffer, else reads it into `client.input`; notes the arrival time
    /// ([`ClientConn::arrived`]) before the engine sees the bytes.
    ///
    /// # Errors
    /// [`Broken`] when the socket failed.
    fn receive(
        &mut self,
        client: &mut ClientConn,
        engine: &mut Engine,
        time: Time,
    ) -> Result<Received, Broken>;

    /// The port of the listener that accepted the connection.
    fn local_port(&self) -> u16;

    /// The peer's address and the one it connected to, for the connection's record.
    fn endpoints(&self, control: &Control) -> (Option<SocketAddr>, Option<SocketAddr>);
}

/// How a turn ended: what the packet path does with the connection next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Leave it until something happens: bytes arrive, send space opens (mark the socket so
    /// it is told when output is pending), or another worker delivers a reply.
    Wait,
    /// It has work left: give it another turn on the next pass, after the others (mark the
    /// socket for writing when output is pending).
    Again,
    /// Everything is sent and nothing is awaited: close it.
    Close,
    /// The socket failed (its record says so): abort it.
    Failed,
}

/// Gives one connection a turn (see the module's diagram): replies out first, then requests
/// in, until it needs more input, must wait, or its turn is used up. `token` is how other
/// workers' replies find it again; a connection accepted on `resp_port` speaks RESP.
pub fn turn(
    socket: &mut impl Socket,
    client: &mut ClientConn,
    engine: &mut Engine,
    token: u128,
    time: Time,
    resp_port: Option<u16>,
) -> End {
    if client.session.record().is_none() {
        let (peer, local) = socket.endpoints(engine.control());
        let record =
            engine
                .control()
                .open_connection(engine.config().worker, peer, local, time.now);
        record.set_token(token);
        client.session.set_record(record);
    }
    client.accepted_on(socket.local_port(), resp_port);
    client.session.set_token(token);
    client.session.begin_turn(TURN_REQUESTS);
    // Why the engine stopped in this turn (`None`: it has not run since the last read).
    let mut last: Option<Stop> = None;
    let mut read = 0;
    loop {
        if send_pending(socket, client).is_err() {
            client.closing(CloseReason::Error);
            return End::Failed;
        }
        client.settle(engine);
        if client.finished() {
            return End::Close;
        }
        if !client.may_execute() {
            // Output backlog, replies awaited from other workers, or closing with replies
            // still queued: send space or a delivery brings the connection back.
            return End::Wait;
        }
        if matches!(last, Some(Stop::Turn | Stop::Blocked)) {
            return End::Again;
        }
        if last == Some(Stop::Forwards) && client.awaiting_replies() {
            // The request waits for the connection's forwarded requests to be answered
            // (`SWAPDB`, a cross-worker `EXEC`): their delivery brings it back.
            return End::Wait;
        }
        // What is buffered runs first, unless the engine just said it needs more.
        if !client.input.is_empty() && last != Some(Stop::Input) {
            last = Some(client.execute_buffered(engine, time.now).stop);
            continue;
        }
        if read >= TURN_READ_BYTES {
            return End::Again;
        }
        match socket.receive(client, engine, time) {
            Ok(Received::Ran { stop, bytes }) => {
                read += bytes;
                last = Some(stop);
            }
            Ok(Received::Buffered(bytes)) => {
                read += bytes;
                last = None;
            }
            Ok(Received::Empty) => return End::Wait,
            // The peer closed its side: finish what it sent (replies may still be due from
            // other workers), then close.
            Ok(Received::Closed) => client.session.close(),
            Err(Broken) => {
                client.closing(CloseReason::Error);
                return End::Failed;
            }
        }
    }
}

/// Sends a connection's replies that other workers delivered, as far as the socket takes them,
/// and hands back their credit; ends with [`End::Again`] so what the connection held back runs
/// in its next turn, or [`End::Failed`].
pub fn send_delivered(
    socket: &mut impl Socket,
    client: &mut ClientConn,
    engine: &mut Engine,
) -> End {
    let sent = send_pending(socket, client);
    client.settle(engine);
    match sent {
        Ok(()) => End::Again,
        Err(Broken) => {
            client.closing(CloseReason::Error);
            End::Failed
        }
    }
}

/// Sends the connection's pending output until the socket takes no more.
fn send_pending(socket: &mut impl Socket, client: &mut ClientConn) -> Result<(), Broken> {
    while !client.pending_output().is_empty() {
        match socket.send(client.pending_output())? {
            0 => break,
            n => client.sent(n),
        }
    }
    Ok(())
}

/// smoltcp's socket: requests are parsed in place from the receive ring.
impl Socket for Io<'_> {
    fn send(&mut self, bytes: &[u8]) -> Result<usize, Broken> {
        self.send_slice(bytes).map_err(|_| Broken)
    }

    fn receive(
        &mut self,
        client: &mut ClientConn,
        engine: &mut Engine,
        time: Time,
    ) -> Result<Received, Broken> {
        let queued = self.recv_queue();
        if queued == 0 {
            return Ok(if self.may_recv() {
                Received::Empty
            } else {
                Received::Closed
            });
        }
        client.arrived(time.ns);
        if client.input.is_empty() {
            let mut stop = Stop::Input;
            let mut bytes = 0;
            self.recv(|buf| {
                let outcome = client.execute_in_place(engine, buf, time.now);
                stop = outcome.stop;
                bytes = if outcome.stop == Stop::Input && outcome.consumed < buf.len() {
                    // The next request is incomplete in this contiguous slice: assemble it.
                    client.input.extend(&buf[outcome.consumed..]);
                    buf.len()
                } else {
                    outcome.consumed
                };
                (bytes, ())
            })
            .map_err(|_| Broken)?;
            Ok(Received::Ran { stop, bytes })
        } else {
            // Top up exactly what the pending request needs, so the connection returns to
            // in-place parsing as soon as it is complete.
            let want = client.needed.max(1).min(queued);
            let spare = client.input.spare(want);
            let n = self.recv_slice(&mut spare[..want]).map_err(|_| Broken)?;
            client.input.filled(n);
            Ok(Received::Buffered(n))
        }
    }

    fn local_port(&self) -> u16 {
        Io::local_port(self)
    }

    fn endpoints(&self, control: &Control) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let peer = self
            .remote_endpoint()
            .map(|ep| SocketAddr::new(ep.addr.into(), ep.port));
        // The address this worker serves (`--ip`) and the port the table accepted on.
        let local = control
            .settings
            .interface
            .parse()
            .ok()
            .map(|ip| SocketAddr::new(ip, Io::local_port(self)));
        (peer, local)
    }
}

/// A kernel socket lent for one turn, with the port of the listener that accepted it.
#[derive(Debug)]
pub struct KernelSocket<'a> {
    /// The connection's stream (non-blocking).
    pub stream: &'a mut TcpStream,
    /// The accepting listener's port.
    pub local_port: u16,
}

/// A kernel socket: reads go into the connection's input buffer, which grows with what
/// arrives, never with what a request announces.
impl Socket for KernelSocket<'_> {
    fn send(&mut self, bytes: &[u8]) -> Result<usize, Broken> {
        loop {
            match self.stream.write(bytes) {
                Ok(n) => return Ok(n),
                // The writable edge serves this connection again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Broken),
            }
        }
    }

    fn receive(
        &mut self,
        client: &mut ClientConn,
        _engine: &mut Engine,
        time: Time,
    ) -> Result<Received, Broken> {
        loop {
            let spare = client.input.read_space(client.needed);
            match self.stream.read(spare) {
                Ok(0) => return Ok(Received::Closed),
                Ok(n) => {
                    client.arrived(time.ns);
                    client.input.filled(n);
                    return Ok(Received::Buffered(n));
                }
                // The readable edge serves this connection again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Received::Empty),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Broken),
            }
        }
    }

    fn local_port(&self) -> u16 {
        self.local_port
    }

    fn endpoints(&self, _control: &Control) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (self.stream.peer_addr().ok(), self.stream.local_addr().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::engine;
    use store::Now;

    const TIME: Time = Time {
        now: Now::from_millis(1_700_000_000_000),
        ns: 1,
    };

    /// An in-memory socket: `incoming` is what the peer sent (then it closes if `eof`),
    /// `window` how many more bytes it takes, `sent` what it took.
    #[derive(Default)]
    struct Memory {
        incoming: Vec<u8>,
        eof: bool,
        window: usize,
        sent: Vec<u8>,
    }

    impl Socket for Memory {
        fn send(&mut self, bytes: &[u8]) -> Result<usize, Broken> {
            let n = bytes.len().min(self.window);
            self.window -= n;
            self.sent.extend_from_slice(&bytes[..n]);
            Ok(n)
        }

        fn receive(
            &mut self,
            client: &mut ClientConn,
            _engine: &mut Engine,
            time: Time,
        ) -> Result<Received, Broken> {
            if self.incoming.is_empty() {
                return Ok(if self.eof {
                    Received::Closed
                } else {
                    Received::Empty
                });
            }
            let n = self.incoming.len().min(1000);
            client.arrived(time.ns);
            client.input.extend(&self.incoming[..n]);
            self.incoming.drain(..n);
            Ok(Received::Buffered(n))
        }

        fn local_port(&self) -> u16 {
            11211
        }

        fn endpoints(&self, _control: &Control) -> (Option<SocketAddr>, Option<SocketAddr>) {
            (None, None)
        }
    }

    fn memory(requests: &str) -> Memory {
        Memory {
            incoming: requests.as_bytes().to_vec(),
            window: usize::MAX,
            ..Memory::default()
        }
    }

    #[test]
    fn a_turn_answers_what_arrived_then_waits_for_more() {
        let (mut engine, mut client) = (engine(), ClientConn::default());
        let mut socket = memory("set k 0 0 1\r\nv\r\nget k\r\n");
        let end = turn(&mut socket, &mut client, &mut engine, 1, TIME, None);
        assert_eq!(end, End::Wait);
        assert_eq!(socket.sent, b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    }

    #[test]
    fn a_pipelining_client_gets_one_turn_of_requests_then_goes_after_the_others() {
        let (mut engine, mut client) = (engine(), ClientConn::default());
        let mut socket = memory(&"version\r\n".repeat(TURN_REQUESTS * 3));
        let answers = |socket: &Memory| socket.sent.split(|&b| b == b'\n').count() - 1;
        let end = turn(&mut socket, &mut client, &mut engine, 1, TIME, None);
        assert_eq!(end, End::Again);
        assert_eq!(answers(&socket), TURN_REQUESTS);
        assert_eq!(
            turn(&mut socket, &mut client, &mut engine, 1, TIME, None),
            End::Again
        );
        assert_eq!(answers(&socket), TURN_REQUESTS * 2);
    }

    #[test]
    fn output_the_socket_does_not_take_stays_pending_until_it_has_room() {
        let (mut engine, mut client) = (engine(), ClientConn::default());
        let mut socket = Memory {
            window: 3,
            ..memory("version\r\n")
        };
        assert_eq!(
            turn(&mut socket, &mut client, &mut engine, 1, TIME, None),
            End::Wait
        );
        assert_eq!(socket.sent, b"VER");
        socket.window = usize::MAX;
        assert_eq!(
            turn(&mut socket, &mut client, &mut engine, 1, TIME, None),
            End::Wait
        );
        assert!(socket.sent.starts_with(b"VERSION "), "{:?}", socket.sent);
        assert!(client.pending_output().is_empty());
    }

    #[test]
    fn a_peer_that_closes_is_answered_then_closed() {
        let (mut engine, mut client) = (engine(), ClientConn::default());
        let mut socket = Memory {
            eof: true,
            ..memory("set k 0 0 1\r\nv\r\n")
        };
        assert_eq!(
            turn(&mut socket, &mut client, &mut engine, 1, TIME, None),
            End::Close
        );
        assert_eq!(socket.sent, b"STORED\r\n");
    }

    #[test]
    fn a_connection_accepted_on_the_resp_port_speaks_resp() {
        let (mut engine, mut client) = (engine(), ClientConn::default());
        let mut socket = memory("*1\r\n$4\r\nPING\r\n");
        turn(&mut socket, &mut client, &mut engine, 1, TIME, Some(11211));
        assert_eq!(socket.sent, b"+PONG\r\n");
    }
}
