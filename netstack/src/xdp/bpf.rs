//! The `bpf(2)` calls the AF_XDP path needs, and the steering program, hand-assembled.
//!
//! No clang, libbpf or ELF loader: the program is written with the small assembler in
//! `asm.rs` (labels, jump offsets resolved at the end) and loaded with `BPF_PROG_LOAD`.
//! It takes only memspin's traffic and leaves everything else to the kernel. With an IPv4
//! address ([`Steer::ipv4`]):
//!
//! - IPv4 TCP to that address and [`Steer::tcp_port`] or [`Steer::extra_tcp_port`] (any
//!   IPv4 options, IHL 5 to 15; the first fragment of a packet, later fragments carry no
//!   port),
//! - ICMP echo requests to that address (unfragmented, or the first fragment),
//! - ARP (IPv4 over Ethernet) whose target protocol address is ours: requests for our
//!   address and replies to ours;
//!
//! with an IPv6 address ([`Steer::ipv6`]), for IPv6 headers with no extension header:
//!
//! - IPv6 TCP to that address and the port,
//! - ICMPv6 echo requests and neighbour advertisements to that address (answers to our
//!   solicitations), and neighbour solicitations whose target is that address (sent to
//!   its solicited-node group or to it);
//!
//! go to the queue's AF_XDP socket. A client's program ([`client_program`], for
//! `memspin-loadgen --net xdp`) is the same without the port comparisons: TCP to the
//! client's address on any port (its connections' ephemeral ports). Every other frame (the host's own ARP, neighbour
//! discovery, SSH, ping and the rest of its traffic, UDP, other ports and addresses, IPv6
//! with extension headers or fragments, 802.1Q-tagged frames, frames too short for the
//! headers they announce) gets `XDP_PASS`. Registers: r2 = `data`, r3 = `data_end`, r9 =
//! the queue; every packet load comes after a check against `data_end` that covers it, as
//! the verifier requires. A loaded field holds the wire's bytes in native order, so each
//! constant is compared in that form (`wire_u16`, `wire_u32`), with 32-bit jumps (`w5`
//! below); an IPv6 address is compared as four 32-bit words.
//!
//! ```text
//!         r9 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index (struct xdp_md)
//!         r2 = *(u32 *)(r1 + 0)       ; ctx->data
//!         r3 = *(u32 *)(r1 + 4)       ; ctx->data_end
//!         r5 = r2
//!         r5 += 14
//!         if r5 > r3 goto pass        ; no whole Ethernet header
//!         r5 = *(u16 *)(r2 + 12)      ; EtherType
//!         if w5 == ETH_P_ARP goto arp     ; (with an IPv4 address)
//!         if w5 == ETH_P_IP goto ipv4     ; (with an IPv4 address)
//!         if w5 == ETH_P_IPV6 goto ipv6   ; (with an IPv6 address)
//!         goto pass                   ; VLAN tags, everything else
//! arp:    r5 = r2
//!         r5 += 42
//!         if r5 > r3 goto pass        ; Ethernet + 28 bytes of ARP for IPv4
//!         r5 = *(u32 *)(r2 + 14)      ; hardware type, protocol type
//!         if w5 != 1, 0x0800 goto pass
//!         r5 = *(u16 *)(r2 + 18)      ; address lengths
//!         if w5 != 6, 4 goto pass
//!         r5 = *(u32 *)(r2 + 38)      ; target protocol address
//!         if w5 != IP goto pass
//!         goto redirect
//! ipv4:   r5 = r2
//!         r5 += 34
//!         if r5 > r3 goto pass        ; Ethernet + the 20 fixed bytes of IPv4
//!         r5 = *(u8 *)(r2 + 14)       ; version, IHL
//!         r4 = r5
//!         r4 &= 0xf0
//!         if w4 != 0x40 goto pass     ; version 4
//!         r5 &= 0x0f                  ; IHL, in 32-bit words
//!         if w5 < 5 goto pass
//!         r4 = *(u32 *)(r2 + 30)      ; destination address
//!         if w4 != IP goto pass
//!         r4 = *(u16 *)(r2 + 20)      ; flags, fragment offset
//!         if w4 & 0x1fff goto pass    ; a later fragment: no transport header
//!         r5 <<= 2                    ; IPv4 header length, 20 to 60 bytes
//!         r6 = r2
//!         r6 += r5                    ; the transport header is at r6 + 14
//!         r4 = r6
//!         r4 += 18
//!         if r4 > r3 goto pass        ; 4 bytes of it: ICMP type and code, or TCP ports
//!         r4 = *(u8 *)(r2 + 23)       ; protocol
//!         if w4 == IPPROTO_TCP goto ipv4_tcp
//!         if w4 != IPPROTO_ICMP goto pass
//!         r4 = *(u8 *)(r6 + 14)       ; ICMP type
//!         if w4 != ECHO_REQUEST goto pass
//!         goto redirect
//! ipv4_tcp:
//!         r4 = *(u16 *)(r6 + 16)      ; TCP destination port
//!         if w4 != PORT goto pass     ; with an extra port: if w4 == PORT goto redirect
//!         goto redirect               ;                     if w4 != EXTRA goto pass
//! ipv6:   r5 = r2
//!         r5 += 58
//!         if r5 > r3 goto pass        ; Ethernet + IPv6 + 4 bytes (ICMPv6 type, TCP ports)
//!         r5 = *(u8 *)(r2 + 14)       ; version, traffic class
//!         r5 &= 0xf0
//!         if w5 != 0x60 goto pass     ; version 6
//!         r4 = *(u8 *)(r2 + 20)       ; next header
//!         if w4 == IPPROTO_TCP goto ipv6_tcp
//!         if w4 != IPPROTO_ICMPV6 goto pass
//!         r4 = *(u8 *)(r2 + 54)       ; ICMPv6 type
//!         if w4 == ECHO_REQUEST goto ipv6_to_us
//!         if w4 == NEIGHBOR_ADVERT goto ipv6_to_us
//!         if w4 != NEIGHBOR_SOLICIT goto pass
//!         r5 = r2
//!         r5 += 78
//!         if r5 > r3 goto pass        ; through the solicitation's target address
//!         r4 = *(u32 *)(r2 + 62)      ; target address, four words
//!         if w4 != IP6[0] goto pass
//!         ... IP6[1], IP6[2], IP6[3] at 66, 70, 74
//!         goto redirect
//! ipv6_tcp:
//!         r4 = *(u16 *)(r2 + 56)      ; TCP destination port
//!         if w4 != PORT goto pass     ; with an extra port: if w4 == PORT goto ipv6_to_us
//!                                     ;                     if w4 != EXTRA goto pass
//! ipv6_to_us:
//!         r4 = *(u32 *)(r2 + 38)      ; destination address, four words
//!         if w4 != IP6[0] goto pass
//!         ... IP6[1], IP6[2], IP6[3] at 42, 46, 50
//!         goto redirect
//! redirect:
//!         r2 = r9
//!         r1 = map_fd ll              ; BPF_LD_IMM64 with BPF_PSEUDO_MAP_FD: the XSKMAP
//!         r3 = XDP_PASS               ; flags: the action when the map slot is empty
//!         call bpf_redirect_map       ; helper 51
//!         exit                        ; r0 = XDP_REDIRECT, or XDP_PASS
//! pass:   r0 = XDP_PASS
//!         exit
//! ```
//!
//! [`steering_program`] builds it as a dispatch on the EtherType followed by one section per
//! case, each ending in a jump to `redirect` or `pass`; a family without an address has
//! neither its dispatch entries nor its sections, so its frames all pass.
//!
//! On a link whose MTU needs multi-buffer frames the program is loaded with
//! `BPF_F_XDP_HAS_FRAGS` ([`Frags::Yes`]): it reads only the first buffer (`data` to
//! `data_end`), which holds every header it checks; a frame whose first buffer is shorter
//! than those headers passes to the kernel, like a truncated one.
//!
//! Since Linux 5.3 the low bits of `bpf_redirect_map`'s flags are the action to return when
//! the key has no entry, so a queue without a bound socket (and a program left behind by a
//! killed run, whose sockets are gone) passes frames to the kernel stack instead of
//! dropping them. `BPF_JMP32` needs Linux 5.1.
//!
//! The helper is not GPL-only; the program is loaded with the license string
//! `"Dual MIT/GPL"`, which the kernel counts as GPL-compatible, so a future helper change
//! would not refuse it.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::asm::{Asm, Cond, Label, R0, R1, R2, R3, R4, R5, R6, R9, Size, wire_u16, wire_u32};
use crate::sys;

