"""`qgpu build`: merge the compiled circuit in front of a Qwen3.5 base, as a standard HF checkpoint.

The merged checkpoint is the base with K circuit decoder layers inserted before its own
(base layer j becomes layer K + j), the circuit tokens appended after the base's embedding
rows (so every base logit keeps its index), a config with the full `layer_types`, the
tokenizer with the circuit tokens, a model card and a manifest. Base tensors are copied
byte for byte; the circuit is checked (shapes, exact in the storage dtype, muted on every
text row in bf16 and fp32) layer by layer while the shards stream out. Everything is
written to a temporary directory beside DIR and renamed at the end: an interrupted or
failed build leaves nothing behind.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwengpu.errors import CheckpointError, ModelError
from qwengpu.model.atomic import commit_dir, terminate_as_interrupt, work_dir
from qwengpu.model.base import BaseCheckpoint, Progress, resolve_base
from qwengpu.model.calibration import calibration_text, check_text_margin, measure_text_margin
from qwengpu.model.circuit_layers import BaseInfo, CircuitCompiler, CircuitLayers
from qwengpu.model.manifest import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    file_entries,
    read_manifest,
    remember_verified,
    spec_dict,
)
from qwengpu.model.muting import MutingVerifier
from qwengpu.model.safetensors_io import (
    TensorSource,
    tensor_bytes,
    write_sharded,
)
from qwengpu.model.tokenizer import add_circuit_tokens, check_tokenizer, copy_tokenizer_files

DEFAULT_SHARD_BYTES = 2 << 30
AUX_SUFFIXES = (".json", ".jinja", ".txt")
NOT_COPIED = {
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "README.md",
    MANIFEST_NAME,
    "qwengpu_synthetic.json",
}


@dataclass(frozen=True)
class BuildResult:
    path: Path
    manifest: dict[str, Any]
    seconds: float


def build_checkpoint(
    base: str | os.PathLike | BaseCheckpoint,
    out: str | os.PathLike,
    compiler: CircuitCompiler | None = None,
    *,
    revision: str | None = None,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    progress: Progress | None = None,
    calibration: str | os.PathLike | None = None,
) -> BuildResult:
    """Build the merged checkpoint DIR = `out` from `base` and `compiler`'s circuit; a
    circuit whose output rows are live on text is measured on the calibration text
    (`calibration`, else the shipped sample: model.calibration)."""
    import torch

    from qwengpu.model.passthrough import PassthroughCircuit

    say = progress or (lambda _: None)
    started = time.monotonic()
    out = Path(out).expanduser().absolute()
    _check_target(out, overwrite)
    text = calibration_text(calibration)  # read before any work: a bad path fails at once
    if not isinstance(base, BaseCheckpoint):
        base = resolve_base(base, revision, say)
    say(f"base: {base.describe()}")
    compiler = compiler or PassthroughCircuit()

    info = _base_info(base)
    say(f"compiling the circuit ({compiler.compiler_version}) for {info.hidden_size} channels")
    circuit = compiler(info)
    circuit.validate(base.hidden_size)
    dtype = base.storage_dtype
    input_rows = _exact(circuit.input_rows, dtype, "circuit input_rows")
    output_rows = (
        None
        if circuit.output_rows is None
        else _exact(circuit.output_rows, dtype, "circuit output_rows")
    )
    mute = circuit.mute_direction.to(torch.float32)
    on_mute = input_rows[:, mute != 0]
    if on_mute.numel() and bool((on_mute != 0).any()):
        raise ModelError(
            "circuit tokens must be exactly 0 on the mute direction's channels, or the "
            "circuit would silence itself on its own tokens"
        )
    untie = base.tied and output_rows is not None and not torch.equal(output_rows, input_rows)
    verifier = MutingVerifier(info.text_embeddings, mute, base.text_config)
    say(
        f"circuit: {len(circuit.layers)} layers, {len(circuit.token_strings)} tokens; text "
        f"rows sit {min(verifier.report.direction_margin.values()):.3f} below the mute "
        "direction"
    )

    exit_facts = None
    if circuit.exit_bound is not None:  # proven before anything is written
        exit_facts = _exit_facts(base, info, circuit, output_rows)
        say(f"early exit: {exit_facts['margin']:.0f}x margin over every other LM-head row")
    text_facts = None
    if output_rows is not None:  # the circuit's own rows are live on text: measure them
        say("measuring the circuit rows on the calibration text")
        margin = measure_text_margin(base.directory, output_rows, base.first_free_id, text, dtype)
        check_text_margin(margin, say)
        text_facts = margin.record()
    with terminate_as_interrupt():  # SIGTERM cleans up as Ctrl-C does
        work = work_dir(out)
        try:
            sources = _tensor_sources(base, circuit, input_rows, output_rows, untie, verifier)
            with _byte_bar(sum(t.nbytes for t in sources), enabled=progress is not None) as bar:
                tensor_hashes: dict[str, str] = {}
                hashes = write_sharded(
                    work,
                    sources,
                    max_shard_bytes,
                    lambda name: say(f"writing {name}"),
                    bar.update,
                    tensor_hashes,
                )
            config = merged_config(base, circuit, untie)
            (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            _write_aux(base, work, circuit)
            manifest = _manifest(base, circuit, untie, verifier, config)
            if exit_facts is not None:
                manifest["circuit"]["early_exit"] = exit_facts
            if text_facts is not None:
                manifest["circuit"]["text_margin"] = text_facts
            from qwengpu.model.card import model_card

            (work / "README.md").write_text(model_card(manifest))
            manifest["files"] = file_entries(work, hashes)
            manifest["tensors"] = tensor_hashes  # a damaged shard names its tensor
            (work / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
            commit_dir(work, out)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    remember_verified(out, manifest)  # hashed as written: the first load need not again
    seconds = time.monotonic() - started
    say(f"built {out} in {seconds:.1f} s")
    return BuildResult(out, manifest, seconds)


def _byte_bar(total: int, enabled: bool) -> Any:
    """A progress bar over the checkpoint's bytes, on stderr when it is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        desc="qgpu: writing the checkpoint",
        disable=None if enabled else True,  # None: off when stderr is not a terminal
        leave=False,
    )


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse, before any work, a target that cannot be written or would clobber something."""
    place = out.parent
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        raise CheckpointError(f"cannot create {out}: {place} is not a directory")
    if not os.access(place, os.W_OK | os.X_OK):
        raise CheckpointError(f"cannot create {out}: {place} is not writable")
    if not out.exists():
        return
    if not overwrite:
        raise CheckpointError(f"{out} already exists (pass --overwrite to replace it)")
    if out.is_dir() and not any(out.iterdir()):
        return
    try:
        read_manifest(out)
    except CheckpointError:
        raise CheckpointError(
            f"{out} exists and is not a qwengpu checkpoint: refusing to replace it"
        ) from None


def _base_info(base: BaseCheckpoint) -> BaseInfo:
    import torch

    ids = base.text_token_ids()
    embed = base.load(base.embedding_key)
    if ids == list(range(len(ids))):
        rows = embed[: len(ids)]
    else:
        rows = embed[torch.tensor(ids)]
    norm_key = f"{base.prefix}norm.weight"
    head = embed if base.tied else base.load("lm_head.weight")
    return BaseInfo(
        source=base.source,
        text_config=copy.deepcopy(base.text_config),
        storage_dtype=base.storage_dtype,
        vocab_rows=base.vocab_rows,
        first_circuit_id=base.first_free_id,
        tied_embeddings=base.tied,
        text_token_ids=torch.tensor(ids),
        text_embeddings=rows,
        final_norm_weight=base.load(norm_key) if norm_key in base.tensors else None,
        head_rows=head,
    )


def _exit_facts(
    base: BaseCheckpoint, info: BaseInfo, circuit: CircuitLayers, output_rows
) -> dict[str, Any]:
    """The circuit's early-exit proof over the merged LM head's rows that are not circuit
    tokens': the base head's before and after them."""
    if output_rows is None:
        raise ModelError("a circuit with an early-exit bound must give its output rows")
    head = info.head_rows
    end = base.first_free_id + output_rows.shape[0]
    others = (head[: base.first_free_id], head[end:])
    return circuit.exit_bound(others, output_rows, info.final_norm_weight)


def _exact(value, dtype, what: str):
    """`value` in the checkpoint dtype, refusing anything that would change on the way."""
    import torch

    tensor = torch.as_tensor(value)
    if not tensor.is_floating_point():
        raise ModelError(f"{what}: expected a floating-point tensor, got {tensor.dtype}")
    if not bool(torch.isfinite(tensor).all()):
        raise ModelError(f"{what}: has non-finite values")
    stored = tensor.to(dtype)
    if not torch.equal(stored.to(tensor.dtype), tensor):
        raise ModelError(
            f"{what}: not exactly representable in {dtype} (the checkpoint's dtype); the "
            "circuit's values must survive storage bit for bit"
        )
    return stored


def expected_layer_shapes(text_config: Mapping[str, Any], layer_type: str) -> dict:
    """The state-dict shapes of one Qwen3_5DecoderLayer of `layer_type` (built on meta)."""
    import torch
    from transformers.models.qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer

    fields = dict(text_config, num_hidden_layers=1, layer_types=[layer_type])
    config = Qwen3_5TextConfig.from_dict(fields)
    with torch.device("meta"):
        layer = Qwen3_5DecoderLayer(config, 0)
    return {name: tuple(t.shape) for name, t in layer.state_dict().items()}


class _LayerCache:
    """Materialises, checks and holds one circuit layer at a time while it streams out."""

    def __init__(self, circuit: CircuitLayers, base: BaseCheckpoint, verifier: MutingVerifier):
        self.circuit, self.base, self.verifier = circuit, base, verifier
        self.index, self.weights = -1, {}

    def tensor(self, index: int, key: str):
        if index != self.index:
            self.weights = {}
            layer = self.circuit.layers[index]
            given = layer.materialize()
            shapes = expected_layer_shapes(self.base.text_config, layer.layer_type)
            missing, extra = sorted(set(shapes) - set(given)), sorted(set(given) - set(shapes))
            if missing or extra:
                raise ModelError(
                    f"circuit layer {index} ({layer.layer_type}): missing {missing[:4]}, "
                    f"unexpected {extra[:4]}"
                )
            weights = {}
            for name, shape in shapes.items():
                value = _exact(given[name], self.base.storage_dtype, f"layer {index} {name}")
                if tuple(value.shape) != shape:
                    raise ModelError(
                        f"circuit layer {index}: {name} has shape {tuple(value.shape)}, "
                        f"expected {shape}"
                    )
                weights[name] = value
            self.verifier.check_layer(index, layer.layer_type, weights)
            self.index, self.weights = index, weights
        return self.weights[key]


def _tensor_sources(
    base: BaseCheckpoint,
    circuit: CircuitLayers,
    input_rows,
    output_rows,
    untie: bool,
    verifier: MutingVerifier,
) -> list[TensorSource]:
    dtype = base.dtype
    k = len(circuit.layers)
    added = input_rows.shape[0]
    cache = _LayerCache(circuit, base, verifier)
    sources: list[TensorSource] = []

    # Circuit layers first: they are checked as they stream, so a bad circuit fails early.
    for index, layer in enumerate(circuit.layers):
        for key, shape in expected_layer_shapes(base.text_config, layer.layer_type).items():

            def produce(index=index, key=key) -> Iterator:
                yield tensor_bytes(cache.tensor(index, key))

            name = f"{base.prefix}layers.{index}.{key}"
            sources.append(TensorSource(name, dtype, shape, produce))

    first, rows_after = base.first_free_id, merged_vocab_rows(base, circuit)

    def extended(stored, rows) -> TensorSource:
        """`stored` with rows [first, first + n) replaced (padding) or appended."""
        row_bytes = stored.nbytes // stored.shape[0]
        keep_after = max(0, stored.shape[0] - (first + added))

        def produce() -> Iterator:
            yield from stored.chunks(0, first * row_bytes)
            yield tensor_bytes(rows)
            if keep_after:
                yield from stored.chunks((first + added) * row_bytes)

        return TensorSource(stored.name, stored.dtype, (rows_after, *stored.shape[1:]), produce)

    head_rows = output_rows if output_rows is not None else input_rows
    ordered = sorted(base.tensors.values(), key=lambda t: (t.file.name, t.start))
    for stored in ordered:
        if stored.name == base.embedding_key:
            sources.append(extended(stored, input_rows))
            continue
        if stored.name == "lm_head.weight":
            sources.append(extended(stored, head_rows))
            continue
        name = stored.name
        if located := base.layer_of(name):
            name = f"{base.prefix}layers.{located[0] + k}.{located[1]}"

        def copy_bytes(stored=stored) -> Iterator:
            return stored.chunks()

        sources.append(TensorSource(name, stored.dtype, stored.shape, copy_bytes))
    if untie and "lm_head.weight" not in base.tensors:
        embed = base.tensors[base.embedding_key]
        sources.append(_renamed(extended(embed, head_rows), "lm_head.weight"))
    return sources


def _renamed(source: TensorSource, name: str) -> TensorSource:
    return TensorSource(name, source.dtype, source.shape, source.produce)


def merged_vocab_rows(base: BaseCheckpoint, circuit: CircuitLayers) -> int:
    """Embedding rows after the merge: padding rows are reused, then rows are added."""
    return max(base.vocab_rows, base.first_free_id + len(circuit.token_strings))


def merged_config(base: BaseCheckpoint, circuit: CircuitLayers, untie: bool) -> dict:
    """The base's config.json with the circuit layers and tokens added."""
    config = copy.deepcopy(base.config)
    text = config["text_config"] if base.layout == "vlm" else config
    text["num_hidden_layers"] = len(circuit.layers) + base.num_layers
    text["layer_types"] = circuit.layer_types + base.layer_types
    text.pop("full_attention_interval", None)  # layer_types is now the only truth
    text["vocab_size"] = merged_vocab_rows(base, circuit)
    if untie:
        config["tie_word_embeddings"] = False
        if "tie_word_embeddings" in text:
            text["tie_word_embeddings"] = False
    return config


