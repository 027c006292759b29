"""Register allocation: virtual registers and predicates onto the lane's register files.

Liveness over the basic blocks, an interference graph, and Chaitin-style colouring with
the machine's registers (r1..r15) and predicates (p0..p3). A kernel whose values do not
fit is refused with the number of values live at its worst PTX line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from qwengpu.errors import ResourceError
from qwengpu.isa.instr import STORE_OPS, Instr, Op, TermKind
from qwengpu.lower.translate import VBlock


@dataclass(frozen=True)
class RegisterUse:
    """How one instruction touches one register class."""

    uses: frozenset[int]
    defs: frozenset[int]


def register_use(instr: Instr) -> RegisterUse:
    uses = set(instr.reads())
    defs = set(instr.writes())
    if instr.guard is not None:  # a guarded write keeps the old value where it is off
        uses |= defs
    return RegisterUse(frozenset(uses), frozenset(defs))


def predicate_use(instr: Instr) -> RegisterUse:
    uses = set(instr.pred_reads())
    defs = set(instr.pred_writes())
    if instr.guard is not None:
        uses |= defs
    return RegisterUse(frozenset(uses), frozenset(defs))


def is_move(instr: Instr) -> bool:
    return instr.op is Op.ADD and instr.b_imm == 0 and instr.guard is None


@dataclass
class Allocation:
    colour: dict[int, int]
    used: int  # highest colour used + 1 (for predicates) or highest register index


def allocate(
    blocks: list[VBlock],
    successors: dict[str, list[str]],
    use_of: Callable[[Instr], RegisterUse],
    term_uses: Callable[[VBlock], Iterable[int]],
    colours: list[int],
    names: dict[int, str],
    what: str,
    limit_hint: str,
) -> Allocation:
    """Colour the interference graph of one register class with `colours`."""
    by_label = {b.label: b for b in blocks}
    live_in: dict[str, set[int]] = {b.label: set() for b in blocks}
    changed = True
    while changed:  # backward dataflow to a fixed point
        changed = False
        for block in reversed(blocks):
            live = set().union(*(live_in[s] for s in successors[block.label] if s in by_label))
            live |= set(term_uses(block))
            for instr in reversed(block.instrs):
                use = use_of(instr)
                live = (live - use.defs) | use.uses
            if live != live_in[block.label]:
                live_in[block.label] = live
                changed = True
    interference: dict[int, set[int]] = {}
    partners: dict[int, set[int]] = {}  # move-related values: same colour removes the move
    worst: tuple[int, int, set[int]] = (0, 0, set())

    def node(v: int) -> set[int]:
        return interference.setdefault(v, set())

    for block in blocks:
        live = set().union(*(live_in[s] for s in successors[block.label] if s in by_label))
        live |= set(term_uses(block))
        for v in live:
            node(v)
        for instr in reversed(block.instrs):
            use = use_of(instr)
            if use_of is register_use and is_move(instr) and instr.a:
                partners.setdefault(instr.rd, set()).add(instr.a)
                partners.setdefault(instr.a, set()).add(instr.rd)
            for d in use.defs:
                node(d)
                for v in live:
                    if v != d and not (is_move(instr) and v == instr.a and use_of is register_use):
                        interference[d].add(v)
                        node(v).add(d)
            live = (live - use.defs) | use.uses
            for v in live:
                node(v)
            pressure = len(live | use.defs)
            if pressure > worst[0]:
                worst = (pressure, instr.src_line, live | use.defs)
    k = len(colours)
    if worst[0] > k:
        pressure, line, values = worst
        shown = ", ".join(sorted(names.get(v, f"v{v}") for v in values))
        raise ResourceError(
            f"kernel needs {pressure} {what} at PTX line {line} (live: {shown}); "
            f"the machine has {k} {limit_hint}"
        )
    # simplify: remove nodes of degree < k, then colour in reverse order
    degree = {v: len(n) for v, n in interference.items()}
    removed: list[int] = []
    remaining = set(interference)
    while remaining:
        candidates = [v for v in remaining if degree[v] < k]
        if not candidates:
            raise ResourceError(
                f"kernel's {what} do not fit the machine's {k} {limit_hint} "
                f"({len(remaining)} values interfere too much; simplify the kernel)"
            )
        v = min(candidates, key=lambda x: (degree[x], x))
        removed.append(v)
        remaining.discard(v)
        for n in interference[v]:
            if n in remaining:
                degree[n] -= 1
    colour: dict[int, int] = {}
    for v in reversed(removed):
        taken = {colour[n] for n in interference[v] if n in colour}
        preferred = [colour[p] for p in sorted(partners.get(v, ())) if p in colour]
        free = [c for c in preferred if c not in taken]
        colour[v] = free[0] if free else next(c for c in colours if c not in taken)
    used = max(colour.values(), default=colours[0] - 1)
    return Allocation(colour, used)


def rewrite(instr: Instr, regs: dict[int, int], preds: dict[int, int]) -> Instr:
    """Replace virtual numbers by allocated ones in the fields the instruction uses."""

    def r(v: int) -> int:
        return regs.get(v, 0) if v else 0

    changes: dict[str, object] = {"rd": r(instr.rd), "a": r(instr.a)}
    changes["b"] = r(instr.b) if instr.b_imm is None else 0
    changes["c"] = r(instr.c) if instr.c_imm is None else 0
    pred_fields = set()
    if instr.op is Op.PLOP:
        pred_fields = {"pa", "pb"}
    elif instr.op in (Op.SEL, Op.VOTE):
        pred_fields = {"pa"}
    for name in ("pa", "pb"):
        changes[name] = preds[getattr(instr, name)] if name in pred_fields else 0
    if instr.pd is not None:
        changes["pd"] = preds[instr.pd]
    if instr.guard is not None:
        changes["guard"] = preds[instr.guard]
    return replace(instr, **changes)  # type: ignore[arg-type]


def branch_pred_uses(block: VBlock) -> list[int]:
    assert block.term is not None
    return [block.term.pred] if block.term.kind is TermKind.BRANCH else []


def _values(instr: Instr) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """Registers and predicates one instruction uses and defines, tagged by class."""
    regs, preds = register_use(instr), predicate_use(instr)
    uses = {("r", v) for v in regs.uses} | {("p", v) for v in preds.uses}
    defs = {("r", v) for v in regs.defs} | {("p", v) for v in preds.defs}
    return uses, defs


def eliminate_dead_code(blocks: list[VBlock], successors: dict[str, list[str]]) -> None:
    """Drop instructions whose results are never read (stores and atomics stay; an
    atomic whose old value is unused stops writing a register)."""
    changed = True
    while changed:
        changed = False
        live_in: dict[str, set[tuple[str, int]]] = {b.label: set() for b in blocks}
        stable = False
        while not stable:
            stable = True
            for block in reversed(blocks):
                live = _live_out(block, successors, live_in)
                for instr in reversed(block.instrs):
                    uses, defs = _values(instr)
                    live = (live - defs) | uses
                if live != live_in[block.label]:
                    live_in[block.label] = live
                    stable = False
        for block in blocks:
            live = _live_out(block, successors, live_in)
            kept: list[Instr] = []
            for instr in reversed(block.instrs):
                uses, defs = _values(instr)
                if defs and not defs & live:
                    if instr.op in STORE_OPS:
                        instr = replace(instr, rd=0)
                        uses, defs = _values(instr)
                    else:
                        changed = True
                        continue
                kept.append(instr)
                live = (live - defs) | uses
            block.instrs = kept[::-1]


def _live_out(
    block: VBlock, successors: dict[str, list[str]], live_in: dict[str, set[tuple[str, int]]]
) -> set[tuple[str, int]]:
    live = set().union(*(live_in[s] for s in successors[block.label] if s in live_in))
    return live | {("p", p) for p in branch_pred_uses(block)}
