"""Muting: every circuit layer leaves text tokens bit-identical.

No projection has a bias and RMSNorm adds no offset, so every gate of a circuit layer is a
linear form of the normalised input x_hat. Circuit tokens are exactly 0 on the mute dims
M (dims the circuit never uses), text tokens are not. With a direction w on M along which
every text row of the base embedding matrix sits at w . x_hat <= -margin < 0, adding
m * w to every gate-like row (MLP gates, DeltaNet z and beta rows) changes nothing for
circuit tokens (0 * m) and drives every text gate below -128, where silu and sigmoid are
exactly 0: the MLP adds 0, the DeltaNet output is 0 and beta = 0 leaves every recurrent
state untouched. Text rows do not change through the circuit layers, so x_hat of a text
token is the same in every circuit layer and one check over the embedding matrix covers
them all.

`separating_direction` is the one search for such a w (the min-norm-point problem, by
Gilbert's algorithm); the checkpoint builder (qwengpu/model/muting.py) uses it too.
`find_mute_direction` derives w from the actual matrix; `mute_layers` picks m and checks,
for every row, a bound on the circuit part of every gate: |row_C . x_hat_C| <=
||row_C|| ||x_hat_C||, plus float rounding, so the check is exact, not sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qwengpu.circuit.emit import EmittedLayer
from qwengpu.circuit.numerics import MUTE_GATE_MAX
from qwengpu.circuit.schedule import Schedule
from qwengpu.errors import CircuitError

ROUNDING_SLACK = 2.0**-6
"""Relative allowance for float rounding in the gate matmuls (bf16 outputs round at 2^-9)."""

ROW_CHUNK = 16384
"""Rows per block wherever a whole embedding matrix is walked."""

SEARCH_ITERATIONS = 2000
"""Gilbert steps `separating_direction` takes at most."""

SEARCH_TOLERANCE = 0.02
"""`separating_direction` stops once its margin is within this fraction of the best."""

ACTIVE_ROWS = 4096
"""Rows (the lowest along the current direction) each pass of the search adds."""


class MuteError(CircuitError):
    """The base embedding matrix has no direction that separates its rows from 0."""


@dataclass
class MuteDirection:
    dims: np.ndarray  # residual dims (the mute dims)
    weights: np.ndarray  # unit vector over `dims`
    margins: np.ndarray  # -w . x_hat_M for every row
    rows: np.ndarray  # the embedding rows checked

    @property
    def min_margin(self) -> float:
        return float(self.margins.min())


@dataclass
class MuteReport:
    scale: float  # m
    direction: MuteDirection
    row: np.ndarray  # the (mute dims) entries added to every gate-like row: bf16(m * w)
    gate_bound: float  # max ||row_C|| over every gate-like row of every layer
    worst_row: int
    worst_ratio: float  # min over rows of (mute part) / (needed), > 1 means muted

    def vector(self, hidden: int) -> np.ndarray:
        """The (hidden,) row every gate-like row of every circuit layer got added."""
        v = np.zeros(hidden)
        v[self.direction.dims] = self.row
        return v

    def describe(self) -> str:
        return (
            f"mute: {len(self.direction.dims)} dims, min margin {self.direction.min_margin:.3f} "
            f"(normalised units), scale m = {self.scale:.3g}, gate bound {self.gate_bound:.3g}, "
            f"worst row {self.worst_row} has {self.worst_ratio:.2f}x the margin it needs"
        )


def rms_normalize(rows, eps: float):
    """x_hat in float32, by Qwen3_5RMSNorm's own formula before its weight:
    x * rsqrt(mean(x^2) + eps) on x = rows in float32. The norm multiplies this by
    (1 + weight) and rounds to the input dtype; with weight 0 that is just the rounding."""
    import torch

    x = torch.as_tensor(rows).to(torch.float32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def normalised_rows(embedding, eps: float, chunk: int = ROW_CHUNK) -> np.ndarray:
    """x_hat of every row exactly as Qwen3.5's RMSNorm (weight 0) computes it, in the
    embedding's dtype, returned as float32 (which holds bf16 and fp32 values exactly)."""
    import torch

    emb = torch.as_tensor(embedding)
    out = np.empty(emb.shape, dtype=np.float32)
    for start in range(0, emb.shape[0], chunk):
        block = emb[start : start + chunk]
        out[start : start + chunk] = rms_normalize(block, eps).to(emb.dtype).float().numpy()
    return out


