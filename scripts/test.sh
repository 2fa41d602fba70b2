#!/usr/bin/env bash
# The README's test command: set up .venv/, lint, then run the default (fast) test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# the set-up above installs every reference package (the dev extras) and the browser where it can:
# a test that would skip for want of one fails instead (tests/conftest.py); the browser test stays
# a skip only where the set-up left its reason in .venv/.bertkit-browser-missing
export BERTKIT_REQUIRE_REFERENCES="${BERTKIT_REQUIRE_REFERENCES:-1}"
.venv/bin/python -m pytest -q "$@"
