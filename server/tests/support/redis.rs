//! A real `redis-server` to compare memspin's RESP replies with (Debian package
//! `redis-server`).

use std::net::SocketAddr;
use std::process::Command;

use super::Loopback;

/// A `redis-server` on a free loopback port, without persistence, killed when dropped.
pub struct RedisServer {
    _process: Loopback,
    pub addr: SocketAddr,
}

impl RedisServer {
    #[track_caller]
    pub fn start() -> RedisServer {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        let process = Loopback::spawn(command, "--port", "redis-server");
        RedisServer {
            addr: process.addr,
            _process: process,
        }
    }
}
