"""Run PTX on a real NVIDIA GPU through the CUDA driver API (cuda-bindings).

This is the ground truth the interpreter is checked against (`qgpu conform`). It needs
the optional extra `qwengpu[hardware]` (cuda-bindings>=13.0), an NVIDIA driver and a
device; `gpu_available()` says whether all three are there without raising.

Every driver call of cuda-python returns a tuple `(CUresult, *values)`; `_Api.call`
checks the CUresult and raises `GpuLaunchError` naming the call and the CUDA error.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from qwengpu.errors import ArgError, LaunchError

INSTALL_HINT = "pip install 'qwengpu[hardware]' (cuda-bindings>=13.0)"

# Errors after which the context is unusable ("sticky"); the kernel trapped on the GPU.
TRAP_ERRORS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_LAUNCH_FAILED",
    }
)


class GpuLaunchError(LaunchError):
    """A CUDA driver call failed; `call` and `error_name` say which and how."""

    def __init__(self, call: str, error_name: str, description: str = "") -> None:
        detail = f" ({description})" if description else ""
        super().__init__(f"{call} failed: {error_name}{detail}")
        self.call = call
        self.error_name = error_name
        self.description = description

    @property
    def is_trap(self) -> bool:
        """True when the kernel itself faulted (illegal address, misalignment, trap)."""
        return self.error_name in TRAP_ERRORS


@dataclass(frozen=True)
class GpuInfo:
    """What `gpu_info` reports about device 0."""

    name: str  # e.g. "NVIDIA H200"
    driver: str  # e.g. "13.0"
    sm: str  # e.g. "sm_90"
    count: int  # number of CUDA devices

    def describe(self) -> str:
        return f"{self.name} ({self.sm}, driver {self.driver})"


def _load_driver() -> ModuleType:
    """The driver-API module: cuda-bindings 12.6+/13.x, else the older `cuda.cuda`."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError as exc:
            raise ImportError(f"cuda-bindings is not installed: {INSTALL_HINT}") from exc
    return driver


