"""The driver half of the host: lay out a launch's arguments in machine memory, run it on a
backend, copy the arrays back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qwengpu.errors import ArgError, ResourceError
from qwengpu.isa.instr import Program
from qwengpu.isa.spec import WORD_BYTES, WORD_MASK
from qwengpu.lower.warps import NARROW_WARPS_HINT

Dim3 = tuple[int, int, int]
BACKENDS = ("interp", "model")
INT32_MIN = -(1 << 31)


def _whole(value: object) -> bool:
    """An int (numpy's too), not a bool: what a CUDA dimension may be given as."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def dim3(value: int | Sequence[int], what: str) -> Dim3:
    """Normalise a CUDA-style dimension: an int, or a tuple, list or array of 1 to 3 ints.
    Anything else (a string, a float, None, a bool) is refused, never reinterpreted: "12"
    is not (1, 2) nor 2.7 a 2."""
    sequence = isinstance(value, tuple | list | np.ndarray)
    dims = tuple(value) if sequence else (value,)
    if not (sequence or _whole(value)) or not all(_whole(d) for d in dims):
        raise ArgError(f"{what} must be an int or 1 to 3 ints, got {value!r}")
    if not 1 <= len(dims) <= 3:
        raise ArgError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if any(d < 1 for d in dims):
        raise ArgError(f"{what} dimensions must be >= 1, got {dims}")
    return dims  # type: ignore[return-value]


@dataclass(frozen=True)
class ArraySlot:
    """Where one array argument lives in machine memory."""

    param: int  # index in the argument list
    word: int  # first word
    words: int
    array: np.ndarray  # the caller's array, updated in place after the launch


@dataclass(frozen=True)
class MemoryImage:
    words: list[int]
    arrays: tuple[ArraySlot, ...]


def check_geometry(program: Program, grid: Dim3, block: Dim3) -> None:
    spec = program.spec
    threads = block[0] * block[1] * block[2]
    if threads > spec.threads_per_cta:
        raise ResourceError(
            f"block {block} has {threads} threads; the machine runs at most "
            f"{spec.threads_per_cta} per CTA ({spec.warps} warps of {spec.lanes} lanes)"
        )
    if program.whole_warp and threads > spec.lanes:
        raise ResourceError(
            f"{program.whole_warp} works on the whole warp: CUDA's 32-lane warp holds "
            f"{min(threads, 32)} of this block's {threads} threads, this machine's {spec.lanes}, "
            f"so it would give another answer than CUDA. Launch blocks of at most {spec.lanes} "
            f"threads, write the kernel with warpSize, or {NARROW_WARPS_HINT}"
        )
    ctas = grid[0] * grid[1] * grid[2]
    if ctas > spec.max_grid_ctas:
        raise ResourceError(
            f"grid {grid} has {ctas} CTAs; the machine runs at most {spec.max_grid_ctas}"
        )


def _scalar_word(value: object, param_name: str, index: int) -> int:
    if isinstance(value, np.ndarray):
        raise ArgError(f"argument #{index + 1} ('{param_name}') is a scalar param; got an array")
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ArgError(
            f"argument #{index + 1} ('{param_name}') must be an integer, got {type(value).__name__}"
        )
    number = int(value)
    if not INT32_MIN <= number <= WORD_MASK:
        raise ArgError(f"argument #{index + 1} ('{param_name}') = {number} does not fit in 32 bits")
    return number & WORD_MASK


def _array_words(array: np.ndarray, param_name: str, index: int) -> np.ndarray:
    if array.dtype.kind not in "iu" or array.dtype.itemsize > WORD_BYTES:
        raise ArgError(
            f"argument #{index + 1} ('{param_name}') has dtype {array.dtype}: qgpu arrays hold "
            "integers of at most 32 bits (int8..int32, uint8..uint32)"
        )
    raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    raw += b"\0" * (-len(raw) % WORD_BYTES)
    return np.frombuffer(raw, dtype="<u4")


@dataclass(frozen=True)
class ArrayAt:
    """A pointer argument `offset` elements into `array`, as a host passes `d_in + RADIUS`:
    the whole array is copied in (the kernel may read before the pointer) and back."""

    array: np.ndarray
    offset: int


def at(array: np.ndarray, offset: int) -> ArrayAt:
    """`array` passed as a pointer `offset` elements past its start (0 <= offset <= len)."""
    if not isinstance(array, np.ndarray):
        raise ArgError(f"at(): expected a numpy array, got {type(array).__name__}")
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise ArgError(f"at(): the offset must be an int, got {offset!r}")
    if not 0 <= int(offset) <= array.size:
        raise ArgError(f"at(): offset {offset} is outside the array's {array.size} elements")
    return ArrayAt(array, int(offset))


def shared_mem_words(program: Program, shared_mem: object) -> int:
    """The words of a launch's dynamic shared memory (CUDA's third launch parameter, in
    bytes), checked before any work."""
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int | np.integer):
        raise ArgError(f"shared_mem must be a number of bytes, got {shared_mem!r}")
    if shared_mem < 0:
        raise ArgError(f"shared_mem {shared_mem}: must be 0 or more bytes")
    if program.dynamic_shared and shared_mem == 0:
        raise ArgError(
            f"kernel '{program.name}' declares extern __shared__ memory, but the launch gives "
            "it 0 bytes: pass its size (--shared-mem BYTES; API shared_mem=)"
        )
    words = -(-int(shared_mem) // WORD_BYTES)
    free = program.spec.memory_words - program.data_base_word
    if words > free:
        raise ResourceError(
            f"shared_mem {shared_mem} bytes ({words} words): only {free} of the machine's "
            f"{program.spec.memory_words} words are free after the params, static data and "
            "static shared memory"
        )
    return words


def build_memory(program: Program, args: Sequence[object], shared_mem: int = 0) -> MemoryImage:
    """The memory image of a launch: params, zeroed shared memory (static, then
    `shared_mem` bytes of dynamic), then the arrays."""
    spec = program.spec
    dynamic = shared_mem_words(program, shared_mem)
    if len(args) != len(program.params):
        names = ", ".join(p.name for p in program.params)
        raise ArgError(
            f"kernel '{program.name}' takes {len(program.params)} arguments ({names}); "
            f"got {len(args)}"
        )
    words = [0] * spec.memory_words
    base = program.static_base_word
    words[base : base + len(program.static_data)] = program.static_data
    first_array = program.data_base_word + dynamic
    next_word = first_array
    slots = []
    for index, (param, arg) in enumerate(zip(program.params, args, strict=True)):
        value, offset = (arg.array, arg.offset) if isinstance(arg, ArrayAt) else (arg, 0)
        if isinstance(value, np.ndarray):
            if param.kind != "pointer":
                raise ArgError(
                    f"argument #{index + 1} ('{param.name}', {param.ctype}) is a scalar param; "
                    "got an array"
                )
            if not value.flags.writeable:
                raise ArgError(
                    f"argument #{index + 1} ('{param.name}') is a read-only array: the launch "
                    "writes its results back into it (pass a writable copy: np.array(a))"
                )
            data = _array_words(value, param.name, index)
            end = next_word + len(data)
            if end > spec.memory_words:
                needed = end - first_array
                raise ArgError(
                    f"argument #{index + 1} ('{param.name}'): arrays need {needed}"
                    f" words in all, but only {spec.memory_words - first_array} of the"
                    f" machine's {spec.memory_words} words are free (params "
                    f"{program.param_words}, static {len(program.static_data)}, shared "
                    f"{program.shared_words + dynamic})"
                )
            words[next_word:end] = [int(w) for w in data]
            words[param.word] = next_word * WORD_BYTES + offset * value.itemsize
            slots.append(ArraySlot(index, next_word, len(data), value))
            next_word = end
        else:
            if param.kind == "pointer":
                raise ArgError(
                    f"argument #{index + 1} ('{param.name}') is a pointer (64-bit) param and must "
                    "be an array (64-bit scalars are not supported)"
                )
            words[param.word] = _scalar_word(value, param.name, index)
    return MemoryImage(words, tuple(slots))


def copy_back(image: MemoryImage, final_words: Sequence[int]) -> None:
    """Write each array's final contents back into the caller's numpy array."""
    for slot in image.arrays:
        data = np.array(final_words[slot.word : slot.word + slot.words], dtype="<u4")
        array = slot.array
        flat = np.frombuffer(data.tobytes()[: array.nbytes], dtype=array.dtype.newbyteorder("<"))
        array[...] = flat.reshape(array.shape).astype(array.dtype)
