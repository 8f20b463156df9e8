//! The four single-producer single-consumer rings an AF_XDP socket shares with the kernel,
//! and the memory mappings behind them and behind the UMEM.
//!
//! ```text
//! fill (u64 addr)        user produces ─▶ kernel consumes   frames the kernel may receive into
//! rx (xdp_desc)          kernel produces ─▶ user consumes   received frames
//! tx (xdp_desc)          user produces ─▶ kernel consumes   frames to send
//! completion (u64 addr)  kernel produces ─▶ user consumes   sent frames handed back
//! ```
//!
//! Each ring is a power-of-two array plus free-running `u32` producer and consumer indices
//! and a flags word, at the offsets `XDP_MMAP_OFFSETS` reports. The producer publishes
//! entries with a release store of its index, and the consumer reads the index with an
//! acquire load before it reads entries (and the other way round for freeing slots), the
//! same protocol as the kernel's `smp_store_release`/`smp_load_acquire` pairs. Both sides
//! cache the other side's index and only reload it when the cached value says the ring is
//! full (producer) or empty (consumer).

use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys;

/// A memory mapping, unmapped on drop (unless it is a test's second view of one).
pub(crate) struct Mmap {
    ptr: *mut u8,
    len: usize,
    owned: bool,
}

impl Mmap {
    /// Maps `len` bytes of anonymous, private, zeroed memory (the UMEM).
    pub(crate) fn anonymous(len: usize) -> Result<Mmap, i32> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(sys::errno());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
            owned: true,
        })
    }

    /// Maps `len` bytes of the socket `fd` at page offset `offset` (a ring).
    pub(crate) fn socket(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mmap, i32> {
        let offset = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        // SAFETY: maps kernel ring memory of an AF_XDP socket into a fresh address range;
        // no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(sys::errno());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
            owned: true,
        })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: `ptr`/`len` describe a mapping this value created and nothing else unmaps;
        // every borrow into it is tied to the owner's lifetime, which is ending.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Where the indices, flags and entries of one ring sit in its mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub producer: usize,
    pub consumer: usize,
    pub flags: usize,
    pub desc: usize,
}

impl From<libc::xdp_ring_offset> for Layout {
    fn from(o: libc::xdp_ring_offset) -> Layout {
        Layout {
            producer: o.producer as usize,
            consumer: o.consumer as usize,
            flags: o.flags as usize,
            desc: o.desc as usize,
        }
    }
}

/// Bytes to map for a ring of `size` entries of `T`.
pub(crate) fn map_len<T>(layout: Layout, size: u32) -> usize {
    layout.desc + size as usize * core::mem::size_of::<T>()
}

/// The shared part of a ring: pointers into its mapping.
struct Raw<T> {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
}

