"""The qgpu machine as a circuit: ROM, register and predicate files, ALU, memory unit,
scheduler and the next-token logic, built from qwengpu.circuit primitives.

One pass per token (docs/protocol.md). On EXEC(b, w, mask) the stack fetches block b,
reads warp w's operands, runs the instruction and the terminator for the active lanes,
writes the lanes' next blocks into the scheduler's memories, keeps the results in deep
buffers, and emits the first write-back token. Every later pass reads those buffers and
emits the next token, until the scheduler emits the next EXEC. Write-back tokens commit
values into the shallow memories (registers, predicates, global memory) when they are
fed back: results computed deep reach the shallow state only through a token.

Sections below follow the pass from input to output: token front end, program ROM and
decode, register/predicate files, ALU, memory unit, terminator, scheduler, next token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from qwengpu.circuit import Bit, Bits, Circuit, Column, OneHot
from qwengpu.circuit.craft import Lin, Sig, neuron, relu_of, step_ge
from qwengpu.circuit.encodings import Encoding, Ints
from qwengpu.circuit.ir import Field, MlpOp
from qwengpu.circuit.logic import match_form
from qwengpu.circuit.multiply import mul_lo_parts
from qwengpu.circuit.words import CarrySelect
from qwengpu.circuit.words import _shift_amount_forms as words_shift_forms
from qwengpu.isa.instr import (
    SHFL_LANE_BITS,
    SHFL_SEGMASK_SHIFT,
    AtomOp,
    Cond,
    Op,
    PredFn,
    ShflMode,
    Special,
    StoreWidth,
    TermKind,
    VoteMode,
)
from qwengpu.isa.spec import MachineSpec
from qwengpu.machine.rom import OPCODES, TERM_KINDS, RomLayout, store_mode
from qwengpu.machine.tokens import (
    ADDR_BITS,
    AXES,
    DIM_BITS,
    INDEX_BITS,
    KIND_NAMES,
    WORD_BYTES,
    Vocabulary,
)

Terms = Sequence[tuple[Lin, Lin]]  # (gate, up) pairs: sum of max(gate, 0) * up
WORD_ADDR_SHIFT = 2  # byte address bits below the word index (4-byte words)

PRED_OPERANDS = ("guard", "pa", "pb")  # an instruction's predicate operands

UNIT_OPS: dict[str, tuple[Op, ...]] = {
    "add": (Op.ADD, Op.SUB),
    "mul": (Op.MUL,),
    "logic": (Op.AND, Op.OR, Op.XOR),
    "shift": (Op.SHL, Op.SHR, Op.SRA),
    "sel": (Op.SEL,),
    "s2r": (Op.S2R,),
    "ld": (Op.LD,),
    "ballot": (Op.VOTE,),
    "shfl": (Op.SHFL,),
    "popc": (Op.POPC,),
    "clz": (Op.CLZ,),
    "brev": (Op.BREV,),
}
"""The functional units whose output is a lane's 32-bit result, and the ops they serve."""

ACCUMULATION: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("V.a", ("logic", "brev", "s2r")),  # a layer after the operands
    ("V.b", ("sel", "shfl")),  # after sel's predicate, shfl's lane checks: a and b die
    ("V", ("add", "mul", "ld", "ballot", "shift", "popc", "clz")),  # with the multiplier's
    # last sublayer and the loads; the rest are narrow or done beside the multiplier
)
"""The result V gathered in place in three steps, each unit in the step where it is ready:
a finished unit's output does not hold residual width until the slowest one is done, and
the operands die early."""


# -- building blocks ---------------------------------------------------------------------------
def _fields_in(c: Circuit, forms: Sequence[Lin]) -> list[Field]:
    names: set[str] = set()
    for f in forms:
        names |= f.fields()
    return [c.fields[n] for n in sorted(names)]


def wires(c: Circuit, name: str, enc: Encoding, channels: Sequence[Sequence[Sequence[Lin]]]):
    """A field whose channel (lane, i) is the sum of max(form, 0) over its forms: the
    general "gates into a new field" block. channels[lane][i] = list of forms, each
    0/1-valued (AND of literals: x + y - 1, ...), mutually exclusive where summed."""
    out = c.new_field(c.fresh(name), enc, len(channels))
    neurons, forms = [], []
    for lane, chans in enumerate(channels):
        for i, terms in enumerate(chans):
            for form in terms:
                neurons.append(relu_of(form, {out.sig(i, lane): 1}))
                forms.append(form)
    c.mlp("wires", _fields_in(c, forms), [out], neurons)
    return out


def products(c: Circuit, name: str, enc: Encoding, channels: Sequence[Sequence[Terms]]):
    """A field whose channel (lane, i) is sum max(gate, 0) * up over its (gate, up) terms:
    multiplexers and gated copies (gates 0/1, at most one term nonzero)."""
    out = c.new_field(c.fresh(name), enc, len(channels))
    neurons, forms = [], []
    for lane, chans in enumerate(channels):
        for i, terms in enumerate(chans):
            for gate, up in terms:
                neurons.append(neuron(gate, {out.sig(i, lane): 1}, up=up))
                forms += [gate, up]
    c.mlp("products", _fields_in(c, forms), [out], neurons)
    return out


def steps(c: Circuit, name: str, channels: Sequence[tuple[Lin, int]]) -> Field:
    """A one-lane Bits field of threshold bits [form >= t], one per (form, t): ORs and
    comparisons of bits that need not be exclusive (`wires` sums its forms), in one layer."""
    out = c.new_field(c.fresh(name), Bits(len(channels)) if len(channels) > 1 else Bit(), 1)
    neurons = [n for i, (form, t) in enumerate(channels) for n in step_ge(form, t, {out.sig(i): 1})]
    c.mlp("steps", _fields_in(c, [form for form, _ in channels]), [out], neurons)
    return out


def bit(f: Field, i: int = 0, lane: int = 0) -> Lin:
    return f.ch(i, lane)


def bits_of(c: Circuit, name: str, sources: Sequence[Lin]) -> Field:
    """A one-lane Bits field gathered from 0/1 channels (bit slicing, concatenation)."""
    enc = Bits(len(sources)) if len(sources) > 1 else Bit()
    return wires(c, name, enc, [[[s] for s in sources]])


def lanes_of(c: Circuit, name: str, per_lane: Sequence[Field]) -> Field:
    """One field with a lane per one-lane field (all of one encoding)."""
    w = per_lane[0].encoding.width
    return wires(c, name, per_lane[0].encoding, [[[f.ch(i)] for i in range(w)] for f in per_lane])


def lane_part(c: Circuit, name: str, f: Field, lane: int) -> Field:
    return wires(c, name, f.encoding, [[[f.ch(i, lane)] for i in range(f.encoding.width)]])


def lanes_below(onehot: Field, lane: int) -> Lin:
    """1 where `onehot` names a lane below `lane` (the lanes after a token's lane)."""
    return sum((onehot.ch(j) for j in range(lane)), Lin())


def pick_lane(c: Circuit, name: str, onehot: Field, f: Field | PerLane) -> Field:
    """f's lane selected by a one-lane OneHot over lanes (0 when none)."""
    return products(
        c,
        name,
        f.encoding,
        [
            [
                [(onehot.ch(lane), f.ch(i, lane)) for lane in range(f.lanes)]
                for i in range(f.encoding.width)
            ]
        ],
    )


def matches(f: Field, value: int, lane: int = 0) -> Lin:
    """1 when the Bits field equals `value`, <= 0 otherwise (AND of literals)."""
    return match_form([f.ch(i, lane) for i in range(f.encoding.width)], value)


def logic_terms(a: Lin, b: Lin, f_and: Lin, f_or: Lin, f_xor: Lin) -> list[tuple[Lin, Lin]]:
    """One bit of and / or / xor of a and b as (gate, up) terms, gated by the function's
    form (1 or <= 0): and = ab, or = a + b - ab, xor = a + b - 2ab."""
    return [
        (a + b + f_and - 2, Lin.of(1)),
        (a + f_or - 1, Lin.of(1)),
        (b + f_or - 1, Lin.of(1)),
        (a + b + f_or - 2, Lin.of(-1)),
        (a + f_xor - 1, Lin.of(1)),
        (b + f_xor - 1, Lin.of(1)),
        (a + b + f_xor - 2, Lin.of(-2)),
    ]


def condition_forms(hs: Field, eq: Field, ge: Field, lane: int) -> dict[Cond, Lin]:
    """Every setp condition as a 0/1 linear form of three comparisons: unsigned a >= b,
    a == b and signed a >= b."""
    h, e, g = hs.ch(0, lane), eq.ch(0, lane), ge.ch(0, lane)
    return {
        Cond.EQ: e,
        Cond.NE: 1 - e,
        Cond.LT: 1 - g,
        Cond.LE: 1 - g + e,
        Cond.GT: g - e,
        Cond.GE: g,
        Cond.LO: 1 - h,
        Cond.LS: 1 - h + e,
        Cond.HI: h - e,
        Cond.HS: h,
    }


# -- the machine -------------------------------------------------------------------------------
class RowField:
    """A ROM field read straight off the row bytes, without a copy into a field of its own:
    channel i is a form of a byte's channel (what the consumers of a Field use)."""

    def __init__(self, bits: list[Lin]) -> None:
        self.bits = bits

    def ch(self, index: int, lane: int = 0) -> Lin:
        return self.bits[index]


class PerLane:
    """One-lane fields seen as one field of many lanes, without a copy layer (a memory's
    reads, one copy per lane): channel (i, lane) is lane's field's channel i."""

    def __init__(self, fields: Sequence[Field]) -> None:
        self.fields = list(fields)
        self.encoding = fields[0].encoding
        self.lanes = len(fields)

    def ch(self, index: int, lane: int = 0) -> Lin:
        return self.fields[lane].ch(index)

    def sig(self, index: int, lane: int = 0) -> Sig:
        return self.fields[lane].sig(index)


class Gated:
    """A unit output that needs no field of its own: per (channel, lane), (gate, value)
    terms the result gather multiplies in directly. `gated`: the gates already include
    the opcode (else the gather adds it)."""

    def __init__(
        self, terms: Callable[[int, int], list[tuple[Lin, Lin]]], gated: bool = False
    ) -> None:
        self.terms = terms
        self.gated = gated


Unit = Field | PerLane | Gated | CarrySelect
"""A functional unit's output as the result gather takes it."""


