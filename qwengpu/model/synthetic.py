"""Random-weight Qwen3.5 bases with realistic statistics, for offline builds and tests.

A synthetic base has a real geometry, the real Qwen3.5 tokenizer and weights drawn at the
scales of a trained model. The embedding matrix matters most: muting depends on it, and
trained LLM embeddings are anisotropic with a common mean (physics.md), so rows are
    mean + row_scale * (z * spectrum) @ mixing
with a power-law spectrum mixed by random orthogonal blocks. `isotropic` drops the mean and
the spectrum, which is the case where no muting direction exists (for testing the refusal).
Tensors are generated one at a time from per-tensor seeds and streamed to disk.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from qwengpu.errors import ModelError
from qwengpu.model.atomic import commit_dir, work_dir
from qwengpu.model.geometry import GEOMETRIES, geometry
from qwengpu.model.safetensors_io import TensorSource, dtype_name, tensor_bytes, write_sharded
from qwengpu.model.tokenizer import qwen35_tokenizer_dir

GENERATOR_VERSION = 1
MARKER = "qwengpu_synthetic.json"
EMBED_CHUNK_ROWS = 8192
MIXING_BLOCK = 128


@dataclass(frozen=True)
class SyntheticSpec:
    """What `synthetic:NAME[,option...]` asks for."""

    geometry: str
    layout: str = "vlm"  # "vlm" (Qwen3_5ForConditionalGeneration) or "text"
    tied: bool = True
    isotropic: bool = False
    seed: int = 0

    @classmethod
    def parse(cls, text: str) -> SyntheticSpec:
        """`synthetic:tiny`, `synthetic:2b,text`, `synthetic:tiny,untied,seed=3`, ..."""
        if not text.startswith("synthetic:"):
            raise ModelError(f"not a synthetic base: {text!r}")
        name, *options = text.removeprefix("synthetic:").split(",")
        if name not in GEOMETRIES:
            raise ModelError(
                f"unknown synthetic geometry '{name}' (known: {', '.join(GEOMETRIES)})"
            )
        spec = {"geometry": name}
        for option in options:
            if option in ("vlm", "text"):
                spec["layout"] = option
            elif option in ("tied", "untied"):
                spec["tied"] = option == "tied"
            elif option == "isotropic":
                spec["isotropic"] = True
            elif option.startswith("seed=") and option[5:].isdigit():
                spec["seed"] = int(option[5:])
            else:
                raise ModelError(
                    f"unknown synthetic option '{option}' in {text!r} "
                    "(use vlm|text, tied|untied, isotropic, seed=N)"
                )
        return cls(**spec)

    @property
    def slug(self) -> str:
        parts = [self.geometry, self.layout, "tied" if self.tied else "untied"]
        if self.isotropic:
            parts.append("isotropic")
        return "-".join([*parts, f"seed{self.seed}", f"g{GENERATOR_VERSION}"])


def synthetic_configs(spec: SyntheticSpec) -> dict:
    """The config.json of a synthetic base."""
    shapes = geometry(spec.geometry)
    text = shapes["text"]
    text["tie_word_embeddings"] = spec.tied
    text["dtype"] = "bfloat16"
    if spec.layout == "text":
        return {"architectures": ["Qwen3_5ForCausalLM"], **text}
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "vision_config": shapes["vision"],
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": spec.tied,
        "dtype": "bfloat16",
    }


def tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter name and shape of the model `config` describes (built on `meta`)."""
    import torch
    from transformers.models.qwen3_5 import (
        Qwen3_5Config,
        Qwen3_5ForCausalLM,
        Qwen3_5ForConditionalGeneration,
        Qwen3_5TextConfig,
    )

    fields = {k: v for k, v in config.items() if k != "architectures"}
    with torch.device("meta"):
        if config.get("model_type") == "qwen3_5":
            model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(**fields))
        else:
            model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**fields))
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        shapes.pop("lm_head.weight", None)
    return shapes


