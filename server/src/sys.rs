//! The system calls the server makes through `libc` itself, each behind a safe function.
//!
//! The rest of the crate denies `unsafe` code (`lib.rs`): a raw call, its buffer and the
//! lifetime of the descriptor it takes are checked here, once, and every `unsafe` block says
//! why it holds (`clippy::undocumented_unsafe_blocks` is denied crate-wide). Descriptors come
//! in as [`BorrowedFd`] so a call can never outlive the file it works on; failures come back
//! as [`io::Error`] or `None`, never as a bare return code.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The process's user and system CPU time so far (`getrusage(RUSAGE_SELF)`); `None` if the
/// kernel will not say.
pub fn process_cpu_time() -> Option<(Duration, Duration)> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it initialised the struct (and zeroed() did before).
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Some(Duration::new(
            u64::try_from(t.tv_sec).ok()?,
            u32::try_from(t.tv_usec).ok()? * 1000,
        ))
    };
    Some((time(usage.ru_utime)?, time(usage.ru_stime)?))
}

/// The CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`); `None` if
/// the clock cannot be read.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is, exclusively borrowed.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// A new non-blocking, close-on-exec eventfd with a zero counter.
///
/// # Errors
/// eventfd(2)'s (descriptor limits).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with constant flags; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the counter of the eventfd `fd`, which makes it readable. A full counter
/// (EAGAIN) leaves it readable too, so there is nothing to report.
pub fn eventfd_add_one(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of a u64 that lives across the call to a descriptor the
    // borrow keeps open.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Reads the counter of the non-blocking eventfd `fd` back to zero; EAGAIN (it was zero) is
/// the common and harmless outcome.
pub fn eventfd_take(fd: BorrowedFd<'_>) {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into a u64 exclusively borrowed for the call, from a
    // descriptor the borrow keeps open.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: no limit; zero: look
/// without waiting; rounded up to whole milliseconds), and returns how many are readable. A
/// `None` entry is left out.
///
/// # Errors
/// poll(2)'s; an interrupted wait (EINTR) is one of them.
pub fn poll_readable<const N: usize>(
    fds: [Option<BorrowedFd<'_>>; N],
    timeout: Option<Duration>,
) -> io::Result<usize> {
    // A negative descriptor is left out by poll(2).
    let mut pollfds = fds.map(|fd| libc::pollfd {
        fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
        events: libc::POLLIN,
        revents: 0,
    });
    let millis = timeout.map_or(-1, |t| {
        i32::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    });
    // SAFETY: `pollfds` is a valid array of N pollfd structures that outlives the call, and
    // its length is passed with it; every descriptor in it is borrowed, so open, for the call.
    let rc = unsafe { libc::poll(pollfds.as_mut_ptr(), N as libc::nfds_t, millis) };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// The open-file limit, soft and hard (`RLIMIT_NOFILE`).
///
/// # Errors
/// getrlimit(2)'s.
pub fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct to fill, exclusively borrowed for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Sets the open-file limit (`RLIMIT_NOFILE`): `soft` of at most `hard`.
///
/// # Errors
/// setrlimit(2)'s (a soft limit over the hard one, a hard limit raised without the right).
pub fn set_open_files_limit(soft: u64, hard: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one valid struct, borrowed for the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_eventfd_is_readable_from_its_first_add_until_it_is_taken() {
        let fd = eventfd().unwrap();
        let readable = || poll_readable([Some(fd.as_fd())], Some(Duration::ZERO)).unwrap();
        assert_eq!(readable(), 0);
        eventfd_add_one(fd.as_fd());
        eventfd_add_one(fd.as_fd());
        assert_eq!(readable(), 1);
        eventfd_take(fd.as_fd());
        assert_eq!(readable(), 0);
        // Taking a zero counter is harmless.
        eventfd_take(fd.as_fd());
        assert_eq!(readable(), 0);
    }

    #[test]
    fn a_left_out_descriptor_is_never_readable() {
        let fd = eventfd().unwrap();
        eventfd_add_one(fd.as_fd());
        let ready = poll_readable([None, Some(fd.as_fd())], Some(Duration::ZERO)).unwrap();
        assert_eq!(ready, 1);
        let ready = poll_readable([None], Some(Duration::from_millis(1))).unwrap();
        assert_eq!(ready, 0);
    }

    #[test]
    fn cpu_clocks_advance_with_work() {
        let (thread, (user, system)) = (thread_cpu_time().unwrap(), process_cpu_time().unwrap());
        let mut x = 0u64;
        while thread_cpu_time().unwrap() < thread + Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let (user_after, system_after) = process_cpu_time().unwrap();
        assert!(user_after + system_after >= user + system + Duration::from_millis(20));
    }

    #[test]
    fn the_open_files_limit_can_be_set_to_what_it_is() {
        let (soft, hard) = open_files_limit().unwrap();
        assert!(soft <= hard);
        set_open_files_limit(soft, hard).unwrap();
        assert_eq!(open_files_limit().unwrap(), (soft, hard));
    }
}
