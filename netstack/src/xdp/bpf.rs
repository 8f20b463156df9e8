//! The `bpf(2)` calls the AF_XDP path needs, and the redirect program, hand-assembled.
//!
//! No clang, libbpf or ELF loader: the program is five instructions (six 8-byte slots,
//! because loading a 64-bit map reference takes two), written out here byte for byte:
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index (struct xdp_md)
//! r1 = map_fd ll              ; BPF_LD_IMM64 with BPF_PSEUDO_MAP_FD: the XSKMAP
//! r3 = XDP_PASS               ; flags: the action when the map slot is empty
//! call bpf_redirect_map       ; helper 51
//! exit                        ; r0 = XDP_REDIRECT, or XDP_PASS
//! ```
//!
//! Since Linux 5.3 the low bits of `bpf_redirect_map`'s flags are the action to return when
//! the key has no entry, so a queue without a bound socket (and a program left behind by a
//! killed run, whose sockets are gone) passes frames to the kernel stack instead of
//! dropping them.
//!
//! The helper is not GPL-only; the program is loaded with the license string
//! `"Dual MIT/GPL"`, which the kernel counts as GPL-compatible, so a future helper change
//! would not refuse it.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::sys;

/// The name the program is loaded under; a program of this name on an interface was left
/// by memspin (see [`super::XdpProgram::attach`]).
pub const PROG_NAME: &str = "memspin_xsk";

/// License string given to the kernel (GPL-compatible, see the module docs).
pub const LICENSE: &core::ffi::CStr = c"Dual MIT/GPL";

// bpf(2) commands (include/uapi/linux/bpf.h, enum bpf_cmd).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
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
/// `BPF_PSEUDO_MAP_FD`: the src register of an `LD_IMM64` whose immediate is a map fd.
const PSEUDO_MAP_FD: u8 = 1;

/// One eBPF instruction (`struct bpf_insn`): opcode, dst (low nibble) and src (high nibble)
/// registers, offset, immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Opcode (class | size/op | mode/source).
    pub code: u8,
    /// `dst | src << 4`.
    pub regs: u8,
    /// Signed offset.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

const _: () = assert!(core::mem::size_of::<Insn>() == 8);

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads (little-endian on every Linux target we build for).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

// Opcode parts (include/uapi/linux/bpf_common.h, bpf.h).
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_ALU64: u8 = 0x07;
const BPF_JMP: u8 = 0x05;
const BPF_W: u8 = 0x00;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_MOV: u8 = 0xb0;
const BPF_K: u8 = 0x00;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;

/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// The redirect program for the XSKMAP `map_fd` (see the module docs).
pub fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    [
        Insn::new(BPF_LDX | BPF_W | BPF_MEM, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        Insn::new(BPF_LD | BPF_DW | BPF_IMM, 1, PSEUDO_MAP_FD, 0, map_fd),
        Insn::new(0, 0, 0, 0, 0),
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, XDP_PASS),
        Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, FUNC_REDIRECT_MAP),
        Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    ]
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

/// Loads `insns` as an XDP program named [`PROG_NAME`].
///
/// # Errors
/// `errno` (`EACCES`/`EINVAL` when the verifier refuses it, `EPERM` without privilege).
pub fn load_xdp_program(insns: &[Insn]) -> Result<OwnedFd, i32> {
    load_named(insns, PROG_NAME)
}

/// Loads `insns` as an XDP program called `prog_name` (at most 15 bytes of `[A-Za-z0-9_.]`).
pub(crate) fn load_named(insns: &[Insn], prog_name: &str) -> Result<OwnedFd, i32> {
    if prog_name.len() > 15 {
        return Err(libc::EINVAL);
    }
    let mut name = [0u8; 16];
    name[..prog_name.len()].copy_from_slice(prog_name.as_bytes());
    let count = u32::try_from(insns.len()).map_err(|_| libc::E2BIG)?;
    // struct { prog_type, insn_cnt, insns (u64), license (u64), log_level, log_size,
    //          log_buf (u64), kern_version, prog_flags, prog_name[16], ... }
    let mut attr = Attr::new()
        .u32(0, PROG_TYPE_XDP)
        .u32(4, count)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, LICENSE.as_ptr() as u64)
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
        self.prog_type == PROG_TYPE_XDP && self.name() == PROG_NAME.as_bytes()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    // The bytes libbpf's old xsk.c loaded (post-5.3 variant), with map fd 7.
    static EXPECTED: [[u8; 8]; 6] = [
        [0x61, 0x12, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00],
        [0x18, 0x11, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00],
        [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        [0xb7, 0x03, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00],
        [0x85, 0x00, 0x00, 0x00, 0x33, 0x00, 0x00, 0x00],
        [0x95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
    ];

    #[test]
    fn program_bytes() {
        let program = redirect_program(7);
        for (i, (insn, want)) in program.iter().zip(EXPECTED.iter()).enumerate() {
            assert_eq!(&insn.to_bytes(), want, "instruction {i}");
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
    #[test]
    fn the_verifier_accepts_the_program() {
        if !privileged() {
            eprintln!("skipped: needs root (CI runs as root)");
            return;
        }
        let map = create_xskmap(4).expect("XSKMAP");
        let prog = load_xdp_program(&redirect_program(map.as_raw_fd())).expect("load");
        let info = prog_info(prog.as_fd()).expect("info");
        assert!(info.is_ours(), "{info:?}");
        let again = prog_fd_by_id(info.id).expect("fd by id");
        assert_eq!(prog_info(again.as_fd()).unwrap().id, info.id);
        // An XSKMAP slot only takes a bound AF_XDP socket; a plain fd is refused.
        assert!(map_update(map.as_fd(), 0, map.as_raw_fd() as u32).is_err());
        assert_eq!(map_update(map.as_fd(), 4, 0), Err(libc::E2BIG));
    }
}
