//! Time and expiry: the caller's clock ([`Now`], to the millisecond), how long a client asked an
//! item to live ([`Ttl`]), and memcached's expiration-time rules (protocol.txt, "Expiration
//! times").
//!
//! A memcached client sends a signed number of seconds. `0` means never; up to and including
//! [`REALTIME_MAXDELTA`] (30 days) it is relative to now; above that it is an absolute
//! unix time. A negative value, or an absolute time at or before now, means the item is
//! already expired. A Redis client gives a unix millisecond. An item whose expiry instant is
//! `t` is visible while `now < t`, to the millisecond.

/// memcached's boundary between relative and absolute expiration times: 30 days in seconds.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// A moment of the caller's clock, unix time to the millisecond: what every
/// [`Shard`](crate::Shard) operation is given.
///
/// A `u64` converts as unix seconds (memcached's clock, and what most callers have); use
/// [`Now::from_millis`] where expiry to the millisecond matters (Redis `PX`, `PEXPIRE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Now {
    ms: u64,
}

impl Now {
    /// The start of unix second `secs`.
    pub const fn from_secs(secs: u64) -> Now {
        Now {
            ms: secs.saturating_mul(1000),
        }
    }

    /// Unix millisecond `ms`.
    pub const fn from_millis(ms: u64) -> Now {
        Now { ms }
    }

    /// Whole unix seconds.
    pub const fn secs(self) -> u64 {
        self.ms / 1000
    }

    /// Unix milliseconds.
    pub const fn millis(self) -> u64 {
        self.ms
    }
}

impl From<u64> for Now {
    /// Unix seconds.
    fn from(secs: u64) -> Now {
        Now::from_secs(secs)
    }
}

/// How long a stored item lives, as a client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// memcached's exptime ([`Expiry::resolve`]): 0 never, up to [`REALTIME_MAXDELTA`]
    /// seconds from now, above that an absolute unix time in seconds; negative: expired.
    Exptime(i64),
    /// Dead from this unix millisecond on (Redis `PX`, `PEXPIREAT`, ...); one at or before now
    /// is expired.
    AtMillis(u64),
    /// The live item's expiry, kept (Redis `KEEPTTL`); an item that is not there gets none.
    Keep,
}

/// A client `exptime` resolved against `now` (protocol.txt, "Expiration times").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// `exptime == 0`: the item never expires.
    Never,
    /// The item is visible while the clock is before this unix millisecond.
    At(u64),
    /// Negative, or an absolute time `<= now`: invisible from the start.
    Expired,
}

impl Expiry {
    /// Resolves a raw client `exptime` at `now`, by memcached's rules, to the second: a
    /// relative time counts from the start of `now`'s second, as memcached's clock does.
    pub fn resolve(exptime: i64, now: impl Into<Now>) -> Expiry {
        let secs = now.into().secs();
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::Expired
        } else if exptime <= REALTIME_MAXDELTA {
            Expiry::At(secs.saturating_add(exptime as u64).saturating_mul(1000))
        } else if exptime as u64 <= secs {
            Expiry::Expired
        } else {
            Expiry::At((exptime as u64).saturating_mul(1000))
        }
    }

    /// An expiry at unix millisecond `at`: expired if that is not after `now`.
    pub fn at_millis(at: u64, now: impl Into<Now>) -> Expiry {
        if at <= now.into().millis() {
            Expiry::Expired
        } else {
            Expiry::At(at)
        }
    }

    /// The compact form kept in an item: `secs` 0 = never, otherwise the unix second in which
    /// the item dies (clamped to `u32`, good until 2106), and the millisecond in that second.
    ///
    /// `Expired` becomes `now` itself (at least 1 second), which is dead at `now`.
    pub(crate) fn encode(self, now: Now) -> Deadline {
        match self {
            Expiry::Never => Deadline::NEVER,
            Expiry::At(ms) => Deadline::of_millis(ms),
            Expiry::Expired => {
                let deadline = Deadline::of_millis(now.millis());
                if deadline.secs == 0 {
                    Deadline { secs: 1, sub_ms: 0 }
                } else {
                    deadline
                }
            }
        }
    }
}

/// When an item dies, as an item keeps it: `secs` 0 = never, else dead from unix second
/// `secs` plus `sub_ms` milliseconds on. memcached's expiry times are whole seconds
/// (`sub_ms` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub secs: u32,
    pub sub_ms: u16,
}

impl Deadline {
    /// Never expires.
    pub const NEVER: Deadline = Deadline { secs: 0, sub_ms: 0 };

    /// Unix millisecond `ms`, clamped to the last second a `u32` holds.
    pub const fn of_millis(ms: u64) -> Deadline {
        let secs = ms / 1000;
        if secs >= u32::MAX as u64 {
            Deadline {
                secs: u32::MAX,
                sub_ms: 0,
            }
        } else {
            Deadline {
                secs: secs as u32,
                sub_ms: (ms % 1000) as u16,
            }
        }
    }