class _Api:
    """Checked calls into a cuda-python driver module."""

    def __init__(self, drv: ModuleType) -> None:
        self.drv = drv

    def call(self, name: str, *args: Any) -> Any:
        """Call `name`; raise GpuLaunchError unless it returned CUDA_SUCCESS.

        Returns None, the single value, or the tuple of values after the CUresult.
        """
        try:
            result = getattr(self.drv, name)(*args)
        except Exception as exc:  # e.g. libcuda cannot be loaded (cuda.pathfinder)
            raise LaunchError(f"{name}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, tuple):
            result = (result,)
        err = result[0]
        if int(err) != 0:
            raise GpuLaunchError(name, self.error_name(err), self.error_string(err))
        rest = result[1:]
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def quiet(self, name: str, *args: Any) -> GpuLaunchError | None:
        """Call `name` for cleanup: return its error instead of raising it."""
        try:
            self.call(name, *args)
        except GpuLaunchError as exc:
            return exc
        return None

    def error_name(self, err: Any) -> str:
        try:
            res = self.drv.cuGetErrorName(err)
            if int(res[0]) == 0 and res[1]:
                return _text(res[1])
        except Exception:  # naming an error must never fail
            pass
        return str(getattr(err, "name", f"CUresult {int(err)}"))

    def error_string(self, err: Any) -> str:
        try:
            res = self.drv.cuGetErrorString(err)
            if int(res[0]) == 0 and res[1]:
                return _text(res[1])
        except Exception:
            pass
        return ""


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace").strip()
    return str(value)


def _driver_version(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


def gpu_info() -> GpuInfo:
    """Describe device 0; raises ImportError or GpuLaunchError when there is none."""
    api = _Api(_load_driver())
    api.call("cuInit", 0)
    count = int(api.call("cuDeviceGetCount"))
    if count < 1:
        raise GpuLaunchError("cuDeviceGetCount", "CUDA_ERROR_NO_DEVICE", "no CUDA device")
    dev = api.call("cuDeviceGet", 0)
    name = _text(api.call("cuDeviceGetName", 256, dev))
    version = _driver_version(int(api.call("cuDriverGetVersion")))
    attr = api.drv.CUdevice_attribute
    major = int(
        api.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    )
    minor = int(
        api.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    )
    return GpuInfo(name=name, driver=version, sm=f"sm_{major}{minor}", count=count)


def gpu_available() -> tuple[bool, str]:
    """(True, description of device 0) or (False, why not); never raises."""
    try:
        _load_driver()
    except Exception as exc:  # an old cuda-python may fail oddly on import
        return False, str(exc)
    try:
        info = gpu_info()
    except GpuLaunchError as exc:
        if exc.error_name == "CUDA_ERROR_NO_DEVICE":
            return False, f"no CUDA device ({exc})"
        return False, f"CUDA driver unusable: {exc}"
    except Exception as exc:  # libcuda missing: pathfinder/RuntimeError
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        return False, f"NVIDIA driver (libcuda) not loadable: {first}"
    return True, info.describe()


# --- parameters ---------------------------------------------------------------------

_TYPE_BYTES = re.compile(r"^\.[usbf](8|16|32|64)$")


def ptx_param_sizes(ptx: str, entry: str) -> list[int] | None:
    """Byte size of each `.param` of `.entry entry(...)`, or None if it is not found."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.DOTALL)
    if m is None:
        return None
    sizes: list[int] = []
    for decl in m.group(1).split(","):
        tokens = decl.split()
        if not tokens:
            continue
        bits = next((int(t.group(1)) for t in map(_TYPE_BYTES.match, tokens) if t), None)
        if bits is None:
            return None
        count = re.search(r"\[(\d+)\]\s*$", decl)
        sizes.append(bits // 8 * (int(count.group(1)) if count else 1))
    return sizes


@dataclass
class _Param:
    """One launch argument: an array (pointer param) or a scalar (by-value param)."""

    index: int
    host: np.ndarray | None  # C-contiguous array to upload, for a pointer param
    value: np.ndarray | None  # 1-element array holding a scalar's bytes

    @property
    def size(self) -> int:
        return 8 if self.host is not None else int(self.value.nbytes)  # type: ignore[union-attr]


def _pack_arg(index: int, arg: Any, ptx_size: int | None) -> _Param:
    if isinstance(arg, np.ndarray):
        if arg.dtype.hasobject:
            raise ArgError(f"argument #{index + 1}: object arrays cannot go to the GPU")
        return _Param(index, np.ascontiguousarray(arg), None)
    if isinstance(arg, bool | np.bool_):
        raise ArgError(f"argument #{index + 1}: pass a bool as np.int32/np.uint32")
    if isinstance(arg, np.generic) and arg.dtype.kind in "iuf":
        return _Param(index, None, np.array([arg], dtype=arg.dtype))
    if isinstance(arg, int):
        dtype: type[np.generic]
        if ptx_size == 8:
            dtype = np.int64 if arg < 0 else np.uint64
        else:
            dtype = np.int32 if arg < 2**31 else np.uint32
        try:
            return _Param(index, None, np.array([arg], dtype=dtype))
        except OverflowError as exc:
            raise ArgError(f"argument #{index + 1}: {arg} does not fit the parameter") from exc
    raise ArgError(
        f"argument #{index + 1}: expected a numpy array or a numpy scalar (np.int32/np.uint32), "
        f"got {type(arg).__name__}"
    )


def pack_params(ptx: str, entry: str, args: Sequence[Any]) -> list[_Param]:
    """Turn launch arguments into _Params, checking count and sizes against the PTX."""
    sizes = ptx_param_sizes(ptx, entry)
    if sizes is not None and len(sizes) != len(args):
        raise ArgError(f"{entry} takes {len(sizes)} parameters, got {len(args)} arguments")
    params = [_pack_arg(i, a, sizes[i] if sizes else None) for i, a in enumerate(args)]
    if sizes is not None:
        for p, want in zip(params, sizes, strict=True):
            if p.size != want:
                kind = "a pointer (8 bytes)" if p.host is not None else f"{p.size} bytes"
                raise ArgError(
                    f"argument #{p.index + 1}: the kernel wants {want} bytes, got {kind}"
                )
    return params


def _dim3(dims: int | Sequence[int], what: str) -> tuple[int, int, int]:
    d = (dims,) if isinstance(dims, int) else tuple(int(x) for x in dims)
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise ArgError(f"{what} must be 1 to 3 positive sizes, got {dims!r}")
    return (*d, *(1,) * (3 - len(d)))  # type: ignore[return-value]


# --- launch -------------------------------------------------------------------------


def run_on_gpu(
    ptx: str,
    entry: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list,
) -> list:
    """Launch `entry` of `ptx` on device 0 and return the arguments after the kernel.

    A numpy array goes as a device pointer (copied in, and back into a new array of the
    same dtype and shape); a numpy scalar goes by value and comes back unchanged. The
    caller's arrays are not modified. Raises ArgError for unusable arguments and
    GpuLaunchError (a LaunchError) naming the failing driver call and CUDA error.
    """
    try:
        drv = _load_driver()
    except ImportError as exc:
        raise LaunchError(str(exc)) from exc
    api = _Api(drv)
    grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
    params = pack_params(ptx, entry, args)

    api.call("cuInit", 0)
    dev = api.call("cuDeviceGet", 0)
    ctx = api.call("cuDevicePrimaryCtxRetain", dev)
    module: Any = None
    dptrs: list[Any] = []
    trapped = False
    results: list = list(args)
    cleanup_error: GpuLaunchError | None = None
    try:
        api.call("cuCtxSetCurrent", ctx)
        image = ctypes.create_string_buffer(ptx.encode())  # NUL-terminated PTX text
        module = api.call("cuModuleLoadData", ctypes.addressof(image))
        func = api.call("cuModuleGetFunction", module, entry.encode())

        slots: list[np.ndarray] = []  # the values kernelParams points at; kept alive
        devptr: dict[int, Any] = {}
        for p in params:
            if p.host is not None:
                dptr = api.call("cuMemAlloc", max(p.host.nbytes, 1))
                dptrs.append(dptr)
                devptr[p.index] = dptr
                if p.host.nbytes:
                    api.call("cuMemcpyHtoD", dptr, p.host.ctypes.data, p.host.nbytes)
                slots.append(np.array([int(dptr)], dtype=np.uint64))
            else:
                assert p.value is not None
                slots.append(p.value)
        pointers = np.array([s.ctypes.data for s in slots], dtype=np.uint64)  # void*[]
        kernel_params = int(pointers.ctypes.data) if slots else 0

        try:
            api.call("cuLaunchKernel", func, *grid3, *block3, 0, 0, kernel_params, 0)
            api.call("cuCtxSynchronize")
        except GpuLaunchError as exc:
            trapped = exc.is_trap
            raise

        for p in params:
            if p.host is not None:
                out = np.empty_like(p.host)
                if out.nbytes:
                    api.call("cuMemcpyDtoH", out.ctypes.data, devptr[p.index], out.nbytes)
                results[p.index] = out.reshape(args[p.index].shape)
    finally:
        errors = [api.quiet("cuMemFree", d) for d in reversed(dptrs)]
        if module is not None:
            errors.append(api.quiet("cuModuleUnload", module))
        errors.append(api.quiet("cuDevicePrimaryCtxRelease", dev))
        if trapped:  # a sticky error poisons the context: start the next launch afresh
            api.quiet("cuDevicePrimaryCtxReset", dev)
        cleanup_error = next((e for e in errors if e is not None), None)
    if cleanup_error is not None:
        raise cleanup_error
    return results
