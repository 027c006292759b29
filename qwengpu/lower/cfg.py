"""Control flow: clean up basic blocks, number them for reconvergence, cut them into ROM blocks.

The machine runs a warp's lowest pending block (minimum-PC scheduling). For lanes to
reconverge, block numbers must grow along every forward edge and every loop must be
numbered before the code after it. `number_blocks` builds that order: a depth-first
search that, at a branch, walks loop exits first, then reverses the post-order.
"""

from __future__ import annotations

from qwengpu.errors import PtxError
from qwengpu.isa.instr import STORE_OPS, Block, Instr, Op, Terminator, TermKind
from qwengpu.isa.spec import MachineSpec
from qwengpu.lower.translate import VBlock, VTerm

ENTRY = ".entry"


def successors_of(term: VTerm) -> list[str]:
    if term.kind is TermKind.EXIT:
        return []
    if term.kind is TermKind.BRANCH:
        return [term.target, term.other]
    return [term.target]


def _retarget(term: VTerm, old: str, new: str) -> None:
    if term.target == old:
        term.target = new
    if term.other == old:
        term.other = new


def simplify(blocks: list[VBlock]) -> list[VBlock]:
    """Drop unreachable blocks, thread jumps through empty blocks, merge straight lines."""
    by_label = {b.label: b for b in blocks}
    for block in blocks:
        assert block.term is not None
        for target in successors_of(block.term):
            if target not in by_label:
                raise PtxError(f"branch to unknown label '{target}'", block.term.line)
    changed = True
    while changed:
        changed = False
        by_label = {b.label: b for b in _reachable(blocks)}
        blocks = list(by_label.values())
        # an empty block that only jumps: send its predecessors straight on
        for block in blocks:
            term = block.term
            assert term is not None
            if block.label != ENTRY and not block.instrs and term.kind is TermKind.JUMP:
                if term.target == block.label:
                    continue
                for other in blocks:
                    assert other.term is not None
                    if other is not block and block.label in successors_of(other.term):
                        _retarget(other.term, block.label, term.target)
                        changed = True
        # a jump to an empty exit block is an exit (saves a step)
        for block in blocks:
            term = block.term
            assert term is not None
            if term.kind is TermKind.JUMP:
                target = by_label[term.target]
                if not target.instrs and target.term.kind is TermKind.EXIT:  # type: ignore[union-attr]
                    block.term = VTerm(TermKind.EXIT, line=term.line)
                    changed = True
        if changed:
            continue
        preds: dict[str, list[str]] = {b.label: [] for b in blocks}
        for block in blocks:
            assert block.term is not None
            for s in successors_of(block.term):
                preds[s].append(block.label)
        for block in blocks:
            term = block.term
            assert term is not None
            if term.kind is not TermKind.JUMP:
                continue
            target = by_label[term.target]
            if target is block or target.label == ENTRY or len(preds[target.label]) != 1:
                continue
            block.instrs.extend(target.instrs)
            block.term = target.term
            changed = True
            break
    return _reachable(blocks)


def _reachable(blocks: list[VBlock]) -> list[VBlock]:
    by_label = {b.label: b for b in blocks}
    seen: set[str] = set()
    stack = [ENTRY]
    while stack:
        label = stack.pop()
        if label in seen:
            continue
        seen.add(label)
        term = by_label[label].term
        assert term is not None
        stack.extend(successors_of(term))
    return [b for b in blocks if b.label in seen]


def _dominators(blocks: list[VBlock], preds: dict[str, list[str]]) -> dict[str, set[str]]:
    labels = [b.label for b in blocks]
    dom = {label: set(labels) for label in labels}
    dom[ENTRY] = {ENTRY}
    changed = True
    while changed:
        changed = False
        for label in labels:
            if label == ENTRY:
                continue
            new = set.intersection(*(dom[p] for p in preds[label])) | {label}
            if new != dom[label]:
                dom[label] = new
                changed = True
    return dom