pub use super::asm::Insn;

/// The name the program is loaded under; a program of this name on an interface was left
/// by memspin (see [`super::XdpProgram::attach`]).
pub const PROG_NAME: &str = "memspin_xsk";

/// The name a client's program is loaded under (`memspin-loadgen --net xdp`): another name
/// than the server's, so neither replaces the other's program, which may be in use.
pub const CLIENT_PROG_NAME: &str = "memspin_xskc";

/// License string given to the kernel (GPL-compatible, see the module docs).
pub const LICENSE: &core::ffi::CStr = c"Dual MIT/GPL";

// bpf(2) commands (include/uapi/linux/bpf.h, enum bpf_cmd).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_TEST_RUN: libc::c_int = 10;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;

/// `BPF_MAP_TYPE_XSKMAP`.
const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_FUNC_redirect_map`.
const FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`.
pub const XDP_PASS: i32 = 2;
/// `XDP_REDIRECT`.
pub const XDP_REDIRECT: i32 = 4;

/// Offsets in `struct xdp_md`.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// Frame layout (untagged Ethernet).
const ETH_HLEN: i32 = 14;
const ETH_TYPE: i16 = 12;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_ARP: u16 = 0x0806;
/// ARP for IPv4 over Ethernet: 28 bytes after the Ethernet header.
const ARP_LEN: i32 = 28;
const ARP_HTYPE_PTYPE: i16 = 14;
const ARP_HLEN_PLEN: i16 = 18;
const ARP_TPA: i16 = 38;
/// The fixed IPv4 header.
const IPV4_MIN_LEN: i32 = 20;
const IPV4_VERSION_IHL: i16 = 14;
const IPV4_FRAG: i16 = 20;
const IPV4_PROTOCOL: i16 = 23;
const IPV4_DST: i16 = 30;
/// The fragment offset's 13 bits of the flags/offset field.
const IPV4_FRAG_OFFSET: u16 = 0x1fff;
const IPPROTO_TCP: u32 = 6;
const IPPROTO_ICMP: u32 = 1;
/// ICMP echo request type.
const ICMP_ECHO_REQUEST: u32 = 8;
/// The TCP destination port, from the start of the TCP header.
const TCP_DST_PORT: i16 = 2;
const ETH_P_IPV6: u16 = 0x86dd;
/// The IPv6 header, without extension headers.
const IPV6_LEN: i32 = 40;
const IPV6_VERSION: i16 = 14;
const IPV6_NEXT_HEADER: i16 = 20;
const IPV6_DST: i16 = 38;
/// The first byte after the IPv6 header: ICMPv6 type, or the TCP header.
const IPV6_PAYLOAD: i16 = 54;
const IPPROTO_ICMPV6: u32 = 58;
const ICMPV6_ECHO_REQUEST: u32 = 128;
const ICMPV6_NEIGHBOR_SOLICIT: u32 = 135;
const ICMPV6_NEIGHBOR_ADVERT: u32 = 136;
/// A neighbour solicitation's target address, from the start of the ICMPv6 message.
const NDP_TARGET: i16 = 8;

