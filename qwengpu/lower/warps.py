"""Warp width: where a kernel's warp intrinsics would mean something else on this machine.

CUDA's warps have 32 lanes; the machine's have `spec.lanes` (4, or 2 on the reduced
preset). A shuffle, vote or lane id agrees with CUDA's only inside the machine's warp, so:

- at compile time a warp intrinsic whose constant operands reach past the machine's warp
  is refused: a shuffle offset or source lane >= lanes, a `width` wider than the warp, a
  member mask naming lanes the warp lacks (0xffffffff, "every lane", stays fine);
- at launch time a kernel that uses its warp as a whole (any shuffle over the full warp,
  vote, `__activemask`, `%laneid`) refuses a block of more threads than one machine warp,
  where CUDA would put them in one warp; unless the kernel reads `warpSize`, the sign that
  it was written for any width.

`narrow_warps=True` (the CLI's `--narrow-warps`) turns both off: the kernel runs with the
machine's own warps, as docs/isa.md describes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwengpu.cuda import ptx_ir as ir
from qwengpu.errors import PtxError
from qwengpu.isa.instr import SHFL_LANE_BITS, SHFL_SEGMASK_SHIFT

CUDA_WARP_LANES = 1 << SHFL_LANE_BITS
EVERY_LANE = (1 << CUDA_WARP_LANES) - 1
LANE_FIELD = CUDA_WARP_LANES - 1

SHUFFLES = {"down": "__shfl_down_sync", "up": "__shfl_up_sync", "bfly": "__shfl_xor_sync",
            "idx": "__shfl_sync"}  # fmt: skip
VOTES = {"ballot": "__ballot_sync", "any": "__any_sync", "all": "__all_sync",
         "uni": "__all_sync"}  # fmt: skip
NARROW_WARPS_HINT = (
    "compile with --narrow-warps (API: narrow_warps=True) to run it with the machine's own warps"
)


@dataclass(frozen=True)
class WarpUse:
    """What the launch must know: the first whole-warp intrinsic, as '<where> <name>', or
    '' when the kernel has none (or reads warpSize)."""

    whole_warp: str = ""


def check_warp_width(kernel: ir.Kernel, lanes: int, lines: dict[int, tuple[str, int]]) -> WarpUse:
    """Refuse the first warp intrinsic whose constant operands need more than `lanes`
    lanes (PtxError at its line); return the kernel's whole-warp use for the launch."""
    constants = _single_constants(kernel)
    whole_warp = ""
    reads_warp_size = False
    for instr in kernel.body:
        if not isinstance(instr, ir.Instruction):
            continue
        reads_warp_size |= any(o == ir.Sym("WARP_SZ") for o in instr.operands)
        name, whole = _intrinsic(instr, constants, lanes)
        if name and whole and not whole_warp:
            source = lines.get(instr.line)
            where = f"{source[0]}:{source[1]}" if source else f"PTX line {instr.line}"
            whole_warp = f"{where} {name}"
    return WarpUse("" if reads_warp_size else whole_warp)


def _intrinsic(instr: ir.Instruction, constants: dict[str, int], lanes: int) -> tuple[str, bool]:
    """(the CUDA intrinsic, whether it spans the whole warp) for a warp instruction, after
    refusing it if its constant operands need a wider warp; ('', False) for others."""
    if instr.opcode == "shfl":
        mode = next((m for m in instr.modifiers if m in SHUFFLES), "idx")
        name = SHUFFLES[mode]
        _, _, lane, clamp, *mask = instr.operands
        width = _shuffle_width(constants.get(_key(clamp)))
        offset = constants.get(_key(lane))
        if width is not None and width > lanes:
            _refuse(instr, name, f"width {width}", lanes)
        if width is None and offset is not None and offset & LANE_FIELD >= lanes:
            what = "source lane" if mode == "idx" else "offset" if mode != "bfly" else "lane mask"
            _refuse(instr, name, f"{what} {offset & LANE_FIELD}", lanes)
        _check_mask(instr, name, mask, constants, lanes)
        return name, width is None
    if instr.opcode == "vote":
        mode = next((m for m in instr.modifiers if m in VOTES), "ballot")
        name = VOTES[mode]
        _check_mask(instr, name, instr.operands[2:], constants, lanes)
        return name, True
    if instr.opcode == "activemask":
        return "__activemask", True
    if any(isinstance(o, ir.SpecialReg) and o.name == "laneid" for o in instr.operands):
        return "%laneid", True
    return "", False


def _shuffle_width(clamp: int | None) -> int | None:
    """The `width` a shuffle's c operand encodes, or None for the whole warp (or unknown)."""
    if clamp is None:
        return None
    width = CUDA_WARP_LANES - ((clamp >> SHFL_SEGMASK_SHIFT) & LANE_FIELD)
    return None if width == CUDA_WARP_LANES else width


def _check_mask(
    instr: ir.Instruction, name: str, mask: list | tuple, constants: dict[str, int], lanes: int
) -> None:
    value = constants.get(_key(mask[0])) if mask else None
    if value is None or value & EVERY_LANE == EVERY_LANE:
        return
    if value & EVERY_LANE >> lanes << lanes:
        _refuse(instr, name, f"member mask {value & EVERY_LANE:#x}", lanes)


def _refuse(instr: ir.Instruction, name: str, what: str, lanes: int) -> None:
    raise PtxError(
        f"{name} with {what} assumes CUDA's {CUDA_WARP_LANES}-lane warps; this machine's warps "
        f"have {lanes} lanes, so it would give another answer than CUDA. Keep warp "
        f"intrinsics within {lanes} lanes (warpSize is {lanes} here), or {NARROW_WARPS_HINT}",
        instr.line,
        instr.text,
    )


def _key(operand: object) -> str | None:
    if isinstance(operand, ir.Imm):
        return f"#{operand.value}"
    return operand.name if isinstance(operand, ir.Reg) else None


def _single_constants(kernel: ir.Kernel) -> dict[str, int]:
    """Each operand whose value is a known constant: immediates, and registers written
    once, by a move of an immediate (how NVRTC hands an intrinsic its constant operands)."""
    writes: dict[str, list[ir.Instruction]] = {}
    for instr in kernel.body:
        if isinstance(instr, ir.Instruction) and instr.operands:
            for dst in _destinations(instr.operands[0]):
                writes.setdefault(dst, []).append(instr)
    constants: dict[str, int] = {}
    for name, defs in writes.items():
        if len(defs) == 1 and defs[0].opcode == "mov" and isinstance(defs[0].operands[1], ir.Imm):
            constants[name] = defs[0].operands[1].value
    for instr in kernel.body:
        if isinstance(instr, ir.Instruction):
            for operand in instr.operands:
                if isinstance(operand, ir.Imm):
                    constants[f"#{operand.value}"] = operand.value
    return constants


def _destinations(operand: object) -> list[str]:
    if isinstance(operand, ir.Reg):
        return [operand.name]
    if isinstance(operand, ir.RegPair):
        return [operand.first.name, operand.second.name]
    if isinstance(operand, ir.Vector):
        return [e.name for e in operand.elems if isinstance(e, ir.Reg)]
    return []
