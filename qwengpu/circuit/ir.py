"""The circuit IR: fields, memories and operations.

A `Circuit` is a DAG. Fields are named residual subspaces with an encoding and a lane
count; the token embedding provides the `input` fields. An `MlpOp` is a block of SwiGLU
neurons (craft.Neuron) that reads fields and writes new ones; it occupies one MLP sublayer.
A `Memory` lives in Gated DeltaNet heads; `MemoryWrite`s and `MemoryRead`s use it.

Ops are created by the primitives (qwengpu.circuit.logic, .words, .multiply, ...), which
are also available as methods of `Circuit`. Every op states its exact input and output
encodings; the neurons of every op are checked for bfloat16 exactness when it is created.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Lin, Neuron, Sig
from qwengpu.circuit.encodings import Bit, Bits, Encoding, OneHot
from qwengpu.errors import CircuitError


@dataclass(frozen=True, eq=False)
class Field:
    """A named residual subspace: `lanes` copies of `encoding` side by side."""

    name: str
    encoding: Encoding
    lanes: int = 1

    @property
    def width(self) -> int:
        """Channels of the whole field (all lanes)."""
        return self.encoding.width * self.lanes

    def sig(self, index: int, lane: int = 0) -> Sig:
        if not 0 <= index < self.encoding.width or not 0 <= lane < self.lanes:
            raise CircuitError(f"field {self.name}: channel {index} lane {lane} out of range")
        return Sig(self.name, lane * self.encoding.width + index)

    def ch(self, index: int, lane: int = 0) -> Lin:
        """Channel `index` of lane `lane`, as a linear form."""
        return Lin({self.sig(index, lane): 1})

    def __getitem__(self, index: int) -> Lin:
        return self.ch(index, 0)

    def sigs(self) -> list[Sig]:
        return [Sig(self.name, i) for i in range(self.width)]

    def lane_sigs(self, lane: int) -> list[Sig]:
        w = self.encoding.width
        return [Sig(self.name, lane * w + i) for i in range(w)]

    def value(self, lane: int = 0) -> Lin:
        """The integer value of a Bits/Bit/Int lane as a linear form (sum 2^i * bit_i)."""
        enc = self.encoding
        if isinstance(enc, Bits | Bit):
            return sum((self.ch(i, lane) * (1 << i) for i in range(enc.width)), Lin())
        if isinstance(enc, OneHot):
            return sum((self.ch(i, lane) * i for i in range(enc.width)), Lin())
        if enc.width == 1:
            return self.ch(0, lane)
        raise CircuitError(f"field {self.name}: {enc} has no single integer value")

    def __repr__(self) -> str:
        lanes = f" x{self.lanes}" if self.lanes > 1 else ""
        return f"<{self.name}: {self.encoding}{lanes}>"


def channel_range(fields: dict[str, Field]):
    """A `ranges` function for craft: the integer bounds of any channel."""

    def ranges(sig: Sig) -> tuple[int, int]:
        f = fields[sig.field]
        return f.encoding.dim_range(sig.index % f.encoding.width)

    return ranges


@dataclass(eq=False)
class MlpOp:
    """A block of neurons in one MLP sublayer: reads `inputs`, writes `outputs`.

    `inplace` maps an output field to an input field whose channels it takes over: the
    neurons then write the delta (new - old) into those channels, and the input must not be
    read after this op.
    """

    name: str
    kind: str
    inputs: tuple[Field, ...]
    outputs: tuple[Field, ...]
    neurons: list[Neuron]
    inplace: dict[str, str] = field(default_factory=dict)
    after: tuple[Field, ...] = ()  # placement only: not in a layer before these are ready

    @property
    def neuron_count(self) -> int:
        return len(self.neurons)


@dataclass(frozen=True)
class Column:
    """One field of a memory row: name, encoding (0/1 channels) and lanes."""

    name: str
    encoding: Encoding
    lanes: int = 1

    @property
    def width(self) -> int:
        return self.encoding.width * self.lanes


@dataclass(eq=False)
class MemoryWrite:
    """On tokens where `when` is 1 (every circuit token if None), row `addr` of `memory`
    becomes `data` (all columns: a write replaces the whole row)."""

    name: str
    memory: Memory
    addr: Field
    data: tuple[Field, ...]
    when: Field | None

    @property
    def inputs(self) -> tuple[Field, ...]:
        return (self.addr, *self.data, *([self.when] if self.when is not None else []))


@dataclass(eq=False)
class MemoryRead:
    """On tokens where `when` is 1, the fields of row `addr` (all zeros for a row never
    written, and on tokens that do not read). The state is updated before it is read, so a
    read sees a write of the same token. `valid` (if requested) is 1 for written rows."""

    name: str
    memory: Memory
    addr: Field
    when: Field | None
    outputs: tuple[Field, ...]
    valid: Field | None = None
    after: tuple[Field, ...] = ()  # placement only: not in a layer before these are ready

    @property
    def inputs(self) -> tuple[Field, ...]:
        return (self.addr, *([self.when] if self.when is not None else []))

    @property
    def all_outputs(self) -> tuple[Field, ...]:
        return self.outputs + ((self.valid,) if self.valid is not None else ())


@dataclass(eq=False)
class Memory:
    """`rows` cells of the given columns, held in Gated DeltaNet value heads (one-hot
    keys address rows; a head holds up to 128 rows of 127 data channels plus presence)."""

    name: str
    rows: int
    columns: tuple[Column, ...]
    writes: list[MemoryWrite] = field(default_factory=list)
    reads: list[MemoryRead] = field(default_factory=list)

    @property
    def width(self) -> int:
        return sum(c.width for c in self.columns)


Op = MlpOp | MemoryWrite | MemoryRead


class Circuit:
    """A circuit under construction: declare inputs, add ops, mark outputs."""

    def __init__(self, name: str = "circuit") -> None:
        self.name = name
        self.fields: dict[str, Field] = {}
        self.inputs: list[Field] = []
        self.outputs: list[Field] = []
        self.ops: list[Op] = []
        self.memories: dict[str, Memory] = {}
        self._consumed: dict[str, str] = {}  # field -> in-place op that took its channels
        self._floor: tuple[Field, ...] = ()  # `placed_after`'s fields

    @contextmanager
    def placed_after(self, fields: Sequence[Field]) -> Iterator[None]:
        """Ops added inside go no earlier than `fields` are ready (placement only; no data
        flows from them): work needed deep in the stack then does not hold residual width
        from the layer where its inputs happen to be ready."""
        outer = self._floor
        self._floor = outer + tuple(fields)
        try:
            yield
        finally:
            self._floor = outer

    # -- naming --------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new unique name based on `hint`."""
        taken = self.fields.keys() | self.memories.keys()
        if hint not in taken:
            return hint
        k = 1
        while f"{hint}.{k}" in taken:
            k += 1
        return f"{hint}.{k}"

    def _op_named(self, name: str) -> bool:
        return any(op.name == name for op in self.ops)

    def fresh_op(self, hint: str) -> str:
        """A new unique op name (ops have their own namespace)."""
        if not self._op_named(hint):
            return hint
        k = 1
        while self._op_named(f"{hint}.{k}"):
            k += 1
        return f"{hint}.{k}"

    def new_field(self, name: str, encoding: Encoding, lanes: int = 1) -> Field:
        """Declare an internal field (written by an op created right after)."""
        encoding.check()
        if name in self.fields:
            raise CircuitError(f"field {name!r} already exists in circuit {self.name!r}")
        f = Field(name, encoding, lanes)
        self.fields[name] = f
        return f

    def field(self, name: str) -> Field:
        return self.fields[name]

    # -- inputs and outputs ---------------------------------------------------------------
    def input(self, name: str, encoding: Encoding, lanes: int = 1) -> Field:
        """A field the circuit token's embedding provides."""
        f = self.new_field(name, encoding, lanes)
        self.inputs.append(f)
        return f

    def output(self, *fields: Field) -> None:
        """Mark fields as results: they stay in the residual after the last layer."""
        for f in fields:
            self._check_usable(f, "output")
            if f not in self.outputs:
                self.outputs.append(f)

    def _check_usable(self, f: Field, user: str) -> None:
        if self.fields.get(f.name) is not f:
            raise CircuitError(f"{user}: field {f.name!r} is not part of circuit {self.name!r}")
        if f.name in self._consumed:
            raise CircuitError(
                f"{user}: field {f.name!r} was updated in place by op "
                f"{self._consumed[f.name]!r} and can no longer be read"
            )

    # -- generic MLP block ---------------------------------------------------------------
    def mlp(
        self,
        kind: str,
        inputs: Sequence[Field],
        outputs: Sequence[Field],
        neurons: Iterable[Neuron],
        name: str | None = None,
        inplace: dict[Field, Field] | None = None,
    ) -> MlpOp:
        """Add a block of neurons. Every neuron may only read `inputs` and write `outputs`
        (or, for in-place outputs, the input channels they take over)."""
        op_name = self.fresh_op(name or (outputs[0].name if outputs else kind))
        for f in inputs:
            self._check_usable(f, f"op {op_name!r}")
        in_names = {f.name for f in inputs}
        out_names = {f.name for f in outputs}
        inplace_names = {o.name: i.name for o, i in (inplace or {}).items()}
        for o, i in inplace_names.items():
            if i not in in_names or o not in out_names:
                raise CircuitError(f"op {op_name!r}: in-place {o} <- {i} must map output to input")
            a, b = self.fields[o], self.fields[i]
            if a.width != b.width:
                raise CircuitError(f"op {op_name!r}: in-place {o} and {i} differ in width")
        ranges = channel_range(self.fields)
        kept: list[Neuron] = []
        for n in craft.merge_neurons(neurons):
            stray = n.fields() - in_names
            if stray:
                raise CircuitError(f"op {op_name!r}: a neuron reads {sorted(stray)}, not inputs")
            bad = {s.field for s in n.out} - out_names - set(inplace_names.values())
            if bad:
                raise CircuitError(f"op {op_name!r}: a neuron writes {sorted(bad)}, not outputs")
            if not n.analog and n.gate.bounds(ranges)[1] <= 0:
                continue  # never active: drop
            craft.validate_neuron(n, ranges, f"op {op_name!r} ({kind})")
            kept.append(n)
        op = MlpOp(op_name, kind, tuple(inputs), tuple(outputs), kept, inplace_names, self._floor)
        for i in inplace_names.values():
            self._consumed[i] = op_name
        self.ops.append(op)
        return op

    # -- memories --------------------------------------------------------------------------
    def memory(self, name: str, rows: int, columns: Sequence[Column | tuple]) -> Memory:
        """Declare a memory of `rows` rows; columns are Column(name, encoding, lanes)."""
        if name in self.memories:
            raise CircuitError(f"memory {name!r} already exists")
        cols = tuple(c if isinstance(c, Column) else Column(*c) for c in columns)
        if not 1 <= rows <= 128:
            raise CircuitError(f"memory {name!r}: {rows} rows; a DeltaNet head holds 1..128")
        for c in cols:
            if not c.encoding.storable:
                raise CircuitError(
                    f"memory {name!r}: column {c.name!r} has encoding {c.encoding}; only 0/1 "
                    "channels can be stored (Bit, Bits, OneHot, DualRail)"
                )
        mem = Memory(name, rows, cols)
        self.memories[name] = mem
        return mem

    def _check_address(self, mem: Memory, addr: Field, user: str) -> None:
        enc = addr.encoding
        if addr.lanes != 1:
            raise CircuitError(f"{user}: address {addr.name!r} must have one lane")
        if isinstance(enc, OneHot):
            if enc.width > mem.rows:
                raise CircuitError(f"{user}: one-hot address wider than {mem.rows} rows")
        elif isinstance(enc, Bits | Bit):
            pass  # addresses >= rows select no row
        else:
            raise CircuitError(f"{user}: address {addr.name!r} must be Bits or OneHot, is {enc}")

    def _check_when(self, when: Field | None, user: str) -> None:
        if when is not None and (not isinstance(when.encoding, Bit) or when.lanes != 1):
            raise CircuitError(f"{user}: condition {when.name!r} must be a single Bit")

    def write(
        self,
        mem: Memory,
        addr: Field,
        data: Sequence[Field] | Field,
        when: Field | None = None,
        name: str | None = None,
    ) -> MemoryWrite:
        """mem[addr] <- data on tokens where `when` is 1."""
        data = (data,) if isinstance(data, Field) else tuple(data)
        op_name = self.fresh_op(name or f"{mem.name}.write")
        self._check_address(mem, addr, f"write {op_name!r}")
        self._check_when(when, f"write {op_name!r}")
        if len(data) != len(mem.columns):
            raise CircuitError(
                f"write {op_name!r}: {len(data)} data fields for "
                f"{len(mem.columns)} columns of {mem.name!r}"
            )
        for f, col in zip(data, mem.columns, strict=True):
            if f.encoding != col.encoding or f.lanes != col.lanes:
                raise CircuitError(
                    f"write {op_name!r}: field {f.name!r} ({f.encoding} x{f.lanes}) does not "
                    f"match column {col.name!r} ({col.encoding} x{col.lanes})"
                )
        for f in (addr, *data, *([when] if when else [])):
            self._check_usable(f, f"write {op_name!r}")
        op = MemoryWrite(op_name, mem, addr, data, when)
        mem.writes.append(op)
        self.ops.append(op)
        return op

    def read(
        self,
        mem: Memory,
        addr: Field,
        when: Field | None = None,
        name: str | None = None,
        valid: bool = False,
        after: Sequence[Field] = (),
    ) -> MemoryRead:
        """The row `addr` of `mem` (zeros where `when` is 0 or the row was never written).
        Returns the op; its `outputs` are one field per column (and `valid`). `after`: read
        no earlier than these fields are ready (a read whose value is needed deep in the
        stack would otherwise hold residual width from its early layer on)."""
        op_name = self.fresh_op(name or f"{mem.name}.read")
        self._check_address(mem, addr, f"read {op_name!r}")
        self._check_when(when, f"read {op_name!r}")
        for f in (addr, *([when] if when else [])):
            self._check_usable(f, f"read {op_name!r}")
        outs = tuple(
            self.new_field(self.fresh(f"{op_name}.{c.name}"), c.encoding, c.lanes)
            for c in mem.columns
        )
        valid_field = self.new_field(self.fresh(f"{op_name}.valid"), Bit()) if valid else None
        op = MemoryRead(op_name, mem, addr, when, outs, valid_field, (*after, *self._floor))
        mem.reads.append(op)
        self.ops.append(op)
        return op

    # -- inspection --------------------------------------------------------------------------
    def readers(self) -> dict[str, list[Op]]:
        users: dict[str, list[Op]] = {name: [] for name in self.fields}
        for op in self.ops:
            for f in op.inputs:
                users[f.name].append(op)
        return users

    def producer(self) -> dict[str, Op | None]:
        prod: dict[str, Op | None] = {f.name: None for f in self.inputs}
        for op in self.ops:
            if isinstance(op, MlpOp):
                for f in op.outputs:
                    prod[f.name] = op
            elif isinstance(op, MemoryRead):
                for f in op.all_outputs:
                    prod[f.name] = op
        return prod

    def summary(self) -> str:
        lines = [
            f"circuit {self.name}: {len(self.fields)} fields, {len(self.ops)} ops, "
            f"{len(self.memories)} memories"
        ]
        for op in self.ops:
            if isinstance(op, MlpOp):
                ins = ", ".join(f.name for f in op.inputs)
                outs = ", ".join(f.name for f in op.outputs)
                lines.append(
                    f"  {op.name} [{op.kind}] ({ins}) -> ({outs}): {op.neuron_count} neurons"
                )
            else:
                lines.append(f"  {op.name} [{type(op).__name__}] on {op.memory.name}")
        return "\n".join(lines)
