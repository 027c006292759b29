"""Human-readable listing of a lowered Program, with resource totals against its spec."""

from __future__ import annotations

from qwengpu.isa.instr import Program


def _regs(regs: tuple[int, ...]) -> str:
    return " ".join(f"r{r}" for r in regs) or "-"


def format_listing(program: Program) -> str:
    spec = program.spec
    lines = [f"// qgpu program '{program.name}' for {spec.describe()}"]
    for param in program.params:
        lines.append(
            f"// param {param.name}: {param.kind} ({param.ctype}) at word {param.word}"
            f" (byte {param.word * 4:#x})"
        )
    if program.static_data:
        lines.append(
            f"// static data: words {program.static_base_word}.."
            f"{program.shared_base_word - 1} = {list(program.static_data)}"
        )
    if program.shared_words:
        lines.append(
            f"// shared memory: words {program.shared_base_word}.."
            f"{program.shared_base_word + program.shared_words - 1}"
        )
    for number, block in enumerate(program.blocks):
        lines.append(
            f"B{number}:    // reads {_regs(block.registers_read())}; "
            f"writes {_regs(block.registers_written())}"
        )
        for instr in block.instrs:
            where = f"    // PTX line {instr.src_line}" if instr.src_line else ""
            lines.append(f"    {instr}{where}")
        lines.append(f"    {block.term}")
    instructions = sum(len(b.instrs) for b in program.blocks)
    lines += [
        "// resources:",
        f"//   ROM blocks   {len(program.blocks):4d} / {spec.rom_blocks}",
        f"//   instructions {instructions:4d} / {spec.rom_blocks * spec.block_size}",
        f"//   registers    {program.registers_used:4d} / {spec.usable_registers}",
        f"//   predicates   {program.predicates_used:4d} / {spec.predicates}",
        f"//   memory words {program.data_base_word:4d} / {spec.memory_words}"
        f"  (params {program.param_words}, static {len(program.static_data)}, "
        f"shared {program.shared_words}; the rest for arrays)",
    ]
    return "\n".join(lines)
