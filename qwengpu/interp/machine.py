"""The reference interpreter of the qgpu machine: the oracle the model is checked against.

One step runs one block for one warp, exactly as one EXEC token will in the model:

1. Scheduling: the CTA's lowest-numbered warp that has live lanes and is not waiting at a
   barrier runs. When every live warp waits, the barrier releases them all.
2. Divergence: each lane holds its next block number. The warp runs the lowest pending
   block; the lanes waiting there are the active ones (minimum-PC scheduling; with blocks
   in reverse post-order, lanes reconverge at join points on their own).
3. The block's instructions run in order; within one instruction every active lane reads
   its operands before any lane writes (SIMD), and memory side effects apply in lane order.
4. The terminator sets each active lane's next block (or retires it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from qwengpu.errors import StepLimitError, TrapError
from qwengpu.isa.instr import (
    SHFL_LANE_BITS,
    SHFL_SEGMASK_SHIFT,
    AtomOp,
    Block,
    Cond,
    Instr,
    Op,
    PredFn,
    Program,
    ShflMode,
    Special,
    StoreWidth,
    TermKind,
    VoteMode,
    address_fault,
    illegal_address_message,
)
from qwengpu.isa.spec import WORD_BITS, WORD_BYTES, WORD_MASK, index_3d

EXITED = -1  # a lane's next-block value once it has retired
SIGN_BIT = 1 << (WORD_BITS - 1)
LANE_FIELD_MASK = (1 << SHFL_LANE_BITS) - 1


def to_signed(value: int) -> int:
    return value - (1 << WORD_BITS) if value & SIGN_BIT else value


def compare(cond: Cond, a: int, b: int) -> bool:
    if cond in (Cond.LT, Cond.LE, Cond.GT, Cond.GE):
        a, b = to_signed(a), to_signed(b)
    return {
        Cond.EQ: a == b,
        Cond.NE: a != b,
        Cond.LT: a < b,
        Cond.LE: a <= b,
        Cond.GT: a > b,
        Cond.GE: a >= b,
        Cond.LO: a < b,
        Cond.LS: a <= b,
        Cond.HI: a > b,
        Cond.HS: a >= b,
    }[cond]


def alu(op: Op, a: int, b: int) -> int:
    """Exact 32-bit semantics of the binary and unary ALU ops (inputs are u32)."""
    if op is Op.ADD:
        return (a + b) & WORD_MASK
    if op is Op.SUB:
        return (a - b) & WORD_MASK
    if op is Op.MUL:
        return (a * b) & WORD_MASK
    if op is Op.MULHU:
        return (a * b) >> WORD_BITS
    if op is Op.MULHS:
        return ((to_signed(a) * to_signed(b)) >> WORD_BITS) & WORD_MASK
    if op is Op.AND:
        return a & b
    if op is Op.OR:
        return a | b
    if op is Op.XOR:
        return a ^ b
    if op is Op.SHL:
        return (a << b) & WORD_MASK if b < WORD_BITS else 0
    if op is Op.SHR:
        return a >> b if b < WORD_BITS else 0
    if op is Op.SRA:
        return (to_signed(a) >> min(b, WORD_BITS - 1)) & WORD_MASK
    if op is Op.POPC:
        return bin(a).count("1")
    if op is Op.CLZ:
        return WORD_BITS - a.bit_length()
    if op is Op.BREV:
        return int(f"{a:032b}"[::-1], 2)
    raise AssertionError(f"not an ALU op: {op}")


def predicate_logic(fn: PredFn, x: bool, y: bool) -> bool:
    if fn is PredFn.AND:
        return x and y
    if fn is PredFn.OR:
        return x or y
    return x != y


def store_field(width: StoreWidth, old: int, value: int, address: int) -> int:
    """The word after a narrow store of `value` at byte `address` (little-endian)."""
    shift = (address % WORD_BYTES) * 8
    mask = ((1 << width.value) - 1) << shift
    return (old & ~mask & WORD_MASK) | ((value << shift) & mask)


ATOMIC_ALU_OPS = {AtomOp.ADD: Op.ADD, AtomOp.AND: Op.AND, AtomOp.OR: Op.OR, AtomOp.XOR: Op.XOR}


def atomic(fn: AtomOp, old: int, b: int, c: int) -> int:
    """The new memory word of an atomic read-modify-write."""
    if fn in ATOMIC_ALU_OPS:
        return alu(ATOMIC_ALU_OPS[fn], old, b)
    if fn is AtomOp.MIN:
        return old if to_signed(old) <= to_signed(b) else b
    if fn is AtomOp.MAX:
        return old if to_signed(old) >= to_signed(b) else b
    if fn is AtomOp.MINU:
        return min(old, b)
    if fn is AtomOp.MAXU:
        return max(old, b)
    if fn is AtomOp.EXCH:
        return b
    if fn is AtomOp.CAS:
        return c if old == b else old
    if fn is AtomOp.INC:
        return 0 if old >= b else old + 1
    if fn is AtomOp.DEC:
        return b if old == 0 or old > b else old - 1
    raise AssertionError(fn)


def shuffle_source(mode: ShflMode, lane: int, b: int, c: int) -> tuple[int, bool]:
    """PTX shfl.sync's source lane and in-range predicate for `lane` (PTX ISA, shfl)."""
    bval = b & LANE_FIELD_MASK
    clamp = c & LANE_FIELD_MASK
    segmask = (c >> SHFL_SEGMASK_SHIFT) & LANE_FIELD_MASK
    min_lane = lane & segmask
    max_lane = min_lane | (clamp & ~segmask & LANE_FIELD_MASK)
    if mode is ShflMode.UP:
        src = lane - bval
        in_range = src >= max_lane
    elif mode is ShflMode.DOWN:
        src = lane + bval
        in_range = src <= max_lane
    elif mode is ShflMode.BFLY:
        src = lane ^ bval
        in_range = src <= max_lane
    else:
        src = min_lane | (bval & ~segmask & LANE_FIELD_MASK)
        in_range = src <= max_lane
    return (src if in_range else lane), in_range


