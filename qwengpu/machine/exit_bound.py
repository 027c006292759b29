"""Why a launch may stop after the circuit: no other LM-head row can win a circuit position.

On a launch sequence every position is a circuit token, and the token the model writes is
the argmax of the LM head over the final norm of the last residual. Early exit
(host.early_exit) computes that argmax from the circuit's own output, the residual after
the circuit's layers, over the circuit tokens' rows only. That is the full vocabulary's
argmax on the same residual when no other row (text, padding, a host-only token) can
outscore the right circuit token there, which this module proves from the weights.

After the circuit, a circuit token's residual h holds, exactly:
- the anchors: `count` channels of 2^23, so mean(h^2) >= 4^(23 - t) (AnchorScheme);
- the output code: every code channel is L + 1 or -L (L = OUTPUT_LEVEL) after the
  amplifier, L in bfloat16 (L + 1 rounds to L);
- the data fields, whose sum of squares stays below the schedule's `norm_peak`;
- zeros everywhere else (the mute dims and unused dims).

The final norm gives n = h (1 + w) / rms(h). For any row r, with a = r (1 + w):
    r . n <= (2^23 |sum_anchors a| + (L + 1) sum_code |a| + |a_rest| sqrt(norm_peak)) / rms_min
with rms_min = 2^(23 - t) = 2^s. The right circuit token's row is (2 code - 1) G / (1 + w) on the
code dims, so its logit is G sum_code |h_j| / rms(h) >= G K L / rms_max, with rms_max from
the largest h above. Early exit is sound when the first is at most the second divided by
EXIT_MARGIN, which covers the storage dtype's rounding of rows and logits (bfloat16: 2^-8
relative) many times over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from qwengpu.circuit.numerics import ANCHOR_VALUE
from qwengpu.machine.model import OUTPUT_LEVEL, OUTPUT_ROW_GAIN, CompiledMachine

EXIT_MARGIN = 2.0
"""The right circuit token's least logit must be at least this times any other row's most."""

ROWS_PER_CHUNK = 8192  # LM-head rows bounded at a time (the 2B head has 248k in float32)


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


def exit_bound(machine: CompiledMachine, other_rows: Iterable[Any], norm_weight: Any) -> ExitBound:
    """The bound for the LM-head rows in the blocks `other_rows` ([n, hidden] tensors:
    every row but the circuit tokens') behind a final norm with weight `norm_weight`
    ([hidden]; the norm multiplies by 1 + weight)."""
    import torch

    g = machine.geometry
    anchors = machine.compiled.schedule.anchors
    code = list(machine.code_dims)
    norm_peak = float(machine.compiled.schedule.norm_peak)
    scale = 1.0 + torch.as_tensor(norm_weight).double()
    rms_min = 2.0**anchors.norm_shift  # the anchors alone: RMSNorm divides by 2^s
    top = OUTPUT_LEVEL + 1
    square_max = anchors.count * ANCHOR_VALUE**2 + len(code) * top**2 + norm_peak
    rms_max = math.sqrt(square_max / g.hidden + g.rms_norm_eps)
    circuit_min = OUTPUT_ROW_GAIN * len(code) * OUTPUT_LEVEL / rms_max
    anchor_index = torch.tensor(list(anchors.dims))
    code_index = torch.tensor(code)
    other_max = 0.0
    chunks = (
        rows[start : start + ROWS_PER_CHUNK]
        for rows in other_rows
        for start in range(0, rows.shape[0], ROWS_PER_CHUNK)
    )
    for chunk in chunks:
        a = chunk.double() * scale
        on_anchors, on_code = a[:, anchor_index], a[:, code_index]
        rest_squares = a.square().sum(1) - on_anchors.square().sum(1) - on_code.square().sum(1)
        bound = (
            ANCHOR_VALUE * on_anchors.sum(1).abs()
            + top * on_code.abs().sum(1)
            + rest_squares.clamp(min=0).sqrt() * math.sqrt(norm_peak)
        ) / rms_min
        other_max = max(other_max, float(bound.max()) if len(bound) else 0.0)
    return ExitBound(other_max, circuit_min)