def _row_map(x_hat: np.ndarray, rows: np.ndarray, dims: np.ndarray, fn) -> np.ndarray:
    """fn(block) over float64 blocks x_hat[rows][:, dims], chunk by chunk, concatenated."""
    parts = [
        fn(x_hat[np.ix_(rows[k : k + ROW_CHUNK], dims)].astype(np.float64))
        for k in range(0, len(rows), ROW_CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class Separation:
    """What `separating_direction` found: a unit u with points . u >= margin for every
    point (u is None when the search collapsed onto the origin), and an upper bound on the
    best margin any unit direction achieves."""

    direction: object  # torch.Tensor (d,) float32, unit norm, or None
    margin: float
    upper: float

    @property
    def gap(self) -> float:
        """How far the margin may be from the best one (0: provably optimal)."""
        return max(0.0, self.upper - self.margin)


def separating_direction(
    points,
    iterations: int = SEARCH_ITERATIONS,
    tolerance: float = SEARCH_TOLERANCE,
) -> Separation:
    """The unit u that maximises min_i points_i . u (the min-norm-point problem).

    The best u is the point of the rows' convex hull nearest the origin, normalised; if the
    hull holds the origin no direction separates and the margin stays <= 0. Gilbert's
    algorithm walks u inside the hull towards that point: |u| bounds the best margin from
    above, min_i points_i . u / |u| is the margin u achieves. Most rows are far from the
    separating plane, so the walk runs on an active set of the rows lowest along u, and a
    pass over all rows (one float32 matrix-vector product, no copy of `points`) adds the
    rows that got low. `points`: (rows, d) float32, a torch tensor or numpy array (a
    strided view is fine).
    """
    import torch

    points = torch.as_tensor(points)
    if points.dtype != torch.float32:
        points = points.to(torch.float32)
    rows = points.shape[0]
    total = torch.zeros(points.shape[1], dtype=torch.float64)
    for start in range(0, rows, ROW_CHUNK):
        total += points[start : start + ROW_CHUNK].sum(0, dtype=torch.float64)
    u = (total / max(rows, 1)).to(torch.float32)
    best_u, best_margin, upper = None, -float("inf"), float("inf")
    active = torch.zeros(0, dtype=torch.long)
    steps = 0
    while steps < iterations:
        norm = float(u.norm())
        if norm == 0.0:
            break
        upper = min(upper, norm)
        projections = points @ u
        margin = float(projections.min()) / norm
        if margin > best_margin:
            best_margin, best_u = margin, u / norm
        if upper - best_margin <= tolerance * upper:
            break
        lowest = projections.topk(min(rows, ACTIVE_ROWS), largest=False).indices
        active = torch.unique(torch.cat([active, lowest]))
        subset = points[active]
        for _ in range(200):  # Gilbert steps on the active rows
            steps += 1
            sub = subset @ u
            nearest = int(sub.argmin())
            step = u - subset[nearest]
            denom = float(step.dot(step))
            if denom == 0.0:
                break
            gamma = min(max(float(u.dot(step)) / denom, 0.0), 1.0)
            u = u - gamma * step
            norm = float(u.norm())
            if norm == 0.0 or float(sub[nearest]) / norm >= (1 - tolerance / 2) * norm:
                break
    return Separation(best_u, best_margin, upper)


def _block(x_hat: np.ndarray, rows: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """x_hat[rows][:, dims]: a view when both are contiguous ranges, else a copy."""

    def span(index: np.ndarray) -> slice | None:
        if len(index) and np.array_equal(index, np.arange(index[0], index[0] + len(index))):
            return slice(int(index[0]), int(index[0]) + len(index))
        return None

    r, d = span(rows), span(dims)
    if r is not None and d is not None:
        return x_hat[r, d]
    return x_hat[np.ix_(rows, dims)]


def find_mute_direction(
    x_hat: np.ndarray, mute_dims: Sequence[int], rows: np.ndarray | None = None
) -> MuteDirection:
    """The unit direction on `mute_dims` that maximises the smallest margin -w . x_hat over
    the rows (`separating_direction` on the rows, negated)."""
    dims = np.asarray(mute_dims, dtype=np.int64)
    rows = np.arange(x_hat.shape[0]) if rows is None else np.asarray(rows)
    if len(dims) == 0:
        raise MuteError("no mute dims: the circuit uses every residual dim")
    found = separating_direction(_block(x_hat, rows, dims))
    if found.direction is None:
        raise MuteError(
            f"no muting direction: the embedding rows average to 0 on the {len(dims)} mute "
            "dims, so no half-space holds them all"
        )
    w = -found.direction.double().numpy()
    w /= np.linalg.norm(w)
    margins = -_row_map(x_hat, rows, dims, lambda b: b @ w)
    if margins.min() <= 0:
        worst = int(rows[int(np.argmin(margins))])
        raise MuteError(
            f"no muting direction: on the {len(dims)} mute dims, embedding row {worst} has "
            f"margin {margins.min():.4f} <= 0 along the best direction found; the base "
            "embedding matrix has no half-space holding all its rows, so text tokens cannot "
            "be muted exactly (use more mute dims, or exclude unreachable rows)"
        )
    return MuteDirection(dims, w, margins, rows)


def _bf16(values: np.ndarray) -> np.ndarray:
    import torch

    return torch.tensor(values, dtype=torch.float32).bfloat16().double().numpy()


def given_direction(
    x_hat: np.ndarray, vector: np.ndarray, mute_dims: Sequence[int], rows: np.ndarray | None
) -> MuteDirection:
    """Use a direction computed elsewhere (e.g. the checkpoint builder's optimal one); it
    must be zero off the mute dims, where circuit tokens are not 0."""
    vector = np.asarray(vector, dtype=np.float64).reshape(-1)
    dims = np.asarray(mute_dims, dtype=np.int64)
    off = np.setdiff1d(np.arange(len(vector)), dims)
    if np.any(vector[off]):
        raise MuteError("the given mute direction is nonzero on dims the circuit uses")
    w = vector[dims] / np.linalg.norm(vector[dims])
    rows = np.arange(x_hat.shape[0]) if rows is None else np.asarray(rows)
    margins = -_row_map(x_hat, rows, dims, lambda b: b @ w)
    if margins.min() <= 0:
        raise MuteError(
            f"the given mute direction leaves embedding row "
            f"{int(rows[int(np.argmin(margins))])} at margin {margins.min():.4f}"
        )
    return MuteDirection(dims, w, margins, rows)


def mute_layers(
    layers: list[EmittedLayer],
    schedule: Schedule,
    embedding,
    rows: np.ndarray | None = None,
    direction: np.ndarray | None = None,
) -> MuteReport:
    """Add the muting term to every gate-like row, checked against every embedding row.

    `embedding`: the base's token embedding matrix (vocab x hidden, its own dtype);
    `rows`: the rows text can produce (default: all); `direction`: a (hidden,) direction to
    use instead of searching one (zero off `schedule.mute_dims()`). Raises MuteError when
    the rows cannot all be muted."""
    eps = schedule.geometry.rms_norm_eps
    x_hat = normalised_rows(embedding, eps)
    if direction is None:
        direction = find_mute_direction(x_hat, schedule.mute_dims(), rows)
    else:
        direction = given_direction(x_hat, direction, schedule.mute_dims(), rows)
    used = np.array(sorted(schedule.used_dims()), dtype=np.int64)
    gate_bound = 0.0
    for layer in layers:
        for name, idx in layer.gate_rows.items():
            if len(idx):
                block = layer.params[name][np.ix_(idx, used)].astype(np.float64)
                gate_bound = max(gate_bound, float(np.linalg.norm(block, axis=1).max()))
    sel = direction.rows
    circuit_norm = _row_map(x_hat, sel, used, lambda b: np.linalg.norm(b, axis=1))
    needed = gate_bound * circuit_norm * (1 + ROUNDING_SLACK) + 2 * abs(MUTE_GATE_MAX)
    # A power-of-two scale keeps the bf16 rounding of the row: bf16(2^k w) = 2^k bf16(w).
    # So the mute part, less its rounding allowance, is linear in the scale; pick the
    # smallest power of two above what the worst row needs.
    unit_row = _bf16(direction.weights)
    dims = direction.dims
    unit_part = -_row_map(x_hat, sel, dims, lambda b: b @ unit_row)
    unit_part -= ROUNDING_SLACK * _row_map(x_hat, sel, dims, lambda b: np.abs(b) @ np.abs(unit_row))
    worst_need = float((needed / np.maximum(unit_part, np.finfo(float).tiny)).max())
    scale = float(2.0 ** (np.floor(np.log2(worst_need)) + 1))
    mute_row = scale * unit_row
    mute_part = scale * -_row_map(x_hat, sel, dims, lambda b: b @ unit_row)
    ratio = scale * unit_part / needed
    worst = int(np.argmin(ratio))
    if ratio[worst] <= 1:
        raise MuteError(
            f"muting fails for embedding row {int(sel[worst])}: its mute part "
            f"{mute_part[worst]:.4g} does not cover the circuit part bound {needed[worst]:.4g}"
        )
    for layer in layers:
        for name, idx in layer.gate_rows.items():
            if len(idx):
                layer.params[name][np.ix_(idx, direction.dims)] += mute_row
    return MuteReport(scale, direction, mute_row, gate_bound, int(sel[worst]), float(ratio[worst]))


def synthetic_embedding(
    vocab: int,
    hidden: int,
    seed: int = 0,
    mean_ratio: float = 0.5,
    isotropic: bool = False,
    dtype=None,
):
    """A text embedding matrix with the statistics of trained LLM embeddings: a common
    mean direction (`mean_ratio` times the typical noise norm), an anisotropic spectrum
    (power-law scales in a random basis), a few outlier dims, std about 0.02; or, with
    `isotropic`, plain zero-mean Gaussian rows (which cannot be muted)."""
    import torch

    rng = np.random.default_rng(seed)
    if isotropic:
        e = rng.normal(0, 0.02, (vocab, hidden))
    else:
        scales = 0.02 * (np.arange(1, hidden + 1) ** -0.35) * np.sqrt(hidden) / 6
        basis, _ = np.linalg.qr(rng.normal(size=(hidden, hidden)))
        noise = (rng.normal(size=(vocab, hidden)) * scales) @ basis.T
        typical = np.linalg.norm(noise, axis=1).mean()
        mean = rng.normal(size=hidden)
        mean *= mean_ratio * typical / np.linalg.norm(mean)
        e = noise + mean
        outliers = rng.choice(hidden, size=max(1, hidden // 256), replace=False)
        e[:, outliers] *= 8
    return torch.tensor(e, dtype=dtype or torch.bfloat16)
