//! What recovery measures of round trips and acknowledgments: the recent minimum RTT
//! ([`MinRtt`]), RFC 6298's smoothed RTT ([`Smoothed`]), a peer's ACK delays of lone
//! segments ([`AckDelays`]), and sequence-number order.

use smoltcp::time::{Duration, Instant};

use super::ACK_DELAY_SAMPLES;

/// Unit of a kept delay, µs: a `u16` holds up to 524 ms, past [`super::MAX_ACK_DELAY`].
const ACK_DELAY_UNIT_US: u32 = 8;

/// How long a minimum RTT sample counts: between half of this and all of it.
pub(super) const MIN_RTT_WINDOW: Duration = Duration::from_secs(1);

/// The smallest RTT sample of the last [`MIN_RTT_WINDOW`] (at least its second half). A
/// request/response client acknowledges a reply with its next request, or after its
/// delayed-ACK timer, so most samples include the client's own delay; whenever its next
/// request follows at once, a sample is the network's round trip, and the minimum keeps
/// it. A client that is slow to acknowledge every reply (saturated, or always delaying its
/// ACK) raises the minimum once the window has passed.
///
/// Two half-windows: the minimum of the current one and of the one before; when the
/// current one is over it becomes the one before (or is forgotten, if no sample came for
/// a whole window).
#[derive(Debug, Clone, Copy)]
pub(super) struct MinRtt {
    /// Smallest sample of the current half-window, µs; 0: none.
    pub(super) current_us: u32,
    /// Smallest sample of the half-window before, µs; 0: none.
    pub(super) previous_us: u32,
    /// When the current half-window started.
    pub(super) started: Instant,
}

impl Default for MinRtt {
    fn default() -> Self {
        MinRtt {
            current_us: 0,
            previous_us: 0,
            started: Instant::ZERO,
        }
    }
}

impl MinRtt {
    pub(super) fn update(&mut self, us: u32, now: Instant) {
        let age = now - self.started;
        if self.current_us == 0 || age >= MIN_RTT_WINDOW / 2 {
            self.previous_us = if age < MIN_RTT_WINDOW {
                self.current_us
            } else {
                0
            };
            self.current_us = us;
            self.started = now;
        } else {
            self.current_us = self.current_us.min(us);
        }
    }

    /// The minimum in µs; 0: no sample yet.
    pub(super) fn micros(&self) -> u32 {
        match (self.current_us, self.previous_us) {
            (0, p) => p,
            (c, 0) => c,
            (c, p) => c.min(p),
        }
    }
}

/// RFC 6298's smoothed RTT and variation (gains 1/8 and 1/4), in µs.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Smoothed {
    /// 0: no sample yet.
    pub(super) srtt_us: u32,
    pub(super) rttvar_us: u32,
}

impl Smoothed {
    pub(super) fn update(&mut self, us: u32) {
        if self.srtt_us == 0 {
            self.srtt_us = us;
            self.rttvar_us = us / 2;
        } else {
            let deviation = self.srtt_us.abs_diff(us);
            self.rttvar_us = ((u64::from(self.rttvar_us) * 3 + u64::from(deviation)) / 4) as u32;
            self.srtt_us = ((u64::from(self.srtt_us) * 7 + u64::from(us)) / 8) as u32;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.srtt_us == 0
    }

    /// SRTT + 4·RTTVAR: later than almost every sample so far; 0 without samples.
    pub(super) fn timeout_us(&self) -> u64 {
        u64::from(self.srtt_us) + 4 * u64::from(self.rttvar_us)
    }
}

/// The time a connection's peer took to acknowledge each of its latest
/// [`ACK_DELAY_SAMPLES`] lone segments (a data segment or FIN alone in flight), from the
/// segment's last transmission to the ACK, and a high quantile of them: the largest, or
/// once all are kept the second largest (about the 94th percentile: one outlier, such as
/// a client descheduled for a while, does not count). A request/response client that
/// delays its ACK until its next request (Linux in its interactive "pingpong" mode)
/// acknowledges after its think time, which no round trip predicts but which these
/// samples measure. A probe that proved spurious tells only that the delay was longer
/// than the time until its D-SACK (or the original's ACK) came: one counts as that time,
/// each one more in a row as twice it, so a client that acknowledges far later than its
/// connection has seen (one whose replies are all probed: no sample below the timeout
/// comes) is learned after a few spurious probes, as a timer backs off. 72 bytes a
/// connection.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AckDelays {
    /// In units of [`ACK_DELAY_UNIT_US`], oldest overwritten first.
    pub(super) samples: [u16; ACK_DELAY_SAMPLES],
    /// Samples kept (up to [`ACK_DELAY_SAMPLES`]).
    pub(super) len: u8,
    /// Where the next sample goes.
    pub(super) next: u8,
    /// The quantile in µs; 0: no sample yet.
    pub(super) quantile_us: u32,
    /// Spurious probes since the last ACK that came before its probe.
    pub(super) censored: u8,
}

