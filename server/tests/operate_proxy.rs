//! Several memspin servers behind twemproxy (Debian's `nutcracker`), as users scale memcached
//! out: two memspin servers on two TAP devices in one test namespace, nutcracker in front with
//! ketama distribution, and a client that only talks to nutcracker. Keys spread over both
//! servers; get, multi-get, set, delete and incr through the proxy return what was stored.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::{Netns, Server, TAP, Tap, TextClient};

/// The nutcracker configuration docs/operating.md's "Several servers" section shows, for the test's
/// two servers.
const NUTCRACKER_CONF: &str = "\
memspin:
  listen: 127.0.0.1:22121
  hash: md5
  distribution: ketama
  timeout: 2000
  auto_eject_hosts: false
  server_retry_timeout: 2000
  servers:
   - 10.77.0.2:11211:1 memspin-a
   - 10.78.0.2:11211:1 memspin-b
";

/// memspin over TAP device `iface` at `ip`, the kernel side at `host_ip`.
fn start_memspin(ns: &Netns, iface: &str, ip: &str, host_ip: &str) -> Server {
    let (ips, host_ips) = ([ip], [host_ip]);
    let args = Tap {
        iface,
        ips: &ips,
        host_ips: &host_ips,
        ..TAP
    }
    .args();
    let addr: SocketAddr = format!("{}:11211", ip.split('/').next().unwrap())
        .parse()
        .unwrap();
    Server::start(Some(ns), &args, Some(addr))
}

/// nutcracker in `ns`, killed when dropped.
struct Nutcracker {
    child: Child,
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn tap_two_servers_behind_nutcracker() {
    let ns = Netns::new();
    let a = start_memspin(&ns, "ms0", "10.77.0.2/24", "10.77.0.1/24");
    let b = start_memspin(&ns, "ms1", "10.78.0.2/24", "10.78.0.1/24");
    let dir = std::env::temp_dir().join(format!("memspin-nutcracker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("nutcracker.yml");
    std::fs::write(&conf, NUTCRACKER_CONF).unwrap();
    let conf_arg = conf.to_str().unwrap();
    let test = ns
        .command("nutcracker")
        .args(["-t", "-c", conf_arg])
        .output()
        .expect("nutcracker (Debian package nutcracker) must be installed");
    assert!(
        test.status.success(),
        "nutcracker -t: {}",
        String::from_utf8_lossy(&test.stderr)
    );
    let log = dir.join("nutcracker.log");
    let pid = dir.join("nutcracker.pid");
    let child = ns
        .command("nutcracker")
        .args([
            "-c",
            conf_arg,
            "-s",
            "22222",
            "-a",
            "127.0.0.1",
            "-o",
            log.to_str().unwrap(),
            "-p",
            pid.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nutcracker");
    let _proxy = Nutcracker { child };
    ns.enter();
    let proxy: SocketAddr = "127.0.0.1:22121".parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(proxy).is_err() {
        assert!(Instant::now() < deadline, "nutcracker did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = TextClient::connect(proxy);
    let keys: Vec<String> = (0..200).map(|i| format!("user:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let value = format!("value-{i}");
        let reply = c
            .call(format!("set {key} {i} 0 {}\r\n{value}\r\n", value.len()).as_bytes())
            .unwrap();
        assert_eq!(reply, b"STORED\r\n", "{key}");
    }
    for (i, key) in keys.iter().enumerate().step_by(7) {
        let reply = c.call(format!("get {key}\r\n").as_bytes()).unwrap();
        let value = format!("value-{i}");
        assert_eq!(
            String::from_utf8_lossy(&reply),
            format!("VALUE {key} {i} {}\r\n{value}\r\nEND\r\n", value.len())
        );
    }
    // One multi-get over keys of both servers: nutcracker splits it and merges the replies.
    let some: Vec<&String> = keys.iter().take(40).collect();
    let line = some
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let reply = String::from_utf8(
        c.call(format!("get {line} missing:1\r\n").as_bytes())
            .unwrap(),
    )
    .unwrap();
    for (i, key) in some.iter().enumerate() {
        let value = format!("value-{i}");
        assert!(
            reply.contains(&format!("VALUE {key} {i} {}\r\n{value}\r\n", value.len())),
            "{key} in {reply}"
        );
    }
    assert!(reply.ends_with("END\r\n") && !reply.contains("missing:1"));
    // Counters and deletes.
    assert_eq!(c.call(b"set hits 0 0 1\r\n5\r\n").unwrap(), b"STORED\r\n");
    assert_eq!(c.call(b"incr hits 37\r\n").unwrap(), b"42\r\n");
    assert_eq!(
        c.call(b"get hits\r\n").unwrap(),
        b"VALUE hits 0 2\r\n42\r\nEND\r\n"
    );
    assert_eq!(c.call(b"delete user:3\r\n").unwrap(), b"DELETED\r\n");
    assert_eq!(c.call(b"get user:3\r\n").unwrap(), b"END\r\n");
    assert_eq!(c.call(b"delete user:3\r\n").unwrap(), b"NOT_FOUND\r\n");
    // Both servers hold a share of the keys.
    let items = |server: &Server| {
        let mut direct = TextClient::connect(server.addr);
        let stats = String::from_utf8(direct.call(b"stats\r\n").unwrap()).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT curr_items "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let (on_a, on_b) = (items(&a), items(&b));
    assert_eq!(on_a + on_b, 200, "199 users and hits");
    assert!(on_a > 40 && on_b > 40, "spread: {on_a} and {on_b}");
    let _ = std::fs::remove_dir_all(&dir);
}
