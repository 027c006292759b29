"""parse_ptx on real NVRTC output and on hand-written PTX for every construct."""

from __future__ import annotations

import shutil

import pytest

from qwengpu.cuda import compile_cuda, find_entry, parse_ptx
from qwengpu.cuda.ptx_ir import (
    Addr,
    Guard,
    Imm,
    Instruction,
    Kernel,
    Label,
    ParamList,
    Reg,
    RegPair,
    SpecialReg,
    Sym,
    Vector,
)
from qwengpu.errors import PtxError

KERNELS = """\
extern "C" __global__ void loop(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int s = 0;
    for (int k = 0; k < n; ++k) s += a[k] * i;
    out[i] = s > 100 ? s : -s;
}
extern "C" __global__ void reduce(const int* in, int* out) {
    __shared__ int buf[256];
    unsigned t = threadIdx.x;
    buf[t] = in[t];
    __syncthreads();
    int v = buf[255 - t];
    v += __shfl_down_sync(0xffffffffu, v, 1);
    unsigned m = __ballot_sync(0xffffffffu, v > 3);
    v += __popc(m) + __clz(v) + (int)__brev(m);
    atomicAdd(out, v);
    atomicMax(out + 1, v);
}
extern "C" __global__ void arith(int* p, unsigned d, int e) {
    unsigned x = p[threadIdx.x];
    p[0] = x / d + (int)x / e;
    p[1] = __umulhi(x, d) + __mulhi((int)x, e);
    p[2] = __syncthreads_count(x > 4);
    p[3] = gridDim.y + blockIdx.y;
}
extern "C" __global__ void rem(int* p, unsigned d, int e) {
    p[0] = (unsigned)p[1] % d + p[2] % e;
}
__device__ __noinline__ int helper(int a, int b) { return a * b + 1; }
__device__ int table[3] = {1, 2, -3};
extern __shared__ int dynamic[];
struct Pair { int a, b; };
extern "C" __global__ void misc(int* p, Pair pair) {
    dynamic[threadIdx.x] = table[threadIdx.x % 3];
    p[0] = helper(pair.a, pair.b) + dynamic[0];
}
"""


def instrs(kernel: Kernel) -> list[Instruction]:
    return [i for i in kernel.body if isinstance(i, Instruction)]


def by_opcode(kernel: Kernel, full: str) -> list[Instruction]:
    return [i for i in instrs(kernel) if i.full_opcode == full]


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_cuda(KERNELS, compiler="nvrtc").ptx


@pytest.fixture(scope="module")
def module(ptx):
    return parse_ptx(ptx)


# -- real NVRTC output ---------------------------------------------------------------------


def test_module_header(module, ptx):
    assert module.target == "sm_75"
    assert module.address_size == 64
    assert module.version and module.version[0].isdigit()
    assert module.text == ptx
    assert set(module.kernels) == {"loop", "reduce", "arith", "rem", "misc", "_Z6helperii"}


def test_params(module):
    loop = module.kernels["loop"]
    assert [(p.name, p.ptx_type, p.size_bytes, p.is_pointer) for p in loop.params] == [
        ("loop_param_0", "u64", 8, True),
        ("loop_param_1", "u64", 8, True),
        ("loop_param_2", "u32", 4, False),
    ]
    pair = module.kernels["misc"].params[1]
    assert (pair.ptx_type, pair.size_bytes, pair.align, pair.is_pointer) == ("b8", 8, 4, False)


def test_specials_loop_and_select(module):
    loop = module.kernels["loop"]
    specials = {op.name for i in instrs(loop) for op in i.operands if isinstance(op, SpecialReg)}
    assert {"tid.x", "ctaid.x", "ntid.x"} <= specials
    labels = {item.name for item in loop.body if isinstance(item, Label)}
    branches = [i for i in instrs(loop) if i.opcode == "bra"]
    assert branches and all(b.operands[0].name in labels for b in branches)
    guarded = [b for b in branches if b.guard]
    assert guarded and all(isinstance(b.guard, Guard) for b in guarded)
    assert any(i.opcode == "setp" for i in instrs(loop))
    assert by_opcode(loop, "selp.b32") or by_opcode(loop, "selp.s32") or by_opcode(loop, "max.s32")


