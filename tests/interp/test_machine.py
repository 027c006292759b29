"""The reference interpreter on hand-assembled programs: exact semantics and scheduling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qwengpu.errors import StepLimitError, TrapError
from qwengpu.interp.machine import (
    EXITED,
    LaunchGeometry,
    alu,
    atomic,
    compare,
    run_program,
    shuffle_source,
    to_signed,
)
from qwengpu.isa.instr import (
    AtomOp,
    Block,
    Cond,
    Instr,
    Op,
    Program,
    ShflMode,
    Special,
    Terminator,
    TermKind,
)
from qwengpu.isa.spec import DEFAULT_SPEC, WORD_MASK

u32 = st.integers(0, WORD_MASK)
EXIT = Terminator(TermKind.EXIT)


def program(*blocks: Block, shared_words: int = 0) -> Program:
    prog = Program("t", tuple(blocks), (), shared_words, 15, 4, DEFAULT_SPEC)
    prog.validate()
    return prog


def run(prog: Program, threads: int = 4, ctas: int = 1, memory: list[int] | None = None):
    image = memory or [0] * DEFAULT_SPEC.memory_words
    return run_program(prog, LaunchGeometry((ctas, 1, 1), (threads, 1, 1)), image)


def store_tid_times(k: int) -> Block:
    """mem[tid] = tid * k."""
    return Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.MUL, rd=2, a=1, b_imm=k),
            Instr(Op.SHL, rd=1, a=1, b_imm=2),
            Instr(Op.ST, a=1, b=2),
        ),
        EXIT,
    )


@given(u32, u32)
def test_alu_matches_two_complement_definitions(a: int, b: int) -> None:
    assert alu(Op.ADD, a, b) == (a + b) % 2**32
    assert alu(Op.SUB, a, b) == (a - b) % 2**32
    assert alu(Op.MUL, a, b) == (a * b) % 2**32
    assert alu(Op.MULHU, a, b) == (a * b) >> 32
    assert alu(Op.MULHS, a, b) == ((to_signed(a) * to_signed(b)) >> 32) % 2**32
    assert alu(Op.POPC, a, 0) == bin(a).count("1")
    assert alu(Op.BREV, alu(Op.BREV, a, 0), 0) == a
    assert compare(Cond.LT, a, b) == (to_signed(a) < to_signed(b))
    assert compare(Cond.LO, a, b) == (a < b)


@pytest.mark.parametrize("amount", [0, 1, 31, 32, 33, 255, WORD_MASK])
def test_shift_amounts_follow_ptx_clamping(amount: int) -> None:
    x = 0x80000001
    big = amount >= 32
    assert alu(Op.SHL, x, amount) == (0 if big else (x << amount) % 2**32)
    assert alu(Op.SHR, x, amount) == (0 if big else x >> amount)
    assert alu(Op.SRA, x, amount) == (WORD_MASK if big else (to_signed(x) >> amount) % 2**32)
    assert alu(Op.CLZ, 0, 0) == 32


def test_atomic_functions() -> None:
    assert atomic(AtomOp.MIN, 0xFFFFFFFF, 1, 0) == 0xFFFFFFFF  # -1 < 1 signed
    assert atomic(AtomOp.MINU, 0xFFFFFFFF, 1, 0) == 1
    assert atomic(AtomOp.CAS, 5, 5, 9) == 9
    assert atomic(AtomOp.CAS, 5, 4, 9) == 5
    assert atomic(AtomOp.INC, 3, 3, 0) == 0
    assert atomic(AtomOp.INC, 2, 3, 0) == 3
    assert atomic(AtomOp.DEC, 0, 3, 0) == 3
    assert atomic(AtomOp.DEC, 7, 3, 0) == 3
    assert atomic(AtomOp.DEC, 2, 3, 0) == 1


def test_shuffle_source_lanes_follow_ptx() -> None:
    full = 0x1F  # width 32: segmask 0, clamp 31
    assert shuffle_source(ShflMode.DOWN, 1, 2, full) == (3, True)
    assert shuffle_source(ShflMode.UP, 1, 2, 0) == (1, False)
    width4 = (32 - 4) << 8 | 0x1F
    assert shuffle_source(ShflMode.DOWN, 3, 1, width4) == (3, False)
    assert shuffle_source(ShflMode.BFLY, 2, 1, width4) == (3, True)
    assert shuffle_source(ShflMode.IDX, 2, 5, width4) == (1, True)  # 5 mod 4


def test_simd_store_and_every_lane_runs() -> None:
    state = run(program(store_tid_times(3)), threads=4)
    assert state.memory[:4] == [0, 3, 6, 9]
    assert state.steps == 1


def test_divergent_branch_reconverges_at_join() -> None:
    # B0: p0 = tid < 2 ; branch p0 ? B1 : B2 ; B1: r2 = 10 ; B2..: join stores
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.ADD, rd=2, a=0, b_imm=20),
            Instr(Op.SETP, pd=0, a=1, b_imm=2, mode=Cond.LO),
        ),
        Terminator(TermKind.BRANCH, target=1, other=2, pred=0),
    )
    b1 = Block((Instr(Op.ADD, rd=2, a=0, b_imm=10),), Terminator(TermKind.JUMP, target=2))
    b2 = Block(
        (Instr(Op.SHL, rd=3, a=1, b_imm=2), Instr(Op.ST, a=3, b=2)),
        EXIT,
    )
    state = run(program(b0, b1, b2))
    assert state.memory[:4] == [10, 10, 20, 20]
    # B0 all lanes, B1 lanes 0-1, B2 all lanes together (reconverged)
    assert [(s.block, s.active) for s in state.trace] == [
        (0, (0, 1, 2, 3)),
        (1, (0, 1)),
        (2, (0, 1, 2, 3)),
    ]


def test_loop_with_different_trip_counts_per_lane() -> None:
    # r1 = tid; r2 = 0; loop: r2 += 1; r1 -= 1; while r1 >= 0 (signed) ; store r2 at tid
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.ADD, rd=4, a=1, b_imm=0),
        ),
        Terminator(TermKind.JUMP, target=1),
    )
    b1 = Block(
        (
            Instr(Op.ADD, rd=2, a=2, b_imm=1),
            Instr(Op.SUB, rd=1, a=1, b_imm=1),
            Instr(Op.SETP, pd=1, a=1, b_imm=0, mode=Cond.GE),
        ),
        Terminator(TermKind.BRANCH, target=1, other=2, pred=1),
    )
    b2 = Block((Instr(Op.SHL, rd=4, a=4, b_imm=2), Instr(Op.ST, a=4, b=2)), EXIT)
    state = run(program(b0, b1, b2))
    assert state.memory[:4] == [1, 2, 3, 4]
    final = state.trace[-1]
    assert final.block == 2 and final.active == (0, 1, 2, 3)


def test_barrier_orders_warps() -> None:
    # every thread writes mem[tid] = tid+1, barrier, then reads its neighbour's word
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.ADD, rd=2, a=1, b_imm=1),
            Instr(Op.SHL, rd=3, a=1, b_imm=2),
            Instr(Op.ST, a=3, b=2),
        ),
        Terminator(TermKind.BARRIER, target=1),
    )
    b1 = Block(
        (
            Instr(Op.AND, rd=4, a=2, b_imm=7),  # (tid + 1) % 8
            Instr(Op.SHL, rd=4, a=4, b_imm=2),
            Instr(Op.LD, rd=5, a=4),
        ),
        Terminator(TermKind.JUMP, target=2),
    )
    b2 = Block((Instr(Op.ST, a=3, imm=32, b=5),), EXIT)
    state = run(program(b0, b1, b2), threads=8)
    assert state.memory[8:16] == [2, 3, 4, 5, 6, 7, 8, 1]
    warps = [s.warp for s in state.trace]
    assert warps[:2] == [0, 1]  # both warps reach the barrier before either goes on


def test_atomics_from_lanes_serialise_in_lane_order() -> None:
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.ATOM, rd=2, a=0, imm=0, b=1, mode=AtomOp.ADD),
            Instr(Op.SHL, rd=1, a=1, b_imm=2),
        ),
        Terminator(TermKind.JUMP, target=1),
    )
    b1 = Block((Instr(Op.ST, a=1, imm=4, b=2),), EXIT)
    state = run(program(b0, b1))
    assert state.memory[0] == 0 + 1 + 2 + 3
    assert state.memory[1:5] == [0, 0, 1, 3]  # old values seen lane 0 first


def test_shuffle_down_reads_before_writes() -> None:
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.TID_X),
            Instr(Op.SHFL, rd=1, a=1, b_imm=1, c_imm=0x1F, mode=ShflMode.DOWN, pd=0),
            Instr(Op.S2R, rd=3, mode=Special.TID_X),
            Instr(Op.SHL, rd=3, a=3, b_imm=2),
        ),
        Terminator(TermKind.JUMP, target=1),
    )
    b1 = Block((Instr(Op.ST, a=3, b=1),), EXIT)
    state = run(program(b0, b1))
    assert state.memory[:4] == [1, 2, 3, 3]  # lane 3's source (4) is outside the warp


def test_ctas_run_one_after_another() -> None:
    b0 = Block(
        (
            Instr(Op.S2R, rd=1, mode=Special.CTAID_X),
            Instr(Op.SHL, rd=2, a=1, b_imm=2),
            Instr(Op.ATOM, rd=0, a=2, b_imm=1, mode=AtomOp.ADD),
        ),
        EXIT,
    )
    state = run(program(b0), threads=3, ctas=3)
    assert state.memory[:3] == [3, 3, 3]
    assert [s.cta for s in state.trace] == [0, 1, 2]


def test_out_of_range_access_traps_with_location() -> None:
    b0 = Block((Instr(Op.LD, rd=1, a=0, imm=4 * 200, src_line=17),), EXIT)
    with pytest.raises(TrapError, match=r"illegal address.*PTX line 17.*outside memory"):
        run(program(b0))
    b1 = Block((Instr(Op.ST, a=0, imm=2, b=0),), EXIT)
    with pytest.raises(TrapError, match="not 4-byte aligned"):
        run(program(b1))


def test_runaway_loop_hits_step_budget() -> None:
    spin = Block((Instr(Op.ADD, rd=1, a=1, b_imm=1),), Terminator(TermKind.JUMP, target=0))
    with pytest.raises(StepLimitError, match="step budget of 4096"):
        run(program(spin))


def test_threads_beyond_the_block_never_run() -> None:
    state = run(program(store_tid_times(1)), threads=3)
    assert state.trace[0].active == (0, 1, 2)
    assert state.trace[0].next_blocks == (EXITED,) * 4
