//! One cached item as it lies in a segment, and the bytes it is charged.
//!
//! ```text
//! [cas: u64][flags: u32][last_access: u32][meta: u16][key_len: u8][key][len: u24 or u32][exptime: u32]?[value]
//!  0         8           12                16         18           19   19 + key_len
//! ```
//!
//! 22 to 27 bytes of header, all little-endian, no alignment and no padding: an item starts
//! where the one before it in its segment ends. The key comes right after the fixed fields,
//! at the same offset in every item, so that a lookup compares it as soon as the item's line
//! arrives, without decoding anything first; the variable part of the header follows it.
//! `len` is `value_len << 2 | EXPIRES << 1 | WIDE`: three bytes for a value under 4 MiB,
//! four (`WIDE`) up to 1 GiB. The expiry's unix second follows it only for an item that
//! expires (`EXPIRES`); an item that never does, most of a cache, saves those four bytes.
//! So an item's layout is fixed by its value's length and whether it expires: a change of
//! either writes it anew (see [`ItemRef::holds`]). `meta` packs the expiry's milliseconds
//! (10 bits), the 2-bit clock counter and the fetched, stale, recache-token and deleted
//! marks. The flush generation is the segment's (see `segment`), not the item's.

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
/// 32-byte minimum; blocks from 128 KiB up are rounded to whole 4 KiB pages. The store's
/// items do not pay it (they lie in segments); it is the model for callers that size their
/// own allocations.
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

/// Byte ranges of the header's fixed fields.
mod field {
    use core::ops::Range;
    pub const CAS: Range<usize> = 0..8;
    pub const FLAGS: Range<usize> = 8..12;
    pub const LAST_ACCESS: Range<usize> = 12..16;
    pub const META: Range<usize> = 16..18;
    pub const KEY_LEN: usize = 18;
    /// Where the key starts. The length word (three bytes, or four when its lowest bit,
    /// `WIDE`, is set) follows the key.
    pub const KEY: usize = 19;
}

/// The length word is four bytes (a value of 4 MiB or more).
const WIDE: u32 = 1;
/// The expiry's second follows the length word.
const EXPIRES: u32 = 1 << 1;
/// The value lengths a three-byte length word holds.
const NARROW_VALUE_LIMIT: usize = 1 << 22;
/// Longest value an item can hold (1 GiB - 1; memcached's `-I` is at most 1 GiB).
pub(crate) const MAX_VALUE_LEN: usize = (1 << 30) - 1;

/// Bytes of the smallest header (three-byte length word, no expiry), the least an item takes
/// in front of its key.
pub(crate) const MIN_HEADER_LEN: usize = field::KEY + 3;
/// Bytes of the largest header (four-byte length word and an expiry).
#[cfg(test)]
pub(crate) const MAX_HEADER_LEN: usize = field::KEY + 8;

/// Bytes of the header of an item with a value of `value_len` bytes that expires or not.
#[inline]
pub(crate) const fn header_len(value_len: usize, expires: bool) -> usize {
    let len_word = if value_len < NARROW_VALUE_LIMIT { 3 } else { 4 };
    field::KEY + len_word + if expires { 4 } else { 0 }
}

/// Bytes an item that never expires is charged: its header, key and value as they lie in a
/// segment (`22 + key_len + value_len`, one more for a value of 4 MiB or more). One that
/// expires takes 4 more ([`item_size_expiring`]). The item's 8-byte entry in the hash table
/// is not part of it: the table is charged as a whole in `heap_bytes`.
pub const fn item_size(key_len: usize, value_len: usize) -> usize {
    header_len(value_len, false)
        .saturating_add(key_len)
        .saturating_add(value_len)
}

/// Bytes an item with an expiry is charged: [`item_size`] and its 4-byte expiry second.
pub const fn item_size_expiring(key_len: usize, value_len: usize) -> usize {
    item_size(key_len, value_len).saturating_add(4)
}

