"""ROM images, the token vocabulary and the host's word encoding (no model needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qwengpu import api
from qwengpu.host.model_backend import load_tokens, word_tokens
from qwengpu.isa.instr import (
    AtomOp,
    Block,
    Cond,
    Instr,
    Op,
    ShflMode,
    StoreWidth,
    Terminator,
    TermKind,
    VoteMode,
)
from qwengpu.machine.model import MACHINE_SPEC, REDUCED_SPEC
from qwengpu.machine.rom import MachineUnsupported, RomLayout, check_supported, encode_block
from qwengpu.machine.tokens import HOST_ONLY, KIND_NAMES, Vocabulary, token

DOT = """extern "C" __global__ void dot(const int* a, const int* b, int* out, int n)
{ int i = threadIdx.x; if (i < n) atomicAdd(out, a[i] * b[i]); }"""


G1 = (1, 1, 1)
EXIT = Terminator(TermKind.EXIT)


def _decode_row(layout: RomLayout, row: list[int], stage: int = 0) -> dict[str, int]:
    """The row's fields: the block's, and stage `stage`'s instruction's (names unsuffixed)."""
    value = sum(b << (8 * k) for k, b in enumerate(row))
    out = {}
    for name, (pos, width) in layout.field_bits().items():
        base, _, s = name.partition(".")
        if not s or s == str(stage):
            out[base] = (value >> pos) & ((1 << width) - 1)
    return out


def test_rom_row_fits_the_rom_memories():
    layout = RomLayout(MACHINE_SPEC)
    assert layout.total_bits <= 8 * layout.rom_bytes
    # one ROM memory (head) per byte; the files' fields (every stage's rd, pd and read
    # addresses) and stage 0's exec bytes are read by two layers of 16 heads
    late = {j for s in range(1, MACHINE_SPEC.block_size) for j in layout.exec_bytes(s)}
    assert layout.rom_bytes - len(late) <= 32
    spans = [set(layout.exec_bytes(s)) for s in range(MACHINE_SPEC.block_size)]
    assert not set.intersection(*spans)  # each stage's exec bytes are its own
    bits = layout.field_bits()
    for s, span in enumerate(spans):
        for name, _ in layout.exec_fields():
            pos, width = bits[f"{name}.{s}"]
            assert {pos // 8, (pos + width - 1) // 8} <= span


def test_a_block_of_two_instructions_fills_both_stages():
    layout = RomLayout(MACHINE_SPEC)
    mul = Instr(Op.MUL, rd=1, a=1, b_imm=4)
    add = Instr(Op.ADD, rd=2, a=5, b=1)
    row = encode_block(layout, Block((mul, add), EXIT), live_out={1, 2})
    first, second = _decode_row(layout, row, 0), _decode_row(layout, row, 1)
    assert (first["rd"], first["bimm"], first["wr"], first["wb"]) == (1, 4, 1, 1)
    assert (second["rd"], second["a"], second["b"], second["wb"]) == (2, 5, 1, 1)
    # r1 dead after the block: the second stage takes it forwarded, nothing travels
    row = encode_block(layout, Block((mul, add), EXIT), live_out={2})
    assert _decode_row(layout, row, 0)["wb"] == 0 and _decode_row(layout, row, 0)["wr"] == 1


def test_a_write_overwritten_later_in_its_block_travels_only_if_a_guard_may_keep_it():
    layout = RomLayout(MACHINE_SPEC)
    first = Instr(Op.ADD, rd=1, a=1, b_imm=1)
    again = Instr(Op.ADD, rd=1, a=1, b_imm=2)
    row = encode_block(layout, Block((first, again), EXIT), live_out={1})
    assert (_decode_row(layout, row, 0)["wb"], _decode_row(layout, row, 1)["wb"]) == (0, 1)
    guarded = Instr(Op.ADD, rd=1, a=1, b_imm=2, guard=0)
    row = encode_block(layout, Block((first, guarded), EXIT), live_out={1})
    assert (_decode_row(layout, row, 0)["wb"], _decode_row(layout, row, 1)["wb"]) == (1, 1)
    setp = Instr(Op.SETP, a=1, b_imm=3, pd=0, mode=Cond.LT)
    row = encode_block(layout, Block((setp, setp), EXIT), live_out=set(), live_preds={0})
    assert (_decode_row(layout, row, 0)["wbp"], _decode_row(layout, row, 1)["wbp"]) == (0, 1)


def test_a_store_is_alone_in_its_block_on_the_models_machine():
    program = api.compile(DOT, spec=MACHINE_SPEC)
    for block in program.blocks:
        if any(i.op in (Op.ST, Op.ATOM) for i in block.instrs):
            assert len(block.instrs) == 1
    assert any(len(b.instrs) == 2 for b in program.blocks)  # the others pair up


def test_rom_fields_round_trip():
    layout = RomLayout(MACHINE_SPEC)
    ins = Instr(Op.ADD, rd=3, a=5, b=0, b_imm=0xDEADBEEF, guard=2, guard_neg=True)
    block = Block((ins,), Terminator(TermKind.BRANCH, target=7, other=9, pred=1, neg=True))
    fields = _decode_row(layout, encode_block(layout, block, live_out={3}))
    assert fields["rd"] == 3 and fields["a"] == 5 and fields["bimm"] == 0xDEADBEEF
    assert fields["b_is_imm"] == 1 and fields["wb"] == 1
    assert (fields["has_guard"], fields["guard"], fields["guard_neg"]) == (1, 2, 1)
    assert (fields["target"], fields["other"], fields["term_pred"], fields["term_neg"]) == (
        7,
        9,
        1,
        1,
    )
    dead = _decode_row(layout, encode_block(layout, block, live_out=set()))
    assert dead["wb"] == 0  # a dead result is never written back


def test_c_operands_and_predicate_writes_in_the_rom_row():
    layout = RomLayout(MACHINE_SPEC)
    exit_ = Terminator(TermKind.EXIT)
    shfl = Instr(Op.SHFL, rd=2, a=3, b_imm=1, c_imm=0x1C1F, mode=ShflMode.DOWN, pd=1)
    row = _decode_row(layout, encode_block(layout, Block((shfl,), exit_), live_out={2}))
    assert (row["c_is_imm"], row["imm"], row["wp"], row["pd"]) == (1, 0x1C1F, 1, 1)
    assert row["mode"] == list(ShflMode).index(ShflMode.DOWN)
    cas = Instr(Op.ATOM, rd=1, a=2, b=3, c=4, imm=8, mode=AtomOp.CAS)
    row = _decode_row(layout, encode_block(layout, Block((cas,), exit_), live_out=set()))
    assert (row["c"], row["c_is_imm"], row["imm"], row["wp"]) == (4, 0, 8, 0)
    ballot = Instr(Op.VOTE, rd=1, pa=2, mode=VoteMode.BALLOT)
    vote_any = Instr(Op.VOTE, pd=3, pa=2, mode=VoteMode.ANY)
    for ins, writes_pred in ((ballot, 0), (vote_any, 1)):
        row = _decode_row(layout, encode_block(layout, Block((ins,), exit_), live_out={1}))
        assert row["wp"] == writes_pred  # the PRED write-back follows only a pd write


def test_barriers_shuffles_votes_narrow_stores_and_every_atomic_are_supported():
    barrier = Terminator(TermKind.BARRIER, target=1)
    check_supported(0, Block((), barrier), MACHINE_SPEC)
    for fn in AtomOp:
        check_supported(0, Block((Instr(Op.ATOM, a=1, b=2, c=3, mode=fn),), barrier), MACHINE_SPEC)
    for mode in ShflMode:
        shfl = Instr(Op.SHFL, rd=1, a=1, b=2, c=3, mode=mode)
        check_supported(0, Block((shfl,), barrier), MACHINE_SPEC)
    layout = RomLayout(MACHINE_SPEC)
    for width, mode in ((None, 0), (StoreWidth.B8, 1), (StoreWidth.B16, 2)):
        store = Instr(Op.ST, a=1, b=2, mode=width)
        check_supported(0, Block((store,), barrier), MACHINE_SPEC)
        row = _decode_row(layout, encode_block(layout, Block((store,), barrier), set()))
        assert row["mode"] == mode  # a word store and st.8 do not share a mode


def test_unsupported_instruction_is_refused_with_its_line():
    block = Block((Instr(Op.MULHU, rd=1, a=2, b=3, src_line=31),), Terminator(TermKind.EXIT))
    with pytest.raises(MachineUnsupported, match=r"B3: 'mulhu.*PTX line 31"):
        check_supported(3, block, MACHINE_SPEC)


@pytest.mark.parametrize("spec", [MACHINE_SPEC, REDUCED_SPEC], ids=["full", "reduced"])
def test_vocabulary_is_consistent(spec):
    vocab = Vocabulary(spec)
    assert len(set(vocab.tokens)) == len(vocab)
    lanes = spec.lanes
    execs = [t for t in vocab.tokens if t.kind == "EXEC"]
    assert len(execs) == spec.rom_blocks * spec.warps * (2**lanes - 1)
    assert {t.get("sel") for t in vocab.tokens if t.kind == "FREG"} == set(range(lanes + 1))
    stages = set(range(spec.block_size))
    for kind in ("BREG", "FREG", "PRED", "TRAP"):  # each names the stage it belongs to
        assert {t.get("s") for t in vocab.tokens if t.kind == kind} == stages
    assert vocab.all_lanes == lanes  # sel = lanes: every active lane
    emitted = [t for t in vocab.tokens if vocab.output_values(t) is not None]
    assert {t for t in vocab.tokens if t not in emitted} == {
        t for t in vocab.tokens if t.kind in HOST_ONLY or t.get("lane", -1) == lanes
    }  # the host's tokens, its memory-load FAMEM(lane L) among them
    codes = [tuple(sorted(vocab.output_values(t).items())) for t in emitted]
    assert len(set(codes)) == len(codes)  # every emittable token has its own code
    assert {t.kind for t in vocab.tokens} == set(KIND_NAMES)


def test_launch_shape_tokens_carry_every_threads_index():
    vocab = Vocabulary(REDUCED_SPEC)
    shapes = {(t.get("x"), t.get("y"), t.get("z")) for t in vocab.tokens if t.kind == "BLOCK"}
    assert (16, 1, 1) in shapes and (2, 2, 4) in shapes and (3, 3, 2) not in shapes
    inputs = vocab.input_values(token("BLOCK", x=3, y=2, z=2))
    assert inputs["t_ntid"] == 12 and (inputs["t_ntid_y"], inputs["t_ntid_z"]) == (2, 2)
    packed = inputs["t_tids"]
    assert len(packed) == 16
    # thread 10 of a 3 x 2 x 2 CTA is %tid (1, 1, 1): x | y << 4 | z << 8
    assert packed[10] == 1 | 1 << 4 | 1 << 8
    ctas = [t for t in vocab.tokens if t.kind == "CTA"]
    assert all((t.get("x") + 1) * (t.get("y") + 1) * (t.get("z") + 1) <= 16 for t in ctas)
    assert vocab.output_values(token("CTA", x=1, y=0, z=2))["o_cta_z"] == 2


@given(st.integers(0, 2**32 - 1))
def test_word_tokens_round_trip(value):
    tokens = word_tokens(value, "BAMEM", "FAMEM", lane=1)
    *low, last = tokens
    assert last.get("lane") == 1 and all(t.kind == "BAMEM" for t in low)  # only FAMEM: lane
    assert [t.get("k") for t in low] == list(range(len(low)))
    n = last.get("n")
    assert n == len(low) + 1
    got = sum(t.get("v") << (8 * t.get("k")) for t in low) + (last.get("v") << (8 * (n - 1)))
    assert got == value
    assert n == 1 or last.get("v") != 0  # the top byte is the highest nonzero one


def test_dot_load_tokens():
    program = api.compile(DOT, spec=MACHINE_SPEC)
    from qwengpu.machine.model import compile_machine  # noqa: F401 - import check only

    class _Machine:
        spec = MACHINE_SPEC
        vocab = Vocabulary(MACHINE_SPEC)

    tokens = load_tokens(_Machine(), program, [0] * MACHINE_SPEC.memory_words, (3, 1, 1), G1)
    assert [str(t) for t in tokens[:2]] == ["BLOCK(x=3,y=1,z=1)", "GRID(x=1,y=1,z=1)"]
    assert sum(t.kind == "ROMSEL" for t in tokens) == len(program.blocks)
    assert not any(t.kind == "MADDR" for t in tokens)  # zero words are not sent


def test_wrong_spec_is_refused():
    program = api.compile(DOT)  # the default 4-instruction blocks

    class _Machine:
        spec = MACHINE_SPEC
        vocab = Vocabulary(MACHINE_SPEC)

    with pytest.raises(Exception, match="lowered for"):
        load_tokens(_Machine(), program, [0] * 126, (3, 1, 1), G1)


def test_a_guarded_write_does_not_kill_liveness():
    from qwengpu.machine.rom import live_outs

    clz = Block((Instr(Op.CLZ, rd=1, a=1),), Terminator(TermKind.JUMP, target=1))
    guarded = Block(
        (Instr(Op.ADD, rd=1, a=0, b_imm=0xFFFFFFFF, guard=0),), Terminator(TermKind.JUMP, target=2)
    )
    use = Block((Instr(Op.ADD, rd=2, a=1, b_imm=1),), Terminator(TermKind.EXIT))
    lives = live_outs((clz, guarded, use))
    assert 1 in lives[0]  # lanes that skip the guarded add still read clz's r1


def test_only_live_predicates_travel_back():
    from qwengpu.machine.rom import live_pred_outs

    setp = Instr(Op.SETP, a=1, b_imm=3, pd=0, mode=Cond.LT)
    branch = Terminator(TermKind.BRANCH, target=1, other=2, pred=0)
    # setp p0; branch p0: the branch reads the new p0 inside the pass
    assert live_pred_outs((Block((setp,), branch), Block((), EXIT), Block((), EXIT)))[0] == set()
    # p0 guards an instruction of the next block: it travels
    guarded = Block((Instr(Op.ADD, rd=1, a=1, b_imm=1, guard=0),), EXIT)
    lives = live_pred_outs((Block((setp,), Terminator(TermKind.JUMP, target=1)), guarded))
    assert lives[0] == {0}
    layout = RomLayout(MACHINE_SPEC)
    row = _decode_row(layout, encode_block(layout, Block((setp,), branch), set(), set()))
    assert (row["wp"], row["wbp"]) == (1, 0)  # forwarded to the branch, not written back


def test_more_lanes_than_the_token_formats_hold_are_refused():
    from qwengpu.isa.spec import MachineSpec

    with pytest.raises(ValueError, match="at most 4 lanes per warp, spec has 8"):
        Vocabulary(MachineSpec(lanes=8, block_size=1))
