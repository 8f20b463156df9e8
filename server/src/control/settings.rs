//! The settings fixed at start-up (`stats settings`).

/// Settings fixed at start-up, for `stats settings` and the admin commands that depend on
/// them.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The whole memory budget in bytes (`-m`; every shard has its share); 0: take the
    /// workers' own figures.
    pub memory_limit_bytes: u64,
    /// The TCP port served (`-p`).
    pub tcp_port: u16,
    /// The RESP port served (`--resp-port`), if Redis clients are.
    pub resp_port: Option<u16>,
    /// The address served: `-l` on kernel sockets, `--ip` on the bypass paths.
    pub interface: String,
    /// `-M`: refuse stores instead of evicting when memory is full.
    pub no_evictions: bool,
    /// `-A`: the `shutdown` command may stop the server.
    pub shutdown_enabled: bool,
    /// `--idle-timeout` in seconds (0: off).
    pub idle_timeout_secs: u32,
    /// The packet path (`--net`): `tap`, `xdp` or `kernel`.
    pub net: &'static str,
    /// The idle policy (`--idle`, or its default for the path): `spin`, `park` or `adaptive`.
    pub idle: &'static str,
    /// The CPU of each worker.
    pub cpus: Vec<usize>,
    /// Loss recovery's floor (`--rto-min`, e.g. `1ms` or `off`) on the smoltcp paths; `None`
    /// on kernel sockets, where the kernel's TCP recovers.
    pub rto_min: Option<String>,
}
