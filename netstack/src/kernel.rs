//! The kernel-socket baseline: ordinary non-blocking TCP sockets, polled with epoll by one
//! worker core, behind the same connection-table shape as the smoltcp path.
//!
//! ```text
//! kernel TCP (SO_REUSEPORT listener per worker) → epoll (this core's) → KernelConn → server
//! ```
//!
//! It exists so that one run can measure what bypassing the kernel buys, and so that memspin
//! serves without root. Each worker binds its own listening socket with `SO_REUSEPORT`, so the
//! kernel spreads connections over workers without an acceptor thread; a table may listen on a
//! second port too ([`KernelTable::listen_also`]).
//!
//! Connection lifetimes, as on the smoltcp path:
//! - **Admission.** Every worker's table consults one shared [`Admission`]: an accepted
//!   connection over the limit is closed at once. Handshakes live in the kernel's SYN queue
//!   (with SYN cookies when it overflows), so they never count.
//! - **Give-up.** Accepted sockets get `TCP_USER_TIMEOUT` = [`GIVE_UP_TIMEOUT`]: the kernel
//!   aborts a connection whose data has gone unacknowledged that long, and the application
//!   sees the error on its next read. (Unlike the smoltcp path, Linux keeps a peer that
//!   answers window probes with a zero window.)
//! - **Idle timeout** ([`KernelTable::set_idle_timeout`]). Connections are kept in a list in
//!   the order of their last readiness event; [`KernelTable::expire_idle`] closes those at
//!   the front idle longer than the timeout, unless the socket still holds unsent or unread
//!   bytes (`SIOCOUTQ`, `SIOCINQ`). O(1) per event, O(closed) per call.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Poll;
use crate::admission::Admission;
use crate::conn::GIVE_UP_TIMEOUT;

/// Events fetched per `epoll_wait`.
const EVENT_BATCH: usize = 256;
/// The epoll token of the listening socket; connections use their slot index.
const LISTENER_TOKEN: u64 = u64::MAX;
/// The epoll token of a descriptor registered with [`KernelTable::watch`].
const WATCH_TOKEN: u64 = u64::MAX - 1;
/// The epoll token of the second listening socket ([`KernelTable::listen_also`]).
const EXTRA_LISTENER_TOKEN: u64 = u64::MAX - 2;

/// Identifies a kernel connection across calls (for replies that arrive later, e.g. from
/// another core); stale once the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelConnId {
    index: u32,
    generation: u32,
}

impl KernelConnId {
    /// The id as one number, for state that must not know the table's types.
    pub fn pack(self) -> u128 {
        (u128::from(self.index) << 32) | u128::from(self.generation)
    }

    /// The id [`KernelConnId::pack`] made. Any number is safe: [`KernelTable::with_conn`]
    /// checks the slot and the generation.
    pub fn unpack(packed: u128) -> KernelConnId {
        KernelConnId {
            index: (packed >> 32) as u32,
            generation: packed as u32,
        }
    }
}

/// Counters of one kernel-socket table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused because the limit was reached.
    pub refused: u64,
    /// Connections closed (by either side, or the idle timeout).
    pub closed: u64,
    /// Of those, connections closed by the idle timeout.
    pub idle_closed: u64,
    /// Connections open now.
    pub active: u64,
    /// `accept` or `epoll` failures other than "try again".
    pub errors: u64,
}

struct Slot<S> {
    stream: TcpStream,
    /// The port of the listener that accepted it.
    local_port: u16,
    state: S,
    /// Queued in `ready_list` already.
    queued: bool,
}

/// No slot (idle list ends).
const NIL: u32 = u32::MAX;

/// Connections in the order of their last activity, for the idle timeout: an intrusive
/// doubly linked list over slot indices.
#[derive(Debug, Default)]
struct IdleList {
    /// Per slot: (previous, next, last activity).
    links: Vec<(u32, u32, Option<Instant>)>,
    head: u32,
    tail: u32,
    /// Slots with readiness since the last `expire_idle`, to stamp with its time.
    touched: Vec<u32>,
}

impl IdleList {
    fn new() -> IdleList {
        IdleList {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            touched: Vec::new(),
        }
    }

