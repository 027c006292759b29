"""`qgpu drift`: how far the merged model's next-token distributions are from the base's on text.

Both models run the same token ids (the base tokenizer's; the merged tokenizer must agree).
The merged model keeps every base row at its index; the circuit tokens take the base's
unused padding rows and rows beyond. So the logits of every base row the circuit did not
take (the whole tokenizer vocabulary, and the remaining padding) are compared: identical
bits, KL over them, and top-1 agreement. Beside them, the raw full-vocabulary figures,
what a consumer without `suppress_tokens` sees (a serving engine, a log-likelihood
evaluation): KL from the base's distribution over its own rows to the merged model's over
every row, the probability mass the merged model puts on circuit tokens, and the positions
where a circuit token wins the argmax.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from qwengpu.errors import ModelError

DEFAULT_TEXT = (
    "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on the Moon; "
    "Neil Armstrong stepped out first.\n"
    "def dot(a, b):\n    return sum(x * y for x, y in zip(a, b))\n"
    "敏捷的棕色狐狸跳过了懒狗。 Les sanglots longs des violons de l'automne. "
    "E = mc^2, and 3.14159 is close to pi; 2 + 2 = 4.\n"
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n84<|im_end|>\n"
)


SHOWN_POSITIONS = 8  # positions a report's line names where circuit tokens win


@dataclass(frozen=True)
class DriftReport:
    dtype: str
    tokens: int  # positions compared
    logits_identical: bool  # every compared logit bit-identical
    max_abs_logit_diff: float
    kl_mean: float  # KL(base || merged) over the compared rows, nats per token
    kl_max: float
    top1_agreement: float  # merged argmax over what generate() may pick == base argmax
    circuit_mass_max: float  # largest probability the merged model gives circuit tokens
    circuit_top1: int  # positions where a circuit token would win the raw argmax
    suppressed: int = 0  # tokens the merged generation config suppresses (circuit tokens)
    kl_full_mean: float = 0.0  # KL(base over its rows || merged over every row), nats/token
    kl_full_max: float = 0.0
    circuit_mass_mean: float = 0.0
    circuit_top1_positions: tuple[int, ...] = ()  # where (token index over the texts)

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        same = (
            "bit-identical"
            if self.logits_identical
            else f"max |dlogit| {self.max_abs_logit_diff:.3g}"
        )
        circuit = (
            f"circuit tokens: max mass {self.circuit_mass_max:.3g}, argmax at "
            f"{self.circuit_top1} positions"
        )
        if self.circuit_top1:
            shown = ", ".join(map(str, self.circuit_top1_positions[:SHOWN_POSITIONS]))
            more = "..." if self.circuit_top1 > SHOWN_POSITIONS else ""
            circuit += f" ({shown}{more})"
        if self.suppressed:
            circuit += f"; all {self.suppressed} suppressed in generation"
        return (
            f"{self.dtype:9s} {self.tokens} tokens: {same}; KL mean {self.kl_mean:.3g} max "
            f"{self.kl_max:.3g} nats; top-1 agreement {self.top1_agreement:.4f}\n"
            f"          full vocabulary (no suppression): KL mean {self.kl_full_mean:.3g} max "
            f"{self.kl_full_max:.3g} nats; {circuit}"
        )


def _logits(directory: Path, dtype: str, sequences: Sequence[list[int]]) -> list:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=getattr(torch, dtype))
    model.eval()
    out = []
    with torch.no_grad():
        for ids in sequences:
            out.append(model(torch.tensor([ids])).logits[0].float())
    del model
    gc.collect()
    return out


def tokenize_for_drift(base_dir: Path, merged_dir: Path, texts: Sequence[str], max_tokens: int):
    """The base tokenizer's ids for each text; refuses if the merged tokenizer disagrees."""
    from transformers import AutoTokenizer

    base_tok = AutoTokenizer.from_pretrained(str(base_dir))
    merged_tok = AutoTokenizer.from_pretrained(str(merged_dir))
    sequences = []
    for text in texts:
        ids = base_tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
        merged_ids = merged_tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
        if ids != merged_ids:
            raise ModelError("the merged tokenizer tokenizes text differently from the base's")
        if ids:
            sequences.append(ids)
    if not sequences:
        raise ModelError("drift needs some text (the given text tokenizes to nothing)")
    return sequences


