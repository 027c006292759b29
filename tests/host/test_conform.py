"""Hardware conformance without hardware: a fake CUDA driver, fake GPU runs, replay."""

from __future__ import annotations

import argparse
import ctypes
import enum
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwengpu
from qwengpu.errors import ArgError, LaunchError, TrapError
from qwengpu.host import conform as cf
from qwengpu.host import hardware as hw

# --- a fake cuda-python driver module -----------------------------------------------

ENTRY = "_Z5add_kPiPKiii"
PTX = textwrap.dedent(
    f"""\
    .version 8.5
    .target sm_52
    .address_size 64

    .visible .entry {ENTRY}(
    \t.param .u64 .ptr .global .align 1 {ENTRY}_param_0,
    \t.param .u64 .ptr .global .align 1 {ENTRY}_param_1,
    \t.param .u32 {ENTRY}_param_2,
    \t.param .u32 {ENTRY}_param_3
    )
    {{
    \tret;
    }}
    """
)


class FakeResult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_PTX = 218
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class FakeAttr(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class DevPtr:
    """Like CUdeviceptr: only int() gives the address."""

    def __init__(self, addr: int) -> None:
        self.addr = addr

    def __int__(self) -> int:
        return self.addr


class FakeDriver:
    """Records every call; device memory is a dict of bytearrays; the kernel is Python."""

    CUresult = FakeResult
    CUdevice_attribute = FakeAttr

    def __init__(self, param_sizes: list[int], fail: dict[str, FakeResult] | None = None) -> None:
        self.param_sizes = param_sizes
        self.fail = fail or {}
        self.calls: list[str] = []
        self.mem: dict[int, bytearray] = {}
        self.allocated: list[int] = []
        self.freed: list[int] = []
        self.next_addr = 0x7F00_0000_0000
        self.loaded_ptx: bytes | None = None
        self.function: bytes | None = None
        self.launch: dict[str, Any] = {}

    def _r(self, name: str, *values: Any) -> tuple:
        self.calls.append(name)
        if name in self.fail:
            return (self.fail[name], *(None for _ in values))
        return (FakeResult.CUDA_SUCCESS, *values)

    def cuGetErrorName(self, err: FakeResult) -> tuple:
        return (FakeResult.CUDA_SUCCESS, FakeResult(err).name.encode())

    def cuGetErrorString(self, err: FakeResult) -> tuple:
        return (FakeResult.CUDA_SUCCESS, b"fake description")

    def cuInit(self, flags: int) -> tuple:
        return self._r("cuInit")

    def cuDeviceGetCount(self) -> tuple:
        return self._r("cuDeviceGetCount", 1)

    def cuDeviceGet(self, ordinal: int) -> tuple:
        return self._r("cuDeviceGet", "dev0")

    def cuDeviceGetName(self, length: int, dev: str) -> tuple:
        return self._r("cuDeviceGetName", b"Fake GPU\0\0\0\0")

    def cuDriverGetVersion(self) -> tuple:
        return self._r("cuDriverGetVersion", 13000)

    def cuDeviceGetAttribute(self, attr: FakeAttr, dev: str) -> tuple:
        return self._r("cuDeviceGetAttribute", 9 if attr.name.endswith("MAJOR") else 0)

    def cuDevicePrimaryCtxRetain(self, dev: str) -> tuple:
        return self._r("cuDevicePrimaryCtxRetain", "ctx0")

    def cuCtxSetCurrent(self, ctx: str) -> tuple:
        return self._r("cuCtxSetCurrent")

    def cuModuleLoadData(self, image: int) -> tuple:
        self.loaded_ptx = ctypes.string_at(image)  # reads up to the NUL
        return self._r("cuModuleLoadData", "mod0")

    def cuModuleGetFunction(self, module: str, name: bytes) -> tuple:
        self.function = name
        return self._r("cuModuleGetFunction", "func0")

    def cuMemAlloc(self, size: int) -> tuple:
        addr = self.next_addr
        self.next_addr += 0x1000
        self.mem[addr] = bytearray(size)
        res = self._r("cuMemAlloc", DevPtr(addr))
        if res[0] == FakeResult.CUDA_SUCCESS:
            self.allocated.append(addr)
        return res

    def cuMemcpyHtoD(self, dst: DevPtr, src: int, size: int) -> tuple:
        self.mem[int(dst)][:size] = ctypes.string_at(src, size)
        return self._r("cuMemcpyHtoD")

    def cuMemcpyDtoH(self, dst: int, src: DevPtr, size: int) -> tuple:
        ctypes.memmove(dst, bytes(self.mem[int(src)][:size]), size)
        return self._r("cuMemcpyDtoH")

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) -> tuple:
        assert isinstance(params, int) and extra == 0 and shmem == 0
        raw = []
        for i, size in enumerate(self.param_sizes):
            ptr = ctypes.c_uint64.from_address(params + 8 * i).value
            raw.append(ctypes.string_at(ptr, size))
        self.launch = {"f": f, "grid": (gx, gy, gz), "block": (bx, by, bz), "raw": raw}
        res = self._r("cuLaunchKernel")
        if res[0] == FakeResult.CUDA_SUCCESS:
            self._add_k(raw)
        return res

    def _add_k(self, raw: list[bytes]) -> None:
        """out[i] = a[i] + k for i < n."""
        out_p, a_p = (int.from_bytes(r, "little") for r in raw[:2])
        n = int.from_bytes(raw[2], "little", signed=True)
        k = int.from_bytes(raw[3], "little", signed=True)
        a = np.frombuffer(bytes(self.mem[a_p]), dtype=np.int32)[:n]
        out = np.frombuffer(self.mem[out_p], dtype=np.int32)
        out[:n] = a + np.int32(k)

    def cuCtxSynchronize(self) -> tuple:
        return self._r("cuCtxSynchronize")

    def cuMemFree(self, ptr: DevPtr) -> tuple:
        self.freed.append(int(ptr))
        return self._r("cuMemFree")

    def cuModuleUnload(self, module: str) -> tuple:
        return self._r("cuModuleUnload")

    def cuDevicePrimaryCtxRelease(self, dev: str) -> tuple:
        return self._r("cuDevicePrimaryCtxRelease")

    def cuDevicePrimaryCtxReset(self, dev: str) -> tuple:
        return self._r("cuDevicePrimaryCtxReset")


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeDriver]:
    def install(fail: dict[str, FakeResult] | None = None) -> FakeDriver:
        drv = FakeDriver([8, 8, 4, 4], fail)
        monkeypatch.setattr(hw, "_load_driver", lambda: drv)
        return drv

    return install