impl<T: Copy> Raw<T> {
    /// # Errors
    /// `EINVAL` if `size` is not a power of two or the layout does not fit the mapping.
    fn new(map: Mmap, layout: Layout, size: u32) -> Result<Raw<T>, i32> {
        let fits = |at: usize, len: usize| at.checked_add(len).is_some_and(|end| end <= map.len());
        let word = core::mem::size_of::<u32>();
        if !size.is_power_of_two()
            || [layout.producer, layout.consumer, layout.flags]
                .iter()
                .any(|&at| !fits(at, word) || !at.is_multiple_of(word))
            || !fits(layout.desc, size as usize * core::mem::size_of::<T>())
            || !layout.desc.is_multiple_of(core::mem::align_of::<T>())
        {
            return Err(libc::EINVAL);
        }
        let base = map.ptr();
        // SAFETY: every offset was checked above to lie inside the mapping with room for
        // its value and to be suitably aligned (the mapping itself is page-aligned).
        let (producer, consumer, flags, entries) = unsafe {
            (
                base.add(layout.producer).cast::<AtomicU32>(),
                base.add(layout.consumer).cast::<AtomicU32>(),
                base.add(layout.flags).cast::<AtomicU32>(),
                base.add(layout.desc).cast::<T>(),
            )
        };
        Ok(Raw {
            _map: map,
            producer,
            consumer,
            flags,
            entries,
            mask: size - 1,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping this value owns, aligned and in bounds (checked
        // in `new`); the kernel accesses the word atomically too.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }
}

/// The user-space producer side of a ring (fill, tx).
pub(crate) struct Producer<T> {
    raw: Raw<T>,
    /// Next index to write (published up to here after `submit`).
    cached_prod: u32,
    /// Consumer index last read from the kernel.
    cached_cons: u32,
    _entries: PhantomData<T>,
}

impl<T: Copy> Producer<T> {
    /// Wraps a mapped ring of `size` entries.
    pub(crate) fn new(map: Mmap, layout: Layout, size: u32) -> Result<Producer<T>, i32> {
        let raw = Raw::<T>::new(map, layout, size)?;
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Acquire);
        Ok(Producer {
            raw,
            cached_prod,
            cached_cons,
            _entries: PhantomData,
        })
    }

    /// Entries the ring can take now, up to `want` (reloads the consumer index only when
    /// the cached one says there is not enough room).
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let size = self.raw.size();
        let mut free = size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free < want {
            self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
            free = size - self.cached_prod.wrapping_sub(self.cached_cons);
        }
        free.min(want)
    }

    /// Writes `value` as the `i`-th unpublished entry. `i` must be below what `free` returned.
    pub(crate) fn write(&mut self, i: u32, value: T) {
        let slot = (self.cached_prod.wrapping_add(i) & self.raw.mask) as usize;
        // SAFETY: `slot` <= mask, so it is inside the entry array (checked in `Raw::new`);
        // the slot is free (the caller reserved it with `free`), so the kernel does not read it
        // until `submit` publishes it.
        unsafe { self.raw.entries.add(slot).write(value) };
    }

    /// Publishes the next `n` written entries.
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.raw
            .producer()
            .store(self.cached_prod, Ordering::Release);
    }

    /// Entries published and not yet consumed by the kernel (reloads the consumer index).
    pub(crate) fn pending(&mut self) -> u32 {
        self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// True if the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.raw.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// The user-space consumer side of a ring (rx, completion).
pub(crate) struct Consumer<T> {
    raw: Raw<T>,
    /// Producer index last read from the kernel.
    cached_prod: u32,
    /// Next index to read (released up to here after `release`).
    cached_cons: u32,
    _entries: PhantomData<T>,
}

impl<T: Copy> Consumer<T> {
    /// Wraps a mapped ring of `size` entries.
    pub(crate) fn new(map: Mmap, layout: Layout, size: u32) -> Result<Consumer<T>, i32> {
        let raw = Raw::<T>::new(map, layout, size)?;
        let cached_prod = raw.producer().load(Ordering::Acquire);
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        Ok(Consumer {
            raw,
            cached_prod,
            cached_cons,
            _entries: PhantomData,
        })
    }

    /// Entries ready to read, up to `max` (reloads the producer index when the cached one
    /// shows fewer than `max`).
    pub(crate) fn available(&mut self, max: u32) -> u32 {
        let mut ready = self.cached_prod.wrapping_sub(self.cached_cons);
        if ready < max {
            self.cached_prod = self.raw.producer().load(Ordering::Acquire);
            ready = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        // A producer index more than a ring ahead would be a kernel bug; never read past it.
        ready.min(self.raw.size()).min(max)
    }

    /// Reads the `i`-th unread entry. `i` must be below what `available` returned.
    pub(crate) fn read(&self, i: u32) -> T {
        let slot = (self.cached_cons.wrapping_add(i) & self.raw.mask) as usize;
        // SAFETY: `slot` <= mask, inside the entry array; the entry was published by the
        // kernel (acquire load in `available`) and is not rewritten until `release`.
        unsafe { self.raw.entries.add(slot).read() }
    }

    /// Hands the next `n` read entries back to the kernel.
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.raw
            .consumer()
            .store(self.cached_cons, Ordering::Release);
    }

    /// Ring size in entries.
    pub(crate) fn size(&self) -> u32 {
        self.raw.size()
    }
}

/// Two views of one ring in an anonymous mapping, for tests that play the kernel's side:
/// the producer owns the mapping, the consumer only looks at it (drop it first or together).
#[cfg(test)]
pub(crate) fn test_pair<T: Copy>(size: u32) -> (Producer<T>, Consumer<T>) {
    const LAYOUT: Layout = Layout {
        producer: 0,
        consumer: 64,
        flags: 128,
        desc: 192,
    };
    let map = Mmap::anonymous(map_len::<T>(LAYOUT, size)).expect("mmap");
    let view = Mmap {
        ptr: map.ptr(),
        len: map.len(),
        owned: false,
    };
    let producer = Producer::new(map, LAYOUT, size).expect("ring");
    let consumer = Consumer::new(view, LAYOUT, size).expect("ring");
    (producer, consumer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: Layout = Layout {
        producer: 0,
        consumer: 64,
        flags: 128,
        desc: 192,
    };

    fn pair(size: u32) -> (Producer<u64>, Consumer<u64>) {
        test_pair(size)
    }

    #[test]
    fn entries_flow_and_wrap() {
        let (mut p, mut c) = pair(8);
        assert_eq!(c.size(), 8);
        let mut next = 0u64;
        let mut expected = 0u64;
        // Push and pop in uneven batches so the indices wrap the ring many times.
        for round in 0..100u32 {
            let want = round % 7 + 1;
            let n = p.free(want);
            for i in 0..n {
                p.write(i, next);
                next += 1;
            }
            p.submit(n);
            let ready = c.available(round % 5 + 1);
            for i in 0..ready {
                assert_eq!(c.read(i), expected);
                expected += 1;
            }
            c.release(ready);
        }
        let ready = c.available(8);
        for i in 0..ready {
            assert_eq!(c.read(i), expected);
            expected += 1;
        }
        c.release(ready);
        assert_eq!(expected, next);
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn a_full_ring_takes_nothing() {
        let (mut p, mut c) = pair(4);
        assert_eq!(p.free(10), 4);
        for i in 0..4 {
            p.write(i, u64::from(i));
        }
        p.submit(4);
        assert_eq!(p.free(1), 0);
        assert_eq!(p.pending(), 4);
        assert_eq!(c.available(1), 1);
        c.release(1);
        assert_eq!(p.free(4), 1);
        assert!(!p.needs_wakeup());
    }

    #[test]
    fn bad_layouts_are_refused() {
        let map = || Mmap::anonymous(4096).unwrap();
        assert!(
            Producer::<u64>::new(map(), LAYOUT, 6).is_err(),
            "not a power of two"
        );
        assert!(
            Producer::<u64>::new(map(), LAYOUT, 1024).is_err(),
            "entries overflow"
        );
        let odd = Layout {
            consumer: 66,
            ..LAYOUT
        };
        assert!(
            Consumer::<u64>::new(map(), odd, 8).is_err(),
            "misaligned index"
        );
    }
}
