#!/usr/bin/env bash
# Builds the virtualenv from nothing, from requirements-dev.lock: with uv (seconds) when it can be had,
# else with pip (a minute or two). The project itself goes in editable, without resolving anything.
# Usage: tools/install.sh [VENV]   (make install)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
py="${PYTHON:-python3}"
lock=requirements-dev.lock
rm -rf "$venv"
uv="$(bash tools/uv.sh)"
if [ -n "$uv" ]; then
  echo "installing $lock with $uv"
  "$uv" venv --quiet --python "$py" "$venv"
  "$uv" pip sync --quiet --python "$venv/bin/python" --require-hashes "$lock"
  "$uv" pip install --quiet --python "$venv/bin/python" --no-deps -e .
else
  echo "uv not available: installing $lock with pip"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$lock"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -e .
fi
# Bytecode of the runtime packages (tools/compile_runtime.py says why); the project's own modules,
# which change between runs, get theirs from `make bytecode`.
"$venv/bin/python" tools/compile_runtime.py
