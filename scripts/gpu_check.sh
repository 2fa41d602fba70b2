#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "Running the GPU check"): stages 0-4 in at most 470 s on one H200,
# results in $OUT (or --out DIR). On the GPU machine nothing is installed: bertkit runs from src/
# on the machine's own torch (python3). Here, --dry-run runs the same stages on the CPU with
# .venv's python. PYTHON=... picks another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PYTHON" -m benchmarks.gpu_check "$@"
