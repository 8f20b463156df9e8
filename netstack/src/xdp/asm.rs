//! A small eBPF assembler: the instruction encoding (`struct bpf_insn`) and forward or
//! backward jumps to named labels, resolved when the program is finished.
//!
//! ```text
//! let mut asm = Asm::new();
//! let pass = asm.label();
//! asm.jmp32_imm(Cond::Ne, R5, 0x0608, pass);   // offset left open
//! ...
//! asm.bind(pass);                                // pass = the next instruction's index
//! asm.finish()?                                  // every jump's offset = target − (index + 1)
//! ```
//!
//! Only the instructions the XDP program needs are here: loads from memory, 64-bit moves,
//! adds, masks and shifts, the map-fd load (two slots), 32-bit and 64-bit conditional
//! jumps, `ja`, helper calls and `exit`. Encodings follow `include/uapi/linux/bpf.h` and
//! `bpf_common.h`; the kernel's verifier is the final judge of a program, this module only
//! guarantees that every jump lands on an instruction of the program.

use core::fmt;

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
    pub(crate) const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (dst & 0x0f) | (src << 4),
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads (native byte order, as `struct bpf_insn` in memory).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// True for a jump whose `off` is a target (conditional jumps and `ja`, not call/exit).
    pub fn is_jump(self) -> bool {
        let class = self.code & 0x07;
        let op = self.code & 0xf0;
        (class == class::JMP || class == class::JMP32) && op != op::CALL && op != op::EXIT
    }
}

/// A register, `r0` to `r10` (those the program uses are named below).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(u8);

/// Return value, and a helper's result.
pub const R0: Reg = Reg(0);
/// First argument; the program's context at entry.
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Callee-saved.
pub const R6: Reg = Reg(6);
/// Callee-saved.
pub const R9: Reg = Reg(9);

/// Width of a memory load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
}

impl Size {
    fn bits(self) -> u8 {
        match self {
            Size::W => 0x00,
            Size::H => 0x08,
            Size::B => 0x10,
        }
    }
}

/// A jump condition (unsigned comparisons; `Set` is `dst & src != 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// Unsigned `>`.
    Gt,
    /// Unsigned `<`.
    Lt,
    /// `dst & operand != 0`.
    Set,
}

impl Cond {
    fn bits(self) -> u8 {
        match self {
            Cond::Eq => 0x10,
            Cond::Gt => 0x20,
            Cond::Set => 0x40,
            Cond::Ne => 0x50,
            Cond::Lt => 0xa0,
        }
    }
}

/// Instruction classes (the low three bits of the opcode).
pub(crate) mod class {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;
}

/// Operation bits of ALU and JMP opcodes, and the mode/source bits.
pub(crate) mod op {
    pub const ADD: u8 = 0x00;
    pub const LSH: u8 = 0x60;
    pub const AND: u8 = 0x50;
    pub const MOV: u8 = 0xb0;
    pub const JA: u8 = 0x00;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    /// Operand is the immediate.
    pub const K: u8 = 0x00;
    /// Operand is the src register.
    pub const X: u8 = 0x08;
    /// `BPF_MEM` mode of loads.
    pub const MEM: u8 = 0x60;
    /// `BPF_IMM` mode with `BPF_DW` size: the two-slot 64-bit immediate load.
    pub const IMM_DW: u8 = 0x18;
}

/// `BPF_PSEUDO_MAP_FD`: the src register of a 64-bit immediate load whose immediate is a
/// map fd, which the kernel replaces with the map's address.
const PSEUDO_MAP_FD: u8 = 1;

/// A jump target; bound to the next instruction's index by [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// Why [`Asm::finish`] refused a program (both are bugs in the code that built it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsmError {
    /// A jump names a label that was never bound.
    Unbound {
        /// Index of the jump.
        at: usize,
    },
    /// A label bound at the program's end: a jump there would leave the program.
    PastEnd {
        /// Index of the jump.
        at: usize,
    },
    /// The offset does not fit the instruction's 16 bits.
    TooFar {
        /// Index of the jump.
        at: usize,
    },
}

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AsmError::Unbound { at } => write!(f, "jump {at} to an unbound label"),
            AsmError::PastEnd { at } => write!(f, "jump {at} past the program's end"),
            AsmError::TooFar { at } => write!(f, "jump {at} further than 32767 instructions"),
        }
    }
}

