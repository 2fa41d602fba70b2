#!/usr/bin/env bash
# Creates .venv/ at the repository root and installs bertkit with its dev extras (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.bertkit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt torch==2.13.0
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]"
  touch "$stamp"
fi