def add_k_args(n: int = 8, k: int = 5) -> list:
    return [np.zeros(n, np.int32), np.arange(n, dtype=np.int32) - 3, np.int32(n), np.int32(k)]


# --- gpu_available -------------------------------------------------------------------


def test_gpu_available_reports_a_reason_without_raising() -> None:
    ok, reason = hw.gpu_available()
    assert isinstance(ok, bool) and reason


def test_gpu_available_false_without_cuda_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError(f"cuda-bindings is not installed: {hw.INSTALL_HINT}")

    monkeypatch.setattr(hw, "_load_driver", missing)
    ok, reason = hw.gpu_available()
    assert not ok and "cuda-bindings" in reason


def test_gpu_available_false_without_libcuda(monkeypatch: pytest.MonkeyPatch, fake_driver) -> None:
    drv = fake_driver()

    def no_lib(flags: int) -> tuple:
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found...')

    monkeypatch.setattr(drv, "cuInit", no_lib)
    ok, reason = hw.gpu_available()
    assert not ok and "libcuda" in reason
    with pytest.raises(LaunchError, match="cuInit: RuntimeError"):
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), add_k_args())


def test_gpu_available_false_without_device(fake_driver) -> None:
    fake_driver({"cuInit": FakeResult.CUDA_ERROR_NO_DEVICE})
    ok, reason = hw.gpu_available()
    assert not ok and "CUDA_ERROR_NO_DEVICE" in reason and "cuInit" in reason


def test_gpu_available_true_describes_device(fake_driver) -> None:
    fake_driver()
    assert hw.gpu_available() == (True, "Fake GPU (sm_90, driver 13.0)")
    assert hw.gpu_info() == hw.GpuInfo("Fake GPU", "13.0", "sm_90", 1)


# --- run_on_gpu with the fake driver ------------------------------------------------


