#!/usr/bin/env bash
# Issue #48 acceptance: a fresh clone's `make test` passes on a machine without services, and leaves it as it found it.
#
# Clones this repository's HEAD into a temporary folder with nothing beside it (no ../shared),
# runs `make install` and `make system-deps` there with the network, then `make test` inside a
# network namespace that has only loopback (`unshare -n`, root): nothing answers on
# 127.0.0.1:5432, :6379 or :5672 there, and the FIREFEED_* variables are unset except
# FIREFEED_EMBEDDED_DIR, which points into the temporary folder. The suite starts what it needs
# itself (the embedded Postgres, a redis-server of its own when the program exists). Checks: exit 0,
# and afterwards no process left that runs from the temporary folder. Prints the time `make test` took.
#
# Usage: tests/fresh_clone_test.sh  (make test-check; needs root for `unshare -n`)
# KEEP=1 keeps the temporary folder.
set -euo pipefail

REPO="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/firefeed-fresh-test.XXXXXX")"
CLONE="$WORK/firefeed"

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
  # The session ends what it started (embedded Postgres, its Redis): anything still running from here is a leak.
  if pgrep -f -- "$WORK" >/dev/null 2>&1; then
    echo "test-check: processes still run from $WORK after make test:" >&2
    pgrep -af -- "$WORK" >&2 || true
    status=1
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
status=0
trap 'rc=$?; cleanup; exit $(( rc ? rc : status ))' EXIT

if ! unshare -n true 2>/dev/null; then
  echo "test-check FAILED: 'unshare -n' does not work here (it needs root)" >&2
  exit 1
fi

echo "== clone $(git -C "$REPO" rev-parse --short HEAD) into $CLONE (nothing beside it)"
git clone --quiet "$REPO" "$CLONE"
echo "== make install system-deps (with the network)"
make -C "$CLONE" --no-print-directory install system-deps

unset_args=()
while IFS= read -r name; do unset_args+=(-u "$name"); done < <(compgen -e | grep '^FIREFEED_' || true)

echo "== make test in a network namespace with only loopback"
cd "$CLONE"
# Temporary folders (the session's Redis among them) under $WORK too, so the leak check below sees them all.
mkdir -p "$WORK/tmp"
env "${unset_args[@]}" FIREFEED_EMBEDDED_DIR="$WORK/embedded-pg" TMPDIR="$WORK/tmp" WORK="$WORK" unshare -n bash -c '
  set -uo pipefail
  ip link set lo up 2>/dev/null || true
  for port in 5432 6379 5672; do
    if timeout 3 bash -c ": </dev/tcp/127.0.0.1/$port" 2>/dev/null; then
      echo "127.0.0.1:$port answers inside the namespace: not a no-services environment" >&2
      exit 97
    fi
  done
  echo "   127.0.0.1:5432, :6379 and :5672 refuse connections here"
  start=$(date +%s.%N)
  make --no-print-directory test >"$WORK/test.log" 2>&1
  echo $? >"$WORK/test.rc"
  echo "$start $(date +%s.%N)" >"$WORK/test.time"
' || { echo "test-check FAILED: the namespace could not be set up" >&2; exit 1; }

rc="$(cat "$WORK/test.rc")"
read -r start end <"$WORK/test.time"
tail -n 40 "$WORK/test.log"
echo "== make test exited $rc in $(elapsed "$start" "$end") s (target: under 600 s on a quiet 2-core machine)"
[ "$rc" = 0 ] || { echo "test-check FAILED: make test exited $rc" >&2; exit 1; }
echo "test-check passed"
