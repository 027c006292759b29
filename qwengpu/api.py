"""The Python API, in CuPy's shape: `qwengpu.RawKernel(code, name)(grid, block, args)`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from qwengpu.cuda import compile_cuda, find_entry, parse_ptx
from qwengpu.errors import ArgError
from qwengpu.host.launch import BACKENDS, build_memory, check_geometry, copy_back, dim3
from qwengpu.interp.machine import LaunchGeometry, Step, run_program
from qwengpu.isa.instr import Program
from qwengpu.isa.spec import DEFAULT_SPEC, MachineSpec
from qwengpu.lower import lower_kernel


def compile(  # noqa: A001 - the CuPy/NVRTC verb
    code: str,
    name: str | None = None,
    *,
    compiler: str = "auto",
    spec: MachineSpec = DEFAULT_SPEC,
    options: Sequence[str] = (),
    filename: str = "kernel.cu",
) -> Program:
    """Compile CUDA C++ to PTX and lower kernel `name` (the only one if None) to a Program."""
    ptx = compile_cuda(code, filename=filename, compiler=compiler, options=options).ptx
    return lower_ptx(ptx, name, spec=spec)


def lower_ptx(ptx: str, name: str | None = None, *, spec: MachineSpec = DEFAULT_SPEC) -> Program:
    module = parse_ptx(ptx)
    if name is None:
        entries = [k for k in module.kernels.values() if k.is_entry]
        if len(entries) != 1:
            listed = ", ".join(k.name for k in entries) or "none"
            raise ArgError(f"the source defines {len(entries)} kernels ({listed}); name one")
        kernel = entries[0]
    else:
        kernel = find_entry(module, name)
    return lower_kernel(module, kernel, spec, ptx=ptx)


@dataclass
class LaunchResult:
    args: list  # per parameter: the final array, or the scalar passed in
    steps: int  # blocks executed (= EXEC tokens on the model backend)
    trace: list[Step] = field(default_factory=list, repr=False)
    memory: list[int] = field(default_factory=list, repr=False)


def launch(
    program: Program,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    args: Sequence[object],
    *,
    backend: str = "interp",
    max_steps: int | None = None,
    trace: bool = True,
) -> LaunchResult:
    """Run one launch; arrays in `args` are updated in place with their final contents."""
    if backend not in BACKENDS:
        raise ArgError(f"unknown backend '{backend}'; available: {', '.join(BACKENDS)}")
    grid3, block3 = dim3(grid, "grid"), dim3(block, "block")
    check_geometry(program, grid3, block3)
    image = build_memory(program, args)
    state = run_program(
        program,
        LaunchGeometry(grid3, block3),
        image.words,
        max_steps=max_steps,
        record_trace=trace,
    )
    copy_back(image, state.memory)
    return LaunchResult(list(args), state.steps, state.trace, state.memory)


class RawKernel:
    """A CUDA kernel compiled for the qgpu machine, launched like `cupy.RawKernel`."""

    def __init__(
        self,
        code: str,
        name: str,
        *,
        compiler: str = "auto",
        spec: MachineSpec = DEFAULT_SPEC,
        backend: str = "interp",
        options: Sequence[str] = (),
    ) -> None:
        self.code = code
        self.name = name
        self.compiler = compiler
        self.spec = spec
        self.backend = backend
        self.options = tuple(options)

    @cached_property
    def program(self) -> Program:
        return compile(
            self.code, self.name, compiler=self.compiler, spec=self.spec, options=self.options
        )

    def __call__(
        self,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[object],
        *,
        max_steps: int | None = None,
    ) -> LaunchResult:
        return launch(self.program, grid, block, args, backend=self.backend, max_steps=max_steps)