    fn unlink_if_known(&mut self, index: usize) {
        if index < self.links.len() {
            self.unlink(index);
        }
    }

    fn unlink(&mut self, index: usize) {
        let (prev, next, stamp) = self.links[index];
        if stamp.is_none() {
            return;
        }
        match prev {
            NIL => self.head = next,
            prev => self.links[prev as usize].1 = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.links[next as usize].0 = prev,
        }
        self.links[index] = (NIL, NIL, None);
    }

    /// Moves slot `index` to the back, active at `now`.
    fn stamp(&mut self, index: usize, now: Instant) {
        if self.links.len() <= index {
            self.links.resize(index + 1, (NIL, NIL, None));
        }
        self.unlink(index);
        self.links[index] = (self.tail, NIL, Some(now));
        match self.tail {
            NIL => self.head = index as u32,
            tail => self.links[tail as usize].1 = index as u32,
        }
        self.tail = index as u32;
    }

    /// The slot active longest ago, and when.
    fn oldest(&self) -> Option<(usize, Instant)> {
        let head = self.head;
        if head == NIL {
            return None;
        }
        let at = self.links[head as usize].2?;
        Some((head as usize, at))
    }
}

/// One worker's kernel TCP connections, each with application state `S`.
pub struct KernelTable<S> {
    listener: TcpListener,
    /// A second listening socket, served alike ([`KernelTable::listen_also`]).
    extra: Option<TcpListener>,
    epoll: OwnedFd,
    slots: Vec<Option<Slot<S>>>,
    /// Per slot: bumped whenever its connection is removed, so stale ids match nothing.
    generations: Vec<u32>,
    free: Vec<usize>,
    ready_list: Vec<usize>,
    admission: Arc<Admission>,
    idle_timeout: Option<Duration>,
    idle: IdleList,
    events: Vec<libc::epoll_event>,
    stats: KernelStats,
}

impl<S> Drop for KernelTable<S> {
    fn drop(&mut self) {
        // Connections still open go with the table.
        self.admission.release(self.stats.active as usize);
    }
}