/// The milliseconds of a sub-second expiry (0..=999; 0 for memcached's whole seconds).
const SUB_MS_MASK: u16 = 0x3ff;
/// Two-bit clock counter: 0 when stored, +1 per fetch up to 3, -1 each time the eviction
/// hand gives the item a second chance.
const CLOCK_SHIFT: u16 = 10;
const CLOCK_MASK: u16 = 0b11 << CLOCK_SHIFT;
/// Set on the first fetch (get, touch); feeds `evicted_unfetched` and `expired_unfetched`.
const FETCHED: u16 = 1 << 12;
/// Meta protocol: the item was invalidated (`md <key> I`) and is served as stale.
const STALE: u16 = 1 << 13;
/// Meta protocol: a client has been handed the item's recache token (the `W` flag).
const WIN_SENT: u16 = 1 << 14;
/// The item was deleted, overwritten or moved: its bytes are dead and no table entry points
/// at it.
const DELETED: u16 = 1 << 15;

/// Flush generations count modulo 2^17 (see `Shard::flush_all` for the wrap).
pub(crate) const GENERATION_MASK: u32 = (1 << 17) - 1;

/// Whether an item may still be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Live,
    Expired,
    Flushed,
}

/// What a new item is made of; [`Fields::write`] lays it out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub key: &'a [u8],
    /// Concatenated to make the value.
    pub value: [&'a [u8]; 2],
    pub flags: u32,
    pub deadline: Deadline,
    pub cas: u64,
    /// The unix second of the store.
    pub last_access: u32,
    /// Clock counter and marks carried over (0 for a new item).
    pub marks: u16,
    /// Lay out the expiry's second even when the item never expires (it is then 0), so
    /// that an expiry given later is written in place.
    pub expiry_field: bool,
}

impl Fields<'_> {
    /// Bytes the item takes.
    pub(crate) fn size(&self) -> usize {
        let value_len = self.value[0].len() + self.value[1].len();
        let expires = self.deadline != Deadline::NEVER || self.expiry_field;
        header_len(value_len, expires) + self.key.len() + value_len
    }

    /// Writes the item at the start of `dst` (at least [`Fields::size`] bytes). The caller
    /// has checked `1 <= key.len() <= MAX_KEY_LEN` and `value_len <= MAX_VALUE_LEN`.
    pub(crate) fn write(&self, dst: &mut [u8]) {
        debug_assert!(!self.key.is_empty() && self.key.len() <= MAX_KEY_LEN);
        let value_len = self.value[0].len() + self.value[1].len();
        debug_assert!(value_len <= MAX_VALUE_LEN);
        let expires = self.deadline != Deadline::NEVER || self.expiry_field;
        dst[field::CAS].copy_from_slice(&self.cas.to_le_bytes());
        dst[field::FLAGS].copy_from_slice(&self.flags.to_le_bytes());
        dst[field::LAST_ACCESS].copy_from_slice(&self.last_access.to_le_bytes());
        let meta = (self.marks & !SUB_MS_MASK & !DELETED) | (self.deadline.sub_ms & SUB_MS_MASK);
        dst[field::META].copy_from_slice(&meta.to_le_bytes());
        dst[field::KEY_LEN] = self.key.len() as u8;
        let key_end = field::KEY + self.key.len();
        dst[field::KEY..key_end].copy_from_slice(self.key);
        let wide = value_len >= NARROW_VALUE_LIMIT;
        let word = (value_len as u32) << 2 | if expires { EXPIRES } else { 0 } | u32::from(wide);
        let word_len = if wide { 4 } else { 3 };
        dst[key_end..key_end + word_len].copy_from_slice(&word.to_le_bytes()[..word_len]);
        if expires {
            let at = key_end + word_len;
            dst[at..at + 4].copy_from_slice(&self.deadline.secs.to_le_bytes());
        }
        let value_start = key_end + header_len(value_len, expires) - field::KEY;
        let mid = value_start + self.value[0].len();
        dst[value_start..mid].copy_from_slice(self.value[0]);
        dst[mid..mid + self.value[1].len()].copy_from_slice(self.value[1]);
    }
}

/// Whether two keys are equal. Keys of 8 to 16 bytes, most of a cache's, are compared as two
/// overlapping words inline; a call to `memcmp` for so few bytes cost a cache-resident GET a
/// fifth of its time.
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
        word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
    } else {
        a == b
    }
}

#[inline]
fn u32_at(data: &[u8], at: core::ops::Range<usize>) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&data[at]);
    u32::from_le_bytes(bytes)
}

/// A read-only view of one item: `data` starts at its header and reaches at least its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemRef<'a> {
    data: &'a [u8],
}

