//! One cached item, and the bytes it is charged.
//!
//! Layout: the table's bucket holds a 32-byte [`Item`] (metadata plus a pointer to one heap
//! block); the heap block holds `[cas: u64][key_len: u8][key][value]`. See the crate docs for
//! why.

use crate::expiry::{self, Deadline, Now};

/// Longest key memcached accepts, in bytes.
pub const MAX_KEY_LEN: usize = 250;

/// glibc malloc's chunk header (`SIZE_SZ`) on 64-bit Linux.
const MALLOC_HEADER: usize = 8;
/// glibc malloc's chunk granularity (`MALLOC_ALIGNMENT`).
const MALLOC_ALIGN: usize = 16;
/// glibc malloc's smallest chunk (`MINSIZE`).
const MALLOC_MIN_CHUNK: usize = 32;
/// Blocks this large may be served by `mmap`, in whole pages; charge them as such.
const MALLOC_MMAP_THRESHOLD: usize = 128 * 1024;
const PAGE: usize = 4096;

/// Bytes the heap really hands out for a request of `len` bytes, modelled on glibc's
/// ptmalloc (Rust's default allocator on Linux): an 8-byte header, 16-byte rounding, a
/// 32-byte minimum; blocks from 128 KiB up are rounded to whole 4 KiB pages.
pub const fn malloc_chunk(len: usize) -> usize {
    let chunk = len.saturating_add(MALLOC_HEADER + MALLOC_ALIGN - 1) & !(MALLOC_ALIGN - 1);
    if chunk < MALLOC_MIN_CHUNK {
        MALLOC_MIN_CHUNK
    } else if chunk >= MALLOC_MMAP_THRESHOLD {
        chunk.saturating_add(PAGE - 1) & !(PAGE - 1)
    } else {
        chunk
    }
}

/// Where the heap block's parts start: the CAS (8 bytes, little-endian), then the key length.
const CAS_LEN: usize = 8;
const KEY_LEN_AT: usize = CAS_LEN;
const KEY_AT: usize = KEY_LEN_AT + 1;

/// Bytes an item is charged: its heap block `[cas: u64][key_len: u8][key][value]` as the
/// allocator really sizes it ([`malloc_chunk`]).
///
/// The per-item overhead is therefore 9 bytes (the CAS and the key length) plus the
/// allocator's 8-byte header and rounding to 16 (17..=32 bytes; more only for blocks of
/// 128 KiB and up, which are charged in whole pages). The item's 32-byte bucket in the hash
/// table is not part of it: the table is charged as a whole, by capacity, in `heap_bytes`.
pub const fn item_size(key_len: usize, value_len: usize) -> usize {
    malloc_chunk(key_len.saturating_add(value_len).saturating_add(KEY_AT))
}

/// Two-bit clock counter (GCLOCK): 1 on insert, +1 per fetch up to 3, -1 per pass of the
/// hand; the hand evicts an item it finds at 0.
const CLOCK_MASK: u32 = 0b11;
/// Set on the first fetch (get, touch); feeds `evicted_unfetched` and `expired_unfetched`.
const FETCHED: u32 = 1 << 2;
/// Meta protocol: the item was invalidated (`md <key> I`) and is served as stale.
const STALE: u32 = 1 << 3;
/// Meta protocol: a client has been handed the item's recache token (the `W` flag).
const WIN_SENT: u32 = 1 << 4;
/// The milliseconds of a sub-second expiry (0..=999; 0 for memcached's whole seconds).
const SUB_MS_SHIFT: u32 = 5;
const SUB_MS_MASK: u32 = 0x3ff << SUB_MS_SHIFT;
/// The bits below the flush generation.
const LOW_BITS: u32 = CLOCK_MASK | FETCHED | STALE | WIN_SENT | SUB_MS_MASK;
/// The flush generation occupies the bits above the counter, the flag bits and the expiry's
/// milliseconds.
const GENERATION_SHIFT: u32 = 15;
/// Flush generations count modulo 2^17 (see `Shard::flush_all` for the wrap).
pub(crate) const GENERATION_MASK: u32 = u32::MAX >> GENERATION_SHIFT;

