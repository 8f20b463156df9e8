//! memspin's server: the request engine, statistics, the command line and the worker cores.
//!
//! ```text
//! queue (TAP fd) → netstack (this core's smoltcp + connections) → engine::Engine::execute
//!     → protocol parse → store::Shard (this core's) → reply bytes → netstack → queue
//! ```
//!
//! The engine is transport-free: every packet path (`--net`) hands it a connection's received
//! bytes and sends what it writes. What operators see and set lives beside it: `stats` (every
//! figure and its rendering, the latency instrument), `control` (what the workers share: admin
//! switches, connection records, log watchers) and `logging` (the stderr log and its levels).
//!
//! Raw system calls live in `sys`, the one module allowed `unsafe` code besides the engine's
//! cache-line prefetch; every `unsafe` block says why it is sound (`// SAFETY:`).

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cli;
pub mod conn;
pub mod control;
pub mod engine;
pub mod logging;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
pub mod worker;
