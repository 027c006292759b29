"""Gated DeltaNet heads as memories: the pre-activations of one memory copy, the landing
band of its reads, and the neurons that clean a read.

A memory copy occupies value heads of one layer (127 data channels each, plus a presence
channel) and the key heads that serve them. Per token:

  key_r   = 128 * match_r(write addr) - 96    (32 on the addressed row, <= -96 elsewhere)
  value_c = 32 * data_c ; presence = 256       (silu: exactly 32 * data_c and 256)
  beta    = sigmoid(128 * (2 * when - 1))      (exactly 1 or 0)
  query_r = 128 * match_r(read addr) - 96
  z_c     = 32 * read_when                     (silu: 32 or 0)
  decay   = exp(-exp(-8192) * softplus(.)) = 1

After SiLU and the kernels' L2 norm, keys and queries are exactly one-hot (32 * 2^-5 = 1),
so each write overwrites one row exactly (the delta rule with beta = 1: S_r <- v) and a
read returns alpha * S_r with alpha = fl(128^-0.5). The gated RMSNorm then divides by the
row's RMS, dominated by the presence channel: a stored 1 lands in the residual as a value
rho in a narrow band (`landing_band`), a stored 0 as exactly 0.0 (0 times anything), a
never-written row as exactly 0.0 (0 * rsqrt(0 + eps)).

The MLP of the same layer cleans each landing channel: bit = (max(256 rho - 96, 0) -
max(256 rho - 160, 0)) / 64, exactly 1 for rho in the band (both units on; 256 rho, 96 and
160 are multiples of the ulp of 256 rho, so both differences are exact) and 0 for rho = 0;
and it cancels rho with max(32 rho, 0) / 32 (exactly rho: 32 rho >= 17 lies in SiLU's
exact-linear range). The landing channels are free again from the next layer on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from qwengpu.circuit.craft import Lin, Neuron, Sig
from qwengpu.circuit.encodings import Encoding
from qwengpu.circuit.ir import Field, Memory, MemoryRead, MemoryWrite
from qwengpu.circuit.logic import match_form
from qwengpu.circuit.numerics import (
    BETA_LOGIT,
    CANCEL_GAIN,
    CLEAN_GAIN,
    CLEAN_HIGH_KNOT,
    CLEAN_LOW_KNOT,
    KEY_MATCH_GAIN,
    KEY_OFF,
    LOGIC_GAIN,
    PRESENCE_OUT_SCALE,
    PRESENCE_VALUE,
    READ_BAND_MIN,
    READ_OUT_SCALE,
    READ_ROUNDING_SLACK,
    VALUE_ONE,
    Z_ON,
)
from qwengpu.errors import CircuitError

HEAD_ROWS = 128
HEAD_DATA_CHANNELS = 127  # the last value channel of every head is the presence channel
PRESENCE_CHANNEL = 127


class LandingEncoding(Encoding):
    """Internal: a read's landing channels (0, or a value in the landing band)."""

    def __init__(self, width: int) -> None:
        self.width = width

    def dim_range(self, index: int) -> tuple[int, int]:
        return (0, 2)

    def encode(self, value: int) -> list[int]:  # pragma: no cover - never encoded
        raise CircuitError("landing channels are not token inputs")

    def decode(self, channels):  # pragma: no cover
        raise CircuitError("landing channels are internal")

    def __repr__(self) -> str:
        return f"Landing({self.width})"


def landing_band(data_channels_per_head: int) -> tuple[Fraction, Fraction]:
    """Where a stored 1 (and the presence channel, scaled) lands: [lo, hi] over every row
    content. normed one = 32 sqrt(128) / sqrt(256^2 + p 32^2) for p ones in the row (p in
    [1, n]); the presence channel normed = 256 sqrt(128) / sqrt(256^2 + p 32^2) / 8 for p in
    [0, n]. Widened by READ_ROUNDING_SLACK for bfloat16 roundings."""
    n = data_channels_per_head

    def normed(level: float, p: int) -> float:
        return level * math.sqrt(HEAD_ROWS) / math.sqrt(PRESENCE_VALUE**2 + p * VALUE_ONE**2)

    values = [normed(VALUE_ONE, p) for p in (1, n)]
    values += [normed(PRESENCE_VALUE, p) * float(PRESENCE_OUT_SCALE * Z_ON) for p in (0, n)]
    lo = Fraction(min(values)).limit_denominator(1 << 20) * (1 - READ_ROUNDING_SLACK)
    hi = Fraction(max(values)).limit_denominator(1 << 20) * (1 + READ_ROUNDING_SLACK)
    if lo < READ_BAND_MIN:
        raise CircuitError(
            f"read landing band [{float(lo):.3f}, {float(hi):.3f}] dips below "
            f"{float(READ_BAND_MIN):.3f}: the cleaning threshold has no margin"
        )
    return lo, hi


