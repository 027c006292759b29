"""Full-size synthetic builds (slow: minutes and several GB each; run with -m slow).

Peak memory of the 2B build is measured by benchmarks/build_memory.py, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

LOAD = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    lm = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
    out = lm.generate(**tok("The answer is", return_tensors="pt"), max_new_tokens=4,
                      do_sample=False)
    print(json.dumps({"layers": lm.config.num_hidden_layers, "tokens": out.shape[-1]}))
    """
)


@pytest.mark.parametrize("geometry", ["0.8b", "2b"])
def test_full_geometry_build(geometry, qwengpu_cache, tmp_path):
    from qwengpu.model.base import resolve_base
    from qwengpu.model.drift import measure_drift
    from qwengpu.model.merge import build_checkpoint

    base = resolve_base(f"synthetic:{geometry}")
    out = tmp_path / "merged"
    result = build_checkpoint(base, out, max_shard_bytes=1 << 30)
    assert result.manifest["layers"]["base"] == [4, 4 + base.num_layers]
    assert len([p for p in out.iterdir() if p.suffix == ".safetensors"]) > 1  # sharded
    assert (out / "model.safetensors.index.json").is_file()

    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(out)], capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["layers"] == 4 + base.num_layers

    reports = measure_drift(base.directory, out, max_tokens=48)
    assert all(r.logits_identical and r.kl_max == 0 for r in reports), [r.line() for r in reports]
