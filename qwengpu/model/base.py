"""Base checkpoints: resolve `--base` (hub id, local directory, synthetic) and read one.

Both Qwen3.5 layouts are understood: the vision-language checkpoint
(`Qwen3_5ForConditionalGeneration`, language weights under `model.language_model.`, vision
tower under `model.visual.`) and the text-only `Qwen3_5ForCausalLM` (`model.`). Nothing is
loaded eagerly: tensors are located through the safetensors headers and read on demand.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from qwengpu.errors import ModelError
from qwengpu.model.safetensors_io import StoredTensor, load_tensor, read_checkpoint_tensors

SUPPORTED_DTYPES = ("BF16", "F32")
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.tiktoken", "LICENSE*"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")

Progress = Callable[[str], None]


@dataclass
class BaseCheckpoint:
    """A Qwen3.5 HF checkpoint directory, read lazily."""

    directory: Path
    source: str  # what the user asked for
    revision: str | None = None  # hub commit when fetched from the hub
    config: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        path = self.directory / "config.json"
        try:
            self.config = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelError(
                f"{self.directory} is not a Hugging Face checkpoint (no config.json)"
            ) from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"cannot read {path}: {exc}") from None
        model_type = self.config.get("model_type")
        if model_type not in ("qwen3_5", "qwen3_5_text"):
            raise ModelError(
                f"{self.source}: model_type {model_type!r} is not a dense Qwen3.5 checkpoint "
                "(expected qwen3_5 or qwen3_5_text)"
            )
        if self.layout == "vlm" and not isinstance(self.config.get("text_config"), dict):
            raise ModelError(f"{self.source}: a qwen3_5 config without text_config")
        if self.embedding_key not in self.tensors:
            raise ModelError(f"{self.source}: no {self.embedding_key} in the checkpoint")
        if not self.tied and "lm_head.weight" not in self.tensors:
            raise ModelError(f"{self.source}: untied embeddings but no lm_head.weight")
        if self.dtype not in SUPPORTED_DTYPES:
            raise ModelError(
                f"{self.source}: weights are {self.dtype}; qwengpu supports bfloat16 and "
                "float32 checkpoints (float16 cannot hold the circuit's exact values)"
            )
        types = self.text_config.get("layer_types")
        if types is not None and len(types) != self.num_layers:
            raise ModelError(f"{self.source}: layer_types does not match num_hidden_layers")

    @property
    def layout(self) -> str:
        """ "vlm" (image-text checkpoint) or "text" (causal LM only)."""
        return "vlm" if self.config.get("model_type") == "qwen3_5" else "text"

    @property
    def text_config(self) -> dict[str, Any]:
        return self.config["text_config"] if self.layout == "vlm" else self.config

    @property
    def prefix(self) -> str:
        """Where the language model's weights live: 'model.language_model.' or 'model.'."""
        return "model.language_model." if self.layout == "vlm" else "model."

    @property
    def embedding_key(self) -> str:
        return f"{self.prefix}embed_tokens.weight"

    @property
    def tied(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))

    @property
    def num_layers(self) -> int:
        return int(self.text_config["num_hidden_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.text_config["hidden_size"])

    @property
    def layer_types(self) -> list[str]:
        from qwengpu.circuit.geometry import layer_types

        types = self.text_config.get("layer_types")
        interval = int(self.text_config.get("full_attention_interval", 4))
        return list(types) if types else layer_types(self.num_layers, interval)

    @cached_property
    def tensors(self) -> dict[str, StoredTensor]:
        return read_checkpoint_tensors(self.directory)

    @property
    def vocab_rows(self) -> int:
        return self.tensors[self.embedding_key].shape[0]

    @property
    def dtype(self) -> str:
        return self.tensors[self.embedding_key].dtype

    @property
    def storage_dtype(self):
        from qwengpu.model.safetensors_io import torch_dtype

        return torch_dtype(self.dtype)

    def layer_of(self, name: str) -> tuple[int, str] | None:
        """(layer index, key inside the layer) for a language-model layer tensor."""
        head = f"{self.prefix}layers."
        if not name.startswith(head):
            return None
        index, _, rest = name[len(head) :].partition(".")
        return (int(index), rest) if index.isdigit() and rest else None

    @cached_property
    def tokenizer_ids(self) -> list[int]:
        """Every id the base tokenizer has (BPE vocabulary and added tokens), contiguous."""
        path = self.directory / "tokenizer.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            ids = set(data["model"]["vocab"].values())
            ids |= {int(t["id"]) for t in data.get("added_tokens", [])}
        except FileNotFoundError:
            raise ModelError(
                f"{self.source}: no tokenizer.json (a fast tokenizer is required)"
            ) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise ModelError(f"{self.source}: unreadable tokenizer.json") from None
        ordered = sorted(ids)
        if ordered != list(range(len(ordered))):
            raise ModelError(f"{self.source}: the tokenizer's ids are not contiguous from 0")
        if len(ordered) > self.vocab_rows:
            raise ModelError(f"{self.source}: the tokenizer has more ids than embedding rows")
        return ordered

    @property
    def first_free_id(self) -> int:
        """The id the next added token gets (Hugging Face numbers added tokens densely)."""
        return len(self.tokenizer_ids)

    def text_token_ids(self) -> list[int]:
        """Every id the base tokenizer can produce: the rows muting must silence."""
        return list(self.tokenizer_ids)

    def load(self, name: str):
        return load_tensor(self.tensors[name])

    def describe(self) -> str:
        kind = "image-text" if self.layout == "vlm" else "text-only"
        tie = "tied" if self.tied else "untied"
        return (
            f"{self.source}: {kind} Qwen3.5, {self.num_layers} layers, hidden "
            f"{self.hidden_size}, {self.vocab_rows} embedding rows ({tie}), {self.dtype}"
        )


# --- Resolving --base ---------------------------------------------------------------------


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, honouring HF_HUB_CACHE and HF_HOME as set right now."""
    if value := os.environ.get("HF_HUB_CACHE"):
        return Path(value).expanduser()
    if value := os.environ.get("HF_HOME"):
        return Path(value).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    truthy = {"1", "true", "yes", "on"}
    return any(
        os.environ.get(name, "").strip().lower() in truthy
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1000
    raise AssertionError  # pragma: no cover


def hub_download_size(repo_id: str, revision: str | None = None) -> tuple[int, int]:
    """(total bytes of the files a build fetches, bytes of them not yet in the cache)."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi, try_to_load_from_cache

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes one clear message
        raise ModelError(
            f"cannot reach the Hugging Face Hub for {repo_id} ({_first_line(exc)}); offline, "
            f"{OFFLINE_HINT}"
        ) from None
    total = missing = 0
    for sibling in info.siblings or []:
        if not any(fnmatch(sibling.rfilename, p) for p in HUB_PATTERNS):
            continue
        size = sibling.size or 0
        total += size
        cached = try_to_load_from_cache(
            repo_id, sibling.rfilename, cache_dir=hub_cache_dir(), revision=info.sha
        )
        if not isinstance(cached, str):
            missing += size
    return total, missing


OFFLINE_HINT = (
    "run the machine built in memory (--model memory) or build from a random-weight base "
    "of the real geometry (QWENGPU_BASE=synthetic:2b)"
)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def fetch_hub_base(
    repo_id: str, revision: str | None = None, progress: Progress | None = None
) -> BaseCheckpoint:
    """A hub model's snapshot: from the cache if complete, else downloaded (resumable)."""
    from huggingface_hub import snapshot_download

    say = progress or (lambda _: None)
    cache = hub_cache_dir()
    try:
        path = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=HUB_PATTERNS,
            cache_dir=cache,
            local_files_only=True,
        )
        base = BaseCheckpoint(Path(path), repo_id, revision=Path(path).name)
        _ = base.tensors, base.tokenizer_ids  # complete?
        say(f"using the cached {repo_id} in {cache}")
        return base
    except Exception as exc:  # noqa: BLE001 - not (fully) cached: download (resumes)
        missing = str(exc) or type(exc).__name__
    if hub_offline():
        raise ModelError(
            f"{repo_id} is not in the Hugging Face cache ({cache}) and the hub is offline "
            f"(HF_HUB_OFFLINE=1): {missing[:200]}. Go online once, pass a local directory "
            f"as --base, or {OFFLINE_HINT}"
        )
    total, missing = hub_download_size(repo_id, revision)
    say(
        f"downloading {repo_id} from the Hugging Face Hub: {format_bytes(missing)} to fetch "
        f"({format_bytes(total)} in all) into {cache}; an interrupted download resumes"
    )
    try:
        path = snapshot_download(
            repo_id, revision=revision, allow_patterns=HUB_PATTERNS, cache_dir=cache
        )
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"downloading {repo_id} failed: {exc}") from None
    return BaseCheckpoint(Path(path), repo_id, revision=Path(path).name)


