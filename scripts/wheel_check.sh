#!/usr/bin/env bash
# The wheel as a user installs it: build it (not editable), install it into a clean virtual
# environment that already holds torch (so pip must keep the user's torch: the package declares
# a range, not a pin), then, from outside the checkout: `bertkit env`, `bertkit quickstart
# --minutes 1`, every public name imported, the resources and the web page found inside the
# installed package, and the served page answered over HTTP.
#
#   bash scripts/wheel_check.sh            # uses .venv/ for the build (scripts/setup.sh makes it)
#   TORCH_SPEC=torch==2.13.0 bash scripts/wheel_check.sh   # the torch the clean venv starts with
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bertkit-wheel.XXXXXX")
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
torch_spec=${TORCH_SPEC:-$(grep -m1 '^torch==' constraints.txt)}
# pip quiet when it succeeds; when it fails, its output and this script's non-zero exit
source scripts/pip_quiet.sh

echo "== wheel: build"
.venv/bin/python -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/dist" . >/dev/null
wheel=$(ls "$work"/dist/bertkit-*.whl)
echo "   $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

echo "== wheel: clean venv with the user's torch ($torch_spec), then the wheel with [serve]"
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
pip_install "$py" --upgrade pip
pip_install "$py" "$torch_spec"
before=$("$py" -c 'import torch; print(torch.__version__)')
pip_install "$py" "$wheel[serve]"
after=$("$py" -c 'import torch; print(torch.__version__)')
echo "   torch before $before, after $after"
if [ "$before" != "$after" ]; then
  echo "wheel check: installing the wheel replaced the user's torch $before with $after" >&2
  exit 1
fi

cd "$work"  # nothing from the checkout on sys.path from here on
echo "== wheel: bertkit env"
"$work/venv/bin/bertkit" env
echo "== wheel: public names, resources and page inside the installed package"
"$py" - "$root" <<'EOF'
import importlib
import importlib.resources as resources
import pkgutil
import sys

import bertkit

root = sys.argv[1]
assert not bertkit.__file__.startswith(root), f"imported from the checkout: {bertkit.__file__}"
names = 0
modules = [m.name for m in pkgutil.walk_packages(bertkit.__path__, "bertkit.")
           if not m.name.endswith("__main__")]  # running `python -m bertkit` is not importing it
for name in modules:
    m = importlib.import_module(name)
    for public in getattr(m, "__all__", ()):
        getattr(m, public)  # AttributeError names what is missing
        names += 1
data = resources.files("bertkit")
for path in ("resources/ATTRIBUTION.txt", "resources/wikipedia-sample.txt.xz",
             "serve/static/index.html"):
    assert data.joinpath(path).is_file(), f"{path} is not inside the installed package"
print(f"   {len(modules)} modules and their {names} public names import; resources and page "
      f"inside {bertkit.__file__.rsplit('/', 1)[0]}")
EOF
echo "== wheel: bertkit quickstart --minutes 1"
"$work/venv/bin/bertkit" quickstart --minutes 1 --output "$work/qs" 2>&1 | tail -n 4
test -f "$work/qs/summary.json"

echo "== wheel: bertkit serve the quickstart's model, GET / and POST /embed"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$work/venv/bin/bertkit" serve --model "$work/qs/run/model" --host 127.0.0.1 --port "$port" \
  >"$work/serve.log" 2>&1 &
server=$!
"$py" - "$port" <<'EOF'
import json
import sys
import time
import urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(240):  # /health answers 503 until the model has run a forward pass, then 200
    try:
        if urllib.request.urlopen(base + "/health", timeout=5).status == 200:
            break
    except OSError:
        pass
    time.sleep(0.5)
else:
    sys.exit("wheel check: the server was not healthy within 120 s")
page = urllib.request.urlopen(base + "/", timeout=5).read().decode()
assert "<html" in page.lower(), page[:200]
req = urllib.request.Request(base + "/embed", data=json.dumps({"inputs": "a test"}).encode(),
                             headers={"Content-Type": "application/json"})
vec = json.loads(urllib.request.urlopen(req, timeout=60).read())
print(f"   GET / {len(page)} bytes of page; POST /embed one vector of {len(vec[0])}")
EOF
echo "== wheel: passed"