def test_shared_atomics_and_warp_ops(module):
    reduce = module.kernels["reduce"]
    (buf,) = reduce.variables
    assert (buf.space, buf.size_bytes, buf.align) == ("shared", 1024, 4)
    (shfl,) = by_opcode(reduce, "shfl.sync.down.b32")
    assert isinstance(shfl.operands[0], RegPair)
    assert len(shfl.operands) == 5
    (bar,) = [i for i in instrs(reduce) if i.opcode == "bar"]
    assert bar.modifiers == ("sync",) and bar.operands == (Imm(0),)
    (ballot,) = by_opcode(reduce, "vote.sync.ballot.b32")
    assert isinstance(ballot.operands[1], Reg) and ballot.operands[1].name.startswith("%p")
    for op in ("popc.b32", "clz.b32", "brev.b32"):
        assert len(by_opcode(reduce, op)) == 1
    atoms = [i for i in instrs(reduce) if i.opcode == "atom"]
    assert {a.modifiers for a in atoms} == {("global", "add", "u32"), ("global", "max", "s32")}
    assert all(isinstance(a.operands[1], Addr) for a in atoms)


def test_div_rem_mulhi_and_scoped_registers(module):
    arith = module.kernels["arith"]
    opcodes = {i.full_opcode for i in instrs(arith)}
    assert {"div.u32", "div.s32", "mul.hi.u32", "mul.hi.s32"} <= opcodes
    assert {"rem.u32", "rem.s32"} <= {i.full_opcode for i in instrs(module.kernels["rem"])}
    assert "mov.u32" in opcodes and any("nctaid.y" in i.text for i in instrs(arith))
    # __syncthreads_count's inline PTX declares its own %p1 in a { } scope: renamed.
    (red,) = [i for i in instrs(arith) if i.opcode == "bar" and "red" in i.modifiers]
    inner = red.operands[2]
    assert inner.name.startswith("%p1$") and arith.registers[inner.name] == "pred"
    assert arith.registers["%p1"] == "pred" and arith.registers["%r1"] == "b32"


def test_call_func_and_globals(module):
    helper = module.kernels["_Z6helperii"]
    assert not helper.is_entry
    assert [(r.name, r.ptx_type) for r in helper.returns] == [("func_retval0", "b32")]
    (call,) = by_opcode(module.kernels["misc"], "call.uni")
    ret, target, args = call.operands
    assert ret == ParamList((Sym("retval0"),))
    assert target == Sym("_Z6helperii")
    assert args == ParamList((Sym("param0"), Sym("param1")))
    assert call.text.startswith("call.uni (retval0),")  # a multi-line statement
    variables = {v.name: v for v in module.variables}
    assert variables["table"].space == "global" and variables["table"].size_bytes == 12
    assert variables["table"].init[:5] == (1, 0, 0, 0, 2)
    assert variables["dynamic"].extern and variables["dynamic"].size_bytes == 0


def test_lines_and_text_match_the_source(module, ptx):
    lines = ptx.splitlines()
    for kernel in module.kernels.values():
        for item in kernel.body:
            if isinstance(item, Label):
                assert lines[item.line - 1].strip() == f"{item.name}:"
            elif item.opcode != "call":
                assert lines[item.line - 1].strip() == item.text