/// What the program steers to the AF_XDP sockets; every other frame goes to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// The server's IPv4 address (`--ip`), if it serves IPv4: TCP and echo requests to it,
    /// ARP for it.
    pub ipv4: Option<Ipv4Addr>,
    /// The server's IPv6 address (`--ip`), if it serves IPv6: TCP, echo requests and
    /// neighbour advertisements to it, neighbour solicitations for it.
    pub ipv6: Option<Ipv6Addr>,
    /// The server's TCP port (`-p`).
    pub tcp_port: u16,
    /// A second TCP port of the server (`--resp-port`), if it has one.
    pub extra_tcp_port: Option<u16>,
}

/// What a client's program steers to its sockets (`memspin-loadgen --net xdp`): every TCP
/// segment to its address, whatever the port (the address is the client's alone: the kernel
/// keeps addresses of its own on the link), echo requests to it, ARP and neighbour discovery
/// for it; every other frame goes to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSteer {
    /// The client's IPv4 address, if it has one.
    pub ipv4: Option<Ipv4Addr>,
    /// The client's IPv6 address, if it has one.
    pub ipv6: Option<Ipv6Addr>,
}

/// What a program steers: a server's addresses and ports, or a client's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// memspin's own program ([`steering_program`]).
    Server(Steer),
    /// A client's ([`client_program`]).
    Client(ClientSteer),
}

/// The rules one program is built from: addresses, and the TCP ports taken (`None`: all).
#[derive(Debug, Clone, Copy)]
struct Rules {
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
    ports: Option<(u16, Option<u16>)>,
}

impl Steering {
    fn rules(&self) -> Rules {
        match *self {
            Steering::Server(s) => Rules {
                ipv4: s.ipv4,
                ipv6: s.ipv6,
                ports: Some((s.tcp_port, s.extra_tcp_port)),
            },
            Steering::Client(c) => Rules {
                ipv4: c.ipv4,
                ipv6: c.ipv6,
                ports: None,
            },
        }
    }

    /// The name its program is loaded under: [`PROG_NAME`] or [`CLIENT_PROG_NAME`].
    pub fn prog_name(&self) -> &'static str {
        match self {
            Steering::Server(_) => PROG_NAME,
            Steering::Client(_) => CLIENT_PROG_NAME,
        }
    }

    /// The program for the XSKMAP `map_fd`.
    pub fn program(&self, map_fd: RawFd) -> Vec<Insn> {
        build(map_fd, &self.rules())
    }
}

/// Where each section of the program ends.
#[derive(Debug, Clone, Copy)]
struct Exits {
    /// Hand the frame to the queue's socket.
    redirect: Label,
    /// Give the frame to the kernel.
    pass: Label,
}

/// The steering program for the XSKMAP `map_fd` (see the module docs for the listing).
pub fn steering_program(map_fd: RawFd, steer: &Steer) -> Vec<Insn> {
    Steering::Server(*steer).program(map_fd)
}

/// A client's steering program for the XSKMAP `map_fd`: the listing in the module docs
/// without the port comparisons, so TCP to the address goes to the socket on any port.
pub fn client_program(map_fd: RawFd, steer: &ClientSteer) -> Vec<Insn> {
    Steering::Client(*steer).program(map_fd)
}

fn build(map_fd: RawFd, steer: &Rules) -> Vec<Insn> {
    let mut asm = Asm::new();
    let exits = Exits {
        redirect: asm.label(),
        pass: asm.label(),
    };
    asm.load(Size::W, R9, R1, XDP_MD_RX_QUEUE_INDEX);
    asm.load(Size::W, R2, R1, XDP_MD_DATA);
    asm.load(Size::W, R3, R1, XDP_MD_DATA_END);
    need(&mut asm, ETH_HLEN, exits.pass);
    asm.load(Size::H, R5, R2, ETH_TYPE);

    // The dispatch: one entry per EtherType we take, then its section.
    let arp = asm.label();
    let ipv4 = asm.label();
    let ipv6 = asm.label();
    if steer.ipv4.is_some() {
        asm.jmp32_imm(Cond::Eq, R5, wire_u16(ETH_P_ARP), arp);
        asm.jmp32_imm(Cond::Eq, R5, wire_u16(ETH_P_IP), ipv4);
    }
    if steer.ipv6.is_some() {
        asm.jmp32_imm(Cond::Eq, R5, wire_u16(ETH_P_IPV6), ipv6);
    }
    asm.ja(exits.pass);

    if let Some(ip) = steer.ipv4 {
        asm.bind(arp);
        arp_for(&mut asm, ip, exits);
        asm.bind(ipv4);
        ipv4_to(&mut asm, ip, steer, exits);
    }
    if let Some(ip) = steer.ipv6 {
        asm.bind(ipv6);
        ipv6_to(&mut asm, ip, steer, exits);
    }

    asm.bind(exits.redirect);
    asm.mov(R2, R9);
    asm.load_map_fd(R1, map_fd);
    asm.mov_imm(R3, XDP_PASS);
    asm.call(FUNC_REDIRECT_MAP);
    asm.exit();
    asm.bind(exits.pass);
    asm.mov_imm(R0, XDP_PASS);
    asm.exit();
    // Every label a jump names is bound before `finish` (a family's labels are named only
    // by its own dispatch entries), and the program is a hundred-odd instructions: the
    // assembler cannot refuse it.
    asm.finish().expect("the steering program's jumps resolve")
}

