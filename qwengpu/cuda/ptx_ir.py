"""PTX IR: what the parser produces and the lowering consumes.

It stays close to the text: an instruction is its opcode, its dot-modifiers in source
order, its operands and its guard, with the PTX line it came from for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Reg:
    """A virtual register such as %r3, %rd1, %p2 (the name includes the '%')."""

    name: str


@dataclass(frozen=True)
class SpecialReg:
    """A special register without the '%': 'tid.x', 'ctaid.y', 'laneid', 'warpid', ..."""

    name: str


@dataclass(frozen=True)
class Imm:
    """An integer literal (decimal, hex 0x.., octal 0.., binary 0b..; may be negative).

    Float literals (0f3F800000 / 0d...) are kept as their bit pattern in `value` with
    `is_float` set, so the lowering can refuse them clearly.
    """

    value: int
    is_float: bool = False


@dataclass(frozen=True)
class Sym:
    """A symbol: a kernel parameter, a .shared/.global variable or a label."""

    name: str


@dataclass(frozen=True)
class Addr:
    """A memory operand [base+offset]; base is a register, a symbol, or None ([imm])."""

    base: Reg | Sym | None
    offset: int = 0


@dataclass(frozen=True)
class RegPair:
    """A two-destination operand such as %r2|%p1 (shfl) or %p1|%p2 (setp)."""

    first: Reg
    second: Reg


@dataclass(frozen=True)
class Vector:
    """A vector operand {%r1, %r2, ...} (ld.v2/.v4, mov.b64 {..}); `_` is Reg('_')."""

    elems: tuple[Reg | Imm, ...]


@dataclass(frozen=True)
class ParamList:
    """A parenthesised list of a `call`: (retval0) or (param0, param1)."""

    elems: tuple[Sym | Reg | Imm, ...]


Operand = Reg | SpecialReg | Imm | Sym | Addr | RegPair | Vector | ParamList


@dataclass(frozen=True)
class Guard:
    pred: Reg
    negated: bool = False


@dataclass(frozen=True)
class Instruction:
    opcode: str  # e.g. "add", "setp", "ld", "shfl", "bra"
    modifiers: tuple[str, ...]  # e.g. ("lt", "s32") for setp.lt.s32, ("global", "u32")
    operands: tuple[Operand, ...]
    guard: Guard | None
    line: int  # 1-based line in the PTX text
    text: str  # the source line, stripped

    @property
    def full_opcode(self) -> str:
        return ".".join((self.opcode, *self.modifiers))


@dataclass(frozen=True)
class Label:
    name: str  # without the trailing ':'
    line: int


@dataclass(frozen=True)
class KernelParam:
    name: str
    ptx_type: str  # "u64", "u32", "s32", "b32", "b8", ...
    size_bytes: int  # size of the declared type (times the array length, if any)
    align: int = 0  # from .align, 0 if absent
    is_pointer: bool = False  # .ptr attribute seen, or a u64 later used as an address


@dataclass(frozen=True)
class Variable:
    """A module- or kernel-level variable: .shared, .global, .const or .local."""

    name: str
    space: str  # "shared", "global", "const", "local"
    ptx_type: str
    size_bytes: int
    align: int
    line: int
    init: tuple[int, ...] | None = None  # initializer elements, if any
    extern: bool = False  # `.extern .shared` (dynamic shared memory, size 0)


@dataclass
class Kernel:
    name: str  # the entry name as in PTX (possibly mangled)
    params: list[KernelParam]
    body: list[Instruction | Label]
    variables: list[Variable] = field(default_factory=list)  # declared inside the kernel
    line: int = 0
    is_entry: bool = True  # .entry (kernel) vs .func (device function)
    returns: list[KernelParam] = field(default_factory=list)  # .func return params
    # Declared registers -> PTX type ("%r1" -> "b32", "%p2" -> "pred"). A register declared
    # in a nested { } scope that shadows an outer one is renamed "%p1$1" everywhere in
    # that scope, so names stay unique across the flattened body.
    registers: dict[str, str] = field(default_factory=dict)


@dataclass
class Module:
    version: str
    target: str
    address_size: int
    kernels: dict[str, Kernel]  # by PTX name, .entry and .func alike
    variables: list[Variable]  # module-level (.global / .shared / .const)
    text: str = field(repr=False, default="")
