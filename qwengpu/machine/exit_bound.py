"""Why a launch may stop after the circuit: no other LM-head row can win a circuit position.

On a launch sequence every position is a circuit token, and the token the model writes is
the argmax of the LM head over the final norm of the last residual. Early exit
(host.early_exit) computes that argmax from the circuit's own output, the residual after
the circuit's layers, over the circuit tokens' rows only. That is the full vocabulary's
argmax on the same residual when no other row (text, padding, a host-only token) can
outscore the right circuit token there, which this module proves from the weights.

After the circuit, a circuit token's residual h holds, exactly:
- the anchors: `count` channels of 2^23;
- the output code: every code channel is L + 1 or -L (L = OUTPUT_LEVEL) after the
  amplifier, L in bfloat16 (L + 1 rounds to L);
- the data fields, whose sum of squares stays below the schedule's `norm_peak`;
- zeros everywhere else (the mute dims and unused dims).
So rms(h) lies in [rms_min, rms_max]: the anchors and K code channels of L, and of L + 1
plus the data's peak.

The final norm gives n = h (1 + w) / rms(h). For any row r, with a = r (1 + w), on a
residual whose code is c (one of the machine's output codes, CompiledMachine.output_codes):
    r . n <= (2^23 |sum_anchors a| + max_c sum_code a_j h_j(c) + |a_rest| sqrt(norm_peak))
             / rms_min
with h_j(c) = L + 1 where c_j = 1, else -L: the code term is exact for every code the
circuit can write, so it is the most a row can score, not a Cauchy-Schwarz estimate.
A circuit token's row agrees in sign with its code on every code dim and is zero elsewhere
(CompiledMachine.output_rows), so on the residual whose code is its own it scores
    r . n = sum_code |a_j| |h_j| / rms(h) >= L sum_code |a| / rms_max.
Early exit is sound when every other row's bound is at most the least output row's score
divided by EXIT_MARGIN, which covers the storage dtype's rounding of rows and logits
(bfloat16: 2^-8 relative) many times over.

The rows' gain is chosen here too (`launch_row_gain`): the least power of two that clears
the other rows by ROW_GAIN_MARGIN. Launches need no more, and on text positions, where the
rows score the base's own hidden state, the smallest gain keeps them lowest
(docs/model.md, "Two margins").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from qwengpu.circuit.numerics import ANCHOR_VALUE
from qwengpu.machine.model import OUTPUT_LEVEL, CompiledMachine

EXIT_MARGIN = 2.0
"""The right circuit token's least logit must be at least this times any other row's most."""

ROW_GAIN_MARGIN = 1.5 * EXIT_MARGIN
"""The gain is chosen for this margin, so that the rows' rounding to the storage dtype
(2^-8 relative in bfloat16) never costs the proof."""

CODE_SCORES_PER_CHUNK = 1 << 24  # (row, code) scores computed at a time: 64 MB in float32
FLOAT32_SLACK = 1e-5
"""Relative slack on a float32 sum of K products (error below K 2^-24 of the sum of their
magnitudes), so that the computed maximum still bounds the exact one."""


@dataclass(frozen=True)
class ExitBound:
    """The two sides of the proof, in logits (recorded in a checkpoint's manifest)."""

    other_logit_max: float  # the most any non-circuit LM-head row scores on a circuit token
    circuit_logit_min: float  # the least the right circuit token scores

    @property
    def margin(self) -> float:
        return self.circuit_logit_min / max(self.other_logit_max, 1e-30)

    @property
    def proven(self) -> bool:
        return self.margin >= EXIT_MARGIN

    def record(self) -> dict[str, float]:
        return {
            "other_logit_max": self.other_logit_max,
            "circuit_logit_min": self.circuit_logit_min,
            "margin": self.margin,
        }

    def describe(self) -> str:
        return (
            f"any other row scores at most {self.other_logit_max:.4g} on a circuit token, the "
            f"right circuit token at least {self.circuit_logit_min:.4g} ({self.margin:.0f}x)"
        )


def exit_bound(
    machine: CompiledMachine, other_rows: Iterable[Any], circuit_rows: Any, norm_weight: Any
) -> ExitBound:
    """The bound for the LM-head rows in the blocks `other_rows` ([n, hidden] tensors:
    every row but the circuit tokens') against the circuit tokens' own `circuit_rows`
    ([tokens, hidden]), behind a final norm with weight `norm_weight` ([hidden]; the norm
    multiplies by 1 + weight)."""
    return ExitBound(
        other_logit_max(machine, other_rows, norm_weight),
        circuit_logit_min(machine, circuit_rows, norm_weight),
    )


def circuit_logit_min(machine: CompiledMachine, circuit_rows: Any, norm_weight: Any) -> float:
    """The least any circuit token scores on a residual holding its own code (host-only
    tokens' rows are zero and never the right token)."""
    import torch

    scale = 1.0 + torch.as_tensor(norm_weight).double()
    code = torch.tensor(machine.code_dims)
    on_code = (torch.as_tensor(circuit_rows).double() * scale)[:, code].abs().sum(1)
    outputs = on_code[on_code > 0]
    _, rms_max = launch_rms_range(machine)
    return float(outputs.min()) * OUTPUT_LEVEL / rms_max if len(outputs) else 0.0


def launch_row_gain(machine: CompiledMachine, other_rows: Iterable[Any], norm_weight: Any) -> float:
    """The circuit rows' gain G (CompiledMachine.output_rows): the least with which the
    right token's least score, G K L / rms_max, is ROW_GAIN_MARGIN times the most any of
    `other_rows` scores on a circuit position. Launches need no more, and on text the
    rows score G times the base's own hidden state."""
    _, rms_max = launch_rms_range(machine)
    unit_score = len(machine.code_dims) * OUTPUT_LEVEL / rms_max  # the score at gain 1
    return ROW_GAIN_MARGIN * other_logit_max(machine, other_rows, norm_weight) / unit_score


def launch_rms_range(machine: CompiledMachine) -> tuple[float, float]:
    """The least and most rms(h) of a circuit token's residual after the circuit."""
    g = machine.geometry
    anchors = machine.compiled.schedule.anchors
    squares = anchors.count * ANCHOR_VALUE**2 + len(machine.code_dims) * OUTPUT_LEVEL**2
    peak = len(machine.code_dims) * (2 * OUTPUT_LEVEL + 1) + machine.compiled.schedule.norm_peak
    least = math.sqrt(squares / g.hidden + g.rms_norm_eps)
    return least, math.sqrt((squares + peak) / g.hidden + g.rms_norm_eps)


def other_logit_max(machine: CompiledMachine, other_rows: Iterable[Any], norm_weight: Any) -> float:
    """The most any row of `other_rows` can score on a circuit position (the module
    docstring's first bound), over blocks of rows."""
    import torch

    anchors = machine.compiled.schedule.anchors
    norm_peak = float(machine.compiled.schedule.norm_peak)
    scale = 1.0 + torch.as_tensor(norm_weight).double()
    rms_min, _ = launch_rms_range(machine)
    codes = torch.as_tensor(machine.output_codes(), dtype=torch.float32)
    levels = torch.where(codes > 0, OUTPUT_LEVEL + 1, -OUTPUT_LEVEL).t()  # [K, codes]
    anchor_index = torch.tensor(list(anchors.dims))
    code_index = torch.tensor(list(machine.code_dims))
    rows_per_chunk = max(1, CODE_SCORES_PER_CHUNK // levels.shape[1])
    most = 0.0
    chunks = (
        rows[start : start + rows_per_chunk]
        for rows in other_rows
        for start in range(0, rows.shape[0], rows_per_chunk)
    )
    for chunk in chunks:
        a = chunk.double() * scale
        on_anchors, on_code = a[:, anchor_index], a[:, code_index]
        rest_squares = a.square().sum(1) - on_anchors.square().sum(1) - on_code.square().sum(1)
        code_score = (on_code.float() @ levels).max(1).values.double()
        slack = FLOAT32_SLACK * (OUTPUT_LEVEL + 1) * on_code.abs().sum(1)
        bound = (
            ANCHOR_VALUE * on_anchors.sum(1).abs()
            + code_score
            + slack
            + rest_squares.clamp(min=0).sqrt() * math.sqrt(norm_peak)
        ).clamp(min=0) / rms_min
        most = max(most, float(bound.max()) if len(bound) else 0.0)
    return most