def test_run_on_gpu_packs_params_and_copies_back(fake_driver) -> None:
    drv = fake_driver()
    args = add_k_args()
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    res = hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), args)

    np.testing.assert_array_equal(res[0], np.arange(8, dtype=np.int32) + 2)
    np.testing.assert_array_equal(res[1], before[1])
    assert res[0].dtype == np.int32 and res[2] is args[2] and res[3] is args[3]
    np.testing.assert_array_equal(args[0], before[0])  # the caller's arrays are untouched
    assert drv.loaded_ptx == PTX.encode() and drv.function == ENTRY.encode()
    raw = drv.launch["raw"]
    assert [int.from_bytes(r, "little") for r in raw[:2]] == drv.allocated
    assert raw[2:] == [(8).to_bytes(4, "little"), (5).to_bytes(4, "little")]
    assert drv.launch["grid"] == (1, 1, 1) and drv.launch["block"] == (8, 1, 1)
    assert drv.calls == [
        "cuInit",
        "cuDeviceGet",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuMemAlloc",
        "cuMemcpyHtoD",
        "cuMemAlloc",
        "cuMemcpyHtoD",
        "cuLaunchKernel",
        "cuCtxSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH",
        "cuMemFree",
        "cuMemFree",
        "cuModuleUnload",
        "cuDevicePrimaryCtxRelease",
    ]
    assert sorted(drv.freed) == sorted(drv.allocated)


def test_run_on_gpu_scalar_bytes(fake_driver) -> None:
    drv = fake_driver()
    args = add_k_args(k=-2)
    args[3] = np.uint32(0xFFFF_FFFE)  # the same bits as -2
    res = hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), args)
    assert drv.launch["raw"][3] == b"\xfe\xff\xff\xff"
    np.testing.assert_array_equal(res[0], np.arange(8, dtype=np.int32) - 5)
    args[3] = -2  # a plain int goes as the PTX parameter's size
    hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), args)
    assert drv.launch["raw"][3] == b"\xfe\xff\xff\xff"


@pytest.mark.parametrize(
    "call",
    [
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuMemAlloc",
        "cuMemcpyHtoD",
        "cuLaunchKernel",
        "cuCtxSynchronize",
        "cuMemcpyDtoH",
    ],
)
def test_run_on_gpu_error_names_call_and_frees(fake_driver, call: str) -> None:
    drv = fake_driver({call: FakeResult.CUDA_ERROR_INVALID_VALUE})
    with pytest.raises(LaunchError, match=f"{call} failed: CUDA_ERROR_INVALID_VALUE") as info:
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), add_k_args())
    assert isinstance(info.value, hw.GpuLaunchError)
    assert info.value.call == call and not info.value.is_trap
    assert sorted(drv.freed) == sorted(drv.allocated)
    assert drv.calls.count("cuDevicePrimaryCtxRelease") == 1
    loaded = call != "cuModuleLoadData"
    assert drv.calls.count("cuModuleUnload") == int(loaded)
    assert "cuDevicePrimaryCtxReset" not in drv.calls


def test_run_on_gpu_trap_resets_context(fake_driver) -> None:
    drv = fake_driver(
        {
            "cuCtxSynchronize": FakeResult.CUDA_ERROR_ILLEGAL_ADDRESS,
            "cuMemFree": FakeResult.CUDA_ERROR_ILLEGAL_ADDRESS,  # sticky: cleanup fails too
        }
    )
    with pytest.raises(hw.GpuLaunchError) as info:
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), add_k_args())
    assert info.value.call == "cuCtxSynchronize" and info.value.is_trap
    assert sorted(drv.freed) == sorted(drv.allocated)
    assert drv.calls[-2:] == ["cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset"]


def test_run_on_gpu_cleanup_error_is_raised(fake_driver) -> None:
    drv = fake_driver({"cuModuleUnload": FakeResult.CUDA_ERROR_INVALID_VALUE})
    with pytest.raises(hw.GpuLaunchError, match="cuModuleUnload"):
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), add_k_args())
    assert drv.calls[-1] == "cuDevicePrimaryCtxRelease"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (add_k_args()[:3], "takes 4 parameters, got 3"),
        ([*add_k_args()[:3], np.int64(5)], "argument #4: the kernel wants 4 bytes"),
        ([*add_k_args()[:2], np.zeros(2, np.int32), np.int32(1)], "argument #3: the kernel wants"),
        ([*add_k_args()[:3], 1.5], "argument #4: expected a numpy array"),
        ([*add_k_args()[:3], True], "argument #4: pass a bool"),
    ],
)
def test_run_on_gpu_bad_args_before_any_call(fake_driver, args: list, message: str) -> None:
    drv = fake_driver()
    with pytest.raises(ArgError, match=message):
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (8, 1, 1), args)
    assert drv.calls == []


