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

REFINE_STEPS = 200
"""Subgradient steps that push the direction away from its worst rows."""

REFINE_WORST_FRACTION = 0.002
"""Fraction of rows (the lowest margins) each refinement step moves away from."""

ROUNDING_SLACK = 2.0**-6
"""Relative allowance for float rounding in the gate matmuls (bf16 outputs round at 2^-9)."""


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


ROW_CHUNK = 16384


def normalised_rows(embedding, eps: float, chunk: int = ROW_CHUNK) -> np.ndarray:
    """x_hat of every row exactly as Qwen3.5's RMSNorm (weight 0) computes it, in the
    embedding's dtype, returned as float32 (which holds bf16 and fp32 values exactly)."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm

    emb = embedding if isinstance(embedding, torch.Tensor) else torch.tensor(embedding)
    norm = Qwen3_5RMSNorm(emb.shape[1], eps=eps).to(emb.dtype)
    out = []
    with torch.no_grad():
        for start in range(0, emb.shape[0], chunk):
            out.append(norm(emb[start : start + chunk]).float().numpy())
    return np.concatenate(out)


def _row_map(x_hat: np.ndarray, rows: np.ndarray, dims: np.ndarray, fn) -> np.ndarray:
    """fn(block) over float64 blocks x_hat[rows][:, dims], chunk by chunk, concatenated."""
    parts = [
        fn(x_hat[np.ix_(rows[k : k + ROW_CHUNK], dims)].astype(np.float64))
        for k in range(0, len(rows), ROW_CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


def find_mute_direction(
    x_hat: np.ndarray, mute_dims: Sequence[int], rows: np.ndarray | None = None
) -> MuteDirection:
    """A unit direction on `mute_dims` that maximises the smallest margin -w . x_hat over
    the rows: start from minus the mean, then push away from the worst rows."""
    dims = np.asarray(mute_dims, dtype=np.int64)
    rows = np.arange(x_hat.shape[0]) if rows is None else np.asarray(rows)
    if len(dims) == 0:
        raise MuteError("no mute dims: the circuit uses every residual dim")
    xm = x_hat[np.ix_(rows, dims)]
    w = -xm.mean(axis=0, dtype=np.float64)
    if not np.any(w):
        raise MuteError("the embedding rows have zero mean on the mute dims")
    w /= np.linalg.norm(w)
    best_w, best = w, (-(xm @ w.astype(np.float32))).min()
    k = max(1, int(len(rows) * REFINE_WORST_FRACTION))
    step = 0.5
    for it in range(REFINE_STEPS):
        margins = -(xm @ w.astype(np.float32))
        worst = np.argpartition(margins, k - 1)[:k]
        grad = -xm[worst].mean(axis=0, dtype=np.float64)
        w = w + step / (1 + it / 20) * grad / max(np.linalg.norm(grad), 1e-30)
        w /= np.linalg.norm(w)
        m = (-(xm @ w.astype(np.float32))).min()
        if m > best:
            best_w, best = w.copy(), m
    margins = -_row_map(x_hat, rows, dims, lambda b: b @ best_w)
    if margins.min() <= 0:
        worst = int(rows[int(np.argmin(margins))])
        raise MuteError(
            f"no muting direction: on the {len(dims)} mute dims, embedding row {worst} has "
            f"margin {margins.min():.4f} <= 0 along the best direction found; the base "
            "embedding matrix has no half-space holding all its rows, so text tokens cannot "
            "be muted exactly (use more mute dims, or exclude unreachable rows)"
        )
    return MuteDirection(dims, best_w, margins, rows)


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
                block = layer.params[name][np.ix_(idx, used)]
                gate_bound = max(gate_bound, float(np.linalg.norm(block, axis=1).max()))
    sel = direction.rows
    circuit_norm = _row_map(x_hat, sel, used, lambda b: np.linalg.norm(b, axis=1))
    needed = gate_bound * circuit_norm * (1 + ROUNDING_SLACK) + 2 * abs(MUTE_GATE_MAX)
    scale = float(2.0 ** np.ceil(np.log2((needed / direction.margins).max())))
    mute_row = _bf16(scale * direction.weights)
    dims = direction.dims
    mute_part = -_row_map(x_hat, sel, dims, lambda b: b @ mute_row)
    rounding = ROUNDING_SLACK * _row_map(x_hat, sel, dims, lambda b: np.abs(b) @ np.abs(mute_row))
    ratio = (mute_part - rounding) / needed
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
