"""The qgpu machine compiled into Qwen3.5 layers (docs/protocol.md, docs/circuit.md).

rom (ROM image of a program) -> tokens (the launch vocabulary) -> circuit (the machine
built from qwengpu.circuit primitives) -> model (compiled layers, token rows, a runnable
HF model).
"""
