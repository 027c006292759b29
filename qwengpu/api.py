"""The Python API, in CuPy's shape: `qwengpu.RawKernel(code, name)(grid, block, args)`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from qwengpu.cuda import compile_cuda, find_entry, parse_ptx
from qwengpu.errors import ArgError
from qwengpu.host.launch import BACKENDS, build_memory, check_geometry, copy_back, dim3
from qwengpu.isa.instr import Program
from qwengpu.isa.spec import DEFAULT_SPEC, MachineSpec
from qwengpu.lower import lower_kernel

if TYPE_CHECKING:
    from qwengpu.interp.machine import Step


def compile(  # noqa: A001 - the CuPy/NVRTC verb
    code: str,
    name: str | None = None,
    *,
    compiler: str = "auto",
    spec: MachineSpec = DEFAULT_SPEC,
    options: Sequence[str] = (),
    filename: str = "kernel.cu",
    narrow_warps: bool = False,
) -> Program:
    """Compile CUDA C++ to PTX and lower kernel `name` (the only one if None) to a Program.
    A template instance (`reduce0<int>`) is instantiated by name (NVRTC). Warp intrinsics
    that assume CUDA's 32-lane warps are refused unless `narrow_warps` (lower.warps)."""
    names = [name] if name is not None and is_name_expression(name) else []
    compiled = compile_cuda(
        code, filename=filename, compiler=compiler, options=options, names=names
    )
    return lower_ptx(
        compiled.ptx, compiled.lowered.get(name, name), spec=spec, narrow_warps=narrow_warps
    )


def is_name_expression(name: str) -> bool:
    """Whether a kernel name needs the compiler to resolve it: a template instance."""
    return "<" in name


def model_spec(model: Any = None, dtype: str = "float32") -> MachineSpec:
    """The MachineSpec of the machine compiled into `model` (as for `launch`); programs
    for the model backend are lowered for it."""
    from qwengpu.host.model_backend import ModelBackend, model_backend

    backend = model if isinstance(model, ModelBackend) else model_backend(model, dtype=dtype)
    return backend.machine.spec


def lower_ptx(
    ptx: str,
    name: str | None = None,
    *,
    spec: MachineSpec = DEFAULT_SPEC,
    narrow_warps: bool = False,
) -> Program:
    module = parse_ptx(ptx)
    if name is None:
        entries = [k for k in module.kernels.values() if k.is_entry]
        if not entries:
            raise ArgError(
                'the source defines no kernel: write one as extern "C" __global__ void name(...)'
            )
        if len(entries) > 1:
            listed = ", ".join(k.name for k in entries)
            raise ArgError(
                f"the source defines {len(entries)} kernels ({listed}); name one (--kernel NAME)"
            )
        kernel = entries[0]
    else:
        kernel = find_entry(module, name)
    return lower_kernel(module, kernel, spec, ptx=ptx, narrow_warps=narrow_warps)


@dataclass
class LaunchResult:
    args: list  # per parameter: the final array, or the scalar passed in
    steps: int  # blocks executed (= EXEC tokens on the model backend)
    trace: list[Step] = field(default_factory=list, repr=False)
    memory: list[int] = field(default_factory=list, repr=False)
    tokens: int = 0  # tokens the model wrote (model backend)
    checked: bool = False  # replayed against the interpreter (--check)
    model_launch: Any = field(default=None, repr=False)  # host.model_backend.ModelLaunch


def launch(
    program: Program,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    args: Sequence[object],
    *,
    backend: str = "interp",
    max_steps: int | None = None,
    trace: bool = True,
    check: bool = False,
    dtype: str = "float32",
    model: Any = None,
    progress: Any = None,
    prefill: bool = True,
    full_forward: bool | None = None,
    shared_mem: int = 0,
) -> LaunchResult:
    """Run one launch; arrays in `args` are updated in place with their final contents.
    `shared_mem`: bytes of dynamic shared memory (`extern __shared__`), CUDA's third
    launch parameter.

    backend "model": the merged model writes the launch. `model` is a ModelBackend, a
    checkpoint directory from `qgpu build`, "memory" (the machine and random base layers
    built in memory) or None (the default checkpoint, built on first use); `dtype` is its
    float32 or bfloat16; `prefill` feeds the load tokens in one forward (the chunked
    DeltaNet path), False one per forward (the recurrent path); `full_forward` True runs
    every layer of the model, False stops after the circuit's (early exit, exact where the
    checkpoint's bound holds: docs/protocol.md), None the backend's default (early exit
    where proven). `check` replays the launch against the interpreter."""
    if backend not in BACKENDS:
        raise ArgError(f"unknown backend '{backend}'; available: {', '.join(BACKENDS)}")
    if backend == "model":
        feeding = {"prefill": prefill, "full_forward": full_forward, "shared_mem": shared_mem}
        return _launch_on_model(
            program, grid, block, args, max_steps, check, dtype, model, progress, feeding
        )
    from qwengpu.interp.machine import LaunchGeometry, run_program

    grid3, block3 = dim3(grid, "grid"), dim3(block, "block")
    check_geometry(program, grid3, block3)
    image = build_memory(program, args, shared_mem)
    state = run_program(
        program,
        LaunchGeometry(grid3, block3),
        image.words,
        max_steps=max_steps,
        record_trace=trace,
    )
    copy_back(image, state.memory)
    return LaunchResult(list(args), state.steps, state.trace, state.memory)


def _launch_on_model(program, grid, block, args, max_steps, check, dtype, model, progress, feeding):
    from qwengpu.host.model_backend import ModelBackend, model_backend

    backend = model if isinstance(model, ModelBackend) else model_backend(model, dtype=dtype)
    run = backend.launch(
        program, grid, block, args, max_steps=max_steps, progress=progress, **feeding
    )
    checked = False
    if check:
        from qwengpu.host.check import check_launch

        check_launch(program, run)
        checked = True
    return LaunchResult(list(args), len(run.steps), [], run.words, len(run.generated), checked, run)


class RawKernel:
    """A CUDA kernel compiled for the qgpu machine, launched like `cupy.RawKernel`."""

    def __init__(
        self,
        code: str,
        name: str,
        *,
        compiler: str = "auto",
        spec: MachineSpec | None = None,
        backend: str = "interp",
        options: Sequence[str] = (),
        dtype: str = "float32",
        model: Any = None,
        prefill: bool = True,
        narrow_warps: bool = False,
    ) -> None:
        self.code = code
        self.name = name
        self.compiler = compiler
        self._spec = spec
        self.backend = backend
        self.dtype = dtype
        self.model = model
        self.prefill = prefill  # the model backend's feeding (api.launch)
        self.options = tuple(options)
        self.narrow_warps = narrow_warps  # run 32-lane warp code with the machine's warps

    @cached_property
    def spec(self) -> MachineSpec:
        """The given spec, else the model's machine (backend "model"), else the default."""
        if self._spec is not None:
            return self._spec
        return model_spec(self.model, self.dtype) if self.backend == "model" else DEFAULT_SPEC

    @cached_property
    def program(self) -> Program:
        return compile(
            self.code,
            self.name,
            compiler=self.compiler,
            spec=self.spec,
            options=self.options,
            narrow_warps=self.narrow_warps,
        )

    def __call__(
        self,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[object],
        *,
        max_steps: int | None = None,
        shared_mem: int = 0,
    ) -> LaunchResult:
        return launch(
            self.program,
            grid,
            block,
            args,
            backend=self.backend,
            max_steps=max_steps,
            dtype=self.dtype,
            model=self.model,
            prefill=self.prefill,
            shared_mem=shared_mem,
        )
