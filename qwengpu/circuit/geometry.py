"""Qwen3.5 decoder-layer geometries, and the residual anchor scheme each one implies.

The one place the published Qwen3.5 shapes (Qwen/Qwen3.5-0.8B, -2B, -4B) are written
down: the checkpoint builder's synthetic bases (qwengpu/model/geometry.py) derive their
configs from these `Geometry` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from qwengpu.circuit.numerics import ANCHOR_LOG2, ANCHOR_VALUE
from qwengpu.errors import CircuitError

if TYPE_CHECKING:
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

LINEAR = "linear_attention"
FULL = "full_attention"

QWEN35_VOCAB_ROWS = 248320
"""Embedding rows of every published Qwen3.5 (the tokenizer has 248,077; the rest is padding)."""

FULL_ATTENTION_INTERVAL = 4
"""Qwen3.5 puts a full-attention layer after every 3 Gated DeltaNet layers."""

ROPE_THETA = 10_000_000.0
PARTIAL_ROTARY_FACTOR = 0.25  # rotary on the first quarter of each 256-dim attention head


def base_layer_type(index: int, interval: int = FULL_ATTENTION_INTERVAL) -> str:
    """Qwen3.5's pattern: every `interval`-th layer is full attention, the rest DeltaNet."""
    return FULL if index % interval == interval - 1 else LINEAR


def layer_types(count: int, interval: int = FULL_ATTENTION_INTERVAL) -> list[str]:
    """The types of a stack of `count` layers in Qwen3.5's pattern."""
    return [base_layer_type(i, interval) for i in range(count)]


@dataclass(frozen=True)
class AnchorScheme:
    """How circuit tokens make RMSNorm an exact power-of-two scaling.

    `count` anchor channels hold 2^23 each. With hidden = count * 4^t, the mean square is
    count * 2^46 / hidden = 4^(23 - t), so RMSNorm multiplies by 2^-(23 - t) =
    2^-`norm_shift` exactly, and an anchor channel normalises to 2^t = `unit`, the constant
    that every bias of a gate is written against.
    """

    dims: tuple[int, ...]
    norm_shift: int  # s: normalised value = residual value * 2^-s
    unit: float  # what one anchor channel normalises to (2^t)

    @property
    def count(self) -> int:
        return len(self.dims)

    @property
    def value(self) -> float:
        return ANCHOR_VALUE


