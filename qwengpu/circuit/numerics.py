"""Named numeric constants of the circuit, each with the reason it is exact.

Every weight the emitter writes is one of these constants times a small integer, scaled by
a power of two; `docs/circuit.md` derives each one. The rule behind all of them: every
value a circuit token carries is an integer (or a 0/1 pattern) that bfloat16 holds exactly,
every pre-activation is such an integer times a power of two, and every nonlinearity is
evaluated where it is exactly linear (SiLU far above 0), exactly zero (SiLU, sigmoid far
below 0) or exactly one (sigmoid far above 0).
"""

from __future__ import annotations

from fractions import Fraction

# --- Exact ranges of the arithmetic ----------------------------------------------------

BF16_EXACT_INT = 256
"""bfloat16 has 8 significant bits: every integer in [-256, 256] is exact, and so is any
such integer times a power of two. Every logic value, every positive gate value and every
up value of a neuron is kept inside this range."""

FP32_EXACT_INT = 1 << 24
"""float32 holds every integer below 2^24 exactly: the bound on partial sums in a matmul."""

# --- SwiGLU neurons ---------------------------------------------------------------------

LOGIC_GAIN = 128
"""K: a logic neuron's gate pre-activation is K * g for an integer g. silu(K * g) equals
K * max(g, 0) exactly: for g >= 1, K * g >= 128 and sigmoid(128) rounds to 1.0 in float32
(exp(-128) is far below half an ulp of 1); for g <= -1, exp(128) overflows to inf and
silu = x / (1 + inf) = -0.0. K is a power of two, so K * g is exact in bfloat16."""

SILU_LINEAR_ABOVE = 17
"""silu(x) == x exactly for x >= 17 in float32 (exp(-17) < 2^-24) and in bfloat16."""

SILU_ZERO_BELOW = -89
"""silu(x) and sigmoid(x) are exactly 0 for x <= -89 (exp(89) overflows float32)."""

MUTE_GATE_MAX = -128
"""Every gate of a circuit layer is at most this on every text token (after muting)."""

# --- The residual anchor and the exact RMSNorm ------------------------------------------

ANCHOR_LOG2 = 23
ANCHOR_VALUE = float(1 << ANCHOR_LOG2)
"""Circuit tokens carry n_a anchor channels of 2^23. The mean square of the residual is
then n_a * 2^46 / hidden, a power of four by the choice of n_a (see `AnchorScheme`), plus
the data's sum of squares divided by hidden, which rounds away because it stays below half
an ulp of the anchors' sum. RMSNorm then multiplies every channel by an exact power of two.
2^23 is a power of two, so it is exact in bfloat16 and its square is exact in float32."""

DATA_NORM_BUDGET = 1 << 21
"""The data channels' sum of squares must stay below this: half an ulp of one anchor's
square (2^46) is 2^22, and a factor of two more keeps every partial sum of the reduction
safe. The allocator checks it at every point of the stack."""

# --- Gated DeltaNet memories -------------------------------------------------------------

KEY_ON = 32
"""A selected key (or query) channel has pre-activation 32: silu(32) == 32 exactly, and the
kernels' L2 norm of a one-hot 32 is 32 * rsqrt(1024 + 1e-6) = 32 * 2^-5 = 1.0 exactly."""

KEY_OFF = -96
"""An unselected key channel: silu(-96) == -0.0. Keys are 128 * match - 96 with match = 1 on
the addressed row and <= 0 elsewhere."""

KEY_MATCH_GAIN = KEY_ON - KEY_OFF  # 128

VALUE_ONE = 32
"""A stored 1: value pre-activation 32, silu(32) == 32 exactly. A stored 0 is silu(0) == 0."""

PRESENCE_VALUE = 256
"""Every written row also stores this in its presence column: it dominates the row's mean
square, so the gated RMSNorm on a read divides by nearly the same scale whatever the row
holds, and it marks written rows (never-written rows read exactly 0)."""

BETA_LOGIT = 128
"""b = +-128: sigmoid(128) == 1.0 (overwrite the row), sigmoid(-128) == 0.0 (no write)."""

A_LOG_NO_DECAY = -8192.0
"""exp(-8192) == 0 exactly, so g = -exp(A_log) * softplus(.) = -0 and the decay exp(g) is
exactly 1 on every token. A power of two: exact in bfloat16."""

Z_ON = 32
"""The output gate of a reading head: silu(32) == 32 exactly; 0 on tokens that do not read."""

READ_OUT_SCALE = Fraction(1, Z_ON)
"""out_proj weight of a data column: the landing value is normed * 32 / 32 = normed."""

PRESENCE_OUT_SCALE = Fraction(1, Z_ON * 8)
"""out_proj weight of the presence column, which reads about 8x a data one."""

# A read's landing value rho for a stored 1 lies in a band [lo, hi] (derived per memory in
# `memory.landing_band`); a stored 0 lands as exactly 0. The cleaning neurons turn rho into
# an exact 0/1 with two ReLUs that are both on (and exact, both pre-activations being
# multiples of rho's ulp) for every rho in the band, and a pass-through that cancels rho.
CLEAN_GAIN = 256
CLEAN_LOW_KNOT = 96
CLEAN_HIGH_KNOT = 160
CANCEL_GAIN = 32
READ_BAND_MIN = Fraction(CLEAN_HIGH_KNOT + SILU_LINEAR_ABOVE, CLEAN_GAIN)
"""The smallest landing value the cleaning handles: the upper knot neuron must be in its
exact-linear region (>= 17) for every stored 1."""

READ_ROUNDING_SLACK = Fraction(1, 32)
"""Relative widening of the landing band for bfloat16 roundings (three roundings of at most
2^-9 each, rounded up generously)."""


def is_bf16_exact(value: float) -> bool:
    """True when `value` is exactly representable in bfloat16 (8 significant bits)."""
    if value == 0 or value != value or value in (float("inf"), float("-inf")):
        return value == 0
    mantissa, _ = _frexp(abs(value))
    scaled = mantissa * 256  # 8 significant bits
    return scaled == int(scaled)


def _frexp(value: float) -> tuple[float, int]:
    import math

    return math.frexp(value)
