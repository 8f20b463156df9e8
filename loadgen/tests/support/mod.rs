//! Test support: a stock memcached on a free loopback port, killed when the test ends.
//!
//! The binary is `/usr/bin/memcached` (or `$MEMCACHED`); when it is missing the tests fail,
//! they do not skip (`scripts/test.sh` installs it).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A `memcached -U 0 -t 1 -m 64` on 127.0.0.1, killed on drop (also when the test panics).
pub struct Memcached {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Memcached {
    #[track_caller]
    pub fn start() -> Memcached {
        Memcached::start_on(None)
    }

    /// memcached with every thread on `cpu` when given.
    #[track_caller]
    pub fn start_on(cpu: Option<usize>) -> Memcached {
        let bin = std::env::var_os("MEMCACHED")
            .map_or_else(|| PathBuf::from("/usr/bin/memcached"), PathBuf::from);
        assert!(
            bin.exists(),
            "memcached not found at {}: install it (apt-get install memcached) or set MEMCACHED=/path/to/memcached",
            bin.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(&bin);
        cmd.args(["-U", "0", "-t", "1", "-m", "64", "-l", "127.0.0.1"])
            .args(["-p", &port.to_string()]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        if let Some(cpu) = cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure only calls sched_setaffinity on a set
            // built on its own stack (async-signal-safe, no allocation).
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn memcached");
        let mc = Memcached {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(mc.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "memcached did not start listening on {}",
                mc.addr
            );
            thread::sleep(Duration::from_millis(10));
        }
        mc
    }

    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }
}

/// Sends `sig` to `pid`; false when it is gone.
pub fn send_signal(pid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: kill takes no pointers; the pids used here are memcached children that are only
    // reaped when their `Memcached` guard drops, after every signal is sent.
    unsafe { libc::kill(pid, sig) == 0 }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        // Never signal a pid that was already reaped (it may belong to someone else by now).
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // A stopped process dies on SIGKILL too; resume first anyway so nothing is left frozen.
        send_signal(self.pid(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