def test_debug_info_is_skipped():
    lineinfo = find_entry(parse_ptx(compile_cuda(KERNELS, options=["-lineinfo"]).ptx), "reduce")
    assert by_opcode(lineinfo, "vote.sync.ballot.b32")
    debug = parse_ptx(compile_cuda(KERNELS, options=["-G"]).ptx)  # DWARF .sections too
    for kernel in (lineinfo, find_entry(debug, "reduce")):
        assert by_opcode(kernel, "bar.sync")
        assert not any(i.opcode.startswith((".", "loc", "file")) for i in instrs(kernel))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_output_parses_like_nvrtc(module):
    other = parse_ptx(compile_cuda(KERNELS, compiler="nvcc").ptx)
    assert set(other.kernels) == set(module.kernels)


# -- hand-written PTX ----------------------------------------------------------------------

HEADER = ".version 8.0\n.target sm_75\n.address_size 64\n"


def body(code: str, params: str = "") -> Kernel:
    """Parse `code` as the body of kernel k, after a .reg for the usual registers."""
    regs = ".reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n.reg .pred %p<4>;\n"
    text = f"{HEADER}.visible .entry k({params})\n{{\n{regs}{code}\n}}\n"
    return parse_ptx(text).kernels["k"]


def operands(line: str) -> tuple:
    (ins,) = instrs(body(line))
    return ins.operands


def test_registers_specials_and_sinks():
    assert operands("add.s32 %r1, %r2, %r3;") == (Reg("%r1"), Reg("%r2"), Reg("%r3"))
    specials = ["tid.x", "ctaid.y", "laneid", "warpid", "nctaid.x", "lanemask_lt", "ntid.z"]
    for name in specials:
        assert operands(f"mov.u32 %r1, %{name};")[1] == SpecialReg(name)
    assert operands("shfl.sync.idx.b32 %r1|%p1, %r2, 0, 31, -1;")[0] == RegPair(
        Reg("%r1"), Reg("%p1")
    )
    assert operands("shfl.sync.idx.b32 _|%p1, %r2, 0, 31, -1;")[0] == RegPair(Reg("_"), Reg("%p1"))
    assert operands("mov.b64 {%r1, _}, %rd1;")[0] == Vector((Reg("%r1"), Reg("_")))
    assert operands("mov.b64 %rd1, {%r1, -2};")[1] == Vector((Reg("%r1"), Imm(-2)))


@pytest.mark.parametrize(
    ("literal", "imm"),
    [
        ("42", Imm(42)),
        ("0", Imm(0)),
        ("-7", Imm(-7)),
        ("0x1F", Imm(31)),
        ("0XffffffffU", Imm(0xFFFFFFFF)),
        ("-0x10", Imm(-16)),
        ("017", Imm(15)),
        ("0b101", Imm(5)),
        ("10U", Imm(10)),
        ("0f3F800000", Imm(0x3F800000, is_float=True)),
        ("0d3FF0000000000000", Imm(0x3FF0000000000000, is_float=True)),
    ],
)
def test_immediates(literal, imm):
    assert operands(f"mov.u32 %r1, {literal};")[1] == imm


def test_addresses_and_symbols():
    k = body(
        "ld.param.u64 %rd1, [k_param_0];\n"
        "ld.global.u32 %r1, [%rd1];\n"
        "ld.global.u32 %r2, [%rd1+8];\n"
        "ld.global.u32 %r3, [%rd1+-4];\n"
        "ld.shared.u32 %r4, [sh+12];\n"
        "ld.shared.u32 %r5, [0x40];\n"
        "ld.shared.u32 %r6, [ %r1 - 4 ];\n"
        "mov.u32 %r7, sh;\n"
        ".shared .align 4 .b8 sh[16];",
        params=".param .u64 k_param_0",
    )
    got = [i.operands[1] for i in instrs(k)]
    assert got == [
        Addr(Sym("k_param_0")),
        Addr(Reg("%rd1")),
        Addr(Reg("%rd1"), 8),
        Addr(Reg("%rd1"), -4),
        Addr(Sym("sh"), 12),
        Addr(None, 64),
        Addr(Reg("%r1"), -4),
        Sym("sh"),
    ]
    assert k.params[0].is_pointer  # loaded, then used as an address


