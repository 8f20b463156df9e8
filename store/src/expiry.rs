//! memcached's expiration-time rules (protocol.txt, "Expiration times").
//!
//! A client sends a signed number of seconds. `0` means never; up to and including
//! [`REALTIME_MAXDELTA`] (30 days) it is relative to now; above that it is an absolute
//! unix time. A negative value, or an absolute time at or before now, means the item is
//! already expired. An item whose expiry instant is `t` is visible while `now < t`.

/// memcached's boundary between relative and absolute expiration times: 30 days in seconds.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// A client `exptime` resolved against `now` (protocol.txt, "Expiration times").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// `exptime == 0`: the item never expires.
    Never,
    /// The item is visible while `now < t` (unix seconds).
    At(u64),
    /// Negative, or an absolute time `<= now`: invisible from the start.
    Expired,
}

impl Expiry {
    /// Resolves a raw client `exptime` at unix time `now`.
    pub const fn resolve(exptime: i64, now: u64) -> Expiry {
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::Expired
        } else if exptime <= REALTIME_MAXDELTA {
            Expiry::At(now.saturating_add(exptime as u64))
        } else if exptime as u64 <= now {
            Expiry::Expired
        } else {
            Expiry::At(exptime as u64)
        }
    }

    /// The compact form kept in an item: `0` = never, otherwise the first unix second at
    /// which the item is dead, clamped to `u32` (good until 2106).
    ///
    /// `Expired` becomes `now` itself (at least 1), which is dead at `now`.
    pub(crate) const fn encode(self, now: u64) -> u32 {
        match self {
            Expiry::Never => 0,
            Expiry::At(t) => clamp_u32(t),
            Expiry::Expired => {
                let t = clamp_u32(now);
                if t == 0 { 1 } else { t }
            }
        }
    }
}

/// Whether an item with encoded expiry `exptime` is dead at `now`.
#[inline]
pub(crate) const fn is_expired(exptime: u32, now: u64) -> bool {
    exptime != 0 && now >= exptime as u64
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

    #[test]
    fn zero_is_never() {
        assert_eq!(Expiry::resolve(0, NOW), Expiry::Never);
        assert_eq!(Expiry::Never.encode(NOW), 0);
        assert!(!is_expired(0, u64::MAX));
    }

    #[test]
    fn one_second_relative() {
        let e = Expiry::resolve(1, NOW);
        assert_eq!(e, Expiry::At(NOW + 1));
        let enc = e.encode(NOW);
        assert!(!is_expired(enc, NOW));
        assert!(is_expired(enc, NOW + 1));
    }

    #[test]
    fn thirty_days_exactly_is_relative() {
        let e = Expiry::resolve(REALTIME_MAXDELTA, NOW);
        assert_eq!(e, Expiry::At(NOW + REALTIME_MAXDELTA as u64));
    }

    #[test]
    fn thirty_days_plus_one_is_absolute() {
        // 2592001 is unix time in January 1970: long past.
        assert_eq!(Expiry::resolve(REALTIME_MAXDELTA + 1, NOW), Expiry::Expired);
        // ... unless the clock itself is that early.
        let early = REALTIME_MAXDELTA as u64 - 10;
        assert_eq!(
            Expiry::resolve(REALTIME_MAXDELTA + 1, early),
            Expiry::At(REALTIME_MAXDELTA as u64 + 1)
        );
    }

    #[test]
    fn absolute_future_past_and_now() {
        assert_eq!(Expiry::resolve(NOW as i64 + 5, NOW), Expiry::At(NOW + 5));
        assert_eq!(Expiry::resolve(NOW as i64, NOW), Expiry::Expired);
        assert_eq!(Expiry::resolve(NOW as i64 - 1, NOW), Expiry::Expired);
    }

    #[test]
    fn negative_is_expired() {
        assert_eq!(Expiry::resolve(-1, NOW), Expiry::Expired);
        assert_eq!(Expiry::resolve(i64::MIN, NOW), Expiry::Expired);
        assert!(is_expired(Expiry::Expired.encode(NOW), NOW));
        assert!(is_expired(Expiry::Expired.encode(0), 1));
    }

    #[test]
    fn far_future_clamps_to_u32() {
        let e = Expiry::resolve(i64::MAX, NOW);
        assert_eq!(e, Expiry::At(i64::MAX as u64));
        assert_eq!(e.encode(NOW), u32::MAX);
        assert!(!is_expired(u32::MAX, NOW));
    }
}
