"""The text side of the circuit's output rows, measured on a calibration text at build time.

The circuit tokens' LM-head rows are live on text positions too: there they score the
base's own final hidden state. Launches need them to win (machine.exit_bound proves it from
the weights); text needs them to lose, and that depends on what the base's hidden state
looks like on text, which no bound over the weights can say. So the build runs the base
over a calibration text (a shipped multilingual sample, or `--calibration FILE`) and
measures, at every position, the best circuit row against the base's top logit, and the
probability mass the merged model would give circuit tokens without `suppress_tokens`
(which stays on as a second line of defence). A circuit token that wins anywhere refuses
the build; a thin margin warns.
"""

from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qwengpu.errors import ModelError

CALIBRATION_TEXT = Path(__file__).with_name("calibration.txt")
MAX_CALIBRATION_TOKENS = 1024
POSITIONS_PER_CHUNK = 128  # the base's logits over 248k rows, this many positions at a time
THIN_TEXT_MARGIN = 2.0
"""Nats between the base's top logit and the best circuit row below which the build warns."""


@dataclass(frozen=True)
class TextMargin:
    """The circuit rows on the calibration text's positions (figures in nats)."""

    positions: int
    margin_min: float  # least (base's top logit - best circuit token's logit)
    circuit_logit_max: float  # the best circuit token's logit, anywhere
    circuit_mass_max: float  # the most probability circuit tokens would take, no suppression
    circuit_mass_mean: float
    circuit_wins: int  # positions where a circuit token would win the argmax

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"on {self.positions} calibration positions the base's top logit beats every "
            f"circuit token by at least {self.margin_min:.3g}; circuit tokens would take at "
            f"most {self.circuit_mass_max:.3g} of the probability (mean "
            f"{self.circuit_mass_mean:.3g}) without suppress_tokens"
        )


def calibration_text(path: str | Path | None = None) -> str:
    """The calibration text: `path`'s, else the shipped sample."""
    source = Path(path) if path is not None else CALIBRATION_TEXT
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read the calibration text {source}: {exc}") from None
    if not text.strip():
        raise ModelError(f"the calibration text {source} is empty")
    return text


def measure_text_margin(
    directory: str | Path, circuit_rows: Any, first_id: int, text: str, dtype: Any
) -> TextMargin:
    """Run the base in `directory` over `text` (at most MAX_CALIBRATION_TOKENS tokens) in
    `dtype` and score the circuit rows (token k at id first_id + k, replacing the base's
    rows there) against the base's own rows at every position."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:MAX_CALIBRATION_TOKENS]
    if not ids:
        raise ModelError("the calibration text tokenizes to nothing")
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype).eval()
    rows = torch.as_tensor(circuit_rows).to(dtype)
    margins, masses, best = [], [], []
    try:
        with torch.no_grad():
            states = model.model(torch.tensor([ids])).last_hidden_state[0]
            for chunk in states.split(POSITIONS_PER_CHUNK):
                base = model.lm_head(chunk).double()
                circuit = (chunk @ rows.t()).double()  # as the merged LM head computes it
                end = first_id + circuit.shape[1]
                kept = torch.cat([base[:, :first_id], base[:, end:]], dim=1)
                merged = torch.cat([kept, circuit], dim=1).log_softmax(-1)
                masses.append(merged[:, kept.shape[1] :].exp().sum(-1))
                best.append(circuit.max(-1).values)
                margins.append(kept.max(-1).values - best[-1])
    finally:
        del model
        gc.collect()
    margin, mass = torch.cat(margins), torch.cat(masses)
    return TextMargin(
        positions=len(ids),
        margin_min=float(margin.min()),
        circuit_logit_max=float(torch.cat(best).max()),
        circuit_mass_max=float(mass.max()),
        circuit_mass_mean=float(mass.mean()),
        circuit_wins=int((margin <= 0).sum()),
    )


def check_text_margin(margin: TextMargin, say: Any) -> None:
    """Refuse a build whose circuit tokens win on calibration text; warn when it is close."""
    if margin.circuit_wins:
        raise ModelError(
            f"a circuit token beats the base's text at {margin.circuit_wins} of "
            f"{margin.positions} calibration positions (by up to {-margin.margin_min:.3g} "
            "nats): the merged model would stop writing text wherever suppress_tokens is off"
        )
    if margin.margin_min < THIN_TEXT_MARGIN:
        say(f"warning: a thin text margin: {margin.describe()}")
    else:
        say(f"text: {margin.describe()}")