def test_run_on_gpu_without_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError(f"cuda-bindings is not installed: {hw.INSTALL_HINT}")

    monkeypatch.setattr(hw, "_load_driver", missing)
    with pytest.raises(LaunchError, match="cuda-bindings"):
        hw.run_on_gpu(PTX, ENTRY, (1, 1, 1), (1, 1, 1), add_k_args())


def test_ptx_param_sizes() -> None:
    assert hw.ptx_param_sizes(PTX, ENTRY) == [8, 8, 4, 4]
    ptx = ".visible .entry f(\n .param .align 4 .b8 f_param_0[12],\n .param .u16 f_param_1\n)\n{}"
    assert hw.ptx_param_sizes(ptx, "f") == [12, 2]
    assert hw.ptx_param_sizes(".entry g()\n{}", "g") == []
    assert hw.ptx_param_sizes(PTX, "missing") is None


# --- conform: a tiny suite in tmp_path ------------------------------------------------

SUITE = """\
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    kernel: str
    grid: tuple
    block: tuple
    make_args: Callable
    oracle: Callable
    tags: tuple = ()
    hardware_defined: bool = False


def make_args(rng):
    n = 24
    return [np.zeros(n, np.int32), rng.integers(-99, 99, n, dtype=np.int32), np.int32(n),
            np.int32(7)]


def oracle(args):
    out, a, n, k = args
    return [a + k, a, n, k]


CASES = [
    Case(name, "add_k.cu", "add_k", (2, 1, 1), (16, 1, 1), make_args, oracle)
    for name in NAMES
]


def load_source(case):
    return (HERE / case.file).read_text()
"""

SOURCE = """\
__global__ void add_k(int *out, const int *a, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + k;
}
"""


def write_suite(tmp_path: Path, names: list[str]) -> Path:
    (tmp_path / "add_k.cu").write_text(SOURCE)
    suite = tmp_path / "cases.py"
    suite.write_text(SUITE.replace("NAMES", repr(names)))
    return suite


def py_add_k(grid: tuple, block: tuple, args: list) -> None:
    out, a, n, k = args
    threads = grid[0] * block[0]
    m = min(int(n), threads)
    out[:m] = a[:m] + k


class FakeRawKernel:
    """Stands in for qwengpu.RawKernel: runs add_k in Python, writes arrays in place."""

    bug_at: int | None = None
    trap = False
    specs: list[Any] = []

    def __init__(self, source: str, kernel: str, **kw: Any) -> None:
        assert kernel == "add_k" and "add_k" in source and set(kw) <= {"spec"}
        FakeRawKernel.specs.append(kw.get("spec"))

    def __call__(self, grid: tuple, block: tuple, args: list) -> None:
        if FakeRawKernel.trap:
            raise TrapError("illegal address 0x0")
        py_add_k(grid, block, args)
        if FakeRawKernel.bug_at is not None:
            args[0][FakeRawKernel.bug_at] += 1


@pytest.fixture
def fake_interp(monkeypatch: pytest.MonkeyPatch) -> type[FakeRawKernel]:
    monkeypatch.setattr(qwengpu, "RawKernel", FakeRawKernel, raising=False)
    monkeypatch.setattr(FakeRawKernel, "bug_at", None)
    monkeypatch.setattr(FakeRawKernel, "trap", False)
    monkeypatch.setattr(FakeRawKernel, "specs", [])
    return FakeRawKernel


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hw, "gpu_available", lambda: (False, "test: no GPU"))


def hand_recording(suite: Path, tamper: dict[str, int], stale: tuple[str, ...] = ()) -> dict:
    """A recording as a GPU would have made it (outputs = the oracle), some tampered."""
    module = cf.load_suite(suite)
    data: dict[str, Any] = {}
    for case in module.CASES:
        inputs = cf.case_args(case)
        outputs = case.oracle([a.copy() if isinstance(a, np.ndarray) else a for a in inputs])
        if case.name in tamper:
            outputs[0][tamper[case.name]] += 100
        source = module.load_source(case) + ("// edited\n" if case.name in stale else "")
        data[case.name] = {
            "grid": [2, 1, 1],
            "block": [16, 1, 1],
            "kernel": "add_k",
            "source_sha256": cf.source_digest(source),
            "inputs": [cf.encode_value(v) for v in inputs],
            "outputs": [cf.encode_value(v) for v in outputs],
            "gpu": "NVIDIA H200",
            "sm": "sm_90",
            "driver": "13.0",
        }
    return data