impl<'a> ItemRef<'a> {
    /// Panics if `data` is shorter than the smallest header: that one check stands for the
    /// checks of every fixed field the reads below index, which the compiler then drops.
    #[inline]
    pub(crate) fn new(data: &'a [u8]) -> ItemRef<'a> {
        assert!(
            data.len() >= MIN_HEADER_LEN,
            "an item's header is cut short"
        );
        ItemRef { data }
    }

    #[inline]
    fn meta(&self) -> u16 {
        let mut bytes = [0u8; 2];
        bytes.copy_from_slice(&self.data[field::META]);
        u16::from_le_bytes(bytes)
    }

    #[inline]
    fn key_len(&self) -> usize {
        usize::from(self.data[field::KEY_LEN])
    }

    /// Where the length word starts: right after the key.
    #[inline]
    fn word_at(&self) -> usize {
        field::KEY + self.key_len()
    }

    /// The length word, and where the bytes after it start. Three bytes are read, and a
    /// fourth only for a `WIDE` word: a narrow word may be the item's last bytes (an empty
    /// value that never expires), and the item the segment's last.
    #[inline]
    fn len_word(&self) -> (u32, usize) {
        let at = self.word_at();
        let d = &self.data[at..at + 3];
        let narrow = u32::from_le_bytes([d[0], d[1], d[2], 0]);
        if narrow & WIDE != 0 {
            (narrow | u32::from(self.data[at + 3]) << 24, at + 4)
        } else {
            (narrow, at + 3)
        }
    }

    #[inline]
    fn value_len(&self) -> usize {
        (self.len_word().0 >> 2) as usize
    }

    /// Whether the header holds an expiry second.
    #[inline]
    fn has_exptime(&self) -> bool {
        self.len_word().0 & EXPIRES != 0
    }

    /// Where the value starts: after the key, the length word and the expiry if any.
    #[inline]
    fn value_start(&self) -> usize {
        // Both bits lie in the word's first byte: `WIDE` adds one byte, `EXPIRES` four.
        let at = self.word_at();
        let low = u32::from(self.data[at]);
        at + 3 + (low & WIDE) as usize + 2 * (low & EXPIRES) as usize
    }

    /// Whether the item can take `deadline` in place: it has room for an expiry, or the
    /// deadline is never.
    #[inline]
    pub(crate) fn holds(&self, deadline: Deadline) -> bool {
        deadline == Deadline::NEVER || self.has_exptime()
    }

    /// Bytes the item takes in its segment ([`item_size`], [`item_size_expiring`]).
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.value_start() + self.value_len()
    }

    /// The whole item: header, key and value.
    #[inline]
    pub(crate) fn block(&self) -> &'a [u8] {
        &self.data[..self.size()]
    }

    #[inline]
    pub(crate) fn key(&self) -> &'a [u8] {
        &self.data[field::KEY..field::KEY + self.key_len()]
    }

    /// Whether the item's key is `key`: a lookup's check of each entry whose tag matches.
    #[inline(always)]
    pub(crate) fn has_key(&self, key: &[u8]) -> bool {
        same_key(self.key(), key)
    }

    #[inline]
    pub(crate) fn value(&self) -> &'a [u8] {
        &self.data[self.tail().value]
    }

    /// Bytes `at` of the item (a range from its [`Tail`]).
    #[inline]
    pub(crate) fn bytes(&self, at: core::ops::Range<usize>) -> &'a [u8] {
        &self.data[at]
    }

    /// The header's variable part, read once (see [`Tail`]).
    #[inline(always)]
    pub(crate) fn tail(&self) -> Tail {
        let (word, end) = self.len_word();
        let exptime = if word & EXPIRES != 0 {
            u32_at(self.data, end..end + 4)
        } else {
            0
        };
        let start = end + 2 * (word & EXPIRES) as usize;
        Tail {
            value: start..start + (word >> 2) as usize,
            exptime,
        }
    }

    #[inline]
    pub(crate) fn cas(&self) -> u64 {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&self.data[field::CAS]);
        u64::from_le_bytes(bytes)
    }

    #[inline]
    pub(crate) fn flags(&self) -> u32 {
        u32_at(self.data, field::FLAGS)
    }

    /// The unix second of the item's expiry (0: never).
    #[inline]
    pub(crate) fn exptime(&self) -> u32 {
        self.tail().exptime
    }

    /// Whether the item has an expiry at all.
    #[inline]
    pub(crate) fn expires(&self) -> bool {
        self.exptime() != 0
    }

    /// When the item dies.
    #[inline]
    pub(crate) fn deadline(&self) -> Deadline {
        self.deadline_at(self.exptime())
    }

    /// When the item dies, its [`Tail::exptime`] in hand.
    #[inline(always)]
    pub(crate) fn deadline_at(&self, exptime: u32) -> Deadline {
        Deadline {
            secs: exptime,
            sub_ms: self.meta() & SUB_MS_MASK,
        }
    }

    /// The unix second of the last store, fetch or touch.
    #[inline]
    pub(crate) fn last_access(&self) -> u32 {
        u32_at(self.data, field::LAST_ACCESS)
    }

    /// The clock counter (0..=3).
    #[inline]
    pub(crate) fn clock(&self) -> u16 {
        (self.meta() & CLOCK_MASK) >> CLOCK_SHIFT
    }

    #[inline]
    pub(crate) fn fetched(&self) -> bool {
        self.meta() & FETCHED != 0
    }

    #[inline]
    pub(crate) fn stale(&self) -> bool {
        self.meta() & STALE != 0
    }

    #[inline]
    pub(crate) fn win_sent(&self) -> bool {
        self.meta() & WIN_SENT != 0
    }

    /// Whether the item's bytes are dead (deleted, overwritten or moved).
    #[inline]
    pub(crate) fn deleted(&self) -> bool {
        self.meta() & DELETED != 0
    }

    /// The clock counter and the fetched, stale and recache-token marks, for an item that
    /// replaces this one as a rewrite of it in place would, or for a moved copy.
    #[inline]
    pub(crate) fn marks(&self) -> u16 {
        self.meta() & (CLOCK_MASK | FETCHED | STALE | WIN_SENT)
    }

    /// Whether the item may be served at `now` (see [`liveness`]).
    #[inline]
    pub(crate) fn liveness(&self, now: Now, flushed: bool) -> Liveness {
        liveness(self.deadline(), now, flushed)
    }
}