/// One item as it sits in a hash-table bucket: 32 bytes, two to a cache line, and aligned to
/// 32 so that no bucket straddles two lines (hashbrown aligns its table to its buckets'
/// alignment; with 8, a large table started 16 bytes past a line, `malloc`'s chunk header,
/// and half the buckets took two cache misses, or two prefetches).
///
/// The bucket keeps what the clock hand and the expiry sweep decide on (expiry, flush
/// generation, clock counter) and what every read updates (fetched bit, last access); the
/// CAS, read and written only together with the key, sits in front of the key in the block.
#[derive(Debug)]
#[repr(align(32))]
pub(crate) struct Item {
    /// `[cas: u64 little-endian][key_len: u8][key][value]`, allocated once on insert.
    data: Box<[u8]>,
    /// 0 = never, else the unix second in which the item dies (see `expiry`); the
    /// milliseconds into that second are in `meta`.
    exptime: u32,
    /// The client's opaque flags.
    flags: u32,
    /// The unix second of the last store, fetch or touch (clamped to `u32`, like `exptime`).
    last_access: u32,
    /// `generation << 15 | expiry milliseconds << 5 | WIN_SENT | STALE | FETCHED | clock
    /// counter`; the item was stored in flush generation `generation` and is flushed once the
    /// shard's generation moves on.
    meta: u32,
}

/// Whether an item may still be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Live,
    Expired,
    Flushed,
}

impl Item {
    /// Builds an item from the parts of its value (`value_parts` are concatenated), in one
    /// allocation, in flush generation 0 with last access 0 (the shard stamps both when it
    /// puts the item in its table). The caller has checked `1 <= key.len() <= MAX_KEY_LEN`.
    pub(crate) fn new(
        key: &[u8],
        value_parts: [&[u8]; 2],
        flags: u32,
        deadline: Deadline,
        cas: u64,
    ) -> Item {
        debug_assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN);
        let len = KEY_AT + key.len() + value_parts[0].len() + value_parts[1].len();
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(&cas.to_le_bytes());
        data.push(key.len() as u8);
        data.extend_from_slice(key);
        data.extend_from_slice(value_parts[0]);
        data.extend_from_slice(value_parts[1]);
        let mut item = Item {
            data: data.into_boxed_slice(),
            exptime: 0,
            flags,
            last_access: 0,
            meta: 1,
        };
        item.set_deadline(deadline);
        item
    }

    #[inline]
    fn key_len(&self) -> usize {
        usize::from(self.data[KEY_LEN_AT])
    }

    /// The heap block: `[cas][key_len][key][value]`.
    #[inline]
    pub(crate) fn block(&self) -> &[u8] {
        &self.data
    }

    /// The key bytes.
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.data[KEY_AT..KEY_AT + self.key_len()]
    }

    /// The value bytes.
    #[inline]
    pub(crate) fn value(&self) -> &[u8] {
        &self.data[KEY_AT + self.key_len()..]
    }

    /// The value bytes, for an in-place rewrite of the same length.
    #[inline]
    pub(crate) fn value_mut(&mut self) -> &mut [u8] {
        let start = KEY_AT + self.key_len();
        &mut self.data[start..]
    }

    /// Bytes this item is charged ([`item_size`]).
    #[inline]
    pub(crate) fn size(&self) -> usize {
        malloc_chunk(self.data.len())
    }

    #[inline]
    pub(crate) fn cas(&self) -> u64 {
        let mut bytes = [0u8; CAS_LEN];
        bytes.copy_from_slice(&self.data[..CAS_LEN]);
        u64::from_le_bytes(bytes)
    }

    #[inline]
    pub(crate) fn set_cas(&mut self, cas: u64) {
        self.data[..CAS_LEN].copy_from_slice(&cas.to_le_bytes());
    }

    #[inline]
    pub(crate) fn flags(&self) -> u32 {
        self.flags
    }

    /// The unix second of the item's expiry (0: never).
    #[inline]
    pub(crate) fn exptime(&self) -> u32 {
        self.exptime
    }

    /// Whether the item has an expiry at all.
    #[inline]
    pub(crate) fn expires(&self) -> bool {
        self.exptime != 0
    }

    /// When the item dies.
    #[inline]
    pub(crate) fn deadline(&self) -> Deadline {
        Deadline {
            secs: self.exptime,
            sub_ms: ((self.meta & SUB_MS_MASK) >> SUB_MS_SHIFT) as u16,
        }
    }

    #[inline]
    pub(crate) fn set_deadline(&mut self, deadline: Deadline) {
        debug_assert!(deadline.sub_ms < 1000);
        self.exptime = deadline.secs;
        self.meta = (self.meta & !SUB_MS_MASK) | (u32::from(deadline.sub_ms) << SUB_MS_SHIFT);
    }

    /// The unix second of the last store, fetch or touch.
    #[inline]
    pub(crate) fn last_access(&self) -> u32 {
        self.last_access
    }

    /// The flush generation the item was stored in.
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        self.meta >> GENERATION_SHIFT
    }

    /// Stamps an item entering the table: the shard's flush generation and the time.
    #[inline]
    pub(crate) fn stamp(&mut self, generation: u32, now: Now) {
        debug_assert!(generation <= GENERATION_MASK);
        self.meta = (generation << GENERATION_SHIFT) | (self.meta & LOW_BITS);
        self.last_access = expiry::clamp_u32(now.secs());
    }

    /// Replaces the value with one of the same length, in place (no allocation), and leaves
    /// the item as [`Item::new`] builds one: the new flags, deadline and CAS, clock counter 1,
    /// neither fetched, stale nor won. The caller stamps it ([`Item::stamp`]) as it would a new
    /// item entering the table.
    #[inline]
    pub(crate) fn overwrite(&mut self, value: &[u8], flags: u32, deadline: Deadline, cas: u64) {
        self.value_mut().copy_from_slice(value);
        self.set_cas(cas);
        self.flags = flags;
        self.meta = 1;
        self.set_deadline(deadline);
    }

    /// The clock counter (0..=3).
    #[inline]
    pub(crate) fn clock(&self) -> u32 {
        self.meta & CLOCK_MASK
    }

    /// One pass of the clock hand: lower the counter.
    #[inline]
    pub(crate) fn age(&mut self) {
        if self.meta & CLOCK_MASK != 0 {
            self.meta -= 1;
        }
    }

    #[inline]
    pub(crate) fn fetched(&self) -> bool {
        self.meta & FETCHED != 0
    }

    #[inline]
    pub(crate) fn stale(&self) -> bool {
        self.meta & STALE != 0
    }

    #[inline]
    pub(crate) fn win_sent(&self) -> bool {
        self.meta & WIN_SENT != 0
    }

    /// Marks the item stale and clears its recache token, so the next reader wins it.
    #[inline]
    pub(crate) fn mark_stale(&mut self) {
        self.meta = (self.meta | STALE) & !WIN_SENT;
    }

    /// Takes `other`'s clock counter and fetched, stale and recache-token marks: for an item
    /// that replaces `other` as a rewrite of it in place would (memcached's incr/decr whose
    /// result fits the old value).
    #[inline]
    pub(crate) fn keep_marks(&mut self, other: &Item) {
        let marks = CLOCK_MASK | FETCHED | STALE | WIN_SENT;
        self.meta = (self.meta & !marks) | (other.meta & marks);
    }

    /// Records that a client was handed the recache token.
    #[inline]
    pub(crate) fn mark_win_sent(&mut self) {
        self.meta |= WIN_SENT;
    }

    /// Records a client fetch at `now`: marks the item fetched, raises its clock counter and
    /// sets its last access.
    #[inline]
    pub(crate) fn mark_fetched(&mut self, now: Now) {
        if self.meta & CLOCK_MASK != CLOCK_MASK {
            self.meta += 1;
        }
        self.meta |= FETCHED;
        self.mark_accessed(now);
    }

    /// Sets the last access to `now` (a modification in place).
    #[inline]
    pub(crate) fn mark_accessed(&mut self, now: Now) {
        self.last_access = expiry::clamp_u32(now.secs());
    }

    /// Flushed wins over expired, as in memcached's `do_item_get`. `generation` is the
    /// shard's current flush generation: an item stored in any other one was flushed.
    #[inline]
    pub(crate) fn liveness(&self, now: Now, generation: u32) -> Liveness {
        if self.generation() != generation {
            Liveness::Flushed
        } else if self.deadline().passed(now) {
            Liveness::Expired
        } else {
            Liveness::Live
        }
    }
}

