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

from collections.abc import Callable, Sequence

from qwengpu.circuit import Bit, Bits, Circuit, Column, OneHot
from qwengpu.circuit.craft import Lin, neuron, relu_of, step_ge
from qwengpu.circuit.encodings import Encoding
from qwengpu.circuit.ir import Field
from qwengpu.circuit.logic import match_form
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

SLOW_UNITS = (Op.ADD, Op.SUB, Op.MUL, Op.LD, Op.SHFL, Op.VOTE)
"""ALU units several layers deep (a vote waits for the executing lanes). The others'
results are gathered into one field (`V.quick`) as soon as they are ready, so that they do
not hold residual width while the slow units finish."""


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


def pick_lane(c: Circuit, name: str, onehot: Field, f: Field) -> Field:
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
class MachineCircuit:
    """Builds the machine circuit for a MachineSpec (one instruction per block)."""

    def __init__(self, spec: MachineSpec) -> None:
        if spec.block_size != 1:
            raise ValueError("the machine circuit runs one instruction per pass: block_size 1")
        self.spec = spec
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

    def _register(self, name: str, columns: list[Column], data: list[Field], when: Field):
        """A one-row memory written from the token (a latch), read on every token."""
        mem = self.c.memory(name, 1, columns)
        self.c.write(mem, self.row0, data, when=when)
        return self.c.read(mem, self.row0).outputs

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
        c = self.c
        rom_bytes = []
        for j in range(self.layout.rom_bytes):
            mem = c.memory(f"rom{j}", self.spec.rom_blocks, [Column("v", Bits(8))])
            c.write(mem, self.romcur, [self.t_v], when=self.rom_we[j])
            rom_bytes.append(c.read(mem, self.cur_b).outputs[0])
        row = [rom_bytes[i // 8].ch(i % 8) for i in range(8 * len(rom_bytes))]
        self.ins = {
            name: bits_of(c, f"ins.{name}", row[pos : pos + width])
            for name, (pos, width) in self.layout.field_bits().items()
        }
        self.op = c.decoder(self.ins["op"], name="op1h")
        self.mode = c.decoder(self.ins["mode"], name="mode1h")
        self.term = c.decoder(self.ins["term"], name="term1h")
        # st.8 / st.16 as clean bits (a word store's mode is 0, theirs 1 and 2)
        self.narrow = {
            w: bits_of(c, f"st.{w.value}", [self.opc(Op.ST) + self.mode.ch(store_mode(w)) - 1])
            for w in StoreWidth
        }

    def opc(self, op: Op) -> Lin:
        return self.op.ch(OPCODES.index(op))

    def term_is(self, kind: TermKind) -> Lin:
        return self.term.ch(TERM_KINDS.index(kind))

    # -- register and predicate files -----------------------------------------------------------
    def _files(self) -> None:
        c, s, k = self.c, self.spec, self.kind
        w = [self.cur_w.ch(i) for i in range(self.wb)]

        def reg_addr(name: str) -> Field:
            return bits_of(
                c, f"ra.{name}", [self.ins[name].ch(i) for i in range(self.layout.reg_bits)] + w
            )

        def pred_addr(name: str) -> Field:
            return bits_of(
                c, f"pa.{name}", [self.ins[name].ch(i) for i in range(self.layout.pred_bits)] + w
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
        wa, ra, rb, rc = (reg_addr(n) for n in ("rd", "a", "b", "c"))
        rows = s.warps << self.layout.reg_bits
        reads_a, reads_b, self.reads_c = [], [], []
        for lane in range(self.lanes):
            mem = c.memory(f"regs{lane}", rows, [Column("v", Bits(32))])
            c.write(mem, wa, [self.word_in], when=we_lanes[lane])
            reads_a.append(c.read(mem, ra).outputs[0])
            reads_b.append(c.read(mem, rb).outputs[0])
            self.reads_c.append(c.read(mem, rc).outputs[0])  # atom.cas's new value, shfl's c
        self.A = lanes_of(c, "A", reads_a)
        self.B = self._operand("B", reads_b, "b_is_imm", "bimm", range(32))
        # shfl's c: clamp (bits 0-4) and segmask (bits 8-12), a register or the constant
        c_bits = range(SHFL_SEGMASK_SHIFT + SHFL_LANE_BITS)
        self.C = self._operand("C", self.reads_c, "c_is_imm", "imm", c_bits)
        pa_w, pa_g, pa_a, pa_b, pa_t = (
            pred_addr(n) for n in ("pd", "guard", "pa", "pb", "term_pred")
        )
        self.pg, self.pa, self.pb, self.pt = [], [], [], []
        prow = s.warps << self.layout.pred_bits
        for lane in range(self.lanes):
            mem = c.memory(f"preds{lane}", prow, [Column("p", Bit())])
            c.write(mem, pa_w, [self.pv[lane]], when=self.pw[lane])
            self.pg.append(c.read(mem, pa_g).outputs[0])
            self.pa.append(c.read(mem, pa_a).outputs[0])
            self.pb.append(c.read(mem, pa_b).outputs[0])
            self.pt.append(c.read(mem, pa_t).outputs[0])

    def _serves_next_lane(self) -> dict[str, list[Lin]]:
        """A store or atomic serves its executing lanes one per pass, in lane order: the
        EXEC pass the first, then the pass of the token that ends lane l's tokens the next
        one after l. That token is its word's FAMEM(l), or for an atomic whose old value
        travels (rd live), the FREG(l) of that value. Conditions (each 1 or <= 0), by kind."""
        k, atom, wb = self.kind, self.opc(Op.ATOM), self.ins["wb"].ch(0)
        famem = bit(k["FAMEM"]) + self.names_lane  # the model's FAMEM, not the host's
        return {
            # a store's, or an atomic's whose rd is dead (exclusive forms: wires sums them)
            "FAMEM": [famem - atom - 1, famem + atom - wb - 2],
            "FREG": [bit(k["FREG"]) + atom - 1],
        }

    def _operand(self, name: str, reads: list[Field], is_imm: str, imm: str, bits: range) -> Field:
        """A source operand: the lanes' register reads, or the ROM row's immediate."""
        k = self.ins[is_imm].ch(0)
        return wires(
            self.c,
            name,
            Bits(len(bits)),
            [
                [[reads[lane].ch(i) - k, self.ins[imm].ch(i) + k - 1] for i in bits]
                for lane in range(self.lanes)
            ],
        )

    # -- ALU ---------------------------------------------------------------------------------------
    def _alu(self) -> None:
        c, ins = self.c, self.ins
        A, B = self.A, self.B
        has, neg = ins["has_guard"].ch(0), ins["guard_neg"].ch(0)
        gpass = wires(
            c,
            "guard.pass",
            Bit(),
            [
                [
                    [
                        1 - has,
                        has + self.pg[lane].ch(0) - neg - 1,
                        has + neg - self.pg[lane].ch(0) - 1,
                    ]
                ]
                for lane in range(self.lanes)
            ],
        )
        # lanes that execute the instruction: the active ones on EXEC; on the pass that ends
        # a memory lane's tokens (`_serves_next_lane`), those after that lane
        k = self.kind
        self.serves_next = mem_next = self._serves_next_lane()

        def runs(lane: int) -> list[Lin]:
            ready = self.cur_mask.ch(lane) + gpass.ch(0, lane)  # active, guard passes
            return (
                [bit(k["EXEC"]) + ready - 2]
                + [f + lanes_below(self.t_lane, lane) + ready - 3 for f in mem_next["FAMEM"]]
                + [f + lanes_below(self.t_sel, lane) + ready - 3 for f in mem_next["FREG"]]
            )

        self.E = wires(c, "exe", Bit(), [[runs(lane)] for lane in range(self.lanes)])
        neg_a = ins["neg_a"].ch(0)
        pa_eff = wires(
            c,
            "sel.p",
            Bit(),
            [
                [[self.pa[lane].ch(0) - neg_a, neg_a - self.pa[lane].ch(0)]]
                for lane in range(self.lanes)
            ],
        )
        adder = self._adder()
        logic, shift = self._logic_unit(), self._shifter()
        results: dict[Op, Field] = {
            Op.ADD: adder,
            Op.SUB: adder,
            Op.MUL: c.mul_lo(A, B),
            Op.AND: logic,
            Op.OR: logic,
            Op.XOR: logic,
            Op.SHL: shift,
            Op.SHR: shift,
            Op.SRA: shift,
            Op.SEL: c.mux(pa_eff, A, B),
            Op.S2R: self._special_registers(),
            Op.LD: self._loads(),
            Op.VOTE: self._votes(pa_eff),
            Op.SHFL: self._shuffle(),
            **self._bit_counts(),
        }
        self.results = results

        def gathered(name: str, units: dict[Op, Field], extra: Field | None = None) -> Field:
            """The lane's result: the executing op's unit output (plus `extra`, already
            gated), one field."""
            return products(
                c,
                name,
                Bits(32),
                [
                    [
                        [
                            (self.opc(op), r.ch(i, lane))
                            for op, r in units.items()
                            if i < r.encoding.width
                        ]
                        + ([(extra.ch(i, lane), Lin.of(1))] if extra is not None else [])
                        for i in range(32)
                    ]
                    for lane in range(self.lanes)
                ],
            )

        quick = gathered("V.quick", {op: r for op, r in results.items() if op not in SLOW_UNITS})
        self.V = gathered("V", {op: results[op] for op in SLOW_UNITS}, extra=quick)
        hs, eq, ge = (c.compare(A, B, cd) for cd in (Cond.HS, Cond.EQ, Cond.GE))
        conds = list(Cond)
        neg_b = ins["neg_b"].ch(0)
        pb_eff = wires(
            c,
            "plop.q",
            Bit(),
            [
                [[self.pb[lane].ch(0) - neg_b, neg_b - self.pb[lane].ch(0)]]
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
                (self.mode.ch(fns.index(fn)) + self.opc(Op.PLOP) - 1, form)
                for fn, form in values.items()
            ]

        votes = list(VoteMode)
        vote_terms = [
            (self.mode.ch(votes.index(mode)) + self.opc(Op.VOTE) - 1, bit(result))
            for mode, result in self.vote_preds.items()
        ]
        in_range = self.shfl_in_range
        self.p_new = products(
            c,
            "pred.new",
            Bit(),
            [
                [
                    [
                        (self.mode.ch(conds.index(cd)) + self.opc(Op.SETP) - 1, form)
                        for cd, form in condition_forms(hs, eq, ge, lane).items()
                    ]
                    + plop_terms(lane)
                    + vote_terms
                    + [(self.opc(Op.SHFL), in_range.ch(0, lane))]
                ]
                for lane in range(self.lanes)
            ],
        )

    def _shuffle(self) -> Field:
        """shfl.sync (PTX ISA): lane l reads a from its source lane where that lane is in
        range (its own a otherwise; a source past the warp's last lane also gives its own),
        and the in-range bit is the predicate. Per lane, with b, clamp and segmask as
        5-bit lane numbers: min = l & segmask, max = min | (clamp & ~segmask); up: src =
        l - b, in range when src >= max; down: l + b <= max; bfly: l ^ b <= max;
        idx: src = min | (b & ~segmask) <= max."""
        c, B, C, n = self.c, self.B, self.C, SHFL_LANE_BITS
        modes, lanes = list(ShflMode), range(self.lanes)

        def mode_is(m: ShflMode) -> Lin:
            return self.mode.ch(modes.index(m))

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

        shfl = self.opc(Op.SHFL)
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
            fits.append([mode_is(m) + ok[m] - 1 for m in modes])
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
                    (shfl + mode_is(m) + ok[m] + pick - 3, src)
                    for m, pick in picks.items()
                    if pick is not None
                ]
            takes.append(terms)
        self.shfl_in_range = wires(c, "shfl.in", Bit(), [[fit] for fit in fits])
        # a_src = a_own + (a_src - a_own) where the source is another lane
        A = self.A
        return products(
            c,
            "shfl",
            Bits(32),
            [
                [
                    [(shfl, A.ch(i, lane))]
                    + [(gate, A.ch(i, src) - A.ch(i, lane)) for gate, src in takes[lane]]
                    for i in range(32)
                ]
                for lane in lanes
            ],
        )

    def _votes(self, pa_eff: Field) -> Field:
        """vote over the executing lanes' pa ^ neg_a: ballot (the voters' lane mask, in
        every lane) as a result, any and all as predicates (`vote_preds`)."""
        c, E, lanes = self.c, self.E, range(self.lanes)
        voters = wires(
            c,
            "vote.voters",
            Bits(self.lanes),
            [[[E.ch(0, n) + pa_eff.ch(0, n) - 1] for n in lanes]],
        )
        # all: no executing lane votes no (voters <= executing lanes, so this is 0/1)
        unanimous = wires(
            c,
            "vote.all",
            Bit(),
            [[[1 + sum((voters.ch(n) - E.ch(0, n) for n in lanes), Lin())]]],
        )
        self.vote_preds = {
            VoteMode.ANY: c.or_bits(voters, name="vote.any"),
            VoteMode.ALL: unanimous,
        }
        return wires(
            c,
            "ballot",
            Bits(self.lanes),
            [[[voters.ch(n)] for n in lanes] for _ in lanes],
        )

    def _bit_counts(self) -> dict[Op, Field]:
        """popc, clz (32 for 0) and brev of a."""
        c, A = self.c, self.A
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
        brev = wires(
            c,
            "brev",
            Bits(32),
            [[[A.ch(31 - i, lane)] for i in range(32)] for lane in range(self.lanes)],
        )
        return {Op.POPC: popc, Op.CLZ: clz, Op.BREV: brev}

    def _adder(self) -> Field:
        """One adder for add, sub (a + ~b + 1) and the memory address (a + imm)."""
        c, ins = self.c, self.ins
        mem = self.opc(Op.LD) + self.opc(Op.ST) + self.opc(Op.ATOM)
        sub = self.opc(Op.SUB)
        operand = wires(
            c,
            "adder.b",
            Bits(32),
            [
                [
                    [
                        ins["imm"].ch(i) + mem - 1,
                        self.B.ch(i, lane) - sub - mem,
                        sub - self.B.ch(i, lane) - mem,
                    ]
                    for i in range(32)
                ]
                for lane in range(self.lanes)
            ],
        )
        self.sum = c.add(self.A, operand, carry_in=bits_of(c, "adder.cin", [sub]))
        return self.sum

    def _logic_unit(self) -> Field:
        """and / or / xor in one block, gated by the opcode (one result field)."""
        c = self.c
        o_and, o_or, o_xor = self.opc(Op.AND), self.opc(Op.OR), self.opc(Op.XOR)
        chans = []
        for lane in range(self.lanes):
            lane_chans = []
            for i in range(32):
                a, b = self.A.ch(i, lane), self.B.ch(i, lane)
                lane_chans.append(
                    [
                        (a + b + o_and - 2, Lin.of(1)),
                        (a + o_or - 1, Lin.of(1)),
                        (b + o_or - 1, Lin.of(1)),
                        (a + b + o_or - 2, Lin.of(-1)),
                        (a + o_xor - 1, Lin.of(1)),
                        (b + o_xor - 1, Lin.of(1)),
                        (a + b + o_xor - 2, Lin.of(-2)),
                    ]
                )
            chans.append(lane_chans)
        return products(c, "logic", Bits(32), chans)

    def _shifter(self) -> Field:
        """shl / shr / sra by the whole register b in one block, gated by the opcode:
        out_i = sum_k [b == k] * a_(i -+ k); sra fills with the sign where i + b >= 32."""
        c = self.c
        ops = {Op.SHL: self.opc(Op.SHL), Op.SHR: self.opc(Op.SHR), Op.SRA: self.opc(Op.SRA)}
        sign = wires(
            c,
            "sra.sign",
            Bit(),
            [[[self.A.ch(31, lane) + ops[Op.SRA] - 1]] for lane in range(self.lanes)],
        )
        out = c.new_field(c.fresh("shift"), Bits(32), self.lanes)
        neurons = []
        for lane in range(self.lanes):
            forms, high = words_shift_forms(self.B, lane, 32)
            low_value = sum((self.B.ch(j, lane) * (1 << j) for j in range(5)), Lin())
            for k, form in enumerate(forms):
                for i in range(32):
                    o = {out.sig(i, lane): 1}
                    if i - k >= 0:
                        neurons.append(neuron(form + ops[Op.SHL] - 1, o, up=self.A.ch(i - k, lane)))
                    if i + k < 32:
                        gate = form + ops[Op.SHR] + ops[Op.SRA] - 1
                        neurons.append(neuron(gate, o, up=self.A.ch(i + k, lane)))
            top = sign.ch(0, lane)
            neurons.append(neuron(top, {out.sig(i, lane): 1 for i in range(32)}))
            for i in range(32):
                keep = (31 - i) - low_value - high * 32  # >= 0: bit i is not sign fill
                o = {out.sig(i, lane): 1}
                neurons.append(neuron(keep + 1, {out.sig(i, lane): -1}, up=top))
                neurons.append(neuron(keep, o, up=top))
        c.mlp("shift", [self.A, self.B, sign, self.op], [out], neurons)
        return out

    def _special_registers(self) -> Field:
        """s2r: %tid (thread t = lanes * warp + lane's entry in the BLOCK table), %ntid,
        %ctaid, %nctaid (the latches), %laneid, %warpid."""
        c = self.c
        specials = list(Special)

        def m(sp: Special) -> Lin:
            return self.mode.ch(specials.index(sp))

        def axis_specials(name: str) -> list[Special]:
            return [Special(f"{name}.{a}") for a in AXES]

        latched = [
            (sp, f)
            for name, axes in (("ntid", self.block), ("nctaid", self.grid), ("ctaid", self.cta))
            for sp, f in zip(axis_specials(name), axes.values(), strict=True)
        ]
        lanes = []
        for lane in range(self.lanes):
            chans = []
            for i in range(32):
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
        return wires(c, "s2r", Bits(32), lanes)

    def _address_traps(self) -> None:
        """Per lane, a load/store/atomic whose byte address a + imm is not 4-byte aligned or
        lies outside memory, as the interpreter traps (`trap_misaligned`, `trap_outside`;
        misaligned wins, as in the interpreter's message)."""
        c, s, lanes = self.c, self.sum, range(self.lanes)
        mem = self.opc(Op.LD) + self.opc(Op.ST) + self.opc(Op.ATOM)
        low = WORD_ADDR_SHIFT
        top = low + ADDR_BITS  # the first bit past a word index
        # misaligned: a word access with either low bit set, st.16 with bit 0 (st.8: never)
        byte, half = (bit(self.narrow[w]) for w in (StoreWidth.B8, StoreWidth.B16))
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
            return ex + mem + self.E.ch(0, n) - 2  # lane n runs a memory instruction

        self.trap_misaligned = wires(
            c, "trap.misaligned", Bits(self.lanes), [[[traps(n) + odd.ch(0, n) - 1] for n in lanes]]
        )
        self.trap_outside = wires(
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

    def _loads(self) -> Field:
        """ld and the memory unit's read port: one memory copy per lane, addressed by the
        lane's word a + imm (bits 2..8 of the byte address)."""
        c = self.c
        self._address_traps()
        self.word_addr = [
            bits_of(
                c,
                f"wordaddr{lane}",
                [self.sum.ch(WORD_ADDR_SHIFT + i, lane) for i in range(ADDR_BITS)],
            )
            for lane in range(self.lanes)
        ]
        self._memory_lane()
        # FAMEM(l) commits to lane l's a + imm, recomputed on its own pass (lane l's
        # registers and the block are the same as on the pass that computed the word); the
        # host's memory load (no lane) to the MADDR cursor
        no_lane = 1 - self.names_lane
        store_addr = products(
            c,
            "store.addr",
            Bits(ADDR_BITS),
            [
                [
                    [(no_lane, self.memcur.ch(i))]
                    + [
                        (self.t_lane.ch(n), self.sum.ch(WORD_ADDR_SHIFT + i, n))
                        for n in range(self.lanes)
                    ]
                    for i in range(ADDR_BITS)
                ]
            ],
        )
        reads = []
        for lane in range(self.lanes):
            mem = c.memory(f"mem{lane}", self.spec.memory_words, [Column("v", Bits(32))])
            c.write(mem, store_addr, [self.word_in], when=self.kind["FAMEM"])
            reads.append(c.read(mem, self.word_addr[lane]).outputs[0])
        self.loaded = reads
        return lanes_of(c, "ld", reads)

    def _memory_lane(self) -> None:
        """The lane a store or atomic serves on this pass: the first executing one (EXEC's
        first, or the next after the lane whose tokens just ended, `_serves_next_lane`)."""
        c, k = self.c, self.kind
        exe = bits_of(c, "exe.bits", [self.E.ch(0, lane) for lane in range(self.lanes)])
        self.exe_first, self.exe_any = c.priority(exe, name="exe.first")
        self.exe_bits = exe
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
        c = self.c
        lane = self.exe_first
        old = pick_lane(c, "atom.old", lane, lanes_of(c, "loaded", self.loaded))
        b = pick_lane(c, "atom.b", lane, self.B)
        # cas's new value, straight from the register reads (no lanes field in between)
        swap = products(
            c,
            "atom.c",
            Bits(32),
            [[[(lane.ch(n), r.ch(i)) for n, r in enumerate(self.reads_c)] for i in range(32)]],
        )
        hs, eq, ge = (c.compare(old, b, cd) for cd in (Cond.HS, Cond.EQ, Cond.GE))
        cf = condition_forms(hs, eq, ge, 0)
        atoms = list(AtomOp)

        def fn_is(fn: AtomOp) -> Lin:
            return self.opc(Op.ATOM) + self.mode.ch(atoms.index(fn)) - 1

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
            AtomOp.AND: [(Lin.of(1), c.bit_and(old, b))],
            AtomOp.OR: [(Lin.of(1), c.bit_or(old, b))],
            AtomOp.XOR: [(Lin.of(1), c.bit_xor(old, b))],
            AtomOp.MIN: [(cf[Cond.LT], old), (1 - cf[Cond.LT], b)],
            AtomOp.MAX: [(cf[Cond.GT], old), (1 - cf[Cond.GT], b)],
            AtomOp.MINU: [(cf[Cond.LO], old), (1 - cf[Cond.LO], b)],
            AtomOp.MAXU: [(cf[Cond.HI], old), (1 - cf[Cond.HI], b)],
        }
        narrow = self.narrow
        word_store = self.opc(Op.ST) - bit(narrow[StoreWidth.B8]) - bit(narrow[StoreWidth.B16])
        # the memory lane's byte offset in the word, for st.8 / st.16
        offset = products(
            c,
            "store.offset",
            Bits(WORD_ADDR_SHIFT),
            [[[(lane.ch(n), self.sum.ch(i, n)) for n in range(self.lanes)] for i in range(2)]],
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
        )

    # -- terminator and scheduler ---------------------------------------------------------------
    def _terminator(self) -> None:
        c, ins, k = self.c, self.ins, self.kind
        fwd = c.and_(c.equal(ins["pd"], ins["term_pred"]), ins["wp"])
        fwd_e = wires(
            c, "fwd.e", Bit(), [[[bit(fwd) + self.E.ch(0, lane) - 1]] for lane in range(self.lanes)]
        )
        tn = ins["term_neg"].ch(0)
        p_eff = wires(
            c,
            "term.p",
            Bit(),
            [
                [
                    [
                        self.pt[lane].ch(0) - fwd_e.ch(0, lane),
                        self.p_new.ch(0, lane) + fwd_e.ch(0, lane) - 1,
                    ]
                ]
                for lane in range(self.lanes)
            ],
        )
        cond = wires(
            c,
            "term.cond",
            Bit(),
            [[[p_eff.ch(0, lane) - tn, tn - p_eff.ch(0, lane)]] for lane in range(self.lanes)],
        )
        jump = self.term_is(TermKind.JUMP) + self.term_is(TermKind.BARRIER)
        br = self.term_is(TermKind.BRANCH)
        nb = wires(
            c,
            "next.b",
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
                for lane in range(self.lanes)
            ],
        )
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
                    [lane_part(c, f"nb{t}", nb, lane), live],
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
        """EXEC keeps the lanes' results, the executed lanes and the new predicates in deep
        one-row memories; the write-back passes after it read them."""
        c = self.c
        exe_bits, first = self.exe_bits, self.exe_first
        pvals = wires(
            c,
            "pvals",
            Bits(self.lanes),
            [[[self.p_new.ch(0, lane) + self.E.ch(0, lane) - 1] for lane in range(self.lanes)]],
        )
        v_first = pick_lane(c, "v.first", first, self.V)
        eq = c.equal(self.V, v_first)
        ok = wires(
            c,
            "uni.ok",
            Bit(),
            [
                [[1 - self.E.ch(0, lane), self.E.ch(0, lane) + eq.ch(0, lane) - 1]]
                for lane in range(self.lanes)
            ],
        )
        missing = sum(
            (self.cur_mask.ch(lane) - self.E.ch(0, lane) for lane in range(self.lanes)), Lin()
        )
        uni = wires(
            c,
            "uniform",
            Bit(),
            [
                [
                    [
                        sum((ok.ch(0, lane) for lane in range(self.lanes)), Lin())
                        - (self.lanes - 1)
                        - missing
                    ]
                ]
            ],
        )
        self.res_v = [
            self._register(
                f"result{lane}",
                [Column("v", Bits(32))],
                [lane_part(c, f"v{lane}", self.V, lane)],
                self.kind["EXEC"],
            )[0]
            for lane in range(self.lanes)
        ]
        # the executed lanes and predicates are known long before the uniform flag (which
        # compares the results): kept apart, the write-back logic reads them early
        self.res_e, self.res_p = self._register(
            "result.lanes",
            [Column("exe", Bits(self.lanes)), Column("pv", Bits(self.lanes))],
            [exe_bits, pvals],
            self.kind["EXEC"],
        )
        (self.res_u,) = self._register(
            "result.uniform", [Column("uni", Bit())], [uni], self.kind["EXEC"]
        )

    def _next_token(self) -> None:
        c, k, ins = self.c, self.kind, self.ins
        E = self.res_e
        any_e = c.or_bits(E, name="any.exe")
        efirst, _ = c.priority(E, name="res.first")
        # lanes after the current register write-back's lane / the current atomic's lane
        after_sel = wires(
            c,
            "after.sel",
            Bits(self.lanes),
            [[[E.ch(lane) + lanes_below(self.t_sel, lane) - 1] for lane in range(self.lanes)]],
        )
        nxt, nxt_any = c.priority(after_sel, name="next.lane")
        pred_back = ins["wbp"].ch(0)  # writes a live-out predicate
        is_mem = self.opc(Op.ST) + self.opc(Op.ATOM)
        wb = ins["wb"].ch(0)
        is_atom_op = self.opc(Op.ATOM)
        ex, ae = bit(k["EXEC"]), bit(any_e)
        sel_all = self.t_sel.ch(self.vocab.all_lanes)
        # an address trap ends the launch: TRAP(first trapping lane, why) after the EXEC
        trapping = wires(
            c,
            "trap.lanes",
            Bits(self.lanes),
            [[[self.trap_misaligned.ch(n), self.trap_outside.ch(n)] for n in range(self.lanes)]],
        )
        tfirst, trap_any = c.priority(trapping, name="trap.first")
        trap = bit(trap_any)
        go = {
            "trap": trap,
            "pred": ex + pred_back + ae - trap - 2,
            # rd after EXEC, or after its PRED when the instruction writes both (shfl|p)
            "reg.start": [
                ex + wb - pred_back - is_atom_op + ae - trap - 2,
                bit(k["PRED"]) + wb - is_atom_op + ae - 2,
            ],
            "reg.next": bit(k["BREG"]) - is_atom_op,
            "reg.lane": bit(k["FREG"]) - sel_all + bit(nxt_any) - is_atom_op - 1,
            # a store's / atomic's word for the lane the memory unit served on this pass:
            # the EXEC's first executing lane, then each next one (`_serves_next_lane`)
            "amem.start": bit(self.memory_pass) + is_mem + bit(self.exe_any) - trap - 2,
            "amem.next": bit(k["BAMEM"]),
            # an atomic's old value, to rd of the lane its FAMEM(l) named (BREG/FREG(l))
            "areg.start": bit(k["FAMEM"]) + self.names_lane + wb + is_atom_op - 3,
            "areg.next": bit(k["BREG"]) + is_atom_op - 1,
        }
        names = list(go)
        gof = wires(
            c, "go", Bits(len(names)), [[(g if isinstance(g, list) else [g]) for g in go.values()]]
        )

        def g(name: str) -> Lin:
            return gof.ch(names.index(name))

        reg_start, reg_next, reg_lane = g("reg.start"), g("reg.next"), g("reg.lane")
        sched = wires(
            c, "go.sched", Bit(), [[[1 - sum((gof.ch(i) for i in range(len(names))), Lin())]]]
        )
        # the register write-back's lane (value) and selector (token)
        wlane = wires(
            c,
            "wb.lane",
            OneHot(self.lanes, allow_none=True),
            [
                [
                    [
                        reg_start + efirst.ch(lane) - 1,
                        reg_next + self.t_sel.ch(lane) - 1,
                        reg_next + sel_all + efirst.ch(lane) - 2,
                        reg_lane + nxt.ch(lane) - 1,
                    ]
                    for lane in range(self.lanes)
                ]
            ],
        )
        u = self.res_u.ch(0)
        wsel = wires(
            c,
            "o_sel",
            OneHot(self.lanes + 1, allow_none=True),
            [
                [
                    *[
                        [
                            reg_start + efirst.ch(lane) - u - 1,
                            reg_next + self.t_sel.ch(lane) - 1,
                            reg_lane + nxt.ch(lane) - 1,
                            g("areg.start") + self.t_lane.ch(lane) - 1,
                            g("areg.next") + self.t_sel.ch(lane) - 1,
                        ]
                        for lane in range(self.lanes)
                    ],
                    [reg_start + u - 1, reg_next + sel_all - 1],
                ]
            ],
        )
        v_reg = pick_lane(c, "wb.vreg", wlane, lanes_of(c, "results", self.res_v))
        reg_t, amem_t, areg_t = (
            reg_start + reg_next + reg_lane,
            g("amem.start") + g("amem.next"),
            g("areg.start") + g("areg.next"),
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
        starts = reg_start + reg_lane + g("amem.start") + g("areg.start")
        nexts = [reg_next, g("amem.next"), g("areg.next")]
        pos = wires(
            c,
            "wb.pos",
            OneHot(WORD_BYTES, allow_none=True),
            [
                [[starts]]
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
            "PRED": [g("pred")],
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
            [[[g("pred") + self.res_p.ch(i) - 1] for i in range(self.lanes)]],
        )
        o_pw = wires(
            c, "o_pw", Bits(self.lanes), [[[g("pred") + E.ch(i) - 1] for i in range(self.lanes)]]
        )
        o_lane = wires(
            c,
            "o_lane",
            OneHot(self.lanes, allow_none=True),
            [
                [
                    [
                        *word_token(tgt.ch(1) + self.atb_lane.ch(i) - 1, as_final),  # FAMEM
                        g("trap") + tfirst.ch(i) - 1,
                    ]
                    for i in range(self.lanes)
                ]
            ],
        )
        o_why = wires(
            c,
            "o_why",
            Bits(1),
            [[[g("trap") + tfirst.ch(n) + self.trap_outside.ch(n) - 2 for n in range(self.lanes)]]],
        )
        o_sel, o_k, o_n, o_v = wsel, k_out, n_out, v_out
        self.outputs = [
            o_kind,
            o_b,
            o_w,
            o_mask,
            o_sel,
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
        self._alu()
        self._memory_unit()
        self._terminator()
        self._scheduler()
        self._results()
        self._next_token()


def build_machine(spec: MachineSpec) -> MachineCircuit:
    return MachineCircuit(spec)
