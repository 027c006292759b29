"""`qgpu`: compile, list, run and check CUDA kernels on the qgpu machine."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from qwengpu.cuda import CompiledPtx, compile_cuda
from qwengpu.errors import ArgError, QgpuError
from qwengpu.host.argspec import parse_arg_spec, parse_dim3
from qwengpu.host.launch import ArrayAt


def _whole_number(least: int, refusal: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `least`; `refusal` says why not,
    with {n} for the number given."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if number < least:
            raise argparse.ArgumentTypeError(refusal.format(n=number))
        return number

    return parse


_step_budget = _whole_number(1, "{n}: a launch needs at least 1 step")
_byte_count = _whole_number(0, "{n}: must be 0 or more bytes")


def _read_source(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ArgError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ArgError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x}); "
            "save the CUDA source as UTF-8"
        ) from None


def _compile(args: argparse.Namespace, source: str) -> CompiledPtx:
    """The file's PTX; a --kernel that is a template instance (`reduce0<int>`) is
    instantiated and named by the compiler."""
    from qwengpu.api import is_name_expression

    kernel = args.kernel
    names = [kernel] if kernel and is_name_expression(kernel) else []
    return compile_cuda(source, filename=Path(args.file).name, compiler=args.compiler, names=names)


def _kernel(args: argparse.Namespace, compiled: CompiledPtx) -> str | None:
    """The PTX name of --kernel (the compiler's, for a template instance)."""
    return compiled.lowered.get(args.kernel, args.kernel)


def _jsonable(value: object) -> object:
    if isinstance(value, ArrayAt):
        value = value.array  # the whole array: the kernel may write before the pointer
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    return value


def _say(message: str) -> None:
    print(f"qgpu: {message}", file=sys.stderr, flush=True)


def cmd_compile(args: argparse.Namespace) -> int:
    from qwengpu.api import lower_ptx
    from qwengpu.isa.listing import format_listing

    source = _read_source(args.file)
    compiled = _compile(args, source)
    if args.ptx:
        print(compiled.ptx)
    program = lower_ptx(compiled.ptx, _kernel(args, compiled), narrow_warps=args.narrow_warps)
    if args.listing or not args.ptx:
        print(format_listing(program))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from qwengpu.api import launch, lower_ptx

    launch_args = [parse_arg_spec(spec, i) for i, spec in enumerate(args.arg or [])]
    grid = parse_dim3(args.grid, "--grid")
    block = parse_dim3(args.block, "--block")
    source = _read_source(args.file)
    compiled = _compile(args, source)
    if args.backend == "model":
        from qwengpu.host.model_backend import end_progress, model_backend, stderr_progress

        backend = model_backend(
            args.model,
            dtype=args.dtype,
            base=args.base,
            device=args.device,
            progress=_say,
            circuit_only=not args.full_forward,  # early exit needs the circuit's layers only
        )
        program = lower_ptx(
            compiled.ptx,
            _kernel(args, compiled),
            spec=backend.machine.spec,
            narrow_warps=args.narrow_warps,
        )
        try:
            result = launch(
                program,
                grid,
                block,
                launch_args,
                backend="model",
                max_steps=args.max_steps,
                check=args.check,
                model=backend,
                progress=stderr_progress,
                prefill=args.feed == "prefill",
                full_forward=args.full_forward or None,
                shared_mem=args.shared_mem,
            )
        finally:
            end_progress()  # an error message starts on its own line
    else:
        program = lower_ptx(compiled.ptx, _kernel(args, compiled), narrow_warps=args.narrow_warps)
        result = launch(
            program,
            grid,
            block,
            launch_args,
            backend=args.backend,
            max_steps=args.max_steps,
            shared_mem=args.shared_mem,
        )
    if args.trace and args.backend == "model":
        for step in result.model_launch.steps:
            lanes = ",".join(str(lane) for lane in step.lanes)
            shown = " ".join(str(t) for t in step.tokens)
            print(
                f"cta{step.cta} w{step.warp} B{step.block} lanes[{lanes}]: {shown}", file=sys.stderr
            )
    elif args.trace:
        from qwengpu.interp.machine import format_step

        for step in result.trace:
            print(format_step(step), file=sys.stderr)
    run = result.model_launch
    if args.json:
        print(
            json.dumps(
                {
                    "kernel": program.name,
                    "backend": args.backend,
                    "grid": list(grid),
                    "block": list(block),
                    "steps": result.steps,
                    "tokens": result.tokens,
                    "seconds": round(run.seconds, 4) if run else None,
                    "tokens_per_second": round(run.tokens_per_second, 2) if run else None,
                    "feed": args.feed if args.backend == "model" else None,
                    "forward": run.forward if run else None,
                    "checked": result.checked,
                    "args": [_jsonable(a) for a in result.args],
                }
            )
        )
        return 0
    for param, value in zip(program.params, result.args, strict=True):
        print(f"{param.name} = {_jsonable(value)}")
    if run:
        check = ", --check passed" if result.checked else ""
        print(
            f"# {result.steps} steps, {result.tokens} tokens written by the model in "
            f"{run.seconds:.1f} s ({run.tokens_per_second:.1f} tokens/s; {run.prompt_tokens} "
            f"load tokens; {run.forward}){check}",
            file=sys.stderr,
        )
        return 0
    print(f"# {result.steps} steps on the {args.backend} backend", file=sys.stderr)
    return 0


def cmd_calc(args: argparse.Namespace) -> int:
    from qwengpu.chat.calc import Calculator
    from qwengpu.chat.expr import parse

    parse(args.expression)  # a bad expression fails before any model is loaded
    calculator = Calculator(
        args.backend,
        model=args.model,
        dtype=args.dtype,
        base=args.base,
        device=args.device,
        check=args.check,
        prefill=args.feed == "prefill",
        max_steps=args.max_steps,
        progress=_say,
        full_forward=args.full_forward or None,
    )
    result = calculator.evaluate(args.expression)
    if args.json:
        print(json.dumps({**result.as_dict(), "backend": args.backend, "checked": args.check}))
        return 0
    print(result.value)
    if args.backend == "model":
        check = ", --check passed" if args.check else ""
        print(
            f"# {len(result.launches)} launches, {result.tokens} tokens written by the model in "
            f"{result.seconds:.1f} s ({result.tokens_per_second:.1f} tokens/s){check}",
            file=sys.stderr,
        )
    else:
        steps = sum(launch.steps for launch in result.launches)
        print(
            f"# {len(result.launches)} launches, {steps} steps on the interpreter", file=sys.stderr
        )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from qwengpu.circuit import GEOMETRIES
    from qwengpu.machine.model import layer_map, machine_layout

    names = {g.name.removeprefix("qwen3.5-"): g for g in GEOMETRIES.values()}
    if args.geometry not in names:
        raise ArgError(f"--geometry {args.geometry}: choose one of {', '.join(names)}")
    machine = machine_layout(names[args.geometry])  # the schedule: no weights needed
    print(layer_map(machine))
    if args.fields:
        print(machine.compiled.schedule.field_map())
    return 0


def cmd_conform(args: argparse.Namespace) -> int:
    from qwengpu.host.conform import conform_cli

    return conform_cli(args)


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        help="model backend: a checkpoint from `qgpu build`, or 'memory' / 'memory:2b' (the "
        "machine on the 0.8B / 2B geometry and 4 random base layers, built in memory); "
        "default: the cached default checkpoint, built from --base on first use",
    )
    p.add_argument(
        "--base",
        help="the base of the default checkpoint (default: $QWENGPU_BASE or Qwen/Qwen3.5-2B)",
    )
    p.add_argument(
        "--dtype", default="float32", choices=("float32", "bfloat16"), help="model backend dtype"
    )
    p.add_argument("--device", help="model backend device (default: cuda, else mps, else cpu)")
    p.add_argument(
        "--feed",
        default="prefill",
        choices=("prefill", "tokens"),
        help="model backend: the load tokens in one prefill (the chunked DeltaNet path, "
        "default) or one per forward (the recurrent path)",
    )
    p.add_argument(
        "--check", action="store_true", help="replay the model's launch against the interpreter"
    )
    p.add_argument(
        "--full-forward",
        action="store_true",
        help="model backend: run every layer and the whole LM head (default: stop after the "
        "circuit's layers, which decide every launch token: docs/protocol.md)",
    )


