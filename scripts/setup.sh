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

# The web page's browser test (tests/serve/test_page_browser.py) drives Debian's chromium and
# chromium-driver: install them where missing, when this can (root with apt-get), quietly. This
# never fails the set-up; where the browser cannot be installed the test skips, naming the reason
# left in .venv/.bertkit-browser-missing.
browser_note=.venv/.bertkit-browser-missing
apt_log=.venv/.bertkit-browser-apt.log
have_browser() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
apt_install() {
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver >>"$apt_log" 2>&1
}
if have_browser; then
  rm -f "$browser_note"
elif [ "$(id -u)" != 0 ]; then
  echo "not running as root, so the set-up did not apt-get install chromium chromium-driver" >"$browser_note"
elif ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here to install chromium chromium-driver" >"$browser_note"
else
  : >"$apt_log"
  if { apt_install || { timeout 600 apt-get update -qq >>"$apt_log" 2>&1 && apt_install; }; } && have_browser; then
    rm -f "$browser_note" "$apt_log"
  else
    echo "apt-get install chromium chromium-driver failed; see $apt_log" >"$browser_note"
  fi
fi
