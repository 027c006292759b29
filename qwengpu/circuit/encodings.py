"""Encodings: how a field's value is laid out over its residual channels.

Every channel of every encoding holds an integer in a known range (`dim_range`), small
enough for bfloat16 (|v| <= 256). Encodings whose channels are all 0/1 are `storable`: a
DeltaNet memory can hold them (values enter a head through SiLU, so they must be 0 or a
positive level, and a read is cleaned back to 0/1 by a threshold).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qwengpu.circuit.numerics import BF16_EXACT_INT
from qwengpu.errors import CircuitError


class Encoding(ABC):
    """A value <-> channels mapping for one lane of a field."""

    width: int

    @abstractmethod
    def dim_range(self, index: int) -> tuple[int, int]:
        """Inclusive integer bounds of channel `index`."""

    @abstractmethod
    def encode(self, value: int) -> list[int]:
        """Channel values for `value` (raises CircuitError when out of range)."""

    @abstractmethod
    def decode(self, channels: np.ndarray) -> np.ndarray:
        """Values from channels: array [..., width] -> array [...] (int64)."""

    @property
    def storable(self) -> bool:
        return all(self.dim_range(i) == (0, 1) for i in range(self.width))

    def encode_many(self, values: np.ndarray) -> np.ndarray:
        """Vectorised encode: int array [...] -> [..., width]."""
        flat = np.asarray(values, dtype=np.int64).reshape(-1)
        out = np.array([self.encode(int(v)) for v in flat], dtype=np.float64)
        return out.reshape(*np.shape(values), self.width)

    def max_square_norm(self) -> int:
        """Largest possible sum of squares of one lane's channels (for the norm budget)."""
        return sum(max(lo * lo, hi * hi) for lo, hi in map(self.dim_range, range(self.width)))

    def check(self) -> None:
        for i in range(self.width):
            lo, hi = self.dim_range(i)
            if lo > hi or max(abs(lo), abs(hi)) > BF16_EXACT_INT:
                raise CircuitError(f"{self}: channel {i} range [{lo}, {hi}] not bf16-exact")


@dataclass(frozen=True)
class Bit(Encoding):
    """One channel, 0 or 1."""

    width: int = 1

    def dim_range(self, index: int) -> tuple[int, int]:
        return (0, 1)

    def encode(self, value: int) -> list[int]:
        if value not in (0, 1):
            raise CircuitError(f"Bit cannot hold {value}")
        return [int(value)]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        return np.rint(channels[..., 0]).astype(np.int64)

    def __str__(self) -> str:
        return "Bit"


