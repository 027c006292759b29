"""A build that fails, is interrupted or is given a bad circuit leaves nothing behind."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
import torch

from qwengpu.errors import CheckpointError, ModelError
from qwengpu.model.circuit_layers import CircuitLayer, CircuitLayers
from qwengpu.model.merge import build_checkpoint
from qwengpu.model.passthrough import PassthroughCircuit


@dataclasses.dataclass
class Tweaked:
    """A passthrough circuit changed by `tweak` (a CircuitCompiler)."""

    tweak: Callable[[CircuitLayers], CircuitLayers]
    inner: PassthroughCircuit = dataclasses.field(default_factory=PassthroughCircuit)

    @property
    def spec(self):
        return self.inner.spec

    @property
    def compiler_version(self):
        return self.inner.compiler_version

    def __call__(self, base):
        return self.tweak(self.inner(base))


def _tweak_layer(index: int, change: Callable[[dict], None]):
    def tweak(circuit: CircuitLayers) -> CircuitLayers:
        layers = list(circuit.layers)
        original = layers[index]

        def weights():
            values = dict(original.materialize())
            change(values)
            return values

        layers[index] = CircuitLayer(original.layer_type, weights)
        return dataclasses.replace(circuit, layers=layers)

    return tweak


def _assert_nothing_left(parent):
    assert list(parent.iterdir()) == [], "a failed build must leave nothing behind"


def test_an_unmuted_circuit_is_refused_and_nothing_is_left(tiny_base, tmp_path):
    def unmute(weights):
        weights["mlp.gate_proj.weight"] = weights["mlp.gate_proj.weight"].clone()
        weights["mlp.gate_proj.weight"][0] = 0.0

    out = tmp_path / "merged"
    with pytest.raises(ModelError, match=r"circuit layer 1 .*mlp.gate_proj is not muted"):
        build_checkpoint(tiny_base, out, Tweaked(_tweak_layer(1, unmute)))
    _assert_nothing_left(tmp_path)


def test_an_interrupted_build_leaves_nothing(tiny_base, tmp_path):
    def interrupt(weights):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_checkpoint(tiny_base, tmp_path / "merged", Tweaked(_tweak_layer(2, interrupt)))
    _assert_nothing_left(tmp_path)


def test_an_unwritable_target_is_refused_before_any_work(tiny_base, tmp_path, monkeypatch):
    """--out under a file, or in a directory this user cannot write: refused at once, not
    after the whole build."""
    import os

    import qwengpu.model.merge as merge

    compiled = []
    monkeypatch.setattr(merge, "_base_info", lambda base: compiled.append(base))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CheckpointError, match=r"cannot create .* is not a directory"):
        build_checkpoint(tiny_base, blocker / "sub" / "merged")
    real_access = os.access

    def access(path, mode):  # root may write anywhere: this user may not write tmp_path
        return path != tmp_path and real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(CheckpointError, match=rf"cannot create .*: {tmp_path} is not writable"):
        build_checkpoint(tiny_base, tmp_path / "merged")
    assert not compiled  # nothing was compiled


def test_a_terminated_build_leaves_nothing(tiny_base, tmp_path):
    """SIGTERM (a job scheduler, `kill`) mid-write cleans up as Ctrl-C does."""
    import os
    import signal

    def terminate(weights):
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        build_checkpoint(tiny_base, tmp_path / "merged", Tweaked(_tweak_layer(2, terminate)))
    _assert_nothing_left(tmp_path)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_a_dead_builds_directory_is_removed_by_the_next_build(tmp_path):
    """A build killed outright (SIGKILL, power) leaves its temporary sibling: the next
    build into the same place removes it when its builder's process is gone, never a live
    one's."""
    import socket
    import subprocess
    import sys

    from qwengpu.model.atomic import OWNER_FILE, work_dir

    target = tmp_path / "merged"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = tmp_path / ".merged.tmp-dead"
    stale.mkdir()
    (stale / "model-00001-of-00002.safetensors").write_bytes(b"partial")
    (stale / OWNER_FILE).write_text(f"{dead.stdout.strip()} {socket.gethostname()}\n")
    live = work_dir(target)  # this process: alive
    assert not stale.exists() and live.exists()
    again = work_dir(target)
    assert live.exists() and again.exists()  # a live build's directory stays


