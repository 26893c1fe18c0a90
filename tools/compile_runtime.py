"""Write the bytecode of the packages requirements.lock installs (the ones FireFeed's processes import).

Why: where PYTHONDONTWRITEBYTECODE is set, nothing caches bytecode at import time, and each
worker, CLI and fleet process compiled its ~600 modules again (2.9 s of a worker's 6.3 s start).
Only the runtime packages: the development ones (pytest, hypothesis, mypy...) load in one test
process, and compiling them too cost the install 13 s more. Usage: python tools/compile_runtime.py
"""

from __future__ import annotations

import compileall
import importlib.metadata as md
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "requirements.lock"


def _sources() -> list[str]:
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", LOCK.read_text(encoding="utf-8"), re.MULTILINE)
    out = []
    for name in names:
        try:
            files = md.distribution(name).files or []
        except md.PackageNotFoundError:  # a marker left it out on this platform
            continue
        out += [str(f.locate()) for f in files if f.suffix == ".py"]
    return out


def _compile(path: str) -> bool:
    return bool(compileall.compile_file(path, quiet=2))


def main() -> int:
    sources = _sources()
    with ProcessPoolExecutor() as pool:
        list(pool.map(_compile, sources, chunksize=64))
    print(f"bytecode of {len(sources)} runtime modules written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