/// Longest decimal `u64` (`18446744073709551615`).
pub(crate) const MAX_DIGITS: usize = 20;

/// Parses a value as memcached's incr/decr operand, as its `safe_strtoull` reads the item's
/// data: leading white space, an optional sign, ASCII digits whose value fits in a `u64`
/// (leading zeros allowed), then the end, white space or a NUL byte (what follows is
/// ignored: memcached pads a result shorter than the old value with spaces, and reads it
/// back so; `strtoull` reads a C string, which a NUL ends). A `-` is refused unless the number
/// it makes is not negative as a signed 64-bit one (`-0`).
pub(crate) fn parse_decimal(value: &[u8]) -> Option<u64> {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let start = value.iter().position(|b| !space(b))?;
    let (negative, rest) = match &value[start..] {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        rest => (false, rest),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|b| !space(b) && *b != 0) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in &rest[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        n = n.wrapping_neg();
        if (n as i64) < 0 {
            return None;
        }
    }
    Some(n)
}

/// Writes `n` in decimal into the tail of `buf`; returns the digits.
pub(crate) fn format_decimal(mut n: u64, buf: &mut [u8; MAX_DIGITS]) -> &[u8] {
    let mut i = MAX_DIGITS;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    /// A whole-second deadline.
    fn secs(secs: u32) -> Deadline {
        Deadline { secs, sub_ms: 0 }
    }

    #[test]
    fn item_is_32_bytes() {
        // Two buckets per cache line; a bigger item would raise the table's cost per slot.
        assert_eq!(size_of::<Item>(), 32);
    }

    #[test]
    fn malloc_model() {
        assert_eq!(malloc_chunk(0), 32);
        assert_eq!(malloc_chunk(24), 32);
        assert_eq!(malloc_chunk(25), 48);
        assert_eq!(malloc_chunk(40), 48);
        assert_eq!(malloc_chunk(41), 64);
        assert_eq!(malloc_chunk(1024), 1040);
        assert_eq!(malloc_chunk(128 * 1024), 132 * 1024);
        assert_eq!(malloc_chunk(1 << 20), (1 << 20) + 4096);
        assert_eq!(malloc_chunk(usize::MAX), usize::MAX & !(PAGE - 1));
    }

    #[test]
    fn item_size_includes_cas_key_len_byte_and_header() {
        // key16/value32: 8 CAS + 1 + 48 = 57 bytes + 8 header = 65, rounded to 80.
        assert_eq!(item_size(16, 32), 80);
        // 1 KiB value with a 16-byte key: 1049 + 8 = 1057 -> 1072.
        assert_eq!(item_size(16, 1024), 1072);
        // 10 bytes + 8 header fits the 32-byte minimum chunk.
        assert_eq!(item_size(1, 0), 32);
        assert_eq!(item_size(1, 14), 32);
        assert_eq!(item_size(1, 15), 48);
        for k in 1..=MAX_KEY_LEN {
            for v in [0, 1, 7, 100, 1000] {
                let s = item_size(k, v);
                assert!(
                    s >= k + v + 17 && s <= k + v + 9 + 8 + 15 + 16,
                    "{k} {v} {s}"
                );
                let it = Item::new(&vec![b'k'; k], [&vec![b'v'; v], b""], 0, secs(0), 1);
                assert_eq!(it.size(), s, "the block is what item_size charges");
            }
        }
    }

    #[test]
    fn item_accessors() {
        let mut it = Item::new(b"key", [b"val", b"ue"], 7, secs(99), 42);
        assert_eq!(it.key(), b"key");
        assert_eq!(it.value(), b"value");
        assert_eq!(it.flags(), 7);
        assert_eq!(it.exptime(), 99);
        assert_eq!(it.cas(), 42);
        assert_eq!(it.size(), item_size(3, 5));
        assert_eq!(it.clock(), 1);
        assert_eq!((it.generation(), it.last_access()), (0, 0));
        assert!(!it.fetched());
        it.age();
        assert_eq!(it.clock(), 0);
        it.age();
        assert_eq!(it.clock(), 0, "saturates at 0");
        for t in 0..5 {
            it.mark_fetched(Now::from_secs(1000 + t));
        }
        assert_eq!(it.clock(), 3, "saturates at 3");
        assert!(it.fetched());
        assert_eq!(it.last_access(), 1004);
        it.age();
        assert_eq!(it.clock(), 2);
        it.set_cas(43);
        assert_eq!(it.cas(), 43);
        assert!(it.fetched());
        it.value_mut().copy_from_slice(b"VALUE");
        assert_eq!(it.value(), b"VALUE");
        assert_eq!(it.key(), b"key", "the value rewrite leaves the key");
        it.mark_accessed(Now::from_secs(2000));
        assert_eq!(it.last_access(), 2000);
        it.mark_accessed(Now::from_secs(u64::MAX));
        assert_eq!(it.last_access(), u32::MAX, "clamped like an expiry");
        let big = Item::new(&[b'k'; MAX_KEY_LEN], [b"", b""], 0, secs(0), u64::MAX);
        assert_eq!(big.key().len(), MAX_KEY_LEN);
        assert_eq!(big.value(), b"");
        assert_eq!(big.cas(), u64::MAX, "any client-chosen CAS fits");
        assert!(!big.stale() && !big.win_sent());
        let zero = Item::new(b"z", [b"", b""], 0, secs(0), 0);
        assert_eq!(zero.cas(), 0);
    }

    #[test]
    fn stamp_sets_generation_and_access_and_keeps_the_bits() {
        let mut it = Item::new(b"k", [b"v", b""], 0, secs(0), 7);
        it.mark_fetched(Now::from_secs(5));
        it.mark_win_sent();
        it.stamp(GENERATION_MASK, Now::from_secs(1_700_000_000));
        assert_eq!(it.generation(), GENERATION_MASK);
        assert_eq!(it.last_access(), 1_700_000_000);
        assert!(it.fetched() && it.win_sent() && !it.stale());
        assert_eq!(it.clock(), 2);
        it.stamp(3, Now::from_secs(9));
        assert_eq!((it.generation(), it.last_access()), (3, 9));
        for _ in 0..4 {
            it.age();
            it.mark_fetched(Now::from_secs(10));
        }
        assert_eq!(
            it.generation(),
            3,
            "the clock counter never reaches the generation"
        );
        assert_eq!(it.cas(), 7);
    }

    #[test]
    fn stale_and_win_bits_survive_cas_changes_and_stay_apart() {
        let mut it = Item::new(b"k", [b"v", b""], 0, secs(0), 7);
        it.mark_fetched(Now::from_secs(1));
        it.mark_win_sent();
        assert!(it.win_sent() && !it.stale());
        it.set_cas(8);
        assert!(it.win_sent() && it.fetched());
        it.mark_stale();
        assert!(
            it.stale() && !it.win_sent(),
            "invalidating hands the token out again"
        );
        it.mark_win_sent();
        it.set_cas(u64::MAX);
        assert_eq!(it.cas(), u64::MAX);
        assert!(it.stale() && it.win_sent() && it.fetched());
        assert_eq!(it.clock(), 2);
        assert_eq!(it.key(), b"k");
        assert_eq!(it.value(), b"v");
    }

    #[test]
    fn liveness_order() {
        let mut it = Item::new(b"k", [b"v", b""], 0, secs(100), 5);
        it.stamp(4, Now::from_secs(0));
        assert_eq!(it.liveness(Now::from_secs(99), 4), Liveness::Live);
        assert_eq!(it.liveness(Now::from_secs(100), 4), Liveness::Expired);
        assert_eq!(it.liveness(Now::from_secs(100), 5), Liveness::Flushed);
        assert_eq!(it.liveness(Now::from_secs(99), 5), Liveness::Flushed);
        assert_eq!(
            it.liveness(Now::from_secs(99), 3),
            Liveness::Flushed,
            "any other generation"
        );
        it.set_cas(0);
        assert_eq!(
            it.liveness(Now::from_secs(99), 4),
            Liveness::Live,
            "the CAS plays no part"
        );
    }

    #[test]
    fn decimal_parse() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"007"), Some(7));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
        assert_eq!(
            parse_decimal(b"000000000000000000001"),
            Some(1),
            "leading zeros"
        );
        assert_eq!(parse_decimal(b""), None);
        // memcached's strtoull: white space around the number, a sign.
        assert_eq!(parse_decimal(b"12 "), Some(12));
        assert_eq!(parse_decimal(b" 12"), Some(12));
        assert_eq!(parse_decimal(b"12 x"), Some(12));
        assert_eq!(parse_decimal(b"+12"), Some(12));
        assert_eq!(parse_decimal(b"-0"), Some(0));
        assert_eq!(parse_decimal(b"-1"), None);
        assert_eq!(parse_decimal(b"- 1"), None);
        assert_eq!(parse_decimal(b"  "), None);
        assert_eq!(parse_decimal(b"1a"), None);
        assert_eq!(parse_decimal(b"1.5"), None);
        // A NUL ends the C string strtoull reads: what follows it is not looked at.
        assert_eq!(parse_decimal(b"7\x00\x01\xff"), Some(7));
        assert_eq!(parse_decimal(b" 7\x00"), Some(7));
        assert_eq!(parse_decimal(b"-0\x00-"), Some(0));
        assert_eq!(parse_decimal(b"18446744073709551615\x00"), Some(u64::MAX));
        assert_eq!(parse_decimal(b"\x007"), None);
        assert_eq!(parse_decimal(b"+\x00"), None);
    }

    #[test]
    fn decimal_format() {
        let mut buf = [0u8; MAX_DIGITS];
        assert_eq!(format_decimal(0, &mut buf), b"0");
        assert_eq!(format_decimal(10, &mut buf), b"10");
        assert_eq!(format_decimal(u64::MAX, &mut buf), b"18446744073709551615");
        for n in [1u64, 9, 99, 100, 12345678901234567890] {
            let mut buf = [0u8; MAX_DIGITS];
            assert_eq!(format_decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