/// Whether an item that dies at `deadline` may be served at `now`. Flushed wins over
/// expired, as in memcached's `do_item_get`. `flushed`: the item's segment belongs to an
/// earlier flush generation.
#[inline(always)]
pub(crate) fn liveness(deadline: Deadline, now: Now, flushed: bool) -> Liveness {
    if flushed {
        Liveness::Flushed
    } else if deadline.passed(now) {
        Liveness::Expired
    } else {
        Liveness::Live
    }
}

/// The variable part of an item's header, decoded: what a reader of the whole item (a GET's
/// liveness check and reply) needs from it, read once instead of once for each.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    /// Where the value lies in [`ItemRef::data`].
    pub value: core::ops::Range<usize>,
    /// The unix second of the item's expiry (0: never).
    pub exptime: u32,
}

/// A mutable view of one item: `data` starts at its header and reaches at least its end.
#[derive(Debug)]
pub(crate) struct ItemMut<'a> {
    data: &'a mut [u8],
}

impl<'a> ItemMut<'a> {
    /// Panics if `data` is shorter than the smallest header, as [`ItemRef::new`].
    #[inline]
    pub(crate) fn new(data: &'a mut [u8]) -> ItemMut<'a> {
        assert!(
            data.len() >= MIN_HEADER_LEN,
            "an item's header is cut short"
        );
        ItemMut { data }
    }

    #[inline]
    pub(crate) fn get(&self) -> ItemRef<'_> {
        ItemRef { data: self.data }
    }