@dataclass(frozen=True)
class LaunchGeometry:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        x, y, z = self.block
        return x * y * z

    @property
    def ctas(self) -> int:
        x, y, z = self.grid
        return x * y * z

    def special(self, reg: Special, cta: int, warp: int, lane: int, lanes: int) -> int:
        """The value of a special register for one thread."""
        tid, ctaid = index_3d(warp * lanes + lane, self.block), index_3d(cta, self.grid)
        table = {
            Special.TID_X: tid[0],
            Special.TID_Y: tid[1],
            Special.TID_Z: tid[2],
            Special.NTID_X: self.block[0],
            Special.NTID_Y: self.block[1],
            Special.NTID_Z: self.block[2],
            Special.CTAID_X: ctaid[0],
            Special.CTAID_Y: ctaid[1],
            Special.CTAID_Z: ctaid[2],
            Special.NCTAID_X: self.grid[0],
            Special.NCTAID_Y: self.grid[1],
            Special.NCTAID_Z: self.grid[2],
            Special.LANEID: lane,
            Special.WARPID: warp,
        }
        return table[reg]


@dataclass(frozen=True)
class Step:
    """One executed block: what the model's EXEC token and its write-backs must reproduce."""

    index: int
    cta: int
    warp: int
    block: int
    active: tuple[int, ...]  # lanes that ran the block
    reg_writes: tuple[tuple[int, int, int], ...]  # (lane, register, value), in order
    pred_writes: tuple[tuple[int, int, bool], ...]  # (lane, predicate, value)
    mem_writes: tuple[tuple[int, int, int], ...]  # (lane, word, value), in lane order
    next_blocks: tuple[int, ...]  # every lane's next block after the step (EXITED = -1)