/// Binds a non-blocking listening socket with `SO_REUSEADDR` and `SO_REUSEPORT`.
fn bind_reuseport(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket we own; the TcpListener closes it on drop.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    for option in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
        // SAFETY: `one` outlives the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes for this address family.
    let rc = unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen(2) on our own bound socket.
    if unsafe { libc::listen(fd, 1024) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(listener)
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn epoll_ctl(epoll: RawFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: `event` is valid for the call; epoll and fd are open descriptors we own.
    if unsafe { libc::epoll_ctl(epoll, op, fd, &mut event) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl<S: Default> KernelTable<S> {
    /// Binds `addr` (with `SO_REUSEPORT`, so each worker may bind its own) and prepares
    /// epoll; connections are admitted under `admission`, which other tables may share.
    ///
    /// # Errors
    /// Socket, bind, listen or epoll failures, e.g. the address is in use without reuse.
    pub fn bind(addr: SocketAddr, admission: Arc<Admission>) -> io::Result<Self> {
        let listener = bind_reuseport(addr)?;
        // SAFETY: epoll_create1 with a constant flag; checked below.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own from here on.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        epoll_ctl(
            epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            listener.as_raw_fd(),
            libc::EPOLLIN as u32,
            LISTENER_TOKEN,
        )?;
        Ok(KernelTable {
            listener,
            extra: None,
            epoll,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            ready_list: Vec::new(),
            admission,
            idle_timeout: None,
            idle: IdleList::new(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENT_BATCH],
            stats: KernelStats::default(),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Also accepts connections on `addr` (with `SO_REUSEPORT`, as [`KernelTable::bind`]),
    /// served alike; [`KernelConn::local_port`] tells them apart. Returns the address bound
    /// (useful with port 0). One second listener at most: a later call replaces it.
    ///
    /// # Errors
    /// Socket, bind, listen or epoll failures.
    pub fn listen_also(&mut self, addr: SocketAddr) -> io::Result<SocketAddr> {
        let listener = bind_reuseport(addr)?;
        let bound = listener.local_addr()?;
        epoll_ctl(
            self.epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            listener.as_raw_fd(),
            libc::EPOLLIN as u32,
            EXTRA_LISTENER_TOKEN,
        )?;
        self.extra = Some(listener);
        Ok(bound)
    }

    /// The epoll descriptor, readable when anything is ready.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Counters.
    pub fn stats(&self) -> &KernelStats {
        &self.stats
    }

    /// Closes connections without activity for `timeout` (`--idle-timeout`), when
    /// [`expire_idle`](Self::expire_idle) is called; `None` (default): never.
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    /// Closes the connections idle for the idle timeout at `now` (call once per loop);
    /// returns how many. Activity is input (or a close or error) reported since the last
    /// call (stamped `now`), or bytes still queued in the socket either way.
    pub fn expire_idle(&mut self, now: Instant) -> usize {
        let Some(timeout) = self.idle_timeout else {
            return 0;
        };
        let mut touched = std::mem::take(&mut self.idle.touched);
        for &index in &touched {
            if matches!(self.slots.get(index as usize), Some(Some(_))) {
                self.idle.stamp(index as usize, now);
            }
        }
        touched.clear();
        self.idle.touched = touched;
        let mut closed = 0;
        while let Some((index, since)) = self.idle.oldest() {
            if now.saturating_duration_since(since) < timeout {
                break;
            }
            let busy = match &self.slots[index] {
                Some(slot) => queued_bytes(slot.stream.as_raw_fd()) > 0,
                None => false,
            };
            if busy {
                self.idle.stamp(index, now);
                continue;
            }
            self.remove(index);
            self.stats.idle_closed += 1;
            closed += 1;
        }
        closed
    }

    /// Collects readiness: waits up to `timeout` (`None`: do not wait), accepts new connections
    /// up to the limit, and queues ready connections for [`serve`](Self::serve).
    ///
    /// # Errors
    /// `epoll_wait` failures other than an interrupted call.
    pub fn poll(&mut self, timeout: Option<Duration>) -> io::Result<Poll> {
        let timeout_ms = timeout.map_or(0, |t| t.as_millis().clamp(0, i32::MAX as u128) as i32);
        // SAFETY: `events` has EVENT_BATCH initialised entries the kernel may overwrite.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                self.events.as_mut_ptr(),
                EVENT_BATCH as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                return Ok(Poll::Idle);
            }
            return Err(error);
        }
        let n = n as usize;
        for i in 0..n {
            let token = self.events[i].u64;
            if token == LISTENER_TOKEN {
                self.accept_all(false);
            } else if token == EXTRA_LISTENER_TOKEN {
                self.accept_all(true);
            } else if token == WATCH_TOKEN {
                // The caller's own descriptor: it drains it itself.
            } else if let Some(Some(slot)) = self.slots.get_mut(token as usize) {
                // Input, a close or an error is activity; output in progress shows in the
                // socket's queue (see `expire_idle`), and a bare writable edge is not.
                const INPUT: u32 =
                    (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLERR | libc::EPOLLHUP) as u32;
                if self.idle_timeout.is_some() && self.events[i].events & INPUT != 0 {
                    self.idle.touched.push(token as u32);
                }
                if !slot.queued {
                    slot.queued = true;
                    self.ready_list.push(token as usize);
                }
            }
        }
        Ok(if n == 0 { Poll::Idle } else { Poll::Progress })
    }

    /// The listening socket, or the second one when `extra`.
    fn listener(&self, extra: bool) -> Option<&TcpListener> {
        if extra {
            self.extra.as_ref()
        } else {
            Some(&self.listener)
        }
    }

    /// Accepts what waits on the listener, or on the second one when `extra`.
    fn accept_all(&mut self, extra: bool) {
        let Some(local_port) = self
            .listener(extra)
            .map(|l| l.local_addr().map_or(0, |a| a.port()))
        else {
            return;
        };
        loop {
            let Some(accepted) = self.listener(extra).map(TcpListener::accept) else {
                return;
            };
            match accepted {
                Ok((stream, _)) => {
                    if !self.admission.try_acquire() {
                        // Refused cleanly: closed at once; the others keep being served.
                        self.stats.refused += 1;
                        drop(stream);
                        continue;
                    }
                    if self.add(stream, local_port).is_err() {
                        self.admission.release(1);
                        self.stats.errors += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // EMFILE and friends: count and try again on the next readiness.
                    self.stats.errors += 1;
                    return;
                }
            }
        }
    }

    fn add(&mut self, stream: TcpStream, local_port: u16) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        set_user_timeout(&stream, GIVE_UP_TIMEOUT_MS)?;
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.generations.push(0);
            self.slots.len() - 1
        });
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = epoll_ctl(
            self.epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            stream.as_raw_fd(),
            events,
            index as u64,
        ) {
            self.free.push(index);
            return Err(e);
        }
        // A new connection may already hold a request: serve it once now.
        self.slots[index] = Some(Slot {
            stream,
            local_port,
            state: S::default(),
            queued: true,
        });
        self.ready_list.push(index);
        if self.idle_timeout.is_some() {
            self.idle.touched.push(index as u32);
        }
        self.stats.accepted += 1;
        self.stats.active += 1;
        Ok(())
    }

    /// True when connections wait to be served without new readiness (do not park).
    pub fn has_ready(&self) -> bool {
        !self.ready_list.is_empty()
    }

    /// Calls `f` for every connection epoll reported ready since the last call, or that asked to
    /// be served again. A connection the application closes is removed after `f` returns.
    ///
    /// Readiness is edge-triggered: `f` reads until `WouldBlock`, or calls
    /// [`KernelConn::serve_again`] when it stops early with work left (its turn used up, so
    /// that one busy connection cannot starve the others): such a connection is served once
    /// per call, in turn with the connections that became ready meanwhile.
    pub fn serve(&mut self, mut f: impl FnMut(&mut KernelConn<'_, S>)) {
        let mut list = std::mem::take(&mut self.ready_list);
        for &index in &list {
            if let Some(Some(slot)) = self.slots.get_mut(index) {
                slot.queued = false;
                self.run(index, &mut f);
            }
        }
        list.clear();
        // Connections that became ready during `f` were pushed to the new list; keep both.
        list.append(&mut self.ready_list);
        self.ready_list = list;
    }

    /// Runs `f` on the connection `id` if it is still open (for replies produced later, e.g.
    /// by another core); `None` if it closed meanwhile. Closing and serving again work as in
    /// [`serve`](Self::serve).
    pub fn with_conn<R>(
        &mut self,
        id: KernelConnId,
        f: impl FnOnce(&mut KernelConn<'_, S>) -> R,
    ) -> Option<R> {
        let index = id.index as usize;
        if self.generations.get(index) != Some(&id.generation) {
            return None;
        }
        self.run(index, f)
    }

    /// Also wakes [`poll`](Self::poll) when `fd` is readable (level-triggered: the caller
    /// drains it), e.g. an eventfd other cores write to while this one waits.
    ///
    /// # Errors
    /// `epoll_ctl` failures.
    pub fn watch(&mut self, fd: RawFd) -> io::Result<()> {
        epoll_ctl(
            self.epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN as u32,
            WATCH_TOKEN,
        )
    }

    fn run<R>(&mut self, index: usize, f: impl FnOnce(&mut KernelConn<'_, S>) -> R) -> Option<R> {
        let slot = self.slots.get_mut(index)?.as_mut()?;
        let mut conn = KernelConn {
            stream: &mut slot.stream,
            local_port: slot.local_port,
            state: &mut slot.state,
            id: KernelConnId {
                index: index as u32,
                generation: self.generations[index],
            },
            again: false,
            close: false,
        };
        let result = f(&mut conn);
        let (again, close) = (conn.again, conn.close);
        if close {
            self.remove(index);
        } else if again && !slot.queued {
            slot.queued = true;
            self.ready_list.push(index);
        }
        Some(result)
    }

    fn remove(&mut self, index: usize) {
        if let Some(slot) = self.slots[index].take() {
            let _ = epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                slot.stream.as_raw_fd(),
                0,
                0,
            );
            self.generations[index] = self.generations[index].wrapping_add(1);
            self.free.push(index);
            self.idle.unlink_if_known(index);
            self.admission.release(1);
            self.stats.closed += 1;
            self.stats.active -= 1;
        }
    }
}

/// `TCP_USER_TIMEOUT` of accepted sockets, in milliseconds.
const GIVE_UP_TIMEOUT_MS: u32 = (GIVE_UP_TIMEOUT.total_millis()) as u32;

/// Sets `TCP_USER_TIMEOUT`: the kernel aborts the connection when sent data stays
/// unacknowledged for `ms` milliseconds.
fn set_user_timeout(stream: &TcpStream, ms: u32) -> io::Result<()> {
    let value: libc::c_uint = ms;
    // SAFETY: `value` outlives the call and its size is passed; the fd is the stream's own.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&value as *const libc::c_uint).cast(),
            size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes the socket still holds: not yet sent or acknowledged (`SIOCOUTQ`) plus received
/// and not yet read (`SIOCINQ`); 0 if the kernel will not say.
fn queued_bytes(fd: RawFd) -> usize {
    let mut total = 0;
    // SIOCOUTQ and SIOCINQ are TIOCOUTQ and FIONREAD on sockets.
    for request in [libc::TIOCOUTQ, libc::FIONREAD] {
        let mut bytes: libc::c_int = 0;
        // SAFETY: both ioctls write one int to the pointer we pass, which outlives the call.
        let rc = unsafe { libc::ioctl(fd, request, &mut bytes) };
        if rc == 0 && bytes > 0 {
            total += bytes as usize;
        }
    }
    total
}

/// One ready kernel connection, lent to the application for the length of a `serve` callback.
pub struct KernelConn<'a, S> {
    stream: &'a mut TcpStream,
    local_port: u16,
    /// The application's per-connection state.
    pub state: &'a mut S,
    id: KernelConnId,
    again: bool,
    close: bool,
}

impl<S> KernelConn<'_, S> {
    /// Reads what the socket holds into `buf`. `Ok(0)` means the peer closed its side;
    /// `WouldBlock` means nothing more until the next readiness.
    ///
    /// # Errors
    /// The socket's errors (reset, would block).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }

    /// Writes as much of `buf` as the socket takes now.
    ///
    /// # Errors
    /// The socket's errors (reset, would block).
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    /// This connection's id, for [`KernelTable::with_conn`].
    pub fn id(&self) -> KernelConnId {
        self.id
    }

    /// The port of the listener that accepted the connection ([`KernelTable::bind`]'s, or
    /// [`KernelTable::listen_also`]'s).
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// The application's state and the socket, borrowed apart.
    pub fn parts(&mut self) -> (&mut S, &mut TcpStream) {
        (self.state, self.stream)
    }

    /// Serves this connection again on the next `serve` even if epoll reports nothing new.
    pub fn serve_again(&mut self) {
        self.again = true;
    }

    /// Closes the connection after this callback.
    pub fn close(&mut self) {
        self.close = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn loopback_any_port() -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
    }

    fn limit(n: usize) -> Arc<Admission> {
        Arc::new(Admission::new(n))
    }

    /// Polls and echoes until `done` or 5 s of polling.
    fn poll_until(
        tables: &mut [&mut KernelTable<Vec<u8>>],
        mut done: impl FnMut(&[&mut KernelTable<Vec<u8>>]) -> bool,
    ) {
        for _ in 0..1000 {
            if done(tables) {
                return;
            }
            for table in tables.iter_mut() {
                table.poll(Some(Duration::from_millis(5))).unwrap();
                echo(table);
            }
        }
        assert!(done(tables), "not reached");
    }

    /// Echoes whatever arrives, until the peer closes.
    fn echo(table: &mut KernelTable<Vec<u8>>) {
        table.serve(|conn| {
            let mut buf = [0u8; 4096];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => {
                        conn.close();
                        return;
                    }
                    Ok(n) => conn.state.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        conn.close();
                        return;
                    }
                }
            }
            let pending = std::mem::take(conn.state);
            let n = conn.write(&pending).unwrap_or(0);
            conn.state.extend_from_slice(&pending[n..]);
        });
    }

    #[test]
    fn accepts_echoes_and_notices_close() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(16)).unwrap();
        let addr = table.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(b"hello").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            echo(&mut table);
            let mut buf = [0u8; 16];
            client.set_nonblocking(true).unwrap();
            if let Ok(n) = client.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
            if got.len() >= 5 {
                break;
            }
        }
        assert_eq!(got, b"hello");
        assert_eq!(table.stats().accepted, 1);
        drop(client);
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            echo(&mut table);
            if table.stats().closed == 1 {
                break;
            }
        }
        assert_eq!(table.stats().closed, 1);
        assert_eq!(table.stats().active, 0);
    }

    #[test]
    fn a_second_listener_is_served_alike_and_told_apart() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(16)).unwrap();
        let first = table.local_addr().unwrap();
        let second = table.listen_also(loopback_any_port()).unwrap();
        assert_ne!(first.port(), second.port());
        let mut clients = [first, second].map(|addr| TcpStream::connect(addr).unwrap());
        let mut ports = Vec::new();
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            table.serve(|conn| {
                if conn.state.is_empty() {
                    conn.state.push(0);
                    ports.push(conn.local_port());
                }
            });
            if ports.len() == 2 {
                break;
            }
        }
        ports.sort_unstable();
        let mut want = vec![first.port(), second.port()];
        want.sort_unstable();
        assert_eq!(ports, want);
        assert_eq!(table.stats().accepted, 2);
        for client in &mut clients {
            client.write_all(b"x").unwrap();
        }
    }

    #[test]
    fn connections_over_the_limit_are_refused_and_others_kept() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(2)).unwrap();
        let addr = table.local_addr().unwrap();
        let kept: Vec<_> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut extra = TcpStream::connect(addr).unwrap();
        for _ in 0..200 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            echo(&mut table);
            if table.stats().refused == 1 {
                break;
            }
        }
        assert_eq!(table.stats().refused, 1);
        assert_eq!(table.stats().active, 2);
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 1];
        assert!(
            matches!(extra.read(&mut buf), Ok(0) | Err(_)),
            "the refused connection is closed"
        );
        drop(kept);
    }

    /// A connection that always has work left (it asks to be served again) gets one turn per
    /// `serve`, and another that becomes ready meanwhile gets its turn in the next one: no
    /// connection is drained at the others' expense.
    #[test]
    fn a_connection_served_again_takes_turns_with_the_others() {
        let mut table = KernelTable::<u32>::bind(loopback_any_port(), limit(4)).unwrap();
        let addr = table.local_addr().unwrap();
        let mut busy = TcpStream::connect(addr).unwrap();
        busy.write_all(b"x").unwrap();
        let mut busy_id = None;
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            table.serve(|conn| {
                busy_id = Some(conn.id());
                conn.serve_again();
            });
            if busy_id.is_some() {
                break;
            }
        }
        let busy_id = busy_id.expect("served");
        let mut other = TcpStream::connect(addr).unwrap();
        other.write_all(b"y").unwrap();
        let mut turns: Vec<KernelConnId> = Vec::new();
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(1))).unwrap();
            assert!(
                table.has_ready(),
                "the busy connection keeps the table from sleeping"
            );
            let mut pass = Vec::new();
            table.serve(|conn| {
                pass.push(conn.id());
                *conn.state += 1;
                if conn.id() == busy_id {
                    conn.serve_again();
                }
            });
            assert_eq!(
                pass.iter().filter(|&&id| id == busy_id).count(),
                1,
                "one turn per pass"
            );
            turns.extend(pass);
            if turns.iter().any(|&id| id != busy_id) {
                break;
            }
        }
        assert!(
            turns.iter().any(|&id| id != busy_id),
            "the other got its turn"
        );
    }

    #[test]
    fn ids_reach_open_connections_only_and_a_watched_fd_wakes_poll() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(4)).unwrap();
        let addr = table.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let mut id = None;
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            table.serve(|conn| id = Some(conn.id()));
            if id.is_some() {
                break;
            }
        }
        let id = id.expect("the connection was served");
        assert_eq!(KernelConnId::unpack(id.pack()), id);
        assert_eq!(table.with_conn(id, |conn| conn.state.push(7)), Some(()));
        // Closed by the application: the id is stale from then on, and so for a new
        // connection that reuses the slot.
        table.with_conn(id, |conn| conn.close());
        assert_eq!(table.stats().closed, 1);
        assert_eq!(table.with_conn(id, |_| ()), None);
        drop(client);

        let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
        table.watch(reader.as_raw_fd()).unwrap();
        assert_eq!(table.poll(None).unwrap(), Poll::Idle);
        (&writer).write_all(b"x").unwrap();
        assert_eq!(
            table.poll(Some(Duration::from_secs(5))).unwrap(),
            Poll::Progress
        );
    }

    #[test]
    fn tables_sharing_an_admission_accept_exactly_the_limit() {
        let admission = limit(3);
        let mut a =
            KernelTable::<Vec<u8>>::bind(loopback_any_port(), Arc::clone(&admission)).unwrap();
        let addr = a.local_addr().unwrap();
        let mut b = KernelTable::<Vec<u8>>::bind(addr, Arc::clone(&admission)).unwrap();
        let clients: Vec<_> = (0..6).map(|_| TcpStream::connect(addr).unwrap()).collect();
        poll_until(&mut [&mut a, &mut b], |t| {
            t.iter()
                .map(|t| t.stats().accepted + t.stats().refused)
                .sum::<u64>()
                == 6
        });
        let accepted: u64 = [&a, &b].iter().map(|t| t.stats().accepted).sum();
        assert_eq!(accepted, 3, "{:?} {:?}", a.stats(), b.stats());
        assert_eq!(admission.in_use(), 3);
        drop(clients);
        poll_until(&mut [&mut a, &mut b], |_| admission.in_use() == 0);
    }

    #[test]
    fn accepted_sockets_give_up_on_unacknowledged_data() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(4)).unwrap();
        let addr = table.local_addr().unwrap();
        let _client = TcpStream::connect(addr).unwrap();
        let mut timeout_ms = None;
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            table.serve(|conn| {
                let (_, stream) = conn.parts();
                let mut value: libc::c_uint = 0;
                let mut len = size_of::<libc::c_uint>() as libc::socklen_t;
                // SAFETY: getsockopt writes at most `len` bytes into `value`.
                let rc = unsafe {
                    libc::getsockopt(
                        stream.as_raw_fd(),
                        libc::IPPROTO_TCP,
                        libc::TCP_USER_TIMEOUT,
                        (&mut value as *mut libc::c_uint).cast(),
                        &mut len,
                    )
                };
                assert_eq!(rc, 0);
                timeout_ms = Some(value);
            });
            if timeout_ms.is_some() {
                break;
            }
        }
        assert_eq!(timeout_ms, Some(30_000));
    }

    #[test]
    fn the_idle_timeout_closes_idle_connections_and_leaves_busy_ones() {
        let mut table = KernelTable::<Vec<u8>>::bind(loopback_any_port(), limit(4)).unwrap();
        table.set_idle_timeout(Some(Duration::from_secs(5)));
        let addr = table.local_addr().unwrap();
        let mut idle = TcpStream::connect(addr).unwrap();
        let mut busy = TcpStream::connect(addr).unwrap();
        let t0 = Instant::now();
        poll_until(&mut [&mut table], |t| t[0].stats().accepted == 2);
        assert_eq!(table.expire_idle(t0), 0);
        // Four seconds on, the busy client sends; eight seconds on, the other has been
        // idle for longer than five and is closed, and the busy one is not.
        busy.write_all(b"x").unwrap();
        let mut buf = [0u8; 8];
        busy.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut echoed = 0;
        for _ in 0..1000 {
            table.poll(Some(Duration::from_millis(5))).unwrap();
            echo(&mut table);
            busy.set_nonblocking(true).unwrap();
            echoed += busy.read(&mut buf).unwrap_or(0);
            if echoed == 1 {
                break;
            }
        }
        assert_eq!(echoed, 1);
        assert_eq!(table.expire_idle(t0 + Duration::from_secs(4)), 0);
        assert_eq!(table.expire_idle(t0 + Duration::from_secs(8)), 1);
        assert_eq!(table.stats().idle_closed, 1);
        assert_eq!(table.stats().active, 1);
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(
            matches!(idle.read(&mut buf), Ok(0)),
            "the idle client sees the close"
        );
        assert_eq!(table.expire_idle(t0 + Duration::from_millis(8999)), 0);
        assert_eq!(
            table.expire_idle(t0 + Duration::from_secs(9)),
            1,
            "idle since 4 s"
        );
    }
}
