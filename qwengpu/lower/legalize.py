"""Legalization: rewrite instructions the MachineSpec's ALU lacks into ones it has.

Runs on virtual registers, after translation and before register allocation, so that the
expansions take fresh temporaries. One rule so far: without a high multiplier
(`MachineSpec.mul_high` false, as on the model's machines), mulhu and mulhs become
16 x 16-bit pieces of mul (each exact in 32 bits) summed with their carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from qwengpu.isa.instr import Instr, Op
from qwengpu.isa.spec import WORD_BITS, MachineSpec
from qwengpu.lower.translate import ZERO, VBlock

HALF_BITS = WORD_BITS // 2
HALF_MASK = (1 << HALF_BITS) - 1


def legalize(blocks: list[VBlock], spec: MachineSpec, temp: Callable[[], int]) -> None:
    """Rewrite, in place, every instruction of `blocks` that `spec` cannot run."""
    if spec.mul_high:
        return
    for block in blocks:
        out: list[Instr] = []
        for ins in block.instrs:
            out += mul_high_pieces(ins, temp) if ins.op in (Op.MULHU, Op.MULHS) else [ins]
        block.instrs = out


def mul_high_pieces(ins: Instr, temp: Callable[[], int]) -> list[Instr]:
    """mulhu / mulhs rd, a, b as mul, and, shr, sra, add, sub. With a = ah 2^16 + al and
    b = bh 2^16 + bl: hi(a b) = ah bh + hi16(al bh) + hi16(ah bl) + the carry out of
    hi16(al bl) + lo16(al bh) + lo16(ah bl). Signed: hi(a b) - (a < 0 ? b : 0) -
    (b < 0 ? a : 0), mod 2^32. Every piece keeps the instruction's guard and PTX line."""
    out: list[Instr] = []

    def emit(op: Op, a: int, b: int | None = None, imm: int | None = None) -> int:
        rd = temp()
        out.append(
            dataclasses.replace(ins, op=op, rd=rd, a=a, b=b or 0, b_imm=imm, c=0, c_imm=None)
        )
        return rd

    a = ins.a
    a_lo, a_hi = emit(Op.AND, a, imm=HALF_MASK), emit(Op.SHR, a, imm=HALF_BITS)
    if ins.b_imm is None:
        b = ins.b
        b_lo, b_hi = emit(Op.AND, b, imm=HALF_MASK), emit(Op.SHR, b, imm=HALF_BITS)

        def times(x: int, half: int) -> int:
            return emit(Op.MUL, x, b_lo if half == 0 else b_hi)
    else:  # the immediate's halves are constants

        def times(x: int, half: int) -> int:
            return emit(Op.MUL, x, imm=(ins.b_imm >> (HALF_BITS * half)) & HALF_MASK)

    mid = emit(Op.SHR, times(a_lo, 0), imm=HALF_BITS)  # hi16(al bl)
    cross_lo = times(a_lo, 1)  # al bh
    mid = emit(Op.ADD, mid, emit(Op.AND, cross_lo, imm=HALF_MASK))
    cross_lo_top = emit(Op.SHR, cross_lo, imm=HALF_BITS)
    cross_hi = times(a_hi, 0)  # ah bl
    mid = emit(Op.ADD, mid, emit(Op.AND, cross_hi, imm=HALF_MASK))
    cross_hi_top = emit(Op.SHR, cross_hi, imm=HALF_BITS)
    high = emit(Op.ADD, times(a_hi, 1), emit(Op.SHR, mid, imm=HALF_BITS))
    high = emit(Op.ADD, high, cross_lo_top)
    if ins.op is Op.MULHU:
        out.append(dataclasses.replace(ins, op=Op.ADD, a=high, b=cross_hi_top, b_imm=None))
        return out
    high = emit(Op.ADD, high, cross_hi_top)
    # signed: subtract b where a < 0 and a where b < 0 (the sign masks are all ones)
    b_term = (
        emit(Op.AND, emit(Op.SRA, a, imm=WORD_BITS - 1), ins.b)
        if ins.b_imm is None
        else emit(Op.AND, emit(Op.SRA, a, imm=WORD_BITS - 1), imm=ins.b_imm)
    )
    high = emit(Op.SUB, high, b_term)
    if ins.b_imm is None:
        a_term = emit(Op.AND, emit(Op.SRA, ins.b, imm=WORD_BITS - 1), a)
    elif ins.b_imm >> (WORD_BITS - 1):
        a_term = a
    else:
        a_term = ZERO
    out.append(dataclasses.replace(ins, op=Op.SUB, a=high, b=a_term, b_imm=None))
    return out
