"""The qgpu machine as a circuit compiler: what `qgpu build --circuit machine` merges in.

The machine (qwengpu.machine) is compiled for the base's own geometry and muted against
the base's own text rows. The checkpoint gets its layers (the last one's MLP carries the
output amplifier), the circuit tokens' embedding rows, and their lm_head rows, which
score the circuit's next-token code through the base's final norm. The manifest records
the geometry, so a runtime can rebuild the machine's layout (`machine_layout`) to drive
the checkpoint and read its memories.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

from qwengpu.circuit import GEOMETRIES, Geometry, geometry_from_config
from qwengpu.circuit.mute import MuteError
from qwengpu.errors import CircuitError, ModelError
from qwengpu.isa.spec import MachineSpec
from qwengpu.machine.exit_bound import exit_bound, launch_row_gain
from qwengpu.machine.model import (
    CompiledMachine,
    compile_machine,
    layer_lines,
    machine_spec_for,
    single_stage,
)
from qwengpu.machine.tokens import Token
from qwengpu.model.circuit_layers import BaseInfo, CircuitLayer, CircuitLayers

MACHINE_COMPILER_VERSION = "qgpu-machine-1"
"""Bumped whenever the machine's weights or tokens change: a checkpoint built by another
version is refused (and a cached default checkpoint rebuilt)."""


HOSTS = (
    "Qwen3.5-0.8B and larger bases host it; `--circuit passthrough` builds a checkpoint without it"
)


def token_string(t: Token) -> str:
    """The tokenizer string of a circuit token: `<|qgpu:EXEC(b=0,w=1,mask=3)|>`."""
    return f"<|qgpu:{t}|>"


def base_geometry(text_config: Mapping[str, Any]) -> Geometry:
    """The circuit geometry of a Qwen3.5 text config, named after the preset it matches."""
    fields = SimpleNamespace(
        **{"linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6} | dict(text_config)
    )
    try:
        geometry = geometry_from_config(fields)
    except AttributeError as exc:
        raise ModelError(f"the base's text config lacks a Qwen3.5 field: {exc}") from None
    for preset in GEOMETRIES.values():
        same_shapes = dataclasses.replace(
            preset, name=geometry.name, vocab_size=geometry.vocab_size
        )
        if same_shapes == geometry:
            return dataclasses.replace(geometry, name=preset.name)
    return geometry


def geometry_record(geometry: Geometry) -> dict[str, Any]:
    """The geometry as the manifest stores it (`geometry_from_record` reads it back)."""
    return dataclasses.asdict(geometry)


def geometry_from_record(record: Mapping[str, Any]) -> Geometry:
    try:
        return Geometry(**record)
    except TypeError as exc:
        raise ModelError(f"the manifest's machine geometry is not readable: {exc}") from None


@dataclass
class MachineCircuitCompiler:
    """CircuitCompiler for the qgpu machine (registered as `qgpu build --circuit machine`).
    spec None: the preset of the base's geometry (machine.model.machine_spec_for)."""

    spec: MachineSpec | None = None
    compiler_version: str = MACHINE_COMPILER_VERSION

    def __call__(self, base: BaseInfo) -> CircuitLayers:
        import numpy as np
        import torch

        try:
            geometry = base_geometry(base.text_config)
        except CircuitError as exc:
            raise ModelError(f"this base cannot host the qgpu machine: {exc}. {HOSTS}") from None
        spec = self.spec or machine_spec_for(geometry)
        try:
            try:
                machine = compile_machine(geometry, spec, embedding=base.text_embeddings)
            except MuteError as exc:
                if self.spec is not None or spec.block_size == 1:
                    raise
                # the pipeline's residual leaves too few dims to mute this base's text rows
                # (the synthetic 0.8B base: 35 dims): one instruction per pass leaves more
                print(
                    f"qgpu: the {spec.block_size}-stage machine cannot be muted against this "
                    f"base ({exc}); building the machine with one instruction per pass",
                    file=sys.stderr,
                )
                spec = single_stage(spec)
                machine = compile_machine(geometry, spec, embedding=base.text_embeddings)
        except MuteError as exc:
            raise ModelError(f"the qgpu machine cannot be muted against this base: {exc}") from None
        except CircuitError as exc:
            raise ModelError(
                f"the qgpu machine ({spec.describe()}) does not fit the {geometry.name} "
                f"geometry (hidden {geometry.hidden}): {exc}. {HOSTS}"
            ) from None
        norm = base.final_norm_weight
        norm_w = np.zeros(geometry.hidden) if norm is None else norm.double().numpy()
        head = base.head_rows if base.head_rows is not None else base.text_embeddings
        gain = launch_row_gain(machine, [head], torch.tensor(norm_w))
        # the lm_head rows must survive storage: round them to the checkpoint's dtype here
        output_rows = torch.tensor(machine.output_rows(1.0 + norm_w, gain))
        output_rows = output_rows.to(base.storage_dtype).to(torch.float32)
        layers = [
            CircuitLayer(kind, partial(machine.layer_state_dict, i, torch.float32))
            for i, kind in enumerate(machine.layer_types)
        ]
        return CircuitLayers(
            layers=layers,
            token_strings=[token_string(t) for t in machine.vocab.tokens],
            input_rows=torch.tensor(machine.token_embeddings(), dtype=torch.float32),
            output_rows=output_rows,
            mute_direction=torch.tensor(machine.compiled.mute.vector(geometry.hidden)),
            spec=machine.spec,
            compiler_version=self.compiler_version,
            layer_map=layer_lines(machine),
            extra={**_facts(machine), "output_row_gain": gain},
            suppress_in_text=True,  # their rows score the code, and text can look like one
            exit_bound=partial(_exit_facts, machine),
        )


def _exit_facts(
    machine: CompiledMachine, other_rows: Any, circuit_rows: Any, norm_weight: Any
) -> dict[str, Any]:
    """The early-exit proof on the merged LM head's other rows and the output rows as
    stored (machine.exit_bound), refused when it fails: a launch would not be exact without
    every layer."""
    import torch

    weight = torch.zeros(machine.geometry.hidden) if norm_weight is None else norm_weight
    bound = exit_bound(machine, other_rows, circuit_rows, weight)
    if not bound.proven:
        raise ModelError(f"early exit cannot be proven on this base: {bound.describe()}")
    return bound.record()


def _facts(machine: CompiledMachine) -> dict[str, Any]:
    sched = machine.compiled.schedule
    return {
        "circuit": "machine",
        "geometry": geometry_record(machine.geometry),
        "layers_used": sched.layers_used,
        "code_dims": len(machine.code_dims),
        "mute": machine.compiled.mute.describe(),
    }
