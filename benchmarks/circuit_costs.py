"""Cost of every circuit primitive at a Qwen3.5 geometry (default: 2B).

For each primitive, a circuit with just that op (4 lanes of 32-bit words where it applies)
is scheduled and emitted, and the table reports: layers used, DeltaNet value heads,
MLP neurons (the op's own, including a read's cleaning units; and the emitted total,
which adds the clearing of dead inputs and the shared bias unit), the largest per-layer
share of the MLP width, and the residual dims
live at the busiest point (inputs, outputs and scratch). "layers (all linear)" is the
depth without the base's every-4th-layer full attention (which cannot hold memories).

    uv run python benchmarks/circuit_costs.py [--geometry qwen3.5-2b] [--markdown]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from qwengpu.circuit import GEOMETRIES, Bit, Bits, Circuit, Column, OneHot, compile_circuit
from qwengpu.isa.instr import Cond

LANES = 4


def words(c: Circuit, n: int = 2, width: int = 32):
    return [c.input(name, Bits(width), lanes=LANES) for name in "abcd"[:n]]


def _mem(c: Circuit, rows: int, width: int):
    addr = c.input("addr", Bits(max(1, (rows - 1).bit_length())))
    data = c.input("data", Bits(width))
    we = c.input("we", Bit())
    mem = c.memory("mem", rows, [Column("v", Bits(width))])
    c.write(mem, addr, [data], when=we)
    return mem, addr


def memory_write(c: Circuit):
    _mem(c, 32, 128)
    return []


def memory_read(c: Circuit):
    mem, addr = _mem(c, 32, 127)
    return [c.read(mem, addr).outputs[0]]


def regfile_read(c: Circuit):
    """16 registers x 4 lanes x 32 bits (two heads) read by a 4-bit index."""
    addr = c.input("addr", Bits(4))
    data = c.input("data", Bits(32), lanes=LANES)
    mem = c.memory("regs", 16, [Column("v", Bits(32), LANES)])
    c.write(mem, addr, [data])
    return [c.read(mem, addr).outputs[0]]


def _threshold(c: Circuit) -> list:
    """[at least 5 of 8 bits set]."""
    x = c.input("x", Bits(8))
    return [c.threshold(sum((x[i] for i in range(1, 8)), x[0]), 5)]


PRIMITIVES: dict[str, Callable[[Circuit], list]] = {
    "not (4x32)": lambda c: [c.not_(words(c, 1)[0])],
    "and (4x32)": lambda c: [c.and_(*words(c))],
    "or (4x32)": lambda c: [c.or_(*words(c))],
    "xor (4x32)": lambda c: [c.xor(*words(c))],
    "threshold (8 bits)": lambda c: _threshold(c),
    "equal (4x32)": lambda c: [c.equal(*words(c))],
    "equal const (4x32)": lambda c: [c.equal_const(words(c, 1)[0], 0xDEADBEEF)],
    "lookup 16 x 32-bit": lambda c: [
        c.lookup(
            c.input("i", Bits(4)), [(k * 0x9E3779B9) & 0xFFFFFFFF for k in range(16)], Bits(32)
        )
    ],
    "decoder 5 -> 32": lambda c: [c.decoder(c.input("x", Bits(5)))],
    "mux (4x32)": lambda c: [c.mux(c.input("s", Bit()), *words(c))],
    "select 1-of-4 (4x32)": lambda c: [c.select(c.input("s", OneHot(4)), words(c, 4))],
    "priority (32)": lambda c: list(c.priority(c.input("x", Bits(32)))),
    "add (4x32)": lambda c: [c.add(*words(c))],
    "sub (4x32)": lambda c: [c.sub(*words(c))],
    "compare lt (4x32)": lambda c: [c.compare(*words(c), Cond.LT)],
    "compare eq (4x32)": lambda c: [c.compare(*words(c), Cond.EQ)],
    "shl (4x32)": lambda c: [c.shl(*words(c))],
    "shr (4x32)": lambda c: [c.shr(*words(c))],
    "sra (4x32)": lambda c: [c.sra(*words(c))],
    "mul lo (4x32)": lambda c: [c.mul_lo(*words(c))],
    "mul hi unsigned (4x32)": lambda c: [c.mul_hi(*words(c))],
    "mul hi signed (4x32)": lambda c: [c.mul_hi(*words(c), signed=True)],
    "memory write (32 x 128)": memory_write,
    "memory read (32 x 127)": memory_read,
    "register read (16 x 4x32)": regfile_read,
    "4 dependent reads (pointer chase)": lambda c: _chase(c, 4),
}


def _chase(c: Circuit, depth: int) -> list:
    """A linked list walked `depth` steps in one token: each read's address is the previous
    read's value, so every step needs its own copy of the memory one layer deeper."""
    mem, addr = _mem(c, 16, 4)
    x = addr
    for _ in range(depth):
        x = c.read(mem, x).outputs[0]
    return [x]


def measure(name: str, build: Callable[[Circuit], list], geometry_name: str) -> dict:
    g = GEOMETRIES[geometry_name]
    c = Circuit(name)
    outs = build(c)
    c.output(*outs)
    t = time.perf_counter()
    compiled = compile_circuit(c, g, pad_to_pattern=False)
    seconds = time.perf_counter() - t
    flat = compile_circuit(c, g, keep_base_pattern=False).schedule.layers_used
    s = compiled.schedule
    used = s.layers_used
    heads = sum(len(slot.value_heads) for p in s.layers for slot in p.slots)
    own = sum(op.neuron_count for op in c.ops if hasattr(op, "neuron_count"))
    own += sum(len(slot.clean_neurons) for p in s.layers for slot in p.slots)
    emitted = sum(layer.neurons for layer in compiled.layers)
    widest = max((layer.neurons for layer in compiled.layers), default=0)
    return {
        "primitive": name,
        "layers": used,
        "layers (all linear)": flat,
        "heads": heads,
        "neurons (op)": own,
        "neurons (emitted)": emitted,
        "widest layer": f"{100 * widest / g.intermediate:.1f}%",
        "residual dims": max(s.live_dims),
        "compile s": f"{seconds:.2f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--geometry", default="qwen3.5-2b", choices=sorted(GEOMETRIES))
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    g = GEOMETRIES[args.geometry]
    rows = [measure(name, build, args.geometry) for name, build in PRIMITIVES.items()]
    cols = list(rows[0])
    print(
        f"# circuit primitive costs at {g.name}: hidden {g.hidden}, MLP {g.intermediate}, "
        f"{g.linear_value_heads} value heads per linear layer\n"
    )
    if args.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "|".join(" --- " for _ in cols) + "|")
        for r in rows:
            print("| " + " | ".join(str(r[k]) for k in cols) + " |")
    else:
        widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in cols]
        print("  ".join(k.ljust(w) for k, w in zip(cols, widths, strict=True)))
        for r in rows:
            print("  ".join(str(r[k]).ljust(w) for k, w in zip(cols, widths, strict=True)))


if __name__ == "__main__":
    main()
