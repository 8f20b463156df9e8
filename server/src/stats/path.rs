//! A packet path's counters as `stats` lists them (`memspin_<name>`): what the device, the
//! connection table and the sockets count, copied into a fixed table of names by each worker's
//! loop ([`RawPath`] → [`PathCounters`]) and summed over workers by name.

/// Most packet-path counters one worker reports.
pub const MAX_PATH_COUNTERS: usize = 48;

/// A packet path's counters, by name (`memspin_<name>` in `stats`): what its device, its
/// connection table and its sockets count, copied by the worker's loop. Every worker of a run
/// has the same path, so the same names in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathCounters {
    len: usize,
    entries: [(&'static str, u64); MAX_PATH_COUNTERS],
}

impl Default for PathCounters {
    fn default() -> PathCounters {
        PathCounters {
            len: 0,
            entries: [("", 0); MAX_PATH_COUNTERS],
        }
    }
}

impl PathCounters {
    /// Starts over: the loop refills the counters.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Adds one counter (past [`MAX_PATH_COUNTERS`], it is left out).
    #[inline]
    pub fn push(&mut self, name: &'static str, value: u64) {
        if let Some(slot) = self.entries.get_mut(self.len) {
            *slot = (name, value);
            self.len += 1;
        }
    }

    /// The counters, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.entries[..self.len].iter().copied()
    }

    /// Adds another worker's counters, name by name (names it lacks are appended).
    pub fn add(&mut self, other: &PathCounters) {
        for (name, value) in other.iter() {
            match self.entries[..self.len]
                .iter_mut()
                .find(|(n, _)| *n == name)
            {
                Some(entry) => entry.1 += value,
                None => self.push(name, value),
            }
        }
    }

    /// These counters less `base` (counted since `base` was taken), name by name.
    pub fn since(&self, base: &PathCounters) -> PathCounters {
        let mut out = *self;
        for entry in &mut out.entries[..out.len] {
            if let Some((_, b)) = base.iter().find(|(n, _)| *n == entry.0) {
                entry.1 = entry.1.saturating_sub(b);
            }
        }
        out
    }
}

/// A packet path's counters as its device, connection table or sockets keep them: copied by
/// the worker's loop every iteration (a copy of plain integers), named only when `stats` asks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum RawPath {
    /// No packet path (an engine driven directly).
    #[default]
    None,
    /// smoltcp over a TAP queue: the device's and the connection table's counters.
    Tap(netstack::TapStats, netstack::TableStats),
    /// smoltcp over an AF_XDP socket: the device's (the kernel's `XDP_STATISTICS` among them,
    /// read every 100 ms) and the connection table's counters.
    Xdp(netstack::xdp::XdpStats, netstack::TableStats),
    /// Kernel sockets: the table's counters.
    Kernel(netstack::kernel::KernelStats),
}

