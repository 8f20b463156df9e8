//! memspin-loadgen: an open-loop memcached load generator with HDR latency histograms.
#![warn(missing_docs)]

pub mod arrival;
pub mod histogram;
pub mod verify;
pub mod workload;
pub mod client;
