"""Run emitted circuit layers through a real, unmodified `Qwen3_5ForCausalLM`.

`CircuitModel` builds a model whose decoder layers are the circuit's (plus one all-zero
full-attention layer when the stack has none: HF's cache needs one), with a small token
embedding: synthetic text rows followed by circuit-token rows. It feeds tokens in one
prefill (chunked DeltaNet path), one by one with a cache (recurrent path), or a prefill
followed by decoding, and returns the residual stream after the last circuit layer (a
forward hook on that layer; the model's final norm is not part of the circuit).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from qwengpu.circuit.compile import CompiledCircuit
from qwengpu.circuit.geometry import FULL
from qwengpu.errors import CircuitError

MODES = ("prefill", "decode", "split", "nocache")
"""prefill: all tokens in one cached forward (chunked kernel); decode: one token per
forward with a cache (recurrent kernel); split: prefill the first part, decode the rest;
nocache: one forward without a cache."""

EXACT_FP32 = "ieee"
"""torch's name for float32 products computed in float32 (its alternatives: "tf32" on
CUDA, "bf16" in oneDNN on CPUs with AMX, both of which round the operands first)."""


def _pinned_settings(torch: Any) -> list[tuple[Any, str, Any]]:
    """(object, attribute, value) of every torch setting the circuit's exactness rests on:
    float32 matmuls and convolutions (the DeltaNets' short conv) in float32, and bfloat16
    matmuls summed in float32 (CUDA may otherwise reduce split-K partial sums in
    bfloat16, rounding a sum the circuit needs whole). Torch before 2.9 has no
    `fp32_precision`: its legacy TF32 flags stand in."""
    b = torch.backends
    cuda = b.cuda.matmul
    settings = [
        (cuda, "allow_bf16_reduced_precision_reduction", False),
        (cuda, "allow_fp16_reduced_precision_reduction", False),
    ]
    if hasattr(cuda, "fp32_precision"):
        ops = (cuda, b.cudnn.conv, b.mkldnn.matmul, b.mkldnn.conv)
        return settings + [(op, "fp32_precision", EXACT_FP32) for op in ops]
    return settings + [(cuda, "allow_tf32", False), (b.cudnn, "allow_tf32", False)]


@contextlib.contextmanager
def exact_arithmetic() -> Iterator[None]:
    """Run the block with torch's arithmetic pinned to what the circuit's weights are exact
    under (circuit/numerics.py: integer operands, sums in float32). A caller's
    `torch.set_float32_matmul_precision("high")`, or cuDNN's TF32 default for float32
    convolutions, would otherwise be in force during a launch. The caller's settings come
    back on exit."""
    import torch

    pinned = _pinned_settings(torch)
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in pinned]
    try:
        for obj, name, value in pinned:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


class CircuitModel:
    """A Qwen3_5ForCausalLM running a compiled circuit."""

    def __init__(
        self,
        compiled: CompiledCircuit,
        dtype: Any = None,
        text_embedding: Any = None,
        circuit_tokens: np.ndarray | None = None,
    ) -> None:
        import torch
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

        if dtype is torch.float16:
            raise CircuitError(
                "float16 is not supported: the anchors (2^23) overflow it; use bfloat16 or float32"
            )
        self.compiled = compiled
        self.dtype = dtype or torch.float32
        g = compiled.geometry
        types = list(compiled.layer_types)
        self.extra_layers = 0
        if FULL not in types:
            types.append(FULL)  # a do-nothing full-attention layer: HF's cache needs one
            self.extra_layers = 1
        n_text = 0 if text_embedding is None else int(text_embedding.shape[0])
        n_circ = 0 if circuit_tokens is None else int(circuit_tokens.shape[0])
        vocab = max(1, n_text + n_circ)
        self.n_text = n_text
        config = g.text_config(types, vocab_size=vocab)
        torch.manual_seed(0)
        model = Qwen3_5ForCausalLM(config).to(self.dtype).eval()
        with torch.no_grad():
            for i, sd in enumerate(compiled.state_dicts(self.dtype)):
                model.model.layers[i].load_state_dict(sd, strict=True)
            for layer in model.model.layers[len(compiled.layers) :]:
                for p in layer.parameters():
                    p.zero_()
            emb = torch.zeros(vocab, g.hidden, dtype=self.dtype)
            if n_text:
                emb[:n_text] = torch.as_tensor(text_embedding).to(self.dtype)
            if n_circ:
                emb[n_text:] = torch.as_tensor(circuit_tokens, dtype=torch.float64).to(self.dtype)
            model.model.embed_tokens.weight.copy_(emb)
            model.lm_head.weight.zero_()
        self.model = model
        self._captured: list = []
        last = model.model.layers[len(compiled.layers) - 1]
        last.register_forward_hook(
            lambda _m, _i, out: self._captured.append(out[0] if isinstance(out, tuple) else out)
        )

    @property
    def circuit_token_base(self) -> int:
        """Token id of the first circuit-token row."""
        return self.n_text

    def _forward(self, cache, **inputs):
        import torch

        self._captured.clear()
        with torch.no_grad(), exact_arithmetic():
            out = self.model(**inputs, cache=cache, use_cache=cache is not None)
        return self._captured[-1], out.cache

    def run(
        self,
        embeds: np.ndarray | None = None,
        ids: np.ndarray | None = None,
        mode: str = "prefill",
        split: int | None = None,
        return_cache: bool = False,
    ):
        """Residual after the last circuit layer, [batch, tokens, hidden] (float64).

        Give circuit-token residual vectors as `embeds` [batch, tokens, hidden], or token
        ids [batch, tokens] (text ids below `circuit_token_base`, circuit tokens above)."""
        import torch
        from transformers import DynamicCache

        if mode not in MODES:
            raise CircuitError(f"mode {mode!r} not in {MODES}")
        if (embeds is None) == (ids is None):
            raise CircuitError("give exactly one of embeds and ids")
        if embeds is not None:
            x = torch.as_tensor(np.asarray(embeds), dtype=torch.float64).to(self.dtype)
            key = "inputs_embeds"
            n = x.shape[1]

            def part(a, b):
                return {key: x[:, a:b]}
        else:
            x = torch.as_tensor(np.asarray(ids), dtype=torch.long)
            n = x.shape[1]

            def part(a, b):
                return {"input_ids": x[:, a:b]}

        if mode == "nocache":
            res, cache = self._forward(None, **part(0, n))
            outs = [res]
        else:
            cache = DynamicCache(config=self.model.config)
            cut = {"prefill": n, "decode": 0, "split": split if split is not None else n // 2}[mode]
            outs = []
            if cut > 0:
                res, cache = self._forward(cache, **part(0, cut))
                outs.append(res)
            for t in range(cut, n):
                res, cache = self._forward(cache, **part(t, t + 1))
                outs.append(res)
        residual = torch.cat(outs, dim=1).double().numpy()
        if return_cache:
            return residual, cache
        return residual

    def recurrent_states(self, cache) -> dict[int, np.ndarray]:
        """{layer: recurrent state [batch, value_heads, 128, 128]} of the circuit layers."""
        states = {}
        for i, kind in enumerate(self.compiled.layer_types):
            if kind != FULL:
                s = cache.layers[i].recurrent_states[0]
                if s is not None:
                    states[i] = s.double().numpy()
        return states