/// `if data + len > data_end goto short` (r5 is scratch).
fn need(asm: &mut Asm, len: i32, short: Label) {
    asm.mov(R5, R2);
    asm.add_imm(R5, len);
    asm.jmp(Cond::Gt, R5, R3, short);
}

/// ARP for IPv4 over Ethernet whose target protocol address is `ip` → redirect.
fn arp_for(asm: &mut Asm, ip: Ipv4Addr, to: Exits) {
    need(asm, ETH_HLEN + ARP_LEN, to.pass);
    asm.load(Size::W, R5, R2, ARP_HTYPE_PTYPE);
    asm.jmp32_imm(Cond::Ne, R5, wire_u32([0, 1, 0x08, 0x00]), to.pass);
    asm.load(Size::H, R5, R2, ARP_HLEN_PLEN);
    asm.jmp32_imm(Cond::Ne, R5, wire_u16(0x0604), to.pass);
    asm.load(Size::W, R5, R2, ARP_TPA);
    asm.jmp32_imm(Cond::Ne, R5, wire_u32(ip.octets()), to.pass);
    asm.ja(to.redirect);
}

/// IPv4 to `ip`, any header length, not a later fragment: TCP to the steered port (or
/// extra port), or an ICMP echo request → redirect.
fn ipv4_to(asm: &mut Asm, ip: Ipv4Addr, steer: &Rules, to: Exits) {
    need(asm, ETH_HLEN + IPV4_MIN_LEN, to.pass);
    asm.load(Size::B, R5, R2, IPV4_VERSION_IHL);
    asm.mov(R4, R5);
    asm.and_imm(R4, 0xf0);
    asm.jmp32_imm(Cond::Ne, R4, 0x40, to.pass);
    asm.and_imm(R5, 0x0f);
    asm.jmp32_imm(Cond::Lt, R5, 5, to.pass);
    asm.load(Size::W, R4, R2, IPV4_DST);
    asm.jmp32_imm(Cond::Ne, R4, wire_u32(ip.octets()), to.pass);
    asm.load(Size::H, R4, R2, IPV4_FRAG);
    asm.jmp32_imm(Cond::Set, R4, wire_u16(IPV4_FRAG_OFFSET), to.pass);
    // r6 = data + header length: the transport header starts at r6 + 14. The verifier knows
    // the added length lies in 0..=60 (a 4-bit field times 4) and checks the loads below
    // against the bound that follows.
    asm.lsh_imm(R5, 2);
    asm.mov(R6, R2);
    asm.add(R6, R5);
    asm.mov(R4, R6);
    asm.add_imm(R4, ETH_HLEN + i32::from(TCP_DST_PORT) + 2);
    asm.jmp(Cond::Gt, R4, R3, to.pass);
    let tcp = asm.label();
    asm.load(Size::B, R4, R2, IPV4_PROTOCOL);
    asm.jmp32_imm(Cond::Eq, R4, IPPROTO_TCP, tcp);
    asm.jmp32_imm(Cond::Ne, R4, IPPROTO_ICMP, to.pass);
    asm.load(Size::B, R4, R6, ETH_HLEN as i16);
    asm.jmp32_imm(Cond::Ne, R4, ICMP_ECHO_REQUEST, to.pass);
    asm.ja(to.redirect);
    asm.bind(tcp);
    asm.load(Size::H, R4, R6, ETH_HLEN as i16 + TCP_DST_PORT);
    our_port(asm, steer, to.redirect, to.pass);
    asm.ja(to.redirect);
}

/// `r4` holds a TCP destination port: the steered port (or extra port) goes on to `ours`
/// (by a jump, or by falling through), any other to `other`; without ports (a client's
/// program) every port falls through.
fn our_port(asm: &mut Asm, steer: &Rules, ours: Label, other: Label) {
    match steer.ports {
        None => {}
        Some((port, Some(extra))) => {
            asm.jmp32_imm(Cond::Eq, R4, wire_u16(port), ours);
            asm.jmp32_imm(Cond::Ne, R4, wire_u16(extra), other);
        }
        Some((port, None)) => asm.jmp32_imm(Cond::Ne, R4, wire_u16(port), other),
    }
}

/// `if the 16 bytes at data + off != ip goto differ` (r4 is scratch; the caller has
/// checked the bytes are in the packet).
fn ipv6_equals(asm: &mut Asm, off: i16, ip: Ipv6Addr, differ: Label) {
    let octets = ip.octets();
    for (word, bytes) in octets.chunks_exact(4).enumerate() {
        asm.load(Size::W, R4, R2, off + 4 * word as i16);
        let bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
        asm.jmp32_imm(Cond::Ne, R4, wire_u32(bytes), differ);
    }
}

