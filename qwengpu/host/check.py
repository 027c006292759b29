"""--check: replay a model launch against the reference interpreter, step by step.

The model's trace is what its tokens say: each EXEC(b, w, mask) is a step, and the
write-back tokens after it carry the step's live-out register and predicate values and
its memory writes. The interpreter's trace of the same launch must agree on every step;
the first difference is reported with the step, warp, block, lane and the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwengpu.errors import LaunchError
from qwengpu.host.model_backend import ModelLaunch, ModelStep
from qwengpu.isa.instr import Instr, Program
from qwengpu.machine.rom import live_outs, live_pred_outs
from qwengpu.machine.tokens import Token


class CheckFailed(LaunchError):
    """The model's launch diverged from the interpreter's."""


@dataclass(frozen=True)
class StepWrites:
    regs: tuple[tuple[int, int, int], ...]  # (lane, register, value)
    preds: tuple[tuple[int, int, bool], ...]  # (lane, predicate, value)
    mem: tuple[tuple[int, int], ...]  # (lane, word stored), in order (the address: lane's a + imm)


def model_writes(program: Program, step: ModelStep) -> StepWrites:
    """Decode a model step's write-back tokens into register, predicate, memory writes
    (each register or predicate token names the stage, so the block's instruction)."""
    block = program.blocks[step.block]
    regs: list[tuple[int, int, int]] = []
    preds: list[tuple[int, int, bool]] = []
    mem: list[tuple[int, int]] = []
    staged: dict[int, int] = {}

    def instr(t: Token) -> Instr | None:
        stage = t.get("s")
        return block.instrs[stage] if stage < len(block.instrs) else None

    for t in step.tokens[1:]:
        if t.kind in ("BREG", "BAMEM"):
            staged[t.get("k")] = t.get("v")
            continue
        if t.kind in ("FREG", "FAMEM"):
            n = t.get("n")
            value = t.get("v") << (8 * (n - 1))
            value |= sum(staged.get(k, 0) << (8 * k) for k in range(n - 1))
            staged = {}
            if t.kind == "FREG":
                ins = instr(t)
                rd = ins.rd if ins is not None else 0
                sel = t.get("sel")
                lanes = step.lanes if sel == program.spec.lanes else (sel,)
                regs += [(lane, rd, value) for lane in lanes]
            else:
                mem.append((t.get("lane"), value))
        elif t.kind == "PRED":
            ins = instr(t)
            pd = ins.pd if ins is not None and ins.pd is not None else 0
            preds += [
                (lane, pd, bool((t.get("pv") >> lane) & 1))
                for lane in range(program.spec.lanes)
                if (t.get("pw") >> lane) & 1
            ]
    return StepWrites(tuple(regs), tuple(preds), tuple(mem))


def _reference(program: Program, launch: ModelLaunch):
    from qwengpu.host.launch import dim3
    from qwengpu.interp.machine import LaunchGeometry, run_program

    geometry = LaunchGeometry(dim3(launch.grid, "grid"), dim3(launch.block, "block"))
    return run_program(program, geometry, list(launch.initial_words), record_trace=True)


def check_launch(program: Program, launch: ModelLaunch) -> int:
    """Raise CheckFailed at the first step where the model and the interpreter differ;
    return the number of steps checked. Only here does the interpreter run."""
    state = _reference(program, launch)
    lives, pred_lives = live_outs(program.blocks), live_pred_outs(program.blocks)
    ref = state.trace
    for i, (want, got) in enumerate(zip(ref, launch.steps, strict=False)):
        where = f"step {i}: cta {want.cta} warp {want.warp} block B{want.block}"
        if (want.cta, want.warp, want.block, tuple(want.active)) != (
            got.cta,
            got.warp,
            got.block,
            got.lanes,
        ):
            raise CheckFailed(
                f"{where} lanes {list(want.active)} expected; the model ran cta {got.cta} warp "
                f"{got.warp} block B{got.block} lanes {list(got.lanes)}"
            )
        writes = model_writes(program, got)
        final: dict[tuple[int, int], int] = {}
        for lane, reg, value in want.reg_writes:
            final[lane, reg] = value
        expect_regs = {k: v for k, v in final.items() if k[1] in lives[want.block]}
        got_regs = {(lane, reg): value for lane, reg, value in writes.regs}
        for key in sorted(set(expect_regs) | set(got_regs)):
            lane, reg = key
            if expect_regs.get(key) != got_regs.get(key):
                raise CheckFailed(
                    f"{where} lane {lane} r{reg}: expected {_show(expect_regs.get(key))}, "
                    f"the model wrote {_show(got_regs.get(key))}"
                )
        expect_preds = {
            (lane, pred): flag
            for lane, pred, flag in want.pred_writes
            if pred in pred_lives[want.block]
        }
        got_preds = {(lane, pred): flag for lane, pred, flag in writes.preds}
        if expect_preds != got_preds:
            raise CheckFailed(
                f"{where}: predicate writes expected {sorted(expect_preds.items())}, "
                f"the model wrote {sorted(got_preds.items())}"
            )
        # the tokens carry each lane's stored word; where it went, the final memory shows
        if tuple((lane, v) for lane, _, v in want.mem_writes) != writes.mem:
            raise CheckFailed(
                f"{where}: memory writes expected "
                f"{[f'lane {lane}: mem[{w}]={v:#x}' for lane, w, v in want.mem_writes]}, "
                f"the model stored {[f'lane {lane}: {v:#x}' for lane, v in writes.mem]}"
            )
    if len(ref) != len(launch.steps):
        raise CheckFailed(
            f"the interpreter ran {len(ref)} steps, the model {len(launch.steps)} "
            f"(first {min(len(ref), len(launch.steps))} agree)"
        )
    if list(state.memory) != list(launch.words):
        bad = next(
            i for i, (a, b) in enumerate(zip(state.memory, launch.words, strict=True)) if a != b
        )
        raise CheckFailed(
            f"final memory word {bad}: expected {state.memory[bad]:#x}, the model's state holds "
            f"{launch.words[bad]:#x}"
        )
    return len(ref)


def _show(value: int | None) -> str:
    return "nothing" if value is None else f"{value:#x}"
