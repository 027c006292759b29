"""qgpu build on synthetic:tiny: layout, bit-for-bit base tensors, drift 0, plain loading."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import textwrap
from dataclasses import asdict

import pytest
import torch

from qwengpu.errors import ModelError
from qwengpu.isa.spec import DEFAULT_SPEC
from qwengpu.model.base import resolve_base
from qwengpu.model.manifest import MANIFEST_NAME, verify_checkpoint
from qwengpu.model.passthrough import DEFAULT_TOKENS, PASSTHROUGH_VERSION
from qwengpu.model.safetensors_io import read_checkpoint_tensors

CIRCUIT_TYPES = ["linear_attention"] * 3 + ["full_attention"]


def _sha(stored, begin=0, end=None) -> str:
    digest = hashlib.sha256()
    for chunk in stored.chunks(begin, end):
        digest.update(chunk)
    return digest.hexdigest()


def test_checkpoint_layout(tiny_checkpoint, tiny_base):
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    text = config["text_config"]
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert text["layer_types"] == CIRCUIT_TYPES + tiny_base.layer_types
    assert text["num_hidden_layers"] == 4 + tiny_base.num_layers
    assert text["vocab_size"] == 248320  # 3 circuit tokens fit in the padding rows
    assert "full_attention_interval" not in text
    assert config["tie_word_embeddings"] is True

    manifest = verify_checkpoint(tiny_checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, deep=True)
    assert manifest["machine_spec"] == asdict(DEFAULT_SPEC)
    assert manifest["base"]["source"] == "synthetic:tiny"
    assert manifest["base"]["layout"] == "vlm"
    assert manifest["circuit"]["tokens"] == {t: 248077 + i for i, t in enumerate(DEFAULT_TOKENS)}
    assert manifest["layers"] == {
        "circuit": [0, 4],
        "base": [4, 8],
        "layer_types": text["layer_types"],
    }
    assert manifest["muting"]["worst_gate_bound"] < -1000
    files = {p.name for p in tiny_checkpoint.iterdir()} - {MANIFEST_NAME}
    assert set(manifest["files"]) == files
    assert {"README.md", "generation_config.json", "tokenizer.json", "model.safetensors"} <= files
    assert not any(name.startswith("qwengpu_synthetic") for name in files)

    card = (tiny_checkpoint / "README.md").read_text()
    assert card.startswith("---\nlicense: apache-2.0\n")
    assert "| lanes | 4 |" in card and PASSTHROUGH_VERSION in card
    assert "| 4..7 | synthetic:tiny's own layers 0..3, unchanged |" in card
    assert all(f"`{t}`" in card for t in DEFAULT_TOKENS)
    base_generation = (tiny_base.directory / "generation_config.json").read_text()
    assert (tiny_checkpoint / "generation_config.json").read_text() == base_generation


def test_base_tensors_are_copied_bit_for_bit(tiny_checkpoint, tiny_base):
    merged = read_checkpoint_tensors(tiny_checkpoint)
    k = 4
    for name, stored in tiny_base.tensors.items():
        if located := tiny_base.layer_of(name):
            name = f"{tiny_base.prefix}layers.{located[0] + k}.{located[1]}"
        out = merged[name]
        if name == tiny_base.embedding_key:
            row = stored.nbytes // stored.shape[0]
            assert out.shape == stored.shape
            assert _sha(out, 0, 248077 * row) == _sha(stored, 0, 248077 * row)
            assert _sha(out, 248080 * row) == _sha(stored, 248080 * row)
            circuit_rows = b"".join(out.chunks(248077 * row, 248080 * row))
            values = torch.frombuffer(bytearray(circuit_rows), dtype=torch.bfloat16)
            assert int((values != 0).sum()) == 3  # one small entry per token, off the mute channels
        else:
            assert (out.dtype, out.shape) == (stored.dtype, stored.shape), name
            assert _sha(out) == _sha(stored), name
    circuit = {n for n in merged if tiny_base.layer_of(n) and tiny_base.layer_of(n)[0] < k}
    assert f"{tiny_base.prefix}layers.3.self_attn.q_proj.weight" in circuit
    assert f"{tiny_base.prefix}layers.0.linear_attn.in_proj_z.weight" in circuit
    assert len(merged) == len(tiny_base.tensors) + len(circuit)


def test_text_drift_is_exactly_zero_in_both_dtypes(tiny_checkpoint, capsys):
    from qwengpu.model.cli import add_drift_arguments, drift_cli

    parser = argparse.ArgumentParser()
    add_drift_arguments(parser)
    args = parser.parse_args(["--model", str(tiny_checkpoint), "--json", "--max-tokens", "64"])
    assert drift_cli(args) == 0
    reports = json.loads(capsys.readouterr().out)["reports"]
    assert [r["dtype"] for r in reports] == ["bfloat16", "float32"]
    for r in reports:
        assert r["logits_identical"] and r["max_abs_logit_diff"] == 0
        assert r["kl_mean"] == 0 and r["kl_max"] == 0
        assert r["top1_agreement"] == 1.0 and r["circuit_top1"] == 0
        assert r["tokens"] == 64
        # the passthrough's tokens keep their input rows: the raw figures are measured too
        assert r["kl_full_mean"] > 0 and r["kl_full_max"] >= r["kl_full_mean"]
        assert 0 < r["circuit_mass_mean"] <= r["circuit_mass_max"] < 1
        assert r["circuit_top1_positions"] == []


def test_muting_alone_keeps_text_unchanged(live_text_checkpoint, tmp_path):
    """Random output projections in every circuit layer, untied embeddings, text layout:
    the gates alone keep text bit-identical."""
    from qwengpu.model.drift import measure_drift

    manifest = verify_checkpoint(live_text_checkpoint)
    assert manifest["circuit"]["extra"]["live_outputs"] is True
    assert (manifest["base"]["layout"], manifest["base"]["tied_embeddings"]) == ("text", False)
    merged = read_checkpoint_tensors(live_text_checkpoint)
    assert "lm_head.weight" in merged and "model.layers.0.mlp.down_proj.weight" in merged
    from qwengpu.model.safetensors_io import load_tensor

    assert float(load_tensor(merged["model.layers.0.mlp.down_proj.weight"]).abs().sum()) > 0

    base = resolve_base("synthetic:tiny,text,untied")
    text = tmp_path / "text.txt"
    text.write_text("Numbers: 1, 2, 3, 4. 中文也可以。\nprint('hi')\n" * 2)
    for report in measure_drift(base.directory, live_text_checkpoint, [text.read_text()]):
        assert report.logits_identical, report.line()
        assert report.kl_max == 0 and report.top1_agreement == 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cached_generation_matches_the_base(tiny_checkpoint, tiny_base, dtype):
    """generate() goes through the cache: chunked prefill, then recurrent one-token steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    ids = tokenizer("The dot product of [1, 2, 3] and [4, 5, 6] is", return_tensors="pt")
    outputs = []
    for directory in (tiny_base.directory, tiny_checkpoint):
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=getattr(torch, dtype))
        out = model.generate(
            **ids,
            max_new_tokens=6,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
        outputs.append((out.sequences, torch.stack(out.logits)[..., :248077]))
    assert torch.equal(outputs[0][0], outputs[1][0])
    assert torch.equal(outputs[0][1], outputs[1][1])


FRESH = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    base, merged = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(merged)
    lm = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.bfloat16)
    prompt = tok("Hello there", return_tensors="pt")
    text = tok.decode(lm.generate(**prompt, max_new_tokens=6, do_sample=False)[0])
    ids = torch.tensor([[9419, 11, 248053] + [248056] * 4 + [248054, 1814, 13]])
    image = dict(
        input_ids=ids,
        pixel_values=torch.randn(16, 3 * 2 * 16 * 16, generator=torch.Generator().manual_seed(0)),
        image_grid_thw=torch.tensor([[1, 4, 4]]),
        mm_token_type_ids=(ids == 248056).long(),
    )
    logits = []
    for path in (base, merged):
        vlm = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
        with torch.no_grad():
            logits.append(vlm(**image).logits[..., :248077])
    print(json.dumps({
        "causal_lm": type(lm).__name__,
        "vlm": type(vlm).__name__,
        "layers": lm.config.num_hidden_layers,
        "generated": text,
        "image_finite": bool(torch.isfinite(logits[1]).all()),
        "image_same_as_base": bool(torch.equal(logits[0], logits[1])),
        "circuit_token": tok.convert_tokens_to_ids("<|qgpu:start|>"),
    }))
    """
)


def test_a_fresh_process_loads_it_with_plain_transformers(tiny_checkpoint, tiny_base):
    """No qwengpu import, no trust_remote_code: the causal LM generates, the image-text
    class runs an image through the vision tower."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(tiny_base.directory), str(tiny_checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["causal_lm"] == "Qwen3_5ForCausalLM"
    assert result["vlm"] == "Qwen3_5ForConditionalGeneration"
    assert result["layers"] == 8 and result["generated"].startswith("Hello there")
    assert result["image_finite"] and result["image_same_as_base"]
    assert result["circuit_token"] == 248077


