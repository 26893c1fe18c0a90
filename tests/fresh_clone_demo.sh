#!/usr/bin/env bash
# Issue 7 acceptance: a fresh clone runs `make demo` on a machine without services.
#
# Clones this repository's HEAD (the committed state, as CI sees it) into a temporary
# folder, runs `make install` there with the network (dependencies; pip's cache is
# reused), then runs `make demo` inside a network namespace that has only loopback
# (`unshare -n`): nothing listens on 127.0.0.1:5432 or :6379 there, and the
# FIREFEED_* variables are unset except FIREFEED_EMBEDDED_DIR, which points into the
# temporary folder so the demo starts its own embedded Postgres. Checks: exit 0, the
# timeline printed, the three exports exist and parse (csv, google-xml with lxml,
# jsonl). Prints the time the install and `make demo` took together (target: under 40 s, issue 15).
#
# Usage: tests/fresh_clone_demo.sh  (make demo-check; needs root for `unshare -n`)
# KEEP=1 keeps the temporary folder.
set -euo pipefail

REPO="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/firefeed-fresh-clone.XXXXXX")"
CLONE="$WORK/firefeed"
PGDIR="$WORK/embedded-pg"
TARGET_S=40

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

fail() {
  echo "demo-check FAILED: $*" >&2
  [ -f "$WORK/demo.log" ] && { echo "--- make demo output ---" >&2; cat "$WORK/demo.log" >&2; }
  exit 1
}

cleanup() {
  # The demo stops its embedded server on exit; a server still running on our folder is a failure.
  if pgrep -f -- "$PGDIR" >/dev/null 2>&1; then
    echo "demo-check: a process still uses $PGDIR after the demo exited" >&2
    status=1
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
status=0
trap 'rc=$?; cleanup; exit $(( rc ? rc : status ))' EXIT

if ! unshare -n true 2>/dev/null; then
  fail "'unshare -n' does not work here (it needs root): cannot build the no-services environment"
fi

echo "== clone $(git -C "$REPO" rev-parse --short HEAD) into $CLONE"
git clone --quiet "$REPO" "$CLONE"

echo "== make install (with the network)"
install_start=$(date +%s.%N)
make -C "$CLONE" --no-print-directory install
install_s="$(elapsed "$install_start" "$(date +%s.%N)")"
echo "   install took ${install_s} s"

# A new user's shell: no FIREFEED_* settings at all, except where the embedded Postgres lives.
unset_args=()
while IFS= read -r name; do unset_args+=(-u "$name"); done < <(compgen -e | grep '^FIREFEED_' || true)

echo "== make demo in a network namespace with only loopback"
cd "$CLONE"
env "${unset_args[@]}" FIREFEED_EMBEDDED_DIR="$PGDIR" WORK="$WORK" unshare -n bash -c '
  set -uo pipefail
  ip link set lo up 2>/dev/null || true
  for port in 5432 6379; do
    if timeout 3 bash -c ": </dev/tcp/127.0.0.1/$port" 2>/dev/null; then
      echo "127.0.0.1:$port answers inside the namespace: not a no-services environment" >&2
      exit 97
    fi
  done
  echo "   127.0.0.1:5432 and 127.0.0.1:6379 refuse connections here"
  start=$(date +%s.%N)
  make --no-print-directory demo >"$WORK/demo.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "$rc" >"$WORK/demo.rc"
  echo "$start $end" >"$WORK/demo.time"
' || fail "the namespace could not be set up (exit $?)"

rc="$(cat "$WORK/demo.rc")"
read -r start end <"$WORK/demo.time"
seconds="$(elapsed "$start" "$end")"
cat "$WORK/demo.log"
[ "$rc" = 0 ] || fail "make demo exited $rc"

# The timeline: the report's table with every step succeeded.
grep -q "timeline" "$WORK/demo.log" || fail "no timeline in the output"
for step in FETCH PARSE MERGE RULES EXPORT; do
  grep -Eq "^  $step +SUCCEEDED" "$WORK/demo.log" || fail "the timeline has no succeeded $step step"
done

EXPORTS="$CLONE/firefeed-demo" "$CLONE/.venv/bin/python" - <<'EOF' || fail "the exports do not parse"
import csv
import json
import os
from pathlib import Path

from lxml import etree

out = Path(os.environ["EXPORTS"]) / "demo" / "shoes_it"
with (out / "catalogue.csv").open(newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
assert rows and "id" in rows[0] and "price" in rows[0], "catalogue.csv: no rows or no id/price column"
items = list(etree.parse(str(out / "google.xml")).getroot().iter("item"))
assert items, "google.xml: no <item>"
lines = [json.loads(line) for line in (out / "catalogue.jsonl").read_text(encoding="utf-8").splitlines() if line]
assert lines and all("id" in doc for doc in lines), "catalogue.jsonl: no documents or one without id"
print(f"   exports parse: catalogue.csv {len(rows)} rows, google.xml {len(items)} items, catalogue.jsonl {len(lines)} lines")
EOF

total="$(awk -v a="$install_s" -v b="$seconds" 'BEGIN { printf "%.1f", a + b }')"
echo "== install ${install_s} s + make demo ${seconds} s = ${total} s (target < ${TARGET_S} s)"
if awk -v s="$total" -v t="$TARGET_S" 'BEGIN { exit !(s >= t) }'; then
  fail "install and make demo took ${total} s, over the ${TARGET_S} s target"
fi
echo "demo-check passed"
