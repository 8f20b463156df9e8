//! A counting global allocator: live heap bytes of the current thread, and their peak.
//!
//! The engine target checks that nothing allocates in proportion to a length a client only
//! announced (a 2 GiB `set`, a 4 GiB binary body): the heap may grow with the bytes that really
//! arrived and the replies really written, not with numbers in a header. Every binary that
//! runs [`crate::engine::check`] installs [`CountingAlloc`] as its global allocator; the check
//! refuses to run without it ([`installed`]).
//!
//! Counts are per thread: the fuzzer runs one input at a time on one thread, and the test
//! harness runs each test on its own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards every call to the system allocator and counts this thread's live bytes.
pub struct CountingAlloc;

thread_local! {
    /// Live bytes allocated by this thread (less those it freed), and the peak since the last
    /// [`reset_peak`].
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn size(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counting touches only
// `const`-initialised thread-locals of plain integers, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(size(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            add(size(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes through us).
        unsafe { System.dealloc(ptr, layout) };
        add(-size(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            add(size(new_size) - size(layout.size()));
        }
        new
    }
}

/// Live heap bytes of this thread.
pub fn live_bytes() -> isize {
    LIVE.with(Cell::get)
}

/// Starts a new peak at the current live bytes.
pub fn reset_peak() {
    let live = live_bytes();
    PEAK.with(|peak| peak.set(live));
}

/// Highest live heap bytes of this thread since the last [`reset_peak`].
pub fn peak_bytes() -> isize {
    PEAK.with(Cell::get)
}

/// True when [`CountingAlloc`] is the global allocator (an allocation moves the count).
pub fn installed() -> bool {
    let before = live_bytes();
    let probe = std::hint::black_box(Box::new([0u8; 64]));
    let counted = live_bytes() - before >= 64;
    drop(probe);
    counted
}