impl std::error::Error for AsmError {}

/// A program being assembled: instructions, labels, and the jumps still to resolve.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    /// Per label: the index it was bound to.
    targets: Vec<Option<usize>>,
    /// (jump index, label) of every jump emitted.
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.targets.push(None);
        Label(self.targets.len() - 1)
    }

    /// Binds `label` to the next instruction emitted.
    ///
    /// # Panics
    /// If `label` is already bound (a bug in the program's builder).
    pub fn bind(&mut self, label: Label) {
        let slot = &mut self.targets[label.0];
        assert!(slot.is_none(), "label {} bound twice", label.0);
        *slot = Some(self.insns.len());
    }

    fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    fn jump(&mut self, insn: Insn, target: Label) {
        self.jumps.push((self.insns.len(), target));
        self.push(insn);
    }

    /// `dst = *(size *)(src + off)`.
    pub fn load(&mut self, size: Size, dst: Reg, src: Reg, off: i16) {
        self.push(Insn::new(
            class::LDX | size.bits() | op::MEM,
            dst.0,
            src.0,
            off,
            0,
        ));
    }

    /// `dst = src` (64 bits).
    pub fn mov(&mut self, dst: Reg, src: Reg) {
        self.push(Insn::new(
            class::ALU64 | op::MOV | op::X,
            dst.0,
            src.0,
            0,
            0,
        ));
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) {
        self.push(Insn::new(class::ALU64 | op::MOV | op::K, dst.0, 0, 0, imm));
    }

    /// `dst += imm` (64 bits).
    pub fn add_imm(&mut self, dst: Reg, imm: i32) {
        self.push(Insn::new(class::ALU64 | op::ADD | op::K, dst.0, 0, 0, imm));
    }

    /// `dst += src` (64 bits).
    pub fn add(&mut self, dst: Reg, src: Reg) {
        self.push(Insn::new(
            class::ALU64 | op::ADD | op::X,
            dst.0,
            src.0,
            0,
            0,
        ));
    }

    /// `dst &= imm` (64 bits).
    pub fn and_imm(&mut self, dst: Reg, imm: i32) {
        self.push(Insn::new(class::ALU64 | op::AND | op::K, dst.0, 0, 0, imm));
    }

    /// `dst <<= imm` (64 bits).
    pub fn lsh_imm(&mut self, dst: Reg, imm: i32) {
        self.push(Insn::new(class::ALU64 | op::LSH | op::K, dst.0, 0, 0, imm));
    }

    /// `dst = map` for the map behind `fd` (two slots: `BPF_LD | BPF_DW | BPF_IMM` with
    /// `BPF_PSEUDO_MAP_FD`, then the upper 32 bits, zero).
    pub fn load_map_fd(&mut self, dst: Reg, fd: i32) {
        self.push(Insn::new(
            class::LD | op::IMM_DW,
            dst.0,
            PSEUDO_MAP_FD,
            0,
            fd,
        ));
        self.push(Insn::new(0, 0, 0, 0, 0));
    }

    /// `if (u32)dst <cond> (u32)imm goto target` (`BPF_JMP32`: the lower 32 bits, so a
    /// constant with its top bit set is not sign-extended against a zero-extended load).
    pub fn jmp32_imm(&mut self, cond: Cond, dst: Reg, imm: u32, target: Label) {
        let insn = Insn::new(class::JMP32 | cond.bits() | op::K, dst.0, 0, 0, imm as i32);
        self.jump(insn, target);
    }

    /// `if dst <cond> src goto target` (64 bits; how packet pointers are compared).
    pub fn jmp(&mut self, cond: Cond, dst: Reg, src: Reg, target: Label) {
        let insn = Insn::new(class::JMP | cond.bits() | op::X, dst.0, src.0, 0, 0);
        self.jump(insn, target);
    }

    /// `goto target`.
    pub fn ja(&mut self, target: Label) {
        self.jump(Insn::new(class::JMP | op::JA, 0, 0, 0, 0), target);
    }

    /// `call helper` (arguments in r1–r5, result in r0).
    pub fn call(&mut self, helper: i32) {
        self.push(Insn::new(class::JMP | op::CALL, 0, 0, 0, helper));
    }

    /// `exit` (returns r0).
    pub fn exit(&mut self) {
        self.push(Insn::new(class::JMP | op::EXIT, 0, 0, 0, 0));
    }

    /// Resolves every jump's offset (target − (index + 1)) and returns the program.
    ///
    /// # Errors
    /// An [`AsmError`] for a jump to an unbound label, to the program's end, or further
    /// than an `i16` reaches.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        for &(at, label) in &self.jumps {
            let target = self.targets[label.0].ok_or(AsmError::Unbound { at })?;
            if target >= self.insns.len() {
                return Err(AsmError::PastEnd { at });
            }
            let off = target as isize - (at as isize + 1);
            self.insns[at].off = i16::try_from(off).map_err(|_| AsmError::TooFar { at })?;
        }
        Ok(self.insns)
    }
}