def _write_aux(base: BaseCheckpoint, work: Path, circuit: CircuitLayers) -> None:
    """Tokenizer (+ circuit tokens), generation config, processor files of the base."""
    copied = set(copy_tokenizer_files(base.directory, work))
    for path in sorted(base.directory.iterdir()):
        name = path.name
        if name in NOT_COPIED or name in copied or not path.is_file():
            continue
        if name.endswith(AUX_SUFFIXES) or name.startswith("LICENSE"):
            shutil.copyfile(path, work / name)
    if not (work / "tokenizer.json").is_file():
        raise ModelError(f"{base.source}: no tokenizer.json to add the circuit tokens to")
    first = base.first_free_id
    check_tokenizer(work, add_circuit_tokens(work, circuit.token_strings, first))
    generation = base.directory / "generation_config.json"
    if not circuit.suppress_in_text and generation.is_file():
        shutil.copyfile(generation, work / "generation_config.json")
        return
    if generation.is_file():
        config = json.loads(generation.read_text())
    else:
        text = base.text_config
        config = {key: text.get(key) for key in ("eos_token_id", "pad_token_id")}
    if circuit.suppress_in_text:
        # plain generate() must never pick a circuit token; launches take their own argmax
        config["suppress_tokens"] = list(range(first, first + len(circuit.token_strings)))
    (work / "generation_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _manifest(base, circuit, untie, verifier, config) -> dict[str, Any]:
    from importlib.metadata import version

    import torch

    k = len(circuit.layers)
    vector = circuit.mute_direction.to(torch.float32).contiguous().numpy().tobytes()
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "qwengpu_version": version("qwengpu"),
        "transformers_version": version("transformers"),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine_spec": spec_dict(circuit.spec),
        "compiler_version": circuit.compiler_version,
        "base": {
            "source": base.source,
            "revision": base.revision,
            "layout": base.layout,
            "architecture": (base.config.get("architectures") or ["?"])[0],
            "num_layers": base.num_layers,
            "hidden_size": base.hidden_size,
            "vocab_rows": base.vocab_rows,
            "tokenizer_size": base.first_free_id,
            "tied_embeddings": base.tied,
            "dtype": base.dtype,
        },
        "circuit": {
            "num_layers": k,
            "layer_types": circuit.layer_types,
            "layer_map": list(circuit.layer_map),
            "tokens": {t: base.first_free_id + i for i, t in enumerate(circuit.token_strings)},
            "vocab_rows": merged_vocab_rows(base, circuit),
            "embeddings_untied_by_build": untie,
            "extra": _jsonable(dict(circuit.extra)),
        },
        "layers": {
            "circuit": [0, k],
            "base": [k, k + base.num_layers],
            "layer_types": config.get("text_config", config)["layer_types"],
        },
        "muting": verifier.report.summary()
        | {"mute_direction_sha256": hashlib.sha256(vector).hexdigest()},
    }
