"""Early exit: a launch stops after the circuit's layers and scores the circuit rows only.
machine.exit_bound proves from the weights that no other LM-head row can win a circuit
position; here the proof's two sides are measured on a launch's every position, a failed
proof falls back to the full forward, and the cut model shares the full one's weights.
(That early exit writes the full forward's tokens on the whole suite: test_model_launch.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qwengpu import api
from qwengpu.errors import LaunchError
from qwengpu.host.model_backend import ModelBackend
from qwengpu.machine.exit_bound import EXIT_MARGIN, exit_bound
from tests.machine.test_model_launch import _dot_args

DOT = (Path(__file__).resolve().parents[2] / "examples" / "dot.cu").read_text()


def test_the_bound_holds_on_every_position_of_a_launch(reduced, request):
    """The normed residual at the circuit's end, captured at each position of a dot
    product (its load tokens in one prefill, then the model's own): scored against the
    whole LM head, no row but the circuit tokens' beats the bound's other side, the best
    circuit row reaches its circuit side, and the full vocabulary's argmax is the token
    early exit wrote."""
    backend = reduced.get("float32")
    bound = backend.bound
    assert bound.proven and bound.margin >= EXIT_MARGIN
    normed: list[torch.Tensor] = []
    hook = backend.model.model.norm.register_forward_hook(
        lambda _m, _i, out: normed.append(out[0].detach().clone())
    )
    request.addfinalizer(hook.remove)
    program = api.compile(DOT, spec=reduced.spec)
    args = _dot_args()
    run = backend.launch(program, 1, 4, args, full_forward=False)
    assert run.forward == "early exit" and int(args[2][0]) == 32
    positions = torch.cat(normed)  # the prefill's positions, then one per decode pass
    assert len(positions) == run.prompt_tokens + len(run.generated) - 1
    logits = positions.double() @ backend.model.lm_head.weight.detach().double().t()
    first, count = backend.offset, len(backend.vocab)
    circuit = logits[:, first : first + count]
    others = torch.cat([logits[:, :first], logits[:, first + count :]], dim=1)
    assert float(others.max()) <= bound.other_logit_max
    assert float(circuit.max(dim=1).values.min()) >= bound.circuit_logit_min
    written = logits[run.prompt_tokens - 1 :].argmax(dim=1).tolist()
    assert written == backend.ids(run.generated)


def test_a_head_the_bound_cannot_clear_runs_every_layer(reduced):
    """A text row with weight on the anchor channel scores far above the circuit there: the
    proof fails, the backend runs the full forward by default, and asking for early exit is
    refused in one line that names the way out."""
    machine = reduced.machine
    hidden = machine.geometry.hidden
    ready = reduced.get("float32")
    rows = torch.zeros(2, hidden)
    rows[1, machine.compiled.schedule.anchors.dims[0]] = 40.0
    circuit_rows = ready.model.lm_head.weight[ready.offset :].detach()
    bound = exit_bound(machine, [rows], circuit_rows, torch.zeros(hidden))
    assert not bound.proven and bound.other_logit_max > bound.circuit_logit_min
    backend = ModelBackend(machine, ready.model, ready.offset, bound=bound)
    program = api.compile(DOT, spec=reduced.spec)
    args = _dot_args()
    assert backend.launch(program, 1, 4, args).forward == "full forward"
    assert int(args[2][0]) == 32
    with pytest.raises(LaunchError, match=r"early exit is not exact .*--full-forward"):
        backend.launch(program, 1, 4, _dot_args(), full_forward=False)


def test_the_cut_model_shares_the_full_models_weights(reduced):
    """The early-exit model is a view: its layers are the full model's first ones, its head
    the circuit rows on their nonzero dims, and nothing was copied but those."""
    from qwengpu.host.early_exit import exit_model

    backend = reduced.get("float32")
    model = backend.model
    circuits = len(reduced.machine.layer_types)
    cut = exit_model(model, circuits, backend.offset, len(backend.vocab))
    assert len(cut.model.layers) == circuits == cut.config.num_hidden_layers
    assert all(a is b for a, b in zip(cut.model.layers, model.model.layers, strict=False))
    assert cut.model.embed_tokens is model.model.embed_tokens
    assert cut.model.norm is model.model.norm
    assert len(model.model.layers) == model.config.num_hidden_layers > circuits  # untouched
    dims = cut.lm_head.dims.tolist()
    assert sorted(dims) == sorted(reduced.machine.code_dims)
    rows = model.lm_head.weight[backend.offset : backend.offset + len(backend.vocab)]
    assert torch.equal(cut.lm_head.weight, rows[:, dims])