def _add_narrow_warps(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--narrow-warps",
        action="store_true",
        help="run warp intrinsics written for CUDA's 32-lane warps with the machine's own "
        "narrower warps (refused by default: the answers can differ from CUDA's; docs/isa.md)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qgpu", description="Run CUDA kernels on the qgpu machine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    compilers = ("auto", "nvrtc", "clang", "nvcc")

    p = sub.add_parser("compile", help="compile a kernel and print its machine listing")
    p.add_argument("file")
    p.add_argument(
        "--kernel", help="kernel name (default: the only one); a template instance: 'k<int>'"
    )
    p.add_argument("--ptx", action="store_true", help="print the PTX")
    p.add_argument("--listing", action="store_true", help="print the machine listing")
    p.add_argument("--compiler", choices=compilers, default="auto")
    _add_narrow_warps(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("inspect", help="print the machine's layer map (memories and ops)")
    p.add_argument("--geometry", default="2b", help="tiny, 0.8b, 2b or 4b (default 2b)")
    p.add_argument("--fields", action="store_true", help="also print every field's dims")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("run", help="compile and launch a kernel")
    p.add_argument("file")
    p.add_argument(
        "--kernel", help="kernel name (default: the only one); a template instance: 'k<int>'"
    )
    p.add_argument("--grid", default="1", help="N or X,Y,Z (default 1)")
    p.add_argument("--block", default="4", help="N or X,Y,Z (default 4)")
    p.add_argument(
        "--arg",
        action="append",
        metavar="SPEC",
        help="argument in parameter order: int32:[1,2,3] (array), int32:[0,1,2,3]+1 (a pointer "
        "1 element into the array) or uint32:7 (scalar)",
    )
    p.add_argument(
        "--backend",
        default="interp",
        choices=("interp", "model"),
        help="interp (the reference interpreter, default) or model (the model writes the launch)",
    )
    _add_model_arguments(p)
    p.add_argument("--max-steps", type=_step_budget, default=None, help="step budget (blocks)")
    p.add_argument(
        "--shared-mem",
        type=_byte_count,
        default=0,
        metavar="BYTES",
        help="dynamic shared memory for `extern __shared__` arrays (CUDA's third launch "
        "parameter; default 0)",
    )
    p.add_argument("--compiler", choices=compilers, default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", action="store_true", help="print every step to stderr")
    _add_narrow_warps(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("calc", help="evaluate an integer expression on the model's GPU")
    p.add_argument("expression", help="numpy notation, e.g. '[1,2,3] @ [4,5,6]' (docs/chat.md)")
    p.add_argument(
        "--backend",
        default="model",
        choices=("model", "interp"),
        help="model (the model runs every launch, default) or interp (the interpreter)",
    )
    _add_model_arguments(p)
    p.add_argument("--max-steps", type=_step_budget, help="each launch's step budget")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_calc)

    from qwengpu.cli.chat import add_chat_arguments, add_eval_arguments, chat_cli, eval_cli

    p = sub.add_parser("chat", help="talk with Qwen, which computes on its own GPU")
    add_chat_arguments(p)
    p.set_defaults(func=chat_cli)

    p = sub.add_parser("eval-chat", help="score the chat on the shipped question set")
    add_eval_arguments(p)
    p.set_defaults(func=eval_cli)

    from qwengpu.model.cli import (
        add_build_arguments,
        add_drift_arguments,
        add_verify_arguments,
        build_cli,
        drift_cli,
        verify_cli,
    )

    p = sub.add_parser("build", help="merge the compiled circuit into a Qwen3.5 checkpoint")
    add_build_arguments(p)
    p.set_defaults(func=build_cli)

    p = sub.add_parser("verify", help="check every file of a checkpoint against its manifest")
    add_verify_arguments(p)
    p.set_defaults(func=verify_cli)

    p = sub.add_parser("drift", help="compare a merged checkpoint's text logits with its base")
    add_drift_arguments(p)
    p.set_defaults(func=drift_cli)

    p = sub.add_parser("conform", help="check the interpreter against a real NVIDIA GPU")
    try:
        from qwengpu.host.conform import add_conform_arguments

        add_conform_arguments(p)
    except ImportError:  # pragma: no cover - conform is part of the package
        pass
    p.set_defaults(func=cmd_conform)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except QgpuError as exc:
        print(f"qgpu: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT
        print("\nqgpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