/// IPv6 without extension headers: TCP to `ip` and the steered port (or extra port), an
/// ICMPv6 echo request or neighbour advertisement to `ip`, or a neighbour solicitation for
/// `ip` → redirect.
fn ipv6_to(asm: &mut Asm, ip: Ipv6Addr, steer: &Rules, to: Exits) {
    let tcp = asm.label();
    let to_us = asm.label();
    need(asm, ETH_HLEN + IPV6_LEN + 4, to.pass);
    asm.load(Size::B, R5, R2, IPV6_VERSION);
    asm.and_imm(R5, 0xf0);
    asm.jmp32_imm(Cond::Ne, R5, 0x60, to.pass);
    asm.load(Size::B, R4, R2, IPV6_NEXT_HEADER);
    asm.jmp32_imm(Cond::Eq, R4, IPPROTO_TCP, tcp);
    asm.jmp32_imm(Cond::Ne, R4, IPPROTO_ICMPV6, to.pass);
    asm.load(Size::B, R4, R2, IPV6_PAYLOAD);
    asm.jmp32_imm(Cond::Eq, R4, ICMPV6_ECHO_REQUEST, to_us);
    asm.jmp32_imm(Cond::Eq, R4, ICMPV6_NEIGHBOR_ADVERT, to_us);
    asm.jmp32_imm(Cond::Ne, R4, ICMPV6_NEIGHBOR_SOLICIT, to.pass);
    need(asm, i32::from(IPV6_PAYLOAD + NDP_TARGET) + 16, to.pass);
    ipv6_equals(asm, IPV6_PAYLOAD + NDP_TARGET, ip, to.pass);
    asm.ja(to.redirect);
    asm.bind(tcp);
    asm.load(Size::H, R4, R2, IPV6_PAYLOAD + TCP_DST_PORT);
    our_port(asm, steer, to_us, to.pass);
    asm.bind(to_us);
    ipv6_equals(asm, IPV6_DST, ip, to.pass);
    asm.ja(to.redirect);
}

/// `union bpf_attr`, as the zero-padded bytes of the part a command uses. 8-aligned for
/// the `__aligned_u64` members.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }

    fn u32(mut self, at: usize, value: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&value.to_ne_bytes());
        self
    }

    fn u64(mut self, at: usize, value: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&value.to_ne_bytes());
        self
    }

    fn bytes(mut self, at: usize, value: &[u8]) -> Attr {
        self.0[at..at + value.len()].copy_from_slice(value);
        self
    }
}

/// Issues `bpf(cmd, attr, sizeof attr)`; returns the non-negative result or `errno`.
fn bpf(cmd: libc::c_int, attr: &mut Attr) -> Result<libc::c_long, i32> {
    // SAFETY: `attr` is a valid, exclusively borrowed, zero-padded bpf_attr of the size
    // passed; every pointer stored in it (insns, license, keys, values, info) refers to memory
    // the caller keeps alive across this call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            core::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if rc < 0 { Err(sys::errno()) } else { Ok(rc) }
}

fn owned_fd(fd: libc::c_long) -> Result<OwnedFd, i32> {
    let fd = RawFd::try_from(fd).map_err(|_| libc::EBADF)?;
    // SAFETY: the kernel just returned `fd` as a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates an XSKMAP (`u32` queue index → AF_XDP socket) with `entries` slots.
///
/// # Errors
/// `errno` (`EPERM` without `CAP_BPF`/`CAP_SYS_ADMIN`, `EINVAL` for 0 entries).
pub fn create_xskmap(entries: u32) -> Result<OwnedFd, i32> {
    let mut name = [0u8; 16];
    name[..7].copy_from_slice(b"xsks_mp");
    // struct { map_type, key_size, value_size, max_entries, map_flags, inner_map_fd,
    //          numa_node, map_name[16] }
    let mut attr = Attr::new()
        .u32(0, MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries)
        .bytes(28, &name);
    owned_fd(bpf(BPF_MAP_CREATE, &mut attr)?)
}

/// Sets `map[key] = value` (`BPF_ANY`); for an XSKMAP the value is a bound AF_XDP socket fd.
///
/// # Errors
/// `errno` (`E2BIG` for a key past the map's end, `EBUSY`/`EINVAL` for an unbound socket).
pub fn map_update(map: BorrowedFd<'_>, key: u32, value: u32) -> Result<(), i32> {
    let key = key.to_ne_bytes();
    let value = value.to_ne_bytes();
    // struct { map_fd, pad, key (u64 ptr), value (u64 ptr), flags (u64) }
    let mut attr = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64)
        .u64(24, 0);
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// `BPF_F_XDP_HAS_FRAGS`: the program handles multi-buffer frames (it reads only the first
/// buffer, `data` to `data_end`, which is all the steering program needs).
const PROG_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// Whether a loaded program is told it may see multi-buffer frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frags {
    /// Single-buffer frames only: a driver drops or refuses what does not fit one buffer.
    No,
    /// Loaded with `BPF_F_XDP_HAS_FRAGS`: frames larger than a page may arrive in pieces
    /// (jumbo MTUs; veth refuses a native program without it above about 3,500 bytes).
    Yes,
}

/// Loads `insns` as an XDP program named [`PROG_NAME`].
///
/// # Errors
/// `errno` (`EACCES`/`EINVAL` when the verifier refuses it, `EPERM` without privilege).
pub fn load_xdp_program(insns: &[Insn], frags: Frags) -> Result<OwnedFd, i32> {
    load_named(insns, PROG_NAME, frags)
}