def _circuit_ids(merged_dir: Path, base_rows: int, total: int):
    """The circuit token ids (from the manifest; else every row beyond the base's)."""
    import torch

    from qwengpu.errors import CheckpointError
    from qwengpu.model.manifest import read_manifest

    try:
        ids = sorted(read_manifest(merged_dir)["circuit"]["tokens"].values())
    except (CheckpointError, KeyError):
        ids = list(range(base_rows, total))
    return torch.tensor(ids, dtype=torch.long)


def _suppressed_ids(merged_dir: Path) -> list[int]:
    """The token ids the merged generation config keeps generate() from picking."""
    path = merged_dir / "generation_config.json"
    if not path.is_file():
        return []
    return [int(i) for i in json.loads(path.read_text()).get("suppress_tokens") or []]


def measure_drift(
    base_dir: str | Path,
    merged_dir: str | Path,
    texts: Sequence[str] = (DEFAULT_TEXT,),
    dtypes: Sequence[str] = ("bfloat16", "float32"),
    max_tokens: int = 1024,
) -> list[DriftReport]:
    """One DriftReport per dtype. Models are loaded one at a time to bound memory."""
    import torch

    base_dir, merged_dir = Path(base_dir), Path(merged_dir)
    for dtype in dtypes:
        if dtype not in ("bfloat16", "float32"):
            raise ModelError(f"drift dtype {dtype!r}: use bfloat16 or float32 (no float16)")
    sequences = tokenize_for_drift(base_dir, merged_dir, texts, max_tokens)
    suppressed = _suppressed_ids(merged_dir)
    reports = []
    for dtype in dtypes:
        base_logits = _logits(base_dir, dtype, sequences)
        merged_logits = _logits(merged_dir, dtype, sequences)
        rows = base_logits[0].shape[-1]
        total = merged_logits[0].shape[-1]
        if total < rows:
            raise ModelError("the merged model has fewer logits than the base")
        circuit = _circuit_ids(merged_dir, rows, total)
        keep = torch.ones(rows, dtype=torch.bool)
        keep[circuit[circuit < rows]] = False
        is_circuit = torch.zeros(total, dtype=torch.bool)
        is_circuit[circuit] = True
        pickable = torch.ones(total, dtype=torch.bool)  # what generate() may emit
        pickable[suppressed] = False
        identical, max_diff, kls, full_kls, masses, agree, count = True, 0.0, [], [], [], 0, 0
        circuit_wins: list[int] = []
        for b, m in zip(base_logits, merged_logits, strict=True):
            base_part, text_part = b[:, keep], m[:, :rows][:, keep]
            identical &= torch.equal(base_part, text_part)
            max_diff = max(max_diff, float((base_part - text_part).abs().max()))
            p_log = torch.log_softmax(base_part.double(), -1)
            q_log = torch.log_softmax(text_part.double(), -1)
            kls.append((p_log.exp() * (p_log - q_log)).sum(-1).clamp_min(0))
            full_log = torch.log_softmax(m.double(), -1)
            q_full = full_log[:, :rows][:, keep]
            full_kls.append((p_log.exp() * (p_log - q_full)).sum(-1).clamp_min(0))
            masses.append(full_log[:, is_circuit].exp().sum(-1))
            wins = is_circuit[m.argmax(-1)].nonzero().squeeze(1)
            circuit_wins += (wins + count).tolist()
            picked = m.masked_fill(~pickable, float("-inf")).argmax(-1)
            agree += int((picked == b.argmax(-1)).sum())
            count += b.shape[0]
        kl, full_kl, mass = torch.cat(kls), torch.cat(full_kls), torch.cat(masses)
        reports.append(
            DriftReport(
                dtype=dtype,
                tokens=count,
                logits_identical=bool(identical),
                max_abs_logit_diff=max_diff,
                kl_mean=float(kl.mean()),
                kl_max=float(kl.max()),
                top1_agreement=agree / count,
                circuit_mass_max=float(mass.max()),
                circuit_top1=len(circuit_wins),
                suppressed=len(suppressed),
                kl_full_mean=float(full_kl.mean()),
                kl_full_max=float(full_kl.max()),
                circuit_mass_mean=float(mass.mean()),
                circuit_top1_positions=tuple(circuit_wins),
            )
        )
        del base_logits, merged_logits
        gc.collect()
    return reports