@dataclass(frozen=True)
class Geometry:
    """The shapes of one Qwen3.5 decoder layer (the parts the circuit fills)."""

    name: str
    hidden: int
    intermediate: int
    linear_key_heads: int
    linear_value_heads: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    linear_key_dim: int = 128
    linear_value_dim: int = 128
    conv_kernel: int = 4
    full_attention_interval: int = FULL_ATTENTION_INTERVAL
    rms_norm_eps: float = 1e-6
    vocab_size: int = QWEN35_VOCAB_ROWS
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.linear_key_dim != 128 or self.linear_value_dim != 128:
            raise CircuitError(
                f"geometry {self.name}: DeltaNet memories need 128-dim heads, got key "
                f"{self.linear_key_dim} / value {self.linear_value_dim}"
            )
        if self.linear_value_heads % self.linear_key_heads:
            raise CircuitError(
                f"geometry {self.name}: value heads ({self.linear_value_heads}) must be a "
                f"multiple of key heads ({self.linear_key_heads})"
            )
        if self.rms_norm_eps > 1e-3:
            raise CircuitError(f"geometry {self.name}: rms_norm_eps {self.rms_norm_eps} too big")
        self.anchor_scheme()  # validates the hidden size

    # -- derived shapes ---------------------------------------------------------------
    @property
    def value_heads_per_key_head(self) -> int:
        return self.linear_value_heads // self.linear_key_heads

    @property
    def key_dim(self) -> int:
        return self.linear_key_heads * self.linear_key_dim

    @property
    def value_dim(self) -> int:
        return self.linear_value_heads * self.linear_value_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def layer_type(self, index: int, keep_base_pattern: bool = True) -> str:
        """Layer `index` of the circuit stack: every 4th is full attention (base pattern)."""
        return base_layer_type(index, self.full_attention_interval) if keep_base_pattern else LINEAR

    def anchor_scheme(self) -> AnchorScheme:
        t = 0
        while self.hidden % (4 ** (t + 1)) == 0 and 4 ** (t + 1) <= self.hidden:
            t += 1
        count = self.hidden // 4**t
        if count > 16 or t < 2:
            raise CircuitError(
                f"geometry {self.name}: hidden size {self.hidden} needs {count} anchor channels "
                "(hidden / largest power of 4 dividing it); at most 16 are supported"
            )
        dims = tuple(range(self.hidden - count, self.hidden))
        return AnchorScheme(dims=dims, norm_shift=ANCHOR_LOG2 - t, unit=float(2**t))

    def with_layers(self, **changes: Any) -> Geometry:
        return replace(self, **changes)

    def text_config(
        self, layer_types: list[str], vocab_size: int | None = None, **overrides: Any
    ) -> Qwen3_5TextConfig:
        """A `Qwen3_5TextConfig` for a stack of the given layer types."""
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

        kwargs: dict[str, Any] = dict(
            vocab_size=vocab_size or self.vocab_size,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=len(layer_types),
            num_attention_heads=self.attention_heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            linear_num_key_heads=self.linear_key_heads,
            linear_num_value_heads=self.linear_value_heads,
            linear_key_head_dim=self.linear_key_dim,
            linear_value_head_dim=self.linear_value_dim,
            linear_conv_kernel_dim=self.conv_kernel,
            rms_norm_eps=self.rms_norm_eps,
            layer_types=list(layer_types),
            full_attention_interval=self.full_attention_interval,
            tie_word_embeddings=False,
            max_position_embeddings=32768,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": ROPE_THETA,
                "partial_rotary_factor": PARTIAL_ROTARY_FACTOR,
            },
        )
        kwargs.update(overrides)
        config = Qwen3_5TextConfig(**kwargs)
        config._attn_implementation = "eager"
        return config


TINY = Geometry(
    name="tiny",
    hidden=256,
    intermediate=1024,
    linear_key_heads=4,
    linear_value_heads=4,
    attention_heads=2,
    kv_heads=1,
    head_dim=64,
    vocab_size=512,
)
"""A small geometry with real Qwen3.5 head shapes (128-dim DeltaNet heads), for fast tests."""

QWEN35_0_8B = Geometry(
    name="qwen3.5-0.8b",
    hidden=1024,
    intermediate=3584,
    linear_key_heads=16,
    linear_value_heads=16,
    attention_heads=8,
    kv_heads=2,
    head_dim=256,
)

QWEN35_2B = Geometry(
    name="qwen3.5-2b",
    hidden=2048,
    intermediate=6144,
    linear_key_heads=16,
    linear_value_heads=16,
    attention_heads=8,
    kv_heads=2,
    head_dim=256,
)

QWEN35_4B = Geometry(
    name="qwen3.5-4b",
    hidden=2560,
    intermediate=9216,
    linear_key_heads=16,
    linear_value_heads=32,
    attention_heads=16,
    kv_heads=4,
    head_dim=256,
)

GEOMETRIES: dict[str, Geometry] = {g.name: g for g in (TINY, QWEN35_0_8B, QWEN35_2B, QWEN35_4B)}


def geometry_from_config(config: Any, name: str = "custom") -> Geometry:
    """The geometry of an existing Qwen3.5 text config (e.g. a base checkpoint's)."""
    return Geometry(
        name=name,
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        linear_key_heads=config.linear_num_key_heads,
        linear_value_heads=config.linear_num_value_heads,
        attention_heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        linear_key_dim=config.linear_key_head_dim,
        linear_value_dim=config.linear_value_head_dim,
        conv_kernel=config.linear_conv_kernel_dim,
        full_attention_interval=getattr(config, "full_attention_interval", None)
        or FULL_ATTENTION_INTERVAL,
        rms_norm_eps=config.rms_norm_eps,
        vocab_size=config.vocab_size,
    )
