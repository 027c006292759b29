"""A whole Qwen3_5ForCausalLM driven through the plain HF API: use_cache=True, fed token by
token and in one prefill, and generate()."""

from __future__ import annotations

import numpy as np
import torch
from circuit_helpers import DTYPES, TINY2
from transformers import DynamicCache

from qwengpu.circuit import Bit, Bits, Circuit, Column, compile_circuit, synthetic_embedding
from qwengpu.circuit.runtime import CircuitModel, exact_arithmetic

VOCAB_TEXT = 200


def counter_circuit():
    """Accumulate: acc[slot] += x on every token (read the old row, add, and write the sum
    back into a second memory at a later layer), a running total the host can read out."""
    c = Circuit("accumulate")
    slot = c.input("slot", Bits(3))
    x = c.input("x", Bits(8))
    store = c.input("store", Bit())
    mem = c.memory("acc", 8, [Column("v", Bits(8))])
    c.write(mem, slot, [x], when=store)
    old = c.read(mem, slot)
    total = c.add(old.outputs[0], x)
    log = c.memory("log", 8, [Column("v", Bits(8))])
    c.write(log, slot, [total])
    c.output(total)
    return c, total


def test_whole_model_prefill_decode_and_generate():
    c, total = counter_circuit()
    embedding = synthetic_embedding(VOCAB_TEXT, TINY2.hidden, seed=2)
    compiled = compile_circuit(c, TINY2, embedding=embedding)
    rng = np.random.default_rng(4)
    n = 20  # every decode step runs every layer: keep the sequence short on CPU
    values = {
        "slot": rng.integers(0, 8, n),
        "x": rng.integers(0, 256, n),
        "store": rng.integers(0, 2, n),
    }
    rows = compiled.embed(values)
    ids = VOCAB_TEXT + np.arange(n)
    seq = np.empty(2 * n, dtype=np.int64)
    seq[0::2] = ids
    seq[1::2] = rng.integers(0, VOCAB_TEXT, n)  # text tokens between circuit tokens
    acc: dict[int, int] = {}
    want = []
    for k in range(n):
        s, x = int(values["slot"][k]), int(values["x"][k])
        if values["store"][k]:
            acc[s] = x
        want.append((acc.get(s, 0) + x) % 256)
    for dtype in DTYPES:
        cm = CircuitModel(compiled, dtype, text_embedding=embedding, circuit_tokens=rows)
        model = cm.model
        input_ids = torch.tensor(seq)[None]
        captured = []
        hook = model.model.layers[compiled.num_layers - 1].register_forward_hook(
            lambda _m, _i, out, sink=captured: sink.append(
                out[0] if isinstance(out, tuple) else out
            )
        )
        with torch.no_grad():
            # one prefill with a cache
            out = model(input_ids=input_ids, use_cache=True)
            prefill = captured[-1].double().numpy()[0]
            state_prefill = {
                i: out.cache.layers[i].recurrent_states[0].clone()
                for i, t in enumerate(compiled.layer_types)
                if t != "full_attention"
            }
            # token by token with a cache
            cache = DynamicCache(config=model.config)
            steps = []
            for t in range(input_ids.shape[1]):
                out = model(input_ids=input_ids[:, t : t + 1], cache=cache, use_cache=True)
                cache = out.cache
                steps.append(captured[-1].double().numpy()[0, 0])
            decode = np.stack(steps)
        hook.remove()
        for residual in (prefill, decode):
            assert np.array_equal(compiled.decode(residual[0::2], total)[:, 0], want)
            assert np.array_equal(residual[1::2], embedding.to(dtype).double().numpy()[seq[1::2]])
        for i, state in state_prefill.items():
            assert torch.equal(state, cache.layers[i].recurrent_states[0]), (dtype, i)
        # generate() runs on the merged stack (lm_head is zero: it picks token 0)
        with torch.no_grad():
            gen = model.generate(input_ids=input_ids[:, :10], max_new_tokens=3, do_sample=False)
        assert gen.shape == (1, 13)
        # the host reads the log memory out of the cache
        log = compiled.memory_rows(cm.recurrent_states(cache), "log")[0]
        last = {}
        for k in range(n):
            last[int(values["slot"][k])] = want[k]
        for s, v in last.items():
            assert int((log[s] * (1 << np.arange(8))).sum()) == v


def test_exact_arithmetic_pins_float32_products_and_gives_the_settings_back(request):
    """Inside exact_arithmetic a float32 matmul is IEEE float32 whatever the caller set (on
    a CPU with AMX, "medium" makes oneDNN round its operands to bfloat16); after it, the
    caller's settings hold again."""
    request.addfinalizer(lambda: torch.set_float32_matmul_precision("highest"))
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 256, generator=gen) for _ in range(2))
    want = (a.double() @ b.double().T).float()  # products and sums in float32 at least
    ieee = a @ b.T
    torch.set_float32_matmul_precision("medium")
    with exact_arithmetic():
        assert torch.backends.mkldnn.matmul.fp32_precision == "ieee"
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
        assert not torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        assert torch.equal(a @ b.T, ieee)
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    assert (ieee - want).abs().max() < 1e-3