def _seed(spec: SyntheticSpec, name: str) -> int:
    digest = hashlib.sha256(f"{spec.seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _embedding_chunks(
    rows: int, hidden: int, seed: int, isotropic: bool, mean_fraction: float
) -> Iterator:
    """Embedding rows in chunks: common mean + anisotropic noise (see module docstring)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    sigma = 0.02
    if isotropic:
        spectrum, blocks, mean = torch.ones(hidden), None, torch.zeros(hidden)
    else:
        spectrum = (torch.arange(hidden, dtype=torch.float32) + 1) ** -0.5
        spectrum = spectrum / spectrum.pow(2).mean().sqrt()
        spectrum = spectrum[torch.randperm(hidden, generator=gen)]
        block = min(MIXING_BLOCK, hidden)
        q, _ = torch.linalg.qr(torch.randn(hidden // block, block, block, generator=gen))
        blocks = q
        direction = torch.randn(hidden, generator=gen)
        mean = direction / direction.norm() * mean_fraction * sigma * hidden**0.5
    for start in range(0, rows, EMBED_CHUNK_ROWS):
        count = min(EMBED_CHUNK_ROWS, rows - start)
        chunk_gen = torch.Generator().manual_seed((seed + 1 + start) % (1 << 63))
        z = torch.randn(count, hidden, generator=chunk_gen) * spectrum
        if blocks is not None:
            block = blocks.shape[-1]
            z = torch.einsum("nkb,kbc->nkc", z.view(count, -1, block), blocks).reshape(count, -1)
        scale = torch.exp(0.1 * torch.randn(count, 1, generator=chunk_gen))
        yield (mean + sigma * scale * z).to(torch.bfloat16)


def _generate(spec: SyntheticSpec, name: str, shape: tuple[int, ...]):
    """One tensor at trained-model scales, chosen by parameter name."""
    import torch

    gen = torch.Generator().manual_seed(_seed(spec, name))

    def normal(mean: float, std: float):
        return mean + std * torch.randn(shape, generator=gen)

    last = name.split(".")[-1]
    if name.endswith("linear_attn.A_log"):
        value = torch.rand(shape, generator=gen).mul(15).add(1).log()
    elif name.endswith("linear_attn.dt_bias"):
        value = normal(1.0, 0.1)
    elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: plain multiplier
        value = normal(1.0, 0.05)
    elif name.endswith("conv1d.weight"):
        value = normal(0.0, 0.3)
    elif ".visual." in name and last == "weight" and len(shape) == 1:  # LayerNorm
        value = normal(1.0, 0.02)
    elif last == "bias":
        value = normal(0.0, 0.01)
    elif len(shape) == 1:  # Qwen3_5RMSNorm weights are (1 + w): centred on 0
        value = normal(0.0, 0.05)
    else:
        value = normal(0.0, 0.02)
    return value.to(torch.bfloat16)


def _sources(spec: SyntheticSpec, config: dict) -> list[TensorSource]:
    import torch

    text = config.get("text_config", config)
    mean_fraction = 1.0 if int(text["hidden_size"]) < 512 else 0.3
    sources = []
    for name, shape in tensor_shapes(config).items():
        if name.endswith("embed_tokens.weight") or name == "lm_head.weight":

            def produce(name=name, shape=shape) -> Iterator:
                for chunk in _embedding_chunks(
                    shape[0], shape[1], _seed(spec, name), spec.isotropic, mean_fraction
                ):
                    yield tensor_bytes(chunk)

        else:

            def produce(name=name, shape=shape) -> Iterator:
                yield tensor_bytes(_generate(spec, name, shape))

        sources.append(TensorSource(name, dtype_name(torch.bfloat16), shape, produce))
    return sources


def write_synthetic_base(
    out: Path,
    spec: SyntheticSpec,
    *,
    max_shard_bytes: int = 2 << 30,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a synthetic base as an ordinary HF checkpoint directory at `out` (atomically)."""
    out = Path(out)
    if out.exists():
        raise ModelError(f"{out} already exists")
    work = work_dir(out)
    try:
        config = synthetic_configs(spec)
        (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        generation = {
            "bos_token_id": 248044,
            "eos_token_id": [248046, 248044],
            "pad_token_id": 248044,
        }
        (work / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        for item in qwen35_tokenizer_dir().iterdir():
            shutil.copyfile(item, work / item.name)
        marker = {"synthetic": f"synthetic:{spec.slug}", "generator_version": GENERATOR_VERSION}
        marker |= {"note": "random weights at realistic scales; not a trained model"}
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        say = progress or (lambda _: None)
        write_sharded(work, _sources(spec, config), max_shard_bytes, lambda n: say(f"writing {n}"))
        commit_dir(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out
