//! The values a caller hands the shard and gets back: its configuration, store and
//! arithmetic requests, the view of an item, a prefetch hint, what a crawl did.

use crate::expiry::{Now, Ttl};

/// Sizes of one shard, from the server's command line.
#[derive(Debug, Clone, Copy)]
pub struct ShardConfig {
    /// This shard's memory budget in bytes (memcached `-m`, divided among cores); covers
    /// the segments items are written to and the hash table.
    pub memory_limit_bytes: usize,
    /// memcached `-I` (default 1 MiB): an item whose [`item_size`](crate::item_size)
    /// exceeds it is refused with [`StoreError::TooLarge`].
    pub max_item_size: usize,
}

/// How a store treats an existing key (protocol.txt, "Storage commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is not live.
    Add,
    /// Store only if the key is live.
    Replace,
    /// Add the data after the live item's value, keeping its flags and expiry.
    Append,
    /// Add the data before the live item's value, keeping its flags and expiry.
    Prepend,
}

/// Direction of [`Shard::incr_decr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// Add, wrapping at 2^64.
    Incr,
    /// Subtract, stopping at 0.
    Decr,
}

/// Where the new CAS of an item a call creates or modifies comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewCas {
    /// The next value of the shard's counter: what every protocol does by default.
    Next,
    /// This value, chosen by the client (meta protocol `E<token>`), whatever it is; the counter
    /// is not advanced. CAS values play no part in `flush_all` or eviction, so any value is
    /// safe; two items may then share a CAS, and a later counter value may be lower.
    Given(u64),
}

/// One store request (protocol.txt, "Storage commands"): what to write under which key, on
/// what conditions, for [`Shard::store`].
///
/// Start from [`Write::new`] and set what differs:
/// `Write { flags: 5, ttl: Ttl::Exptime(60), ..Write::new(StoreMode::Set, b"k", b"v") }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write<'a> {
    /// How an existing key is treated.
    pub mode: StoreMode,
    /// The key (1 to 250 bytes).
    pub key: &'a [u8],
    /// The value, or the bytes appended or prepended.
    pub value: &'a [u8],
    /// The client's opaque flags (`Append`/`Prepend` keep the item's).
    pub flags: u32,
    /// How long the item lives (`Append`/`Prepend` keep the item's expiry).
    pub ttl: Ttl,
    /// Non-zero: a compare-and-swap against the live item's CAS.
    pub cas: u64,
    /// Where the stored item's CAS comes from.
    pub new_cas: NewCas,
}

impl<'a> Write<'a> {
    /// A plain store in `mode`: flags 0, never expires, no compare, the counter's next CAS.
    pub const fn new(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> Write<'a> {
        Write {
            mode,
            key,
            value,
            flags: 0,
            ttl: Ttl::Exptime(0),
            cas: 0,
            new_cas: NewCas::Next,
        }
    }
}

/// One `incr`/`decr` request (protocol.txt, "Increment/Decrement"), for [`Shard::incr_decr`].
///
/// Start from [`Arith::new`] and set what differs:
/// `Arith { create: Some((0, 0)), ..Arith::new(b"hits", Delta::Incr, 1) }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith<'a> {
    /// The key (1 to 250 bytes).
    pub key: &'a [u8],
    /// Add or subtract.
    pub direction: Delta,
    /// The amount.
    pub delta: u64,
    /// On a missing key: store this initial value with this expiration time (the binary
    /// protocol's counters); `None` fails with [`StoreError::NotFound`].
    pub create: Option<(u64, i64)>,
    /// Non-zero: the live item's CAS must be this.
    pub cas: u64,
    /// Where the item's new CAS comes from.
    pub new_cas: NewCas,
}

impl<'a> Arith<'a> {
    /// `direction` by `delta` on `key`: no creation, no compare, the counter's next CAS.
    pub const fn new(key: &'a [u8], direction: Delta, delta: u64) -> Arith<'a> {
        Arith {
            key,
            direction,
            delta,
            create: None,
            cas: 0,
            new_cas: NewCas::Next,
        }
    }
}

/// A borrowed view of a live item, valid until the next call on the shard.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    /// The value bytes.
    pub value: &'a [u8],
    /// The client's opaque flags.
    pub flags: u32,
    /// The item's CAS unique.
    pub cas: u64,
    /// When the item expires: 0 = never, else the unix second in which it dies (its expiry
    /// rounded down to the second; [`ItemView::expiry_ms`] has the millisecond).
    pub exptime: u32,
    /// When the item expires: 0 = never, else the unix millisecond from which it is dead.
    pub expiry_ms: u64,
    /// The unix second of the item's last store, fetch or touch before this call (clamped to
    /// `u32`); see [`ItemView::idle_secs`].
    pub last_access: u32,
    /// Whether a client had fetched the item (get, touch) before this call.
    pub fetched: bool,
    /// Meta protocol: the item was invalidated ([`Shard::invalidate`]) and is stale.
    pub stale: bool,
    /// Meta protocol: a client holds the item's recache token ([`Shard::claim_win`]).
    pub win_sent: bool,
}

impl ItemView<'_> {
    /// Seconds since the item's last access as of `now` (0 if the clock went back): the meta
    /// protocol's `l` flag and `me`'s `la`.
    pub fn idle_secs(&self, now: impl Into<Now>) -> u64 {
        now.into()
            .secs()
            .saturating_sub(u64::from(self.last_access))
    }
}

/// Where a lookup will read, from [`Shard::hint`], for a caller that prefetches. The item's
/// table entry and the item itself are two dependent loads: prefetch [`Hint::bucket`] for
/// every key first, then (the buckets arriving meanwhile) [`Hint::block`] for every key, and
/// the misses of all keys overlap at each stage.
#[derive(Debug, Clone, Copy)]
pub struct Hint<'a> {
    pub(super) entry: &'a u64,
    pub(super) block: &'a [u8],
}

impl<'a> Hint<'a> {
    /// An address in the item's table bucket (one 64-byte cache line, shared with up to six
    /// other entries): the bucket's start plus the entry's slot number, so that hints of two
    /// items never compare equal. Only for a prefetch; taking it reads nothing.
    #[inline]
    pub fn bucket(self) -> *const u8 {
        let entry: *const u8 = core::ptr::from_ref(self.entry).cast();
        let slot = entry.addr() % 64 / 8;
        entry.wrapping_sub(entry.addr() % 64).wrapping_add(slot)
    }

    /// The item in its segment (header, key, value), which a lookup reads after the entry (it
    /// compares the key there): only for a prefetch of its cache lines.
    #[inline]
    pub fn block(self) -> &'a [u8] {
        self.block
    }
}

/// A key's hash and the address of its home bucket, from [`Shard::bucket_hint`]: the first
/// stage of a two-stage prefetch (the bucket, then the item [`Shard::item_hint`] finds in
/// it).
#[derive(Debug, Clone, Copy)]
pub struct BucketHint {
    pub(super) hash: u64,
    pub(super) bucket: *const u8,
}

impl BucketHint {
    /// The home bucket's address (one 64-byte cache line), for a prefetch; null when the table
    /// has no buckets. An entry may lie in a later bucket; the home one is where a lookup
    /// starts.
    #[inline]
    pub fn bucket(self) -> *const u8 {
        self.bucket
    }
}

/// What one [`Shard::crawl`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crawled {
    /// Items looked at.
    pub checked: usize,
    /// Of those, dead ones taken back.
    pub reclaimed: usize,
    /// The bucket the next call starts from: [`Shard::num_buckets`] once the walk reached the
    /// table's end.
    pub next: usize,
}