impl RawPath {
    /// The counters under their `stats` names (`memspin_<name>` in `stats`,
    /// `worker:<i>:<name>` in `stats workers`): `tap_*`, `xdp_*`, `xdp_kernel_*`, `table_*`,
    /// `kernel_*`. Drops are the `*_dropped`, `*_invalid`, `*_truncated`, `*_oversize`,
    /// `*_eagain`, `*_nobufs` and `*_errors` counters; transmit retries `xdp_tx_kick_busy`;
    /// empty fill rings `xdp_fill_empty` (memspin's refills) and
    /// `xdp_kernel_rx_fill_ring_empty_descs` (frames the kernel dropped for want of one).
    pub fn named(&self) -> PathCounters {
        let mut c = PathCounters::default();
        match self {
            RawPath::None => {}
            RawPath::Tap(tap, table) => {
                c.push("tap_rx_frames", tap.rx_frames);
                c.push("tap_rx_bytes", tap.rx_bytes);
                c.push("tap_rx_empty_reads", tap.rx_empty_reads);
                c.push("tap_rx_truncated", tap.rx_truncated);
                c.push("tap_rx_errors", tap.rx_errors);
                c.push("tap_tx_frames", tap.tx_frames);
                c.push("tap_tx_bytes", tap.tx_bytes);
                c.push("tap_tx_eagain", tap.tx_eagain);
                c.push("tap_tx_nobufs", tap.tx_nobufs);
                c.push("tap_tx_errors", tap.tx_errors);
                c.push("tap_tx_short", tap.tx_short);
                c.push("tap_tx_oversize", tap.tx_oversize);
                table_counters(table, &mut c);
            }
            RawPath::Xdp(xdp, table) => {
                c.push("xdp_rx_frames", xdp.rx_frames);
                c.push("xdp_rx_bytes", xdp.rx_bytes);
                c.push("xdp_rx_chained", xdp.rx_chained);
                c.push("xdp_rx_batches", xdp.rx_batches);
                c.push("xdp_rx_invalid", xdp.rx_invalid);
                c.push("xdp_fill_empty", xdp.fill_empty);
                c.push("xdp_fill_wakeups", xdp.fill_wakeups);
                c.push("xdp_busy_polls", xdp.busy_polls);
                c.push("xdp_tx_frames", xdp.tx_frames);
                c.push("xdp_tx_bytes", xdp.tx_bytes);
                c.push("xdp_tx_chained", xdp.tx_chained);
                c.push("xdp_tx_kicks", xdp.tx_kicks);
                c.push("xdp_tx_kick_busy", xdp.tx_kick_busy);
                c.push("xdp_tx_errors", xdp.tx_errors);
                c.push("xdp_tx_exhausted", xdp.tx_exhausted);
                c.push("xdp_tx_dropped", xdp.tx_dropped);
                c.push("xdp_tx_oversize", xdp.tx_oversize);
                c.push("xdp_completions", xdp.completions);
                c.push("xdp_bogus_completions", xdp.bogus_completions);
                c.push("xdp_tx_in_flight", xdp.tx_in_flight);
                let k = &xdp.kernel;
                c.push("xdp_kernel_rx_dropped", k.rx_dropped);
                c.push("xdp_kernel_rx_invalid_descs", k.rx_invalid_descs);
                c.push("xdp_kernel_tx_invalid_descs", k.tx_invalid_descs);
                c.push("xdp_kernel_rx_ring_full", k.rx_ring_full);
                c.push(
                    "xdp_kernel_rx_fill_ring_empty_descs",
                    k.rx_fill_ring_empty_descs,
                );
                c.push("xdp_kernel_tx_ring_empty_descs", k.tx_ring_empty_descs);
                table_counters(table, &mut c);
            }
            RawPath::Kernel(k) => {
                c.push("kernel_accepted", k.accepted);
                c.push("kernel_refused", k.refused);
                c.push("kernel_closed", k.closed);
                c.push("kernel_idle_closed", k.idle_closed);
                c.push("kernel_errors", k.errors);
            }
        }
        c
    }
}

/// Whether a path counter is one of loss recovery's, which `stats` writes once from
/// [`ServerInfo::recovery`] (under the same names) rather than among the path's.
pub(super) fn is_recovery(name: &str) -> bool {
    name.starts_with("loss_") || name.starts_with("smoltcp_")
}

/// A smoltcp connection table's counters (frames in and out, drops, connection ends, and loss
/// recovery's copies and retransmissions).
fn table_counters(t: &netstack::TableStats, c: &mut PathCounters) {
    c.push("table_frames_in", t.frames_in);
    c.push("table_frames_tcp", t.frames_tcp);
    c.push("table_frames_control", t.frames_control);
    c.push("table_frames_dropped", t.frames_dropped);
    c.push("table_frames_out", t.frames_out);
    c.push("table_unresolved", t.unresolved);
    c.push("table_tx_exhausted", t.tx_exhausted);
    c.push("table_handshakes_failed", t.handshakes_failed);
    c.push("table_syn_evicted", t.syn_evicted);
    c.push("table_timed_out", t.timed_out);
    c.push("table_idle_closed", t.idle_closed);
    c.push("table_closed", t.closed);
    let r = &t.recovery;
    c.push("loss_probes", r.probes);
    c.push("loss_sack_resends", r.sack_resends);
    c.push("loss_recovered", r.recovered);
    c.push("loss_spurious", r.spurious);
    c.push("smoltcp_retransmits", r.smoltcp_retransmits);
    c.push("loss_probes_withheld", r.probes_withheld);
    c.push("loss_probes_spurious", r.probes_spurious);
    c.push("loss_probes_stretched", r.probes_stretched);
    c.push("loss_peer_retransmit_resends", r.peer_retransmit_resends);
    c.push("loss_probes_recovered", r.probes_recovered);
    c.push("loss_probes_recovered_us", r.probes_recovered_us);
}
