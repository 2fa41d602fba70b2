#!/usr/bin/env bash
# The README's test command: set up .venv/, lint, then run the default (fast) test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q "$@"