def test_a_base_without_a_muting_direction_is_refused(qwengpu_cache, tmp_path):
    """Isotropic zero-mean embeddings: no half-space holds the text rows (physics.md)."""
    with pytest.raises(ModelError, match="no muting direction"):
        build_checkpoint("synthetic:tiny,text,isotropic", tmp_path / "merged")
    _assert_nothing_left(tmp_path)


@pytest.fixture(scope="module")
def layer_cache(tiny_base):
    """What the build uses to materialise and check circuit layers, for one base."""
    from qwengpu.model.merge import _base_info, _LayerCache
    from qwengpu.model.muting import MutingVerifier

    info = _base_info(tiny_base)
    circuit = PassthroughCircuit()(info)
    verifier = MutingVerifier(info.text_embeddings, circuit.mute_direction, tiny_base.text_config)
    return lambda c: _LayerCache(c, tiny_base, verifier), circuit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda w: w.__setitem__("linear_attn.A_log", torch.full((4,), -1e4)), "representable"),
        (lambda w: w.pop("mlp.up_proj.weight"), r"missing \['mlp.up_proj.weight'\]"),
        (lambda w: w.__setitem__("extra.weight", torch.zeros(1)), r"unexpected \['extra.weight'\]"),
        (lambda w: w.__setitem__("mlp.up_proj.weight", torch.zeros(3, 3)), "has shape"),
        (
            lambda w: w.__setitem__("mlp.up_proj.weight", torch.full((128, 64), float("nan"))),
            "non-finite",
        ),
        (
            lambda w: w.__setitem__("mlp.up_proj.weight", torch.zeros(128, 64, dtype=torch.int32)),
            "floating-point",
        ),
    ],
    ids=["not-bf16-exact", "missing", "unexpected", "shape", "nan", "integer"],
)
def test_bad_circuit_weights_are_refused(layer_cache, change, message):
    make_cache, circuit = layer_cache
    bad = _tweak_layer(0, change)(circuit)
    with pytest.raises(ModelError, match=message):
        make_cache(bad).tensor(0, "mlp.up_proj.weight")
    assert make_cache(circuit).tensor(1, "mlp.up_proj.weight").dtype == torch.bfloat16


def test_circuit_tokens_must_be_zero_on_the_mute_channels(tiny_base, tmp_path):
    def tweak(circuit):
        rows = circuit.input_rows + (circuit.mute_direction != 0).float() * 0.5
        return dataclasses.replace(circuit, input_rows=rows)

    with pytest.raises(ModelError, match="exactly 0 on the mute direction"):
        build_checkpoint(tiny_base, tmp_path / "merged", Tweaked(tweak))
    _assert_nothing_left(tmp_path)


def test_existing_targets_are_not_clobbered(tiny_base, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "precious.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="already exists"):
        build_checkpoint(tiny_base, taken)
    with pytest.raises(CheckpointError, match="not a qwengpu checkpoint: refusing"):
        build_checkpoint(tiny_base, taken, overwrite=True)
    assert (taken / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_distinct_output_rows_untie_a_tied_base(qwengpu_cache, tmp_path):
    """On a tied base, circuit lm_head rows that differ from the input rows untie the
    embeddings: lm_head is written with the text rows copied byte for byte."""
    from qwengpu.model.base import resolve_base
    from qwengpu.model.safetensors_io import load_tensor, read_checkpoint_tensors

    def tweak(circuit):
        return dataclasses.replace(circuit, output_rows=circuit.input_rows * 4)

    base = resolve_base("synthetic:tiny,text")
    out = tmp_path / "merged"
    result = build_checkpoint(base, out, Tweaked(tweak))
    assert result.manifest["circuit"]["embeddings_untied_by_build"] is True
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    tensors = read_checkpoint_tensors(out)
    head, embed = (
        load_tensor(tensors["lm_head.weight"]),
        load_tensor(tensors["model.embed_tokens.weight"]),
    )
    assert torch.equal(head[:248077], embed[:248077])
    assert torch.equal(head[248077:248080], embed[248077:248080] * 4)
