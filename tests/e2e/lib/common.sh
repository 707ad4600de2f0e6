# Shared helpers for the end-to-end tests (sourced, not run by ctest: the
# glob only picks files named *.sh that are tests, so this one is guarded).
[ -n "${LUAGENT_E2E_LIB:-}" ] && return 0
LUAGENT_E2E_LIB=1
LUAGENT=${1:?usage: $0 /path/to/luagent}
LUAGENT=$(cd "$(dirname "$LUAGENT")" && pwd)/$(basename "$LUAGENT")
WS=$(mktemp -d /tmp/luagent-e2e.XXXXXX)
FAILS=0
PIDS=""
cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  rm -rf "$WS"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
# expect_rc WANT CMD... : runs CMD in $WS, captures out/err
expect_rc() {
  want=$1; shift
  (cd "$WS" && "$@") >"$WS/.out" 2>"$WS/.err"
  got=$?
  if [ "$got" != "$want" ]; then
    fail "$* exited $got, wanted $want; stderr: $(head -c 600 "$WS/.err")"
    return 1
  fi
  return 0
}
out_has() { grep -qF -- "$1" "$WS/.out" || { fail "stdout lacks '$1': $(head -c 600 "$WS/.out")"; return 1; }; }
err_has() { grep -qF -- "$1" "$WS/.err" || { fail "stderr lacks '$1': $(head -c 600 "$WS/.err")"; return 1; }; }
# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
finish() {
  if [ "$FAILS" -gt 0 ]; then echo "$FAILS check(s) failed" >&2; exit 1; fi
  echo "all checks passed"
  exit 0
}
