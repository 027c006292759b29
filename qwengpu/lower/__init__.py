"""PTX -> qgpu machine program.

translate (virtual registers, basic blocks) -> legalize for the spec's ALU -> simplify ->
allocate registers -> number blocks for reconvergence -> cut into ROM blocks -> check the
MachineSpec
"""

from __future__ import annotations

import re

from qwengpu.cuda import ptx_ir as ir
from qwengpu.cuda.ptx import source_lines
from qwengpu.errors import PtxError, ResourceError
from qwengpu.isa.instr import Block, Param, Program, TermKind
from qwengpu.isa.spec import DEFAULT_SPEC, WORD_BYTES, MachineSpec
from qwengpu.lower.cfg import cut_blocks, number_blocks, simplify, successors_of
from qwengpu.lower.legalize import legalize
from qwengpu.lower.regalloc import (
    allocate,
    branch_pred_uses,
    eliminate_dead_code,
    is_move,
    predicate_use,
    register_use,
    rewrite,
)
from qwengpu.lower.translate import Layout, Translator
from qwengpu.lower.warps import WarpUse, check_warp_width

__all__ = ["lower_kernel"]


def _initial_bytes(var: ir.Variable) -> bytes:
    """A static variable's initial contents, little-endian, zero-filled to its size."""
    if not var.init:
        return bytes(var.size_bytes)
    element = max(1, _type_bytes(var.ptx_type))
    data = b"".join((v & ((1 << (8 * element)) - 1)).to_bytes(element, "little") for v in var.init)
    return data.ljust(var.size_bytes, b"\0")


def _type_bytes(ptx_type: str) -> int:
    digits = "".join(ch for ch in ptx_type if ch.isdigit())
    return int(digits) // 8 if digits else 0