def test_guards_labels_and_branches():
    k = body("$L__BB0_1:\n@%p1 bra $L__BB0_1;\n@!%p2 bra.uni $L__BB0_2;\n$L__BB0_2: ret;")
    assert k.body[0] == Label("$L__BB0_1", 9)
    first, second, ret = instrs(k)
    assert first.guard == Guard(Reg("%p1")) and first.operands == (Sym("$L__BB0_1"),)
    assert second.guard == Guard(Reg("%p2"), negated=True)
    assert second.opcode == "bra" and second.modifiers == ("uni",)
    assert k.body[3] == Label("$L__BB0_2", 12) and ret.opcode == "ret" and ret.operands == ()


def test_comments_directives_and_line_numbers():
    text = (
        "// a comment\n"  # 1
        ".version 8.0 /* block\n"  # 2
        "comment */ .target sm_75, debug\n"  # 3
        ".address_size 64\n"  # 4
        '.file 1 "dir//kernel.cu"\n'  # 5
        ".weak .entry w(\n"  # 6
        "  .param .u64 .ptr .global .align 8 w_param_0\n"  # 7
        ")\n"  # 8
        ".maxntid 128, 1, 1\n"  # 9
        ".reqntid 128\n"  # 10
        ".minnctapersm 2\n"  # 11
        "{\n"  # 12
        "  .reg .b32 %r<3>, %x;\n"  # 13
        "  .loc 1 2 3\n"  # 14
        '  .pragma "nounroll";\n'  # 15
        "  mov.u32 %r1, 0; // trailing\n"  # 16
        "  /* a */ add.s32 %r2, %r1, 1; /* b */\n"  # 17
        "}\n"
        ".extern .func (.param .b32 r) ext(.param .b32 a);\n"
    )
    module = parse_ptx(text)
    assert (module.version, module.target) == ("8.0", "sm_75")
    assert set(module.kernels) == {"w"}  # the .extern prototype has no body
    w = module.kernels["w"]
    assert w.line == 6 and w.params[0].is_pointer and w.params[0].align == 8
    mov, add = instrs(w)
    assert (mov.line, add.line) == (16, 17)
    assert mov.text == "mov.u32 %r1, 0; // trailing"
    assert w.registers == {"%r0": "b32", "%r1": "b32", "%r2": "b32", "%x": "b32"}


def test_funcs_params_and_variables():
    text = HEADER + (
        ".global .align 4 .b8 bytes[8] = {1, 2, 3};\n"
        ".global .u32 words[2][2] = {{1, -2}, {0x3, 0f3F800000}};\n"
        ".const .v2 .u32 pair = {7, 8};\n"
        ".visible .shared .align 16 .b8 raw[64];\n"
        ".extern .shared .align 16 .b8 dyn[];\n"
        ".global .u32 a, b = 5;\n"
        ".func (.param .align 8 .b8 ret[16]) f(\n"
        "  .param .align 4 .b8 f_param_0[8], .param .u32 f_param_1)\n"
        ".noreturn\n"
        "{\n"
        "  .local .align 8 .b8 __local_depot0[24];\n"
        "  ret;\n"
        "}\n"
    )
    module = parse_ptx(text)
    v = {var.name: var for var in module.variables}
    assert (v["bytes"].size_bytes, v["bytes"].align, v["bytes"].init) == (8, 4, (1, 2, 3))
    assert (v["words"].size_bytes, v["words"].init) == (16, (1, -2, 3, 0x3F800000))
    assert (v["pair"].space, v["pair"].size_bytes, v["pair"].init) == ("const", 8, (7, 8))
    assert (v["raw"].size_bytes, v["raw"].align, v["raw"].extern) == (64, 16, False)
    assert (v["dyn"].size_bytes, v["dyn"].extern) == (0, True)
    assert v["a"].init is None and v["b"].init == (5,)
    f = module.kernels["f"]
    assert not f.is_entry
    assert [(p.name, p.size_bytes, p.align) for p in f.returns] == [("ret", 16, 8)]
    assert [(p.name, p.size_bytes) for p in f.params] == [("f_param_0", 8), ("f_param_1", 4)]
    assert f.variables[0].space == "local" and f.variables[0].size_bytes == 24


