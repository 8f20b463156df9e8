//! memspin's packet paths: TAP and AF_XDP devices for smoltcp, the TCP connection table, and
//! the kernel-socket baseline.
//!
//! ```text
//! queue (TAP fd / AF_XDP ring / kernel socket) → netstack (core n) → server (engine) → netstack → queue
//! ```

pub mod kernel;

/// What one bounded poll step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Nothing happened.
    Idle,
    /// Something was received, sent or changed state.
    Progress,
}