def synthetic_base(text: str, progress: Progress | None = None) -> BaseCheckpoint:
    """`synthetic:...`: generated once into qwengpu's cache, then reused."""
    from qwengpu.model.synthetic import SyntheticSpec, write_synthetic_base
    from qwengpu.model.tokenizer import cache_root

    spec = SyntheticSpec.parse(text)
    directory = cache_root() / "bases" / f"synthetic-{spec.slug}"
    if not (directory / "config.json").is_file():
        if progress:
            progress(f"generating the synthetic base {text} into {directory}")
        try:
            write_synthetic_base(directory, spec, progress=progress)
        except ModelError:
            if not (directory / "config.json").is_file():  # not a lost race
                raise
    return BaseCheckpoint(directory, text)


def resolve_base(
    base: str | os.PathLike, revision: str | None = None, progress: Progress | None = None
) -> BaseCheckpoint:
    """--base: `synthetic:NAME[,opts]`, a local HF directory, or a hub id like Qwen/Qwen3.5-2B."""
    text = os.fspath(base)
    if text.startswith("synthetic:"):
        return synthetic_base(text, progress)
    path = Path(text).expanduser()
    if path.is_dir():
        return BaseCheckpoint(path, text)
    if HUB_ID.match(text) and not path.exists():
        return fetch_hub_base(text, revision, progress)
    raise ModelError(
        f"--base {text!r}: not a directory, not a hub id (org/name), not synthetic:NAME"
    )
