"""`qgpu calc` on the model: every function of normal mode computed by the machine in the
weights (the reduced preset on the 0.8B geometry), with the interpreter made unimportable
while the model runs; each launch then replayed with --check."""

from __future__ import annotations

import json

import pytest

from qwengpu.chat.calc import Calculator
from qwengpu.chat.expr import CalcError
from qwengpu.host.check import check_launch

# one expression per function and operator, cheap on 2-lane warps; as one batch of waves
EXPRESSIONS = {
    "[1,2,3] @ [4,5,6]": 32,
    "[[1,2],[3,4]] @ [[5,6],[7,8]]": [[19, 22], [43, 50]],
    "[1, 2] * 3 + [[10], [20]] - 1": [[12, 15], [22, 25]],
    "-7 // 2 + 2 ** 10": 1020,
    "-7 % 3": 2,
    "-[1, -2]": [-1, 2],
    "sum([1, 2, 3])": 6,
    "max([3, -1, 9])": 9,
    "min(4, 2, 8)": 2,
    "sort([5, 3, 9, 1])": [1, 3, 5, 9],
    "cumsum([1, 2, 3])": [1, 3, 6],
    "reverse([1, 2, 3])": [3, 2, 1],
    "abs(-5)": 5,
    "factorial(5)": 120,
    "gcd(12, 18)": 6,
    "lcm(4, 6)": 12,
    "fib(10)": 55,
    "isprime([13, 91])": [1, 0],
    "primes(7)": [2, 3, 5, 7],
    "isqrt(99)": 9,
    "popcount(255)": 8,
}


def test_every_function_runs_on_the_model(reduced, without_interpreter):
    backend = reduced.get("float32")
    calculator = Calculator(model=backend)
    captured = []
    launch_many = backend.launch_many

    def keep(requests, **kwargs):  # what each launch ran, for the replay below
        runs = launch_many(requests, **kwargs)
        captured.extend(zip((r.program for r in requests), runs, strict=True))
        return runs

    with without_interpreter(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "launch_many", keep)
        results = calculator.evaluate_many(list(EXPRESSIONS))
    assert {r.expression: r.value for r in results} == EXPRESSIONS
    for result in results:
        assert result.tokens == sum(launch.tokens for launch in result.launches) > 0
        assert all(launch.steps > 0 and not launch.checked for launch in result.launches)
    assert len(captured) == sum(len(r.launches) for r in results)
    for program, run in captured:  # each launch, replayed step by step
        assert check_launch(program, run) == len(run.steps)


def test_an_error_word_from_the_model_becomes_the_message(reduced, without_interpreter):
    calculator = Calculator(model=reduced.get("float32"))
    with without_interpreter(), pytest.raises(CalcError, match="'7 // 0': division by zero"):
        calculator.evaluate("7 // 0")
    with without_interpreter(), pytest.raises(CalcError, match="'2147483647 \\+ 1': .* int32"):
        calculator.evaluate("2147483647 + 1")


def test_calc_command_prints_the_models_value_as_json(reduced, monkeypatch, capsys):
    """`qgpu calc "[1,2,3] @ [4,5,6]" --check --json` on the model."""
    import qwengpu.host.model_backend as backends
    from qwengpu.cli.main import main

    backend = reduced.get("float32")
    monkeypatch.setattr(backends, "model_backend", lambda model, **_: backend)
    assert main(["calc", "[1,2,3] @ [4,5,6]", "--model", "memory", "--check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["value"] == 32 and report["launches"] == 1 and report["checked"]
    assert report["tokens"] > 0 and report["kernels"][0]["kernel"] == "calc_matmul_short"
    assert main(["calc", "sort([3, 1, 2])", "--model", "memory"]) == 0
    shown = capsys.readouterr()
    assert shown.out == "[1, 2, 3]\n" and "tokens written by the model" in shown.err
    assert main(["calc", "1 / 2", "--model", "memory"]) == 1
    assert "use '//' for integer division" in capsys.readouterr().err