def format_step(step: Step) -> str:
    """One line per step, e.g. `#3 cta0 w1 B4 lanes[0,1] r2=[0x5,0x7] mem[12]=0x20`: each
    register's final value per lane that wrote it, and every memory write in order."""
    lanes = ",".join(str(lane) for lane in step.active)
    parts = [f"#{step.index} cta{step.cta} w{step.warp} B{step.block} lanes[{lanes}]"]
    regs: dict[int, dict[int, int]] = {}
    for lane, reg, value in step.reg_writes:
        regs.setdefault(reg, {})[lane] = value
    for reg, values in sorted(regs.items()):
        shown = ",".join(f"{values[lane]:#x}" for lane in sorted(values))
        parts.append(f"r{reg}=[{shown}]")
    parts += [f"mem[{word}]={value:#x}" for _, word, value in step.mem_writes]
    return " ".join(parts)


@dataclass
class WarpState:
    regs: list[list[int]]
    preds: list[list[bool]]
    next_block: list[int]
    waiting: bool = False

    def live(self) -> bool:
        return any(b != EXITED for b in self.next_block)


@dataclass
class MachineState:
    memory: list[int]
    warps: list[WarpState]
    cta: int = 0
    steps: int = 0
    trace: list[Step] = field(default_factory=list)


