"""PTX text -> the IR of ptx_ir.py.

A tokenizer (comments dropped, line numbers kept) feeds a recursive-descent parser for
the subset NVRTC, nvcc and clang emit: module directives, variables, .entry/.func with
their params, register declarations, labels and guarded instructions with every operand
kind. Debug and performance directives are skipped. Anything else is a PtxError with
the line it is on, so a surprise in compiler output is reported, never misread.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from qwengpu.cuda.ptx_ir import (
    Addr,
    Guard,
    Imm,
    Instruction,
    Kernel,
    KernelParam,
    Label,
    Module,
    Operand,
    ParamList,
    Reg,
    RegPair,
    SpecialReg,
    Sym,
    Variable,
    Vector,
)
from qwengpu.errors import PtxError

_TOKEN = re.compile(
    r"""
      (?P<space>[ \t\r\f\v]+)
    | (?P<newline>\n)
    | (?P<comment>//[^\n]*|/\*.*?\*/)
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<word>[A-Za-z0-9_$%.]+(?:::[A-Za-z0-9_$%.]+)*)
    | (?P<punct>[,;:{}\[\]()+\-|!@<>=])
    """,
    re.VERBOSE | re.DOTALL,
)

_TYPE_SIZES = {
    **{f"{k}8": 1 for k in "bus"},
    **{f"{k}16": 2 for k in "busf"},
    **{f"{k}32": 4 for k in "busf"},
    **{f"{k}64": 8 for k in "busf"},
    "b128": 16,
    "bf16": 2,
    "f16x2": 4,
    "bf16x2": 4,
    "tf32": 4,
    "pred": 1,
}
_SPACES = ("shared", "global", "const", "local")
_LINKAGE = (".visible", ".extern", ".weak", ".common")
_SPECIAL = re.compile(
    r"%((?:n?tid|n?ctaid|n?clusterid|cluster_n?ctaid)\.[xyz]|laneid|n?warpid|n?smid|gridid"
    r"|lanemask_(?:eq|le|lt|ge|gt)|clock(?:_hi|64)?|globaltimer(?:_lo|_hi)?|envreg\d+"
    r"|pm[0-7](?:_64)?|(?:dynamic|total|aggr)_smem_size|cluster_n?ctarank)"
)
_OPCODE = re.compile(r"[a-z][a-z0-9_]*(?:\.[A-Za-z0-9_:]+)*")
_IDENT = re.compile(r"[A-Za-z_$%][A-Za-z0-9_$]*")
_INT_LITERALS = (
    (re.compile(r"0[xX]([0-9a-fA-F]+)U?"), 16),
    (re.compile(r"0[bB]([01]+)U?"), 2),
    (re.compile(r"0([0-7]+)U?"), 8),
    (re.compile(r"([1-9][0-9]*|0)U?"), 10),
)
_FLOAT_LITERAL = re.compile(r"0[fF]([0-9a-fA-F]{8})|0[dD]([0-9a-fA-F]{16})")
# Ops through which a pointer param keeps being that pointer (for KernelParam.is_pointer).
_POINTER_MOVES = ("mov", "cvta", "add", "sub")


_T = TypeVar("_T")


class _Tok(NamedTuple):
    kind: str  # "word", "punct", "string" or "eof"
    value: str
    line: int


_LOC_LINE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)(?:.*inlined_at\s+(\d+)\s+(\d+))?")
_FILE_LINE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')


def source_lines(text: str) -> dict[int, tuple[str, int]]:
    """The CUDA source line behind each PTX line that has one, from the compiler's `.loc`
    directives (line info): {PTX line: (file name, line)}; empty without line info. Code
    inlined from a header (texture fetches, CCCL) is named by the line in the kernel's
    own file that called it."""
    lines = text.splitlines()
    files = {int(m[1]): Path(m[2]).name for m in map(_FILE_LINE.match, lines) if m}
    out: dict[int, tuple[str, int]] = {}
    loc: tuple[int, int] | None = None
    home: int | None = None  # the file of the function's own first line
    callers: dict[tuple[int, int], tuple[int, int]] = {}  # inlined line -> its call site
    for number, line in enumerate(lines, 1):
        if m := _LOC_LINE.match(line):
            loc = (int(m[1]), int(m[2]))
            home = loc[0] if home is None else home
            if m[3] is not None:
                callers[loc] = (int(m[3]), int(m[4]))
            while loc[0] != home and loc in callers:
                loc = callers[loc]
        elif ".entry" in line or ".func" in line:
            loc, home = None, None  # a new function: no line until its first .loc
        elif loc is not None and loc[1] > 0 and line.strip():
            out[number] = (files.get(loc[0], "kernel.cu"), loc[1])
    return out


_TEXTURE_OPS = dict.fromkeys(
    ("tex", "tld4", "txq"),
    "textures are not supported: the machine has no texture unit; pass the data as an "
    "array argument (const int*) and index it",
) | dict.fromkeys(
    ("suld", "sust", "sured", "suq"),
    "surfaces are not supported: the machine has no texture unit; pass the data as an "
    "array argument (int*) and index it",
)
"""PTX's texture and surface instructions, refused by what they are in CUDA."""