/// The value a native-order load of the 2 bytes `value` has on the wire (big-endian) yields:
/// what a loaded EtherType or port is compared with.
pub fn wire_u16(value: u16) -> u32 {
    u32::from(u16::from_ne_bytes(value.to_be_bytes()))
}

/// The value a native-order 4-byte load of `bytes` (in wire order) yields.
pub fn wire_u32(bytes: [u8; 4]) -> u32 {
    u32::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn bytes(insn: Insn) -> [u8; 8] {
        insn.to_bytes()
    }

    // Each encoding checked against the bytes clang emits for the same instruction
    // (llvm-objdump -d of a BPF object), little-endian as on x86-64 and arm64.
    #[cfg(target_endian = "little")]
    #[test]
    fn encodings_match_the_kernel_abi() {
        let one = |f: &dyn Fn(&mut Asm)| {
            let mut asm = Asm::new();
            f(&mut asm);
            asm.finish().unwrap()
        };
        // r2 = *(u32 *)(r1 + 0)
        assert_eq!(
            bytes(one(&|a| a.load(Size::W, R2, R1, 0))[0]),
            [0x61, 0x12, 0, 0, 0, 0, 0, 0]
        );
        // r5 = *(u16 *)(r2 + 12)
        assert_eq!(
            bytes(one(&|a| a.load(Size::H, R5, R2, 12))[0]),
            [0x69, 0x25, 12, 0, 0, 0, 0, 0]
        );
        // r4 = *(u8 *)(r2 + 23)
        assert_eq!(
            bytes(one(&|a| a.load(Size::B, R4, R2, 23))[0]),
            [0x71, 0x24, 23, 0, 0, 0, 0, 0]
        );
        // r5 = r2
        assert_eq!(
            bytes(one(&|a| a.mov(R5, R2))[0]),
            [0xbf, 0x25, 0, 0, 0, 0, 0, 0]
        );
        // r0 = 2
        assert_eq!(
            bytes(one(&|a| a.mov_imm(R0, 2))[0]),
            [0xb7, 0x00, 0, 0, 2, 0, 0, 0]
        );
        // r5 += 14
        assert_eq!(
            bytes(one(&|a| a.add_imm(R5, 14))[0]),
            [0x07, 0x05, 0, 0, 14, 0, 0, 0]
        );
        // r6 += r2
        assert_eq!(
            bytes(one(&|a| a.add(R6, R2))[0]),
            [0x0f, 0x26, 0, 0, 0, 0, 0, 0]
        );
        // r5 &= 15
        assert_eq!(
            bytes(one(&|a| a.and_imm(R5, 15))[0]),
            [0x57, 0x05, 0, 0, 15, 0, 0, 0]
        );
        // r5 <<= 2
        assert_eq!(
            bytes(one(&|a| a.lsh_imm(R5, 2))[0]),
            [0x67, 0x05, 0, 0, 2, 0, 0, 0]
        );
        // r1 = map fd 7 ll
        let map = one(&|a| a.load_map_fd(R1, 7));
        assert_eq!(bytes(map[0]), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes(map[1]), [0; 8]);
        // call 51; exit
        assert_eq!(bytes(one(&|a| a.call(51))[0]), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes(one(&|a| a.exit())[0]), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn jumps_encode_condition_width_and_offset() {
        let mut asm = Asm::new();
        let end = asm.label();
        asm.jmp32_imm(Cond::Ne, R5, 0xc800_4e0a, end); // w5 != 0xc8004e0a
        asm.jmp32_imm(Cond::Eq, R5, 8, end);
        asm.jmp32_imm(Cond::Lt, R5, 5, end);
        asm.jmp32_imm(Cond::Set, R4, 0xff1f, end);
        asm.jmp(Cond::Gt, R5, R3, end); // if r5 > r3
        asm.ja(end);
        asm.bind(end);
        asm.exit();
        let p = asm.finish().unwrap();
        assert_eq!(bytes(p[0]), [0x56, 0x05, 5, 0, 0x0a, 0x4e, 0x00, 0xc8]);
        assert_eq!(bytes(p[1]), [0x16, 0x05, 4, 0, 8, 0, 0, 0]);
        assert_eq!(bytes(p[2]), [0xa6, 0x05, 3, 0, 5, 0, 0, 0]);
        assert_eq!(bytes(p[3]), [0x46, 0x04, 2, 0, 0x1f, 0xff, 0, 0]);
        assert_eq!(bytes(p[4]), [0x2d, 0x35, 1, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(p[5]), [0x05, 0x00, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn offsets_count_from_the_next_instruction_both_ways() {
        let mut asm = Asm::new();
        let top = asm.label();
        let bottom = asm.label();
        asm.bind(top);
        asm.mov_imm(R0, 0); // 0
        asm.ja(bottom); // 1 → 5: off 3
        asm.load_map_fd(R1, 3); // 2, 3
        asm.ja(top); // 4 → 0: off -5
        asm.bind(bottom);
        asm.exit(); // 5
        let p = asm.finish().unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p[1].off, 3);
        assert_eq!(p[4].off, -5);
        for (at, insn) in p.iter().enumerate() {
            if insn.is_jump() {
                let target = at as isize + 1 + isize::from(insn.off);
                assert!((0..p.len() as isize).contains(&target), "jump {at}");
            }
        }
        assert!(!p[5].is_jump(), "exit is not a jump");
    }

    #[test]
    fn unresolvable_jumps_are_refused() {
        let mut asm = Asm::new();
        let nowhere = asm.label();
        asm.ja(nowhere);
        asm.exit();
        assert_eq!(asm.finish(), Err(AsmError::Unbound { at: 0 }));

        let mut asm = Asm::new();
        let end = asm.label();
        asm.ja(end);
        asm.bind(end);
        assert_eq!(asm.finish(), Err(AsmError::PastEnd { at: 0 }));

        let mut asm = Asm::new();
        let far = asm.label();
        asm.ja(far);
        for _ in 0..40_000 {
            asm.mov_imm(R0, 0);
        }
        asm.bind(far);
        asm.exit();
        assert_eq!(asm.finish(), Err(AsmError::TooFar { at: 0 }));
    }

    #[test]
    #[should_panic(expected = "bound twice")]
    fn a_label_binds_once() {
        let mut asm = Asm::new();
        let l = asm.label();
        asm.bind(l);
        asm.bind(l);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn wire_values_are_what_a_load_of_network_bytes_yields() {
        assert_eq!(wire_u16(0x0806), 0x0608);
        assert_eq!(wire_u16(0x0800), 0x0008);
        assert_eq!(wire_u16(11211), 0xcb2b);
        assert_eq!(wire_u32([10, 78, 0, 200]), 0xc800_4e0a);
    }
}
