"""PTX -> qgpu machine program.

translate (virtual registers, basic blocks) -> simplify -> allocate registers
-> number blocks for reconvergence -> cut into ROM blocks -> check the MachineSpec
"""

from __future__ import annotations

from qwengpu.cuda import ptx_ir as ir
from qwengpu.errors import PtxError, ResourceError
from qwengpu.isa.instr import Block, Param, Program
from qwengpu.isa.spec import DEFAULT_SPEC, WORD_BYTES, MachineSpec
from qwengpu.lower.cfg import cut_blocks, number_blocks, simplify, successors_of
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

__all__ = ["lower_kernel"]


def _layout(module: ir.Module, kernel: ir.Kernel) -> tuple[Layout, tuple[Param, ...], int]:
    """Params take one word each from address 0; shared variables follow them."""
    params = []
    param_address = {}
    for index, param in enumerate(kernel.params):
        if param.size_bytes > 8:
            raise PtxError(
                f"param '{param.name}' is {param.size_bytes} bytes: only 32-bit scalars and "
                "pointers are supported (no structs or arrays by value)",
                kernel.line,
            )
        kind = "pointer" if param.size_bytes == 8 else "scalar"
        params.append(Param(param.name, kind, param.ptx_type, index))
        param_address[param.name] = index * WORD_BYTES
    address = len(params) * WORD_BYTES
    shared_address = {}
    for var in [*module.variables, *kernel.variables]:
        if var.space == "shared":
            if var.extern:
                raise PtxError(
                    f"dynamic shared memory ('extern __shared__ {var.name}') is not supported; "
                    "declare the array with a fixed size",
                    var.line,
                )
            align = max(WORD_BYTES, var.align)
            address = -(-address // align) * align
            shared_address[var.name] = address
            address += -(-var.size_bytes // WORD_BYTES) * WORD_BYTES
        elif var.space in ("global", "const"):
            raise PtxError(
                f"{var.space} variable '{var.name}' is not supported: pass data as a kernel "
                "argument",
                var.line,
            )
        elif var.space == "local":
            raise PtxError(
                f"local array '{var.name}' is not supported (no per-thread stack)", var.line
            )
    shared_words = address // WORD_BYTES - len(params)
    return Layout(param_address, shared_address), tuple(params), shared_words


def lower_kernel(
    module: ir.Module, kernel: ir.Kernel, spec: MachineSpec = DEFAULT_SPEC, *, ptx: str = ""
) -> Program:
    """Lower one PTX entry to a Program for `spec`; errors name the PTX line and the limit."""
    layout, params, shared_words = _layout(module, kernel)
    translator = Translator(kernel, layout)
    blocks = simplify(translator.translate())
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
        if term.kind.value == "branch":
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
        ptx=ptx,
    )
    try:
        program.validate()
    except ValueError as exc:
        raise ResourceError(f"kernel '{kernel.name}': {exc}") from None
    return program
