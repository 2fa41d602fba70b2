#!/usr/bin/env bash
# The README's main-job command: set up .venv/, then run `bertkit quickstart` on the built-in corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/bertkit quickstart "$@"