/// Loads `insns` as an XDP program called `prog_name` (at most 15 bytes of `[A-Za-z0-9_.]`).
pub(crate) fn load_named(insns: &[Insn], prog_name: &str, frags: Frags) -> Result<OwnedFd, i32> {
    if prog_name.len() > 15 {
        return Err(libc::EINVAL);
    }
    let mut name = [0u8; 16];
    name[..prog_name.len()].copy_from_slice(prog_name.as_bytes());
    let count = u32::try_from(insns.len()).map_err(|_| libc::E2BIG)?;
    // struct { prog_type, insn_cnt, insns (u64), license (u64), log_level, log_size,
    //          log_buf (u64), kern_version, prog_flags, prog_name[16], ... }
    let flags = match frags {
        Frags::No => 0,
        Frags::Yes => PROG_F_XDP_HAS_FRAGS,
    };
    let mut attr = Attr::new()
        .u32(0, PROG_TYPE_XDP)
        .u32(4, count)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, LICENSE.as_ptr() as u64)
        .u32(44, flags)
        .bytes(48, &name);
    owned_fd(bpf(BPF_PROG_LOAD, &mut attr)?)
}

/// An fd for the loaded program with id `id`.
///
/// # Errors
/// `errno` (`ENOENT` if no such program exists any more).
pub fn prog_fd_by_id(id: u32) -> Result<OwnedFd, i32> {
    let mut attr = Attr::new().u32(0, id);
    owned_fd(bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)?)
}

/// What the kernel says about a loaded program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgInfo {
    /// Program type (`BPF_PROG_TYPE_*`; 6 is XDP).
    pub prog_type: u32,
    /// Program id.
    pub id: u32,
    /// Name given at load, NUL-padded.
    pub name: [u8; 16],
}

impl ProgInfo {
    /// The name up to its first NUL.
    pub fn name(&self) -> &[u8] {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(16);
        &self.name[..end]
    }

    /// True if this is memspin's redirect program.
    pub fn is_ours(&self) -> bool {
        self.is_xdp_named(PROG_NAME)
    }

    /// True if this is an XDP program loaded under `name`.
    pub fn is_xdp_named(&self, name: &str) -> bool {
        self.prog_type == PROG_TYPE_XDP && self.name() == name.as_bytes()
    }
}