def test_call_forms():
    k = body(
        "{\n"
        ".param .b32 param0;\n"
        "st.param.b32 [param0+0], %r1;\n"
        "call.uni (retval0), f, (param0, 4);\n"
        "call g, ();\n"
        "call (retval0), %rd1, (param0), proto;\n"
        "}"
    )
    st, direct, no_args, indirect = instrs(k)
    assert st.operands[0] == Addr(Sym("param0"))
    assert direct.operands[2] == ParamList((Sym("param0"), Imm(4)))
    assert no_args.operands == (Sym("g"), ParamList(()))
    assert indirect.operands[1] == Reg("%rd1") and indirect.operands[3] == Sym("proto")


def test_scoped_registers_are_renamed():
    k = body(
        "setp.eq.s32 %p1, %r1, 0;\n"
        "{ .reg .pred %p1; setp.ne.s32 %p1, %r2, 0; @%p1 bra L; }\n"
        "{ .reg .pred %p1; .reg .b32 t; mov.u32 t, 1; }\n"
        "L: @%p1 ret;"
    )
    outer, inner, branch, mov, ret = instrs(k)
    assert outer.operands[0] == Reg("%p1")
    assert inner.operands[0] == Reg("%p1$1") and branch.guard == Guard(Reg("%p1$1"))
    assert mov.operands[0] == Reg("t")
    assert ret.guard == Guard(Reg("%p1"))
    assert {"%p1$1", "%p1$2", "t"} <= set(k.registers)


@pytest.mark.parametrize(
    ("code", "code_line", "message"),
    [
        ("add.s32 %r1, %r2, %r3\nret;", 1, "expected ',' or ';'"),
        ("mov.u32 %r1, %tid.w;", 1, "unknown special register"),
        ("mov.u32 %r1, #3;", 1, "bad character"),
        ("ret;\n.bogus 1;", 2, "unsupported directive '.bogus'"),
        ("ret;\nAdd.s32 %r1, %r1, 1;", 2, "unknown syntax 'Add.s32'"),
        ("setp.eq.and.s32 %p1, %r1, 0, !%p2;", 1, "negated predicate"),
        ("ld.u32 %r1, [%r2+%r3];", 1, "expected an integer"),
        ("mov.u32 %r1, 1abc;", 1, "bad operand"),
        ("ret;\n/* never closed", 2, r"unterminated /\* comment"),
        ("@%tid.x bra L;", 1, "expected a predicate register"),
    ],
)
def test_errors_point_at_the_line(code, code_line, message):
    with pytest.raises(PtxError, match=message) as err:
        body(code)
    assert err.value.line == code_line + 8  # the header, entry, '{' and .reg lines first
    assert err.value.text == code.splitlines()[code_line - 1].strip()


def test_module_level_errors():
    with pytest.raises(PtxError, match="missing '}'") as err:
        parse_ptx(HEADER + ".entry k()\n{\nret;\n")
    assert err.value.line == 7
    with pytest.raises(PtxError, match="defined twice"):
        parse_ptx(HEADER + ".entry k() { ret; }\n.entry k() { ret; }\n")
    with pytest.raises(PtxError, match="unexpected 'add.s32' at module level") as err:
        parse_ptx(HEADER + "add.s32 %r1, %r2, 1;\n")
    assert err.value.line == 4 and err.value.text == "add.s32 %r1, %r2, 1;"
    with pytest.raises(PtxError, match="unsupported initializer"):
        parse_ptx(HEADER + ".global .u64 p = generic(x);\n")
