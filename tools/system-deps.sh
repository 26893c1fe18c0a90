#!/usr/bin/env bash
# The programs some tests drive that pip cannot bring: headless Chromium (the web page test) and
# promtool (the metrics format test). `make test` and .ci/run both call this; it does nothing when
# both are there, and installs the Debian packages when it can (root with apt-get).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "tools/system-deps.sh: missing ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing ${need[*]}"
# Only promtool is needed: the packaged Prometheus server must not start. policy-rc.d (Debian's switch for
# package scripts) forbids starting any service during this install, so nothing is started that would then
# have to be stopped (by name, which could end a Prometheus this script did not start).
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
fi
cleanup() { [ "$own_policy" -eq 1 ] && rm -f "$policy"; return 0; }
trap cleanup EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