impl AckDelays {
    /// An ACK `delay` after the segment went out; returns the sample kept, µs.
    pub(super) fn add(&mut self, delay: Duration) -> u32 {
        self.censored = 0;
        self.push(delay)
    }

    pub(super) fn push(&mut self, delay: Duration) -> u32 {
        let units = delay.total_micros() / u64::from(ACK_DELAY_UNIT_US);
        let units = u16::try_from(units).unwrap_or(u16::MAX);
        self.samples[usize::from(self.next)] = units;
        self.next = ((usize::from(self.next) + 1) % ACK_DELAY_SAMPLES) as u8;
        self.len = self.len.saturating_add(1).min(ACK_DELAY_SAMPLES as u8);
        let (mut first, mut second) = (0u16, 0u16);
        for &sample in &self.samples[..usize::from(self.len)] {
            if sample > first {
                second = first;
                first = sample;
            } else if sample > second {
                second = sample;
            }
        }
        let quantile = if usize::from(self.len) == ACK_DELAY_SAMPLES {
            second
        } else {
            first
        };
        self.quantile_us = (u32::from(quantile) * ACK_DELAY_UNIT_US).max(1);
        u32::from(units) * ACK_DELAY_UNIT_US
    }

    /// A probe that proved spurious was acknowledged `delay` after the original went out:
    /// the original's own ACK would have come later still. One such sample counts as
    /// `delay` (the quantile's margin already lets it through now and then); each one more
    /// before an ACK comes in time counts as twice its delay, as a timer backs off.
    pub(super) fn add_censored(&mut self, delay: Duration) -> u32 {
        let factor = if self.censored == 0 { 1 } else { 2 };
        self.censored = self.censored.saturating_add(1);
        self.push(delay * factor)
    }

    /// How long a lone segment waits for its ACK: the quantile, at least the table's
    /// `prior_us` until all [`ACK_DELAY_SAMPLES`] are the connection's own, and a margin (a
    /// quarter of the floor; a sixteenth of that if more; a quarter of it less the floor if
    /// more still); `None` before any sample.
    pub(super) fn timeout(&self, floor_us: u32, prior_us: u32) -> Option<Duration> {
        let mut quantile = self.quantile_us;
        if usize::from(self.len) < ACK_DELAY_SAMPLES {
            quantile = quantile.max(prior_us);
        }
        if quantile == 0 {
            return None;
        }
        let margin = (floor_us / 4)
            .max(quantile / 16)
            .max((quantile / 4).saturating_sub(floor_us));
        Some(Duration::from_micros(
            u64::from(quantile) + u64::from(margin),
        ))
    }
}

/// `a` is before `b` in sequence space (RFC 9293 §3.4, modulo 2^32).
#[inline]
pub(super) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline]
pub(super) fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

#[inline]
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
