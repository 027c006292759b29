"""The compiled machine as model weights: circuit layers, the output amplifier, the
circuit tokens' embedding and output rows, and an in-memory HF model for launches.

The circuit's last fields (o_kind, o_b, ...) are the code of the next token. The last
circuit layer's (otherwise empty) MLP amplifies them to +-OUTPUT_LEVEL, so that after the
final norm the code carries most of a launch position's norm, and each circuit token's
output row scores agreement with its code: row = G (2 code - 1) / (1 + final norm weight)
on the code dims, zero elsewhere. The gain G is the least that clears every other LM-head
row on launches (machine.exit_bound.launch_row_gain): on text positions the same rows score
the base's own hidden state, where they must stay below the base's logits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from qwengpu.circuit import QWEN35_0_8B, CompiledCircuit, Geometry, compile_circuit, schedule
from qwengpu.circuit.encodings import OneHot
from qwengpu.circuit.numerics import LOGIC_GAIN
from qwengpu.errors import CircuitError
from qwengpu.isa.spec import MachineSpec
from qwengpu.machine.circuit import MachineCircuit
from qwengpu.machine.tokens import Token, Vocabulary

OUTPUT_LEVEL = 2.0**22
"""The amplified code: +-2^22 per channel, half an anchor. With K code channels against one
or two anchors, the code holds most of a launch position's norm after the final norm (each
channel normalises to about sqrt(hidden / K)), so the circuit rows need little gain to win
there and score little on text. Exact in bfloat16 and (with + 1) in float32; the base's
layers add O(1..100) per dim under the full forward."""

MACHINE_SPEC = MachineSpec(stores_alone=True, rom_blocks=128, mul_high=False)
"""The machine the circuit implements: docs/isa.md's default blocks of four instructions
(a 4-stage pipeline, one pass per block; a store or atomic alone in its block), 128 ROM
blocks (a DeltaNet head holds 128 rows), no high multiplier (the lowering expands
mulhu/mulhs into 16-bit mul pieces: a 64-bit product array does not fit the residual)."""

REDUCED_SPEC = dataclasses.replace(MACHINE_SPEC, lanes=2, warps=8, block_size=2, loads_per_block=2)
"""The reduced preset, for the 0.8B geometry (hidden 1024): 2-lane warps halve every
per-lane field, and 8 warps keep 16 threads per CTA, so the same kernels fit; blocks of two
instructions (a 2-stage pipeline: four stages' datapaths do not fit 1,024 dims)."""

MACHINE_PRESETS: dict[str, MachineSpec] = {QWEN35_0_8B.name: REDUCED_SPEC}
"""The machine each geometry hosts, by geometry name (MACHINE_SPEC for the others)."""


def machine_spec_for(geometry: Geometry) -> MachineSpec:
    """The preset MachineSpec a geometry hosts: REDUCED_SPEC on 0.8B, else MACHINE_SPEC."""
    return MACHINE_PRESETS.get(geometry.name, MACHINE_SPEC)


def single_stage(spec: MachineSpec) -> MachineSpec:
    """The same machine with one instruction per pass: shallower and narrower, so it leaves
    more residual dims for muting (a base whose text rows the pipeline cannot mute)."""
    return dataclasses.replace(spec, block_size=1, loads_per_block=1, stores_alone=False)


@dataclass
class CompiledMachine:
    """A machine circuit compiled for one geometry (and muted against one text matrix)."""

    machine: MachineCircuit
    compiled: CompiledCircuit

    @property
    def spec(self) -> MachineSpec:
        return self.machine.spec

    @property
    def vocab(self) -> Vocabulary:
        return self.machine.vocab

    @property
    def geometry(self) -> Geometry:
        return self.compiled.geometry

    @property
    def layer_types(self) -> list[str]:
        return self.compiled.layer_types

    @cached_property
    def code_dims(self) -> list[int]:
        """Residual dims of the output code, in output-field order."""
        dims: list[int] = []
        for f in self.machine.outputs:
            dims += list(self.compiled.schedule.dims[f.name])
        return dims

    def _code(self, values: dict[str, int]) -> np.ndarray:
        chans = []
        for f in self.machine.outputs:
            default = -1 if isinstance(f.encoding, OneHot) else 0
            chans += f.encoding.encode(values.get(f.name, default))
        return np.array(chans, dtype=np.float64)

    def output_codes(self) -> np.ndarray:
        """[codes, K] the distinct 0/1 codes the circuit can leave on the code dims: one per
        token it may write (several tokens never share one)."""
        codes = [
            self._code(code)
            for code in map(self.vocab.output_values, self.vocab.tokens)
            if code is not None
        ]
        return np.unique(np.array(codes), axis=0)

    def token_embeddings(self) -> np.ndarray:
        """[tokens, hidden] input rows of every circuit token."""
        inputs = {f.name: f for f in self.compiled.circuit.inputs}
        n = len(self.vocab)
        values: dict[str, np.ndarray] = {}
        for name, f in inputs.items():
            default = -1 if isinstance(f.encoding, OneHot) else 0
            shape = (n, f.lanes) if f.lanes > 1 else (n,)  # a lanes field takes a list
            values[name] = np.full(shape, default, dtype=np.int64)
        for i, t in enumerate(self.vocab.tokens):
            for name, v in self.vocab.input_values(t).items():
                values[name][i] = v
        return self.compiled.embed(values, shape=(n,))

    def output_rows(self, final_norm_scale: np.ndarray, gain: float) -> np.ndarray:
        """[tokens, hidden] output (lm_head) rows; zero for host-only tokens.
        final_norm_scale: the base's final RMSNorm multiplier (1 + weight) per dim; gain:
        the rows' scale (exit_bound.launch_row_gain)."""
        scale = np.asarray(final_norm_scale, dtype=np.float64)[self.code_dims]
        if np.any(np.abs(scale) < 1e-3):
            raise CircuitError("the final norm scales a code dim to ~0: the argmax can't see it")
        rows = np.zeros((len(self.vocab), self.geometry.hidden))
        for i, t in enumerate(self.vocab.tokens):
            code = self.vocab.output_values(t)
            if code is not None:
                rows[i, self.code_dims] = (2 * self._code(code) - 1) / scale * gain
        return rows

    def decode_code(self, residual: np.ndarray) -> Token | None:
        """The token the circuit chose, from a residual after the circuit (for tests)."""
        values = {f.name: int(self.compiled.decode(residual, f)[0]) for f in self.machine.outputs}
        for t in self.vocab.tokens:
            code = self.vocab.output_values(t)
            if code is not None and all(
                values[f.name] == code.get(f.name, -1 if isinstance(f.encoding, OneHot) else 0)
                for f in self.machine.outputs
            ):
                return t
        return None

    def layer_state_dict(self, index: int, dtype: Any = None) -> dict:
        """One circuit layer's state dict, the last layer's MLP carrying the output
        amplifier (one at a time: a checkpoint streams them, a model loads them)."""
        layer = self.compiled.layers[index]
        sd = layer.state_dict(dtype)
        if index == len(self.compiled.layers) - 1:
            if layer.neurons:
                raise CircuitError(
                    "the machine's last layer has MLP neurons; no room for the amplifier"
                )
            sd.update(self._amplifier(sd))
        return sd

    def _amplifier(self, sd: dict) -> dict:
        """MLP units x -> x + 2 L x - L on every code channel (L = OUTPUT_LEVEL): one unit
        per channel (gate K x, exact for x in {0, 1}), one bias unit for -L."""
        import torch

        g = self.geometry
        sched = self.compiled.schedule
        anchors = list(sched.anchors.dims)
        s = sched.anchors.norm_shift  # RMSNorm multiplies by exactly 2^-s
        unit = sched.anchors.unit  # an anchor reads this after the norm
        dtype = sd["mlp.gate_proj.weight"].dtype
        gate = np.zeros((g.intermediate, g.hidden))
        up = np.zeros((g.intermediate, g.hidden))
        down = np.zeros((g.hidden, g.intermediate))
        mute = self.compiled.mute.vector(g.hidden) if self.compiled.mute is not None else 0
        k = LOGIC_GAIN
        for j, d in enumerate(self.code_dims):
            gate[j, d] = k * 2.0**s
            up[j, anchors[0]] = 1.0 / unit
            down[d, j] = 2 * OUTPUT_LEVEL / k
        bias = len(self.code_dims)
        gate[bias, anchors[0]] = k / unit
        up[bias, anchors[0]] = 1.0 / unit
        down[self.code_dims, bias] = -OUTPUT_LEVEL / k
        gate += mute  # every row, as the circuit's own layers (circuit/emit.py)
        return {
            "mlp.gate_proj.weight": torch.tensor(gate, dtype=dtype),
            "mlp.up_proj.weight": torch.tensor(up, dtype=dtype),
            "mlp.down_proj.weight": torch.tensor(down, dtype=dtype),
        }


def compile_machine(
    geometry: Geometry,
    spec: MachineSpec | None = None,
    embedding: np.ndarray | None = None,
    mute_rows: np.ndarray | None = None,
) -> CompiledMachine:
    """Build and compile the machine circuit for a geometry (muted for `embedding`); the
    spec defaults to the geometry's preset (machine_spec_for)."""
    machine = MachineCircuit(spec or machine_spec_for(geometry))
    compiled = compile_circuit(machine.c, geometry, embedding=embedding, mute_rows=mute_rows)
    return CompiledMachine(machine, compiled)


def machine_layout(geometry: Geometry, spec: MachineSpec | None = None) -> CompiledMachine:
    """The machine's schedule without its weights: which layers, heads and rows hold each
    memory and which dims each field, enough to drive a built checkpoint and read its
    state. The schedule is deterministic, so it is the one the checkpoint was built with."""
    machine = MachineCircuit(spec or machine_spec_for(geometry))
    layout = CompiledCircuit(machine.c, schedule(machine.c, geometry), layers=[], mute=None)
    return CompiledMachine(machine, layout)


def build_launch_model(
    machine: CompiledMachine,
    text_embedding: np.ndarray,
    base_layers: int = 4,
    dtype: Any = None,
    seed: int = 0,
    final_norm_weight: np.ndarray | None = None,
):
    """An in-memory Qwen3_5ForCausalLM: the machine's layers, then `base_layers` random
    base layers (HF's initialisation: realistic scale), the text rows followed by the
    circuit tokens in the embedding and an untied lm_head. Returns (model, token offset)."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    from qwengpu.machine.exit_bound import launch_row_gain

    dtype = dtype or torch.float32
    if dtype is torch.float16:
        raise CircuitError("float16 is not supported (anchors of 2^23 overflow it)")
    g = machine.geometry
    base_types = [
        "full_attention" if (i + 1) % g.full_attention_interval == 0 else "linear_attention"
        for i in range(base_layers)
    ]
    types = machine.layer_types + base_types
    n_text = int(text_embedding.shape[0])
    vocab = n_text + len(machine.vocab)
    config = g.text_config(types, vocab_size=vocab)
    # SDPA, as from_pretrained picks for a checkpoint: its grouped-query path reads the
    # shared KV heads in place, where eager attention copies them for every query head at
    # every pass (a batch of 4 at 2,500 tokens: 221 ms against 344 ms per pass, measured)
    config._attn_implementation = "sdpa"
    from transformers.initialization import no_init_weights

    with no_init_weights():  # the circuit layers are loaded below; skip their random init
        model = Qwen3_5ForCausalLM(config).to(dtype).eval()
    torch.manual_seed(seed)
    for layer in model.model.layers[len(machine.layer_types) :]:
        for module in layer.modules():
            model._init_weights(module)
    norm_w = (
        np.zeros(g.hidden) if final_norm_weight is None else np.asarray(final_norm_weight, float)
    )
    with torch.no_grad():
        for i in range(len(machine.layer_types)):  # one layer's tensors alive at a time
            # assigned, not copied: in float32 the model shares the compiled arrays
            sd = machine.layer_state_dict(i, dtype)
            model.model.layers[i].load_state_dict(sd, strict=True, assign=True)
        emb = np.concatenate([np.asarray(text_embedding, float), machine.token_embeddings()])
        model.model.embed_tokens.weight.copy_(torch.tensor(emb).to(dtype))
        gain = launch_row_gain(machine, [torch.tensor(text_embedding)], torch.tensor(norm_w))
        head = np.concatenate(
            [np.asarray(text_embedding, float), machine.output_rows(1.0 + norm_w, gain)]
        )
        model.lm_head.weight.copy_(torch.tensor(head).to(dtype))
        model.model.norm.weight.copy_(torch.tensor(norm_w).to(dtype))
    return model, n_text


# the machine's units, by the name prefixes of their memories and ops (for the layer map)
UNITS: tuple[tuple[str, str], ...] = (
    ("cur", "front end: current EXEC"),
    ("stage", "front end: write-back byte staging"),
    ("romcur", "front end: ROM load cursor"),
    ("memcur", "front end: memory write cursor"),
    ("geometry", "front end: launch geometry"),
    ("cta", "front end: CTA number"),
    ("rom", "program ROM"),
    ("regs", "register file"),
    ("preds", "predicate file"),
    ("mem", "global memory (one copy per lane)"),
    ("atomic", "memory unit: the served lane's old and new word"),
    ("sched", "scheduler state (warp, lane)"),
    ("result", "results buffer"),
)


def layer_lines(machine: CompiledMachine) -> list[str]:
    """One line per circuit layer: its memories (DeltaNet heads), units and MLP ops."""
    lines = []
    for plan in machine.compiled.schedule.layers:
        mems = sorted({slot.memory.name for slot in plan.slots})
        heads = sum(len(slot.value_heads) for slot in plan.slots)
        ops = [op.name for op in plan.mlp_ops]
        unit_names = sorted(
            {
                label
                for name in mems
                for prefix, label in UNITS
                if name == prefix or (name.startswith(prefix) and name[len(prefix) :].isdigit())
            }
        )
        line = (
            f"L{plan.index:<3} {plan.kind:<16} heads {heads:>2}  neurons {len(plan.neurons):>5}"
            f"  memories: {', '.join(mems) or '-'}"
        )
        if unit_names:
            line += f"\n     units: {'; '.join(unit_names)}"
        if ops:
            shown = ", ".join(ops[:12]) + (f" (+{len(ops) - 12} more)" if len(ops) > 12 else "")
            line += f"\n     mlp: {shown}"
        lines.append(line)
    return lines


def layer_map(machine: CompiledMachine) -> str:
    """Which layer holds which memory (DeltaNet heads) and which ops (MLP), per layer."""
    sched = machine.compiled.schedule
    header = (
        f"qgpu machine on {machine.geometry.name}: {sched.layers_used} layers used of "
        f"{sched.num_layers} ({machine.spec.describe()}); {len(machine.vocab)} circuit tokens"
    )
    footer = (
        "last layer's MLP: output amplifier (next-token code to "
        f"+-2^{int(np.log2(OUTPUT_LEVEL))}); code dims: {len(machine.code_dims)}"
    )
    return "\n".join([header, *layer_lines(machine), footer])
