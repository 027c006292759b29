"""Muting: find a direction every text embedding row is far below, and prove the gates use it.

No projection in a Qwen3.5 layer has a bias, so each gate is a linear form g . x_hat of the
RMS-normalised input. If every text row has w . x_hat <= -margin, a gate that adds m * w is
below -m * margin on text, and silu/sigmoid of it are exactly 0 (below about -88.7; we
require -MUTE_THRESHOLD). Whether such a w exists depends on the embedding matrix, so it is
computed from the real rows at build time (physics.md, "Muting").

`find_mute_direction` runs the circuit compiler's search (`qwengpu.circuit.mute.
separating_direction`: the min-norm-point problem, by Gilbert's algorithm; the best w is
minus the point of the rows' convex hull nearest the origin) on the chosen channels and
rounds w to the checkpoint's dtype; the margin is the separation that rounded w achieves.
`MutingVerifier` proves, for every gate row of every circuit layer and each of bfloat16
and float32, that the gate is below -MUTE_THRESHOLD on every text row: a cheap rigorous
bound first, an exact evaluation over all rows for any gate row the bound cannot settle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwengpu.circuit.mute import (
    ROW_CHUNK,
    SEARCH_ITERATIONS,
    rms_normalize,
    separating_direction,
)
from qwengpu.errors import ModelError

if TYPE_CHECKING:
    import torch

MUTE_THRESHOLD = 128.0  # gates <= -this are exactly 0 after silu/sigmoid (measured -88.7)
SOFTPLUS_THRESHOLD = 128.0  # softplus(x) is exactly 0 in float32 for x <= -104
DEFAULT_MUTE_SCALE = 2.0**14  # m in physics.md; a power of two keeps m * w exact
MIN_MARGIN = 0.05  # below this m * margin is too close to the threshold to be useful
EXACT_BUDGET = 2e11  # multiply-adds allowed for exact per-row checks


@dataclass(frozen=True)
class MuteDirection:
    """A direction w (storage-dtype exact, zero off `channels`) and its text margin.

    margin: min over text rows of -(w . x_hat), x_hat = row / rms(row) (|x_hat| ~ sqrt(d)),
    for unit-norm w: how far below zero the text rows sit, in physics.md's units.
    """

    vector: torch.Tensor  # (hidden,) float32, values exact in the storage dtype
    margin: float
    channels: tuple[int, ...]
    gap: float  # upper bound on the best margin minus this one (0: provably optimal)

    def gate_row(self, scale: float = DEFAULT_MUTE_SCALE) -> torch.Tensor:
        """m * w: the row a gate adds to be muted on text (exact in bf16 for m = 2^k)."""
        return self.vector * scale


def _chunks(rows: torch.Tensor, size: int = ROW_CHUNK) -> Iterator[torch.Tensor]:
    for start in range(0, rows.shape[0], size):
        yield rows[start : start + size]


def find_mute_direction(
    embeddings: torch.Tensor,
    channels: Sequence[int] | None = None,
    *,
    eps: float = 1e-6,
    storage_dtype: torch.dtype | None = None,
    iterations: int = SEARCH_ITERATIONS,
    min_margin: float = MIN_MARGIN,
) -> MuteDirection:
    """The direction on `channels` that text rows sit furthest below, or a clear ModelError.

    The search is the circuit compiler's (`qwengpu.circuit.mute.separating_direction`),
    run on the float32 x_hat of every row; this wrapper picks the channels, rounds w to
    the checkpoint's dtype and re-measures the margin that rounded w really has."""
    import torch

    if embeddings.ndim != 2 or embeddings.shape[0] == 0:
        raise ModelError("muting needs a non-empty (rows, hidden) embedding matrix")
    hidden = embeddings.shape[1]
    chosen = sorted(set(range(hidden) if channels is None else map(int, channels)))
    if not chosen or chosen[0] < 0 or chosen[-1] >= hidden:
        raise ModelError(f"mute channels must be a non-empty subset of 0..{hidden - 1}")
    index = torch.tensor(chosen)
    points = torch.empty(embeddings.shape[0], len(chosen), dtype=torch.float32)
    for start in range(0, embeddings.shape[0], ROW_CHUNK):
        chunk = embeddings[start : start + ROW_CHUNK]
        points[start : start + chunk.shape[0]] = rms_normalize(chunk, eps)[:, index]

    found = separating_direction(points, iterations)
    del points
    if found.direction is None or found.margin <= 0:
        raise ModelError(
            f"no muting direction: the {embeddings.shape[0]} text embedding rows do not lie "
            f"on one side of any hyperplane through the origin on the {len(chosen)} chosen "
            f"channels (best separation {found.margin:+.3f}). Text tokens cannot be silenced "
            "exactly with bias-free gates; see physics.md, 'Muting'."
        )

    w = torch.zeros(hidden, dtype=torch.float32)
    w[index] = -found.direction
    if storage_dtype is not None:
        w = w.to(storage_dtype).to(torch.float32)  # exact in the checkpoint's dtype
    margin = text_margin(embeddings, w, eps)
    if margin < min_margin:
        raise ModelError(
            f"the best muting direction separates the text rows by only {margin:.4f} "
            f"(need {min_margin}): too close to zero to mute exactly"
        )
    return MuteDirection(w, margin, tuple(chosen), found.gap)