    /// The view, for the rest of the borrow.
    #[inline]
    pub(crate) fn into_ref(self) -> ItemRef<'a> {
        ItemRef { data: self.data }
    }

    #[inline]
    fn set_meta(&mut self, meta: u16) {
        self.data[field::META].copy_from_slice(&meta.to_le_bytes());
    }

    #[inline]
    pub(crate) fn set_cas(&mut self, cas: u64) {
        self.data[field::CAS].copy_from_slice(&cas.to_le_bytes());
    }

    /// Sets the expiry in place; the item must hold it ([`ItemRef::holds`]).
    #[inline]
    pub(crate) fn set_deadline(&mut self, deadline: Deadline) {
        debug_assert!(deadline.sub_ms < 1000);
        debug_assert!(self.get().holds(deadline));
        let (word, end) = self.get().len_word();
        if word & EXPIRES != 0 {
            self.data[end..end + 4].copy_from_slice(&deadline.secs.to_le_bytes());
        }
        let meta = (self.get().meta() & !SUB_MS_MASK) | (deadline.sub_ms & SUB_MS_MASK);
        self.set_meta(meta);
    }

    /// Sets the last access to `now` (a modification in place).
    #[inline]
    pub(crate) fn mark_accessed(&mut self, now: Now) {
        let secs = expiry::clamp_u32(now.secs());
        self.data[field::LAST_ACCESS].copy_from_slice(&secs.to_le_bytes());
    }

    /// Records a client fetch at `now`: marks the item fetched, raises its clock counter and
    /// sets its last access.
    #[inline]
    pub(crate) fn mark_fetched(&mut self, now: Now) {
        let mut meta = self.get().meta();
        if meta & CLOCK_MASK != CLOCK_MASK {
            meta += 1 << CLOCK_SHIFT;
        }
        self.set_meta(meta | FETCHED);
        self.mark_accessed(now);
    }

    /// Lowers the clock counter by one (a second chance given).
    #[inline]
    pub(crate) fn age(&mut self) {
        let meta = self.get().meta();
        if meta & CLOCK_MASK != 0 {
            self.set_meta(meta - (1 << CLOCK_SHIFT));
        }
    }

    /// Marks the item stale and clears its recache token, so the next reader wins it.
    #[inline]
    pub(crate) fn mark_stale(&mut self) {
        let meta = (self.get().meta() | STALE) & !WIN_SENT;
        self.set_meta(meta);
    }

    /// Records that a client was handed the recache token.
    #[inline]
    pub(crate) fn mark_win_sent(&mut self) {
        let meta = self.get().meta() | WIN_SENT;
        self.set_meta(meta);
    }

    /// Marks the item's bytes dead.
    #[inline]
    pub(crate) fn mark_deleted(&mut self) {
        let meta = self.get().meta() | DELETED;
        self.set_meta(meta);
    }

    /// Replaces the value with one of the same length, in place, and leaves the item as a
    /// new one is written: the new flags, deadline, CAS and access time, clock counter 0,
    /// neither fetched, stale nor won.
    #[inline]
    pub(crate) fn overwrite(
        &mut self,
        value: &[u8],
        flags: u32,
        deadline: Deadline,
        cas: u64,
        now: Now,
    ) {
        self.value_mut().copy_from_slice(value);
        self.set_cas(cas);
        self.data[field::FLAGS].copy_from_slice(&flags.to_le_bytes());
        self.set_meta(0);
        self.set_deadline(deadline);
        self.mark_accessed(now);
    }

    /// The value bytes, for an in-place rewrite of the same length.
    #[inline]
    pub(crate) fn value_mut(&mut self) -> &mut [u8] {
        let view = self.get();
        let start = view.value_start();
        let end = start + view.value_len();
        &mut self.data[start..end]
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

    #[test]
    fn keys_compare_equal_exactly_when_their_bytes_are() {
        let key: Vec<u8> = (1..=40).collect();
        for len in 0..=40 {
            let a = &key[..len];
            assert!(same_key(a, a), "{len} bytes");
            assert!(!same_key(a, &key[..len.saturating_sub(1)]) || len == 0);
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 0x80;
                assert!(!same_key(a, &b), "{len} bytes, byte {at} differs");
            }
        }
    }

    /// A whole-second deadline.
    fn secs(secs: u32) -> Deadline {
        Deadline { secs, sub_ms: 0 }
    }

    fn fields<'a>(key: &'a [u8], value: [&'a [u8]; 2]) -> Fields<'a> {
        Fields {
            key,
            value,
            flags: 7,
            deadline: secs(99),
            cas: 42,
            last_access: 1000,
            marks: 0,
            expiry_field: false,
        }
    }

    #[test]
    fn the_header_is_22_to_27_bytes_and_charged_exactly() {
        // 8 CAS + 4 flags + 4 last access + 2 meta + 1 key length + 3 length word, and 4 for
        // an expiry, 1 for a value of 4 MiB or more.
        assert_eq!(MIN_HEADER_LEN, 22);
        assert_eq!(MAX_HEADER_LEN, 27);
        assert_eq!(item_size(11, 32), 65);
        assert_eq!(item_size_expiring(11, 32), 69);
        assert_eq!(item_size(1, 0), 23);
        assert_eq!(item_size(1, (1 << 22) - 1), 23 + (1 << 22) - 1);
        assert_eq!(item_size(1, 1 << 22), 24 + (1 << 22));
        assert_eq!(header_len(MAX_VALUE_LEN, true), MAX_HEADER_LEN);
        assert_eq!(item_size(usize::MAX, 1), usize::MAX);
        let f = fields(b"key", [b"val", b"ue"]);
        assert_eq!(f.size(), item_size_expiring(3, 5));
        let never = Fields {
            deadline: Deadline::NEVER,
            ..f
        };
        assert_eq!(never.size(), item_size(3, 5));
        for f in [f, never] {
            let mut buf = vec![0xa5; f.size() + 4];
            f.write(&mut buf);
            assert_eq!(
                &buf[f.size()..],
                &[0xa5; 4],
                "nothing written past the item"
            );
            let view = ItemRef::new(&buf);
            assert_eq!(view.block().len(), f.size());
            assert_eq!((view.key(), view.value()), (&b"key"[..], &b"value"[..]));
            assert_eq!(view.deadline(), f.deadline);
            assert_eq!(view.flags(), 7);
        }
    }

    #[test]
    fn a_value_of_4_mib_takes_a_four_byte_length() {
        for (len, expires) in [((1 << 22) - 1, false), (1 << 22, false), (1 << 22, true)] {
            let value = vec![b'v'; len];
            let f = Fields {
                deadline: if expires { secs(5) } else { Deadline::NEVER },
                ..fields(b"k", [&value, b""])
            };
            let mut buf = vec![0xa5; f.size()];
            f.write(&mut buf);
            let view = ItemRef::new(&buf);
            assert_eq!(view.size(), header_len(len, expires) + 1 + len);
            assert_eq!((view.key(), view.value().len()), (&b"k"[..], len));
            assert_eq!(
                (view.exptime(), view.flags(), view.cas()),
                (if expires { 5 } else { 0 }, 7, 42)
            );
        }
    }

    #[test]
    fn an_item_that_never_expires_holds_no_expiry() {
        let f = Fields {
            deadline: Deadline::NEVER,
            ..fields(b"key", [b"v", b""])
        };
        let mut buf = vec![0; f.size()];
        f.write(&mut buf);
        let mut it = ItemMut::new(&mut buf);
        assert!(!it.get().expires() && it.get().holds(Deadline::NEVER));
        assert!(
            !it.get().holds(secs(5)),
            "an expiry needs the item written anew"
        );
        it.set_deadline(Deadline::NEVER);
        assert_eq!(it.get().deadline(), Deadline::NEVER);
        let f = fields(b"key", [b"v", b""]);
        let mut buf = vec![0; f.size()];
        f.write(&mut buf);
        let mut it = ItemMut::new(&mut buf);
        it.set_deadline(Deadline::NEVER);
        assert!(!it.get().expires(), "an expiry field may hold never");
        assert!(it.get().holds(secs(6)));
        it.set_deadline(secs(6));
        assert_eq!((it.get().exptime(), it.get().value()), (6, &b"v"[..]));
    }

    #[test]
    fn an_item_is_read_to_its_last_byte_and_not_past_it() {
        // An empty value that never expires ends the item with its three-byte length word,
        // and an item may end its segment: no read may go past it.
        for (value, deadline) in [
            (&b""[..], Deadline::NEVER),
            (&b""[..], secs(5)),
            (&b"v"[..], Deadline::NEVER),
        ] {
            let f = Fields {
                deadline,
                ..fields(b"key", [value, b""])
            };
            let mut buf = vec![0; f.size()];
            f.write(&mut buf);
            let view = ItemRef::new(&buf);
            assert_eq!(
                (view.key(), view.value(), view.size()),
                (&b"key"[..], value, f.size())
            );
            assert_eq!((view.exptime(), view.deadline()), (deadline.secs, deadline));
            assert!(view.has_key(b"key") && !view.has_key(b"kez") && !view.has_key(b"ke"));
            let mut it = ItemMut::new(&mut buf);
            it.mark_fetched(Now::from_secs(7));
            it.overwrite(value, 1, deadline, 9, Now::from_secs(8));
            assert_eq!((it.get().value(), it.get().cas()), (value, 9));
        }
    }

    #[test]
    fn item_accessors() {
        let f = fields(b"key", [b"val", b"ue"]);
        let mut buf = vec![0xa5; f.size()];
        f.write(&mut buf);
        let mut it = ItemMut::new(&mut buf);
        let view = it.get();
        assert_eq!(view.key(), b"key");
        assert_eq!(view.value(), b"value");
        assert_eq!((view.flags(), view.exptime(), view.cas()), (7, 99, 42));
        assert_eq!(view.last_access(), 1000);
        assert_eq!(view.clock(), 0, "a new item starts at 0");
        assert!(!view.fetched() && !view.stale() && !view.win_sent() && !view.deleted());
        it.age();
        assert_eq!(it.get().clock(), 0, "saturates at 0");
        for t in 0..5 {
            it.mark_fetched(Now::from_secs(2000 + t));
        }
        assert_eq!(it.get().clock(), 3, "saturates at 3");
        assert!(it.get().fetched());
        assert_eq!(it.get().last_access(), 2004);
        it.age();
        assert_eq!(it.get().clock(), 2);
        it.set_cas(u64::MAX);
        assert_eq!(it.get().cas(), u64::MAX, "any client-chosen CAS fits");
        it.value_mut().copy_from_slice(b"VALUE");
        assert_eq!(it.get().value(), b"VALUE");
        assert_eq!(it.get().key(), b"key", "the value rewrite leaves the key");
        it.set_deadline(Deadline {
            secs: 5,
            sub_ms: 999,
        });
        assert_eq!(
            it.get().deadline(),
            Deadline {
                secs: 5,
                sub_ms: 999
            }
        );
        assert_eq!(
            it.get().clock(),
            2,
            "the milliseconds leave the marks alone"
        );
        it.mark_win_sent();
        it.mark_stale();
        assert!(
            it.get().stale() && !it.get().win_sent(),
            "stale hands the token out again"
        );
        it.mark_accessed(Now::from_secs(u64::MAX));
        assert_eq!(it.get().last_access(), u32::MAX, "clamped like an expiry");
        let marks = it.get().marks();
        it.mark_deleted();
        assert!(it.get().deleted());
        assert_eq!(it.get().marks(), marks, "deleted is not a carried mark");
        it.overwrite(b"12345", 9, Deadline::NEVER, 3, Now::from_secs(7));
        let view = it.into_ref();
        assert_eq!(
            (view.value(), view.flags(), view.cas(), view.exptime()),
            (&b"12345"[..], 9, 3, 0)
        );
        assert_eq!((view.marks(), view.last_access()), (0, 7));
        assert!(!view.deleted());
    }

    #[test]
    fn an_item_laid_out_with_an_expiry_field_takes_an_expiry_in_place() {
        let f = Fields {
            deadline: Deadline::NEVER,
            expiry_field: true,
            ..fields(b"key", [b"v", b""])
        };
        assert_eq!(f.size(), item_size_expiring(3, 1));
        let mut buf = vec![0; f.size()];
        f.write(&mut buf);
        let mut it = ItemMut::new(&mut buf);
        assert!(!it.get().expires(), "a zero second: never");
        assert!(it.get().holds(secs(5)));
        it.set_deadline(secs(5));
        assert_eq!((it.get().exptime(), it.get().value()), (5, &b"v"[..]));
        assert_eq!(it.get().size(), item_size_expiring(3, 1));
    }

    #[test]
    fn carried_marks_are_written_and_deleted_never_is() {
        let f = Fields {
            marks: u16::MAX,
            ..fields(b"k", [b"v", b""])
        };
        let mut buf = vec![0; f.size()];
        f.write(&mut buf);
        let view = ItemRef::new(&buf);
        assert!(view.fetched() && view.stale() && view.win_sent() && !view.deleted());
        assert_eq!((view.clock(), view.deadline()), (3, secs(99)));
    }

    #[test]
    fn liveness_order() {
        let f = Fields {
            deadline: secs(100),
            ..fields(b"k", [b"v", b""])
        };
        let mut buf = vec![0; f.size()];
        f.write(&mut buf);
        let view = ItemRef::new(&buf);
        assert_eq!(view.liveness(Now::from_secs(99), false), Liveness::Live);
        assert_eq!(view.liveness(Now::from_secs(100), false), Liveness::Expired);
        assert_eq!(view.liveness(Now::from_secs(100), true), Liveness::Flushed);
        assert_eq!(view.liveness(Now::from_secs(1), true), Liveness::Flushed);
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