def test_conform_skips_without_gpu_and_recording(tmp_path: Path, no_gpu, capsys) -> None:
    suite = write_suite(tmp_path, ["a"])
    report = cf.conform(suite, tmp_path / "none.json")
    assert report.mode == "skipped" and not report.results
    assert report.exit_code == cf.NOTHING_CHECKED != 0  # nothing checked is not a pass
    assert "test: no GPU" in report.message and "none.json" in report.message

    parser = argparse.ArgumentParser()
    cf.add_conform_arguments(parser)
    ns = parser.parse_args(["--suite", str(suite), "--out", str(tmp_path / "none.json")])
    assert cf.conform_cli(ns) == cf.NOTHING_CHECKED
    assert "skipped" in capsys.readouterr().out
    assert not (tmp_path / "none.json").exists()


def test_conform_missing_suite_is_an_error(tmp_path: Path, no_gpu, capsys) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text("{}")
    assert cf.main(["--suite", str(tmp_path / "nope.py"), "--out", str(rec)]) == 2
    assert "suite not found" in capsys.readouterr().err


def test_replay_detects_match_and_mismatch(tmp_path: Path, no_gpu, fake_interp, capsys) -> None:
    suite = write_suite(tmp_path, ["good", "bad", "edited", "new"])
    data = hand_recording(suite, tamper={"bad": 3}, stale=("edited",))
    del data["new"]
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(data))

    report = cf.conform(suite, rec)
    assert report.mode == "replay" and "NVIDIA H200" in report.device
    by = {r.name: r for r in report.results}
    assert by["good"].status == "match" and by["good"].oracle == "match"
    assert by["bad"].status == "mismatch" and "arg 0 [3]" in by["bad"].detail
    assert by["bad"].oracle == "mismatch"
    assert by["edited"].status == "stale" and by["new"].status == "unrecorded"
    assert report.exit_code == 1
    assert rec.read_text() == json.dumps(data)  # replay never rewrites the recording

    fake_interp.bug_at = 0
    report = cf.conform(suite, rec, only=["good"])
    [only] = report.results
    assert only.status == "mismatch"
    assert only.detail.startswith("arg 0 [0]: recorded GPU") and "interpreter" in only.detail

    ns = argparse.Namespace(suite=suite, out=rec, replay=True, json=True, case=["good"])
    assert cf.conform_cli(ns) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "replay" and out["results"][0]["status"] == "mismatch"


def test_replay_uses_the_suite_spec(tmp_path: Path, no_gpu, fake_interp) -> None:
    suite = write_suite(tmp_path, ["s"])
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(hand_recording(suite, tamper={})))
    cf.conform(suite, rec)
    with suite.open("a") as f:
        f.write("\nSPEC = 'wide'\n")
    [r] = cf.conform(suite, rec).results
    assert r.status == "match" and fake_interp.specs == [None, "wide"]


def test_replay_trap_recording(tmp_path: Path, no_gpu, fake_interp) -> None:
    suite = write_suite(tmp_path, ["t"])
    data = hand_recording(suite, tamper={})
    data["t"].update(outputs=None, trap="CUDA_ERROR_ILLEGAL_ADDRESS")
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(data))
    [r] = cf.conform(suite, rec).results
    assert r.status == "mismatch" and "recorded GPU trapped" in r.detail
    fake_interp.trap = True
    [r] = cf.conform(suite, rec).results
    assert r.status == "match" and r.oracle == ""


