//! The environment of a run, written into its JSON so that a result file says what was
//! measured: the generator (version, git revision, command line, start time), the machine
//! (kernel, CPU model, frequency governor, SMT, isolated and `nohz_full` CPUs, the CPUs the
//! generator's threads were given) and each server as it described itself at the start
//! (`version` and `stats settings`: for memspin, the packet path, idle policy, workers, ...;
//! over RESP, the fields of `INFO server`).
//!
//! ```text
//! /proc, /sys ─┐
//! uname ───────┼─▶ Environment ─▶ JSON `environment`
//! each server: version, stats settings (own connection, text commands, 2 s bound) ─┘
//! ```
//!
//! Nothing here fails a run: what cannot be read is null, and a server that does not answer
//! has its error written instead of its settings.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::client::Protocol;

/// The git revision the binary was built from (`git describe`-like: the commit, `-dirty`
/// when the tree had changes), or `unknown` outside a git checkout.
pub const GIT_REVISION: &str = env!("MEMSPIN_GIT_REVISION");

/// How long a server has to answer the start-of-run questions.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Everything known about where and how a run took place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The generator.
    pub loadgen: Generator,
    /// The machine the generator ran on.
    pub host: Host,
    /// Each server, in `--server` order.
    pub servers: Vec<ServerInfo>,
}

/// The generator's own identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// Crate version.
    pub version: String,
    /// Git revision of the build.
    pub git_revision: String,
    /// The process's arguments, the program first.
    pub command_line: Vec<String>,
    /// Start of the run (UTC, RFC 3339).
    pub start_time: String,
    /// Start of the run, seconds since the Unix epoch.
    pub start_unix_s: f64,
}

/// The machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: Option<String>,
    /// Kernel release and version (`uname -rv`).
    pub kernel: Option<String>,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// Logical CPUs online.
    pub cpus_online: Option<String>,
    /// Frequency governors of the CPUs, distinct values (`performance`, `powersave`, ...).
    pub governors: Vec<String>,
    /// SMT: `on`, `off`, `notsupported`, ... (`/sys/devices/system/cpu/smt/control`).
    pub smt: Option<String>,
    /// CPUs isolated from the scheduler (`isolcpus`).
    pub isolated_cpus: Option<String>,
    /// CPUs in `nohz_full` mode.
    pub nohz_full_cpus: Option<String>,
    /// The CPUs the generator's threads were pinned to (`--cpus`), or those the process may
    /// use when not pinned.
    pub generator_cpus: Vec<usize>,
}

/// A server as it described itself when the run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `host:port`.
    pub server: String,
    /// Its `version` reply.
    pub version: Option<String>,
    /// Its `stats settings`, name → value.
    pub settings: BTreeMap<String, String>,
    /// Why it could not be asked, or null.
    pub error: Option<String>,
}

impl Environment {
    /// Reads the environment now: `names` and `addrs` are the servers, `cpus` the generator's
    /// CPUs, `protocol` what the run speaks (a server of another protocol is asked its own
    /// way, or not at all).
    pub fn capture(
        names: &[String],
        addrs: &[SocketAddr],
        cpus: Vec<usize>,
        protocol: Protocol,
        now: SystemTime,
    ) -> Environment {
        let start = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        Environment {
            loadgen: Generator {
                version: env!("CARGO_PKG_VERSION").to_string(),
                git_revision: GIT_REVISION.to_string(),
                command_line: std::env::args().collect(),
                start_time: rfc3339(start.as_secs()),
                start_unix_s: start.as_secs_f64(),
            },
            host: Host::read(cpus),
            servers: names
                .iter()
                .zip(addrs)
                .map(|(name, addr)| ServerInfo::ask(name, *addr, protocol))
                .collect(),
        }
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Host {
    fn read(generator_cpus: Vec<usize>) -> Host {
        let cpu_model = fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
        let mut governors: Vec<String> = fs::read_dir("/sys/devices/system/cpu")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("cpu")?.parse::<u32>().ok()?;
                read_trimmed(&format!(
                    "/sys/devices/system/cpu/{name}/cpufreq/scaling_governor"
                ))
            })
            .collect();
        governors.sort();
        governors.dedup();
        let kernel = match (
            read_trimmed("/proc/sys/kernel/osrelease"),
            read_trimmed("/proc/sys/kernel/version"),
        ) {
            (Some(r), Some(v)) => Some(format!("{r} {v}")),
            (r, _) => r,
        };
        Host {
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            kernel,
            cpu_model,
            cpus_online: read_trimmed("/sys/devices/system/cpu/online"),
            governors,
            smt: read_trimmed("/sys/devices/system/cpu/smt/control"),
            isolated_cpus: read_trimmed("/sys/devices/system/cpu/isolated"),
            nohz_full_cpus: read_trimmed("/sys/devices/system/cpu/nohz_full"),
            generator_cpus,
        }
    }
}

