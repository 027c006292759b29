"""PTX instructions -> qgpu instructions on virtual registers, grouped in basic blocks.

Registers stay virtual here (`Vreg` ints >= 1, predicates `Vpred` ints >= 0); the register
allocator maps them to the machine's files afterwards.

Value representation: every PTX register becomes one 32-bit machine register.
- 64-bit registers hold their low 32 bits. That is exact for the ring operations (add,
  sub, mul.lo, shl, and/or/xor/not, mov, cvt) that address arithmetic uses, since the
  low 32 bits of their result depend only on the low 32 bits of their inputs. Every
  64-bit operation whose result depends on high bits (shr, div, rem, compare, min/max,
  mul.hi, 64-bit loads of data) is refused with a clear error.
- 8- and 16-bit registers hold a value whose low bits are valid; operations that look at
  the upper bits first sign- or zero-extend a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from qwengpu.cuda import ptx_ir as ir
from qwengpu.errors import PtxError
from qwengpu.isa.instr import (
    SHFL_LANE_BITS,
    SHFL_SEGMASK_SHIFT,
    AtomOp,
    Cond,
    Instr,
    Op,
    PredFn,
    ShflMode,
    Special,
    StoreWidth,
    TermKind,
    VoteMode,
)
from qwengpu.isa.spec import WORD_BITS, WORD_BYTES, WORD_MASK

ZERO = 0  # the zero register
BYTE_MASK = 0xFF
HALF_MASK = 0xFFFF
LOW_ADDRESS_BITS = WORD_BYTES - 1  # byte offset inside a word
BITS_PER_BYTE = 8

SPECIAL_REGISTERS = {s.value: s for s in Special}
SHFL_C_LIMIT = 1 << (SHFL_SEGMASK_SHIFT + SHFL_LANE_BITS)  # clamp and segmask, no more
SIGNED_CONDS = {"lt": Cond.LT, "le": Cond.LE, "gt": Cond.GT, "ge": Cond.GE}
UNSIGNED_CONDS = {"lt": Cond.LO, "le": Cond.LS, "gt": Cond.HI, "ge": Cond.HS}
PLAIN_CONDS = {
    "eq": Cond.EQ,
    "ne": Cond.NE,
    "lo": Cond.LO,
    "ls": Cond.LS,
    "hi": Cond.HI,
    "hs": Cond.HS,
}
BOOL_OPS = {"and": PredFn.AND, "or": PredFn.OR, "xor": PredFn.XOR}
ATOM_OPS = {
    "add": AtomOp.ADD,
    "and": AtomOp.AND,
    "or": AtomOp.OR,
    "xor": AtomOp.XOR,
    "exch": AtomOp.EXCH,
    "cas": AtomOp.CAS,
    "inc": AtomOp.INC,
    "dec": AtomOp.DEC,
}
IGNORED_OPCODES = frozenset({"membar", "fence", "prefetch", "prefetchu", "pmevent"})
CACHE_MODIFIERS = frozenset(
    {
        "volatile",
        "relaxed",
        "acquire",
        "release",
        "acq_rel",
        "sys",
        "gpu",
        "cta",
        "nc",
        "ca",
        "cg",
        "cs",
        "lu",
        "cv",
        "wb",
        "wt",
        "weak",
        "L1::no_allocate",
        "sync",
        "aligned",
    }
)
SPACES = frozenset({"global", "shared", "param", "const", "local", "generic"})


@dataclass(frozen=True)
class Ty:
    """A PTX scalar type: width and signedness."""

    width: int
    signed: bool
    is_float: bool = False

    @classmethod
    def parse(cls, name: str) -> Ty | None:
        if name == "pred":
            return cls(1, False)
        kind, digits = name[0], name[1:]
        if kind not in "usbf" or not digits.isdigit():
            return None
        return cls(int(digits), kind == "s", kind == "f")


@dataclass
class VTerm:
    kind: TermKind
    target: str = ""
    other: str = ""
    pred: int = 0
    neg: bool = False
    line: int = 0


@dataclass
class VBlock:
    label: str
    instrs: list[Instr] = field(default_factory=list)
    term: VTerm | None = None


@dataclass
class Layout:
    """Where params and variables live: symbol -> byte address of the flat memory; and the
    values of PTX's predefined constants for the target machine (WARP_SZ: its lanes, what
    CUDA's `warpSize` reads)."""

    symbols: dict[str, int]
    constants: dict[str, int] = field(default_factory=dict)


