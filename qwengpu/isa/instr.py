"""The qgpu instruction set: instructions, block terminators, blocks and programs.

Each instruction is simple enough for a few layers of threshold logic: one 32-bit result
from at most three sources. Rare PTX operations are expanded by the lowering. The exact
semantics of every instruction live in `qwengpu.interp` and are documented in docs/isa.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from qwengpu.isa.spec import WORD_BYTES, WORD_MASK, MachineSpec


class Op(Enum):
    # rd = a <op> b  (b: register or 32-bit immediate)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"  # low 32 bits of the product
    MULHU = "mulhu"  # high 32 bits of the unsigned 64-bit product
    MULHS = "mulhs"  # high 32 bits of the signed 64-bit product
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHL = "shl"  # b >= 32 gives 0
    SHR = "shr"  # logical; b >= 32 gives 0
    SRA = "sra"  # arithmetic; b >= 32 gives the sign fill
    # rd = f(a)
    POPC = "popc"
    CLZ = "clz"
    BREV = "brev"
    # predicates
    SETP = "setp"  # pd = a <cond> b
    PLOP = "plop"  # pd = fn(pa ^ neg_a, pb ^ neg_b)
    SEL = "sel"  # rd = p ? a : b
    # thread identity
    S2R = "s2r"  # rd = special register
    # memory (byte addresses, 4-byte aligned words)
    LD = "ld"  # rd = mem[a + imm]
    ST = "st"  # mem[a + imm] = b; st.8 / st.16 write one byte / halfword of the word
    ATOM = "atom"  # rd = mem[a + imm]; mem[a + imm] = fn(old, b[, c])
    # warp
    SHFL = "shfl"  # rd = a of source lane; optional pd = source lane in range
    VOTE = "vote"  # ballot: rd = mask; any/all: pd


SHFL_LANE_BITS = 5  # PTX shfl's lane operands (b, clamp, segmask) are 5-bit lane numbers
SHFL_SEGMASK_SHIFT = 8  # shfl's c: clamp in bits 0-4, segmask in bits 8-12

MEMORY_OPS = frozenset({Op.LD, Op.ST, Op.ATOM})
STORE_OPS = frozenset({Op.ST, Op.ATOM})  # ops that write memory
BINARY_ALU_OPS = frozenset(
    {Op.ADD, Op.SUB, Op.MUL, Op.MULHU, Op.MULHS, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.SRA}
)
UNARY_ALU_OPS = frozenset({Op.POPC, Op.CLZ, Op.BREV})


class Cond(Enum):
    """Integer comparisons (PTX names: lo/ls/hi/hs are the unsigned ones)."""

    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    LO = "lo"
    LS = "ls"
    HI = "hi"
    HS = "hs"


class PredFn(Enum):
    AND = "and"
    OR = "or"
    XOR = "xor"


class AtomOp(Enum):
    ADD = "add"
    MIN = "min"  # signed
    MAX = "max"  # signed
    MINU = "minu"
    MAXU = "maxu"
    AND = "and"
    OR = "or"
    XOR = "xor"
    EXCH = "exch"
    CAS = "cas"  # mem = (old == b) ? c : old
    INC = "inc"  # mem = (old >= b) ? 0 : old + 1   (unsigned)
    DEC = "dec"  # mem = (old == 0 or old > b) ? b : old - 1   (unsigned)


class StoreWidth(Enum):
    """A narrow store writes one field of its word, leaving the other bytes as they are."""

    B8 = 8
    B16 = 16


class ShflMode(Enum):
    UP = "up"
    DOWN = "down"
    BFLY = "bfly"
    IDX = "idx"


class VoteMode(Enum):
    BALLOT = "ballot"
    ANY = "any"
    ALL = "all"


class Special(Enum):
    TID_X = "tid.x"
    TID_Y = "tid.y"
    TID_Z = "tid.z"
    NTID_X = "ntid.x"
    NTID_Y = "ntid.y"
    NTID_Z = "ntid.z"
    CTAID_X = "ctaid.x"
    CTAID_Y = "ctaid.y"
    CTAID_Z = "ctaid.z"
    NCTAID_X = "nctaid.x"
    NCTAID_Y = "nctaid.y"
    NCTAID_Z = "nctaid.z"
    LANEID = "laneid"
    WARPID = "warpid"


Mode = Cond | PredFn | AtomOp | StoreWidth | ShflMode | VoteMode | Special | None


@dataclass(frozen=True)
class Instr:
    """One machine instruction.

    Register fields index the lane's register file (0 is the zero register); predicate
    fields index its predicate file. `b` is a register unless `b_imm` holds a 32-bit
    immediate; `c` is a register unless `c_imm` holds shfl's 13-bit clamp/segmask constant
    (the only instruction with an immediate c, so that an instruction fits one ROM row).
    """

    op: Op
    rd: int = 0  # destination register (0: none)
    a: int = 0
    b: int = 0
    c: int = 0
    b_imm: int | None = None
    c_imm: int | None = None
    imm: int = 0  # address offset (LD/ST/ATOM), in bytes
    mode: Mode = None
    pd: int | None = None  # destination predicate (SETP, PLOP, VOTE any/all, SHFL in-range)
    pa: int = 0  # source predicates (PLOP: pa, pb; SEL: pa)
    pb: int = 0
    neg_a: bool = False
    neg_b: bool = False
    guard: int | None = None  # execute only where predicate `guard` is (not) set
    guard_neg: bool = False
    src_line: int = 0  # PTX line this instruction came from (0: synthesised)

    def __post_init__(self) -> None:
        for name in ("b_imm", "c_imm"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, value & WORD_MASK)
        object.__setattr__(self, "imm", self.imm & WORD_MASK)

    # -- register usage, for the listing and the circuit's write-back -----------------
    def reads(self) -> tuple[int, ...]:
        regs: list[int] = []
        op = self.op
        if op in BINARY_ALU_OPS or op in (Op.SETP, Op.SEL):
            regs += [self.a] + ([self.b] if self.b_imm is None else [])
        elif op in UNARY_ALU_OPS or op is Op.LD:
            regs.append(self.a)
        elif op is Op.ST:
            regs += [self.a] + ([self.b] if self.b_imm is None else [])
        elif op is Op.ATOM:
            regs += [self.a] + ([self.b] if self.b_imm is None else [])
            if self.mode is AtomOp.CAS:
                regs.append(self.c)
        elif op is Op.SHFL:
            regs += [self.a] + ([self.b] if self.b_imm is None else [])
            if self.c_imm is None:
                regs.append(self.c)
        return tuple(r for r in regs if r != 0)

    def writes(self) -> tuple[int, ...]:
        return (self.rd,) if self.rd != 0 else ()

    def pred_reads(self) -> tuple[int, ...]:
        preds: list[int] = []
        if self.op is Op.PLOP:
            preds += [self.pa, self.pb]
        elif self.op is Op.SEL or (self.op is Op.VOTE):
            preds.append(self.pa)
        if self.guard is not None:
            preds.append(self.guard)
        return tuple(preds)

    def pred_writes(self) -> tuple[int, ...]:
        return (self.pd,) if self.pd is not None else ()

    def __str__(self) -> str:
        return format_instr(self)


class TermKind(Enum):
    JUMP = "jump"  # every active lane continues at `target`
    BRANCH = "branch"  # per lane: pred (xor neg) ? target : other
    EXIT = "exit"  # the active lanes finish
    BARRIER = "barrier"  # bar.sync: the warp waits for its CTA, then continues at `target`


@dataclass(frozen=True)
class Terminator:
    kind: TermKind
    target: int = 0
    other: int = 0
    pred: int = 0
    neg: bool = False
    src_line: int = 0

    def successors(self) -> tuple[int, ...]:
        if self.kind is TermKind.EXIT:
            return ()
        if self.kind is TermKind.BRANCH:
            return (self.target, self.other)
        return (self.target,)

    def __str__(self) -> str:
        if self.kind is TermKind.JUMP:
            return f"jump B{self.target}"
        if self.kind is TermKind.BRANCH:
            bang = "!" if self.neg else ""
            return f"branch {bang}p{self.pred} ? B{self.target} : B{self.other}"
        if self.kind is TermKind.BARRIER:
            return f"barrier -> B{self.target}"
        return "exit"


@dataclass(frozen=True)
class Block:
    instrs: tuple[Instr, ...]
    term: Terminator

    def registers_read(self) -> tuple[int, ...]:
        return tuple(sorted({r for i in self.instrs for r in i.reads()}))

    def registers_written(self) -> tuple[int, ...]:
        return tuple(sorted({r for i in self.instrs for r in i.writes()}))


@dataclass(frozen=True)
class Param:
    """A kernel parameter: one memory word in the param area."""

    name: str
    kind: str  # "pointer" or "scalar"
    ctype: str  # "u32", "s32", "u64" as declared in PTX
    word: int  # word index of its slot


@dataclass(frozen=True)
class Program:
    """A lowered kernel: ROM blocks plus the memory layout the host must honour.

    Memory layout (words): [params][static data: __constant__ and __device__ variables]
    [shared memory of the CTA: static, then the launch's dynamic shared_mem bytes]
    [arrays, placed by the host].
    """

    name: str
    blocks: tuple[Block, ...]
    params: tuple[Param, ...]
    shared_words: int
    registers_used: int  # highest register index written or read
    predicates_used: int
    spec: MachineSpec
    static_data: tuple[int, ...] = ()  # initial words of the static variables
    ptx: str = field(default="", repr=False)
    whole_warp: str = ""  # '<.cu line> <intrinsic>' that needs the block in one warp (lower.warps)
    dynamic_shared: bool = False  # extern __shared__: the launch gives its size (shared_mem)

    @property
    def param_words(self) -> int:
        return len(self.params)

    @property
    def static_base_word(self) -> int:
        return self.param_words

    @property
    def shared_base_word(self) -> int:
        return self.param_words + len(self.static_data)

    @property
    def data_base_word(self) -> int:
        """First word the host may use for the launch's arrays."""
        return self.shared_base_word + self.shared_words

    def validate(self) -> None:
        """Check the program against its MachineSpec; raise ValueError naming the limit."""
        spec = self.spec
        if not self.blocks:
            raise ValueError("program has no blocks")
        if len(self.blocks) > spec.rom_blocks:
            raise ValueError(
                f"program needs {len(self.blocks)} ROM blocks; the machine has {spec.rom_blocks}"
            )
        for number, block in enumerate(self.blocks):
            if len(block.instrs) > spec.block_size:
                raise ValueError(
                    f"block B{number} has {len(block.instrs)} instructions; "
                    f"the limit is {spec.block_size}"
                )
            loads = sum(1 for i in block.instrs if i.op is Op.LD)
            stores = [s for s, i in enumerate(block.instrs) if i.op in STORE_OPS]
            if loads > spec.loads_per_block or len(stores) > spec.stores_per_block:
                raise ValueError(
                    f"block B{number} has {loads} loads and {len(stores)} stores/atomics; "
                    f"the limits are {spec.loads_per_block} and {spec.stores_per_block}"
                )
            if stores and spec.stores_alone and len(block.instrs) > 1:
                raise ValueError(
                    f"block B{number} has a store/atomic and {len(block.instrs) - 1} other "
                    "instructions; on this machine a store/atomic is alone in its block"
                )
            if stores and any(i.op is Op.LD for i in block.instrs[stores[0] :]):
                raise ValueError(f"block B{number} loads after a store; loads must come first")
            for target in block.term.successors():
                if not 0 <= target < len(self.blocks):
                    raise ValueError(f"block B{number} jumps to missing block B{target}")
            for instr in block.instrs:
                if instr.c_imm is not None and (instr.op is not Op.SHFL or instr.c_imm >> 13):
                    raise ValueError(f"B{number}: only shfl takes an immediate c (13 bits)")
                for reg in (instr.rd, instr.a, instr.b, instr.c):
                    if not 0 <= reg < spec.registers:
                        raise ValueError(f"B{number}: register r{reg} out of range in {instr}")
                for pred in (*instr.pred_reads(), *instr.pred_writes()):
                    if not 0 <= pred < spec.predicates:
                        raise ValueError(f"B{number}: predicate p{pred} out of range in {instr}")
        words = self.data_base_word
        if words > spec.memory_words:
            raise ValueError(
                f"params and shared memory need {words} words; the machine has {spec.memory_words}"
            )


def address_fault(instr: Instr, address: int, memory_bytes: int) -> str | None:
    """Why a load/store/atomic at byte `address` traps (None: it does not), in the words
    of the trap message: it must be aligned to its access (a word; st.8 / st.16: 1 / 2
    bytes) and inside memory."""
    if address % access_bytes(instr):
        return misaligned_fault(instr)
    if address >= memory_bytes:
        return outside_memory_fault(memory_bytes)
    return None


def access_bytes(instr: Instr) -> int:
    """The bytes one lane's access moves: a word, or st.8 / st.16's 1 / 2."""
    return instr.mode.value // 8 if isinstance(instr.mode, StoreWidth) else WORD_BYTES


def misaligned_fault(instr: Instr) -> str:
    return f"is not {access_bytes(instr)}-byte aligned"


def outside_memory_fault(memory_bytes: int) -> str:
    return f"is outside memory (0..{memory_bytes - 1:#x})"


def illegal_address_message(
    thread: int,
    cta: int,
    block_no: int,
    slot: int,
    instr: Instr,
    address: int | None,
    fault: str,
) -> str:
    """The trap message for an illegal address (the interpreter's and the model's).
    `address` None: the address register was written earlier in the same block, so the
    model's recurrent state, which the host reads, does not hold it."""
    where = f" (PTX line {instr.src_line})" if instr.src_line else ""
    if address is None:
        at = f"the byte address (r{instr.a}, written earlier in B{block_no}, is not readable)"
    else:
        at = f"byte address {address:#x}"
    return (
        f"illegal address: thread {thread} of CTA {cta} at B{block_no}.{slot} '{instr}'{where}: "
        f"{at} {fault}"
    )


def _src_b(instr: Instr) -> str:
    return f"{instr.b_imm:#x}" if instr.b_imm is not None else f"r{instr.b}"


def _src_c(instr: Instr) -> str:
    return f"{instr.c_imm:#x}" if instr.c_imm is not None else f"r{instr.c}"


def _addr(instr: Instr) -> str:
    return f"[r{instr.a}+{instr.imm:#x}]" if instr.imm else f"[r{instr.a}]"


def format_instr(instr: Instr) -> str:
    """Assembly text of one instruction, e.g. `@!p1 add r3, r1, 0x4`."""
    op = instr.op
    guard = ""
    if instr.guard is not None:
        guard = f"@{'!' if instr.guard_neg else ''}p{instr.guard} "
    mode = f".{instr.mode.value}" if instr.mode is not None else ""
    if op in BINARY_ALU_OPS:
        body = f"{op.value} r{instr.rd}, r{instr.a}, {_src_b(instr)}"
    elif op in UNARY_ALU_OPS:
        body = f"{op.value} r{instr.rd}, r{instr.a}"
    elif op is Op.SETP:
        body = f"setp{mode} p{instr.pd}, r{instr.a}, {_src_b(instr)}"
    elif op is Op.PLOP:
        na, nb = ("!" if instr.neg_a else ""), ("!" if instr.neg_b else "")
        body = f"plop{mode} p{instr.pd}, {na}p{instr.pa}, {nb}p{instr.pb}"
    elif op is Op.SEL:
        body = f"sel r{instr.rd}, p{instr.pa}, r{instr.a}, {_src_b(instr)}"
    elif op is Op.S2R:
        body = f"s2r r{instr.rd}, %{instr.mode.value}"  # type: ignore[union-attr]
    elif op is Op.LD:
        body = f"ld r{instr.rd}, {_addr(instr)}"
    elif op is Op.ST:
        body = f"st{mode} {_addr(instr)}, {_src_b(instr)}"
    elif op is Op.ATOM:
        extra = f", {_src_c(instr)}" if instr.mode is AtomOp.CAS else ""
        body = f"atom{mode} r{instr.rd}, {_addr(instr)}, {_src_b(instr)}{extra}"
    elif op is Op.SHFL:
        pd = f"|p{instr.pd}" if instr.pd is not None else ""
        body = f"shfl{mode} r{instr.rd}{pd}, r{instr.a}, {_src_b(instr)}, {_src_c(instr)}"
    elif op is Op.VOTE:
        dst = f"r{instr.rd}" if instr.mode is VoteMode.BALLOT else f"p{instr.pd}"
        body = f"vote{mode} {dst}, {'!' if instr.neg_a else ''}p{instr.pa}"
    else:  # pragma: no cover - every Op is handled above
        raise AssertionError(op)
    return guard + body