impl ServerInfo {
    fn ask(name: &str, addr: SocketAddr, protocol: Protocol) -> ServerInfo {
        let mut info = ServerInfo {
            server: name.to_string(),
            version: None,
            settings: BTreeMap::new(),
            error: None,
        };
        // memcached serves all three of its protocols on one port, chosen per connection, so
        // the text commands answer for binary and meta runs as well.
        let asked = match protocol {
            Protocol::Binary | Protocol::Text | Protocol::Meta => ask_memcached(addr, &mut info),
            Protocol::Resp => ask_redis(addr, &mut info),
        };
        if let Err(e) = asked {
            info.error = Some(e.to_string());
        }
        info
    }
}

/// `version` and `stats settings` over a connection of its own, in the text protocol.
fn ask_memcached(addr: SocketAddr, info: &mut ServerInfo) -> io::Result<()> {
    let stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    writer.write_all(b"version\r\nstats settings\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // At most a few hundred settings: bound the lines read.
    for _ in 0..4_096 {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if let Some(v) = l.strip_prefix("VERSION ") {
            info.version = Some(v.to_string());
        } else if let Some(stat) = l.strip_prefix("STAT ") {
            let (k, v) = stat.split_once(' ').unwrap_or((stat, ""));
            info.settings.insert(k.to_string(), v.to_string());
        } else if l == "END" {
            return Ok(());
        } else {
            return Err(io::Error::other(format!("unexpected reply {l:?}")));
        }
    }
    Err(io::Error::other("stats settings never ended"))
}

/// Longest `INFO server` reply read.
const MAX_INFO_BYTES: usize = 1 << 20;

/// `INFO server` over a connection of its own, in RESP: its `name:value` lines are the
/// settings, `redis_version` the version.
fn ask_redis(addr: SocketAddr, info: &mut ServerInfo) -> io::Result<()> {
    use protocol::resp::{Frame, FrameError, value_len, write_command};
    use std::io::Read as _;
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let mut request = Vec::new();
    write_command(&mut request, &["INFO", "server"]);
    stream.write_all(&request)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match value_len(&reply) {
            Ok(_) => break,
            Err(FrameError::Incomplete { .. }) if reply.len() < MAX_INFO_BYTES => {}
            Err(_) => return Err(io::Error::other("not an INFO reply")),
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    let text = match Frame::parse(&reply) {
        Ok((Frame::Bulk(text) | Frame::Verbatim { text, .. }, _)) => text,
        Ok((Frame::Error(e), _)) => {
            return Err(io::Error::other(String::from_utf8_lossy(e).into_owned()));
        }
        _ => return Err(io::Error::other("not an INFO reply")),
    };
    for line in String::from_utf8_lossy(text).lines() {
        if let Some((k, v)) = line.split_once(':') {
            info.settings.insert(k.to_string(), v.to_string());
        }
    }
    info.version = info.settings.get("redis_version").cloned();
    Ok(())
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let rem = unix_s % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_host_is_described() {
        let h = Host::read(vec![1]);
        assert!(h.kernel.is_some() && h.cpu_model.is_some(), "{h:?}");
        assert_eq!(h.generator_cpus, [1]);
        assert!(!GIT_REVISION.is_empty());
    }

    /// A server that answers `version` and `stats settings` as memcached does.
    #[test]
    fn a_server_describes_itself_and_a_silent_one_gives_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let mut got = Vec::new();
            while !got.ends_with(b"stats settings\r\n") {
                let n = std::io::Read::read(&mut s, &mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"VERSION 1.6.18-memspin-0.1.0\r\nSTAT maxconns 1024\r\nSTAT memspin_net tap\r\nEND\r\n")
                .unwrap();
        });
        let info = ServerInfo::ask("a:1", addr, Protocol::Binary);
        server.join().unwrap();
        assert_eq!(info.version.as_deref(), Some("1.6.18-memspin-0.1.0"));
        assert_eq!(info.settings["memspin_net"], "tap");
        assert_eq!(info.settings["maxconns"], "1024");
        assert!(info.error.is_none());
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let info = ServerInfo::ask("b:2", closed, Protocol::Text);
        assert!(info.error.is_some() && info.version.is_none(), "{info:?}");
    }

    /// Over RESP, `INFO server` describes the server.
    #[test]
    fn a_redis_server_describes_itself() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let mut got = Vec::new();
            while !got.ends_with(b"server\r\n") {
                let n = std::io::Read::read(&mut s, &mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n");
            let text = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
            let reply = format!("${}\r\n{text}\r\n", text.len());
            for piece in reply.as_bytes().chunks(7) {
                s.write_all(piece).unwrap();
            }
        });
        let info = ServerInfo::ask("r:1", addr, Protocol::Resp);
        server.join().unwrap();
        assert!(info.error.is_none(), "{info:?}");
        assert_eq!(info.version.as_deref(), Some("7.0.15"));
        assert_eq!(info.settings["redis_mode"], "standalone");
    }
}