def _loops(blocks: list[VBlock]) -> tuple[list[set[str]], set[tuple[str, str]]]:
    """Natural loops (one body per back edge) and the back edges themselves."""
    succ = {b.label: successors_of(b.term) for b in blocks}  # type: ignore[arg-type]
    preds: dict[str, list[str]] = {b.label: [] for b in blocks}
    for label, targets in succ.items():
        for t in targets:
            preds[t].append(label)
    dom = _dominators(blocks, preds)
    loops = []
    back_edges = set()
    for label, targets in succ.items():
        for header in targets:
            if header in dom[label]:
                back_edges.add((label, header))
                body = {header, label}
                stack = [label]
                while stack:
                    node = stack.pop()
                    if node == header:
                        continue
                    for p in preds[node]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
                loops.append(body)
    return loops, back_edges


def number_blocks(blocks: list[VBlock]) -> list[VBlock]:
    """Order blocks for minimum-PC reconvergence (see the module docstring)."""
    by_label = {b.label: b for b in blocks}
    loops, back_edges = _loops(blocks)
    order: list[str] = []
    seen: set[str] = set()

    def leaves_loop(src: str, dst: str) -> bool:
        return any(src in body and dst not in body for body in loops)

    def visit(label: str) -> None:  # iterative DFS would obscure the rule; kernels are small
        seen.add(label)
        term = by_label[label].term
        assert term is not None
        targets = successors_of(term)
        for target in sorted(targets, key=lambda t: not leaves_loop(label, t)):
            if target not in seen:
                visit(target)
        order.append(label)

    visit(ENTRY)
    order.reverse()
    position = {label: i for i, label in enumerate(order)}
    for src in order:
        for dst in successors_of(by_label[src].term):  # type: ignore[arg-type]
            if position[dst] <= position[src] and (src, dst) not in back_edges:
                line = by_label[src].term.line  # type: ignore[union-attr]
                raise PtxError("irreducible control flow is not supported", line)
    for body in loops:
        last = max(position[b] for b in body)
        for src in body:
            for dst in successors_of(by_label[src].term):  # type: ignore[arg-type]
                if dst not in body and position[dst] < last:
                    raise PtxError(
                        "loop exits cannot be ordered after the loop (irreducible?)",
                        by_label[src].term.line,  # type: ignore[union-attr]
                    )
    return [by_label[label] for label in order]


def cut_blocks(blocks: list[VBlock], spec: MachineSpec) -> list[Block]:
    """Cut each basic block into ROM blocks that respect the spec (instructions per block,
    loads, stores, no load after a store), chained by jumps, numbered consecutively."""
    pieces: list[list[list[Instr]]] = []
    for block in blocks:
        chunks: list[list[Instr]] = [[]]
        for instr in block.instrs:
            if not _fits(chunks[-1], instr, spec):
                chunks.append([])
            chunks[-1].append(instr)
        pieces.append(chunks)
    first_number: dict[str, int] = {}
    number = 0
    for block, chunks in zip(blocks, pieces, strict=True):
        first_number[block.label] = number
        number += len(chunks)
    out: list[Block] = []
    for block, chunks in zip(blocks, pieces, strict=True):
        term = block.term
        assert term is not None
        for i, chunk in enumerate(chunks):
            if i < len(chunks) - 1:
                mterm = Terminator(TermKind.JUMP, target=len(out) + 1, src_line=term.line)
            else:
                mterm = _machine_term(term, first_number)
            out.append(Block(tuple(chunk), mterm))
    return out


def _fits(chunk: list[Instr], instr: Instr, spec: MachineSpec) -> bool:
    if len(chunk) >= spec.block_size:
        return False
    stores = sum(1 for i in chunk if i.op in STORE_OPS)
    if spec.stores_alone and chunk and (stores or instr.op in STORE_OPS):
        return False
    if instr.op is Op.LD:
        loads = sum(1 for i in chunk if i.op is Op.LD)
        return loads < spec.loads_per_block and stores == 0
    if instr.op in STORE_OPS:
        return stores < spec.stores_per_block
    return True


def _machine_term(term: VTerm, numbers: dict[str, int]) -> Terminator:
    if term.kind is TermKind.EXIT:
        return Terminator(TermKind.EXIT, src_line=term.line)
    if term.kind is TermKind.JUMP:
        return Terminator(TermKind.JUMP, target=numbers[term.target], src_line=term.line)
    if term.kind is TermKind.BARRIER:
        return Terminator(TermKind.BARRIER, target=numbers[term.target], src_line=term.line)
    return Terminator(
        TermKind.BRANCH,
        target=numbers[term.target],
        other=numbers[term.other],
        pred=term.pred,
        neg=term.neg,
        src_line=term.line,
    )
