"""Streaming safetensors: read headers and byte ranges, write shards one tensor at a time.

The merge never holds a whole checkpoint in memory: unchanged tensors are copied as raw
bytes (so they stay bit-identical by construction), and new tensors are encoded one at a
time. The format is simple enough (an 8-byte little-endian header length, a JSON header,
then the tensor bytes back to back) that a small writer beats buffering a shard for
`safetensors.torch.save_file`.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from qwengpu.errors import CheckpointError, ModelError

ITEM_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2}
ITEM_SIZE |= {"I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
COPY_CHUNK = 64 << 20
MAX_HEADER = 100 << 20


@dataclass(frozen=True)
class StoredTensor:
    """Where one tensor's bytes live in a safetensors file."""

    name: str
    file: Path
    dtype: str  # safetensors dtype string: "BF16", "F32", ...
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the data in `file`
    nbytes: int

    def chunks(self, begin: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The data bytes [begin, end) (relative to the tensor), in bounded chunks."""
        end = self.nbytes if end is None else end
        with self.file.open("rb") as f:
            f.seek(self.start + begin)
            left = end - begin
            while left:
                data = f.read(min(COPY_CHUNK, left))
                if not data:
                    raise ModelError(f"{self.file}: truncated while reading {self.name}")
                left -= len(data)
                yield data


def read_header(path: Path) -> tuple[dict[str, StoredTensor], dict[str, str]]:
    """The tensors of one safetensors file and its __metadata__, without loading data."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER:
                raise CheckpointError(f"{path}: not a safetensors file (header of {length} B)")
            header_bytes = f.read(length)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror}") from None
    try:
        header = json.loads(header_bytes)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: corrupt safetensors header") from None
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = StoredTensor(
            name, path, info["dtype"], tuple(info["shape"]), base + begin, end - begin
        )
    return tensors, metadata


@dataclass(frozen=True)
class TensorSource:
    """One tensor to write: its header entry and a producer of its bytes, in order."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    produce: Callable[[], Iterable[bytes | memoryview]]

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * ITEM_SIZE[self.dtype]


def write_safetensors(
    path: Path,
    tensors: Sequence[TensorSource],
    metadata: dict[str, str] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    tensor_hashes: dict[str, str] | None = None,
) -> str:
    """Write one safetensors file tensor by tensor; returns its sha256. `on_bytes` hears
    the size of every chunk of tensor data written (a progress bar); `tensor_hashes`, when
    given, gets each tensor's own sha256 (so a damaged file can name its tensor)."""
    header: dict[str, object] = {}
    offset = 0
    for t in tensors:
        header[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    digest = hashlib.sha256()
    with path.open("wb") as f:
        for piece in (struct.pack("<Q", len(blob)), blob):
            f.write(piece)
            digest.update(piece)
        for t in tensors:
            written = 0
            own = hashlib.sha256()
            for chunk in t.produce():
                f.write(chunk)
                digest.update(chunk)
                own.update(chunk)
                written += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
            if written != t.nbytes:
                raise ModelError(f"{t.name}: produced {written} bytes, expected {t.nbytes}")
            if tensor_hashes is not None:
                tensor_hashes[t.name] = own.hexdigest()
    return digest.hexdigest()


def plan_shards(tensors: Sequence[TensorSource], max_shard_bytes: int) -> list[list[TensorSource]]:
    """Split tensors, in order, into shards of at most max_shard_bytes (one big tensor alone)."""
    shards: list[list[TensorSource]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def shard_names(count: int) -> list[str]:
    """Hugging Face's names: one `model.safetensors`, or `model-0000i-of-0000n.safetensors`."""
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def write_sharded(
    directory: Path,
    tensors: Sequence[TensorSource],
    max_shard_bytes: int,
    on_shard: Callable[[str], None] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    tensor_hashes: dict[str, str] | None = None,
) -> dict[str, str]:
    """Write tensors as HF shards (+ index when several); returns {file name: sha256}
    (`tensor_hashes`: as for write_safetensors)."""
    shards = plan_shards(tensors, max_shard_bytes)
    names = shard_names(len(shards))
    hashes = {}
    for name, shard in zip(names, shards, strict=True):
        if on_shard:
            on_shard(name)
        hashes[name] = write_safetensors(
            directory / name, shard, on_bytes=on_bytes, tensor_hashes=tensor_hashes
        )
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in tensors)},
            "weight_map": {
                t.name: name for name, shard in zip(names, shards, strict=True) for t in shard
            },
        }
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return hashes


def read_checkpoint_tensors(directory: Path) -> dict[str, StoredTensor]:
    """Every tensor of an HF checkpoint directory (single file or sharded with an index)."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, OSError):
            raise CheckpointError(f"{index}: unreadable safetensors index") from None
        files = sorted(set(weight_map.values()))
    elif (directory / "model.safetensors").is_file():
        weight_map, files = None, ["model.safetensors"]
    else:
        raise ModelError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    tensors: dict[str, StoredTensor] = {}
    for name in files:
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{directory}: shard {name} is missing")
        found, _ = read_header(path)
        tensors.update(found)
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise CheckpointError(f"{directory}: index lists tensors no shard holds: {missing[:3]}")
    return tensors


TORCH_DTYPES = {"BF16": "bfloat16", "F32": "float32", "F16": "float16", "F64": "float64"}


def dtype_name(dtype) -> str:
    """torch dtype -> safetensors dtype string."""
    import torch

    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16"}
    names |= {torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
    if dtype not in names:
        raise ModelError(f"unsupported tensor dtype {dtype}")
    return names[dtype]


def torch_dtype(name: str):
    """safetensors dtype string -> torch dtype."""
    import torch

    if name not in TORCH_DTYPES:
        raise ModelError(f"unsupported safetensors dtype {name}")
    return getattr(torch, TORCH_DTYPES[name])


def tensor_bytes(tensor) -> memoryview:
    """The raw little-endian bytes of a CPU tensor, row-major (what safetensors stores)."""
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def load_tensor(stored: StoredTensor):
    """Materialise one stored tensor (a copy; used for small tensors and embeddings)."""
    import torch

    data = bytearray(stored.nbytes)
    view = memoryview(data)
    pos = 0
    for chunk in stored.chunks():
        view[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    flat = torch.frombuffer(data, dtype=torch_dtype(stored.dtype)) if data else None
    if flat is None:
        return torch.empty(stored.shape, dtype=torch_dtype(stored.dtype))
    return flat.reshape(stored.shape)