def _layout(
    module: ir.Module, kernel: ir.Kernel
) -> tuple[Layout, tuple[Param, ...], tuple[int, ...], int]:
    """Params take one word each from address 0; static variables (__constant__,
    __device__) follow with their initial contents, then shared variables."""
    params = []
    symbols: dict[str, int] = {}
    for index, param in enumerate(kernel.params):
        aggregate = param.size_bytes != _type_bytes(param.ptx_type)  # `.b8 name[N]`
        if param.size_bytes > 8 or aggregate:
            raise PtxError(
                f"param #{index + 1} ('{param.name}') is a struct or vector passed by value "
                f"({param.size_bytes} bytes): only 32-bit scalars and pointers are supported; "
                "pass its fields as separate int parameters, or a pointer to it",
                kernel.line,
            )
        kind = "pointer" if param.size_bytes == 8 else "scalar"
        params.append(Param(param.name, kind, param.ptx_type, index))
        symbols[param.name] = index * WORD_BYTES
    address = len(params) * WORD_BYTES
    variables = [*module.variables, *kernel.variables]
    static = bytearray()
    for var in variables:
        if var.space == "local":
            raise PtxError(
                f"local array '{var.name}' is not supported (no per-thread stack)", var.line
            )
        if var.space in ("global", "const"):
            align = max(WORD_BYTES, var.align)
            padding = -(address + len(static)) % align
            static += bytes(padding)
            symbols[var.name] = address + len(static)
            static += _initial_bytes(var)
    static += bytes(-len(static) % WORD_BYTES)
    static_words = tuple(
        int.from_bytes(static[i : i + WORD_BYTES], "little")
        for i in range(0, len(static), WORD_BYTES)
    )
    address += len(static)
    shared_start = address
    for var in variables:
        if var.space == "shared" and not var.extern:
            align = max(WORD_BYTES, var.align)
            address = -(-address // align) * align
            symbols[var.name] = address
            address += -(-var.size_bytes // WORD_BYTES) * WORD_BYTES
    dynamic = [var for var in variables if var.space == "shared" and var.extern]
    if dynamic:  # extern __shared__ arrays all start where the static ones end (as CUDA's)
        align = max(WORD_BYTES, *(var.align for var in dynamic))
        address = -(-address // align) * align
        symbols.update(dict.fromkeys((var.name for var in dynamic), address))
    shared_words = (address - shared_start) // WORD_BYTES
    return Layout(symbols), tuple(params), static_words, shared_words


def lower_kernel(
    module: ir.Module,
    kernel: ir.Kernel,
    spec: MachineSpec = DEFAULT_SPEC,
    *,
    ptx: str = "",
    narrow_warps: bool = False,
) -> Program:
    """Lower one PTX entry to a Program for `spec`; errors name the CUDA line (where the
    PTX has line info), the PTX line and the limit. Warp intrinsics that assume CUDA's
    32-lane warps are refused unless `narrow_warps` (lower.warps)."""
    try:
        return _lower(module, kernel, spec, ptx, narrow_warps)
    except PtxError as exc:
        raise exc.at_source(source_lines(ptx)) from None
    except ResourceError as exc:
        raise ResourceError(_with_source(str(exc), source_lines(ptx))) from None


def _with_source(message: str, lines: dict[int, tuple[str, int]]) -> str:
    """`message` with the CUDA line after each "PTX line N" that has one."""

    def named(match: re.Match) -> str:
        found = lines.get(int(match[1]))
        return match[0] if found is None else f"{match[0]} ({found[0]}:{found[1]})"

    return re.sub(r"PTX line (\d+)", named, message)


CALLS = {
    "vprintf": "printf is not supported: the machine has no host output; store the values "
    "in an output array and print them on the host",
    "malloc": "device malloc is not supported: the machine has no heap; pass a scratch "
    "array as a kernel argument",
    "free": "device free is not supported: the machine has no heap (no malloc either)",
    "__assertfail": "assert is not supported: the machine cannot stop with a message; "
    "write a flag into an output array",
}
"""What a call to a CUDA runtime function in the PTX was, in the source, and the way out."""


def _refuse_calls(kernel: ir.Kernel) -> None:
    """A call the compiler left (printf, malloc, assert, a __noinline__ or recursive
    function, a function pointer) refused by what it is in CUDA, not by its PTX."""
    for instr in kernel.body:
        if not isinstance(instr, ir.Instruction) or instr.opcode != "call":
            continue
        callee = next(o for o in instr.operands if not isinstance(o, ir.ParamList))
        if isinstance(callee, ir.Sym):
            message = CALLS.get(
                callee.name,
                f"a call to '{_demangled(callee.name)}' is not supported: device functions must be "
                "inlined (drop __noinline__; a recursive function cannot be)",
            )
        else:
            message = "calls through function pointers are not supported"
        raise PtxError(message, instr.line, instr.text)


def _demangled(name: str) -> str:
    """The function name of a C++-mangled symbol (`_Z5twicei` -> `twice`), else `name`."""
    match = re.match(r"_Z(\d+)", name)
    if match is None:
        return name
    start = match.end()
    return name[start : start + int(match[1])] or name


def _lower(
    module: ir.Module, kernel: ir.Kernel, spec: MachineSpec, ptx: str, narrow_warps: bool
) -> Program:
    _refuse_calls(kernel)
    warps = WarpUse() if narrow_warps else check_warp_width(kernel, spec.lanes, source_lines(ptx))
    layout, params, static_data, shared_words = _layout(module, kernel)
    variables = (*module.variables, *kernel.variables)
    dynamic_shared = any(v.space == "shared" and v.extern for v in variables)
    layout.constants["WARP_SZ"] = spec.lanes  # warpSize: the target's warp width
    translator = Translator(kernel, layout)
    vblocks = translator.translate()
    legalize(vblocks, spec, translator.temp)
    blocks = simplify(vblocks)
    successors = {b.label: successors_of(b.term) for b in blocks}  # type: ignore[arg-type]
    eliminate_dead_code(blocks, successors)
    regs = allocate(
        blocks,
        successors,
        register_use,
        lambda b: (),
        list(range(1, spec.registers)),
        translator.names,
        "registers",
        "usable registers per thread (r1..r15)" if spec.registers == 16 else "usable registers",
    )
    preds = allocate(
        blocks,
        successors,
        predicate_use,
        branch_pred_uses,
        list(range(spec.predicates)),
        translator.pred_names,
        "predicates",
        "predicate registers",
    )
    for block in blocks:
        rewritten = (rewrite(i, regs.colour, preds.colour) for i in block.instrs)
        block.instrs = [i for i in rewritten if not (is_move(i) and i.rd == i.a)]
        term = block.term
        assert term is not None
        if term.kind is TermKind.BRANCH:
            term.pred = preds.colour[term.pred]
    ordered = number_blocks(blocks)
    machine_blocks: list[Block] = cut_blocks(ordered, spec)
    program = Program(
        name=kernel.name,
        blocks=tuple(machine_blocks),
        params=params,
        shared_words=shared_words,
        registers_used=regs.used,
        predicates_used=preds.used + 1,
        spec=spec,
        static_data=static_data,
        ptx=ptx,
        whole_warp=warps.whole_warp,
        dynamic_shared=dynamic_shared,
    )
    try:
        program.validate()
    except ValueError as exc:
        raise ResourceError(f"kernel '{kernel.name}': {exc}") from None
    return program
