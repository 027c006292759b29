"""compile_circuit: schedule, emit and (optionally) mute a circuit for a geometry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from qwengpu.circuit.emit import EmittedLayer, emit_layers
from qwengpu.circuit.geometry import Geometry
from qwengpu.circuit.ir import Circuit, Field
from qwengpu.circuit.mute import MuteReport, mute_layers
from qwengpu.circuit.numerics import ANCHOR_VALUE, VALUE_ONE
from qwengpu.circuit.schedule import Schedule, schedule
from qwengpu.errors import CircuitError


@dataclass
class CompiledCircuit:
    """A scheduled and emitted circuit: the weights of `schedule.num_layers` decoder layers
    and the layout of circuit tokens (which residual dims hold which field)."""

    circuit: Circuit
    schedule: Schedule
    layers: list[EmittedLayer]
    mute: MuteReport | None

    @property
    def geometry(self) -> Geometry:
        return self.schedule.geometry

    @property
    def num_layers(self) -> int:
        return self.schedule.num_layers

    @property
    def layer_types(self) -> list[str]:
        return self.schedule.layer_types

    def state_dicts(self, dtype: Any = None) -> list[dict]:
        """One `Qwen3_5DecoderLayer` state dict per circuit layer."""
        return [layer.state_dict(dtype) for layer in self.layers]

    def decoder_layers(self, dtype: Any = None, first_index: int = 0) -> list:
        """Real `Qwen3_5DecoderLayer` modules loaded with the circuit weights."""
        import torch
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer

        dtype = dtype or torch.float32
        config = self.geometry.text_config(self.layer_types)
        modules = []
        for i, sd in enumerate(self.state_dicts(dtype)):
            layer = Qwen3_5DecoderLayer(config, i).to(dtype)
            layer.load_state_dict(sd, strict=True)
            layer.layer_idx = first_index + i
            modules.append(layer)
        return modules

    # -- circuit tokens ------------------------------------------------------------------------
    def embed(
        self, values: Mapping[str | Field, Any], shape: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """Residual vectors of circuit tokens: anchors plus the given input fields' values.

        values: field (or name) -> integer array of shape [...] for a one-lane field or
        [..., lanes]. Fields not given are 0. Returns [..., hidden] float64.
        """
        items = {(k.name if isinstance(k, Field) else k): np.asarray(v) for k, v in values.items()}
        inputs = {f.name: f for f in self.circuit.inputs}
        for name in items:
            if name not in inputs:
                raise CircuitError(
                    f"embed: {name!r} is not an input field of {self.circuit.name!r}"
                )
        if shape is None:
            if not items:
                raise CircuitError("embed: give values or a shape")
            name, v = next(iter(items.items()))
            shape = v.shape[:-1] if inputs[name].lanes > 1 else v.shape
        out = np.zeros((*shape, self.geometry.hidden))
        out[..., list(self.schedule.anchors.dims)] = self.schedule.anchors.value
        for name, v in items.items():
            f = inputs[name]
            lanes_v = v.reshape(*shape, f.lanes)
            chans = f.encoding.encode_many(lanes_v).reshape(*shape, f.width)
            out[..., self.schedule.dims[name]] = chans
        return out

    def channels(self, residual: np.ndarray, field: str | Field) -> np.ndarray:
        """The raw channels of a field: [..., hidden] -> [..., lanes, width]."""
        f = self.circuit.fields[field.name if isinstance(field, Field) else field]
        r = np.asarray(residual)[..., self.schedule.dims[f.name]]
        return r.reshape(*r.shape[:-1], f.lanes, f.encoding.width)

    def decode(self, residual: np.ndarray, field: str | Field) -> np.ndarray:
        """Values of a field from residual vectors: [..., hidden] -> [..., lanes]."""
        f = self.circuit.fields[field.name if isinstance(field, Field) else field]
        return f.encoding.decode(self.channels(residual, f))

    def memory_rows(self, recurrent_states: Mapping[int, Any], memory: str) -> np.ndarray:
        """The contents of a memory from a cache's recurrent states ({layer: state
        [batch, value_heads, 128, 128]}), thresholded: [batch, rows, width] of 0/1, from
        its first copy."""
        mem = self.circuit.memories[memory]
        for plan in self.schedule.layers:
            for slot in plan.slots:
                if slot.memory is mem:
                    state = np.asarray(recurrent_states[plan.index], dtype=np.float64)
                    cols = [state[:, vh, : mem.rows, col] for vh, col in slot.channel_map()]
                    values = (
                        np.stack(cols, axis=-1) if cols else np.zeros((state.shape[0], mem.rows, 0))
                    )
                    return (values > VALUE_ONE / 2).astype(np.int64)
        raise CircuitError(f"memory {memory!r} has no copy (never written?)")

    def check_residual(self, residual: np.ndarray) -> None:
        """Raise unless residual vectors after the last layer are exactly clean: anchors
        intact, every output channel an integer in its encoding's range, every other dim
        exactly 0 (dead fields cleared, reads' landing channels cancelled)."""
        r = np.asarray(residual)
        expect_zero = np.ones(self.geometry.hidden, dtype=bool)
        anchors = list(self.schedule.anchors.dims)
        expect_zero[anchors] = False
        if not np.all(r[..., anchors] == ANCHOR_VALUE):
            raise CircuitError("residual check: an anchor channel changed")
        for f in self.circuit.outputs:
            dims = self.schedule.dims[f.name]
            expect_zero[dims] = False
            v = r[..., dims]
            lo = np.array([f.encoding.dim_range(i % f.encoding.width)[0] for i in range(f.width)])
            hi = np.array([f.encoding.dim_range(i % f.encoding.width)[1] for i in range(f.width)])
            if not (np.all(v == np.rint(v)) and np.all(v >= lo) and np.all(v <= hi)):
                raise CircuitError(f"residual check: output {f.name!r} is not clean")
        stray = r[..., expect_zero]
        if np.any(stray != 0):
            raise CircuitError(
                f"residual check: {int((stray != 0).sum())} nonzero values "
                f"outside the outputs (max |v| {np.abs(stray).max():.3g})"
            )

    def report(self) -> str:
        text = self.schedule.report()
        if self.mute is not None:
            text += "\n" + self.mute.describe()
        return text


def compile_circuit(
    circuit: Circuit,
    geometry: Geometry,
    *,
    embedding: Any = None,
    mute_rows: np.ndarray | None = None,
    mute_direction: np.ndarray | None = None,
    **schedule_options: Any,
) -> CompiledCircuit:
    """Schedule `circuit` for `geometry`, emit its layers and, given the base's token
    `embedding` matrix (vocab x hidden), mute them for every row in `mute_rows` (default
    all rows), along `mute_direction` if given (else the best one found on the mute
    dims); without an embedding the layers are unmuted (circuit tokens only). Options go
    to `schedule` (keep_base_pattern, pad_to_pattern, max_layers, min_mute_dims,
    dim_order, clear_dead)."""
    sched = schedule(circuit, geometry, **schedule_options)
    layers = emit_layers(sched)
    report = None
    if embedding is not None:
        report = mute_layers(layers, sched, embedding, mute_rows, mute_direction)
    return CompiledCircuit(circuit, sched, layers, report)
