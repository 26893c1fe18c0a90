#!/usr/bin/env bash
# Prints the path of a uv binary, fetching the pinned one from the package index once when none is on
# PATH; prints nothing (exit 0) when it cannot be had, so callers fall back to pip.
set -uo pipefail
UV_VERSION=0.13.9
if command -v uv >/dev/null 2>&1; then command -v uv; exit 0; fi
boot="${XDG_CACHE_HOME:-$HOME/.cache}/firefeed/uv-$UV_VERSION"
if [ ! -x "$boot/bin/uv" ]; then
  "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --target "$boot" "uv==$UV_VERSION" \
    >/dev/null 2>&1 || rm -rf "$boot"
fi
[ -x "$boot/bin/uv" ] && echo "$boot/bin/uv"
exit 0