class Interpreter:
    """Runs a Program for one launch, step by step."""

    def __init__(
        self,
        program: Program,
        geometry: LaunchGeometry,
        memory: Sequence[int],
        *,
        max_steps: int | None = None,
        record_trace: bool = True,
    ) -> None:
        spec = program.spec
        if len(memory) != spec.memory_words:
            raise ValueError(f"memory image has {len(memory)} words, expected {spec.memory_words}")
        self.program = program
        self.spec = spec
        self.geometry = geometry
        self.max_steps = spec.max_steps if max_steps is None else max_steps
        self.record_trace = record_trace
        warps = [
            WarpState(
                regs=[[0] * spec.registers for _ in range(spec.lanes)],
                preds=[[False] * spec.predicates for _ in range(spec.lanes)],
                next_block=[EXITED] * spec.lanes,
            )
            for _ in range(spec.warps)
        ]
        self.state = MachineState(memory=[w & WORD_MASK for w in memory], warps=warps)
        self._start_cta(0)

    # -- scheduling ----------------------------------------------------------------------
    def _start_cta(self, cta: int) -> None:
        """Every thread of the CTA starts at block 0; registers carry over (never read)."""
        self.state.cta = cta
        lanes = self.spec.lanes
        for w, warp in enumerate(self.state.warps):
            warp.waiting = False
            for lane in range(lanes):
                alive = w * lanes + lane < self.geometry.threads
                warp.next_block[lane] = 0 if alive else EXITED

    def pick_warp(self) -> int | None:
        """The warp to run next, or None when the launch is over."""
        while True:
            warps = self.state.warps
            live = [w for w, warp in enumerate(warps) if warp.live()]
            if not live:
                if self.state.cta + 1 >= self.geometry.ctas:
                    return None
                self._start_cta(self.state.cta + 1)
                continue
            ready = [w for w in live if not warps[w].waiting]
            if not ready:  # every live warp has arrived: release the barrier
                for w in live:
                    warps[w].waiting = False
                ready = live
            return ready[0]

    def run(self) -> MachineState:
        while self.step() is not None:
            pass
        return self.state

    def step(self) -> Step | None:
        """Run one block for the scheduled warp; None when the launch has finished."""
        w = self.pick_warp()
        if w is None:
            return None
        state = self.state
        if state.steps >= self.max_steps:
            warp = state.warps[w]
            pending = min(b for b in warp.next_block if b != EXITED)
            raise StepLimitError(
                f"launch exceeded its step budget of {self.max_steps} blocks "
                f"(CTA {state.cta}, warp {w} about to run block B{pending}); "
                + _why_it_ran_on(warp.next_block, w, pending)
            )
        warp = state.warps[w]
        block_no = min(b for b in warp.next_block if b != EXITED)
        active = tuple(lane for lane, b in enumerate(warp.next_block) if b == block_no)
        block = self.program.blocks[block_no]
        reg_writes: list[tuple[int, int, int]] = []
        pred_writes: list[tuple[int, int, bool]] = []
        mem_writes: list[tuple[int, int, int]] = []
        for slot, instr in enumerate(block.instrs):
            self._execute(w, block_no, slot, instr, active, reg_writes, pred_writes, mem_writes)
        self._terminate(warp, block, active)
        state.steps += 1
        step = Step(
            index=state.steps - 1,
            cta=state.cta,
            warp=w,
            block=block_no,
            active=active,
            reg_writes=tuple(reg_writes),
            pred_writes=tuple(pred_writes),
            mem_writes=tuple(mem_writes),
            next_blocks=tuple(warp.next_block),
        )
        if self.record_trace:
            state.trace.append(step)
        return step

    @staticmethod
    def _terminate(warp: WarpState, block: Block, active: tuple[int, ...]) -> None:
        term = block.term
        for lane in active:
            if term.kind is TermKind.EXIT:
                warp.next_block[lane] = EXITED
            elif term.kind is TermKind.BRANCH:
                taken = warp.preds[lane][term.pred] != term.neg
                warp.next_block[lane] = term.target if taken else term.other
            else:
                warp.next_block[lane] = term.target
        if term.kind is TermKind.BARRIER:
            warp.waiting = True

    # -- instructions --------------------------------------------------------------------
    def _execute(
        self,
        w: int,
        block_no: int,
        slot: int,
        instr: Instr,
        active: tuple[int, ...],
        reg_writes: list[tuple[int, int, int]],
        pred_writes: list[tuple[int, int, bool]],
        mem_writes: list[tuple[int, int, int]],
    ) -> None:
        warp = self.state.warps[w]
        regs, preds = warp.regs, warp.preds
        lanes = [
            lane
            for lane in active
            if instr.guard is None or preds[lane][instr.guard] != instr.guard_neg
        ]
        op = instr.op

        def b_of(lane: int) -> int:
            return instr.b_imm if instr.b_imm is not None else regs[lane][instr.b]

        def c_of(lane: int) -> int:
            return instr.c_imm if instr.c_imm is not None else regs[lane][instr.c]

        results: list[tuple[int, int]] = []  # (lane, value) for rd
        pred_results: list[tuple[int, bool]] = []
        if op in (Op.LD, Op.ST, Op.ATOM):
            memory = self.state.memory
            for lane in lanes:  # side effects in lane order
                word = self._word_address(w, lane, block_no, slot, instr)
                if op is Op.LD:
                    results.append((lane, memory[word]))
                    continue
                new = b_of(lane) if op is Op.ST else None
                if op is Op.ST and instr.mode is not None:
                    address = self._address(w, lane, instr)
                    new = store_field(instr.mode, memory[word], b_of(lane), address)  # type: ignore[arg-type]
                if op is Op.ATOM:
                    results.append((lane, memory[word]))
                    new = atomic(instr.mode, memory[word], b_of(lane), c_of(lane))  # type: ignore[arg-type]
                memory[word] = new
                mem_writes.append((lane, word, new))
        elif op is Op.SHFL:
            for lane in lanes:
                src, in_range = shuffle_source(instr.mode, lane, b_of(lane), c_of(lane))  # type: ignore[arg-type]
                src = src if src < self.spec.lanes else lane
                results.append((lane, regs[src][instr.a]))
                if instr.pd is not None:
                    pred_results.append((lane, in_range))
        elif op is Op.VOTE:
            votes = [lane for lane in lanes if preds[lane][instr.pa] != instr.neg_a]
            for lane in lanes:
                if instr.mode is VoteMode.BALLOT:
                    results.append((lane, sum(1 << v for v in votes)))
                elif instr.mode is VoteMode.ANY:
                    pred_results.append((lane, bool(votes)))
                else:
                    pred_results.append((lane, len(votes) == len(lanes)))
        else:
            for lane in lanes:
                a = regs[lane][instr.a]
                if op is Op.SETP:
                    pred_results.append((lane, compare(instr.mode, a, b_of(lane))))  # type: ignore[arg-type]
                elif op is Op.PLOP:
                    x = preds[lane][instr.pa] != instr.neg_a
                    y = preds[lane][instr.pb] != instr.neg_b
                    fn = instr.mode
                    value = (
                        (x and y) if fn is PredFn.AND else (x or y) if fn is PredFn.OR else x != y
                    )
                    pred_results.append((lane, value))
                elif op is Op.SEL:
                    pick = preds[lane][instr.pa] != instr.neg_a
                    results.append((lane, a if pick else b_of(lane)))
                elif op is Op.S2R:
                    value = self.geometry.special(
                        instr.mode, self.state.cta, w, lane, self.spec.lanes
                    )  # type: ignore[arg-type]
                    results.append((lane, value))
                else:
                    results.append((lane, alu(op, a, b_of(lane))))
        for lane, value in results:
            if instr.rd != 0:
                regs[lane][instr.rd] = value
                reg_writes.append((lane, instr.rd, value))
        for lane, flag in pred_results:
            if instr.pd is not None:
                preds[lane][instr.pd] = flag
                pred_writes.append((lane, instr.pd, flag))

    def _address(self, w: int, lane: int, instr: Instr) -> int:
        return (self.state.warps[w].regs[lane][instr.a] + instr.imm) & WORD_MASK

    def _word_address(self, w: int, lane: int, block_no: int, slot: int, instr: Instr) -> int:
        address = self._address(w, lane, instr)
        fault = address_fault(instr, address, self.spec.memory_bytes)
        if fault is not None:
            thread = w * self.spec.lanes + lane
            raise TrapError(
                illegal_address_message(
                    thread, self.state.cta, block_no, slot, instr, address, fault
                )
            )
        return address // WORD_BYTES


