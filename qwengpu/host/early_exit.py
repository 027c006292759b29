"""Early exit: a launch runs the circuit's layers, the final norm and the circuit rows only.

The circuit's layers come first in the merged model, so nothing after them can touch the
machine's state; on a sequence that holds only a launch, the base's layers and the rest of
the LM head decide nothing but the argmax, which the circuit's amplified output code
decides (machine.exit_bound proves, from the weights, that no other row can win there).
`exit_model(model, circuits, first, count)` is the same Qwen3_5ForCausalLM cut there: it
shares every module and weight with `model`, runs transformers' own forward over the first
`circuits` decoder layers (its config says that many), and its LM head is the view of rows
[first, first + count): logit k is circuit token k's. The circuit layers see exactly the
inputs they see in the full model, so their states are the full forward's bit for bit.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class CircuitRows(nn.Module):
    """The LM head's circuit-token rows on the dims where any of them is nonzero (the output
    code's: a few dozen of the residual's); the others add exact zeros to every logit."""

    def __init__(self, head: nn.Module, first: int, count: int) -> None:
        super().__init__()
        rows = head.weight.detach()[first : first + count]
        self.register_buffer("dims", rows.ne(0).any(0).nonzero().squeeze(1))
        self.register_buffer("weight", rows[:, self.dims].contiguous())

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden.index_select(-1, self.dims), self.weight)


def exit_model(model: Any, circuits: int, first: int, count: int) -> Any:
    """`model` (a Qwen3_5ForCausalLM) cut after its first `circuits` layers, scoring the
    `count` circuit tokens from id `first` only (see the module docstring)."""
    config = copy.copy(model.config)
    config.num_hidden_layers = circuits
    config.layer_types = list(model.config.layer_types[:circuits])
    inner = _shallow(model.model)
    inner.layers = nn.ModuleList(list(model.model.layers[:circuits]))
    inner.config = config
    cut = _shallow(model)
    cut.model = inner
    cut.lm_head = CircuitRows(model.lm_head, first, count)
    cut.config = config
    return cut


def _shallow(module: nn.Module) -> Any:
    """A copy of `module` sharing its submodules, whose own list of them can change."""
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    return clone
