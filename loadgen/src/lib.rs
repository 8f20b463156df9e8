//! memspin-loadgen: an open-loop memcached load generator with HDR latency histograms that
//! never hides a stall. It speaks memcached's binary and text protocols and Redis's RESP
//! (`--protocol resp`: `GET` and `SET`), so one tool measures both kinds of server.
//!
//! It owns the workload (keys built before the run, seeded choices), the client connections,
//! the latency histograms and the reports. Each worker thread runs its own epoll loop over
//! non-blocking sockets:
//!
//! ```text
//! arrival schedule (intended time) → backlog → free connection slot → encode → socket → server
//! server → socket → decode (in order) → HDR histograms per op: service time (from the actual
//!   send) and corrected latency (from the intended send) → merged bucket-wise → report
//! ```
//!
//! With `--net tap` a thread's connections run over netstack's TCP stack on a TAP queue of
//! its own instead of kernel sockets ([`bypass`]); the rest of the thread's work is the same.
//!
//! While requests are in flight a thread busy-polls (`--idle spin`), so a reply is read as it
//! arrives; send and reply times are the kernel's timestamps where the socket gives them
//! ([`tstamp`]), so the service time excludes the generator's own scheduling, and the delay
//! between a reply's arrival and its handling is reported on its own (the generator delay).
//!
//! In open loop (`--rate`) a request that cannot go out on time keeps its intended send time,
//! so queueing in the generator or on a stalled server shows up in the corrected latency; the
//! send lag, late and never-sent requests are counted, and the arrival gaps are checked with a
//! Kolmogorov–Smirnov test. In closed loop each connection keeps `--pipeline` requests in
//! flight and the service time is reported.
//!
//! [`run`] takes a [`Config`] and returns a [`Report`]; the `memspin-loadgen` binary is a thin
//! wrapper over [`cli::main`].
#![warn(missing_docs)]

pub mod arrival;
pub mod bypass;
pub mod cli;
pub mod client;
pub mod config;
pub mod conn;
pub mod environment;
pub mod histogram;
pub mod html;
pub mod output;
pub mod pacing;
pub mod placement;
pub mod report;
mod run;
pub mod search;
pub mod sweep;
pub mod sys;
pub mod timeouts;
pub mod tstamp;
pub mod verify;
pub mod worker;
pub mod workload;

pub use config::Config;
pub use report::{Report, Summary};
pub use run::{RunError, run, run_with_stop};
