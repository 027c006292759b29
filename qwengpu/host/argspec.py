"""Launch arguments as text, the way `qgpu run --arg` and the chat's run_cuda tool take
them: `int32:[1,2,3]` (an array), `uint32:7` (a scalar), and `N` or `X,Y,Z` dimensions."""

from __future__ import annotations

import json
import re

import numpy as np

from qwengpu.errors import ArgError
from qwengpu.host.launch import Dim3, at, dim3

ARG_DTYPES = {
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
}
ARG_SPEC = re.compile(r"^(?P<dtype>[a-z0-9]+):(?P<value>.*)$", re.S)


POINTER_OFFSET = re.compile(r"^(?P<array>.*\])\s*\+\s*(?P<offset>\d+)$", re.S)


def parse_arg_spec(spec: str, position: int) -> object:
    """`int32:[1,2,3]` -> numpy array; `uint32:7` -> numpy scalar; `int32:[0,1,2,3]+1` ->
    the array passed as a pointer 1 element past its start (launch.ArrayAt)."""
    shifted = POINTER_OFFSET.match(spec.strip())
    if shifted:
        array = parse_arg_spec(shifted["array"], position)
        if not isinstance(array, np.ndarray):  # pragma: no cover - the pattern ends in ]
            raise ArgError(f"--arg #{position + 1} '{spec}': only an array takes a +offset")
        try:
            return at(array, int(shifted["offset"]))
        except ArgError as exc:
            raise ArgError(f"--arg #{position + 1} '{spec}': {exc}") from None
    where = f"--arg #{position + 1} '{spec}'"
    match = ARG_SPEC.match(spec.strip())
    if not match:
        raise ArgError(f"{where}: expected TYPE:VALUE, e.g. int32:[1,2,3] or uint32:7")
    name, text = match["dtype"], match["value"].strip()
    if name not in ARG_DTYPES:
        raise ArgError(f"{where}: unknown type '{name}' (use {', '.join(ARG_DTYPES)})")
    dtype = np.dtype(ARG_DTYPES[name])
    info = np.iinfo(dtype)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ArgError(
            f"{where}: '{text}' is neither an integer nor a [list] of integers"
        ) from None
    items = value if isinstance(value, list) else [value]
    if not items and isinstance(value, list):
        raise ArgError(f"{where}: an array argument needs at least one element")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ArgError(f"{where}: {item!r} is not an integer")
        if not info.min <= item <= info.max:
            raise ArgError(f"{where}: {item} is out of range for {name} ({info.min}..{info.max})")
    if isinstance(value, list):
        return np.array(value, dtype=dtype)
    if dtype.itemsize != 4:
        raise ArgError(f"{where}: scalar arguments are int32 or uint32")
    return dtype.type(value)


def parse_dim3(text: str, what: str) -> Dim3:
    """`N` or `X,Y,Z` as a launch dimension; `what` names it in the error (--grid, ...)."""
    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ArgError(f"{what} '{text}': expected N or X,Y,Z") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ArgError(f"{what} '{text}': expected 1 to 3 positive integers")
    return dim3(dims, what.lstrip("-"))