class Translator:
    """Translates one PTX kernel body into virtual-register basic blocks."""

    def __init__(self, kernel: ir.Kernel, layout: Layout) -> None:
        self.kernel = kernel
        self.layout = layout
        self.vregs: dict[str, int] = {}
        self.vpreds: dict[str, int] = {}
        self.next_vreg = 1
        self.next_vpred = 0
        self.blocks: list[VBlock] = []
        self.current: VBlock | None = None
        self.anon = 0
        self.exit_label: str | None = None
        self.names: dict[int, str] = {}  # vreg -> PTX name, for error messages
        self.pred_names: dict[int, str] = {}
        self.line = 0
        self.text = ""
        # 64-bit PTX registers whose high word is known, as a vreg (ZERO for 0): the
        # products of mul.wide and the extensions of cvt, so that `shr.u64 d, wide, k`
        # (the compiler's division by a constant) stays exact.
        self.high_word: dict[str, int] = {}
        # quotient and remainder registers of divisions in the current PTX basic block
        self.divisions: dict[tuple[object, object, Ty], tuple[int, int]] = {}

    # -- building blocks -----------------------------------------------------------------
    def fresh_label(self) -> str:
        self.anon += 1
        return f".anon{self.anon}"

    def start(self, label: str) -> None:
        self.current = VBlock(label)
        self.blocks.append(self.current)

    def finish(self, term: VTerm, next_label: str | None = None) -> None:
        assert self.current is not None
        term.line = self.line
        self.current.term = term
        self.start(next_label or self.fresh_label())

    def emit(self, op: Op, **fields: object) -> None:
        assert self.current is not None
        fields.setdefault("src_line", self.line)
        self.current.instrs.append(Instr(op, **fields))  # type: ignore[arg-type]

    def temp(self) -> int:
        reg = self.next_vreg
        self.next_vreg += 1
        self.names[reg] = f"<temp of line {self.line}>"
        return reg

    def temp_pred(self) -> int:
        pred = self.next_vpred
        self.next_vpred += 1
        self.pred_names[pred] = f"<temp predicate of line {self.line}>"
        return pred

    def error(self, message: str) -> PtxError:
        return PtxError(message, self.line, self.text)

    # -- operands ------------------------------------------------------------------------
    def reg(self, operand: ir.Operand) -> int:
        """A register operand as a vreg; immediates and specials are materialised."""
        if isinstance(operand, ir.Reg):
            if operand.name not in self.vregs:
                self.vregs[operand.name] = self.next_vreg
                self.names[self.next_vreg] = operand.name
                self.next_vreg += 1
            return self.vregs[operand.name]
        if isinstance(operand, ir.Imm):
            self.check_int(operand)
            if operand.value == 0:
                return ZERO
            reg = self.temp()
            self.emit(Op.ADD, rd=reg, a=ZERO, b_imm=operand.value)
            return reg
        if isinstance(operand, ir.SpecialReg):
            reg = self.temp()
            self.emit(Op.S2R, rd=reg, mode=self.special(operand))
            return reg
        if isinstance(operand, ir.Sym):
            reg = self.temp()
            self.emit(Op.ADD, rd=reg, a=ZERO, b_imm=self.symbol_address(operand.name))
            return reg
        raise self.error(f"expected a register operand, got {operand}")

    def pred(self, operand: ir.Operand) -> int:
        if isinstance(operand, ir.Reg):
            if operand.name not in self.vpreds:
                self.vpreds[operand.name] = self.next_vpred
                self.pred_names[self.next_vpred] = operand.name
                self.next_vpred += 1
            return self.vpreds[operand.name]
        if isinstance(operand, ir.Imm):  # a constant predicate: set a temp from r0 == r0
            pred = self.temp_pred()
            cond = Cond.EQ if operand.value else Cond.NE
            self.emit(Op.SETP, pd=pred, a=ZERO, b=ZERO, mode=cond)
            return pred
        raise self.error(f"expected a predicate operand, got {operand}")

    def src(self, operand: ir.Operand) -> dict[str, object]:
        """Fields for the `b` source: an immediate stays an immediate."""
        if isinstance(operand, ir.Imm):
            self.check_int(operand)
            return {"b_imm": operand.value}
        if isinstance(operand, ir.Sym):
            return {"b_imm": self.symbol_address(operand.name)}
        return {"b": self.reg(operand)}

    def src_c(self, operand: ir.Operand) -> dict[str, object]:
        if isinstance(operand, ir.Imm):
            self.check_int(operand)
            return {"c_imm": operand.value}
        return {"c": self.reg(operand)}

    def check_int(self, imm: ir.Imm) -> None:
        if imm.is_float:
            raise self.error("floating-point constants are not supported (qgpu is integer-only)")

    def special(self, operand: ir.SpecialReg) -> Special:
        if operand.name not in SPECIAL_REGISTERS:
            known = ", ".join(f"%{name}" for name in SPECIAL_REGISTERS)
            raise self.error(f"special register %{operand.name} is not supported ({known})")
        return SPECIAL_REGISTERS[operand.name]

    def symbol_address(self, name: str) -> int:
        """A symbol's value: a variable's byte address, or a predefined constant's value."""
        if name in self.layout.symbols:
            return self.layout.symbols[name]
        if name in self.layout.constants:
            return self.layout.constants[name]
        raise self.error(f"unknown symbol '{name}'")

    def address(self, operand: ir.Operand) -> tuple[int, int]:
        """A memory operand as (base vreg, byte offset)."""
        if not isinstance(operand, ir.Addr):
            raise self.error(f"expected a memory operand [..], got {operand}")
        if operand.base is None:
            return ZERO, operand.offset
        if isinstance(operand.base, ir.Sym):
            return ZERO, self.symbol_address(operand.base.name) + operand.offset
        return self.reg(operand.base), operand.offset

    # -- value widths --------------------------------------------------------------------
    def extend(self, reg: int, ty: Ty) -> int:
        """A copy of a narrow value, sign- or zero-extended to 32 bits."""
        if ty.width >= WORD_BITS:
            return reg
        shift = WORD_BITS - ty.width
        out = self.temp()
        if not ty.signed:
            self.emit(Op.AND, rd=out, a=reg, b_imm=(1 << ty.width) - 1)
        else:
            self.emit(Op.SHL, rd=out, a=reg, b_imm=shift)
            self.emit(Op.SRA, rd=out, a=out, b_imm=shift)
        return out

    def value(self, operand: ir.Operand, ty: Ty) -> int:
        """A register holding the operand's full 32-bit value (narrow types extended)."""
        return self.extend(self.reg(operand), ty)

    def value_src(self, operand: ir.Operand, ty: Ty) -> dict[str, object]:
        if isinstance(operand, ir.Imm) and ty.width >= WORD_BITS:
            return self.src(operand)
        if isinstance(operand, ir.Imm):
            value = operand.value & ((1 << ty.width) - 1)
            if ty.signed and value >> (ty.width - 1):
                value -= 1 << ty.width
            return {"b_imm": value}
        return {"b": self.value(operand, ty)}

    def refuse_wide(self, ty: Ty, what: str) -> None:
        if ty.is_float:
            raise self.error("floating-point arithmetic is not supported (qgpu is integer-only)")
        if ty.width > WORD_BITS:
            raise self.error(
                f"64-bit {what} is not supported: qgpu registers are 32-bit, and 64-bit values "
                "are kept only for address arithmetic (add/sub/mul.lo/shl/logic)"
            )

    # -- the body ------------------------------------------------------------------------
    def translate(self) -> list[VBlock]:
        self.start(".entry")
        for item in self.kernel.body:
            if isinstance(item, ir.Label):
                self.divisions = {}
                self.line = item.line
                self.finish(VTerm(TermKind.JUMP, target=item.name), item.name)
                continue
            self.line, self.text = item.line, item.text
            self.instruction(item)
        assert self.current is not None
        self.finish(VTerm(TermKind.EXIT))  # falling off the end returns
        if self.exit_label is not None:
            self.start(self.exit_label)
            self.finish(VTerm(TermKind.EXIT))
        return [b for b in self.blocks if b.term is not None]

    def guard_fields(self, instr: ir.Instruction) -> dict[str, object]:
        if instr.guard is None:
            return {}
        return {"guard": self.pred(instr.guard.pred), "guard_neg": instr.guard.negated}

    def instruction(self, instr: ir.Instruction) -> None:
        opcode = instr.opcode
        if opcode in IGNORED_OPCODES:
            return
        handler: Callable[[ir.Instruction], None] | None = getattr(self, f"op_{opcode}", None)
        if handler is None:
            raise self.error(f"unsupported PTX instruction '{instr.full_opcode}'")
        if instr.operands and isinstance(instr.operands[0], ir.Reg):
            name = instr.operands[0].name
            self.high_word.pop(name, None)  # redefined: high word unknown
            self.divisions = {k: v for k, v in self.divisions.items() if name not in k[:2]}
        if opcode in ("bra", "ret", "exit", "bar", "barrier"):
            self.divisions = {}
        if instr.guard is not None and opcode not in GUARD_AWARE:
            self.guarded(instr, handler)
            return
        handler(instr)

    def guarded(self, instr: ir.Instruction, handler: Callable[[ir.Instruction], None]) -> None:
        """Run a multi-instruction expansion under a guard by guarding each emitted write.

        Temporaries written under the guard are harmless; only the final writes matter, but
        guarding every instruction keeps the rule simple and exact.
        """
        assert self.current is not None
        guard = self.guard_fields(instr)
        before = len(self.current.instrs)
        block = self.current
        handler(instr)
        if self.current is not block:
            raise self.error(f"'{instr.full_opcode}' cannot be predicated here")
        for index in range(before, len(block.instrs)):
            block.instrs[index] = _with_guard(block.instrs[index], guard)

    # -- data movement -------------------------------------------------------------------
    def types(self, instr: ir.Instruction) -> list[Ty]:
        return [t for t in (Ty.parse(m) for m in instr.modifiers) if t is not None]

    def op_mov(self, instr: ir.Instruction) -> None:
        dst, src = instr.operands
        ty = self.types(instr)[-1]
        if ty.width == 1:
            d = self.pred(dst)
            if isinstance(src, ir.Imm):
                cond = Cond.EQ if src.value else Cond.NE
                self.emit(Op.SETP, pd=d, a=ZERO, b=ZERO, mode=cond)
            else:
                p = self.pred(src)
                self.emit(Op.PLOP, pd=d, pa=p, pb=p, mode=PredFn.AND)
            return
        if isinstance(dst, ir.Vector) or isinstance(src, ir.Vector):
            raise self.error("vector/packed mov is not supported")
        d = self.reg(dst)
        if isinstance(src, ir.SpecialReg):
            self.emit(Op.S2R, rd=d, mode=self.special(src))
        elif isinstance(src, ir.Reg):
            self.emit(Op.ADD, rd=d, a=self.reg(src), b_imm=0)
        else:
            self.emit(Op.ADD, rd=d, a=ZERO, **self.src(src))

    def op_cvta(self, instr: ir.Instruction) -> None:
        # The qgpu address space is flat: generic and window addresses coincide.
        dst, src = instr.operands
        d = self.reg(dst)
        if isinstance(src, ir.Reg):
            self.emit(Op.ADD, rd=d, a=self.reg(src), b_imm=0)
        else:
            self.emit(Op.ADD, rd=d, a=ZERO, **self.src(src))

    def op_cvt(self, instr: ir.Instruction) -> None:
        if any(
            m in ("sat", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "ftz")
            for m in instr.modifiers
        ):
            raise self.error(f"'{instr.full_opcode}': only integer conversions are supported")
        dst_ty, src_ty = self.types(instr)[-2:]
        if dst_ty.is_float or src_ty.is_float:
            raise self.error("floating-point conversions are not supported (integer-only)")
        dst, src = instr.operands
        d = self.reg(dst)
        s = self.reg(src)
        if src_ty.width < dst_ty.width and src_ty.width < WORD_BITS:
            self.extend_into(d, s, src_ty)
            if dst_ty.width > WORD_BITS and isinstance(dst, ir.Reg):
                self.high_word[dst.name] = self.sign_word(d) if src_ty.signed else ZERO
        elif src_ty.width == WORD_BITS and dst_ty.width > WORD_BITS:
            self.emit(Op.ADD, rd=d, a=s, b_imm=0)
            if isinstance(dst, ir.Reg):
                self.high_word[dst.name] = self.sign_word(s) if src_ty.signed else ZERO
        else:  # truncation or same width: low bits are what the machine keeps
            self.emit(Op.ADD, rd=d, a=s, b_imm=0)

    def sign_word(self, reg: int) -> int:
        """A register holding the sign extension (0 or -1) of `reg`."""
        high = self.temp()
        self.emit(Op.SRA, rd=high, a=reg, b_imm=WORD_BITS - 1)
        return high

    def extend_into(self, d: int, s: int, ty: Ty) -> None:
        shift = WORD_BITS - ty.width
        if not ty.signed:
            self.emit(Op.AND, rd=d, a=s, b_imm=(1 << ty.width) - 1)
        else:
            self.emit(Op.SHL, rd=d, a=s, b_imm=shift)
            self.emit(Op.SRA, rd=d, a=d, b_imm=shift)

    def space_and_type(self, instr: ir.Instruction) -> tuple[str, Ty]:
        space = "generic"
        ty: Ty | None = None
        for m in instr.modifiers:
            if m in SPACES:
                space = m
            elif m in ("v2", "v4", "v8"):
                continue  # a vector access: op_ld / op_st take it element by element
            elif (t := Ty.parse(m)) is not None:
                ty = t
        if ty is None:
            raise self.error(f"'{instr.full_opcode}' has no type")
        if space == "local":
            raise self.error("local memory (stack arrays, spills) is not supported")
        return space, ty

    def vector_elements(self, vector: ir.Vector, ty: Ty) -> list[tuple[int, ir.Reg | ir.Imm]]:
        """A vector access (ld/st .v2/.v4) as its elements: (byte offset, operand) each,
        `_` elements left out; the elements are consecutive, as CUDA's int2/int4."""
        if ty.is_float:
            raise self.error("floating-point vector accesses are not supported (integer-only)")
        if ty.width > WORD_BITS:
            self.refuse_wide(ty, "vector access")
        size = ty.width // BITS_PER_BYTE
        return [
            (k * size, e)
            for k, e in enumerate(vector.elems)
            if not (isinstance(e, ir.Reg) and e.name == "_")
        ]

    def op_ld(self, instr: ir.Instruction) -> None:
        space, ty = self.space_and_type(instr)
        dst, src = instr.operands
        if isinstance(dst, ir.Vector):  # int2 / int4 loads: one load per element
            for at, element in self.vector_elements(dst, ty):
                address = replace(src, offset=src.offset + at) if isinstance(src, ir.Addr) else src
                self.op_ld(replace(instr, operands=(element, address)))
            return
        base, offset = self.address(src)
        d = self.reg(dst)
        if space == "param":
            if ty.width > WORD_BITS and ty.width != 64:
                raise self.error(f"param of {ty.width} bits is not supported")
            if offset % WORD_BYTES:
                raise self.error("params are read one 32-bit word at a time")
            self.emit(Op.LD, rd=d, a=base, imm=offset)
            return
        if ty.is_float:
            raise self.error("floating-point loads are not supported (integer-only)")
        if ty.width > WORD_BITS:
            self.refuse_wide(ty, "data load")
        if ty.width == WORD_BITS:
            self.emit(Op.LD, rd=d, a=base, imm=offset)
            return
        self.load_narrow(d, base, offset, ty)

    def byte_address(self, base: int, offset: int) -> int:
        if not offset:
            return base
        address = self.temp()
        self.emit(Op.ADD, rd=address, a=base, b_imm=offset)
        return address

    def load_narrow(self, d: int, base: int, offset: int, ty: Ty) -> None:
        """8/16-bit load: load the containing word, shift the field down, extend it."""
        address = self.byte_address(base, offset)
        word, shift = self.temp(), self.temp()
        self.emit(Op.AND, rd=word, a=address, b_imm=WORD_MASK & ~LOW_ADDRESS_BITS)
        self.emit(Op.LD, rd=word, a=word)
        self.emit(Op.AND, rd=shift, a=address, b_imm=LOW_ADDRESS_BITS)
        self.emit(Op.SHL, rd=shift, a=shift, b_imm=3)  # bytes -> bits
        self.emit(Op.SHR, rd=word, a=word, b=shift)
        self.extend_into(d, word, ty)

    def op_st(self, instr: ir.Instruction) -> None:
        space, ty = self.space_and_type(instr)
        dst, src = instr.operands
        if isinstance(src, ir.Vector):  # int2 / int4 stores: one store per element
            for at, element in self.vector_elements(src, ty):
                address = replace(dst, offset=dst.offset + at) if isinstance(dst, ir.Addr) else dst
                self.op_st(replace(instr, operands=(address, element)))
            return
        if space == "param":
            raise self.error("stores to param space are not supported")
        if ty.is_float:
            raise self.error("floating-point stores are not supported (integer-only)")
        if ty.width > WORD_BITS:
            self.refuse_wide(ty, "data store")
        base, offset = self.address(dst)
        if ty.width == WORD_BITS:
            self.emit(Op.ST, a=base, imm=offset, **self.src(src))
            return
        self.store_narrow(base, offset, self.reg(src), ty)

    def store_narrow(self, base: int, offset: int, value: int, ty: Ty) -> None:
        """8/16-bit store: the memory unit replaces just that field of the word."""
        width = StoreWidth.B8 if ty.width == BITS_PER_BYTE else StoreWidth.B16
        self.emit(Op.ST, a=base, imm=offset, b=value, mode=width)

    def atomic_op(self, instr: ir.Instruction) -> tuple[AtomOp, Ty]:
        _, ty = self.space_and_type(instr)
        self.refuse_wide(ty, "atomic")
        if ty.width < WORD_BITS:
            raise self.error("atomics narrower than 32 bits are not supported")
        names = [m for m in instr.modifiers if m in ATOM_OPS or m in ("min", "max")]
        if not names:
            raise self.error(f"unsupported atomic '{instr.full_opcode}'")
        name = names[0]
        if name == "min":
            return (AtomOp.MIN if ty.signed else AtomOp.MINU), ty
        if name == "max":
            return (AtomOp.MAX if ty.signed else AtomOp.MAXU), ty
        return ATOM_OPS[name], ty

    def op_atom(self, instr: ir.Instruction) -> None:
        fn, _ = self.atomic_op(instr)
        dst, addr, *values = instr.operands
        base, offset = self.address(addr)
        fields: dict[str, object] = {"rd": self.reg(dst), "a": base, "imm": offset, "mode": fn}
        fields.update(self.src(values[0]))
        if fn is AtomOp.CAS:
            fields["c"] = self.reg(values[1])  # c is a register (the ROM row has no room)
        self.emit(Op.ATOM, **fields)

    def op_red(self, instr: ir.Instruction) -> None:
        fn, _ = self.atomic_op(instr)
        addr, value = instr.operands
        base, offset = self.address(addr)
        self.emit(Op.ATOM, rd=ZERO, a=base, imm=offset, mode=fn, **self.src(value))

    # -- arithmetic ----------------------------------------------------------------------
    def binary(self, op: Op, instr: ir.Instruction, *, extend: bool = False) -> None:
        ty = self.types(instr)[-1]
        dst, a, b = instr.operands
        if extend:
            self.emit(op, rd=self.reg(dst), a=self.value(a, ty), **self.value_src(b, ty))
        else:
            self.emit(op, rd=self.reg(dst), a=self.reg(a), **self.src(b))

    def op_add(self, instr: ir.Instruction) -> None:
        self.refuse_carry(instr)
        self.refuse_float(instr)
        self.binary(Op.ADD, instr)

    def op_sub(self, instr: ir.Instruction) -> None:
        self.refuse_carry(instr)
        self.refuse_float(instr)
        self.binary(Op.SUB, instr)

    def refuse_carry(self, instr: ir.Instruction) -> None:
        if "cc" in instr.modifiers or "sat" in instr.modifiers:
            raise self.error(f"'{instr.full_opcode}' (carry/saturation) is not supported")

    def refuse_float(self, instr: ir.Instruction) -> None:
        for ty in self.types(instr):
            if ty.is_float:
                raise self.error("floating-point arithmetic is not supported (integer-only)")

    def op_mul(self, instr: ir.Instruction) -> None:
        self.refuse_float(instr)
        ty = self.types(instr)[-1]
        mods = instr.modifiers
        if "hi" in mods:
            self.refuse_wide(ty, "mul.hi")
            if ty.width < WORD_BITS:
                raise self.error("16-bit mul.hi is not supported")
            self.binary(Op.MULHS if ty.signed else Op.MULHU, instr)
        elif "wide" in mods:  # the low 32 bits of the wide product are the product's
            self.binary(Op.MUL, instr, extend=ty.width < WORD_BITS)
            dst, a, b = instr.operands
            if ty.width == WORD_BITS and isinstance(dst, ir.Reg):
                high = self.temp()  # dead-code elimination drops it when unused
                self.emit(
                    Op.MULHS if ty.signed else Op.MULHU, rd=high, a=self.reg(a), **self.src(b)
                )
                self.high_word[dst.name] = high
        else:
            self.binary(Op.MUL, instr)

    def op_mad(self, instr: ir.Instruction) -> None:
        self.refuse_float(instr)
        self.refuse_carry(instr)
        ty = self.types(instr)[-1]
        dst, a, b, c = instr.operands
        product = self.temp()
        if "hi" in instr.modifiers:
            self.refuse_wide(ty, "mad.hi")
            op = Op.MULHS if ty.signed else Op.MULHU
            self.emit(op, rd=product, a=self.reg(a), **self.src(b))
        else:
            extend = "wide" in instr.modifiers and ty.width < WORD_BITS
            if extend:
                self.emit(Op.MUL, rd=product, a=self.value(a, ty), **self.value_src(b, ty))
            else:
                self.emit(Op.MUL, rd=product, a=self.reg(a), **self.src(b))
        self.emit(Op.ADD, rd=self.reg(dst), a=product, **self.src(c))

    def op_and(self, instr: ir.Instruction) -> None:
        self.logic(instr, Op.AND, PredFn.AND)

    def op_or(self, instr: ir.Instruction) -> None:
        self.logic(instr, Op.OR, PredFn.OR)

    def op_xor(self, instr: ir.Instruction) -> None:
        self.logic(instr, Op.XOR, PredFn.XOR)

    def logic(self, instr: ir.Instruction, op: Op, fn: PredFn) -> None:
        dst, a, b = instr.operands
        if "pred" in instr.modifiers:
            self.emit(Op.PLOP, pd=self.pred(dst), pa=self.pred(a), pb=self.pred(b), mode=fn)
            return
        self.binary(op, instr)
        ty = self.types(instr)[-1]
        high_a, high_b = self.known_high(a), self.known_high(b)
        if ty.width > WORD_BITS and isinstance(dst, ir.Reg) and None not in (high_a, high_b):
            if op is Op.AND and ZERO in (high_a, high_b):
                self.high_word[dst.name] = ZERO
            else:
                high = self.temp()
                self.emit(op, rd=high, a=high_a, b=high_b)
                self.high_word[dst.name] = high

    def known_high(self, operand: ir.Operand) -> int | None:
        """The vreg holding a 64-bit operand's high word, if the lowering knows it."""
        if isinstance(operand, ir.Imm):
            return ZERO if 0 <= operand.value <= WORD_MASK else None
        if isinstance(operand, ir.Reg):
            return self.high_word.get(operand.name)
        return None

    def op_not(self, instr: ir.Instruction) -> None:
        dst, a = instr.operands
        if "pred" in instr.modifiers:
            p = self.pred(a)
            self.emit(
                Op.PLOP, pd=self.pred(dst), pa=p, pb=p, neg_a=True, neg_b=True, mode=PredFn.AND
            )
        else:
            self.emit(Op.XOR, rd=self.reg(dst), a=self.reg(a), b_imm=WORD_MASK)

    def op_neg(self, instr: ir.Instruction) -> None:
        self.refuse_float(instr)
        dst, a = instr.operands
        self.emit(Op.SUB, rd=self.reg(dst), a=ZERO, b=self.reg(a))

    def op_abs(self, instr: ir.Instruction) -> None:
        self.refuse_float(instr)
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, "abs")
        dst, a = instr.operands
        x = self.value(a, ty)
        sign, d = self.temp(), self.reg(dst)
        self.emit(Op.SRA, rd=sign, a=x, b_imm=WORD_BITS - 1)
        self.emit(Op.XOR, rd=d, a=x, b=sign)
        self.emit(Op.SUB, rd=d, a=d, b=sign)

    def op_min(self, instr: ir.Instruction) -> None:
        self.min_max(instr, take_smaller=True)

    def op_max(self, instr: ir.Instruction) -> None:
        self.min_max(instr, take_smaller=False)

    def min_max(self, instr: ir.Instruction, *, take_smaller: bool) -> None:
        self.refuse_float(instr)
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, "min/max")
        dst, a, b = instr.operands
        x = self.value(a, ty)
        y = self.value_src(b, ty)
        p = self.temp_pred()
        cond = (
            (Cond.LT if ty.signed else Cond.LO)
            if take_smaller
            else (Cond.GT if ty.signed else Cond.HI)
        )
        self.emit(Op.SETP, pd=p, a=x, mode=cond, **y)
        self.emit(Op.SEL, rd=self.reg(dst), pa=p, a=x, **y)

    def shift(self, instr: ir.Instruction, op: Op) -> None:
        ty = self.types(instr)[-1]
        dst, a, b = instr.operands
        if ty.width > WORD_BITS and op is not Op.SHL:
            self.shift_right_wide(instr, ty)
            return
        if ty.width < WORD_BITS and op is not Op.SHL:
            self.emit(op, rd=self.reg(dst), a=self.value(a, ty), **self.src(b))
            return
        self.emit(op, rd=self.reg(dst), a=self.reg(a), **self.src(b))

    def shift_right_wide(self, instr: ir.Instruction, ty: Ty) -> None:
        """64-bit right shift by a constant, exact when the high word is known."""
        dst, a, b = instr.operands
        high = self.high_word.get(a.name) if isinstance(a, ir.Reg) else None
        if high is None or not isinstance(b, ir.Imm):
            self.refuse_wide(ty, "right shift")
        assert high is not None and isinstance(b, ir.Imm)
        k = b.value & 63
        d = self.reg(dst)
        op = Op.SRA if ty.signed else Op.SHR
        if k >= WORD_BITS:
            self.emit(op, rd=d, a=high, b_imm=k - WORD_BITS)
            return
        if k == 0:
            self.emit(Op.ADD, rd=d, a=self.reg(a), b_imm=0)
            return
        low, carried = self.temp(), self.temp()
        self.emit(Op.SHR, rd=low, a=self.reg(a), b_imm=k)
        self.emit(Op.SHL, rd=carried, a=high, b_imm=WORD_BITS - k)
        self.emit(Op.OR, rd=d, a=low, b=carried)

    def op_shl(self, instr: ir.Instruction) -> None:
        self.shift(instr, Op.SHL)

    def op_shr(self, instr: ir.Instruction) -> None:
        ty = self.types(instr)[-1]
        self.shift(instr, Op.SRA if ty.signed else Op.SHR)

    def unary(self, instr: ir.Instruction, op: Op) -> None:
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, instr.opcode)
        dst, a = instr.operands
        self.emit(op, rd=self.reg(dst), a=self.reg(a))

    def op_popc(self, instr: ir.Instruction) -> None:
        self.unary(instr, Op.POPC)

    def op_clz(self, instr: ir.Instruction) -> None:
        self.unary(instr, Op.CLZ)

    def op_brev(self, instr: ir.Instruction) -> None:
        self.unary(instr, Op.BREV)

    def op_bfind(self, instr: ir.Instruction) -> None:
        """Most significant set bit (of ~x for negative signed x); 0xFFFFFFFF when none.
        With .shiftamt: the left shift that brings that bit to bit 31."""
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, "bfind")
        dst, a = instr.operands
        x = self.reg(a)
        if ty.signed:
            sign, flipped = self.temp(), self.temp()
            self.emit(Op.SRA, rd=sign, a=x, b_imm=WORD_BITS - 1)
            self.emit(Op.XOR, rd=flipped, a=x, b=sign)
            x = flipped
        d = self.reg(dst)
        if "shiftamt" in instr.modifiers:
            none = self.temp_pred()
            self.emit(Op.SETP, pd=none, a=x, b_imm=0, mode=Cond.EQ)
            self.emit(Op.CLZ, rd=d, a=x)
            self.emit(Op.ADD, rd=d, a=ZERO, b_imm=WORD_MASK, guard=none)
            return
        leading = self.temp()
        self.emit(Op.CLZ, rd=leading, a=x)
        self.emit(Op.SUB, rd=d, a=ZERO, b=leading)
        self.emit(Op.ADD, rd=d, a=d, b_imm=WORD_BITS - 1)  # 31 - clz; -1 for zero

    def op_shf(self, instr: ir.Instruction) -> None:
        """Funnel shift of the 64-bit pair b:a by n = c & 31 (wrap) or min(c, 32) (clamp)."""
        dst, a, b, c = instr.operands
        n = self.temp()
        if "wrap" in instr.modifiers:
            self.emit(Op.AND, rd=n, a=self.reg(c), b_imm=WORD_BITS - 1)
        else:
            over = self.temp_pred()
            self.emit(Op.ADD, rd=n, a=self.reg(c), b_imm=0)
            self.emit(Op.SETP, pd=over, a=n, b_imm=WORD_BITS, mode=Cond.HI)
            self.emit(Op.ADD, rd=n, a=ZERO, b_imm=WORD_BITS, guard=over)
        rest = self.temp()
        self.emit(Op.SUB, rd=rest, a=ZERO, b=n)
        self.emit(Op.ADD, rd=rest, a=rest, b_imm=WORD_BITS)  # 32 - n
        low, high = self.reg(a), self.reg(b)
        part = self.temp()
        d = self.reg(dst)
        if "l" in instr.modifiers:  # upper word of (b:a) << n
            self.emit(Op.SHR, rd=part, a=low, b=rest)
            self.emit(Op.SHL, rd=d, a=high, b=n)
        else:  # lower word of (b:a) >> n
            self.emit(Op.SHL, rd=part, a=high, b=rest)
            self.emit(Op.SHR, rd=d, a=low, b=n)
        self.emit(Op.OR, rd=d, a=d, b=part)

    def op_bfe(self, instr: ir.Instruction) -> None:
        """Bit-field extract for pos + len <= 32: shift the field to the top, then down."""
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, "bfe")
        dst, a, pos, length = instr.operands
        d = self.reg(dst)
        up = self.temp()
        # up = 32 - pos - len ; d = (a << up) >> (32 - len)
        self.emit(Op.ADD, rd=up, a=self.reg(pos), **self.src(length))
        self.emit(Op.SUB, rd=up, a=ZERO, b=up)
        self.emit(Op.ADD, rd=up, a=up, b_imm=WORD_BITS)
        self.emit(Op.SHL, rd=d, a=self.reg(a), b=up)
        down = self.temp()
        self.emit(Op.SUB, rd=down, a=ZERO, b=self.reg(length))
        self.emit(Op.ADD, rd=down, a=down, b_imm=WORD_BITS)
        self.emit(Op.SRA if ty.signed else Op.SHR, rd=d, a=d, b=down)

    def op_bfi(self, instr: ir.Instruction) -> None:
        """Bit-field insert for pos + len <= 32: d = (b & ~mask) | ((a << pos) & mask)."""
        dst, a, b, pos, length = instr.operands
        mask, field_value, d = self.temp(), self.temp(), self.reg(dst)
        one = self.temp()
        self.emit(Op.ADD, rd=one, a=ZERO, b_imm=1)
        self.emit(Op.SHL, rd=mask, a=one, **self.src(length))
        self.emit(Op.SUB, rd=mask, a=mask, b_imm=1)
        self.emit(Op.SHL, rd=mask, a=mask, **self.src(pos))
        self.emit(Op.SHL, rd=field_value, a=self.reg(a), **self.src(pos))
        self.emit(Op.AND, rd=field_value, a=field_value, b=mask)
        self.emit(Op.XOR, rd=mask, a=mask, b_imm=WORD_MASK)
        self.emit(Op.AND, rd=d, a=self.reg(b), b=mask)
        self.emit(Op.OR, rd=d, a=d, b=field_value)

    def op_lop3(self, instr: ir.Instruction) -> None:
        """Three-input logic by its truth table: the OR of the table's minterms."""
        dst, a, b, c, table = instr.operands
        if not isinstance(table, ir.Imm):
            raise self.error("lop3 needs an immediate truth table")
        inputs = [self.reg(a), self.reg(b), self.reg(c)]
        inverted = [self.temp() for _ in inputs]
        for reg, inv in zip(inputs, inverted, strict=True):
            self.emit(Op.XOR, rd=inv, a=reg, b_imm=WORD_MASK)
        acc, term = self.temp(), self.temp()
        self.emit(Op.ADD, rd=acc, a=ZERO, b_imm=0)
        for minterm in range(8):
            if not (table.value >> minterm) & 1:
                continue
            # PTX's table index: a contributes 0xF0, b 0xCC, c 0xAA
            picks = [(minterm >> 2) & 1, (minterm >> 1) & 1, minterm & 1]
            regs = [
                inp if bit else inv for inp, inv, bit in zip(inputs, inverted, picks, strict=True)
            ]
            self.emit(Op.AND, rd=term, a=regs[0], b=regs[1])
            self.emit(Op.AND, rd=term, a=term, b=regs[2])
            self.emit(Op.OR, rd=acc, a=acc, b=term)
        self.emit(Op.ADD, rd=self.reg(dst), a=acc, b_imm=0)

    # -- division ------------------------------------------------------------------------
    def op_div(self, instr: ir.Instruction) -> None:
        self.division(instr, want_remainder=False)

    def op_rem(self, instr: ir.Instruction) -> None:
        self.division(instr, want_remainder=True)

    def division(self, instr: ir.Instruction, *, want_remainder: bool) -> None:
        if instr.guard is not None:
            raise self.error("predicated div/rem is not supported")
        self.refuse_float(instr)
        ty = self.types(instr)[-1]
        self.refuse_wide(ty, "division")
        dst, a, b = instr.operands
        key = (_operand_key(a), _operand_key(b), ty)
        if key not in self.divisions:  # x / y and x % y share one division
            self.divisions[key] = self.divmod(self.value(a, ty), self.value(b, ty), ty.signed)
        q, r = self.divisions[key]
        self.emit(Op.ADD, rd=self.reg(dst), a=r if want_remainder else q, b_imm=0)

    def divmod(self, n: int, d: int, signed: bool) -> tuple[int, int]:
        """Registers holding n / d and n % d with PTX's rounding toward zero."""
        if not signed:
            return self.udivmod(n, d)
        # |n| / |d| unsigned, then the quotient takes sign(n) ^ sign(d), the rest sign(n)
        sn, sd = self.temp(), self.temp()
        un, ud = self.temp(), self.temp()
        self.emit(Op.SRA, rd=sn, a=n, b_imm=WORD_BITS - 1)
        self.emit(Op.XOR, rd=un, a=n, b=sn)
        self.emit(Op.SUB, rd=un, a=un, b=sn)
        self.emit(Op.SRA, rd=sd, a=d, b_imm=WORD_BITS - 1)
        self.emit(Op.XOR, rd=ud, a=d, b=sd)
        self.emit(Op.SUB, rd=ud, a=ud, b=sd)
        uq, ur = self.udivmod(un, ud)
        q, r, sign = self.temp(), self.temp(), self.temp()
        self.emit(Op.XOR, rd=r, a=ur, b=sn)
        self.emit(Op.SUB, rd=r, a=r, b=sn)
        self.emit(Op.XOR, rd=sign, a=sn, b=sd)
        self.emit(Op.XOR, rd=q, a=uq, b=sign)
        self.emit(Op.SUB, rd=q, a=q, b=sign)
        return q, r

    def udivmod(self, n: int, d: int) -> tuple[int, int]:
        """Unsigned n / d and n % d by shift-and-subtract over the quotient's bits.

        d == 0 gives (0xFFFFFFFF, n), as NVIDIA hardware does. The loop runs
        clz(d) - clz(n) + 1 times: once per possible quotient bit.
        """
        q, r, dd, bit = self.temp(), self.temp(), self.temp(), self.temp()
        p = self.temp_pred()
        loop_label, done_label, checked, aligned = (self.fresh_label() for _ in range(4))
        self.emit(Op.ADD, rd=r, a=n, b_imm=0)
        self.emit(Op.ADD, rd=q, a=ZERO, b_imm=WORD_MASK)
        self.emit(Op.SETP, pd=p, a=d, b_imm=0, mode=Cond.EQ)
        self.finish(VTerm(TermKind.BRANCH, target=done_label, pred=p, other=checked), checked)
        # n < d: the quotient is 0 and the remainder n
        self.emit(Op.ADD, rd=q, a=ZERO, b_imm=0)
        self.emit(Op.SETP, pd=p, a=n, b=d, mode=Cond.LO)
        self.finish(VTerm(TermKind.BRANCH, target=done_label, pred=p, other=aligned), aligned)
        # align d under n's top bit: shift = clz(d) - clz(n), bit = 1 << shift
        shift = self.temp()
        self.emit(Op.CLZ, rd=dd, a=d)
        self.emit(Op.CLZ, rd=shift, a=n)
        self.emit(Op.SUB, rd=shift, a=dd, b=shift)
        self.emit(Op.SHL, rd=dd, a=d, b=shift)
        self.emit(Op.ADD, rd=bit, a=ZERO, b_imm=1)
        self.emit(Op.SHL, rd=bit, a=bit, b=shift)
        self.finish(VTerm(TermKind.JUMP, target=loop_label), loop_label)
        # one quotient bit per iteration
        self.emit(Op.SETP, pd=p, a=r, b=dd, mode=Cond.HS)
        self.emit(Op.SUB, rd=r, a=r, b=dd, guard=p)
        self.emit(Op.OR, rd=q, a=q, b=bit, guard=p)
        self.emit(Op.SHR, rd=dd, a=dd, b_imm=1)
        self.emit(Op.SHR, rd=bit, a=bit, b_imm=1)
        self.emit(Op.SETP, pd=p, a=bit, b_imm=0, mode=Cond.NE)
        self.finish(VTerm(TermKind.BRANCH, target=loop_label, pred=p, other=done_label), done_label)
        return q, r

    # -- comparisons and selects ---------------------------------------------------------
    def condition(
        self, instr: ir.Instruction, zero_high: tuple[int | None, int | None] = (None, None)
    ) -> tuple[Cond, Ty]:
        """The machine condition of a PTX comparison. 64-bit comparisons are exact on the
        low words when both high words are known to be zero (then signed is unsigned)."""
        ty = self.types(instr)[-1]
        if ty.is_float:
            raise self.error("floating-point comparisons are not supported (integer-only)")
        names = [m for m in instr.modifiers if m in PLAIN_CONDS or m in SIGNED_CONDS]
        if not names:
            raise self.error(f"unsupported comparison '{instr.full_opcode}'")
        name = names[0]
        if name in PLAIN_CONDS:
            cond = PLAIN_CONDS[name]
        else:
            cond = (SIGNED_CONDS if ty.signed else UNSIGNED_CONDS)[name]
        if ty.width > WORD_BITS:
            if zero_high != (ZERO, ZERO):
                self.refuse_wide(ty, "comparison")
            unsigned = {Cond.LT: Cond.LO, Cond.LE: Cond.LS, Cond.GT: Cond.HI, Cond.GE: Cond.HS}
            cond = unsigned.get(cond, cond)
            ty = Ty(WORD_BITS, False)
        return cond, ty

    def op_setp(self, instr: ir.Instruction) -> None:
        dst, a, b, *rest = instr.operands
        cond, ty = self.condition(instr, zero_high=(self.known_high(a), self.known_high(b)))
        x = self.value(a, ty)
        y = self.value_src(b, ty)
        bool_ops = [m for m in instr.modifiers if m in BOOL_OPS]
        first = dst.first if isinstance(dst, ir.RegPair) else dst
        second = dst.second if isinstance(dst, ir.RegPair) else None
        if not bool_ops:
            p = self.pred(first)
            self.emit(Op.SETP, pd=p, a=x, mode=cond, **y)
            if second is not None:
                q = self.pred(second)
                self.emit(Op.PLOP, pd=q, pa=p, pb=p, neg_a=True, neg_b=True, mode=PredFn.AND)
            return
        (c_operand,) = rest
        negate_c = False
        if isinstance(c_operand, ir.Guard):  # pragma: no cover - parser form
            negate_c, c_operand = c_operand.negated, c_operand.pred
        if isinstance(c_operand, ir.RegPair):  # pragma: no cover
            raise self.error("bad setp operand")
        c = self.pred(c_operand)
        fn = BOOL_OPS[bool_ops[0]]
        t = self.temp_pred()
        self.emit(Op.SETP, pd=t, a=x, mode=cond, **y)
        self.emit(Op.PLOP, pd=self.pred(first), pa=t, pb=c, neg_b=negate_c, mode=fn)
        if second is not None:
            self.emit(
                Op.PLOP, pd=self.pred(second), pa=t, pb=c, neg_a=True, neg_b=negate_c, mode=fn
            )

    def op_selp(self, instr: ir.Instruction) -> None:
        dst, a, b, c = instr.operands
        p = self.pred(c)
        if isinstance(a, ir.Imm) and not isinstance(b, ir.Imm):
            self.emit(Op.SEL, rd=self.reg(dst), pa=p, neg_a=True, a=self.reg(b), **self.src(a))
            return
        self.emit(Op.SEL, rd=self.reg(dst), pa=p, a=self.reg(a), **self.src(b))

    def op_set(self, instr: ir.Instruction) -> None:
        cond, ty = self.condition(instr)
        dst, a, b = instr.operands
        p = self.temp_pred()
        self.emit(Op.SETP, pd=p, a=self.value(a, ty), mode=cond, **self.value_src(b, ty))
        all_ones = self.temp()
        self.emit(Op.ADD, rd=all_ones, a=ZERO, b_imm=WORD_MASK)
        self.emit(Op.SEL, rd=self.reg(dst), pa=p, a=all_ones, b_imm=0)

    # -- warp-level ----------------------------------------------------------------------
    def op_shfl(self, instr: ir.Instruction) -> None:
        modes = [m for m in instr.modifiers if m in ("up", "down", "bfly", "idx")]
        if not modes:
            raise self.error(f"unsupported shuffle '{instr.full_opcode}'")
        dst, a, b, c, *_mask = instr.operands
        fields: dict[str, object] = {"mode": ShflMode(modes[0]), "a": self.reg(a)}
        if isinstance(dst, ir.RegPair):
            fields["rd"] = self.reg(dst.first)
            if dst.second.name != "_":
                fields["pd"] = self.pred(dst.second)
        else:
            fields["rd"] = self.reg(dst)
        fields.update(self.src(b))
        if isinstance(c, ir.Imm) and not 0 <= c.value < SHFL_C_LIMIT:
            raise self.error(f"shfl's c operand {c.value:#x} has bits beyond clamp and segmask")
        fields.update(self.src_c(c))
        self.emit(Op.SHFL, **fields)

    def op_vote(self, instr: ir.Instruction) -> None:
        dst, a, *_mask = instr.operands
        negated = False
        if isinstance(a, ir.Guard):  # pragma: no cover - parser form for {!}p
            negated, a = a.negated, a.pred
        if "ballot" in instr.modifiers:
            self.emit(
                Op.VOTE, rd=self.reg(dst), pa=self.pred(a), neg_a=negated, mode=VoteMode.BALLOT
            )
            return
        for name, mode in (("any", VoteMode.ANY), ("all", VoteMode.ALL)):
            if name in instr.modifiers:
                self.emit(Op.VOTE, pd=self.pred(dst), pa=self.pred(a), neg_a=negated, mode=mode)
                return
        raise self.error(f"unsupported vote '{instr.full_opcode}'")

    def op_activemask(self, instr: ir.Instruction) -> None:
        (dst,) = instr.operands
        p = self.temp_pred()
        self.emit(Op.SETP, pd=p, a=ZERO, b=ZERO, mode=Cond.EQ)
        self.emit(Op.VOTE, rd=self.reg(dst), pa=p, mode=VoteMode.BALLOT)

    # -- control flow --------------------------------------------------------------------
    def op_bra(self, instr: ir.Instruction) -> None:
        (target,) = instr.operands
        if not isinstance(target, ir.Sym):
            raise self.error("indirect branches are not supported")
        if instr.guard is None:
            self.finish(VTerm(TermKind.JUMP, target=target.name))
        else:
            self.branch_on_guard(instr.guard, target.name)

    def op_ret(self, instr: ir.Instruction) -> None:
        if self.kernel.is_entry is False:
            raise self.error("device functions are not supported (inline them)")
        if instr.guard is None:
            self.finish(VTerm(TermKind.EXIT))
            return
        if self.exit_label is None:
            self.exit_label = self.fresh_label()
        self.branch_on_guard(instr.guard, self.exit_label)

    def branch_on_guard(self, guard: ir.Guard, target: str) -> None:
        """End the block: lanes where the guard holds go to `target`, the rest fall through."""
        fallthrough = self.fresh_label()
        self.finish(
            VTerm(
                TermKind.BRANCH,
                target=target,
                other=fallthrough,
                pred=self.pred(guard.pred),
                neg=guard.negated,
            ),
            fallthrough,
        )

    op_exit = op_ret

    def op_bar(self, instr: ir.Instruction) -> None:
        if instr.guard is not None:
            raise self.error("predicated barriers are not supported")
        if any(m in ("arrive", "red") for m in instr.modifiers):
            raise self.error(f"'{instr.full_opcode}' is not supported (only bar.sync)")
        if len(instr.operands) > 1:
            raise self.error("bar.sync with a thread count is not supported")
        (barrier,) = instr.operands
        if not (isinstance(barrier, ir.Imm) and barrier.value == 0):
            raise self.error("only barrier 0 is supported")
        after = self.fresh_label()
        self.finish(VTerm(TermKind.BARRIER, target=after), after)

    op_barrier = op_bar

    def op_call(self, instr: ir.Instruction) -> None:
        raise self.error("function calls are not supported (device functions must be inlined)")


def _operand_key(operand: ir.Operand) -> object:
    return operand.name if isinstance(operand, ir.Reg) else operand


# Instructions whose handlers take care of their own guard (they are a single machine
# instruction or a terminator).
GUARD_AWARE = frozenset({"bra", "ret", "exit"})


def _with_guard(instr: Instr, guard: dict[str, object]) -> Instr:
    if instr.guard is not None:
        raise PtxError("nested predication", instr.src_line)
    return replace(instr, **guard)  # type: ignore[arg-type]
