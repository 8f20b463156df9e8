//! The monotonic time base of the latency instrument and the packet paths' arrival stamps.

use std::sync::OnceLock;

/// The time base of [`monotonic_ns`]: the first reading of the clock in this process.
static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process, from the monotonic clock: the time base
/// of the latency instrument (`stats latency`) and of the packet paths' arrival stamps.
pub fn monotonic_ns() -> u64 {
    monotonic_ns_at(std::time::Instant::now())
}

/// [`monotonic_ns`] of an instant read earlier (a loop's tick), without reading the clock.
pub fn monotonic_ns_at(at: std::time::Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(|| at);
    at.saturating_duration_since(epoch).as_nanos() as u64
}
