"""The interface between a circuit compiler and the checkpoint builder.

A circuit compiler looks at the base (`BaseInfo`: geometry, dtype, the text embedding rows
and the muting direction they admit) and returns `CircuitLayers`: the decoder layers to put
in front of the base's own, the circuit tokens, and what the checkpoint is bound to
(MachineSpec, compiler version). The builder checks everything it can (shapes, dtypes,
muting on every text row) and writes the checkpoint; it never trusts a number it can
recompute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from qwengpu.errors import ModelError
from qwengpu.isa.spec import MachineSpec

if TYPE_CHECKING:
    import torch

    from qwengpu.model.muting import MuteDirection

LayerType = Literal["linear_attention", "full_attention"]
LAYER_TYPES: tuple[str, ...] = ("linear_attention", "full_attention")
Weights = Mapping[str, "torch.Tensor"]


@dataclass(frozen=True)
class CircuitLayer:
    """One Qwen3_5DecoderLayer: its type and its state dict.

    Keys are those of `model.layers.N.*` without the prefix (`mlp.gate_proj.weight`,
    `linear_attn.A_log`, ...). `weights` may be a zero-argument callable, so that a big
    circuit is computed layer by layer while the checkpoint streams out (it may be called
    more than once).
    """

    layer_type: LayerType
    weights: Weights | Callable[[], Weights]

    def materialize(self) -> Weights:
        weights = self.weights() if callable(self.weights) else self.weights
        if not isinstance(weights, Mapping):
            raise ModelError(f"circuit layer weights must be a mapping, got {type(weights)}")
        return weights


@dataclass(frozen=True)
class CircuitLayers:
    """Everything the builder merges into the base.

    layers:          in order; layer 0 sees the token embeddings first.
    token_strings:   the circuit tokens, added after the base tokenizer's vocabulary:
                     token k gets id `BaseInfo.first_circuit_id + k` (the base's unused
                     padding rows first, then new rows).
    input_rows:      (n_tokens, hidden) their input embeddings.
    output_rows:     (n_tokens, hidden) their lm_head rows, or None for "same as input".
                     On a tied base, rows that differ from input_rows untie the embeddings.
    mute_direction:  (hidden,) the direction w every text-silencing gate adds m * w of. The
                     builder recomputes its margin over every text row and proves each gate
                     is below -MUTE_THRESHOLD there; circuit tokens must be 0 on it.
    spec, compiler_version: what the checkpoint is bound to; the runtime refuses others.
    layer_map:       one human line per layer (what it holds), for the model card.
    extra:           JSON-serialisable facts to record in the manifest.
    suppress_in_text: the circuit tokens' output rows are live on text positions too (the
                     base's final hidden state is arbitrary there), so the generation
                     config suppresses them: plain `generate()` only ever picks text.
    exit_bound:      given the LM head's other rows (blocks of them), the output rows as
                     stored and the final norm's weight, the proof that no other row can
                     win on a circuit token, as manifest facts (machine.exit_bound); None:
                     no early exit.
    """

    layers: Sequence[CircuitLayer]
    token_strings: Sequence[str]
    input_rows: torch.Tensor
    output_rows: torch.Tensor | None
    mute_direction: torch.Tensor
    spec: MachineSpec
    compiler_version: str
    layer_map: Sequence[str] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    suppress_in_text: bool = False
    exit_bound: (
        Callable[[Sequence[torch.Tensor], torch.Tensor, torch.Tensor | None], dict] | None
    ) = None

    @property
    def layer_types(self) -> list[str]:
        return [layer.layer_type for layer in self.layers]

    def validate(self, hidden_size: int) -> None:
        """Structural checks that need no base weights (shapes, names, types)."""
        if not self.layers:
            raise ModelError("the circuit has no layers")
        if "full_attention" not in self.layer_types:
            raise ModelError(
                "the circuit needs at least one full_attention layer: a stack with only "
                "linear-attention layers in front breaks the HF cache (physics.md)"
            )
        for i, layer in enumerate(self.layers):
            if layer.layer_type not in LAYER_TYPES:
                raise ModelError(f"circuit layer {i}: unknown layer type {layer.layer_type!r}")
        n = len(self.token_strings)
        if len(set(self.token_strings)) != n:
            raise ModelError("circuit token strings must be unique")
        if any(not isinstance(t, str) or not t for t in self.token_strings):
            raise ModelError("circuit token strings must be non-empty strings")
        for what, rows in (("input_rows", self.input_rows), ("output_rows", self.output_rows)):
            if rows is None and what == "output_rows":
                continue
            if tuple(rows.shape) != (n, hidden_size):
                raise ModelError(
                    f"circuit {what} has shape {tuple(rows.shape)}, expected ({n}, {hidden_size})"
                )
        if tuple(self.mute_direction.shape) != (hidden_size,):
            raise ModelError(
                f"mute_direction has shape {tuple(self.mute_direction.shape)}, "
                f"expected ({hidden_size},)"
            )
        if not self.compiler_version:
            raise ModelError("the circuit must name its compiler version")
        if len(self.layer_map) not in (0, len(self.layers)):
            raise ModelError("layer_map must have one line per circuit layer (or be empty)")


@dataclass(frozen=True)
class BaseInfo:
    """What a circuit compiler may know about the base it is compiled for."""

    source: str  # what was asked for: "Qwen/Qwen3.5-2B", a path, "synthetic:tiny"
    text_config: Mapping[str, Any]  # the base's text config (config.json, text part)
    storage_dtype: torch.dtype  # the checkpoint's dtype; circuit weights must fit it exactly
    vocab_rows: int  # embedding rows of the base (the tokenizer uses fewer: padding)
    first_circuit_id: int  # = the base tokenizer's size: circuit token k gets this + k
    tied_embeddings: bool
    text_token_ids: torch.Tensor  # every id the base tokenizer can produce
    text_embeddings: torch.Tensor  # their embedding rows, (n_text, hidden), storage dtype
    # the base's final RMSNorm weight (hidden,): the norm multiplies by (1 + weight) before
    # the lm_head, so output rows that must score exactly divide by it (None: all zeros)
    final_norm_weight: torch.Tensor | None = None
    # the base's LM head (vocab_rows, hidden), storage dtype: its embedding when tied. The
    # rows the circuit's output rows must beat on launches (None: not known)
    head_rows: torch.Tensor | None = None

    @property
    def hidden_size(self) -> int:
        return int(self.text_config["hidden_size"])

    def mute_direction(self, channels: Sequence[int] | None = None) -> MuteDirection:
        """The best muting direction over these text rows, on `channels` (default: all)."""
        from qwengpu.model.muting import find_mute_direction

        return find_mute_direction(
            self.text_embeddings,
            channels=channels,
            eps=float(self.text_config.get("rms_norm_eps", 1e-6)),
            storage_dtype=self.storage_dtype,
        )


class CircuitCompiler(Protocol):
    """Builds the circuit for a base. `spec` and `compiler_version` are known up front, so
    a cached checkpoint can be matched (or refused) without compiling anything; spec None
    means the compiler picks the preset of the base's geometry (the manifest names it)."""

    spec: MachineSpec | None
    compiler_version: str

    def __call__(self, base: BaseInfo) -> CircuitLayers: ...
