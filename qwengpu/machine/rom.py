"""The program ROM image: how one machine block is laid out in ROM bytes.

The circuit stores each block as `ROM_BYTES` bytes, one DeltaNet memory per byte (rows =
blocks), because a load token carries one byte and a memory write replaces a whole row.
This module is the one place that knows the bit layout; the circuit decodes the same
fields (`RomLayout.field_bits`) and the host encodes programs with `encode_block`.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwengpu.errors import QgpuError
from qwengpu.isa.instr import (
    Block,
    Cond,
    Instr,
    Op,
    StoreWidth,
    TermKind,
)
from qwengpu.isa.spec import WORD_MASK, MachineSpec

OPCODES: tuple[Op | None, ...] = (None, *Op)
"""ROM opcode numbers: 0 is "no instruction" (a block that only terminates)."""

TERM_KINDS: tuple[TermKind, ...] = tuple(TermKind)

IMMEDIATES: tuple[tuple[str, int], ...] = (("bimm", 32), ("imm", 32))
"""An instruction's immediates: b's and the address offset (or shfl's c)."""


class MachineUnsupported(QgpuError):
    """A program uses something the machine circuit does not implement (yet)."""


# What the machine circuit implements. The interpreter implements all of docs/isa.md; a
# program outside this set is refused before a launch with the instruction and PTX line.
SUPPORTED_OPS = frozenset(
    {
        Op.ADD,
        Op.SUB,
        Op.MUL,
        Op.AND,
        Op.OR,
        Op.XOR,
        Op.SHL,
        Op.SHR,
        Op.SRA,
        Op.SETP,
        Op.PLOP,
        Op.SEL,
        Op.POPC,
        Op.CLZ,
        Op.BREV,
        Op.S2R,
        Op.LD,
        Op.ST,
        Op.ATOM,
        Op.VOTE,
        Op.SHFL,
    }
)


def store_mode(width: StoreWidth | None) -> int:
    """A store's ROM mode: 0 for a word, 1 + its StoreWidth's position for st.8 / st.16."""
    return 0 if width is None else 1 + list(StoreWidth).index(width)


def mode_index(instr: Instr) -> int:
    """The instruction's mode as a small number: its position in its enum (a store's:
    `store_mode`, since a word store has none)."""
    if instr.op is Op.ST:
        return store_mode(instr.mode)  # type: ignore[arg-type]
    if instr.mode is None:
        return 0
    return list(type(instr.mode)).index(instr.mode)


@dataclass(frozen=True)
class RomLayout:
    """Bit fields of one ROM row: a block of up to `block_size` instructions (one per pipeline
    stage; field `name.s` is stage s's) plus its terminator.

    The fields the register and predicate files need early (the write-back addresses rd and
    pd of every stage, the read addresses) come first, then the terminator, then each
    stage's exec fields in bytes of their own, which a later stage reads at its depth."""

    spec: MachineSpec

    @property
    def stages(self) -> int:
        return self.spec.block_size

    @property
    def block_bits(self) -> int:
        return max(1, (self.spec.rom_blocks - 1).bit_length())

    @property
    def reg_bits(self) -> int:
        return max(1, (self.spec.registers - 1).bit_length())

    @property
    def pred_bits(self) -> int:
        return max(1, (self.spec.predicates - 1).bit_length())

    def instr_fields(self) -> tuple[tuple[str, int], ...]:
        """One instruction's fields needed early: the opcode and mode (the special
        registers are read early), the write-back addresses and flags, the read addresses."""
        r, p = self.reg_bits, self.pred_bits
        return (
            ("op", max(1, (len(OPCODES) - 1).bit_length())),
            ("mode", 4),
            ("rd", r),
            ("pd", p),
            ("wr", 1),  # writes register rd (later stages of the block take it forwarded)
            ("wb", 1),  # rd is live out: its value travels back in write-back tokens
            ("wp", 1),  # writes predicate pd (setp, plop, vote.any/all, shfl|p)
            ("wbp", 1),  # pd is live out: its value travels back in a PRED token
            ("a", r),
            ("b", r),
            ("c", r),
            ("pa", p),
            ("pb", p),
            ("guard", p),
        )

    def exec_fields(self) -> tuple[tuple[str, int], ...]:
        """One instruction's fields only its stage's datapath needs (the modifiers, the
        immediates): a byte-aligned group per stage, read at the stage's depth."""
        return (
            ("b_is_imm", 1),
            ("c_is_imm", 1),  # shfl's constant c, held in imm (shfl has no address offset)
            ("neg_a", 1),
            ("neg_b", 1),
            ("has_guard", 1),
            ("guard_neg", 1),
            *IMMEDIATES,
        )

    @property
    def fields(self) -> tuple[tuple[str, int], ...]:
        b, p = self.block_bits, self.pred_bits
        stages = range(self.stages)
        out = [(f"{n}.{s}", w) for s in stages for n, w in self.instr_fields()]
        out += [
            ("term", max(1, (len(TERM_KINDS) - 1).bit_length())),
            ("target", b),
            ("other", b),
            ("term_pred", p),
            ("term_neg", 1),
        ]
        for s in stages:
            pad = -sum(w for _, w in out) % 8
            if pad:
                out.append((f"pad.{s}", pad))
            out += [(f"{n}.{s}", w) for n, w in self.exec_fields()]
        return tuple(out)

    def exec_bytes(self, stage: int) -> range:
        """The ROM bytes that hold only stage `stage`'s exec fields."""
        bits = self.field_bits()
        names = [f"{n}.{stage}" for n, _ in self.exec_fields()]
        first = bits[names[0]][0]
        last = bits[names[-1]][0] + bits[names[-1]][1]
        return range(first // 8, (last + 7) // 8)

    @property
    def total_bits(self) -> int:
        return sum(w for _, w in self.fields)

    @property
    def rom_bytes(self) -> int:
        return (self.total_bits + 7) // 8

    def field_bits(self) -> dict[str, tuple[int, int]]:
        """name -> (first bit, width) in the row."""
        out, pos = {}, 0
        for name, width in self.fields:
            out[name] = (pos, width)
            pos += width
        return out

    def encode(self, values: dict[str, int]) -> list[int]:
        """Field values -> the row's bytes."""
        bits = self.field_bits()
        row = 0
        for name, v in values.items():
            pos, width = bits[name]
            if not 0 <= v < (1 << width):
                raise MachineUnsupported(f"ROM field {name}={v} does not fit {width} bits")
            row |= v << pos
        return [(row >> (8 * k)) & 0xFF for k in range(self.rom_bytes)]


def check_supported(block_no: int, block: Block, spec: MachineSpec) -> None:
    """Refuse, with the instruction and PTX line, what the machine circuit lacks."""
    if len(block.instrs) > spec.block_size:
        raise MachineUnsupported(
            f"B{block_no}: {len(block.instrs)} instructions; the machine circuit runs "
            f"{spec.block_size} per pass (lower with the machine's spec)"
        )
    for ins in block.instrs:
        where = f"B{block_no}: '{ins}' (PTX line {ins.src_line})"
        if ins.op not in SUPPORTED_OPS:
            raise MachineUnsupported(
                f"{where}: {ins.op.value} is not in the machine circuit (a program lowered "
                "for the model's MachineSpec never has it)"
            )
        if ins.op is Op.SETP and not isinstance(ins.mode, Cond):
            raise MachineUnsupported(f"{where}: setp without a condition")


def _live_out(
    blocks: tuple[Block, ...], reads: list[set[int]], kills: list[set[int]]
) -> list[set[int]]:
    """Backward dataflow over the CFG: what is live on exit of each block, given what each
    block reads before writing (`reads`) and what it overwrites in every lane (`kills`)."""
    live_in: list[set[int]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(blocks))):
            out: set[int] = set().union(*(live_in[s] for s in blocks[i].term.successors()))
            new_in = reads[i] | (out - kills[i])
            if new_in != live_in[i]:
                live_in[i] = new_in
                changed = True
    return [set().union(*(live_in[s] for s in b.term.successors())) for b in blocks]


def live_outs(blocks: tuple[Block, ...]) -> list[set[int]]:
    """Registers live on exit of each block. A guarded write does not kill: lanes whose
    guard fails keep the old value."""
    kills = [{r for i in b.instrs if i.guard is None for r in i.writes()} for b in blocks]
    return _live_out(blocks, [set(b.registers_read()) for b in blocks], kills)


def live_pred_outs(blocks: tuple[Block, ...]) -> list[set[int]]:
    """Predicates live on exit of each block: only those travel back in a PRED token. A
    branch on the predicate its own instruction wrote reads the new value inside the pass
    (the circuit forwards it), so `setp p; branch p` alone needs no write-back."""
    reads, kills = [], []
    for b in blocks:
        killed = {p for i in b.instrs if i.guard is None for p in i.pred_writes()}
        read = {p for i in b.instrs for p in i.pred_reads()}
        if b.term.kind is TermKind.BRANCH and b.term.pred not in killed:
            read.add(b.term.pred)  # read before any write, or where a guard kept it
        reads.append(read)
        kills.append(killed)
    return _live_out(blocks, reads, kills)


def encode_block(
    layout: RomLayout, block: Block, live_out: set[int], live_preds: set[int] | None = None
) -> list[int]:
    """One block's ROM bytes (`live_out`, `live_preds`: registers and predicates live on
    exit, whose new values the model writes back; every written predicate by default).
    Of several writes of one register in a block, a write travels unless a later
    unguarded one overwrites it in every lane."""
    v: dict[str, int] = {}
    t = block.term
    v["term"] = TERM_KINDS.index(t.kind)
    v["target"], v["other"] = t.target, t.other
    v["term_pred"], v["term_neg"] = t.pred, int(t.neg)
    instrs = block.instrs
    for s, ins in enumerate(instrs):
        later = [i for i in instrs[s + 1 :] if i.guard is None]
        overwritten = {r for i in later for r in i.writes()}
        pred_overwritten = {p for i in later for p in i.pred_writes()}
        f = {
            "op": OPCODES.index(ins.op),
            "mode": mode_index(ins),
            "rd": ins.rd,
            "a": ins.a,
            "b": ins.b,
            "c": ins.c,
            "imm": ins.imm & WORD_MASK,
        }
        if ins.b_imm is not None:
            f["b_is_imm"], f["bimm"] = 1, ins.b_imm & WORD_MASK
        if ins.c_imm is not None:  # only shfl has one, and shfl has no address offset
            f["c_is_imm"], f["imm"] = 1, ins.c_imm
        f["pd"], f["wp"] = ins.pd or 0, int(ins.pd is not None)
        f["wbp"] = int(
            ins.pd is not None
            and (live_preds is None or ins.pd in live_preds)
            and ins.pd not in pred_overwritten
        )
        f["pa"], f["neg_a"] = ins.pa, int(ins.neg_a)
        f["pb"], f["neg_b"] = ins.pb, int(ins.neg_b)
        if ins.guard is not None:
            f["has_guard"], f["guard"], f["guard_neg"] = 1, ins.guard, int(ins.guard_neg)
        f["wr"] = int(bool(ins.writes()))
        f["wb"] = int(ins.rd != 0 and ins.rd in live_out and ins.rd not in overwritten)
        v.update({f"{name}.{s}": value for name, value in f.items()})
    return layout.encode(v)