def text_margin(embeddings: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> float:
    """min over rows of -(w . x_hat) / |w|, in float64 on float32 x_hat."""
    import torch

    w64 = w.to(torch.float64)
    worst = max(
        float((rms_normalize(c, eps).to(torch.float64) @ w64).max()) for c in _chunks(embeddings)
    )
    return -worst / float(w64.norm())


# --- Proving a circuit's gates are muted ------------------------------------------------


@dataclass
class GateCheck:
    """The proof for one gate matrix of one layer, in one dtype."""

    layer: int
    gate: str  # "mlp.gate_proj", "linear_attn.in_proj_z", ...
    dtype: str
    rows: int
    worst_bound: float  # max over rows of the proven upper bound on the gate over text
    exact_rows: int  # rows the bound could not settle, evaluated exactly
    failed_rows: list[int] = field(default_factory=list)


@dataclass
class MutingReport:
    direction_margin: dict[str, float]  # per dtype, for the unweighted norm
    checks: list[GateCheck] = field(default_factory=list)
    decaying_heads: list[tuple[int, int]] = field(default_factory=list)  # (layer, head)

    @property
    def ok(self) -> bool:
        return all(not c.failed_rows for c in self.checks)

    def summary(self) -> dict:
        worst = max((c.worst_bound for c in self.checks), default=float("-inf"))
        return {
            "threshold": -MUTE_THRESHOLD,
            "direction_margin": self.direction_margin,
            "gate_matrices_checked": len(self.checks),
            "worst_gate_bound": worst,
            "rows_checked_exactly": sum(c.exact_rows for c in self.checks),
            "text_decays_state_of": [list(h) for h in self.decaying_heads],
        }


def _gates(layer_type: str, weights: Mapping[str, torch.Tensor], config: Mapping) -> list:
    """(name, gate matrix rows x hidden, norm weight key) of every text-silencing gate."""
    gates = [("mlp.gate_proj", weights["mlp.gate_proj.weight"], "post_attention_layernorm")]
    if layer_type == "linear_attention":
        gates += [
            ("linear_attn.in_proj_z", weights["linear_attn.in_proj_z.weight"], "input_layernorm"),
            ("linear_attn.in_proj_b", weights["linear_attn.in_proj_b.weight"], "input_layernorm"),
        ]
    else:
        heads, head_dim = int(config["num_attention_heads"]), int(config["head_dim"])
        q = weights["self_attn.q_proj.weight"]
        gate = q.reshape(heads, 2 * head_dim, -1)[:, head_dim:, :].reshape(heads * head_dim, -1)
        gates.append(("self_attn.q_proj[gate]", gate, "input_layernorm"))
    return gates


class MutingVerifier:
    """Proves circuit layers silent on every text row, in bfloat16 and float32.

    For a gate row g, write g = c w + g_perp. On text, g . X = c (w . X) + g_perp . X
    <= c * max(w . X) + |g_perp| * max|X| (+ float32 accumulation error), with X the
    layer's actual normalised input (norm weight and dtype rounding included, computed
    by the same ops as Qwen3_5RMSNorm). Rows where that bound is not below -threshold are
    evaluated exactly over every text row.
    """

    DTYPES = ("bfloat16", "float32")

    def __init__(
        self,
        embeddings: torch.Tensor,
        mute_direction: torch.Tensor,
        config: Mapping,
        threshold: float = MUTE_THRESHOLD,
    ) -> None:
        import torch

        self.embeddings = embeddings
        self.w = mute_direction.to(torch.float64)
        if float(self.w.norm()) == 0.0:
            raise ModelError("the circuit's mute_direction is zero")
        self.config = config
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.threshold = threshold
        self._stats: dict[tuple[bytes, str], tuple[float, float, float]] = {}
        self.report = MutingReport(
            direction_margin={
                d: -self._stats_for(None, d)[0] / float(self.w.norm()) for d in self.DTYPES
            }
        )

    def _inputs(self, gamma: torch.Tensor | None, dtype: str) -> Iterator[torch.Tensor]:
        import torch

        scale = None if gamma is None else 1.0 + gamma.to(torch.float32)
        for chunk in _chunks(self.embeddings):
            x = rms_normalize(chunk, self.eps)
            if scale is not None:
                x = x * scale
            yield x.to(getattr(torch, dtype)).to(torch.float64)

    def _stats_for(self, gamma: torch.Tensor | None, dtype: str) -> tuple[float, float, float]:
        """(max w.X, min w.X, max |X|) over text rows for one norm weight and dtype."""
        key = (b"" if gamma is None else gamma.float().numpy().tobytes(), dtype)
        if key not in self._stats:
            hi, lo, norm = -float("inf"), float("inf"), 0.0
            for x in self._inputs(gamma, dtype):
                p = x @ self.w
                hi, lo = max(hi, float(p.max())), min(lo, float(p.min()))
                norm = max(norm, float(x.norm(dim=1).max()))
            self._stats[key] = (hi, lo, norm)
        return self._stats[key]

    def check_layer(self, index: int, layer_type: str, weights: Mapping[str, torch.Tensor]):
        """Check one circuit layer; records into self.report, raises on an unmuted gate."""
        import torch

        hidden = self.w.shape[0]
        for name, gate, norm_key in _gates(layer_type, weights, self.config):
            gamma = weights[f"{norm_key}.weight"]
            g = gate.to(torch.float64)
            coef = (g @ self.w) / float(self.w.dot(self.w))
            perp = (g - coef[:, None] * self.w[None, :]).norm(dim=1)
            size = g.norm(dim=1)
            for dtype in self.DTYPES:
                hi, lo, xnorm = self._stats_for(gamma, dtype)
                along = torch.where(coef >= 0, coef * hi, coef * lo)
                slack = hidden * 2.0**-24 * size * xnorm  # float32 accumulation
                bound = along + perp * xnorm + slack
                unsettled = (bound > -self.threshold).nonzero().flatten().tolist()
                check = GateCheck(index, name, dtype, g.shape[0], float(bound.max()), 0)
                if unsettled:
                    cost = len(unsettled) * self.embeddings.shape[0] * hidden
                    if cost > EXACT_BUDGET:
                        check.failed_rows = unsettled
                    else:
                        check.exact_rows = len(unsettled)
                        check.failed_rows = self._exact(
                            g[unsettled], size[unsettled], gamma, dtype, unsettled
                        )
                        check.worst_bound = self._last_exact_worst
                self.report.checks.append(check)
                if check.failed_rows:
                    raise ModelError(
                        f"circuit layer {index} ({layer_type}): {name} is not muted on text "
                        f"in {dtype}: {len(check.failed_rows)} of {g.shape[0]} gate rows can "
                        f"reach above -{self.threshold:g} on some text token (first rows "
                        f"{check.failed_rows[:5]}, worst bound {check.worst_bound:.4g}). Every "
                        "gate row needs + m * mute_direction with m * margin well past the "
                        "threshold."
                    )
        if layer_type == "linear_attention":
            self._check_decay(index, weights)

    def _exact(self, g, size, gamma, dtype, rows: list[int]) -> list[int]:
        import torch

        hidden = self.w.shape[0]
        worst = torch.full((g.shape[0],), -float("inf"), dtype=torch.float64)
        xnorm = 0.0
        for x in self._inputs(gamma, dtype):
            worst = torch.maximum(worst, (x @ g.T).max(0).values)
            xnorm = max(xnorm, float(x.norm(dim=1).max()))
        worst = worst + hidden * 2.0**-24 * size * xnorm
        self._last_exact_worst = float(worst.max())
        return [rows[i] for i in (worst > -self.threshold).nonzero().flatten().tolist()]

    def _check_decay(self, index: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Heads whose state text tokens would decay: exp(A_log) != 0 and `a` not muted."""
        import torch

        decay = torch.exp(weights["linear_attn.A_log"].to(torch.float32))
        a = weights["linear_attn.in_proj_a.weight"].to(torch.float64)
        dt = weights["linear_attn.dt_bias"].to(torch.float64)
        hi, lo, xnorm = self._stats_for(weights["input_layernorm.weight"], "float32")
        coef = (a @ self.w) / float(self.w.dot(self.w))
        perp = (a - coef[:, None] * self.w[None, :]).norm(dim=1)
        bound = torch.where(coef >= 0, coef * hi, coef * lo) + perp * xnorm + dt
        for head in range(decay.shape[0]):
            if decay[head] != 0 and bound[head] > -SOFTPLUS_THRESHOLD:
                self.report.decaying_heads.append((index, head))