def run_program(
    program: Program,
    geometry: LaunchGeometry,
    memory: Sequence[int],
    *,
    max_steps: int | None = None,
    record_trace: bool = True,
) -> MachineState:
    """Run a whole launch on the reference interpreter and return the final state."""
    return Interpreter(
        program, geometry, memory, max_steps=max_steps, record_trace=record_trace
    ).run()


def _lanes(lanes: list[int], verb: str) -> str:
    """'lane 0 waits' / 'lanes 1, 2 wait'."""
    if len(lanes) == 1:
        return f"lane {lanes[0]} {verb}s"
    return f"lanes {', '.join(map(str, lanes))} {verb}"


def _why_it_ran_on(next_block: list[int], warp: int, pending: int) -> str:
    """The likely cause of a launch that ran out of steps: lanes of the warp parked at
    other blocks while the others loop (they may be waiting on each other: a lock or a
    flag taken inside a warp), else a runaway loop."""
    parked: dict[int, list[int]] = {}
    for lane, b in enumerate(next_block):
        if b not in (EXITED, pending):
            parked.setdefault(b, []).append(lane)
    if not parked:
        return "a runaway loop? raise the budget with --max-steps"
    looping = [lane for lane, b in enumerate(next_block) if b == pending]
    waiting = "; ".join(f"{_lanes(lanes, 'wait')} at B{b}" for b, lanes in sorted(parked.items()))
    return (
        f"in warp {warp}, {_lanes(looping, 'loop')} while {waiting}: if they wait on each "
        "other (a lock or flag another lane of the warp sets), the launch cannot end here, "
        "where a warp always runs its lowest pending block first (docs/isa.md); else raise "
        "the budget with --max-steps"
    )