def parse_ptx(text: str) -> Module:
    """Parse PTX text into a Module; PtxError(message, line, source line) if it cannot,
    naming the CUDA line where the PTX has line info."""
    try:
        return _Parser(text).module()
    except PtxError as exc:
        raise exc.at_source(source_lines(text)) from None


def _tokenize(text: str) -> list[_Tok]:
    toks, line, pos = [], 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            src = text.splitlines()[line - 1].strip()
            if text.startswith("/*", pos):
                raise PtxError("unterminated /* comment", line, src)
            raise PtxError(f"bad character {text[pos]!r}", line, src)
        kind, value = m.lastgroup or "", m.group()
        if kind in ("word", "punct", "string"):
            toks.append(_Tok(kind, value, line))
        line += value.count("\n")
        pos = m.end()
    toks.append(_Tok("eof", "", line))
    return toks


def _literal(word: str) -> Imm | None:
    """An integer or float-bits literal, or None if `word` is not one."""
    m = _FLOAT_LITERAL.fullmatch(word)
    if m:
        return Imm(int(m.group(1) or m.group(2), 16), is_float=True)
    for pattern, base in _INT_LITERALS:
        m = pattern.fullmatch(word)
        if m:
            return Imm(int(m.group(1), base))
    return None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.toks = _tokenize(text)
        self.i = 0
        self.scopes: list[dict[str, str]] = []  # register renames, innermost last
        self.kernel: Kernel | None = None

    # -- tokens ----------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def next(self) -> _Tok:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def accept(self, value: str) -> bool:
        if self.peek().value == value:
            self.i += 1
            return True
        return False

    def expect(self, value: str, what: str = "") -> _Tok:
        prev = self.toks[self.i - 1] if self.i else self.peek()
        tok = self.next()
        if tok.value != value:
            # A missing ';' belongs to the line before, not to the next statement.
            where = prev if value == ";" and prev.line < tok.line else tok
            raise self.error(f"expected {what or repr(value)}, got {_show(tok)}", where)
        return tok

    def word(self, what: str) -> _Tok:
        tok = self.next()
        if tok.kind != "word":
            raise self.error(f"expected {what}, got {_show(tok)}", tok)
        return tok

    def number(self) -> int:
        negative = self.accept("-")
        tok = self.next()
        imm = _literal(tok.value) if tok.kind == "word" else None
        if imm is None or imm.is_float:
            raise self.error(f"expected an integer, got {_show(tok)}", tok)
        return -imm.value if negative else imm.value

    def error(self, message: str, tok: _Tok) -> PtxError:
        return PtxError(message, tok.line, self.source(tok.line, tok.line))

    def source(self, first: int, last: int) -> str:
        return " ".join(s.strip() for s in self.lines[first - 1 : last]).strip()

    def skip_line(self) -> None:
        line = self.next().line
        while self.peek().line == line and self.peek().kind != "eof":
            self.next()

    def skip_statement(self) -> None:
        """Skip through the next ';'."""
        while self.next().value != ";":
            if self.peek().kind == "eof":
                raise self.error("expected ';'", self.peek())

    # -- module ----------------------------------------------------------------------
    def module(self) -> Module:
        mod = Module("", "", 64, kernels={}, variables=[], text=self.text)
        while (tok := self.peek()).kind != "eof":
            v = tok.value
            if v == ".version":
                self.next()
                mod.version = self.word("a PTX version").value
            elif v == ".target":
                self.next()
                mod.target = self.word("a target").value
                while self.accept(","):
                    self.word("a target option")
            elif v == ".address_size":
                self.next()
                mod.address_size = self.number()
            elif v in (".file", ".loc"):
                self.skip_line()
            elif v in (".pragma", ".alias"):
                self.skip_statement()
            elif v == ".section":
                self.skip_section()
            elif v in _LINKAGE or v in (".entry", ".func") or _is_space(v):
                self.declaration(mod)
            else:
                raise self.error(f"unexpected {_show(tok)} at module level", tok)
        for kernel in mod.kernels.values():
            _mark_pointers(kernel, mod.address_size // 8)
        return mod

    def skip_section(self) -> None:
        """A DWARF `.section .debug_x { ... }` (from -G): not code, skipped whole."""
        self.next()
        self.word("a section name")
        self.expect("{")
        depth = 1
        while depth:
            tok = self.next()
            if tok.kind == "eof":
                raise self.error("unterminated .section", tok)
            depth += {"{": 1, "}": -1}.get(tok.value, 0) if tok.kind == "punct" else 0

    def declaration(self, mod: Module) -> None:
        linkage = set()
        while self.peek().value in _LINKAGE:
            linkage.add(self.next().value)
        tok = self.peek()
        if tok.value in (".entry", ".func"):
            kernel = self.function()
            if kernel is None:
                return
            if kernel.name in mod.kernels:
                raise self.error(f"'{kernel.name}' is defined twice", tok)
            mod.kernels[kernel.name] = kernel
        elif _is_space(tok.value):
            mod.variables += self.variables(extern=".extern" in linkage)
        else:
            raise self.error(f"expected .entry, .func or a variable, got {_show(tok)}", tok)

    # -- variables and params --------------------------------------------------------
    def variables(self, extern: bool) -> list[Variable]:
        """`.shared .align 4 .b8 name[16] = {..}, other;` (the space is the next token)."""
        space_tok = self.next()
        align, vec, ptx_type = 0, 1, ""
        while self.peek().value.startswith("."):
            tok = self.next()
            if tok.value == ".align":
                align = self.number()
            elif re.fullmatch(r"\.v[248]", tok.value):
                vec = int(tok.value[2:])
            elif tok.value[1:] in _TYPE_SIZES:
                ptx_type = tok.value[1:]
            else:
                raise self.error(f"unsupported variable attribute {_show(tok)}", tok)
        if not ptx_type:
            raise self.error("variable without a type", space_tok)
        elem = _TYPE_SIZES[ptx_type] * vec
        found = []
        while True:
            name = self.word("a variable name")
            count, unsized = 1, False
            while self.accept("["):
                if self.accept("]"):
                    unsized = True
                    continue
                count *= self.number()
                self.expect("]")
            init = self.initializer() if self.accept("=") else None
            if unsized:
                count = len(init) // vec if init else 0
            found.append(
                Variable(
                    name=name.value,
                    space=space_tok.value[1:],
                    ptx_type=ptx_type,
                    size_bytes=elem * count,
                    align=align or elem,
                    line=name.line,
                    init=init,
                    extern=extern,
                )
            )
            if not self.accept(","):
                break
        self.expect(";", "';' or ','")
        return found

    def initializer(self) -> tuple[int, ...]:
        """`5` or `{1, 2, {3, 4}}`, flattened; float literals become their bits."""
        if not self.accept("{"):
            return (self.init_value(),)
        values: list[int] = []
        if self.accept("}"):
            return ()
        while True:
            values += self.initializer()
            if self.accept("}"):
                return tuple(values)
            self.expect(",", "',' or '}'")

    def init_value(self) -> int:
        negative = self.accept("-")
        tok = self.next()
        imm = _literal(tok.value) if tok.kind == "word" else None
        if imm is None:
            raise self.error(f"unsupported initializer value {_show(tok)}", tok)
        return -imm.value if negative else imm.value

    def param_list(self) -> list[KernelParam]:
        self.expect("(")
        params: list[KernelParam] = []
        if self.accept(")"):
            return params
        while True:
            params.append(self.param())
            if self.accept(")"):
                return params
            self.expect(",", "',' or ')'")

    def param(self) -> KernelParam:
        """`.param .align 8 .b8 name[16]`, `.param .u64 .ptr .global .align 4 name`."""
        kind = self.next()
        if kind.value not in (".param", ".reg"):
            raise self.error(f"expected .param, got {_show(kind)}", kind)
        align, vec, ptx_type, pointer = 0, 1, "", False
        while self.peek().value.startswith("."):
            tok = self.next()
            if tok.value == ".align":
                align = self.number()
            elif tok.value == ".ptr":
                pointer = True
            elif re.fullmatch(r"\.v[248]", tok.value):
                vec = int(tok.value[2:])
            elif tok.value[1:] in _TYPE_SIZES:
                ptx_type = tok.value[1:]
            elif not (pointer and _is_space(tok.value)):
                raise self.error(f"unsupported parameter attribute {_show(tok)}", tok)
        if not ptx_type:
            raise self.error("parameter without a type", kind)
        name = self.word("a parameter name")
        count = 1
        while self.accept("["):
            count *= self.number()
            self.expect("]")
        if kind.value == ".reg":
            self.declare(name.value, ptx_type)
        size = _TYPE_SIZES[ptx_type] * vec * count
        return KernelParam(name.value, ptx_type, size, align, pointer)

    # -- functions -------------------------------------------------------------------
    def function(self) -> Kernel | None:
        """A .entry or .func; None for a prototype (no body)."""
        kw = self.next()
        self.scopes = [{}]
        self.kernel = kernel = Kernel(
            name="", params=[], body=[], line=kw.line, is_entry=kw.value == ".entry"
        )
        if not kernel.is_entry and self.peek().value == "(":
            kernel.returns = self.param_list()
        name = self.word("a function name")
        if not _IDENT.fullmatch(name.value):
            raise self.error(f"bad function name {_show(name)}", name)
        kernel.name = name.value
        if self.peek().value == "(":
            kernel.params = self.param_list()
        while self.peek().value.startswith("."):  # .maxntid 128, 1, 1 / .noreturn / ...
            if self.peek().value == ".pragma":
                self.skip_statement()
                continue
            self.next()
            while self.peek().value == "," or _literal(self.peek().value) is not None:
                self.next()
        if self.accept(";"):
            return None
        self.body(kernel)
        return kernel

    def body(self, kernel: Kernel) -> None:
        self.expect("{", "'{' or ';'")
        while True:
            tok = self.peek()
            v = tok.value
            if tok.kind == "eof":
                raise self.error(f"missing '}}' at the end of '{kernel.name}'", tok)
            if tok.kind == "string":
                raise self.error(f"unexpected {_show(tok)}", tok)
            if v == "{":
                self.next()
                self.scopes.append({})
            elif v == "}":
                self.next()
                if len(self.scopes) == 1:
                    return
                self.scopes.pop()
            elif tok.kind == "word" and self.peek(1).value == ":" and not v.startswith("."):
                self.next()
                self.next()
                if self.peek().value == ".callprototype":  # `proto: .callprototype ...;`
                    self.skip_statement()
                else:
                    kernel.body.append(Label(v, tok.line))
            elif v == ".reg":
                self.reg_declaration()
            elif _is_space(v):
                kernel.variables += self.variables(extern=False)
            elif v in (".param", ".pragma"):  # call-sequence params; hints
                self.skip_statement()
            elif v in (".loc", ".file"):
                self.skip_line()
            elif v.startswith("."):
                raise self.error(f"unsupported directive {_show(tok)} in a function body", tok)
            else:
                kernel.body.append(self.instruction())

    def reg_declaration(self) -> None:
        """`.reg .b32 %r<10>;` or `.reg .pred %p1, %p2;`."""
        start = self.next()
        ptx_type = ""
        while self.peek().value.startswith("."):
            tok = self.next()
            if tok.value[1:] in _TYPE_SIZES:
                ptx_type = tok.value[1:]
            elif not re.fullmatch(r"\.v[248]", tok.value):
                raise self.error(f"unsupported register attribute {_show(tok)}", tok)
        if not ptx_type:
            raise self.error(".reg without a type", start)
        while True:
            name = self.word("a register name")
            if not _IDENT.fullmatch(name.value):
                raise self.error(f"bad register name {_show(name)}", name)
            if self.accept("<"):
                count = self.number()
                self.expect(">")
                for k in range(count):
                    self.declare(f"{name.value}{k}", ptx_type)
            else:
                self.declare(name.value, ptx_type)
            if not self.accept(","):
                break
        self.expect(";", "';' or ','")

    def declare(self, name: str, ptx_type: str) -> None:
        """Declare a register in the innermost scope, renaming it if the name is taken."""
        assert self.kernel is not None
        regs = self.kernel.registers
        unique, n = name, 0
        while unique in regs and len(self.scopes) > 1:
            n += 1
            unique = f"{name}${n}"
        self.scopes[-1][name] = unique
        regs[unique] = ptx_type

    def resolve(self, name: str) -> Reg:
        """The register `name` means here: the innermost declaration wins."""
        for scope in reversed(self.scopes):
            if name in scope:
                return Reg(scope[name])
        return Reg(name)

    # -- instructions ----------------------------------------------------------------
    def instruction(self) -> Instruction:
        first = self.peek()
        guard = None
        if self.accept("@"):
            negated = self.accept("!")
            pred = self.word("a predicate register")
            if not pred.value.startswith("%") or _SPECIAL.fullmatch(pred.value):
                raise self.error(f"expected a predicate register, got {_show(pred)}", pred)
            guard = Guard(self.resolve(pred.value), negated)
        op = self.word("an instruction")
        if not _OPCODE.fullmatch(op.value):
            raise self.error(f"unknown syntax {_show(op)}", op)
        opcode, *modifiers = op.value.split(".")
        if opcode in _TEXTURE_OPS:
            raise self.error(_TEXTURE_OPS[opcode], op)
        operands: list[Operand] = []
        if self.peek().value != ";":
            operands.append(self.operand())
            while self.accept(","):
                operands.append(self.operand())
        last = self.expect(";", "',' or ';'")
        return Instruction(
            opcode=opcode,
            modifiers=tuple(modifiers),
            operands=tuple(operands),
            guard=guard,
            line=first.line,
            text=self.source(first.line, last.line),
        )

    def operand(self) -> Operand:
        tok = self.peek()
        if tok.value == "[":
            return self.address()
        if tok.value == "{":
            return Vector(tuple(self.group("{", "}", self.vector_elem)))
        if tok.value == "(":
            return ParamList(tuple(self.group("(", ")", self.call_elem)))
        if tok.value == "-":
            return Imm(self.number())
        if tok.value == "!":
            raise self.error("negated predicate operands (!%p) are not supported", tok)
        first = self.value()
        if isinstance(first, Reg) and self.accept("|"):
            second = self.value()
            if not isinstance(second, Reg):
                raise self.error("expected a register after '|'", tok)
            return RegPair(first, second)
        return first

    def value(self) -> Reg | SpecialReg | Imm | Sym:
        """A register, special register, literal or symbol."""
        tok = self.word("an operand")
        v = tok.value
        if v == "_":
            return Reg("_")
        if v.startswith("%"):
            if _SPECIAL.fullmatch(v):
                return SpecialReg(v[1:])
            if not _IDENT.fullmatch(v):
                raise self.error(f"unknown special register {_show(tok)}", tok)
            return self.resolve(v)
        imm = _literal(v)
        if imm is not None:
            return imm
        if not _IDENT.fullmatch(v):
            raise self.error(f"bad operand {_show(tok)}", tok)
        if any(v in scope for scope in self.scopes):  # a register named without '%'
            return self.resolve(v)
        return Sym(v)

    def group(self, open_: str, close: str, elem: Callable[[], _T]) -> list[_T]:
        """`open_ elem, elem, ... close`, possibly empty."""
        self.expect(open_)
        elems: list[_T] = []
        if self.accept(close):
            return elems
        while True:
            elems.append(elem())
            if self.accept(close):
                return elems
            self.expect(",", f"',' or '{close}'")

    def vector_elem(self) -> Reg | Imm:
        tok = self.peek()
        if tok.value == "-":
            return Imm(self.number())
        elem = self.value()
        if not isinstance(elem, Reg | Imm):
            raise self.error(f"a vector holds registers and literals, not {_show(tok)}", tok)
        return elem

    def call_elem(self) -> Sym | Reg | Imm:
        tok = self.peek()
        if tok.value == "-":
            return Imm(self.number())
        elem = self.value()
        if isinstance(elem, SpecialReg):
            raise self.error(f"unexpected {_show(tok)} in a call", tok)
        return elem

    def address(self) -> Addr:
        """`[%rd1]`, `[%rd1+8]`, `[%r2+-4]`, `[sym]`, `[sym+4]` or `[64]`."""
        self.expect("[")
        base: Reg | Sym | None = None
        offset = 0
        if self.peek().value == "-":
            offset = self.number()
        else:
            tok = self.peek()
            value = self.value()
            if isinstance(value, Imm) and not value.is_float:
                offset = value.value
            elif isinstance(value, Reg | Sym):
                base = value
            else:
                raise self.error(f"bad address base {_show(tok)}", tok)
        while self.peek().value in ("+", "-"):
            sign = -1 if self.next().value == "-" else 1
            offset += sign * self.number()
        self.expect("]", "'+', '-' or ']'")
        return Addr(base, offset)


def _is_space(word: str) -> bool:
    return word.startswith(".") and word[1:] in _SPACES


def _show(tok: _Tok) -> str:
    return "end of input" if tok.kind == "eof" else repr(tok.value)


def _mark_pointers(kernel: Kernel, pointer_bytes: int) -> None:
    """Set is_pointer on pointer-sized params whose value reaches an address or a cvta.

    A param is loaded with ld.param into a register; mov/cvta and the first source of
    add/sub carry it on (base + offset); it is a pointer once a memory operand or a cvta
    uses it. Flow-insensitive: a heuristic, for the launcher's argument checks.
    """
    candidates = {p.name for p in kernel.params if p.size_bytes == pointer_bytes}
    origin: dict[str, set[str]] = {}
    instrs = [i for i in kernel.body if isinstance(i, Instruction)]
    for ins in instrs:
        if ins.opcode == "ld" and "param" in ins.modifiers and len(ins.operands) == 2:
            dst, src = ins.operands
            if isinstance(dst, Reg) and isinstance(src, Addr) and isinstance(src.base, Sym):
                if src.base.name in candidates:
                    origin.setdefault(dst.name, set()).add(src.base.name)
    changed = bool(origin)
    while changed:
        changed = False
        for ins in instrs:
            if ins.opcode not in _POINTER_MOVES or len(ins.operands) < 2:
                continue
            dst, src = ins.operands[0], ins.operands[1]
            if isinstance(dst, Reg) and isinstance(src, Reg) and src.name in origin:
                known = origin.setdefault(dst.name, set())
                if not origin[src.name] <= known:
                    known |= origin[src.name]
                    changed = True
    pointers: set[str] = set()
    for ins in instrs:
        for k, op in enumerate(ins.operands):
            if isinstance(op, Addr) and isinstance(op.base, Reg):
                pointers |= origin.get(op.base.name, set())
            elif ins.opcode == "cvta" and k == 1 and isinstance(op, Reg):
                pointers |= origin.get(op.name, set())
    kernel.params = [
        dataclasses.replace(p, is_pointer=True) if p.name in pointers else p for p in kernel.params
    ]
