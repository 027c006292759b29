"""The model card (README.md) of a merged checkpoint, rendered from its manifest."""

from __future__ import annotations

from typing import Any


def model_card(manifest: dict[str, Any]) -> str:
    base, circuit, layers = manifest["base"], manifest["circuit"], manifest["layers"]
    spec = manifest["machine_spec"]
    k, total = layers["circuit"][1], layers["base"][1]
    synthetic = str(base["source"]).startswith("synthetic:")
    from_hub = bool(base.get("revision"))  # fetched from the hub: the source is a repo id
    base_model = f"base_model: {base['source']}\n" if from_hub else ""
    lines = [
        "---",
        "license: apache-2.0",
        f"{base_model}library_name: transformers",
        "tags:",
        "- qwen3_5",
        "- qwengpu",
        "- compiled-weights",
        "---",
        "",
        f"# qwengpu: a CUDA GPU compiled into {base['source']}",
        "",
        f"This checkpoint is {base['source']} with {k} extra decoder layers placed in front "
        f"of its own {base['num_layers']}: a small SIMT GPU whose every weight was computed "
        "by qwengpu's circuit compiler (none is trained). The extra layers use only "
        "Qwen3.5's own layer types (Gated DeltaNet linear attention, gated full attention "
        "and SwiGLU MLPs), so plain `transformers` loads and runs it, no custom code.",
        "",
        "On text the circuit is silent: every gate of every circuit layer was proven at "
        "build time to sit below the point where silu and sigmoid are exactly zero, for "
        "every token the base tokenizer can produce, in bfloat16 and float32. The logits "
        "of the base's vocabulary are therefore bit-identical to the base's on text.",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("DIR", dtype="bfloat16")',
        'tokenizer = AutoTokenizer.from_pretrained("DIR")',
        "```",
        "",
        "Launch kernels through it with `qgpu run --backend model --model DIR`; the runtime "
        "refuses a checkpoint whose manifest does not match its MachineSpec and compiler "
        "version, or whose files do not match their checksums. float16 is not supported.",
        "",
        "## The machine (MachineSpec)",
        "",
        "| field | value |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in spec.items()),
        f"| compiler version | {manifest['compiler_version']} |",
        "",
        "## Layer map",
        "",
        "| layers | what |",
        "| --- | --- |",
    ]
    layer_map = circuit.get("layer_map") or [f"{t}: circuit" for t in circuit["layer_types"]]
    lines += [f"| {i} | {text} |" for i, text in enumerate(layer_map)]
    lines += [
        f"| {k}..{total - 1} | {base['source']}'s own layers 0..{base['num_layers'] - 1}, "
        "unchanged |",
        "",
        _token_line(circuit["tokens"], base["tokenizer_size"]),
        "",
        "## How it was built",
        "",
        f"`qgpu build --base {base['source']}` (qwengpu {manifest['qwengpu_version']}, "
        f"transformers {manifest['transformers_version']}, {manifest['created']}). Base: "
        f"{base['architecture']} ({'image-text' if base['layout'] == 'vlm' else 'text-only'}"
        f", {'tied' if base['tied_embeddings'] else 'untied'} embeddings, {base['dtype']})"
        + (f", revision {base['revision']}" if base.get("revision") else "")
        + ". The base's tensors are copied byte for byte; the circuit layers and tokens are "
        "added; `qwengpu_manifest.json` records the muting proof and every file's sha256.",
        "",
    ]
    lines += _margins(circuit)
    if synthetic:
        lines += [
            "The base is synthetic: random weights at realistic scales with the real "
            "Qwen3.5 geometry and tokenizer. It generates noise; it exists to test the "
            "build offline.",
            "",
        ]
    lines += [
        "## License",
        "",
        "The merged checkpoint is a derivative of the base model and falls under the base's "
        "license, Apache-2.0 (Qwen3.5). The Qwen3.5 tokenizer vocabulary is Qwen's.",
        "",
    ]
    return "\n".join(lines)


def _margins(circuit: dict[str, Any]) -> list[str]:
    """The two margins of the circuit tokens' LM-head rows, where the build recorded them."""
    launch, text = circuit.get("early_exit"), circuit.get("text_margin")
    if launch is None and text is None:
        return []
    lines = ["## Circuit tokens: win on launches, lose on text", ""]
    if launch is not None:
        lines += [
            f"On a launch position the right circuit token scores at least "
            f"{launch['circuit_logit_min']:.4g} and no other row more than "
            f"{launch['other_logit_max']:.4g} ({launch['margin']:.1f}x), proven from the "
            "weights at build time and again at load.",
            "",
        ]
    if text is not None:
        lines += [
            f"On text, measured on {text['positions']} calibration positions: the base's top "
            f"logit beats every circuit token by at least {text['margin_min']:.3g} nats, and "
            f"circuit tokens take at most {text['circuit_mass_max']:.3g} of the probability "
            f"(mean {text['circuit_mass_mean']:.3g}). The generation config's "
            "`suppress_tokens` lists every circuit token besides, so `generate()` never "
            "emits one.",
            "",
        ]
    return lines


SHOWN_TOKENS = 12
"""Circuit tokens the card names; the machine has tens of thousands (tokenizer.json and
the manifest list them all)."""


def _token_line(tokens: dict[str, int], first: int) -> str:
    names = list(tokens)
    shown = ", ".join(f"`{t}`" for t in names[:SHOWN_TOKENS])
    more = (
        f" and {len(names) - SHOWN_TOKENS:,} more (all in tokenizer.json and the manifest)"
        if len(names) > SHOWN_TOKENS
        else ""
    )
    return (
        f"{len(names):,} circuit tokens, ids from {first} (after the base tokenizer's "
        f"vocabulary): {shown}{more}."
    )