class Stage:
    """One pipeline stage: its instruction's decoded ROM fields, and the datapath fields the
    builders below fill in (operands, executing lanes, result, new predicate, ...)."""

    def __init__(self, index: int, ins: dict[str, Field | RowField]) -> None:
        self.index = index
        self.ins = ins  # this stage's ROM fields, by name (rd, a, imm, ...)
        self.op: Field  # opcode and mode one-hot (`_decode`)
        self.mode: Field
        self.narrow: dict[StoreWidth, Field] = {}
        self.reads_a: list[Field] = []  # register file reads, one field per lane
        self.reads_b: list[Field] = []
        self.reads_c: list[Field] = []
        self.pred_reads: dict[str, list[Field]] = {}  # guard, pa, pb: one field per lane
        # earlier stages that may write an operand: (stage, "writes it" bit) per operand
        self.writers: dict[str, list[tuple[Stage, Field]]] = {}
        self.pred_writers: dict[str, list[tuple[Stage, Field]]] = {}
        # the datapath (`_operands`, `_alu`): operands, the lanes that execute (E), the
        # gathered result (V), the new predicate, the adder's sum (also the memory
        # address), the loads' per-lane words, the address traps
        self.A: Field
        self.B: Field
        self.C: Field
        self.adder_b: Field  # the adder's b: b, ~b (sub) or the memory offset
        self.preds: dict[str, Field | PerLane] = {}
        self.s2r: Field
        self.E: Field
        self.sum: Field
        self.V: PerLane  # one field per lane
        self.finishing: tuple[Field, ...] = ()  # V's inputs: ready a layer before V
        self.p_new: Field
        self.loaded: list[Field] = []
        self.word_addr: list[Field] = []
        self.trap_misaligned: Field
        self.trap_outside: Field
        # for the new predicate: vote counts ([count >= 1] is the vote), and per lane
        # shfl's (mode, source in range) pairs
        self.vote_counts: dict[VoteMode, Lin] = {}
        self.shfl_fits: list[list[tuple[Lin, Lin]]] = []

    def opc(self, op: Op) -> Lin:
        return self.op.ch(OPCODES.index(op))