/// Type, id and name of the program behind `fd`.
///
/// # Errors
/// `errno` of `BPF_OBJ_GET_INFO_BY_FD`.
pub fn prog_info(fd: BorrowedFd<'_>) -> Result<ProgInfo, i32> {
    // struct bpf_prog_info up to and including name[16] (ends at byte 80).
    let mut info = [0u64; 10];
    let mut attr = Attr::new()
        .u32(0, fd.as_raw_fd() as u32)
        .u32(4, core::mem::size_of_val(&info) as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let bytes: Vec<u8> = info.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut name = [0u8; 16];
    name.copy_from_slice(&bytes[64..80]);
    Ok(ProgInfo {
        prog_type: u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        id: u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        name,
    })
}

/// Runs the program behind `prog` once on a copy of `frame` (`BPF_PROG_TEST_RUN`, as if it
/// arrived on queue 0 of the namespace's loopback device) and returns its action
/// (`XDP_PASS`, `XDP_REDIRECT`, ...). Nothing is redirected or sent.
///
/// # Errors
/// `errno` (`EINVAL` for a frame shorter than an Ethernet header or longer than a page
/// allows, `EPERM` without privilege).
pub fn test_run(prog: BorrowedFd<'_>, frame: &[u8]) -> Result<u32, i32> {
    let len = u32::try_from(frame.len()).map_err(|_| libc::E2BIG)?;
    // struct { prog_fd, retval, data_size_in, data_size_out, data_in (u64), data_out (u64),
    //          repeat, duration, ... }
    let mut attr = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, len)
        .u64(16, frame.as_ptr() as u64)
        .u32(32, 1);
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(u32::from_ne_bytes([
        attr.0[4], attr.0[5], attr.0[6], attr.0[7],
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    const STEER: Steer = Steer {
        ipv4: Some(Ipv4Addr::new(10, 78, 0, 200)),
        ipv6: None,
        tcp_port: 11211,
        extra_tcp_port: None,
    };

    /// Where a jump at `at` lands.
    fn target(program: &[Insn], at: usize) -> usize {
        (at as isize + 1 + isize::from(program[at].off)) as usize
    }

    // The tail after the filter: the redirect libbpf's old xsk.c loaded (post-5.3 variant,
    // with the queue index from r9), map fd 7, then the pass exit.
    #[cfg(target_endian = "little")]
    #[test]
    fn the_redirect_and_pass_exits_are_byte_exact() {
        static TAIL: [[u8; 8]; 8] = [
            [0xbf, 0x92, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
            [0x18, 0x11, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00],
            [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
            [0xb7, 0x03, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00],
            [0x85, 0x00, 0x00, 0x00, 0x33, 0x00, 0x00, 0x00],
            [0x95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
            [0xb7, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00],
            [0x95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        ];
        let program = steering_program(7, &STEER);
        let tail = &program[program.len() - TAIL.len()..];
        for (i, (insn, want)) in tail.iter().zip(TAIL.iter()).enumerate() {
            assert_eq!(&insn.to_bytes(), want, "tail instruction {i}");
        }
        // The prologue: r9 = queue, r2 = data, r3 = data_end.
        assert_eq!(program[0].to_bytes(), [0x61, 0x19, 16, 0, 0, 0, 0, 0]);
        assert_eq!(program[1].to_bytes(), [0x61, 0x12, 0, 0, 0, 0, 0, 0]);
        assert_eq!(program[2].to_bytes(), [0x61, 0x13, 4, 0, 0, 0, 0, 0]);
    }

    // Every jump lands inside the program, on an instruction (never on the second slot of
    // the map load), and every path ends in `exit`: the last instruction is one, and the
    // only fall-through into the pass exit is from the redirect's `exit`.
    #[test]
    fn every_jump_lands_on_an_instruction() {
        // (steer, instructions, jumps) for the listing in the module docs: IPv4 only, IPv6
        // only, both.
        for (steer, len, jumps_in) in [(STEER, 56, 21), (STEER_V6, 53, 22), (DUAL, 93, 41)] {
            let program = steering_program(7, &steer);
            assert_eq!(program.len(), len, "{steer:?}");
            let map_load = program.iter().position(|i| i.code == 0x18).unwrap();
            let mut jumps = 0;
            for at in 0..program.len() {
                if program[at].is_jump() {
                    jumps += 1;
                    let to = target(&program, at);
                    assert!(to < program.len(), "jump {at} leaves the program");
                    assert_ne!(to, map_load + 1, "jump {at} into the map load");
                    assert!(
                        to > at,
                        "jump {at} goes backwards (the verifier refuses loops)"
                    );
                }
            }
            assert_eq!(jumps, jumps_in, "{steer:?}");
            assert_eq!(program.last().unwrap().code, 0x95);
        }
    }

    const STEER_V6: Steer = Steer {
        ipv4: None,
        ipv6: Some(Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 0xc8)),
        tcp_port: 11211,
        extra_tcp_port: None,
    };

    const DUAL: Steer = Steer {
        ipv4: STEER.ipv4,
        ipv6: STEER_V6.ipv6,
        tcp_port: 11211,
        extra_tcp_port: None,
    };

    /// The 32-bit immediates a program compares with, and how many of its jumps go to the
    /// redirect and to the pass exit.
    fn compared_and_exits(program: &[Insn]) -> (Vec<u32>, usize, usize) {
        let pass = program.len() - 2;
        let redirect = program.len() - 8;
        let imms = program
            .iter()
            .filter(|i| i.code & 0x07 == 0x06)
            .map(|i| i.imm as u32)
            .collect();
        let to = |exit| {
            (0..program.len())
                .filter(|&at| program[at].is_jump() && target(program, at) == exit)
                .count()
        };
        (imms, to(redirect), to(pass))
    }

    // The jumps that leave a section go to the two exits, and the constants compared are
    // the wire bytes of the addresses, the port and the EtherTypes.
    #[cfg(target_endian = "little")]
    #[test]
    fn sections_compare_the_wire_values_and_end_at_the_exits() {
        let (imms, to_redirect, to_pass) = compared_and_exits(&steering_program(7, &STEER));
        for want in [
            0x0608,      // ETH_P_ARP
            0x0008,      // ETH_P_IP
            0xc800_4e0a, // 10.78.0.200 (ARP target and IPv4 destination)
            0xcb2b,      // port 11211
            0x0040,      // version 4
            6,           // IPPROTO_TCP
            1,           // IPPROTO_ICMP
            8,           // echo request
            0xff1f,      // fragment offset bits
        ] {
            assert!(imms.contains(&want), "{want:#x} in {imms:x?}");
        }
        assert_eq!(imms.iter().filter(|&&i| i == 0xc800_4e0a).count(), 2);
        assert!(
            !imms.contains(&0xdd86),
            "no IPv6 dispatch without an IPv6 address"
        );
        assert_eq!(to_redirect, 3, "ARP, ICMP echo, TCP");
        assert_eq!(to_pass, 15, "every failed check");

        let (imms, to_redirect, to_pass) = compared_and_exits(&steering_program(7, &STEER_V6));
        // fd78::c8, four words in wire order.
        let words = [0x0000_78fd, 0, 0, 0xc800_0000];
        for want in [0xdd86, 0x60, 6, 58, 128, 135, 136, 0xcb2b] {
            assert!(imms.contains(&want), "{want:#x} in {imms:x?}");
        }
        for word in words {
            assert!(imms.contains(&word), "{word:#x} in {imms:x?}");
        }
        assert_eq!(
            imms.iter().filter(|&&i| i == 0xc800_0000).count(),
            2,
            "the last word of the address: solicitation target, destination"
        );
        assert!(
            !imms.contains(&0x0608) && !imms.contains(&0x0008),
            "no IPv4"
        );
        assert_eq!(to_redirect, 2, "solicitations; the rest to our address");
        assert_eq!(to_pass, 16, "every failed check");

        let (_, to_redirect, to_pass) = compared_and_exits(&steering_program(7, &DUAL));
        assert_eq!((to_redirect, to_pass), (5, 29), "both families' sections");
    }

    // With an extra port, a TCP frame to either port is redirected and every other port
    // still passes: one more comparison, one more jump to the redirect.
    #[cfg(target_endian = "little")]
    #[test]
    fn an_extra_port_is_steered_too() {
        for base in [STEER, DUAL] {
            let steer = Steer {
                extra_tcp_port: Some(6379),
                ..base
            };
            let program = steering_program(7, &steer);
            let plain = steering_program(7, &base);
            let sections = usize::from(base.ipv4.is_some()) + usize::from(base.ipv6.is_some());
            assert_eq!(program.len(), plain.len() + sections, "one per TCP section");
            let redirect = program.len() - 8;
            let pass = program.len() - 2;
            let port_checks: Vec<(u32, usize)> = (0..program.len())
                .filter(|&at| {
                    program[at].is_jump() && matches!(program[at].imm as u32, 0xcb2b | 0xeb18)
                })
                .map(|at| (program[at].imm as u32, target(&program, at)))
                .collect();
            // IPv4: 11211 to the redirect, not 6379 to the pass exit.
            assert_eq!(
                port_checks[..2],
                [(0xcb2b, redirect), (0xeb18, pass)],
                "11211: redirect; not 6379: pass"
            );
            if base.ipv6.is_some() {
                // IPv6: either port goes on to the destination check (the instruction after
                // the 6379 comparison), any other to the pass exit.
                let (port, to_us) = port_checks[2];
                assert_eq!(port, 0xcb2b);
                assert_eq!(port_checks[3].0, 0xeb18);
                assert_eq!(port_checks[3].1, pass);
                assert_eq!(program[to_us - 1].imm as u32, 0xeb18, "falls through to it");
            }
            let to_redirect = |program: &[Insn]| {
                let redirect = program.len() - 8;
                (0..program.len())
                    .filter(|&at| program[at].is_jump() && target(program, at) == redirect)
                    .count()
            };
            assert_eq!(to_redirect(&program), to_redirect(&plain) + 1);
            if privileged() {
                let map = create_xskmap(4).expect("XSKMAP");
                load_xdp_program(&steering_program(map.as_raw_fd(), &steer), Frags::No)
                    .expect("the verifier accepts it");
            }
        }
    }

    // A client's program is the server's without the port comparisons: one instruction less
    // per TCP section, the port never compared, TCP still reaching the redirect; the
    // verifier takes it.
    #[test]
    fn a_client_program_takes_every_port_of_its_address() {
        for base in [STEER, STEER_V6, DUAL] {
            let client = ClientSteer {
                ipv4: base.ipv4,
                ipv6: base.ipv6,
            };
            let program = client_program(7, &client);
            let server = steering_program(7, &base);
            let sections = usize::from(base.ipv4.is_some()) + usize::from(base.ipv6.is_some());
            assert_eq!(program.len() + sections, server.len(), "{client:?}");
            assert!(
                !program
                    .iter()
                    .any(|i| i.is_jump() && i.imm as u32 == wire_u16(11211)),
                "no port compared"
            );
            let (_, to_redirect, _) = compared_and_exits(&program);
            let (_, server_redirect, _) = compared_and_exits(&server);
            assert_eq!(to_redirect, server_redirect, "{client:?}");
            if privileged() {
                let map = create_xskmap(4).expect("XSKMAP");
                load_xdp_program(&client_program(map.as_raw_fd(), &client), Frags::No)
                    .expect("the verifier accepts it");
            }
        }
    }

    #[test]
    fn prog_info_names() {
        let mut name = [0u8; 16];
        name[..PROG_NAME.len()].copy_from_slice(PROG_NAME.as_bytes());
        let info = ProgInfo {
            prog_type: PROG_TYPE_XDP,
            id: 3,
            name,
        };
        assert!(info.is_ours());
        assert!(
            !info.is_xdp_named(CLIENT_PROG_NAME),
            "a server's is not a client's"
        );
        assert!(
            !ProgInfo {
                prog_type: 1,
                ..info
            }
            .is_ours()
        );
        assert!(
            !ProgInfo {
                name: *b"xdp_dispatcher\0\0",
                ..info
            }
            .is_ours()
        );
    }

    fn privileged() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    // Loads the program for real: the verifier accepts it and the kernel reports our name.
    // (What it steers is tested with a bound socket in `xdp::tests`: with an empty map every
    // frame passes, which this checks for frames of every length.)
    #[test]
    fn the_verifier_accepts_the_program() {
        if !privileged() {
            eprintln!("skipped: needs root (CI runs as root)");
            return;
        }
        let map = create_xskmap(4).expect("XSKMAP");
        let prog =
            load_xdp_program(&steering_program(map.as_raw_fd(), &STEER), Frags::No).expect("load");
        let dual = load_xdp_program(&steering_program(map.as_raw_fd(), &DUAL), Frags::No)
            .expect("load the dual-stack program");
        let v6_only = load_xdp_program(&steering_program(map.as_raw_fd(), &STEER_V6), Frags::No)
            .expect("load the IPv6 program");
        let frame = [0u8; 80];
        for len in 14..=frame.len() {
            for other in [&dual, &v6_only] {
                assert_eq!(test_run(other.as_fd(), &frame[..len]), Ok(XDP_PASS as u32));
            }
            assert_eq!(
                test_run(prog.as_fd(), &frame[..len]),
                Ok(XDP_PASS as u32),
                "{len} bytes"
            );
        }
        assert_eq!(test_run(prog.as_fd(), &frame[..13]), Err(libc::EINVAL));
        // Loaded for multi-buffer frames, it runs on a jumbo frame (test runs of such a
        // program take frames larger than a page, as pieces).
        let frags = load_xdp_program(&steering_program(map.as_raw_fd(), &STEER), Frags::Yes)
            .expect("load with BPF_F_XDP_HAS_FRAGS");
        assert_eq!(test_run(frags.as_fd(), &[0u8; 9014]), Ok(XDP_PASS as u32));
        assert!(prog_info(frags.as_fd()).unwrap().is_ours());
        let info = prog_info(prog.as_fd()).expect("info");
        assert!(info.is_ours(), "{info:?}");
        let again = prog_fd_by_id(info.id).expect("fd by id");
        assert_eq!(prog_info(again.as_fd()).unwrap().id, info.id);
        // An XSKMAP slot only takes a bound AF_XDP socket; a plain fd is refused.
        assert!(map_update(map.as_fd(), 0, map.as_raw_fd() as u32).is_err());
        assert_eq!(map_update(map.as_fd(), 4, 0), Err(libc::E2BIG));
    }
}
