#!/usr/bin/env bash
# Hardware conformance on a machine with an NVIDIA GPU, in one go: run every case of
# tests/kernels/cases.py on the GPU, record tests/kernels/hardware_results.json and
# check the interpreter against it. Extra arguments go to `conform` (--case NAME, ...).
# Under $OUT (the device tool's folder) it leaves the recording, the report and the log.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import cuda.bindings.driver' 2>/dev/null; then
  if compgen -G '.whl/*.whl' >/dev/null; then  # wheels carried to a machine with no network
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site
  else
    "$PY" -m pip install -q 'cuda-bindings>=13.0' || exit 2
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
dest=${OUT:-/tmp}
"$PY" -m qwengpu.host.conform --report "$dest/conform_report.json" "$@" 2>&1 | tee "$dest/conform.log"
rc=${PIPESTATUS[0]}
[ -f tests/kernels/hardware_results.json ] && cp tests/kernels/hardware_results.json "$dest/"
exit "$rc"