class MachineCircuit:
    """Builds the machine circuit for a MachineSpec: a block of `block_size` instructions
    per pass, one per pipeline stage, each stage taking the registers and predicates that
    earlier stages wrote on their lanes (forwarding) and the files' values otherwise."""

    def __init__(self, spec: MachineSpec) -> None:
        if not spec.stores_alone and spec.block_size > 1:
            raise ValueError(
                "the machine circuit re-runs a store's block on each lane's pass: a "
                "MachineSpec with block_size > 1 needs stores_alone"
            )
        self.spec = spec
        self.stages = spec.block_size
        self.lanes = spec.lanes
        self.vocab = Vocabulary(spec)
        self.layout = RomLayout(spec)
        self.c = Circuit("qgpu-machine")
        self.bb = self.layout.block_bits
        self.wb = self.vocab.warp_bits
        self._build()

    # -- token front end -------------------------------------------------------------------------
    def _inputs(self) -> None:
        c = self.c
        self.kind = {k: c.input(f"is_{k.lower()}", Bit()) for k in KIND_NAMES}
        self.row0 = c.input("row0", Bit())  # always 0: the address of one-row memories
        self.t_b = c.input("t_b", Bits(self.bb))
        self.t_w = c.input("t_w", Bits(self.wb))
        self.t_mask = c.input("t_mask", Bits(self.lanes))
        self.t_v = c.input("t_v", Bits(8))
        self.t_sel = c.input("t_sel", OneHot(self.lanes + 1, allow_none=True))
        # the stage a register or predicate write-back token (or a TRAP) belongs to
        self.t_s = c.input("t_s", OneHot(self.stages, allow_none=True))
        self.t_k = c.input("t_k", OneHot(WORD_BYTES - 1, allow_none=True))
        self.t_n = c.input("t_n", OneHot(WORD_BYTES, allow_none=True))
        self.stg_we = [c.input(f"stg_we{k}", Bit()) for k in range(WORD_BYTES - 1)]
        self.pv = [c.input(f"pv{lane}", Bit()) for lane in range(self.lanes)]
        self.pw = [c.input(f"pw{lane}", Bit()) for lane in range(self.lanes)]
        self.t_addr = c.input("t_addr", Bits(ADDR_BITS))
        self.t_romb = c.input("t_romb", Bits(self.bb))
        self.rom_we = [c.input(f"rom_we{k}", Bit()) for k in range(self.layout.rom_bytes)]
        # the memory lane a token names: FAMEM(l)'s l (none: the host's memory load), TRAP's
        self.t_lane = c.input("t_lane", OneHot(self.lanes, allow_none=True))
        self.names_lane = sum((self.t_lane.ch(n) for n in range(self.lanes)), Lin())
        self.t_cta = {a: c.input(f"t_cta_{a}", Bits(INDEX_BITS)) for a in AXES}
        # launch shapes: totals, then x, y, z; BLOCK also carries every thread's %tid
        self.t_ntid = [c.input(n, Bits(DIM_BITS)) for n in ("t_ntid", *self._axes("t_ntid"))]
        self.t_nctaid = [c.input(n, Bits(DIM_BITS)) for n in ("t_nctaid", *self._axes("t_nctaid"))]
        self.t_tids = c.input("t_tids", Bits(len(AXES) * INDEX_BITS), lanes=self.vocab.threads)

    @staticmethod
    def _axes(prefix: str) -> list[str]:
        return [f"{prefix}_{a}" for a in AXES]

    def _register(
        self,
        name: str,
        columns: list[Column],
        data: list[Field],
        when: Field,
        after: Sequence[Field] = (),
    ):
        """A one-row memory written from the token (a latch), read on every token (no
        earlier than `after` is ready)."""
        mem = self.c.memory(name, 1, columns)
        self.c.write(mem, self.row0, data, when=when)
        return self.c.read(mem, self.row0, after=after).outputs

    def _front_end(self) -> None:
        k = self.kind
        self.cur_b, self.cur_w, self.cur_mask = self._register(
            "cur",
            [
                Column("b", Bits(self.bb)),
                Column("w", Bits(self.wb)),
                Column("mask", Bits(self.lanes)),
            ],
            [self.t_b, self.t_w, self.t_mask],
            k["EXEC"],
        )
        self.stg = [
            self._register(f"stage{j}", [Column("v", Bits(8))], [self.t_v], self.stg_we[j])[0]
            for j in range(WORD_BYTES - 1)
        ]
        (self.romcur,) = self._register(
            "romcur", [Column("b", Bits(self.bb))], [self.t_romb], k["ROMSEL"]
        )
        (self.memcur,) = self._register(
            "memcur", [Column("a", Bits(ADDR_BITS))], [self.t_addr], k["MADDR"]
        )
        dims = [Column(n, Bits(DIM_BITS)) for n in ("n", *AXES)]
        tids = Column("tids", self.t_tids.encoding, lanes=self.t_tids.lanes)
        self.ntid, *block, self.tids = self._register(
            "block", [*dims, tids], [*self.t_ntid, self.t_tids], k["BLOCK"]
        )
        self.nctaid, *grid = self._register("grid", dims, self.t_nctaid, k["GRID"])
        cta = self._register(
            "cta", [Column(a, Bits(INDEX_BITS)) for a in AXES], list(self.t_cta.values()), k["CTA"]
        )
        self.block, self.grid, self.cta = (
            dict(zip(AXES, f, strict=True)) for f in (block, grid, cta)
        )
        # The word a final write-back token commits: its byte n-1 is the token's, the
        # bytes below come from the staging latches the BYTE tokens filled.
        chans = []
        for j in range(WORD_BYTES):
            for i in range(8):
                terms = [(self.t_n.ch(j), self.t_v.ch(i))]
                terms += [(self.t_n.ch(n), self.stg[j].ch(i)) for n in range(j + 1, WORD_BYTES)]
                chans.append(terms)
        self.word_in = products(self.c, "word_in", Bits(32), [chans])

    # -- program ROM and decode -----------------------------------------------------------------
    def _rom(self) -> None:
        """The ROM: one memory per row byte. The bytes the files and the terminator need
        (and stage 0's exec bytes) are read at the top; a later stage's exec bytes are
        read at that stage's depth (`_decode`)."""
        c = self.c
        self.rom = []
        for j in range(self.layout.rom_bytes):
            mem = c.memory(f"rom{j}", self.spec.rom_blocks, [Column("v", Bits(8))])
            c.write(mem, self.romcur, [self.t_v], when=self.rom_we[j])
            self.rom.append(mem)
        late = {j for s in range(1, self.stages) for j in self.layout.exec_bytes(s)}
        self.row: dict[int, Field] = {
            j: c.read(mem, self.cur_b).outputs[0] for j, mem in enumerate(self.rom) if j not in late
        }
        exec_names = {n for n, _ in self.layout.exec_fields()}
        fields = {
            name: bits_of(c, f"ins.{name}", self._row_bits(name))
            for name in self.layout.field_bits()
            if name.split(".")[0] not in exec_names and not name.startswith("pad.")
        }
        self.blk = {n: f for n, f in fields.items() if "." not in n}  # the terminator's
        self.term = c.decoder(self.blk["term"], name="term1h")
        self.st = [
            Stage(s, {n[: -len(f".{s}")]: f for n, f in fields.items() if n.endswith(f".{s}")})
            for s in range(self.stages)
        ]

    def _row_bits(self, name: str) -> list[Lin]:
        """ROM field `name` as forms of the row bytes read so far."""
        pos, width = self.layout.field_bits()[name]
        return [self.row[i // 8].ch(i % 8) for i in range(pos, pos + width)]

    def _decode(self, st: Stage) -> None:
        """The stage's exec fields straight off its row bytes, and its opcode and mode
        one-hot."""
        c, s = self.c, st.index
        for name, _ in self.layout.exec_fields():
            st.ins[name] = RowField(self._row_bits(f"{name}.{s}"))
        st.op = c.decoder(st.ins["op"], name=f"op1h.{s}")
        st.mode = c.decoder(st.ins["mode"], name=f"mode1h.{s}")
        # st.8 / st.16 as clean bits (a word store's mode is 0, theirs 1 and 2)
        st.narrow = {
            w: bits_of(c, f"st.{w.value}.{s}", [st.opc(Op.ST) + st.mode.ch(store_mode(w)) - 1])
            for w in StoreWidth
        }

    def term_is(self, kind: TermKind) -> Lin:
        return self.term.ch(TERM_KINDS.index(kind))

    # -- register and predicate files -----------------------------------------------------------
    def _files(self) -> None:
        """One register and one predicate memory per lane, read by every stage at its own
        addresses (the state before the block: write-back tokens are the only writers).
        A write-back token commits to rd / pd of the stage it names."""
        c, s, k = self.c, self.spec, self.kind
        w = [self.cur_w.ch(i) for i in range(self.wb)]

        def addr(name: str, st: Stage, bits: int) -> Field:
            return bits_of(
                c, f"ra.{name}.{st.index}", [st.ins[name].ch(i) for i in range(bits)] + w
            )

        def written(name: str, bits: int) -> Field:
            """The write-back's address: field `name` of the token's stage, and the warp."""
            return products(
                c,
                f"wa.{name}",
                Bits(bits + self.wb),
                [
                    [
                        [(self.t_s.ch(st.index), st.ins[name].ch(i)) for st in self.st]
                        for i in range(bits)
                    ]
                    + [[(wi, Lin.of(1))] for wi in w]
                ],
            )

        # a final register write-back commits lane l if it names l, or all active lanes
        we = wires(
            c,
            "rf.we",
            Bit(),
            [
                [
                    [
                        bit(k["FREG"]) + self.t_sel.ch(lane) - 1,
                        bit(k["FREG"])
                        + self.t_sel.ch(self.vocab.all_lanes)
                        + self.cur_mask.ch(lane)
                        - 2,
                    ]
                ]
                for lane in range(self.lanes)
            ],
        )
        we_lanes = [lane_part(c, f"rf.we{lane}", we, lane) for lane in range(self.lanes)]
        rb, pb = self.layout.reg_bits, self.layout.pred_bits
        wa = written("rd", rb)
        self.reg_addr = {st.index: [addr(n, st, rb) for n in ("a", "b", "c")] for st in self.st}
        rows = s.warps << rb
        self.reg_files = []
        for lane in range(self.lanes):
            mem = c.memory(f"regs{lane}", rows, [Column("v", Bits(32))])
            c.write(mem, wa, [self.word_in], when=we_lanes[lane])
            self.reg_files.append(mem)
        pa_w = written("pd", pb)
        self.pred_addr = {st.index: {n: addr(n, st, pb) for n in PRED_OPERANDS} for st in self.st}
        self.pred_term_addr = bits_of(
            c, "pa.term_pred", [self.blk["term_pred"].ch(i) for i in range(pb)] + w
        )
        prow = s.warps << pb
        self.pred_files = []
        for lane in range(self.lanes):
            mem = c.memory(f"preds{lane}", prow, [Column("p", Bit())])
            c.write(mem, pa_w, [self.pv[lane]], when=self.pw[lane])
            self.pred_files.append(mem)

    # -- forwarding -------------------------------------------------------------------------------
    def _forwarded(
        self,
        name: str,
        width: int,
        own: Sequence[Field],
        writers: Sequence[tuple[Stage, Field]],
        imm: tuple[Lin, Sequence[tuple[Lin, Field | RowField]]] | None = None,
        flip: Lin | None = None,
    ) -> Field:
        """An operand per lane: where an earlier stage wrote it on that lane (`writers`:
        the stage and a Bit "it writes this operand"), the latest such stage's value (its
        result V, or for a one-bit operand its new predicate); else the file's read (`own`,
        per lane); or a ROM immediate where `imm` = (an immediate is taken, [(this one is,
        immediate), ...]) says so. `flip` (a 0/1 form): the operand xor flip, bit by bit, in
        the same layer."""
        c, lanes = self.c, range(self.lanes)
        k, immediates = imm if imm is not None else (Lin(), [])
        hits: list[list[Lin]] = [[] for _ in lanes]
        if writers:
            hit = wires(
                c,
                f"{name}.fwd",
                Bits(len(writers)) if len(writers) > 1 else Bit(),
                [[[bit(same) + st.E.ch(0, lane) - 1] for st, same in writers] for lane in lanes],
            )
            hits = [[hit.ch(t, lane) for t in range(len(writers))] for lane in lanes]

        def terms(lane: int, i: int, negated: bool = False) -> list[Lin]:
            """Exclusive forms, one per source: the selected one's value (or 1 - value)."""

            def v(x: Lin) -> Lin:
                return 1 - x if negated else x

            h = hits[lane]
            out = [v(own[lane].ch(i)) - sum(h, Lin()) - k]
            for t, (st, _) in enumerate(writers):
                value = st.V if width > 1 else st.p_new
                out.append(v(value.ch(i, lane)) + h[t] - sum(h[t + 1 :], Lin()) - k - 1)
            for taken, imm_f in immediates:
                out.append(v(imm_f.ch(i)) + taken - 1)
            return out

        if flip is not None:
            plain = terms

            def terms(lane: int, i: int) -> list[Lin]:  # type: ignore[no-redef]
                return [f - flip for f in plain(lane, i)] + [
                    f + flip - 1 for f in plain(lane, i, negated=True)
                ]

        enc = Bits(width) if width > 1 else Bit()
        return wires(c, name, enc, [[terms(lane, i) for i in range(width)] for lane in lanes])

    def _register_writers(self, st: Stage, operand: str) -> list[tuple[Stage, Field]]:
        """The earlier stages that may write `operand`'s register in this block, each with
        the bit "its rd is that register" (from the ROM, so early)."""
        c = self.c
        return [
            (t, c.and_(c.equal(t.ins["rd"], st.ins[operand]), t.ins["wr"]))
            for t in self.st[: st.index]
        ]

    def _predicate_writers(self, field: Field, stages: Sequence[Stage]) -> list:
        """The stages that may write predicate `field` (a ROM field) in this block."""
        c = self.c
        return [(t, c.and_(c.equal(t.ins["pd"], field), t.ins["wp"])) for t in stages]

    def _operands(self, st: Stage) -> None:
        """The stage's a, b, c (shfl's c bits only: clamp and segmask) and predicates. A
        later stage's reads are built inside `_build`'s placement floor, at the depth where
        the stage before it finishes, so its 32-bit reads do not hold residual width from
        the top."""
        # c: shfl's clamp and segmask bits; in stage 0 the whole word (an atomic is alone
        # in its block, and cas's new value is its c)
        c, ins = self.c, st.ins
        c_bits = 32 if st.index == 0 else SHFL_SEGMASK_SHIFT + SHFL_LANE_BITS
        ra, rb, rc = self.reg_addr[st.index]
        for mem in self.reg_files:
            st.reads_a.append(c.read(mem, ra).outputs[0])
            st.reads_b.append(c.read(mem, rb).outputs[0])
            st.reads_c.append(c.read(mem, rc).outputs[0])  # shfl's c
        if not st.pred_reads:
            self._predicate_reads(st)
        tag = f".{st.index}" if st.index else ""
        st.A = self._forwarded(f"A{tag}", 32, st.reads_a, st.writers["a"])
        st.B = self._forwarded(
            f"B{tag}",
            32,
            st.reads_b,
            st.writers["b"],
            (ins["b_is_imm"].ch(0), [(ins["b_is_imm"].ch(0), ins["bimm"])]),
        )
        # the adder's operand, straight from the same sources: ~b for sub (a + ~b + 1),
        # the offset for a memory address (a + imm), else b
        mem = st.opc(Op.LD) + st.opc(Op.ST) + st.opc(Op.ATOM)
        b_imm = ins["b_is_imm"].ch(0)
        st.adder_b = self._forwarded(
            f"adder.b{tag}",
            32,
            st.reads_b,
            st.writers["b"],
            (b_imm + mem, [(b_imm - mem, ins["bimm"]), (mem, ins["imm"])]),
            flip=st.opc(Op.SUB),
        )
        st.C = self._forwarded(
            f"C{tag}",
            c_bits,
            st.reads_c,
            st.writers["c"],
            (ins["c_is_imm"].ch(0), [(ins["c_is_imm"].ch(0), ins["imm"])]),
        )
        st.preds = {  # the reads themselves where no earlier stage may write (no copy)
            n: self._forwarded(f"p.{n}{tag}", 1, st.pred_reads[n], st.pred_writers[n])
            if st.pred_writers[n]
            else PerLane(st.pred_reads[n])
            for n in PRED_OPERANDS
        }

    def _predicate_reads(self, st: Stage) -> None:
        """The stage's guard, pa and pb from the predicate files (one bit a lane each)."""
        for n in PRED_OPERANDS:
            st.pred_reads[n] = [
                self.c.read(mem, self.pred_addr[st.index][n]).outputs[0] for mem in self.pred_files
            ]

    def _serves_next_lane(self) -> dict[str, list[Lin]]:
        """A store or atomic serves its executing lanes one per pass, in lane order: the
        EXEC pass the first, then the pass of the token that ends lane l's tokens the next
        one after l. That token is its word's FAMEM(l), or for an atomic whose old value
        travels (rd live), the FREG(l) of that value. Conditions (each 1 or <= 0), by kind."""
        st = self.st[0]  # a store or atomic is alone in its block
        k, atom, wb = self.kind, st.opc(Op.ATOM), st.ins["wb"].ch(0)
        famem = bit(k["FAMEM"]) + self.names_lane  # the model's FAMEM, not the host's
        return {
            # a store's, or an atomic's whose rd is dead (exclusive forms: wires sums them)
            "FAMEM": [famem - atom - 1, famem + atom - wb - 2],
            "FREG": [bit(k["FREG"]) + atom - 1],
        }

    @staticmethod
    def _pred(st: Stage, name: str, lane: int) -> Lin:
        """The stage's predicate operand `name` (guard, pa, pb) on a lane."""
        return st.preds[name].ch(0, lane)

    # -- ALU ---------------------------------------------------------------------------------------
    def _alu(self, st: Stage) -> None:
        c, ins, lanes = self.c, st.ins, range(self.lanes)
        A, B = st.A, st.B
        has, neg = ins["has_guard"].ch(0), ins["guard_neg"].ch(0)

        def guard_passes(lane: int) -> list[Lin]:
            """Exclusive AND forms whose sum is "the guard passes" (no guard, or the guard
            predicate xor its negation): inlined into E, one layer less than a field."""
            g = self._pred(st, "guard", lane)
            return [1 - has, has + g - neg - 1, has + neg - g - 1]

        # lanes that execute the instruction: the active ones on EXEC; on the pass that ends
        # a memory lane's tokens (`_serves_next_lane`; a store is alone in its block, so in
        # stage 0), those after that lane
        k = self.kind
        mem_next = self.serves_next if st.index == 0 else {"FAMEM": [], "FREG": []}

        def runs(lane: int) -> list[Lin]:
            forms = []
            for passes in guard_passes(lane):
                ready = self.cur_mask.ch(lane) + passes  # active, guard passes
                forms += (
                    [bit(k["EXEC"]) + ready - 2]
                    + [f + lanes_below(self.t_lane, lane) + ready - 3 for f in mem_next["FAMEM"]]
                    + [f + lanes_below(self.t_sel, lane) + ready - 3 for f in mem_next["FREG"]]
                )
            return forms

        st.E = wires(c, f"exe.{st.index}", Bit(), [[runs(lane)] for lane in range(self.lanes)])
        neg_a = ins["neg_a"].ch(0)
        pa_eff = wires(
            c,
            "sel.p",
            Bit(),
            [
                [[self._pred(st, "pa", lane) - neg_a, neg_a - self._pred(st, "pa", lane)]]
                for lane in range(self.lanes)
            ],
        )
        sel = Gated(
            lambda i, lane: [
                (pa_eff.ch(0, lane), A.ch(i, lane)),
                (1 - pa_eff.ch(0, lane), B.ch(i, lane)),
            ]
        )
        product = mul_lo_parts(c, A, B)
        # the shifter (a layer of MLP to itself) beside the multiplier's first adder
        # sublayer, where it leaves the multiplier room and its output goes straight to V
        with c.placed_after(product.operands):
            shift = self._shifter(st)
        units: dict[str, Unit] = {
            "add": self._adder(st),
            "mul": product,
            "logic": self._logic_unit(st),
            "shift": shift,
            "sel": sel,
            "s2r": st.s2r,
            "ld": self._loads(st),
            "ballot": self._votes(st, pa_eff),
            "shfl": self._shuffle(st),
            **self._bit_counts(st),
        }

        def serving(unit: str) -> Lin:
            """1 when the instruction is one of the unit's ops (a one-hot's sum)."""
            return sum((st.opc(x) for x in UNIT_OPS[unit]), Lin())

        def gathered(name: str, names: Sequence[str], onto: PerLane | None = None) -> MlpOp:
            """The lane's result from the units `names`: the executing op's output (gated
            by its opcodes here, or by the unit itself), one field per lane (the results
            buffers' data), added in place onto `onto` (the units gathered before)."""
            out = PerLane([c.new_field(c.fresh(f"{name}.{lane}"), Bits(32)) for lane in lanes])
            neurons = []
            for lane in lanes:
                for i in range(32):
                    o = {out.sig(i, lane): 1}
                    for unit in names:
                        r, serves = units[unit], serving(unit)
                        if isinstance(r, Gated):
                            terms = r.terms(i, lane)
                            if not r.gated:
                                terms = [(serves + g - 1, v) for g, v in terms]
                        elif isinstance(r, CarrySelect) or i >= r.encoding.width:
                            terms = []
                        else:
                            terms = [(serves, r.ch(i, lane))]
                        neurons += [neuron(gate, o, up=v) for gate, v in terms]
            for unit in names:
                r = units[unit]
                if isinstance(r, CarrySelect):  # the multiplier's last sublayer
                    neurons += r.select_neurons(
                        out, gate=sum((st.opc(x) for x in UNIT_OPS[unit]), Lin())
                    )
            read = {n for x in neurons for n in x.fields()}
            read |= {f.name for f in onto.fields} if onto is not None else set()
            return c.mlp(
                "gather",
                [c.fields[n] for n in sorted(read)],
                out.fields,
                neurons,
                inplace=dict(zip(out.fields, onto.fields, strict=True)) if onto else None,
            )

        # V accumulates the units in the order they finish, so that a finished unit's
        # output does not hold residual width until the slowest one is done
        acc = None
        for name, names in ACCUMULATION:
            op = gathered(name + (f".{st.index}" if st.index else ""), names, onto=acc)
            acc = PerLane(list(op.outputs))
        st.V = acc
        st.finishing = op.inputs  # ready a layer before V
        hs, eq, ge = (c.compare(A, B, cd) for cd in (Cond.HS, Cond.EQ, Cond.GE))
        conds = list(Cond)
        neg_b = ins["neg_b"].ch(0)
        pb_eff = wires(
            c,
            "plop.q",
            Bit(),
            [
                [[self._pred(st, "pb", lane) - neg_b, neg_b - self._pred(st, "pb", lane)]]
                for lane in range(self.lanes)
            ],
        )
        both = wires(
            c,
            "plop.and",
            Bit(),
            [[[pa_eff.ch(0, lane) + pb_eff.ch(0, lane) - 1]] for lane in range(self.lanes)],
        )
        fns = list(PredFn)

        def plop_terms(lane: int) -> list[tuple[Lin, Lin]]:
            x, y, xy = pa_eff.ch(0, lane), pb_eff.ch(0, lane), both.ch(0, lane)
            values = {PredFn.AND: xy, PredFn.OR: x + y - xy, PredFn.XOR: x + y - 2 * xy}
            return [
                (st.mode.ch(fns.index(fn)) + st.opc(Op.PLOP) - 1, form)
                for fn, form in values.items()
            ]

        votes = list(VoteMode)
        p_new = c.new_field(c.fresh("pred.new"), Bit(), self.lanes)
        neurons = []
        for lane in range(self.lanes):
            o = {p_new.sig(0, lane): 1}
            terms = (
                [
                    (st.mode.ch(conds.index(cd)) + st.opc(Op.SETP) - 1, form)
                    for cd, form in condition_forms(hs, eq, ge, lane).items()
                ]
                + plop_terms(lane)
                + [(st.opc(Op.SHFL) + mode - 1, ok) for mode, ok in st.shfl_fits[lane]]
            )
            neurons += [neuron(gate, o, up=form) for gate, form in terms]
            for mode, count in st.vote_counts.items():
                # [count >= 1] where the instruction is this vote: a gate off pushes the
                # count (|count| <= lanes) below both steps
                off = (st.mode.ch(votes.index(mode)) + st.opc(Op.VOTE) - 2) * (self.lanes + 1)
                neurons += [
                    relu_of(count + off, o),
                    relu_of(count + off - 1, {p_new.sig(0, lane): -1}),
                ]
        inputs = sorted({name for x in neurons for name in x.fields()})
        c.mlp("pred.new", [c.fields[n] for n in inputs], [p_new], neurons)
        st.p_new = p_new

    def _shuffle(self, st: Stage) -> Gated:
        """shfl.sync (PTX ISA): lane l reads a from its source lane where that lane is in
        range (its own a otherwise; a source past the warp's last lane also gives its own),
        and the in-range bit is the predicate. Per lane, with b, clamp and segmask as
        5-bit lane numbers: min = l & segmask, max = min | (clamp & ~segmask); up: src =
        l - b, in range when src >= max; down: l + b <= max; bfly: l ^ b <= max;
        idx: src = min | (b & ~segmask) <= max."""
        c, B, C, n = self.c, st.B, st.C, SHFL_LANE_BITS
        modes, lanes = list(ShflMode), range(self.lanes)

        def mode_is(m: ShflMode) -> Lin:
            return st.mode.ch(modes.index(m))

        def segmask(j: int, lane: int) -> Lin:
            return C.ch(SHFL_SEGMASK_SHIFT + j, lane)

        def lane_bit(lane: int, j: int) -> bool:
            return bool((lane >> j) & 1)

        def low_bits(lane: int, keep: Callable[[int], Lin]) -> list[list[Lin]]:
            """(lane & segmask) | (keep_j & ~segmask), bit by bit (the parts are disjoint)."""
            return [
                ([segmask(j, lane)] if lane_bit(lane, j) else []) + [keep(j) - segmask(j, lane)]
                for j in range(n)
            ]

        max_lane = wires(
            c,
            "shfl.max",
            Bits(n),
            [low_bits(lane, lambda j, at=lane: C.ch(j, at)) for lane in lanes],
        )
        idx_src = wires(
            c,
            "shfl.idx",
            Bits(n),
            [low_bits(lane, lambda j, at=lane: B.ch(j, at)) for lane in lanes],
        )

        def value(f: Field, lane: int, flip: int = 0) -> Lin:
            """The 5-bit number in f's lane (bits set in `flip` inverted: lane ^ b)."""
            return sum(
                (
                    ((1 - f.ch(j, lane)) if lane_bit(flip, j) else f.ch(j, lane)) * (1 << j)
                    for j in range(n)
                ),
                Lin(),
            )

        def b_is(lane: int, v: int) -> Lin:
            return match_form([B.ch(j, lane) for j in range(n)], v)

        fits, takes = [], []  # per lane: in range per mode; (gate, source lane) terms
        for lane in lanes:
            top = value(max_lane, lane)
            limits = {
                ShflMode.UP: lane - value(B, lane) - top,
                ShflMode.DOWN: top - lane - value(B, lane),
                ShflMode.BFLY: top - value(B, lane, flip=lane),
                ShflMode.IDX: top - value(idx_src, lane),
            }
            ok = {
                m: bit(c.threshold(f, 0, name=f"shfl.ok.{m.value}{lane}"))
                for m, f in limits.items()
            }
            fits.append([(mode_is(m), ok[m]) for m in modes])
            terms = []
            for src in lanes:
                if src == lane:
                    continue
                picks = {
                    ShflMode.UP: b_is(lane, lane - src) if src < lane else None,
                    ShflMode.DOWN: b_is(lane, src - lane) if src > lane else None,
                    ShflMode.BFLY: b_is(lane, lane ^ src),
                    ShflMode.IDX: match_form([idx_src.ch(j, lane) for j in range(n)], src),
                }
                terms += [
                    (mode_is(m) + ok[m] + pick - 2, src)
                    for m, pick in picks.items()
                    if pick is not None
                ]
            takes.append(terms)
        st.shfl_fits = fits
        # a_src = a_own + (a_src - a_own) where the source is another lane
        A = st.A
        return Gated(
            lambda i, lane: (
                [(Lin.of(1), A.ch(i, lane))]
                + [(gate, A.ch(i, src) - A.ch(i, lane)) for gate, src in takes[lane]]
            )
        )

    def _votes(self, st: Stage, pa_eff: Field) -> Field:
        """vote over the executing lanes' pa ^ neg_a: ballot (the voters' lane mask, in
        every lane) as a result, any and all as predicates (`vote_counts`, stepped in
        `pred.new`)."""
        c, E, lanes = self.c, st.E, range(self.lanes)
        voters = wires(
            c,
            "vote.voters",
            Bits(self.lanes),
            [[[E.ch(0, n) + pa_eff.ch(0, n) - 1] for n in lanes]],
        )
        # as [count >= 1] (`pred.new`): any, some voter; all, no executing lane votes no
        # (voters <= executing lanes)
        st.vote_counts = {
            VoteMode.ANY: sum((voters.ch(n) for n in lanes), Lin()),
            VoteMode.ALL: 1 + sum((voters.ch(n) - E.ch(0, n) for n in lanes), Lin()),
        }
        return wires(
            c,
            "ballot",
            Bits(self.lanes),
            [[[voters.ch(n)] for n in lanes] for _ in lanes],
        )

    def _bit_counts(self, st: Stage) -> dict[str, Unit]:
        """popc, clz (32 for 0) and brev of a."""
        c, A = self.c, st.A
        popc = c.to_bits(c.popcount(A), width=6, name="popc")
        top, any_ = c.priority(A, lowest=False, name="msb")
        clz = wires(
            c,
            "clz",
            Bits(6),
            [
                [
                    [top.ch(i, lane) for i in range(32) if ((31 - i) >> j) & 1]
                    + ([1 - any_.ch(0, lane)] if (32 >> j) & 1 else [])
                    for j in range(6)
                ]
                for lane in range(self.lanes)
            ],
        )
        brev = Gated(lambda i, lane: [(Lin.of(1), A.ch(31 - i, lane))])
        return {"popc": popc, "clz": clz, "brev": brev}

    def _adder(self, st: Stage) -> Field:
        """One adder for add, sub (a + ~b + 1) and the memory address (a + imm): its
        operand comes with the stage's operands (`_operands`)."""
        sub = bits_of(self.c, "adder.cin", [st.opc(Op.SUB)])
        st.sum = self.c.add(st.A, st.adder_b, carry_in=sub)
        return st.sum

    def _logic_unit(self, st: Stage) -> Gated:
        """and / or / xor, gated by the opcode: terms of the result gather."""
        o_and, o_or, o_xor = st.opc(Op.AND), st.opc(Op.OR), st.opc(Op.XOR)
        return Gated(
            lambda i, lane: logic_terms(st.A.ch(i, lane), st.B.ch(i, lane), o_and, o_or, o_xor),
            gated=True,
        )

    def _shifter(self, st: Stage) -> Field:
        """shl / shr / sra by the whole register b in one block, gated by the opcode:
        out_i = sum_k [b == k] * a_(i -+ k); sra fills with the sign where i + b >= 32.
        A field of its own (about a thousand neurons a lane: an MLP layer to itself)."""
        c = self.c
        ops = {Op.SHL: st.opc(Op.SHL), Op.SHR: st.opc(Op.SHR), Op.SRA: st.opc(Op.SRA)}
        sign = wires(
            c,
            "sra.sign",
            Bit(),
            [[[st.A.ch(31, lane) + ops[Op.SRA] - 1]] for lane in range(self.lanes)],
        )
        out = c.new_field(c.fresh("shift"), Bits(32), self.lanes)
        neurons = []
        for lane in range(self.lanes):
            forms, high = words_shift_forms(st.B, lane, 32)
            low_value = sum((st.B.ch(j, lane) * (1 << j) for j in range(5)), Lin())
            for k, form in enumerate(forms):
                for i in range(32):
                    o = {out.sig(i, lane): 1}
                    if i - k >= 0:
                        neurons.append(neuron(form + ops[Op.SHL] - 1, o, up=st.A.ch(i - k, lane)))
                    if i + k < 32:
                        gate = form + ops[Op.SHR] + ops[Op.SRA] - 1
                        neurons.append(neuron(gate, o, up=st.A.ch(i + k, lane)))
            top = sign.ch(0, lane)
            neurons.append(neuron(top, {out.sig(i, lane): 1 for i in range(32)}))
            for i in range(32):
                keep = (31 - i) - low_value - high * 32  # >= 0: bit i is not sign fill
                o = {out.sig(i, lane): 1}
                neurons.append(neuron(keep + 1, {out.sig(i, lane): -1}, up=top))
                neurons.append(neuron(keep, o, up=top))
        c.mlp("shift", [st.A, st.B, sign, st.op], [out], neurons)
        return out

    def _special_registers(self, st: Stage) -> Field:
        """s2r: %tid (thread t = lanes * warp + lane's entry in the BLOCK table), %ntid,
        %ctaid, %nctaid (the latches), %laneid, %warpid."""
        c = self.c
        specials = list(Special)
        mode = [st.ins["mode"].ch(i) for i in range(st.ins["mode"].encoding.width)]

        def m(sp: Special) -> Lin:  # from the mode bits: built before the mode one-hot
            return match_form(mode, specials.index(sp))

        def axis_specials(name: str) -> list[Special]:
            return [Special(f"{name}.{a}") for a in AXES]

        latched = [
            (sp, f)
            for name, axes in (("ntid", self.block), ("nctaid", self.grid), ("ctaid", self.cta))
            for sp, f in zip(axis_specials(name), axes.values(), strict=True)
        ]
        # only the low bits of a special register can be set: the field is that narrow
        width = max(DIM_BITS, INDEX_BITS, self.wb, (self.lanes - 1).bit_length())
        lanes = []
        for lane in range(self.lanes):
            chans = []
            for i in range(width):
                terms = []
                for w in range(self.spec.warps):
                    here = matches(self.cur_w, w)
                    t = self.lanes * w + lane
                    if i < INDEX_BITS and t < self.tids.lanes:
                        for k, sp in enumerate(axis_specials("tid")):
                            terms.append(m(sp) + here + self.tids.ch(INDEX_BITS * k + i, t) - 2)
                    if (w >> i) & 1:
                        terms.append(m(Special.WARPID) + here - 1)
                if (lane >> i) & 1:
                    terms.append(m(Special.LANEID))
                terms += [m(sp) + f.ch(i) - 1 for sp, f in latched if i < f.encoding.width]
                chans.append(terms)
            lanes.append(chans)
        return wires(c, "s2r", Bits(width), lanes)

    def _address_traps(self, st: Stage) -> None:
        """Per lane, a load/store/atomic whose byte address a + imm is not 4-byte aligned or
        lies outside memory, as the interpreter traps (`trap_misaligned`, `trap_outside`;
        misaligned wins, as in the interpreter's message)."""
        c, s, lanes = self.c, st.sum, range(self.lanes)
        mem = st.opc(Op.LD) + st.opc(Op.ST) + st.opc(Op.ATOM)
        low = WORD_ADDR_SHIFT
        top = low + ADDR_BITS  # the first bit past a word index
        # misaligned: a word access with either low bit set, st.16 with bit 0 (st.8: never)
        byte, half = (bit(st.narrow[w]) for w in (StoreWidth.B8, StoreWidth.B16))
        word_access = 1 - byte - half
        odd = wires(
            c,
            "trap.odd",
            Bit(),
            [[[s.ch(0, n) - byte, word_access + s.ch(1, n) - s.ch(0, n) - 1]] for n in lanes],
        )
        high, past = [], []
        for n in lanes:
            high.append(
                bit(
                    c.threshold(
                        sum((s.ch(i, n) for i in range(top, 32)), Lin()), 1, name=f"trap.high{n}"
                    )
                )
            )
            word = sum((s.ch(i, n) * (1 << (i - low)) for i in range(low, top)), Lin())
            past.append(bit(c.threshold(word, self.spec.memory_words, name=f"trap.past{n}")))
        ex = bit(self.kind["EXEC"])

        def traps(n: int) -> Lin:
            return ex + mem + st.E.ch(0, n) - 2  # lane n runs a memory instruction

        st.trap_misaligned = wires(
            c, "trap.misaligned", Bits(self.lanes), [[[traps(n) + odd.ch(0, n) - 1] for n in lanes]]
        )
        st.trap_outside = wires(
            c,
            "trap.outside",
            Bits(self.lanes),
            [
                [
                    [
                        traps(n) + high[n] - odd.ch(0, n) - 1,
                        traps(n) + past[n] - high[n] - odd.ch(0, n) - 1,
                    ]
                    for n in lanes
                ]
            ],
        )

    def _loads(self, st: Stage) -> Field:
        """ld and the memory unit's read port: one memory copy per lane, addressed by the
        lane's word a + imm (bits 2..8 of the byte address); each stage reads its own."""
        c, tag = self.c, f".{st.index}" if st.index else ""
        self._address_traps(st)
        st.word_addr = [
            bits_of(
                c,
                f"wordaddr{lane}{tag}",
                [st.sum.ch(WORD_ADDR_SHIFT + i, lane) for i in range(ADDR_BITS)],
            )
            for lane in range(self.lanes)
        ]
        if st.index == 0:
            self._memory_lane(st)
            self._global_memory(st)
        st.loaded = [
            c.read(mem, st.word_addr[lane]).outputs[0] for lane, mem in enumerate(self.memories)
        ]
        return PerLane(st.loaded)

    def _global_memory(self, st: Stage) -> None:
        """The memory, one copy per lane (each lane reads its own word on a pass). FAMEM(l)
        commits to lane l's a + imm, recomputed on its own pass (lane l's registers and the
        block, a store alone in it, are the same as on the pass that computed the word);
        the host's memory load (no lane) to the MADDR cursor."""
        c = self.c
        no_lane = 1 - self.names_lane
        store_addr = products(
            c,
            "store.addr",
            Bits(ADDR_BITS),
            [
                [
                    [(no_lane, self.memcur.ch(i))]
                    + [
                        (self.t_lane.ch(n), st.sum.ch(WORD_ADDR_SHIFT + i, n))
                        for n in range(self.lanes)
                    ]
                    for i in range(ADDR_BITS)
                ]
            ],
        )
        self.memories = []
        for lane in range(self.lanes):
            mem = c.memory(f"mem{lane}", self.spec.memory_words, [Column("v", Bits(32))])
            c.write(mem, store_addr, [self.word_in], when=self.kind["FAMEM"])
            self.memories.append(mem)

    def _memory_lane(self, st: Stage) -> None:
        """The lane a store or atomic serves on this pass: the first executing one (EXEC's
        first, or the next after the lane whose tokens just ended, `_serves_next_lane`)."""
        c, k = self.c, self.kind
        exe = bits_of(c, "exe.bits", [st.E.ch(0, lane) for lane in range(self.lanes)])
        self.exe_first, self.exe_any = c.priority(exe, name="exe.first")
        # the passes whose memory lane the atomic buffer keeps
        mem_next = self.serves_next
        self.memory_pass = wires(
            c,
            "memory.pass",
            Bit(),
            [[[bit(k["EXEC"]), *mem_next["FAMEM"], *mem_next["FREG"]]]],
        )

    # -- memory unit (EXEC pass and the passes that serve the next lane) ------------------------
    def _memory_unit(self) -> None:
        """For the memory lane l (`_memory_lane`): old = mem[addr_l], new = fn(old, b_l[, c_l])
        (st: b_l), kept with l in a buffer that the following FAMEM / FREG tokens read out."""
        c, st = self.c, self.st[0]  # a store or atomic is alone in its block
        lane = self.exe_first
        old = pick_lane(c, "atom.old", lane, PerLane(st.loaded))
        b = pick_lane(c, "atom.b", lane, st.B)
        swap = pick_lane(c, "atom.c", lane, st.C)  # cas's new value: stage 0's c is a word
        hs, eq, ge = (c.compare(old, b, cd) for cd in (Cond.HS, Cond.EQ, Cond.GE))
        cf = condition_forms(hs, eq, ge, 0)
        atoms = list(AtomOp)

        def fn_is(fn: AtomOp) -> Lin:
            return st.opc(Op.ATOM) + st.mode.ch(atoms.index(fn)) - 1

        # one adder for add (old + b), inc (old + 1) and dec (old + 0xffffffff)
        addend = wires(
            c,
            "atom.addend",
            Bits(32),
            [
                [
                    [fn_is(AtomOp.ADD) + b.ch(i) - 1, fn_is(AtomOp.DEC)]
                    + ([fn_is(AtomOp.INC)] if i == 0 else [])
                    for i in range(32)
                ]
            ],
        )
        total = c.add(old, addend)
        # dec wraps to b where old == 0 or old > b (exclusive: old == 0 is never > b)
        wraps = 1 - bit(c.or_bits(old, name="atom.old.nz")) + cf[Cond.HI]
        # fn -> [(condition form, value)]: the result is the value whose condition is 1
        choices: dict[AtomOp, list[tuple[Lin, Field]]] = {
            AtomOp.ADD: [(Lin.of(1), total)],
            AtomOp.INC: [(1 - cf[Cond.HS], total)],  # old >= b gives 0
            AtomOp.DEC: [(wraps, b), (1 - wraps, total)],
            AtomOp.EXCH: [(Lin.of(1), b)],
            AtomOp.CAS: [(cf[Cond.EQ], swap), (1 - cf[Cond.EQ], old)],
            AtomOp.MIN: [(cf[Cond.LT], old), (1 - cf[Cond.LT], b)],
            AtomOp.MAX: [(cf[Cond.GT], old), (1 - cf[Cond.GT], b)],
            AtomOp.MINU: [(cf[Cond.LO], old), (1 - cf[Cond.LO], b)],
            AtomOp.MAXU: [(cf[Cond.HI], old), (1 - cf[Cond.HI], b)],
        }
        # and / or / xor in one field, gated by the function (as the ALU's logic unit)
        f_and, f_or, f_xor = (fn_is(f) for f in (AtomOp.AND, AtomOp.OR, AtomOp.XOR))
        logic = products(
            c,
            "atom.logic",
            Bits(32),
            [[logic_terms(old.ch(i), b.ch(i), f_and, f_or, f_xor) for i in range(32)]],
        )
        narrow = st.narrow
        word_store = st.opc(Op.ST) - bit(narrow[StoreWidth.B8]) - bit(narrow[StoreWidth.B16])
        # the memory lane's byte offset in the word, for st.8 / st.16
        offset = products(
            c,
            "store.offset",
            Bits(WORD_ADDR_SHIFT),
            [[[(lane.ch(n), st.sum.ch(i, n)) for n in range(self.lanes)] for i in range(2)]],
        )
        chans = []
        for i in range(32):
            terms = [(word_store, b.ch(i))]
            for width, is_narrow in narrow.items():
                # the field at the offset takes b's low bits; the other bytes keep old's
                span = width.value // 8
                for start in range(0, WORD_BYTES, span):
                    at = (
                        match_form([offset.ch(j) for j in range(2)], start)
                        if span == 1
                        else (offset.ch(1) if start else 1 - offset.ch(1))
                    )
                    inside = 8 * start <= i < 8 * (start + span)
                    src = b.ch(i - 8 * start) if inside else old.ch(i)
                    terms.append((bit(is_narrow) + at - 1, src))
            for fn, options in choices.items():
                terms += [(fn_is(fn) + when - 1, r.ch(i)) for when, r in options]
            terms.append((Lin.of(1), logic.ch(i)))
            chans.append(terms)
        new = products(c, "atom.new", Bits(32), [chans])
        self.atb_new, self.atb_old, self.atb_lane = self._register(
            "atomic",
            [
                Column("new", Bits(32)),
                Column("old", Bits(32)),
                Column("lane", self.exe_first.encoding),
            ],
            [new, old, lane],
            self.memory_pass,
            # read by the write-back logic, after the last stage, and not in the layer
            # of the scheduler's memories (they take all its heads)
            after=[*self.st[-1].V.fields, *self.sched_nb.values()],
        )

    # -- terminator and scheduler ---------------------------------------------------------------
    def _terminator(self) -> None:
        c, k = self.c, self.kind
        ins = self.blk
        self.pt = [c.read(mem, self.pred_term_addr).outputs[0] for mem in self.pred_files]
        # the branch condition: the branch predicate (the latest stage's new value on lanes
        # that wrote it) xor the terminator's negation
        cond = self._forwarded(
            "term.cond",
            1,
            self.pt,
            self._predicate_writers(ins["term_pred"], self.st),
            flip=ins["term_neg"].ch(0),
        )
        jump = self.term_is(TermKind.JUMP) + self.term_is(TermKind.BARRIER)
        br = self.term_is(TermKind.BRANCH)
        # each lane's next block, one field per lane (the scheduler memories' data)
        nb = [
            wires(
                c,
                f"next.b{lane}",
                Bits(self.bb),
                [
                    [
                        [
                            jump + ins["target"].ch(i) - 1 - bit(k["CTA"]),
                            br + cond.ch(0, lane) + ins["target"].ch(i) - 2 - bit(k["CTA"]),
                            br + ins["other"].ch(i) - cond.ch(0, lane) - 1 - bit(k["CTA"]),
                        ]
                        for i in range(self.bb)
                    ]
                ],
            )
            for lane in range(self.lanes)
        ]
        # the scheduler's state: (next block, live) for every (warp, lane), one memory each
        self.sched_nb, self.sched_live = {}, {}
        ntid = self.ntid.value()
        exit_ = self.term_is(TermKind.EXIT)
        for w in range(self.spec.warps):
            for lane in range(self.lanes):
                t = self.lanes * w + lane
                starts = c.threshold(ntid, t + 1, name=f"starts{t}")
                live = wires(
                    c,
                    f"live.new{t}",
                    Bit(),
                    [[[1 - exit_ - bit(k["CTA"]), bit(k["CTA"]) + bit(starts) - 1]]],
                )
                when = wires(
                    c,
                    f"sched.we{t}",
                    Bit(),
                    [
                        [
                            [
                                bit(k["EXEC"])
                                + matches(self.cur_w, w)
                                + self.cur_mask.ch(lane)
                                - 2,
                                bit(k["CTA"]),
                            ]
                        ]
                    ],
                )
                (nb_r, live_r) = self._register(
                    f"sched{t}",
                    [Column("nb", Bits(self.bb)), Column("live", Bit())],
                    [nb[lane], live],
                    when,
                )
                self.sched_nb[w, lane], self.sched_live[w, lane] = nb_r, live_r

    def _barrier_latches(self) -> list[Field]:
        """Per warp, "waiting at a barrier": set by the EXEC of a block that ends in
        bar.sync, cleared for every warp by BAR (the release) and by CTA."""
        c, k = self.c, self.kind
        arrives = self.term_is(TermKind.BARRIER)
        waits = []
        for w in range(self.spec.warps):
            when = wires(
                c,
                f"wait.we{w}",
                Bit(),
                [
                    [
                        [
                            bit(k["EXEC"]) + matches(self.cur_w, w) + arrives - 2,
                            bit(k["BAR"]),
                            bit(k["CTA"]),
                        ]
                    ]
                ],
            )
            (wait,) = self._register(f"wait{w}", [Column("on", Bit())], [k["EXEC"]], when)
            waits.append(wait)
        return waits

    def _scheduler(self) -> None:
        """Lowest live warp not waiting at a barrier; in it, the lowest next block among its
        live lanes (minimum-PC) and the lanes waiting there. `any_live` without `any_ready`:
        every live warp waits, and the next token is the release, BAR."""
        c, lanes = self.c, self.lanes
        waits = self._barrier_latches()
        big = 1 << self.bb  # a dead lane's block never counts as lower
        cands, blocks = [], []
        for w in range(self.spec.warps):
            live = [bit(self.sched_live[w, lane]) for lane in range(lanes)]
            nb = [self.sched_nb[w, lane].value() for lane in range(lanes)]
            # le[l, o]: lane l's next block is at most lane o's (or o is dead); lt[l, o]:
            # strictly below it, which l needs against the lanes o < l to run first
            le, lt = {}, {}
            for lane in range(lanes):
                for other in range(lanes):
                    if other != lane:
                        gap = nb[other] - nb[lane] + big * (1 - live[other])
                        le[lane, other] = c.threshold(gap, 0, name=f"le.{w}.{lane}.{other}")
                        if other < lane:
                            lt[lane, other] = c.threshold(gap, 1, name=f"lt.{w}.{lane}.{other}")

            # the lanes at the lowest next block (the EXEC's mask), and the first of them (the
            # lowest lane: it beats the lanes below strictly), side by side: no priority
            # encoder after the comparisons
            at_lowest, first_of = [], []
            for lane in range(lanes):
                others = [o for o in range(lanes) if o != lane]
                below = lanes - 1
                at_lowest.append(
                    live[lane] + sum((bit(le[lane, o]) for o in others), Lin()) - below
                )
                beats = (bit(lt.get((lane, o), le[lane, o])) for o in others)
                first_of.append(live[lane] + sum(beats, Lin()) - below)
            cand = wires(c, f"cand{w}", Bits(lanes), [[[f] for f in at_lowest]])
            first = wires(c, f"first{w}", OneHot(lanes, allow_none=True), [[[f] for f in first_of]])
            nb_bits = [self.sched_nb[w, lane] for lane in range(lanes)]
            block = products(
                c,
                f"block{w}",
                Bits(self.bb),
                [
                    [
                        [(first.ch(lane), nb_bits[lane].ch(i)) for lane in range(lanes)]
                        for i in range(self.bb)
                    ]
                ],
            )
            cands.append(cand)
            blocks.append(block)
        # warps with a live lane, and those of them not waiting at a barrier: straight from
        # the lanes' live bits, beside the comparisons
        lives = [
            sum((bit(self.sched_live[w, lane]) for lane in range(lanes)), Lin())
            for w in range(self.spec.warps)
        ]
        self.any_live = c.threshold(sum(lives, Lin()), 1, name="any.live")
        ready = steps(
            c,
            "warps.ready",
            [(n - lanes * bit(wait), 1) for n, wait in zip(lives, waits, strict=True)],
        )
        wsel, self.any_ready = c.priority(ready, name="warp")
        self.next_b = products(
            c,
            "next.exec.b",
            Bits(self.bb),
            [[[(wsel.ch(w), b.ch(i)) for w, b in enumerate(blocks)] for i in range(self.bb)]],
        )
        self.next_mask = products(
            c,
            "next.exec.mask",
            Bits(self.lanes),
            [[[(wsel.ch(w), m.ch(i)) for w, m in enumerate(cands)] for i in range(self.lanes)]],
        )
        self.next_w = wires(
            c,
            "next.exec.w",
            Bits(self.wb),
            [
                [
                    [wsel.ch(w) for w in range(self.spec.warps) if (w >> i) & 1]
                    for i in range(self.wb)
                ]
            ],
        )
        self._next_cta()

    def _next_cta(self) -> None:
        """The CTA after %ctaid in x-fastest order: the index counts up along x, wrapping to
        0 and carrying into y at %nctaid.x, and from y into z; none after the last."""
        c = self.c
        top = (1 << INDEX_BITS) - 1
        wraps, ups = {}, {}
        for a in AXES:
            idx, dim = self.cta[a], self.grid[a]
            wraps[a] = bit(c.threshold(idx.value() + 1 - dim.value(), 0, name=f"cta.wrap.{a}"))
            ups[a] = c.lookup(
                idx, [min(v + 1, top) for v in range(top + 1)], idx.encoding, name=f"cta.up.{a}"
            )
        last = c.threshold(sum(wraps.values(), Lin()), len(AXES), name="cta.last")
        self.more_ctas = wires(c, "cta.more", Bit(), [[[1 - bit(last)]]])
        wx, wy = wraps["x"], wraps["y"]
        # (condition, source) pairs per axis: the next index's bits are the source's
        sources = {
            "x": [(1 - wx, ups["x"])],
            "y": [(wx - wy, ups["y"]), (1 - wx, self.cta["y"])],
            "z": [(wx + wy - 1, ups["z"]), (1 - wx, self.cta["z"]), (wx - wy, self.cta["z"])],
        }
        # one field, so that only 12 channels wait for the scheduler at the end of the pass
        self.cta_next = wires(
            c,
            "cta.next",
            Bits(len(AXES) * INDEX_BITS),
            [
                [
                    [when + src.ch(i) - 1 for when, src in sources[a]]
                    for a in AXES
                    for i in range(INDEX_BITS)
                ]
            ],
        )

    # -- results buffer and the next token ------------------------------------------------------
    def _results(self) -> None:
        """EXEC keeps each stage's lane results, executed lanes and new predicates in deep
        one-row memories; the write-back passes after it read them."""
        c = self.c
        self.res_v, self.res_e, self.res_p, self.res_u = [], [], [], []
        last = self.st[-1]
        for st in self.st:
            s, E = st.index, st.E
            exe_bits = bits_of(c, f"exe.bits.{s}", [E.ch(0, lane) for lane in range(self.lanes)])
            pvals = wires(
                c,
                f"pvals.{s}",
                Bits(self.lanes),
                [[[st.p_new.ch(0, lane) + E.ch(0, lane) - 1] for lane in range(self.lanes)]],
            )
            # the executed lanes and predicates are known long before the uniform flag
            # (which compares the results): kept apart, the write-back logic reads them early
            res_e, res_p = self._register(
                f"result.lanes.{s}",
                [Column("exe", Bits(self.lanes)), Column("pv", Bits(self.lanes))],
                [exe_bits, pvals],
                self.kind["EXEC"],
            )
            # an earlier stage's results are kept where the last stage's are (the
            # write-back logic wants them all at once), not beside a later stage's datapath
            late = c.placed_after(last.V.fields) if st is not last else contextlib.nullcontext()
            with late:
                values, uniform = self._stage_results(st, after=last.finishing)
            self.res_v.append(values)
            self.res_e.append(res_e)
            self.res_p.append(res_p)
            self.res_u.append(uniform)

    def _stage_results(self, st: Stage, after: Sequence[Field]) -> tuple[list[Field], Field]:
        """A stage's results buffer (one memory per lane, read no earlier than `after`)
        and its uniform flag: every active lane executed and all values are equal, so one
        write-back word serves them all."""
        c, s, E, lanes = self.c, st.index, st.E, range(self.lanes)
        # the bits in which two executing lanes differ, over every pair, in one channel
        pairs = [(x, y) for x in lanes for y in lanes if x < y]
        diff = wires(
            c,
            f"uni.diff.{s}",
            Ints(1, 0, 32 * len(pairs)),
            [
                [
                    [
                        sign * (st.V.ch(i, x) - st.V.ch(i, y)) + E.ch(0, x) + E.ch(0, y) - 2
                        for x, y in pairs
                        for i in range(32)
                        for sign in (1, -1)
                    ]
                ]
            ],
        )
        missing = sum((self.cur_mask.ch(lane) - E.ch(0, lane) for lane in lanes), Lin())
        uni = wires(c, f"uniform.{s}", Bit(), [[[1 - diff.ch(0) - missing]]])
        values = [
            self._register(
                f"result{s}.{lane}",
                [Column("v", Bits(32))],
                [st.V.fields[lane]],
                self.kind["EXEC"],
                after=after,
            )[0]
            for lane in lanes
        ]
        (uniform,) = self._register(
            f"result.uniform.{s}", [Column("uni", Bit())], [uni], self.kind["EXEC"]
        )
        return values, uniform

    def _next_token(self) -> None:
        """After an EXEC: a TRAP, or the write-backs due, stage by stage (its PRED, then its
        register word, lane by lane or once for all lanes), or a store's / atomic's words,
        then the scheduler's token. Each pass finds the next item from its own token."""
        c, k = self.c, self.kind
        st0, stages, lanes = self.st[0], range(self.stages), range(self.lanes)
        L = self.lanes
        ts = [self.t_s.ch(s) for s in stages]
        any_e = [c.or_bits(E, name=f"any.exe.{s}") for s, E in enumerate(self.res_e)]
        efirst = [c.priority(E, name=f"res.first.{s}")[0] for s, E in enumerate(self.res_e)]
        # lanes after the current register write-back's lane among its stage's executed
        # lanes / after the current atomic's lane
        after_sel = wires(
            c,
            "after.sel",
            Bits(L),
            [
                [
                    [
                        self.res_e[s].ch(lane) + ts[s] + lanes_below(self.t_sel, lane) - 2
                        for s in stages
                    ]
                    for lane in lanes
                ]
            ],
        )
        nxt, nxt_any = c.priority(after_sel, name="next.lane")
        is_mem = bit(self.mem_kind, 0) + bit(self.mem_kind, 1)
        atom = bit(self.mem_kind, 1)  # a store or atomic is alone in its block: stage 0
        ex = bit(k["EXEC"])
        sel_all = self.t_sel.ch(self.vocab.all_lanes)
        # an address trap ends the launch: TRAP(stage, first trapping lane, why) after the
        # EXEC, for the first stage that traps (the interpreter stops there)
        trapping = wires(
            c,
            "trap.lanes",
            Bits(self.stages * L),
            [[[st.trap_misaligned.ch(n), st.trap_outside.ch(n)] for st in self.st for n in lanes]],
        )
        tfirst, trap_any = c.priority(trapping, name="trap.first")
        trap = bit(trap_any)
        # the write-back items due, in token order: stage s's PRED (item 2s), then its
        # register word (item 2s + 1; an atomic's old value goes its own way, below)
        due = wires(
            c,
            "wb.due",
            Bits(2 * self.stages),
            [
                [
                    terms
                    for s, st in enumerate(self.st)
                    for terms in (
                        [st.ins["wbp"].ch(0) + bit(any_e[s]) - 1],
                        [st.ins["wb"].ch(0) + bit(any_e[s]) - (atom if s == 0 else 0) - 1],
                    )
                ]
            ],
        )
        # where the current token leaves the sequence: after the EXEC (-1), after stage s's
        # PRED (2s), after stage s's last register token (2s + 1)
        after: dict[int, list[Lin]] = {-1: [ex - trap]}
        freg = bit(k["FREG"])
        for s in stages:
            after[2 * s] = [bit(k["PRED"]) + ts[s] - 1]
            after[2 * s + 1] = [
                freg + ts[s] + sel_all - atom - 2,  # the all-lanes word
                freg + ts[s] - sel_all - bit(nxt_any) - atom - 1,  # the last lane's
            ]

        def starts(item: int) -> list[Lin]:
            """Item `item` comes next: it is due, and none between the cursor and it is."""
            return [
                form + due.ch(item) - sum((due.ch(j) for j in range(cur + 1, item)), Lin()) - 1
                for cur, forms in after.items()
                if cur < item
                for form in forms
            ]

        go: dict[str, list[Lin]] = {"trap": [trap]}
        for s in stages:
            go[f"pred{s}"] = starts(2 * s)
            go[f"reg.start{s}"] = starts(2 * s + 1)
            go[f"reg.next{s}"] = [bit(k["BREG"]) + ts[s] - atom - 1]
            go[f"reg.lane{s}"] = [freg + ts[s] - sel_all + bit(nxt_any) - atom - 2]
        go |= {
            # a store's / atomic's word for the lane the memory unit served on this pass:
            # the EXEC's first executing lane, then each next one (`_serves_next_lane`)
            "amem.start": [bit(self.memory_pass) + is_mem + bit(self.exe_any) - trap - 2],
            "amem.next": [bit(k["BAMEM"])],
            # an atomic's old value, to rd of the lane its FAMEM(l) named (BREG/FREG(l))
            "areg.start": [bit(k["FAMEM"]) + self.names_lane + st0.ins["wb"].ch(0) + atom - 3],
            "areg.next": [bit(k["BREG"]) + atom - 1],
        }
        names = list(go)
        gof = wires(c, "go", Bits(len(names)), [list(go.values())])

        def g(name: str) -> Lin:
            return gof.ch(names.index(name))

        def g_all(prefix: str) -> Lin:
            return sum((g(f"{prefix}{s}") for s in stages), Lin())

        pred = [g(f"pred{s}") for s in stages]
        reg_start = [g(f"reg.start{s}") for s in stages]
        reg_next = [g(f"reg.next{s}") for s in stages]
        reg_lane = [g(f"reg.lane{s}") for s in stages]
        sched = wires(
            c, "go.sched", Bit(), [[[1 - sum((gof.ch(i) for i in range(len(names))), Lin())]]]
        )
        # the register write-back's stage and lane (value) and selector (token)
        wlane = wires(
            c,
            "wb.lane",
            OneHot(self.stages * L, allow_none=True),
            [
                [
                    [
                        reg_start[s] + efirst[s].ch(lane) - 1,
                        reg_next[s] + self.t_sel.ch(lane) - 1,
                        reg_next[s] + sel_all + efirst[s].ch(lane) - 2,
                        reg_lane[s] + nxt.ch(lane) - 1,
                    ]
                    for s in stages
                    for lane in lanes
                ]
            ],
        )
        u = [self.res_u[s].ch(0) for s in stages]
        wsel = wires(
            c,
            "o_sel",
            OneHot(L + 1, allow_none=True),
            [
                [
                    *[
                        [
                            form
                            for s in stages
                            for form in (
                                reg_start[s] + efirst[s].ch(lane) - u[s] - 1,
                                reg_next[s] + self.t_sel.ch(lane) - 1,
                                reg_lane[s] + nxt.ch(lane) - 1,
                            )
                        ]
                        + [
                            g("areg.start") + self.t_lane.ch(lane) - 1,
                            g("areg.next") + self.t_sel.ch(lane) - 1,
                        ]
                        for lane in lanes
                    ],
                    [
                        form
                        for s in stages
                        for form in (reg_start[s] + u[s] - 1, reg_next[s] + sel_all - 1)
                    ],
                ]
            ],
        )
        o_s = wires(
            c,
            "o_s",
            OneHot(self.stages, allow_none=True),
            [
                [
                    [pred[s], reg_start[s], reg_next[s], reg_lane[s]]
                    + ([g("areg.start"), g("areg.next")] if s == 0 else [])
                    + [g("trap") + sum((tfirst.ch(s * L + n) for n in lanes), Lin()) - 1]
                    for s in stages
                ]
            ],
        )
        results = [r for s in stages for r in self.res_v[s]]
        v_reg = pick_lane(c, "wb.vreg", wlane, lanes_of(c, "results", results))
        reg_t = g_all("reg.start") + g_all("reg.next") + g_all("reg.lane")
        amem_t, areg_t = g("amem.start") + g("amem.next"), g("areg.start") + g("areg.next")
        reg_start_all, reg_next_all, reg_lane_all = (
            g_all("reg.start"),
            g_all("reg.next"),
            g_all("reg.lane"),
        )
        word = products(
            c,
            "wb.word",
            Bits(32),
            [
                [
                    [
                        (reg_t, v_reg.ch(i)),
                        (amem_t, self.atb_new.ch(i)),
                        (areg_t, self.atb_old.ch(i)),
                    ]
                    for i in range(32)
                ]
            ],
        )
        firsts = reg_start_all + reg_lane_all + g("amem.start") + g("areg.start")
        nexts = [reg_next_all, g("amem.next"), g("areg.next")]
        pos = wires(
            c,
            "wb.pos",
            OneHot(WORD_BYTES, allow_none=True),
            [
                [[firsts]]
                + [[nx + self.t_k.ch(j) - 1 for nx in nexts] for j in range(WORD_BYTES - 1)]
            ],
        )
        # [a byte above byte j of the word is nonzero]: byte j then travels in a BYTE token,
        # else it is the word's final one; one threshold on the word's higher bits
        higher = [
            c.threshold(
                sum((word.ch(i) for i in range(8 * (j + 1), 32)), Lin()),
                1,
                name=f"more{j}",
                inputs=[word],
            )
            for j in range(WORD_BYTES - 1)
        ]
        # the token at byte position j is a BYTE (as_byte) or the final (as_final) one:
        # exclusive forms (pos is one-hot), each 1 or <= 0, so a kind ANDs them in place
        as_byte = [pos.ch(j) + bit(higher[j]) - 1 for j in range(WORD_BYTES - 1)]
        as_final = [pos.ch(j) - bit(higher[j]) for j in range(WORD_BYTES - 1)]
        as_final.append(pos.ch(WORD_BYTES - 1))
        k_out = wires(c, "o_k", OneHot(WORD_BYTES - 1, allow_none=True), [[[f] for f in as_byte]])
        n_out = wires(c, "o_n", OneHot(WORD_BYTES, allow_none=True), [[[f] for f in as_final]])
        v_out = products(
            c,
            "o_v",
            Bits(8),
            [[[(pos.ch(j), word.ch(8 * j + i)) for j in range(WORD_BYTES)] for i in range(8)]],
        )
        # targets as fields, to combine with byte / final
        tgt = wires(c, "wb.target", Bits(3), [[[reg_t], [amem_t], [areg_t]]])
        sch = bit(sched)
        al, ar = bit(self.any_live), bit(self.any_ready)
        mc = bit(self.more_ctas)

        def word_token(target: Lin, forms: list[Lin]) -> list[Lin]:
            return [target + f - 1 for f in forms]

        kinds = {
            "EXEC": [sch + ar - 1],
            "BAR": [sch + al - ar - 1],
            "CTA": [sch - al + mc - 1],
            "END": [sch - al - mc],
            "PRED": pred,
            "TRAP": [g("trap")],
            "BREG": word_token(tgt.ch(0), as_byte) + word_token(tgt.ch(2), as_byte),
            "FREG": word_token(tgt.ch(0), as_final) + word_token(tgt.ch(2), as_final),
            "BAMEM": word_token(tgt.ch(1), as_byte),
            "FAMEM": word_token(tgt.ch(1), as_final),
        }
        o_kind = wires(
            c,
            "o_kind",
            OneHot(len(KIND_NAMES), allow_none=True),
            [[kinds.get(name, []) for name in KIND_NAMES]],
        )
        exec_gate = sch + ar - 1
        o_b = wires(
            c, "o_b", Bits(self.bb), [[[exec_gate + self.next_b.ch(i) - 1] for i in range(self.bb)]]
        )
        o_w = wires(
            c, "o_w", Bits(self.wb), [[[exec_gate + self.next_w.ch(i) - 1] for i in range(self.wb)]]
        )
        o_mask = wires(
            c,
            "o_mask",
            Bits(self.lanes),
            [[[exec_gate + self.next_mask.ch(i) - 1] for i in range(self.lanes)]],
        )
        starts_cta = sch - al + mc
        o_cta = [
            wires(
                c,
                f"o_cta_{a}",
                Bits(INDEX_BITS),
                [
                    [
                        [starts_cta + self.cta_next.ch(INDEX_BITS * k + i) - 2]
                        for i in range(INDEX_BITS)
                    ]
                ],
            )
            for k, a in enumerate(AXES)
        ]
        o_pv = wires(
            c,
            "o_pv",
            Bits(self.lanes),
            [[[pred[s] + self.res_p[s].ch(i) - 1 for s in stages] for i in lanes]],
        )
        o_pw = wires(
            c,
            "o_pw",
            Bits(self.lanes),
            [[[pred[s] + self.res_e[s].ch(i) - 1 for s in stages] for i in lanes]],
        )
        o_lane = wires(
            c,
            "o_lane",
            OneHot(self.lanes, allow_none=True),
            [
                [
                    [
                        *word_token(tgt.ch(1) + self.atb_lane.ch(i) - 1, as_final),  # FAMEM
                        *[g("trap") + tfirst.ch(s * L + i) - 1 for s in stages],
                    ]
                    for i in range(self.lanes)
                ]
            ],
        )
        o_why = wires(
            c,
            "o_why",
            Bits(1),
            [
                [
                    [
                        g("trap") + tfirst.ch(st.index * L + n) + st.trap_outside.ch(n) - 2
                        for st in self.st
                        for n in lanes
                    ]
                ]
            ],
        )
        o_sel, o_k, o_n, o_v = wsel, k_out, n_out, v_out
        self.outputs = [
            o_kind,
            o_b,
            o_w,
            o_mask,
            o_sel,
            o_s,
            o_k,
            o_n,
            o_v,
            o_pv,
            o_pw,
            o_lane,
            o_why,
            *o_cta,
        ]
        c.output(*self.outputs)

    def _build(self) -> None:
        self._inputs()
        self._front_end()
        self._rom()
        self._files()
        self._decode(self.st[0])
        # st / atom for the write-back logic at the end: two bits, not the opcode one-hot
        self.mem_kind = bits_of(
            self.c, "mem.kind", [self.st[0].opc(Op.ST), self.st[0].opc(Op.ATOM)]
        )
        self.serves_next = self._serves_next_lane()
        for st in self.st:
            # what needs only the ROM and the latches, built early for every stage: small
            # fields, where their inputs (the %tid table) are wide
            st.s2r = self._special_registers(st)
            st.writers = {n: self._register_writers(st, n) for n in ("a", "b", "c")}
            st.pred_writers = {
                n: self._predicate_writers(st.ins[n], self.st[: st.index]) for n in PRED_OPERANDS
            }
        for st in self.st:
            if st.index:
                # its exec bytes after the previous stage's loads (a head each: not in
                # the layer of its register reads), the rest where that stage's result is
                prev = self.st[st.index - 1]
                for j in self.layout.exec_bytes(st.index):
                    self.row[j] = self.c.read(self.rom[j], self.cur_b, after=prev.loaded).outputs[0]
                # its predicate reads (a bit a lane) while the stage before it computes:
                # with its register reads they would need more heads than a layer has
                with self.c.placed_after([self.st[st.index - 1].A]):
                    self._predicate_reads(st)
                with self.c.placed_after(self.st[st.index - 1].finishing):
                    self._decode(st)
                    self._operands(st)
                    self._alu(st)
            else:
                self._operands(st)
                self._alu(st)
        # creation order breaks the scheduler's ties: the results buffers before the
        # scheduler's memories, which take all of a layer's heads
        self._results()
        self._terminator()
        self._memory_unit()
        self._scheduler()
        self._next_token()


def build_machine(spec: MachineSpec) -> MachineCircuit:
    return MachineCircuit(spec)
