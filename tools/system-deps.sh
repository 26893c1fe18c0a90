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
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Only promtool is needed; the packaged server must not keep running.
if [[ " ${need[*]} " == *" prometheus "* ]]; then
  systemctl stop prometheus 2>/dev/null || pkill -x prometheus 2>/dev/null || true
fi