@dataclass(frozen=True)
class Bits(Encoding):
    """An n-bit integer, little-endian binary, one 0/1 channel per bit. `signed` only
    changes how `encode`/`decode` read it (two's complement)."""

    width: int
    signed: bool = False

    def dim_range(self, index: int) -> tuple[int, int]:
        return (0, 1)

    def encode(self, value: int) -> list[int]:
        lo = -(1 << (self.width - 1)) if self.signed else 0
        hi = (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1
        if not lo <= value <= hi:
            raise CircuitError(f"{self} cannot hold {value}")
        value &= (1 << self.width) - 1
        return [(value >> i) & 1 for i in range(self.width)]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        bits = np.rint(channels).astype(np.int64)
        weights = np.left_shift(np.int64(1), np.arange(self.width, dtype=np.int64))
        if self.width >= 63:
            raise CircuitError("Bits wider than 62 cannot be decoded to int64")
        value = (bits * weights).sum(axis=-1)
        if self.signed:
            value = np.where(bits[..., -1] == 1, value - (1 << self.width), value)
        return value

    def encode_many(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.int64) & ((1 << self.width) - 1)
        shifts = np.arange(self.width, dtype=np.int64)
        return ((v[..., None] >> shifts) & 1).astype(np.float64)

    def __str__(self) -> str:
        return f"Bits({self.width}{', signed' if self.signed else ''})"


@dataclass(frozen=True)
class OneHot(Encoding):
    """A value in [0, n): channel `value` is 1, the others 0. With `allow_none`, all zero
    means "no value" (decoded as -1)."""

    width: int
    allow_none: bool = False

    def dim_range(self, index: int) -> tuple[int, int]:
        return (0, 1)

    def encode(self, value: int) -> list[int]:
        if value == -1 and self.allow_none:
            return [0] * self.width
        if not 0 <= value < self.width:
            raise CircuitError(f"{self} cannot hold {value}")
        return [int(i == value) for i in range(self.width)]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        hot = np.rint(channels).astype(np.int64)
        index = hot.argmax(axis=-1)
        return np.where(hot.sum(axis=-1) == 0, -1, index)

    def encode_many(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.int64)
        return (v[..., None] == np.arange(self.width)).astype(np.float64)

    def __str__(self) -> str:
        return f"OneHot({self.width})"


@dataclass(frozen=True)
class Int(Encoding):
    """A small integer in [lo, hi] in one channel (|lo|, |hi| <= 256 for bfloat16)."""

    lo: int
    hi: int
    width: int = 1

    def __post_init__(self) -> None:
        self.check()

    def dim_range(self, index: int) -> tuple[int, int]:
        return (self.lo, self.hi)

    def encode(self, value: int) -> list[int]:
        if not self.lo <= value <= self.hi:
            raise CircuitError(f"{self} cannot hold {value}")
        return [int(value)]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        return np.rint(channels[..., 0]).astype(np.int64)

    def encode_many(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)[..., None]

    def __str__(self) -> str:
        return f"Int({self.lo}..{self.hi})"


@dataclass(frozen=True)
class Ints(Encoding):
    """`width` small integers, each in [lo, hi], one channel each."""

    width: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        self.check()

    def dim_range(self, index: int) -> tuple[int, int]:
        return (self.lo, self.hi)

    def encode(self, value: int) -> list[int]:
        raise CircuitError(f"{self} holds a vector; use encode_vector")

    def encode_vector(self, values: Sequence[int]) -> list[int]:
        if len(values) != self.width or not all(self.lo <= v <= self.hi for v in values):
            raise CircuitError(f"{self} cannot hold {list(values)}")
        return [int(v) for v in values]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        raise CircuitError(f"{self} holds a vector; read its channels directly")

    def __str__(self) -> str:
        return f"Ints({self.width} x {self.lo}..{self.hi})"


@dataclass(frozen=True)
class IntVec(Encoding):
    """Small integers with a range per channel, e.g. the column counts of a multiplier."""

    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        self.check()

    @property
    def width(self) -> int:  # type: ignore[override]
        return len(self.ranges)

    def dim_range(self, index: int) -> tuple[int, int]:
        return self.ranges[index]

    def encode(self, value: int) -> list[int]:
        raise CircuitError(f"{self} holds a vector")

    def decode(self, channels: np.ndarray) -> np.ndarray:
        raise CircuitError(f"{self} holds a vector; read its channels directly")

    def __str__(self) -> str:
        return f"IntVec({len(self.ranges)})"


@dataclass(frozen=True)
class DualRail(Encoding):
    """n bits as 2n channels: bit i in channel i and its complement in channel n + i. The
    channel sum of squares is always n: a fixed-norm encoding."""

    bits: int

    @property
    def width(self) -> int:  # type: ignore[override]
        return 2 * self.bits

    def dim_range(self, index: int) -> tuple[int, int]:
        return (0, 1)

    def encode(self, value: int) -> list[int]:
        plain = Bits(self.bits).encode(value)
        return plain + [1 - b for b in plain]

    def decode(self, channels: np.ndarray) -> np.ndarray:
        return Bits(self.bits).decode(channels[..., : self.bits])

    def __str__(self) -> str:
        return f"DualRail({self.bits})"


def concat_encode(encodings: Sequence[Encoding], values: Sequence[int]) -> list[int]:
    out: list[int] = []
    for encoding, value in zip(encodings, values, strict=True):
        out += encoding.encode(value)
    return out
