"""The machine merged into a full-size synthetic base by `qgpu build`, then used the way a
user would: plain transformers in a fresh process, `qgpu run --model DIR`, `qgpu drift`.

Both machines: the full one on the synthetic 2B base, the reduced preset on the synthetic
0.8B base. Slow (run with -m slow): the 2B build takes about 3 minutes and 9 GB of disk on
2 CPU cores, the 0.8B one about a minute, each launch a minute or two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOT_ARGS = ["--arg", "int32:[1,2,3]", "--arg", "int32:[4,5,6]", "--arg", "int32:[0]"]


@pytest.fixture(scope="module", params=["2b", "0.8b"])
def machine_checkpoint(request, qwengpu_cache, tmp_path_factory):
    """(geometry, checkpoint directory, manifest); one build alive at a time."""
    import shutil

    from qwengpu.model.machine_circuit import MachineCircuitCompiler
    from qwengpu.model.merge import build_checkpoint

    out = tmp_path_factory.mktemp(f"machine-{request.param}") / "merged"
    result = build_checkpoint(f"synthetic:{request.param}", out, MachineCircuitCompiler())
    yield request.param, out, result.manifest
    shutil.rmtree(out, ignore_errors=True)  # 9 GB for 2B: free the disk for the next


FLOAT32_2B_GIB = 26  # 21.6 GB measured with the 32-layer stack, plus 12 circuit layers


def _memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _qgpu(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    """`qgpu ARGS` in a fresh process (nothing of this test's imports carries over)."""
    command = [sys.executable, "-m", "qwengpu.cli.main", *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def test_the_manifest_describes_the_machine(machine_checkpoint):
    from qwengpu.circuit import GEOMETRIES
    from qwengpu.machine.model import machine_spec_for, single_stage
    from qwengpu.model.manifest import spec_from_dict

    geometry, _, manifest = machine_checkpoint
    circuit = manifest["circuit"]
    preset = machine_spec_for(GEOMETRIES[f"qwen3.5-{geometry}"])
    built = spec_from_dict(manifest["machine_spec"])
    # the synthetic 0.8B base's text rows cannot be muted on the 52 dims the 2-stage
    # machine leaves there: the build falls back to one instruction per pass
    assert built == (single_stage(preset) if geometry == "0.8b" else preset)
    assert preset.lanes == (2 if geometry == "0.8b" else 4)
    assert circuit["extra"]["circuit"] == "machine"
    assert circuit["extra"]["geometry"]["name"] == f"qwen3.5-{geometry}"
    assert circuit["num_layers"] <= 45 and len(circuit["layer_map"]) == circuit["num_layers"]
    assert manifest["muting"]["worst_gate_bound"] <= -128
    assert circuit["embeddings_untied_by_build"]  # output rows score the circuit's code
    # early exit proven at build, both sides recorded (machine/exit_bound.py)
    from qwengpu.machine.exit_bound import EXIT_MARGIN

    bound = circuit["early_exit"]
    assert bound["margin"] >= EXIT_MARGIN
    assert bound["circuit_logit_min"] >= EXIT_MARGIN * bound["other_logit_max"]


@pytest.mark.parametrize(("dtype", "feed"), [("bfloat16", "tokens"), ("float32", "prefill")])
def test_dot_product_through_the_built_checkpoint(machine_checkpoint, dtype, feed):
    geometry, path, _ = machine_checkpoint
    if geometry == "2b" and dtype == "float32" and _memory_gib() < FLOAT32_2B_GIB:
        pytest.skip(
            f"the 2B checkpoint in float32 takes about {FLOAT32_2B_GIB} GiB (44 circuit and "
            f"24 base layers, a 310k-row lm_head); this machine has {_memory_gib():.0f}"
        )
    done = _qgpu(
        "run", "examples/dot.cu", "--backend", "model", "--model", str(path), "--dtype", dtype,
        "--feed", feed, "--check", *DOT_ARGS, "--arg", "int32:3", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["args"][2] == [32] and result["checked"] and result["tokens"] > 0
    assert result["feed"] == feed and result["forward"] == "early exit"


def test_early_exit_writes_the_full_forwards_tokens_on_the_checkpoint(machine_checkpoint):
    """The checkpoint loaded as `--model DIR` loads it (its bound recomputed and checked
    against the manifest), then the dot product and collatz with early exit and through
    all of the base's layers and its whole LM head: the same tokens, the same results."""
    import numpy as np

    from qwengpu import api
    from qwengpu.host.model_backend import checkpoint_backend

    _, path, _ = machine_checkpoint
    backend = checkpoint_backend(path, dtype="bfloat16")
    program = api.compile((REPO / "examples" / "dot.cu").read_text(), spec=backend.machine.spec)
    runs = {}
    for full in (False, True):
        args = [np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32)]
        args += [np.zeros(1, np.int32), np.int32(3)]
        runs[full] = backend.launch(program, 1, 4, args, full_forward=full)
        assert int(args[2][0]) == 32
    assert runs[False].generated == runs[True].generated
    assert [r.forward for r in runs.values()] == ["early exit", "full forward"]


def test_launches_load_the_circuits_layers_only(machine_checkpoint):
    """`qgpu run` and `qgpu calc` load a checkpoint without its base layers (early exit
    runs none of them): the dot product is exact and replays, the full forward is refused
    in one line, and a later request for every layer loads them."""
    import numpy as np

    from qwengpu import api
    from qwengpu.errors import LaunchError
    from qwengpu.host.model_backend import model_backend

    _, path, manifest = machine_checkpoint
    backend = model_backend(str(path), dtype="bfloat16", circuit_only=True)
    circuits = len(manifest["circuit"]["layer_types"])
    assert backend.circuit_only and backend.model.config.num_hidden_layers == circuits
    assert len(backend.model.model.layers) == circuits
    program = api.compile((REPO / "examples" / "dot.cu").read_text(), spec=backend.machine.spec)
    args = [np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32)]
    args += [np.zeros(1, np.int32), np.int32(3)]
    result = api.launch(program, 1, 4, args, backend="model", model=backend, check=True)
    assert int(args[2][0]) == 32 and result.checked
    with pytest.raises(LaunchError, match="circuit's layers only"):
        backend.launch(program, 1, 4, args, full_forward=True)
    full = model_backend(str(path), dtype="bfloat16")
    assert not full.circuit_only and len(full.model.model.layers) > circuits


def test_a_changed_head_is_refused_at_load(machine_checkpoint, tmp_path):
    """A manifest whose early-exit figures the loaded weights do not reproduce (a head or
    final norm changed after the build): refused, never run with an unproven exit."""
    import shutil

    from qwengpu.errors import CheckpointError
    from qwengpu.host.model_backend import checkpoint_backend
    from qwengpu.model.manifest import MANIFEST_NAME

    geometry, path, _ = machine_checkpoint
    if geometry != "0.8b":
        pytest.skip("one geometry suffices: the check is the same")
    copy = tmp_path / "changed"
    shutil.copytree(path, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["circuit"]["early_exit"]["circuit_logit_min"] *= 2
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="LM head or final norm differ from the build"):
        checkpoint_backend(copy, dtype="bfloat16")


def test_text_is_unchanged(machine_checkpoint):
    from qwengpu.model.base import resolve_base
    from qwengpu.model.drift import measure_drift

    geometry, path, manifest = machine_checkpoint
    base = resolve_base(f"synthetic:{geometry}").directory
    reports = measure_drift(base, path, max_tokens=48)
    assert all(r.logits_identical and r.kl_max == 0 for r in reports), [r.line() for r in reports]
    # the circuit tokens' rows score on text too, but generate() never sees them
    assert all(r.suppressed == len(manifest["circuit"]["tokens"]) for r in reports)
    assert all(r.top1_agreement >= 0.9 for r in reports), [r.line() for r in reports]
    # and without suppression no circuit token wins: the text side of docs/model.md's
    # "Two margins", measured by the build on its calibration text and here on another
    assert all(r.circuit_top1 == 0 for r in reports), [r.line() for r in reports]
    text = manifest["circuit"]["text_margin"]
    assert text["circuit_wins"] == 0 and text["margin_min"] > 0


LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
lm = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
out = lm.generate(**tok("The answer is", return_tensors="pt"), max_new_tokens=6, do_sample=False)
print(json.dumps({"ids": out[0].tolist(), "vocab": len(tok)}))
"""


def test_plain_generation_writes_text(machine_checkpoint):
    _, path, manifest = machine_checkpoint
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    circuit_ids = set(manifest["circuit"]["tokens"].values())
    assert len(result["ids"]) > 4 and not circuit_ids & set(result["ids"])


def test_calc_and_chat_on_the_built_checkpoint(machine_checkpoint):
    """`qgpu calc ... --model DIR --check` prints the model's 32; `qgpu chat --prompt`
    completes a turn with the checkpoint's own tokenizer and template (random weights: the
    text is whatever they write); `qgpu eval-chat` runs end to end and reports a score."""
    geometry, path, _ = machine_checkpoint
    if geometry == "2b" and _memory_gib() < FLOAT32_2B_GIB:
        pytest.skip(f"the 2B checkpoint in float32 takes about {FLOAT32_2B_GIB} GiB")
    done = _qgpu("calc", "[1,2,3] @ [4,5,6]", "--model", str(path), "--check", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["value"] == 32 and result["checked"] and result["tokens"] > 0
    done = _qgpu("chat", "--model", str(path), "--prompt", "What is 6 times 7?",
                 "--max-new-tokens", "8")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    done = _qgpu("eval-chat", "--model", str(path), "--set", "normal", "--limit", "2",
                 "--max-new-tokens", "8")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "normal: " in done.stdout and " of 2 passed" in done.stdout