    /// The unix millisecond from which the item is dead; 0 for never.
    pub const fn millis(self) -> u64 {
        if self.secs == 0 {
            0
        } else {
            self.secs as u64 * 1000 + self.sub_ms as u64
        }
    }

    /// Whether an item with this deadline is dead at `now`.
    #[inline]
    pub const fn passed(self, now: Now) -> bool {
        self.secs != 0 && now.millis() >= self.millis()
    }
}

/// `t` (unix seconds) as a `u32`, saturating (good until 2106).
pub(crate) const fn clamp_u32(t: u64) -> u32 {
    if t > u32::MAX as u64 {
        u32::MAX
    } else {
        t as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;
    const NOW_MS: u64 = NOW * 1000;

    fn now() -> Now {
        Now::from_secs(NOW)
    }

    #[test]
    fn zero_is_never() {
        assert_eq!(Expiry::resolve(0, NOW), Expiry::Never);
        assert_eq!(Expiry::Never.encode(now()), Deadline::NEVER);
        assert!(!Deadline::NEVER.passed(Now::from_millis(u64::MAX)));
    }

    #[test]
    fn one_second_relative() {
        let e = Expiry::resolve(1, NOW);
        assert_eq!(e, Expiry::At(NOW_MS + 1000));
        let enc = e.encode(now());
        assert!(!enc.passed(now()));
        assert!(!enc.passed(Now::from_millis(NOW_MS + 999)));
        assert!(enc.passed(Now::from_secs(NOW + 1)));
    }

    #[test]
    fn relative_times_count_from_the_start_of_the_second() {
        // memcached's clock has whole seconds: 1 s asked at 0.9 s into a second ends 0.1 s later.
        assert_eq!(
            Expiry::resolve(1, Now::from_millis(NOW_MS + 900)),
            Expiry::At(NOW_MS + 1000)
        );
    }

    #[test]
    fn thirty_days_exactly_is_relative() {
        let e = Expiry::resolve(REALTIME_MAXDELTA, NOW);
        assert_eq!(e, Expiry::At((NOW + REALTIME_MAXDELTA as u64) * 1000));
    }

    #[test]
    fn thirty_days_plus_one_is_absolute() {
        // 2592001 is unix time in January 1970: long past.
        assert_eq!(Expiry::resolve(REALTIME_MAXDELTA + 1, NOW), Expiry::Expired);
        // ... unless the clock itself is that early.
        let early = REALTIME_MAXDELTA as u64 - 10;
        assert_eq!(
            Expiry::resolve(REALTIME_MAXDELTA + 1, early),
            Expiry::At((REALTIME_MAXDELTA as u64 + 1) * 1000)
        );
    }

    #[test]
    fn absolute_future_past_and_now() {
        assert_eq!(
            Expiry::resolve(NOW as i64 + 5, NOW),
            Expiry::At((NOW + 5) * 1000)
        );
        assert_eq!(Expiry::resolve(NOW as i64, NOW), Expiry::Expired);
        assert_eq!(Expiry::resolve(NOW as i64 - 1, NOW), Expiry::Expired);
    }

    #[test]
    fn negative_is_expired() {
        assert_eq!(Expiry::resolve(-1, NOW), Expiry::Expired);
        assert_eq!(Expiry::resolve(i64::MIN, NOW), Expiry::Expired);
        assert!(Expiry::Expired.encode(now()).passed(now()));
        assert!(
            Expiry::Expired
                .encode(Now::from_secs(0))
                .passed(Now::from_secs(1))
        );
    }

    #[test]
    fn far_future_clamps_to_u32() {
        let e = Expiry::resolve(i64::MAX, NOW);
        assert_eq!(e, Expiry::At(u64::MAX));
        assert_eq!(e.encode(now()).secs, u32::MAX);
        assert!(!e.encode(now()).passed(now()));
    }

    #[test]
    fn milliseconds_are_kept_to_the_millisecond() {
        let at = NOW_MS + 1234;
        assert_eq!(Expiry::at_millis(at, NOW), Expiry::At(at));
        let deadline = Expiry::At(at).encode(now());
        assert_eq!((deadline.secs, deadline.sub_ms), (NOW as u32 + 1, 234));
        assert_eq!(deadline.millis(), at);
        assert!(!deadline.passed(Now::from_millis(at - 1)));
        assert!(deadline.passed(Now::from_millis(at)));
        // At or before now: expired, and dead at once.
        assert_eq!(Expiry::at_millis(NOW_MS, NOW), Expiry::Expired);
        let later = Now::from_millis(NOW_MS + 5);
        assert!(Expiry::Expired.encode(later).passed(later));
    }
}