def fake_gpu(monkeypatch: pytest.MonkeyPatch, trap: bool = False) -> list[str]:
    """Pretend there is a GPU: compile and run_on_gpu are replaced by Python."""
    ran: list[str] = []
    info = hw.GpuInfo("Fake GPU", "13.0", "sm_90", 1)
    monkeypatch.setattr(hw, "gpu_available", lambda: (True, info.describe()))
    monkeypatch.setattr(hw, "gpu_info", lambda: info)
    monkeypatch.setattr(cf, "compile_for_gpu", lambda source, kernel: (PTX, ENTRY))

    def run(ptx: str, entry: str, grid: tuple, block: tuple, args: list) -> list:
        assert entry == ENTRY and grid == (2, 1, 1) and block == (16, 1, 1)
        ran.append(entry)
        if trap:
            raise hw.GpuLaunchError("cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
        py_add_k(grid, block, args)
        return args

    monkeypatch.setattr(hw, "run_on_gpu", run)
    return ran


def test_gpu_mode_records_compares_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_interp
) -> None:
    suite = write_suite(tmp_path, ["one", "two"])
    rec = tmp_path / "sub" / "rec.json"
    rec.parent.mkdir()
    rec.write_text(json.dumps({"removed": {}, "two": {"old": True}}))
    ran = fake_gpu(monkeypatch)

    report = cf.conform(suite, rec, only=["one"])
    assert ran == [ENTRY] and report.mode == "gpu" and report.exit_code == 0
    assert [(r.name, r.status, r.oracle) for r in report.results] == [("one", "match", "match")]
    data = json.loads(rec.read_text())
    assert sorted(data) == ["one", "two"] and data["two"] == {"old": True}
    one = data["one"]
    assert one["gpu"] == "Fake GPU" and one["driver"] == "13.0" and one["grid"] == [2, 1, 1]
    assert one["entry"] == ENTRY and "trap" not in one
    inputs = [cf.decode_value(v) for v in one["inputs"]]
    outputs = [cf.decode_value(v) for v in one["outputs"]]
    np.testing.assert_array_equal(outputs[0], inputs[1] + 7)
    assert outputs[3] == np.int32(7) and type(outputs[3]) is np.int32
    assert list(tmp_path.joinpath("sub").iterdir()) == [rec]  # no temp file left behind

    text = rec.read_text()
    cf.conform(suite, rec, only=["one"])
    assert rec.read_text() == text  # stable formatting
    assert text.endswith("}\n") and '"data": [' in text

    fake_interp.bug_at = 5
    [r] = cf.conform(suite, rec, only=["one"]).results
    assert r.status == "mismatch" and r.detail.startswith("arg 0 [5]: GPU")

    fake_interp.bug_at = None
    monkeypatch.setattr(hw, "gpu_available", lambda: (False, "gone"))
    [r] = cf.conform(suite, rec, only=["one"]).results
    assert r.status == "match"


def test_gpu_mode_trap_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_interp
) -> None:
    suite = write_suite(tmp_path, ["t"])
    rec = tmp_path / "rec.json"
    fake_gpu(monkeypatch, trap=True)
    [r] = cf.conform(suite, rec).results
    assert r.status == "mismatch" and "GPU trapped (CUDA_ERROR_ILLEGAL_ADDRESS)" in r.detail
    assert json.loads(rec.read_text())["t"]["trap"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    fake_interp.trap = True
    [r] = cf.conform(suite, rec).results
    assert r.status == "match"

    def broken(source: str, kernel: str) -> tuple[str, str]:
        raise qwengpu.errors.CompileError("add_k.cu:1: error: nope")

    monkeypatch.setattr(cf, "compile_for_gpu", broken)
    report = cf.conform(suite, rec, record=False)
    [r] = report.results
    assert r.status == "error" and "CompileError" in r.detail and report.exit_code == 1
    assert "ERROR" in report.format_text()


def test_gpu_mode_through_fake_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_driver, fake_interp
) -> None:
    drv = fake_driver()
    monkeypatch.setattr(cf, "compile_for_gpu", lambda source, kernel: (PTX, ENTRY))
    suite = write_suite(tmp_path, ["one"])
    rec = tmp_path / "rec.json"
    report = cf.conform(suite, rec)
    assert report.mode == "gpu" and report.device == "Fake GPU (sm_90, driver 13.0)"
    assert [(r.status, r.oracle) for r in report.results] == [("match", "match")]
    assert json.loads(rec.read_text())["one"]["sm"] == "sm_90"
    assert drv.allocated and sorted(drv.freed) == sorted(drv.allocated)


def test_first_difference_formats() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = a.copy()
    b[1, 2] = -1
    diff = cf.first_difference([a], [b], ("GPU", "interpreter"))
    assert diff == "arg 0 [1, 2]: GPU 5 (0x5), interpreter -1 (0xffffffff) (1 of 6 differ)"
    assert cf.first_difference([a, np.int32(1)], [a, np.int32(1)], ("x", "y")) is None
    assert (
        cf.first_difference([np.int32(1)], [np.int32(2)], ("x", "y"))
        == "arg 0: x 1 (0x1), y 2 (0x2)"
    )


# --- the real interpreter, once it exists -------------------------------------------


def test_replay_with_real_interpreter(tmp_path: Path, no_gpu) -> None:
    suite = write_suite(tmp_path, ["good", "bad"])
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(hand_recording(suite, tamper={"bad": 23})))
    by = {r.name: r for r in cf.conform(suite, rec).results}
    assert by["good"].status == "match", by["good"].detail
    assert by["bad"].status == "mismatch" and "arg 0 [23]" in by["bad"].detail