@dataclass
class HeadSlot:
    """One copy of a memory in one layer: the heads it uses and the channels it maps."""

    memory: Memory
    layer: int
    read: MemoryRead | None
    key_heads: list[int]
    value_heads: list[int]
    landing: Field | None = None  # internal field: the read's landing channels
    clean_neurons: list[Neuron] = field(default_factory=list)

    @property
    def write(self) -> MemoryWrite | None:
        return self.memory.writes[0] if self.memory.writes else None

    def channel_map(self) -> list[tuple[int, int]]:
        """Memory channel i -> (value head, channel within head)."""
        return [
            (self.value_heads[i // HEAD_DATA_CHANNELS], i % HEAD_DATA_CHANNELS)
            for i in range(self.memory.width)
        ]


def heads_needed(mem: Memory, ratio: int) -> tuple[int, int]:
    """(value heads, key heads) one copy of `mem` occupies; `ratio` value heads share a key
    head (grouped value attention), so a copy takes whole key-head groups."""
    value_heads = max(1, math.ceil(mem.width / HEAD_DATA_CHANNELS))
    key_heads = math.ceil(value_heads / ratio)
    return value_heads, key_heads


def memory_channels(mem: Memory, data: tuple[Field, ...]) -> list[Sig]:
    """The data channels of a write, in memory-channel order."""
    return [s for f in data for s in f.sigs()]


def address_forms(addr: Field, rows: int) -> list[Lin]:
    """For each row r: 1 when addr selects r, <= 0 otherwise."""
    enc = addr.encoding
    from qwengpu.circuit.encodings import OneHot

    if isinstance(enc, OneHot):
        return [addr.ch(r) if r < enc.width else Lin() for r in range(rows)]
    bits = [addr.ch(i) for i in range(enc.width)]
    return [match_form(bits, r) if not r >> len(bits) else Lin(const=-1) for r in range(rows)]


def key_preactivations(addr: Field, rows: int) -> list[Lin]:
    """128 * match_r - 96 for r < rows (rows beyond get the constant KEY_OFF)."""
    forms = address_forms(addr, rows)
    out = [f * KEY_MATCH_GAIN + KEY_OFF for f in forms]
    return out + [Lin(const=KEY_OFF)] * (HEAD_ROWS - rows)


def value_preactivation(sig: Sig) -> Lin:
    return Lin({sig: VALUE_ONE})


PRESENCE_PREACTIVATION = Lin(const=PRESENCE_VALUE)


def beta_preactivation(when: Field | None) -> Lin:
    """+128 on tokens that write, -128 on those that do not."""
    if when is None:
        return Lin(const=BETA_LOGIT)
    return when.ch(0) * (2 * BETA_LOGIT) - BETA_LOGIT


BETA_OFF = Lin(const=-BETA_LOGIT)


def z_preactivation(when: Field | None) -> Lin:
    return Lin(const=Z_ON) if when is None else when.ch(0) * Z_ON


def out_scale(is_presence: bool) -> Fraction:
    return PRESENCE_OUT_SCALE if is_presence else READ_OUT_SCALE


def cleaning_neurons(landing: Sig, target: Sig) -> list[Neuron]:
    """target += [rho > 0] exactly, landing -= rho exactly (see module docstring). In logic
    units (the emitter multiplies gates by LOGIC_GAIN)."""
    k = Fraction(LOGIC_GAIN)
    rho = Lin({landing: 1})
    step = k / (CLEAN_HIGH_KNOT - CLEAN_LOW_KNOT)
    return [
        Neuron(rho * (CLEAN_GAIN / k) - CLEAN_LOW_KNOT / k, Lin(const=1), {target: step}, True),
        Neuron(rho * (CLEAN_GAIN / k) - CLEAN_HIGH_KNOT / k, Lin(const=1), {target: -step}, True),
        Neuron(rho * (CANCEL_GAIN / k), Lin(const=1), {landing: -k / CANCEL_GAIN}, True),
    ]
