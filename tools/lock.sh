#!/usr/bin/env bash
# Re-resolve the two lock files from pyproject.toml (run after changing a dependency; needs the registry).
#   requirements.lock      the runtime dependencies (deploy/Dockerfile)
#   requirements-dev.lock  runtime + the dev extra (make install, CI)
# Both are universal (any OS, Python >= 3.11) and carry sha256 hashes, so pip --require-hashes and
# uv pip sync install exactly what was tested.
set -euo pipefail
cd "$(dirname "$0")/.."
uv="$(bash tools/uv.sh)"
[ -n "$uv" ] || { echo "tools/lock.sh needs uv (pip install uv)" >&2; exit 2; }
common=(--universal --python-version 3.11 --generate-hashes --no-header --quiet)
"$uv" pip compile pyproject.toml "${common[@]}" -o requirements.lock
"$uv" pip compile pyproject.toml --extra dev "${common[@]}" -o requirements-dev.lock
echo "requirements.lock and requirements-dev.lock written"
