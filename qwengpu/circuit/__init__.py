"""The circuit compiler: digital circuits compiled into Qwen3.5 decoder layers.

    from qwengpu.circuit import Circuit, Bits, Bit, compile_circuit, QWEN35_2B
    c = Circuit("adder")
    a = c.input("a", Bits(32), lanes=4)
    b = c.input("b", Bits(32), lanes=4)
    c.output(c.add(a, b))
    compiled = compile_circuit(c, QWEN35_2B, embedding=base_embedding_matrix)
    state_dicts = compiled.state_dicts(torch.bfloat16)   # one per Qwen3_5DecoderLayer

Layers: ir (fields, memories, ops) -> craft (neurons over named channels) -> schedule
(layers, heads, residual dims) -> emit (Qwen3_5DecoderLayer parameters) -> mute (text
tokens pass bit-identical). See docs/circuit.md.
"""

from __future__ import annotations

from qwengpu.circuit import logic, multiply, words
from qwengpu.circuit.compile import CompiledCircuit, compile_circuit
from qwengpu.circuit.craft import Lin, Neuron, Sig
from qwengpu.circuit.encodings import Bit, Bits, DualRail, Encoding, Int, Ints, IntVec, OneHot
from qwengpu.circuit.geometry import (
    GEOMETRIES,
    QWEN35_0_8B,
    QWEN35_2B,
    QWEN35_4B,
    TINY,
    Geometry,
    geometry_from_config,
)
from qwengpu.circuit.ir import Circuit, Column, Field, Memory, MemoryRead, MemoryWrite, MlpOp
from qwengpu.circuit.mute import MuteError, synthetic_embedding
from qwengpu.circuit.schedule import Schedule, schedule

# Primitives as Circuit methods: c.add(a, b), c.mux(s, a, b), ...
for _module in (logic, words, multiply):
    for _name in (
        "not_",
        "and_",
        "or_",
        "xor",
        "threshold",
        "function",
        "equal",
        "equal_const",
        "and_bits",
        "or_bits",
        "lookup",
        "decoder",
        "encoder",
        "mux",
        "select",
        "priority",
        "copy",
        "popcount",
        "to_bits",
        "ints",
        "add",
        "sub",
        "neg",
        "compare",
        "shl",
        "shr",
        "sra",
        "bit_and",
        "bit_or",
        "bit_xor",
        "mul_lo",
        "mul_hi",
    ):
        if hasattr(_module, _name):
            setattr(Circuit, _name, getattr(_module, _name))

__all__ = [
    "Bit",
    "Bits",
    "Circuit",
    "Column",
    "CompiledCircuit",
    "DualRail",
    "Encoding",
    "Field",
    "GEOMETRIES",
    "Geometry",
    "Int",
    "IntVec",
    "Ints",
    "Lin",
    "Memory",
    "MemoryRead",
    "MemoryWrite",
    "MlpOp",
    "MuteError",
    "Neuron",
    "OneHot",
    "QWEN35_0_8B",
    "QWEN35_2B",
    "QWEN35_4B",
    "Schedule",
    "Sig",
    "TINY",
    "compile_circuit",
    "geometry_from_config",
    "schedule",
    "synthetic_embedding",
]