def _scored_tokens(gain: float):
    """The passthrough circuit with output rows of random signs times `gain`: live on text
    positions, as the machine's rows are (they score its code there)."""
    import dataclasses

    from qwengpu.model.passthrough import PassthroughCircuit

    class ScoredTokens(PassthroughCircuit):
        def __call__(self, base):
            layers = super().__call__(base)
            signs = torch.randn(layers.input_rows.shape, generator=torch.Generator().manual_seed(1))
            rows = gain * torch.sign(signs)
            return dataclasses.replace(layers, output_rows=rows, suppress_in_text=True)

    return ScoredTokens()


def test_circuit_tokens_that_win_on_the_calibration_text_refuse_the_build(tiny_base, tmp_path):
    """Rows that outscore the base's text somewhere on the calibration text would make any
    consumer without suppress_tokens stop writing text: refused, with the numbers, and
    nothing written."""
    from qwengpu.model.merge import build_checkpoint

    out = tmp_path / "loud"
    with pytest.raises(ModelError, match=r"a circuit token beats the base's text at \d+ of"):
        build_checkpoint(tiny_base, out, _scored_tokens(64.0))
    assert not out.exists()


def test_circuit_tokens_scored_on_text_are_measured_and_suppressed(tiny_base, tmp_path):
    """Quiet rows pass the calibration (its figures recorded in the manifest and the card),
    and the generation config suppresses every circuit token all the same: plain
    generate() writes the base's text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from qwengpu.model.merge import build_checkpoint

    out = tmp_path / "quiet"
    manifest = build_checkpoint(tiny_base, out, _scored_tokens(2.0**-10)).manifest
    text = manifest["circuit"]["text_margin"]
    assert text["circuit_wins"] == 0 and text["margin_min"] > 0 and text["positions"] > 100
    assert "lose on text" in (out / "README.md").read_text()
    generation = json.loads((out / "generation_config.json").read_text())
    first = tiny_base.first_free_id
    circuit_ids = list(range(first, first + len(DEFAULT_TOKENS)))
    assert generation.get("suppress_tokens", []) == circuit_ids
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    ids = tokenizer("The dot product of [1, 2, 3] and [4, 5, 6] is", return_tensors="pt")
    sequences = []
    for directory in (tiny_base.directory, out):
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
        sequences.append(model.generate(**ids, max_new_tokens=6, do_sample=False)[0])
    assert torch.equal(sequences[0], sequences[1])
