"""Scheduler and allocator: place every op into a layer, every field into residual dims.

Placement is list scheduling in dependency order (creation order breaks ties), as early
as dependencies and per-layer capacity allow:

  * an `MlpOp` goes into the MLP of the first layer at or after all its inputs are ready
    whose MLP still has room for its neurons (neurons identical to ones already in the
    layer are shared);
  * each `MemoryRead` gets its own copy of the memory (a head group in a linear-attention
    layer) at the first layer where its address, its condition and the memory's write
    inputs are all ready, with room for the read's cleaning neurons in that layer's MLP;
    the write is replicated into every copy, so every copy holds the same rows. A memory
    without reads gets one copy.
  * every field that is not an output is cleared (reset to 0) by neurons in the MLP of the
    layer of its last use (or the next MLP with room), which frees its residual dims.

Then residual dims are assigned by a linear scan over the sublayers (reusing the dims of
cleared fields), and the data norm budget of the exact RMSNorm is checked at every point.
Layers follow the base pattern (every 4th layer full attention, whose attention is zero
and whose MLP is used) unless `keep_base_pattern=False`.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Neuron, Sig
from qwengpu.circuit.geometry import LINEAR, AnchorScheme, Geometry
from qwengpu.circuit.ir import Circuit, Field, MemoryRead, MemoryWrite, MlpOp, channel_range
from qwengpu.circuit.memory import (
    HEAD_DATA_CHANNELS,
    HeadSlot,
    LandingEncoding,
    cleaning_neurons,
    heads_needed,
    landing_band,
)
from qwengpu.circuit.numerics import DATA_NORM_BUDGET
from qwengpu.errors import CircuitError

DEFAULT_MIN_MUTE_DIMS = 32
"""Residual dims left unused by the circuit, where the muting direction lives (circuit
tokens are exactly 0 there). More is better for the margin; see mute.py."""


def attn_point(layer: int) -> int:
    return 2 * layer


def mlp_point(layer: int) -> int:
    return 2 * layer + 1


@dataclass
class LayerPlan:
    index: int
    kind: str
    mlp_ops: list[MlpOp] = field(default_factory=list)
    slots: list[HeadSlot] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    neurons: dict[tuple, Neuron] = field(default_factory=dict)
    free_key_heads: list[int] = field(default_factory=list)

    @property
    def neuron_count(self) -> int:
        return len(self.neurons)

    def add_neurons(self, neurons: Sequence[Neuron]) -> None:
        for n in neurons:
            key = n.key()
            if key in self.neurons:
                target = self.neurons[key].out
                for s, c in n.out.items():
                    target[s] = target.get(s, Fraction(0)) + c
            else:
                self.neurons[key] = Neuron(n.gate, n.up, dict(n.out), n.analog)

    def new_neuron_count(self, neurons: Sequence[Neuron]) -> int:
        return len({n.key() for n in neurons} - set(self.neurons))


@dataclass
class Schedule:
    """Where everything went. `dims[field]` lists the residual dims of each field (one per
    channel, in channel order); `layers[i]` holds the ops, head slots and neurons of layer i."""

    circuit: Circuit
    geometry: Geometry
    layers: list[LayerPlan]
    dims: dict[str, list[int]]
    anchors: AnchorScheme
    keep_base_pattern: bool
    fields: dict[str, Field]  # circuit fields plus internal landing fields
    op_layer: dict[str, int]
    live_dims: list[int]  # residual dims in use, per sublayer point (2 per layer)
    norm_peak: int
    defined_at: dict[str, int] = field(default_factory=dict)  # sublayer point (-1: embedding)
    cleared_at: dict[str, int] = field(default_factory=dict)  # MLP point of the clear

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def layers_used(self) -> int:
        """Layers up to the last one that holds anything (the rest is pattern padding)."""
        busy = [p.index for p in self.layers if p.neurons or p.slots]
        return max(busy, default=-1) + 1

    @property
    def layer_types(self) -> list[str]:
        return [layer.kind for layer in self.layers]

    def used_dims(self) -> set[int]:
        """Every residual dim the circuit ever touches (fields and anchors)."""
        used = {d for dims in self.dims.values() for d in dims}
        return used | set(self.anchors.dims)

    def mute_dims(self) -> list[int]:
        """Dims circuit tokens never use: they are exactly 0 there on every layer."""
        used = self.used_dims()
        return [d for d in range(self.geometry.hidden) if d not in used]

    def dim_of(self, sig: Sig) -> int:
        return self.dims[sig.field][sig.index]

    def utilisation(self) -> list[dict]:
        g = self.geometry
        rows = []
        for layer in self.layers:
            heads = sum(len(s.value_heads) for s in layer.slots)
            rows.append(
                {
                    "layer": layer.index,
                    "type": layer.kind,
                    "value_heads": heads,
                    "value_heads_total": g.linear_value_heads if layer.kind == LINEAR else 0,
                    "neurons": layer.neuron_count,
                    "neurons_total": g.intermediate,
                    "residual_dims": max(self.live_dims[2 * layer.index : 2 * layer.index + 2]),
                    "residual_total": g.hidden,
                    "ops": [op.name for op in layer.mlp_ops]
                    + [
                        f"{s.memory.name}{'<-' + s.read.name if s.read else ''}"
                        for s in layer.slots
                    ],
                }
            )
        return rows

    def field_map(self) -> str:
        """Which residual dims each field holds and in which layers it is live."""

        def where(point: int) -> str:
            if point < 0:
                return "embedding"
            return f"L{point // 2}.{'mlp' if point % 2 else 'attn'}"

        def spans(dims: list[int]) -> str:
            out, start = [], None
            for k, d in enumerate(dims):
                if start is None:
                    start = d
                if k + 1 == len(dims) or dims[k + 1] != d + 1:
                    out.append(f"{start}" if start == d else f"{start}-{d}")
                    start = None
            return ",".join(out)

        outputs = {f.name for f in self.circuit.outputs}
        taken = {
            i: o for op in self.circuit.ops if isinstance(op, MlpOp) for o, i in op.inplace.items()
        }
        lines = []
        for name, dims in self.dims.items():
            if name not in self.circuit.fields:
                continue
            f = self.circuit.fields[name]
            end = "output" if name in outputs else where(self.cleared_at.get(name, -2))
            if name in taken:
                end = f"updated in place into {taken[name]}"
            elif name not in outputs and name not in self.cleared_at:
                end = "never cleared"
            lines.append(
                f"{name:<32} {str(f.encoding):<14} x{f.lanes:<2} dims {spans(dims):<18} "
                f"{where(self.defined_at.get(name, -1))} -> {end}"
            )
        return "\n".join(lines)

    def report(self) -> str:
        """A table of layers: type, heads, neurons, residual dims, ops."""
        g = self.geometry
        lines = [
            f"circuit {self.circuit.name!r} on {g.name}: {self.layers_used} layers used of "
            f"{self.num_layers} "
            f"({'base pattern kept' if self.keep_base_pattern else 'all linear'}), "
            f"{len(self.mute_dims())} mute dims, data norm peak {self.norm_peak}",
            f"{'layer':>5} {'type':<6} {'heads':>7} {'neurons':>13} {'resid':>11}  ops",
        ]
        for row in self.utilisation():
            heads = (
                f"{row['value_heads']}/{row['value_heads_total']}" if row["type"] == LINEAR else "-"
            )
            pct = 100 * row["neurons"] / row["neurons_total"]
            lines.append(
                f"{row['layer']:>5} {row['type'][:6]:<6} {heads:>7} "
                f"{row['neurons']:>6}/{row['neurons_total']:<6}"
                f"{row['residual_dims']:>5}/{row['residual_total']:<5}  "
                f"{' '.join(row['ops'])} ({pct:.0f}%)"
            )
        return "\n".join(lines)


class _Placer:
    def __init__(
        self, circuit: Circuit, geometry: Geometry, keep_base_pattern: bool, max_layers: int | None
    ) -> None:
        self.c = circuit
        self.g = geometry
        self.keep = keep_base_pattern
        self.max_layers = max_layers
        self.layers: list[LayerPlan] = []
        self.ready: dict[str, int] = {f.name: 0 for f in circuit.inputs}
        self.op_layer: dict[str, int] = {}
        self.fields: dict[str, Field] = dict(circuit.fields)
        self.clear_point: dict[str, int] = {}
        self.op_first_layer: dict[str, int] = {}

    def layer(self, index: int, op_name: str, resource: str) -> LayerPlan:
        while len(self.layers) <= index:
            i = len(self.layers)
            if self.max_layers is not None and i >= self.max_layers:
                raise CircuitError(
                    f"op {op_name!r} does not fit: it needs {resource} in a layer after "
                    f"layer {i - 1}, but the circuit is limited to {self.max_layers} layers"
                )
            kind = self.g.layer_type(i, self.keep)
            plan = LayerPlan(i, kind)
            if kind == LINEAR:
                plan.free_key_heads = list(range(self.g.linear_key_heads))
            self.layers.append(plan)
        return self.layers[index]

    def place_mlp(self, op: MlpOp, lower: int) -> None:
        cap = self.g.intermediate
        lb = max([lower, *(self.ready[f.name] for f in op.inputs + op.after)])
        if op.neuron_count <= cap:
            groups = [op.neurons]
        else:
            groups = output_components(op.neurons)
            biggest = max(len(g) for g in groups)
            if op.inplace or biggest > cap:
                raise CircuitError(
                    f"op {op.name!r} ({op.kind}) needs {op.neuron_count} MLP neurons (its "
                    f"largest inseparable part {biggest}); a layer of {self.g.name} has {cap} "
                    "(resource: MLP width)"
                )
        i = lb
        layers = []
        for group in groups:
            while True:
                plan = self.layer(i, op.name, f"{len(group)} MLP neurons")
                if plan.neuron_count + plan.new_neuron_count(group) <= cap:
                    break
                i += 1
            plan.add_neurons(group)
            if op not in plan.mlp_ops:
                plan.mlp_ops.append(op)
            layers.append(i)
        self.op_layer[op.name] = max(layers)
        self.op_first_layer[op.name] = min(layers)
        for f in op.outputs:
            self.ready[f.name] = max(layers) + 1

    def place_copy(self, mem, read: MemoryRead | None, write: MemoryWrite | None) -> HeadSlot:
        ratio = self.g.value_heads_per_key_head
        n_value, n_key = heads_needed(mem, ratio)
        if n_key > self.g.linear_key_heads:
            raise CircuitError(
                f"memory {mem.name!r} needs {n_value} value heads ({mem.width} channels); a "
                f"layer of {self.g.name} has {self.g.linear_value_heads} (resource: heads)"
            )
        deps = list(read.inputs + read.after if read else ()) + list(write.inputs if write else ())
        lb = max([0, *(self.ready[f.name] for f in deps)])
        name = read.name if read else mem.name
        landing = None
        clean: list[Neuron] = []
        if read is not None:
            landing = Field(
                f"{read.name}.landing", LandingEncoding(mem.width + (1 if read.valid else 0))
            )
            self.fields[landing.name] = landing
            targets = [s for f in read.all_outputs for s in f.sigs()]
            for i, target in enumerate(targets):
                clean += cleaning_neurons(Sig(landing.name, i), target)
            per_head = min(HEAD_DATA_CHANNELS, mem.width)
            landing_band(per_head)  # validates the cleaning margin
            if len(clean) > self.g.intermediate:
                raise CircuitError(
                    f"read {read.name!r} needs {len(clean)} MLP neurons to clean its "
                    f"{len(targets)} channels; a layer of {self.g.name} has "
                    f"{self.g.intermediate} (resource: MLP width)"
                )
        i = lb
        while True:
            plan = self.layer(i, name, f"{n_value} value heads")
            fits = (
                plan.kind == LINEAR
                and len(plan.free_key_heads) >= n_key
                and plan.neuron_count + len(clean) <= self.g.intermediate
            )
            if fits:
                break
            i += 1
        key_heads = plan.free_key_heads[:n_key]
        del plan.free_key_heads[:n_key]
        value_heads = [kh * ratio + j for kh in key_heads for j in range(ratio)][:n_value]
        slot = HeadSlot(mem, i, read, key_heads, value_heads, landing, clean)
        plan.slots.append(slot)
        plan.add_neurons(clean)
        if read is not None:
            self.op_layer[read.name] = i
            for f in read.all_outputs:
                self.ready[f.name] = i + 1
        return slot


def output_components(neurons: Sequence[Neuron]) -> list[list[Neuron]]:
    """Split a block into groups that write disjoint channels (bias units are split per
    channel first): each group can go to a different layer, and every channel still gets
    all its contributions in one MLP, so no partial sum is ever visible."""
    units: list[Neuron] = []
    for n in neurons:
        if not n.gate.terms and not n.up.terms and len(n.out) > 1:
            units += [Neuron(n.gate, n.up, {s: c}, n.analog) for s, c in n.out.items()]
        else:
            units.append(n)
    parent: dict[Sig, Sig] = {}

    def find(x: Sig) -> Sig:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in units:
        sigs = list(n.out)
        for other in sigs[1:]:
            parent[find(other)] = find(sigs[0])
    groups: dict[Sig, list[Neuron]] = {}
    for n in units:
        groups.setdefault(find(next(iter(n.out))), []).append(n)
    return list(groups.values())


def _dependency_order(c: Circuit) -> list:
    """Ops in an order where every op comes after the producers of its inputs, reads after
    the producers of their memory's write inputs, in-place ops after the other readers of
    the field they take over; creation order breaks ties."""
    producer = c.producer()
    index = {id(op): k for k, op in enumerate(c.ops)}
    deps: dict[int, set[int]] = {id(op): set() for op in c.ops}

    def needs(op, fields) -> None:
        for f in fields:
            p = producer.get(f.name)
            if p is not None and p is not op:
                deps[id(op)].add(id(p))

    for op in c.ops:
        if isinstance(op, MlpOp):
            needs(op, op.inputs + op.after)
        elif isinstance(op, MemoryWrite):
            needs(op, op.inputs)
        elif isinstance(op, MemoryRead):
            needs(op, op.inputs + op.after)
            for w in op.memory.writes:
                needs(op, w.inputs)
                deps[id(op)].add(id(w))
    readers = c.readers()
    for op in c.ops:
        if isinstance(op, MlpOp):
            for consumed in op.inplace.values():
                for r in readers[consumed]:
                    if r is not op:
                        deps[id(op)].add(id(r))
    by_id = {id(op): op for op in c.ops}
    users: dict[int, list[int]] = {k: [] for k in deps}
    for k, ds in deps.items():
        for d in ds:
            users[d].append(k)
    pending = {k: len(ds) for k, ds in deps.items()}
    heap = [(index[k], k) for k, n in pending.items() if n == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, k = heapq.heappop(heap)
        order.append(by_id[k])
        for u in users[k]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(heap, (index[u], u))
    if len(order) != len(c.ops):
        stuck = [by_id[k] for k, n in pending.items() if n > 0]
        mems = sorted({op.memory.name for op in stuck if isinstance(op, MemoryRead)})
        hint = (
            (
                f"; memory {', '.join(mems)}: its write depends on its own read on the same "
                "token (write it back on a later token)"
            )
            if mems
            else ""
        )
        raise CircuitError(
            f"circuit {c.name!r} has a dependency cycle through "
            f"{', '.join(op.name for op in stuck[:6])}{hint}"
        )
    return order


def schedule(
    circuit: Circuit,
    geometry: Geometry,
    *,
    keep_base_pattern: bool = True,
    pad_to_pattern: bool = True,
    max_layers: int | None = None,
    min_mute_dims: int = DEFAULT_MIN_MUTE_DIMS,
    dim_order: Sequence[int] | None = None,
    clear_dead: bool = True,
) -> Schedule:
    """Place `circuit` into layers of `geometry` and assign residual dims.

    keep_base_pattern: layer i is full attention when i % 4 == 3 (the base's pattern), and
    pad_to_pattern rounds the stack up to a multiple of 4 so the base layers that follow
    keep their own pattern. dim_order: residual dims in the order the allocator should use
    them (e.g. the least useful for muting first); the anchors are always the last dims.
    clear_dead: reset dead fields to 0 (costs one neuron per channel, frees their dims);
    without it, dead fields keep their dims to the end.
    Raises CircuitError naming the op and the resource when the circuit does not fit.
    """
    c = circuit
    for mem in c.memories.values():
        if len(mem.writes) > 1:
            raise CircuitError(
                f"memory {mem.name!r} has {len(mem.writes)} writes; a head has one key and "
                "one beta projection: merge them (mux the address, data and condition)"
            )
    placer = _Placer(c, geometry, keep_base_pattern, max_layers)
    slots: dict[str, list[HeadSlot]] = {m: [] for m in c.memories}
    for op in _dependency_order(c):
        if isinstance(op, MlpOp):
            lower = 0
            for consumed in op.inplace.values():
                for r in c.readers()[consumed]:
                    if r is not op and r.name in placer.op_layer:
                        lower = max(lower, placer.op_layer[r.name])
            placer.place_mlp(op, lower)
        elif isinstance(op, MemoryRead):
            w = op.memory.writes[0] if op.memory.writes else None
            slots[op.memory.name].append(placer.place_copy(op.memory, op, w))
    for name, mem in c.memories.items():
        if not slots[name] and mem.writes:
            slots[name].append(placer.place_copy(mem, None, mem.writes[0]))
    if not placer.layers:
        placer.layer(0, "(empty circuit)", "a layer")

    _check_inplace(c, placer)
    uses: dict[str, list[int]] = {name: [] for name in c.fields}
    _place_clears(c, placer, uses, clear_dead)
    if keep_base_pattern and pad_to_pattern:
        interval = geometry.full_attention_interval
        while len(placer.layers) % interval:
            placer.layer(len(placer.layers), "(padding)", "a padding layer")
    dims, live, peak = _allocate(c, placer, uses, geometry, min_mute_dims, dim_order)
    return Schedule(
        circuit=c,
        geometry=geometry,
        layers=placer.layers,
        dims=dims,
        anchors=geometry.anchor_scheme(),
        keep_base_pattern=keep_base_pattern,
        fields=placer.fields,
        op_layer=placer.op_layer,
        live_dims=live,
        norm_peak=peak,
        defined_at=_definition_points(c, placer),
        cleared_at=dict(placer.clear_point),
    )


def _check_inplace(c: Circuit, placer: _Placer) -> None:
    readers = c.readers()
    for op in c.ops:
        if isinstance(op, MlpOp) and op.inplace:
            here = placer.op_layer[op.name]
            for consumed in op.inplace.values():
                for r in readers[consumed]:
                    if r is not op and placer.op_layer.get(r.name, -1) > here:
                        raise CircuitError(
                            f"op {op.name!r} updates {consumed!r} in place in "
                            f"layer {here}, but {r.name!r} reads it later"
                        )


def _place_clears(
    c: Circuit, placer: _Placer, uses: dict[str, list[int]], clear_dead: bool
) -> None:
    """Fill `uses` (read points per field) and put clear neurons for every dead field."""
    for op in c.ops:
        if isinstance(op, MlpOp):
            p = mlp_point(placer.op_layer[op.name])
            for f in op.inputs:
                uses[f.name].append(p)
    for plan in placer.layers:
        for slot in plan.slots:
            p = attn_point(plan.index)
            if slot.read is not None:
                for f in slot.read.inputs:
                    uses[f.name].append(p)
            if slot.write is not None:
                for f in slot.write.inputs:
                    uses[f.name].append(p)
    defined = _definition_points(c, placer)
    outputs = {f.name for f in c.outputs}
    consumed = {i for op in c.ops if isinstance(op, MlpOp) for i in op.inplace.values()}
    ranges = channel_range(placer.fields)
    for name in c.fields:
        if name in outputs or name in consumed or name not in defined or not clear_dead:
            continue
        last = max(uses[name], default=defined[name])
        layer = last // 2 if last >= 0 else 0
        if last == defined[name] and last % 2 == 1:
            layer += 1  # defined by an MLP and never read: clear in the next MLP
        neurons = craft.clear_neurons(placer.fields[name].sigs(), ranges)
        i = layer
        while i < len(placer.layers):
            plan = placer.layers[i]
            if plan.neuron_count + plan.new_neuron_count(neurons) <= placer.g.intermediate:
                plan.add_neurons(neurons)
                plan.cleared.append(name)
                placer.clear_point[name] = mlp_point(i)
                break
            i += 1


def _definition_points(c: Circuit, placer: _Placer) -> dict[str, int]:
    defined = {f.name: -1 for f in c.inputs}
    for op in c.ops:
        if isinstance(op, MlpOp) and op.name in placer.op_layer:
            for f in op.outputs:
                defined[f.name] = mlp_point(placer.op_first_layer[op.name])
        elif isinstance(op, MemoryRead) and op.name in placer.op_layer:
            for f in op.all_outputs:
                defined[f.name] = mlp_point(placer.op_layer[op.name])
    return defined


def _allocate(
    c: Circuit,
    placer: _Placer,
    uses: dict[str, list[int]],
    g: Geometry,
    min_mute_dims: int,
    dim_order: Sequence[int] | None,
) -> tuple[dict[str, list[int]], list[int], int]:
    anchors = g.anchor_scheme()
    order = [d for d in (dim_order or range(g.hidden)) if d not in anchors.dims]
    if len(set(order)) != len(order):
        raise CircuitError("dim_order repeats a dim")
    budget = len(order) - min_mute_dims
    if budget <= 0:
        raise CircuitError(f"geometry {g.name}: no residual dims left after anchors and mute dims")
    usable = order[:budget]
    rank = {d: k for k, d in enumerate(usable)}
    free: list[int] = list(range(len(usable)))  # heap of ranks
    heapq.heapify(free)
    dims: dict[str, list[int]] = {}
    defined = _definition_points(c, placer)
    producer = c.producer()

    # Events per point: definitions (alloc) and releases (free after clear).
    allocs: dict[int, list[str]] = {}
    for name, p in defined.items():
        allocs.setdefault(p, []).append(name)
    landing_def: dict[int, list[str]] = {}
    for plan in placer.layers:
        for slot in plan.slots:
            if slot.landing is not None:
                landing_def.setdefault(attn_point(plan.index), []).append(slot.landing.name)
    releases_same: dict[int, list[str]] = {}  # free for definitions at the same MLP point
    for name, p in placer.clear_point.items():
        releases_same.setdefault(p, []).append(name)
    inplace_of = {o: i for op in c.ops if isinstance(op, MlpOp) for o, i in op.inplace.items()}
    field_norm = {name: f.encoding.max_square_norm() * f.lanes for name, f in placer.fields.items()}
    live: set[str] = set()
    landing_release: list[str] = []
    live_counts: list[int] = []
    peak = 0
    last_point = mlp_point(len(placer.layers) - 1)

    def take(name: str, point: int) -> None:
        f = placer.fields[name]
        if name in inplace_of:
            dims[name] = dims[inplace_of[name]]
            live.discard(inplace_of[name])
            live.add(name)
            return
        if len(free) < f.width:
            if os.environ.get("QGPU_DEBUG_LIVE"):
                widest = sorted(live, key=lambda n: -placer.fields[n].width)[:60]
                print("live:", [(n, placer.fields[n].width) for n in widest])
            who = producer.get(name)
            op = who.name if who is not None else ("token embedding" if point < 0 else name)
            raise CircuitError(
                f"op {op!r} needs {f.width} residual dims for {name!r} at layer "
                f"{max(point, 0) // 2}, but only {len(free)} of {budget} are free "
                f"(resource: residual width {g.hidden}, {len(anchors.dims)} anchors, "
                f"{min_mute_dims} kept for muting)"
            )
        ranks = [heapq.heappop(free) for _ in range(f.width)]
        dims[name] = [usable[r] for r in sorted(ranks)]
        live.add(name)

    def release(name: str) -> None:
        live.discard(name)
        for d in dims[name]:
            heapq.heappush(free, rank[d])

    for name in allocs.get(-1, []):
        take(name, -1)
    for point in range(0, last_point + 1):
        if point % 2 == 0:  # attention sublayer: landings of this layer's reads
            for name in landing_release:
                release(name)
            landing_release = []
            for name in landing_def.get(point, []):
                take(name, point)
                landing_release.append(name)  # cleaned and cancelled in this layer's MLP
        else:
            for name in releases_same.get(point, []):
                release(name)
            for name in allocs.get(point, []):
                take(name, point)
        norm = sum(field_norm[n] for n in live)
        peak = max(peak, norm)
        if norm >= DATA_NORM_BUDGET:
            raise CircuitError(
                f"layer {point // 2}: live fields' sum of squares reaches {norm}, over the "
                f"exact-RMSNorm budget {DATA_NORM_BUDGET} (resource: data norm)"
            )
        live_counts.append(sum(placer.fields[n].width for n in live))
    return dims, live_counts, peak
