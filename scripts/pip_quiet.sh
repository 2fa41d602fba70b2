# pip_install PYTHON ARGS...: `PYTHON -m pip install --quiet ARGS...`, silent when it succeeds.
# When it fails, pip's own output goes to stderr (less its "WARNING: Location ... is ignored"
# noise about this machine's extra indexes) and the status is non-zero; a failure that pip's
# output shows to be a network one (its own retries spent) is tried once more first. Sourced by
# scripts/wheel_check.sh (tests/test_wheel_check.py runs it on its own).
PIP_NETWORK_ERRORS='connection broken by|NewConnectionError|ConnectTimeoutError|ReadTimeoutError|Max retries exceeded|Could not fetch URL|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection (refused|reset|aborted)|IncompleteRead|ProtocolError'

pip_install() {
  local py=$1 log attempt
  shift
  log=$(mktemp "${TMPDIR:-/tmp}/bertkit-pip.XXXXXX")
  for attempt in 1 2; do
    if "$py" -m pip install --quiet "$@" >"$log" 2>&1; then
      rm -f "$log"
      return 0
    fi
    if [ "$attempt" = 1 ] && grep -Eq "$PIP_NETWORK_ERRORS" "$log"; then
      echo "pip install $*: a network error; retrying once" >&2
      continue
    fi
    break
  done
  echo "pip install $* failed:" >&2
  grep -v "^WARNING: Location '.*' is ignored" "$log" >&2 || true
  rm -f "$log"
  return 1
}
